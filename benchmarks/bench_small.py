"""Small collectives against the latency bound: the targets of issue 16.4, measured.

Run: ``.venv/bin/python benchmarks/bench_small.py [--quick] [--topology NAME ...] [--synthesize]``.

For every case (a shipped topology, a collective, a size from 1 KB up) it runs
every applicable baseline (what ``taccl baseline`` shows), simulates it, and
compares the fastest with ``taccl bound``: ``ratio = best time / bound``
(1.0 = at the bound; the targets are 1.15 for Allreduce 1-32 KB on one
machine and 1.25 for Allgather and Allreduce 1-64 KB across machines). With
``--synthesize`` it also runs ``taccl synthesize`` (10 s limit) and keeps the
faster of the two, as the synthesizer itself does. The ``oneshot`` baseline's
time and Allreduce form are listed on their own so its effect is visible.

Raw results go to ``benchmarks/results/small.json`` and a table to
``benchmarks/results/small.md``; nothing else is touched. Timings of the
simulated collectives do not depend on the machine; the wall times do.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
KB = 1024

SINGLE = ("dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mi250", "gb200-nvl72", "ring8")
"""Single-machine shipped topologies: Allreduce 1-32 KB within 1.15x of the bound."""
MULTI = ("ndv2x2", "ndv2x4", "dgx2x2", "dgx2x4", "dgx-a100x2", "dgx-a100x4", "dgx-a100x8", "dgx-h100x2",
         "dgx-h100x4", "dgx-h100x8", "mi250x2", "mi250x4", "mi250x8")
"""Multi-machine shipped topologies: Allgather and Allreduce 1-64 KB within 1.25x of the bound."""
QUICK = ("dgx1", "dgx-a100", "ring8", "ndv2x2", "ndv2x4", "dgx-a100x2", "dgx-a100x8")


def cases(topologies: list[str]) -> list[tuple[str, str, list[int], float]]:
    """(topology, collective, sizes, target ratio) for the requested topologies."""
    out = []
    for name in topologies:
        if name in SINGLE:
            out.append((name, "allreduce", [k * KB for k in (1, 2, 4, 8, 16, 32)], 1.15))
        else:
            for kind in ("allgather", "allreduce"):
                out.append((name, kind, [k * KB for k in (1, 2, 4, 8, 16, 32, 64)], 1.25))
    return out


def two_latency_floor(topology: Any, kind: str, size: int) -> float | None:
    """A lower bound for Allreduce that ``taccl bound`` does not apply (None for other collectives).

    Every transfer first waits its route latency, at least ``alpha`` (the cheapest GPU -> GPU route). A
    message that carries more than its sender's own input starts after something reached the sender
    (>= alpha) and so arrives after 2 alpha. An Allreduce that ends before 2 alpha has therefore only
    moved raw inputs, and every GPU must have received the N-1 other inputs whole: N-1 buffers through
    its incoming links, none of them moving before alpha. So T >= min(2 alpha, alpha + (N-1) x size /
    B_in), with B_in the smallest total bandwidth into a GPU.
    """
    from taccl_py.units import gbps_to_bytes_per_us

    if kind != "allreduce":
        return None
    n = topology.num_gpus
    routes = [topology.gpu_route(u, v) for u in range(n) for v in range(n) if u != v]
    alpha = min(topology.route_latency(r) for r in routes if r is not None)
    b_in = gbps_to_bytes_per_us(min(sum(link.bandwidth for link in topology.links if link.dst == g)
                                     for g in range(n)))
    return min(2 * alpha, alpha + (n - 1) * size / b_in)


def _pair_floor(topology: Any, kind: str, size: int) -> float | None:
    """``taccl_py.bounds.pair_bound``: the farthest pair's latency plus the data that must enter the destination,
    each link into it counted from when the source's data can first reach it (proof in docs/simulator.md,
    "Latency and data together"); a true bound that ``taccl bound`` does not fold in."""
    from taccl_py.bounds import pair_bound

    found = pair_bound(topology, kind, size)
    return None if found is None else found.bound_us


def _crossing_floor(topology: Any, kind: str, size: int) -> float | None:
    """``taccl_py.bounds.crossing_bound``: latency and data across a cut of direct GPU-to-GPU links (proof in
    docs/simulator.md, "Latency and data across a cut"); None where no such cut exists."""
    from taccl_py.bounds import crossing_bound

    found = crossing_bound(topology, kind, size)
    return None if found is None else found.bound_us


def apply_floor(row: dict[str, Any], topology: Any) -> None:
    """The row's floor (the largest of the three) and whether it puts the target out of reach."""
    kind, size = row["collective"], row["size_bytes"]
    floors = [f for f in (two_latency_floor(topology, kind, size), _pair_floor(topology, kind, size),
                          _crossing_floor(topology, kind, size)) if f is not None]
    row["floor_us"] = max(floors) if floors else None
    # the target cannot be met when even the floor is above target x bound
    row["out_of_reach"] = (row["floor_us"] is not None
                           and row["floor_us"] > row["target"] * row["bound_us"] * (1 + 1e-9))


