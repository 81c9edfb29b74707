"""Switch multicast and in-network reduction (issue 11): the offload baselines against the unicast ones.

Run: ``.venv/bin/python benchmarks/run.py --only offload`` (or as part of ``make bench``).

Cases, all at 1 GB (2^30 bytes), simulated times (machine-independent):

* multicast Allgather on ``fat-tree188`` (the multicast paper's testbed shape) against the best
  unicast baseline: endpoint bytes (injected, and injected + ejected, per GPU, over M) and the time
  against the (multicast) bound; the paper's claim is half the endpoint traffic;
* NVLS Allreduce on ``dgx-h100-nvls`` and ``gb200-nvl72-nvls`` against the ring: time, efficiency against
  the NVLS-aware bound, busbw gain;
* SHARP Allreduce on ``dgx-h100x4-nvls-sharp`` against the best unicast baseline;
* FSDP (the multicast paper's motivation): an Allgather and a ReduceScatter of 1 GB each at once
  (``taccl simulate -c allgather+reducescatter -a AG+RS``), with and without multicast and in-switch
  reduction: each one's time next to the other, the makespan, endpoint bytes per GPU, and the makespan
  against the joint lower bound of the two (``taccl_py.bounds.joint_lower_bound``); ``taccl synthesize
  -c allgather+reducescatter`` (the joint synthesis) on two of them;
* the synthesizer's own trees through the switches (``taccl_py.synthesis.multicast``, the stage
  ``taccl synthesize`` runs) against the ``multicast`` / ``nvls`` / ``sharp`` baselines (at the
  baseline's pipeline depth and at the depth ``synthesize`` searches), the best unicast baseline and
  the capability-aware bound, from 4 KB to 1 GB.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

NAME, TITLE, ORDER = "offload", "Switch multicast and in-network reduction", 60
SIZE = 2**30

CASES = (("fat-tree188", "allgather", "multicast"), ("dgx-h100-nvls", "allreduce", "nvls"),
         ("gb200-nvl72-nvls", "allreduce", "nvls"), ("dgx-h100x4-nvls-sharp", "allreduce", "sharp"))

TARGET_EFFICIENCY = 0.95
"""Issue 11's targets: within 5% of the capability-aware bound at 1 GB."""


def _endpoint_bytes(topology: Any, result: Any) -> tuple[float, float]:
    """Bytes on GPU -> anything links (injected) and anything -> GPU links (ejected), summed over GPUs."""
    out = sum(b for b, link in zip(result.link_bytes, topology.links, strict=True) if topology.is_gpu(link.src))
    into = sum(b for b, link in zip(result.link_bytes, topology.links, strict=True) if topology.is_gpu(link.dst))
    return out, into


FSDP_CASES = (("fat-tree188", "ring", "ring"), ("fat-tree188", "multicast", "ring"),
              ("fat-tree188-sharp", "multicast", "nvls"), ("dgx-h100-nvls", "ring", "ring"),
              ("dgx-h100-nvls", "multicast", "ring"), ("dgx-h100-nvls", "multicast", "nvls"))
"""(topology, Allgather algorithm, ReduceScatter algorithm) run at once."""


def _fsdp(quick: bool) -> list[dict[str, Any]]:
    from taccl_py.baselines import baseline
    from taccl_py.bounds import joint_lower_bound
    from taccl_py.concurrent import simulate_concurrent
    from taccl_py.library import resolve_topology

    rows = []
    for name, ag, rs in FSDP_CASES:
        if quick and name.startswith("fat-tree"):
            continue
        topo = resolve_topology(name)
        started = time.perf_counter()
        parts = [(baseline(topo, "allgather", ag, size_bytes=SIZE), SIZE),
                 (baseline(topo, "reducescatter", rs, size_bytes=SIZE), SIZE)]
        result = simulate_concurrent(topo, parts)
        out, into = _endpoint_bytes(topo, result)
        joint = joint_lower_bound(topo, [("allgather", SIZE), ("reducescatter", SIZE)])
        rows.append({"topology": name, "gpus": topo.num_gpus, "allgather": ag, "reducescatter": rs,
                     "joint_bound_us": joint.bound_us, "joint_bound": joint.explanation,
                     "max_single_bound_us": max(joint.parts_us),
                     "correct": result.correct, "makespan_us": result.makespan_us,
                     "times_us": [p.time_us for p in result.parts], "alone_us": [p.alone_us for p in result.parts],
                     "injected_bytes": out, "ejected_bytes": into, "wall_s": time.perf_counter() - started})
    return rows


