"""Simulator speed and memory on large NCCL-style schedules (the "Simulator" section of RESULTS.md).

A benchmark module of benchmarks/harness.py: ``make bench`` runs it through ``benchmarks/run.py``, which
stores ``results/simulator.json`` and renders the section. Alone, ``.venv/bin/python
benchmarks/bench_simulator.py [--quick] [--cpu N]`` prints the table rows. Every case runs in its own
child process pinned to one CPU (``os.sched_setaffinity``, BLAS/OpenMP threads set to 1), so its peak RSS
and caches are its own. Per case it times building the schedule (topology generation, ring or tree plan,
transfers) apart from simulating it, keeps the best of ``repeats`` runs, and checks the simulator's
verdict (correct, and no faster than ``taccl bound``). It times two engines on the same schedule: the Python
simulator (``taccl_py.simulator.simulate``, the reference) and the one ``taccl simulate`` runs
(``taccl_py.fast_sim.simulate_large``: the compiled kernel from ``FAST_MIN_TRANSFERS`` transfers, else the
Python one), whose first run in the process (loading the kernel from numba's cache) counts for the target.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

NAME, TITLE, ORDER = "simulator", "Simulator", 10
GB = 2**30
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


@dataclass(frozen=True)
class Case:
    """One schedule to build and simulate; ``target_s`` bounds build + simulate (None: no target)."""

    key: str
    what: str
    topology: str
    collective: str
    algorithm: str
    channels: int | None
    size: int
    repeats: int
    target_s: float | None
    quick: bool


CASES = (
    Case("ag128", "ring Allgather, 1 ring", "dgx-a100x16-forestcoll", "allgather", "ring", 1, GB, 5, 2.0, True),
    Case("ag128nccl", "ring Allgather, NCCL's channel count", "dgx-a100x16-forestcoll", "allgather", "ring", None,
         GB, 3, 2.0, True),
    Case("ag1024", "ring Allgather, 1 ring", "dgx-a100x128-forestcoll", "allgather", "ring", 1, GB, 1, 60.0, False),
    Case("ar128", "ring Allreduce, NCCL's channel count", "dgx-a100x16-forestcoll", "allreduce", "ring", None, GB, 1,
         None, False),
    Case("tree64", "double-binary-tree Allreduce", "dgx-a100x8-forestcoll", "allreduce", "tree", None, GB, 1, None,
         True),
    Case("tree128", "double-binary-tree Allreduce", "dgx-a100x16-forestcoll", "allreduce", "tree", None, GB, 1, None,
         False),
    Case("a2a64", "direct Alltoall", "dgx-a100x8-forestcoll", "alltoall", "direct", None, GB, 3, None, True),
    Case("a2a128", "direct Alltoall", "dgx-a100x16-forestcoll", "alltoall", "direct", None, GB, 1, None, False),
)


# ------------------------------------------------------------------ one case
def _pin(cpu: int | None) -> int | None:
    """Pin this process to one CPU (the last one allowed unless given); return it, or None if unsupported."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    chosen = cpu if cpu is not None and cpu in allowed else allowed[-1]
    os.sched_setaffinity(0, {chosen})
    return chosen