def measure(name: str, kind: str, sizes: list[int], target: float, synthesize: bool) -> list[dict[str, Any]]:
    from taccl_py.baselines import applicable_baselines, baseline
    from taccl_py.bounds import lower_bound
    from taccl_py.library import resolve_topology
    from taccl_py.simulator import simulate

    topology = resolve_topology(name)
    names = applicable_baselines(topology, kind)
    rows = []
    for size in sizes:
        bound = lower_bound(topology, kind, size)
        times: dict[str, float | None] = {}
        form = None
        started = time.perf_counter()
        for algorithm in names:
            schedule = baseline(topology, kind, algorithm, size_bytes=size)
            sim = simulate(topology, schedule, size)
            if not sim.correct:
                raise SystemExit(f"{algorithm} {kind} on {name} at {size} B is incorrect: {sim.error}")
            times[algorithm] = sim.time_us
            if algorithm == "oneshot":
                form = schedule.notes.get("form")
        baselines_s = time.perf_counter() - started
        timed = {a: t for a, t in times.items() if t is not None}
        best = min(timed, key=lambda a: (timed[a], a))
        row: dict[str, Any] = {"topology": name, "collective": kind, "size_bytes": size,
                               "bound_us": bound.bound_us, "latency_us": bound.latency_us, "times_us": times,
                               "best": best, "best_us": timed[best], "oneshot_form": form,
                               "baselines_wall_s": round(baselines_s, 3), "target": target}
        if synthesize:
            from taccl_py.collectives import parse_collective
            from taccl_py.synthesis import SynthesisOptions
            from taccl_py.synthesis import synthesize as run_synthesis

            t0 = time.perf_counter()
            result = run_synthesis(topology, parse_collective(kind), size, SynthesisOptions(time_limit_s=10.0))
            row["synthesize_us"] = result.sim.time_us
            row["synthesize_chosen"] = result.chosen
            row["synthesize_wall_s"] = round(time.perf_counter() - t0, 3)
            if result.sim.time_us is not None and result.sim.time_us < row["best_us"]:
                row["best"], row["best_us"] = "synthesized", result.sim.time_us
        row["ratio"] = row["best_us"] / bound.bound_us
        row["met"] = row["ratio"] <= target + 1e-9
        apply_floor(row, topology)
        floor = row["floor_us"]
        rows.append(row)
        print(f"{name:12} {kind:10} {size // KB:>3} KB  bound {bound.bound_us:7.3f}  best {row['best_us']:7.3f} "
              f"({best}{'/' + form if best == 'oneshot' and form else ''})  ratio {row['ratio']:.3f}"
              f"{'' if row['met'] else '  MISSED'}{' (out of reach: floor ' + format(floor, '.3f') + ')' if row['out_of_reach'] else ''}",
              flush=True)
    return rows