SWITCH_CASES = (("fat-tree36", "allgather", "multicast"), ("fat-tree188", "allgather", "multicast"),
                ("fat-tree36-sharp", "allreduce", "nvls"), ("dgx-h100-nvls", "allgather", "multicast"),
                ("dgx-h100-nvls", "reducescatter", "nvls"), ("dgx-h100-nvls", "allreduce", "nvls"),
                ("dgx-h100x2-sharp", "allreduce", "sharp"), ("dgx-h100x4-nvls-sharp", "allreduce", "sharp"))
"""(topology, collective, the offload baseline the synthesizer's trees are compared with)."""

SWITCH_SIZES = (4096, 65536, 1 << 20, 16 << 20, 256 << 20, 1 << 30)
QUICK_SWITCH_SIZES = (4096, 1 << 20, 1 << 30)
QUICK_SWITCH_SKIP = ("fat-tree188", "dgx-h100x4-nvls-sharp")
_UNICAST_GPUS = 64
"""The unicast baselines are simulated up to this many GPUs (at 188 the direct one alone takes minutes)."""


def _switch_trees(quick: bool) -> list[dict[str, Any]]:
    """Per case and size: the switch stage's best schedule, the offload baseline (its depth and the searched one),
    the best unicast baseline, the bound."""
    from harness import note

    from taccl_py.baselines import applicable_baselines, baseline
    from taccl_py.baselines.offload import OFFLOAD_ALGORITHMS
    from taccl_py.bounds import lower_bound
    from taccl_py.collectives import parse_collective
    from taccl_py.library import resolve_topology
    from taccl_py.simulator import simulate
    from taccl_py.synthesis import SynthesisOptions
    from taccl_py.synthesis.multicast import switch_candidates
    from taccl_py.synthesis.offload import tuned_offload
    from taccl_py.synthesis.options import Run
    from taccl_py.synthesis.routes import prepare

    rows = []
    for name, kind_name, offload in SWITCH_CASES:
        if quick and name in QUICK_SWITCH_SKIP:
            continue
        topo, kind = resolve_topology(name), parse_collective(kind_name)
        unicast = [a for a in applicable_baselines(topo, kind) if a not in OFFLOAD_ALGORITHMS] \
            if topo.num_gpus <= _UNICAST_GPUS else []
        for size in QUICK_SWITCH_SIZES if quick else SWITCH_SIZES:
            options = SynthesisOptions(time_limit_s=60.0)
            started = time.perf_counter()
            run_ = Run.start(options, None)
            stage = switch_candidates(run_, prepare(run_, topo, kind, size), size)
            stage_s = time.perf_counter() - started
            best = stage.choices[0] if stage.choices else None
            base = baseline(topo, kind, offload, size_bytes=size)
            base_sim = simulate(topo, base, size)
            tuned, _ = tuned_offload(Run.start(options, None), topo, kind, size, 0)
            tuned_us = min((c.time_us for c in tuned if c.candidate.label.startswith(f"{offload} pipelined")),
                           default=None)  # "nvls pipelined", not "nvls-tree pipelined"
            times = {a: simulate(topo, baseline(topo, kind, a, size_bytes=size), size).time_us for a in unicast}
            timed = {a: t for a, t in times.items() if t is not None}
            best_unicast = min(timed, key=lambda a: timed[a]) if timed else None
            rows.append({"topology": name, "gpus": topo.num_gpus, "collective": kind_name, "offload": offload,
                         "size_bytes": size, "bound_us": lower_bound(topo, kind, size).bound_us,
                         "trees_us": best.time_us if best else None, "trees": best.candidate.label if best else None,
                         "trees_transfers": len(best.schedule) if best else None,
                         "candidates": len(stage.candidates), "stage_s": stage_s,
                         "baseline_us": base_sim.time_us, "baseline_pieces": base.collective.chunk_factor,
                         "tuned_us": tuned_us, "unicast": best_unicast,
                         "unicast_us": timed.get(best_unicast) if best_unicast else None})
            note(f"switch trees {name} {kind_name} {size}: {rows[-1]['trees_us']} vs {offload} "
                 f"{base_sim.time_us} ({stage_s:.1f} s)")
    return rows