def _rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(case: Case, cpu: int | None) -> dict[str, Any]:
    """Build and simulate ``case`` in this process; the child side of the benchmark."""
    pinned = _pin(cpu)
    from taccl_py.baselines import baseline, forget_built
    from taccl_py.baselines.layout import ring_plan
    from taccl_py.baselines.tree import tree_plan
    from taccl_py.bounds import lower_bound
    from taccl_py.fast_sim import runs_compiled, simulate_large
    from taccl_py.library import resolve_topology
    from taccl_py.simulator import SimOptions, simulate

    rss_imports = _rss_mib()
    build_s, simulate_s, engine_s = [], [], []
    engines: list[str] = []
    result = engine_result = schedule = topology = None
    for _ in range(case.repeats):
        ring_plan.cache_clear()
        tree_plan.cache_clear()
        forget_built()
        schedule = result = engine_result = None
        gc.collect()
        started = time.perf_counter()
        topology = resolve_topology(case.topology)
        schedule = baseline(topology, case.collective, case.algorithm, channels=case.channels, size_bytes=case.size)
        built = time.perf_counter()
        # which engine simulate_large takes: asked inside the engine's time, as simulate_large asks it too (and, below
        # its threshold, imports numba on the way, which the command pays)
        engines.append("compiled" if runs_compiled(topology, schedule, SimOptions()) else "python")
        engine_result = simulate_large(topology, schedule, case.size)
        engine_done = time.perf_counter()
        gc.collect()
        python_started = time.perf_counter()
        result = simulate(topology, schedule, case.size)
        done = time.perf_counter()
        build_s.append(built - started)
        engine_s.append(engine_done - built)
        simulate_s.append(done - python_started)
    assert result is not None and engine_result is not None and schedule is not None and topology is not None
    peak = _rss_mib()
    bound = lower_bound(topology, case.collective, case.size).bound_us
    time_us = result.time_us
    above_bound = time_us is not None and time_us >= bound * (1 - 1e-9)
    engines_agree = engine_result.correct == result.correct and (
        time_us is None if engine_result.time_us is None
        else time_us is not None and abs(engine_result.time_us - time_us) <= 1e-6 * max(1.0, time_us))
    return {**asdict(case), "gpus": topology.num_gpus, "links": len(topology.links),
            "channels_used": schedule.notes.get("channels"), "transfers": len(schedule),
            "build_s": min(build_s), "simulate_s": min(simulate_s), "build_runs_s": build_s,
            "simulate_runs_s": simulate_s, "engine": engines[0], "engines": engines,
            "engine_first_s": engine_s[0], "engine_s": min(engine_s), "engine_runs_s": engine_s,
            "engines_agree": engines_agree, "peak_rss_mib": peak, "rss_after_imports_mib": rss_imports,
            "correct": result.correct, "error": result.error, "time_us": time_us, "bound_us": bound,
            "above_bound": above_bound, "cpu": pinned}


def run_child(case: Case, cpu: int | None) -> dict[str, Any]:
    """Run one case in a fresh interpreter (its own peak RSS, no warm caches, one thread)."""
    env = dict(os.environ, **dict.fromkeys(_THREAD_VARS, "1"))
    command = [sys.executable, str(Path(__file__).resolve()), "--case", case.key]
    if cpu is not None:
        command += ["--cpu", str(cpu)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"case {case.key} failed (exit {done.returncode}):\n{done.stderr}")
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


# ------------------------------------------------------------------ report
def first_run_s(row: dict[str, Any]) -> float:
    """What a fresh ``taccl simulate`` process pays after its imports: the first build and the first run of its engine
    (the compiled kernel loaded from numba's cache on the way)."""
    return float(row["build_runs_s"][0] + row["engine_first_s"])


def met(row: dict[str, Any]) -> bool | None:
    """Correct, no faster than the bound, both engines alike, and (with a target) the first build + run within it."""
    ok = bool(row["correct"] and row["above_bound"] and row["engines_agree"])
    if row["target_s"] is None:
        return None if ok else False
    return ok and first_run_s(row) < row["target_s"]


def fmt_row(row: dict[str, Any]) -> str:
    verdict = met(row)
    result = "-" if verdict is None else ("met" if verdict else "**not met**")
    target = "-" if row["target_s"] is None else f"< {row['target_s']:g} s"
    correct = "yes, >= bound" if row["correct"] and row["above_bound"] else (
        "**below bound**" if row["correct"] else f"**no**: {row['error']}")
    if not row["engines_agree"]:
        correct += "; **the engines disagree**"
    best = f" (best of {row['repeats']})" if row["repeats"] > 1 else ""
    engine = f"{row['engine_first_s']:.2f} {row['engine']}"
    if row["repeats"] > 1:
        later = row["engines"][1:]
        how = later[0] if len(set(later)) == 1 else "/".join(dict.fromkeys(later))
        engine += f" (then {min(row['engine_runs_s'][1:]):.2f}{'' if how == row['engine'] else ' ' + how})"
    time_ms = "-" if row["time_us"] is None else f"{row['time_us'] / 1e3:.2f}"
    return (f"| {row['what']} | {row['topology']} ({row['gpus']} GPUs, {row['channels_used']} ch) "
            f"| {row['transfers']:,} | {row['build_runs_s'][0]:.2f} | {engine} | {first_run_s(row):.2f} "
            f"| {row['simulate_s']:.2f}{best} | {row['peak_rss_mib']:.0f} | {correct} | {time_ms} | {target} | {result} |")