def markdown(rows: list[dict[str, Any]], command: str, measured: str | None = None) -> str:
    """The table; ``measured``: when the times were measured, if not today (the floors were recomputed)."""
    when = (f"measured {measured}; floors recomputed {time.strftime('%Y-%m-%d')} with `--refloor`" if measured
            else time.strftime('%Y-%m-%d'))
    lines = ["# Small collectives against the latency bound", "",
             f"Command: `{command}` ({platform.node() or 'this machine'}, {when}).", "",
             "Times are simulated (us); `ratio` = best / bound; targets: Allreduce 1-32 KB on one machine "
             "<= 1.15, Allgather and Allreduce 1-64 KB across machines <= 1.25. `floor`: the largest of three "
             "lower bounds `taccl bound` does not fold in: (Allreduce) min(2 alpha, alpha + (N-1) size / B_in) "
             "(`two_latency_floor` in the script); the farthest pair's latency plus the data that must "
             "enter the destination, each link into it counted from when the source's data can reach it "
             "(`taccl_py.bounds.pair_bound`, proof in docs/simulator.md, \"Latency and data together\"); and "
             "the same across a cut of direct GPU-to-GPU links, such as the one link each way between the two "
             "machines of `ndv2x2` (`taccl_py.bounds.crossing_bound`, \"Latency and data across a cut\"); "
             "`out of reach` when the floor is above target x bound.", "",
             "| topology | collective | size | bound (us) | floor (us) | best (us) | best | oneshot (us) | ratio | "
             "target |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        oneshot = r["times_us"].get("oneshot")
        label = r["best"] + (f" ({r['oneshot_form']})" if r["best"] == "oneshot" and r["oneshot_form"] else "")
        floor = "-" if r["floor_us"] is None else f"{r['floor_us']:.3f}"
        verdict = "met" if r["met"] else ("out of reach" if r["out_of_reach"] else "missed")
        lines.append(f"| {r['topology']} | {r['collective']} | {r['size_bytes'] // KB} KB | {r['bound_us']:.3f} | "
                     f"{floor} | {r['best_us']:.3f} | {label} | {'-' if oneshot is None else f'{oneshot:.3f}'} | "
                     f"{r['ratio']:.3f} | {verdict} ({r['target']}) |")
    met = sum(r["met"] for r in rows)
    out = sum(r["out_of_reach"] for r in rows)
    lines += ["", f"{met} of {len(rows)} cases within their target; {out} of the others provably out of reach "
              "(floor above target x bound)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--topology", action="append", help="only these topologies (repeatable)")
    parser.add_argument("--synthesize", action="store_true", help="also run taccl synthesize (10 s each)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--refloor", action="store_true",
                        help="recompute only the floors of the stored rows (results/small.json; the measured times "
                             "are kept, the command they were measured with too)")
    args = parser.parse_args(argv)
    if args.refloor:
        return refloor(not args.no_write)
    names = args.topology or list(QUICK if args.quick else SINGLE + MULTI)
    command = "python benchmarks/bench_small.py" + (" " + " ".join(sys.argv[1:]) if len(sys.argv) > 1 else "")
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for name, kind, sizes, target in cases(names):
        rows += measure(name, kind, sizes, target, args.synthesize)
    wall = time.perf_counter() - started
    print(f"{sum(r['met'] for r in rows)} of {len(rows)} cases within their target, "
          f"{sum(r['out_of_reach'] for r in rows)} provably out of reach ({wall:.0f} s)")
    if not args.no_write:
        results = HERE / "results"
        results.mkdir(exist_ok=True)
        (results / "small.json").write_text(json.dumps({"command": command, "wall_s": round(wall, 1),
                                                        "date": time.strftime("%Y-%m-%d"), "rows": rows},
                                                       indent=1) + "\n", encoding="utf-8")
        (results / "small.md").write_text(markdown(rows, command), encoding="utf-8")
    return 0


def refloor(write: bool) -> int:
    """The floors of the stored rows, recomputed (they depend on the topology, the collective and the size
    only), and the table written again."""
    from taccl_py.library import resolve_topology

    path = HERE / "results" / "small.json"
    stored = json.loads(path.read_text(encoding="utf-8"))
    rows = stored["rows"]
    for row in rows:
        apply_floor(row, resolve_topology(row["topology"]))
    print(f"{sum(r['met'] for r in rows)} of {len(rows)} cases within their target, "
          f"{sum(r['out_of_reach'] for r in rows)} provably out of reach (floors recomputed)")
    if write:
        path.write_text(json.dumps({**stored, "rows": rows}, indent=1) + "\n", encoding="utf-8")
        measured = stored.get("date")
        (HERE / "results" / "small.md").write_text(markdown(rows, stored["command"], measured), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