JOINT_CASES = ("dgx-h100-nvls", "fat-tree36", "fat-tree36-sharp")
"""Topologies of the joint synthesis (``taccl synthesize -c allgather+reducescatter -s 1GB``); quick: the first."""


def _joint_synthesis(quick: bool) -> list[dict[str, Any]]:
    """``synthesize -c allgather+reducescatter`` at 1 GB: the combination chosen, its makespan, the joint bound."""
    from taccl_py.cli.concurrent_cmd import synthesize_concurrent_row
    from taccl_py.library import resolve_topology
    from taccl_py.synthesis import SynthesisOptions, WorkBudget

    rows = []
    for name in JOINT_CASES[:1] if quick else JOINT_CASES:
        topo = resolve_topology(name)
        started = time.perf_counter()
        options = SynthesisOptions(time_limit_s=30.0, budget=WorkBudget.for_time_limit(30.0))
        row = synthesize_concurrent_row(topo, "allgather+reducescatter", SIZE, options)
        rows.append({"topology": name, "gpus": topo.num_gpus, "makespan_us": row["makespan_us"],
                     "joint_bound_us": row["makespan_bound_us"], "joint_bound": row["makespan_bound"],
                     "efficiency": row["makespan_efficiency"],
                     "algorithms": [p["algorithm"] for p in row["collectives"]],
                     "times_us": [p["time_us"] for p in row["collectives"]],
                     "combinations": len(row["combinations"]), "wall_s": time.perf_counter() - started})
    return rows


def run(quick: bool) -> dict[str, Any]:
    from taccl_py.baselines import applicable_baselines, baseline
    from taccl_py.baselines.offload import OFFLOAD_ALGORITHMS
    from taccl_py.bounds import lower_bound
    from taccl_py.library import resolve_topology
    from taccl_py.simulator import simulate

    rows = []
    for name, kind, offload in CASES:
        topo = resolve_topology(name)
        bound = lower_bound(topo, kind, SIZE)
        unicast_bound = lower_bound(topo, kind, SIZE, offload=False)
        entries = {}
        names = [a for a in applicable_baselines(topo, kind) if a not in OFFLOAD_ALGORITHMS or a == offload]
        if quick or topo.num_gpus > 64:  # the direct and one-shot baselines are slow to build at 188 GPUs
            names = [a for a in names if a in ("ring", "hier", offload)]
        for algorithm in names:
            started = time.perf_counter()
            schedule = baseline(topo, kind, algorithm, size_bytes=SIZE)
            result = simulate(topo, schedule, SIZE)
            out, into = _endpoint_bytes(topo, result)
            entries[algorithm] = {"time_us": result.time_us, "correct": result.correct,
                                  "busbw_GBps": result.busbw_GBps, "injected_bytes": out, "ejected_bytes": into,
                                  "transfers": len(schedule), "wall_s": time.perf_counter() - started}
        rows.append({"topology": name, "gpus": topo.num_gpus, "collective": kind, "offload": offload,
                     "bound_us": bound.bound_us, "assumes": bound.assumes, "unicast_bound_us": unicast_bound.bound_us,
                     "baselines": entries})
    return {"size_bytes": SIZE, "rows": rows, "fsdp": _fsdp(quick), "joint": _joint_synthesis(quick),
            "switch_trees": _switch_trees(quick)}