def render(data: dict[str, Any], figures: Path) -> str:
    """The section body (protocol of benchmarks/harness.py): how it was measured, the table."""
    rows = data["rows"]
    imports = min(r["rss_after_imports_mib"] for r in rows)
    lines = [f"Every case is a fresh process pinned to CPU {data['cpu']}, after the harness has compiled the numba "
             "kernels into numba's cache (`python -m taccl_py.warmup`, as a deployment does once). Build s: the "
             "process's first generation of the topology and construction of the NCCL-style schedule "
             "(`taccl_py.baselines.baseline`: ring or tree plan, then the transfers). Engine s: the first run of the "
             "simulator `taccl simulate` runs (`taccl_py.fast_sim.simulate_large`: the compiled kernel from 100,000 "
             "transfers, loading it from numba's cache on the way, and from 500 once it is worth loading, "
             "docs/simulator.md; else the Python simulator), and the best of the later repeats; first run s: "
             "build + engine, what the command pays after its imports, which the target bounds. Python s: `taccl_py.simulator.simulate`, the reference engine, on the same schedule "
             "(dependency graph, fluid max-min events, post-condition check); both engines must agree (verdict and "
             "time). Peak MiB is the process's peak RSS over both engines "
             f"(about {imports:.0f} MiB of it is Python and the imports). "
             "Correct: the simulator's verdict, and its time is not below `taccl bound`. Sizes are 1GB "
             "(2^30 bytes, nccl-tests convention); sim. time is the simulated collective time. "
             "The 1024-GPU target counts about a million transfers, "
             "i.e. one ring (NCCL would run 8 rings on this fabric, 8 times as many transfers); quick mode "
             "leaves out the 1024-GPU and the largest 128-GPU cases.", "",
             "| what | topology | transfers | build s | engine s | first run s | Python s | peak MiB | correct "
             "| sim. time ms | target | result |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [fmt_row(r) for r in rows]
    lines += ["", "Topologies are generated by `taccl_py.library` (`dgx-a100xK-forestcoll`: K DGX A100 machines, NVSwitch "
                  "300 GB/s per GPU, one 25 GB/s NIC per GPU on two IB switches, ForestColl's model); "
                  "`ch` is the channel count of the schedule."]
    return "\n".join(lines) + "\n"


def headline(data: dict[str, Any]) -> list[list[str]]:
    """README rows: the largest simulation measured, as `taccl simulate` runs it."""
    biggest = max(data["rows"], key=lambda r: r["transfers"])
    return [[f"simulating a {biggest['gpus']}-GPU {biggest['what'].split(',')[0]} ({biggest['transfers']:,} "
             "transfers)", f"{first_run_s(biggest):.1f} s on one core ({biggest['engine']} engine; "
             f"{biggest['build_s'] + biggest['simulate_s']:.1f} s with the Python one), "
             f"{'correct' if biggest['correct'] else 'NOT correct'}", ""]]


def run(quick: bool, cpu: int | None = None) -> dict[str, Any]:
    """Every case (quick: the quick ones) in its own pinned process (protocol of benchmarks/harness.py)."""
    from harness import note

    rows = []
    for case in CASES:
        if quick and not case.quick:
            continue
        row = run_child(case, cpu)
        rows.append(row)
        note(fmt_row(row))
    return {"cpu": rows[0]["cpu"], "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the quick cases (no 1024-GPU run)")
    parser.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: the last one allowed)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case({c.key: c for c in CASES}[args.case], args.cpu)))
        return
    data = run(args.quick, args.cpu)
    for row in data["rows"]:
        print(fmt_row(row))


if __name__ == "__main__":
    main()