def render(data: dict[str, Any], figures: Path) -> str:
    size = data["size_bytes"]
    lines = ["Simulated at 1 GB (2^30 bytes); efficiency = bound / time with the capability-aware bound "
             "(`taccl bound`), unicast bound = `taccl bound --unicast`. Endpoint bytes are per GPU, over the "
             "buffer size M: injected (GPU -> network) and injected + ejected.", "",
             "| topology | collective | algorithm | time us | efficiency | busbw GB/s | injected / M per GPU | "
             "endpoint / M per GPU |", "|---|---|---|---|---|---|---|---|"]
    notes = []
    for row in data["rows"]:
        n = row["gpus"]
        timed = {a: e for a, e in row["baselines"].items() if e["time_us"] is not None}
        for algorithm, e in row["baselines"].items():
            t = e["time_us"]
            eff = f"{row['bound_us'] / t:.3f}" if t else "-"
            lines.append(f"| {row['topology']} ({n} GPUs) | {row['collective']} | {algorithm} | "
                         f"{t:,.2f} | {eff} | {e['busbw_GBps']:.2f} | {e['injected_bytes'] / n / size:.4f} | "
                         f"{(e['injected_bytes'] + e['ejected_bytes']) / n / size:.4f} |")
        offload = timed.get(row["offload"])
        unicast = {a: e for a, e in timed.items() if a != row["offload"]}
        if offload and unicast:
            best_name = min(unicast, key=lambda a: unicast[a]["time_us"])
            best = unicast[best_name]
            ratio = (best["injected_bytes"] + best["ejected_bytes"]) / (offload["injected_bytes"]
                                                                         + offload["ejected_bytes"])
            notes.append(f"* {row['topology']}: {row['offload']} {offload['time_us']:,.2f} us against the best "
                         f"unicast baseline ({best_name}) {best['time_us']:,.2f} us; endpoint traffic "
                         f"{ratio:.2f}x less; busbw {offload['busbw_GBps'] / best['busbw_GBps']:.2f}x; bound "
                         f"{row['bound_us']:,.2f} us ({row['assumes']}), unicast bound "
                         f"{row['unicast_bound_us']:,.2f} us.")
    return "\n".join([*lines, "", *notes, *_render_targets(data), *_render_fsdp(data), *_render_joint(data),
                      *_render_switch_trees(data)]) + "\n"


def _render_targets(data: dict[str, Any]) -> list[str]:
    """Issue 11's targets, each stated met or not from the rows above."""
    by = {(r["topology"], r["offload"]): r for r in data["rows"]}
    lines = ["", "### Targets (issue 11)", ""]
    fat = by.get(("fat-tree188", "multicast"))
    if fat and fat["baselines"].get("multicast", {}).get("time_us"):
        n, m = fat["gpus"], fat["baselines"]["multicast"]
        unicast = {a: e for a, e in fat["baselines"].items() if a != "multicast" and e["time_us"]}
        eff = fat["bound_us"] / m["time_us"]
        if unicast:
            best = min(unicast, key=lambda a: unicast[a]["time_us"])
            ratio = (unicast[best]["injected_bytes"] + unicast[best]["ejected_bytes"]) / (m["injected_bytes"]
                                                                                          + m["ejected_bytes"])
            exact = 2 * (n - 1) / n  # what a GPU sends and receives, unicast over multicast
            lines.append(f"* Multicast Allgather on fat-tree188 at 1 GB within 5% of the multicast bound: efficiency "
                         f"{eff:.3f}: **{'met' if eff >= TARGET_EFFICIENCY else 'not met'}**. Half the endpoint "
                         f"bytes of the best unicast algorithm ({best}): {ratio:.3f}x less (the exact ratio is "
                         f"2(N-1)/N = {exact:.3f}; injection alone {m['injected_bytes'] / n / data['size_bytes']:.4f} "
                         f"M against {unicast[best]['injected_bytes'] / n / data['size_bytes']:.4f} M per GPU): "
                         f"**{'met' if ratio >= exact * 0.999 else 'not met'}**.")
    for name in ("dgx-h100-nvls", "gb200-nvl72-nvls"):
        row = by.get((name, "nvls"))
        if not row or not row["baselines"].get("nvls", {}).get("time_us"):
            continue
        nvls, ring = row["baselines"]["nvls"], row["baselines"].get("ring", {})
        eff = row["bound_us"] / nvls["time_us"]
        gain = f"; busbw {nvls['busbw_GBps']:.1f} GB/s against the ring's {ring['busbw_GBps']:.1f}: " \
               f"{nvls['busbw_GBps'] / ring['busbw_GBps']:.2f}x" if ring.get("busbw_GBps") else ""
        target = "issue 11's target" if name == "dgx-h100-nvls" else \
            "not an issue target, the same test; the baseline's depth, 14 pieces per block"
        lines.append(f"* NVLS Allreduce on {name} at 1 GB within 5% of its bound ({target}): efficiency {eff:.3f}: "
                     f"**{'met' if eff >= TARGET_EFFICIENCY else 'not met'}**{gain}.")
    return lines


def _render_fsdp(data: dict[str, Any]) -> list[str]:
    """The FSDP table: AG + RS of M each at once, with and without the switches' help."""
    rows = data.get("fsdp") or []
    if not rows:
        return []
    size = data["size_bytes"]
    lines = ["", "### FSDP: Allgather and ReduceScatter at once", "",
             "Both collectives of 1 GB start together (`taccl simulate -c allgather+reducescatter -a AG+RS`); each "
             "one's time next to the other (alone in brackets), the makespan, endpoint bytes per GPU over M (both "
             "collectives), and the makespan's efficiency against the joint lower bound of the two (the summed "
             "cut and traffic bounds of docs/simulator.md; the larger of the two single bounds in brackets).", "",
             "| topology | AG + RS | AG us (alone) | RS us (alone) | makespan us | joint bound us (max single) | "
             "efficiency | injected / M | ejected / M |",
             "|---|---|---|---|---|---|---|---|---|"]
    base: dict[str, float] = {}
    for r in rows:
        n = r["gpus"]
        if not r["correct"]:
            lines.append(f"| {r['topology']} ({n} GPUs) | {r['allgather']} + {r['reducescatter']} | incorrect "
                         "| | | | | | |")
            continue
        (ag, rs), (ag1, rs1) = r["times_us"], r["alone_us"]
        if r["allgather"] == "ring" and r["reducescatter"] == "ring":
            base[r["topology"]] = r["makespan_us"]
        joint = (f"{r['joint_bound_us']:,.2f} ({r['max_single_bound_us']:,.2f}) | "
                 f"{r['joint_bound_us'] / r['makespan_us']:.3f}") if "joint_bound_us" in r else "- | -"
        lines.append(f"| {r['topology']} ({n} GPUs) | {r['allgather']} + {r['reducescatter']} | {ag:,.2f} "
                     f"({ag1:,.2f}) | {rs:,.2f} ({rs1:,.2f}) | {r['makespan_us']:,.2f} | {joint} | "
                     f"{r['injected_bytes'] / n / size:.4f} | {r['ejected_bytes'] / n / size:.4f} |")
    lines.append("")
    for r in rows:
        unicast = base.get(r["topology"].removesuffix("-sharp"))
        if r["correct"] and unicast and (r["allgather"], r["reducescatter"]) != ("ring", "ring"):
            lines.append(f"* {r['topology']}, {r['allgather']} + {r['reducescatter']}: makespan "
                         f"{unicast / r['makespan_us']:.2f}x shorter than ring + ring.")
    lines.append("* A multicast Allgather halves what a GPU injects, but next to a unicast ReduceScatter every GPU "
                 "still receives 2(N-1)/N M, so the makespan stays where it was; only with the ReduceScatter reduced "
                 "in the switches (M/N received) do both directions drop to M and the makespan halve. The fluid model "
                 "shares a link per flow, not per collective: the multicast Allgather's N concurrent flows take "
                 "nearly all of each downlink and the ring ReduceScatter waits for them.")
    return lines


def _render_joint(data: dict[str, Any]) -> list[str]:
    """The joint synthesis rows: what ``synthesize -c allgather+reducescatter`` chose, against the joint bound."""
    rows = data.get("joint") or []
    if not rows:
        return []
    lines = ["", "### Joint synthesis", "",
             "`taccl synthesize -t T -c allgather+reducescatter -s 1GB --time-limit 30`: each collective synthesized "
             "(its fastest three choices and its fastest through the switches), every combination simulated at "
             "once, the smallest makespan kept; efficiency against the joint bound. Synthesis wall time measured "
             "under load.", "",
             "| topology | AG + RS chosen | AG us | RS us | makespan us | joint bound us | efficiency | combinations "
             "| wall s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ag, rs = r["times_us"]
        eff = "-" if r["efficiency"] is None else f"{r['efficiency']:.3f}"
        lines.append(f"| {r['topology']} ({r['gpus']} GPUs) | {r['algorithms'][0]} + {r['algorithms'][1]} | "
                     f"{_us(ag)} | {_us(rs)} | {_us(r['makespan_us'])} | {r['joint_bound_us']:,.2f} | {eff} | "
                     f"{r['combinations']} | {r['wall_s']:.0f} |")
    lines += ["", *(f"* {r['topology']}: joint bound: {r['joint_bound']}." for r in rows)]
    return lines


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _size(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


_SAME = 1e-3
"""Within 0.1%, the trees and a baseline take the same time (the summary's ``the same``)."""


def _render_switch_trees(data: dict[str, Any]) -> list[str]:
    """The synthesizer's own trees through the switches against the offload baselines, size by size."""
    rows = data.get("switch_trees") or []
    if not rows:
        return []
    lines = ["", "### Trees the synthesizer routes through the switches", "",
             "The switch stage of `taccl synthesize` (`taccl_py/synthesis/multicast.py`: multicast / in-network "
             "reduction trees routed by column generation on the branch graph, integer split, the unicast stages' "
             "orderings, each also split by latency; the one-group in-network Allreduce where the switches reduce and "
             "multicast) against the offload baseline at its own pipeline depth and at the depth `synthesize` "
             "searches (`tuned`, nvls / sharp only), the best unicast baseline (up to 64 GPUs) and the "
             "capability-aware bound. Simulated times in us (machine-independent); `ratio` = offload baseline (best "
             "depth) / trees, above 1 where the trees win. Stage wall seconds measured under load.", "",
             "| topology | collective | size | trees us | trees, form | offload baseline us | tuned us | best unicast "
             "us | bound us | trees efficiency | ratio | stage s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    summary: dict[tuple[str, str, str], list[tuple[int, float | None, bool]]] = {}
    for r in rows:
        offload = min(t for t in (r["baseline_us"], r["tuned_us"]) if t is not None)
        trees = r["trees_us"]
        ratio = offload / trees if trees else None
        eff = r["bound_us"] / trees if trees else None
        unicast = f"{_us(r['unicast_us'])} ({r['unicast']})" if r["unicast"] else "-"
        lines.append(f"| {r['topology']} ({r['gpus']} GPUs) | {r['collective']} | {_size(r['size_bytes'])} | "
                     f"{_us(trees)} | {r['trees'] or '-'} | {_us(r['baseline_us'])} ({r['offload']}, "
                     f"{r['baseline_pieces']} per block) | {_us(r['tuned_us'])} | {unicast} | {_us(r['bound_us'])} | "
                     f"{'-' if eff is None else f'{eff:.3f}'} | {'-' if ratio is None else f'{ratio:.3f}'} | "
                     f"{r['stage_s']:.1f} |")
        unicast_faster = bool(trees and r["unicast_us"] is not None and r["unicast_us"] < trees * (1 - _SAME))
        summary.setdefault((r["topology"], r["collective"], r["offload"]), []).append(
            (r["size_bytes"], ratio, unicast_faster))
    lines.append("")
    for (topology, collective, offload), cases in summary.items():
        parts = []
        for verdict, test in (("faster", lambda x: x > 1 + _SAME), ("the same within 0.1%",
                                                                     lambda x: abs(x - 1) <= _SAME),
                              ("slower", lambda x: x < 1 - _SAME)):
            hits = [(size, ratio) for size, ratio, _ in cases if ratio is not None and test(ratio)]
            if hits:
                low, high = min(r for _, r in hits), max(r for _, r in hits)
                by = "" if verdict.startswith("the same") else \
                    f" (baseline / trees {low:.3f}" + (f"-{high:.3f})" if high > low + 5e-4 else ")")
                parts.append(f"{verdict}{by} at {', '.join(_size(size) for size, _ in hits)}")
        behind = [_size(size) for size, _, faster in cases if faster]
        tail = f"; a unicast baseline is faster than the trees at {', '.join(behind)}" if behind else ""
        lines.append(f"* {topology} {collective}: the synthesized trees against `{offload}` at its best depth: "
                     f"{'; '.join(parts) or 'no trees'}{tail}.")
    return lines
