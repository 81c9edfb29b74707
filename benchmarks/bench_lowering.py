"""Lowering, writing and verifying MSCCL XML for the synthesis benchmark's schedules and a few baselines.

Run: ``.venv/bin/python benchmarks/bench_lowering.py [--quick] [--only TEXT] [--simulate]``.

The schedules are those the synthesis benchmark (``bench_synthesis.py``) produces for its instances
(synthesized with the same time limits) plus NCCL-style baselines. Synthesizing them is slow and not
what is measured here, so each schedule is cached as JSON in ``benchmarks/results/schedules/`` (not
in git) with its ``synthesis_s``; delete the directory to re-synthesize. Per schedule the benchmark
times ``lower_schedule``, ``save_xml`` (to a temporary file) and ``verify_program`` (rules, deadlock,
race check and the data result), and, with ``--simulate``, ``simulate_program`` of the program against
``simulate`` of the schedule (the two times must agree). The target (issue 16) is lower + write +
verify <= 0.5 x synthesis_s + 3 s, so that the whole ``synthesize -o`` command stays within
1.5 x synthesis_s + 3 s. Raw rows go to ``benchmarks/results/lowering.json`` and the table to
``benchmarks/results/lowering.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_simulator import cpu_model  # same directory: run as a script
from bench_synthesis import small_buffer_targets, targets

from taccl_py.baselines import baseline
from taccl_py.collectives import CollectiveKind
from taccl_py.errors import LoweringError
from taccl_py.library import resolve_topology
from taccl_py.msccl import lower_schedule, save_xml, simulate_program, verify_program
from taccl_py.schedule import Schedule, load_schedule, save_schedule
from taccl_py.simulator import simulate
from taccl_py.synthesis import SynthesisOptions, synthesize
from taccl_py.units import format_bytes

HERE = Path(__file__).parent
CACHE = HERE / "results" / "schedules"
GB = 2**30


@dataclass(frozen=True)
class Case:
    """One schedule: synthesized (``algorithm`` None, with the synthesis benchmark's time limit) or a baseline."""

    topology: str
    kind: CollectiveKind
    size: int
    algorithm: str | None = None
    channels: int | None = None
    time_limit_s: float = 60.0
    quick: bool = True

    @property
    def key(self) -> str:
        how = self.algorithm or "synth"
        if self.channels is not None:
            how += f"{self.channels}ch"
        return f"{self.topology}_{self.kind.value}_{format_bytes(self.size)}_{how}"


def cases(quick: bool) -> list[Case]:
    """The synthesis benchmark's instances, then the baselines."""
    quick_keys = {(t.topology, t.kind, t.size) for t in [*targets(True), *small_buffer_targets(True)]}
    out = [Case(t.topology, t.kind, t.size, time_limit_s=t.time_limit_s,
                quick=(t.topology, t.kind, t.size) in quick_keys)
           for t in [*targets(quick), *small_buffer_targets(quick)]]
    ag, ar, a2a = CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE, CollectiveKind.ALLTOALL
    out += [Case("ndv2x2", ar, GB, "ring"), Case("dgx2x2", ar, 2**20, "tree"), Case("dgx-a100x2", ar, 2**20, "tree"),
            Case("dgx-a100x4", a2a, GB, "direct"), Case("dgx-a100x16", ag, GB, "ring", 1),
            Case("dgx-a100x8", ar, GB, "tree", quick=False), Case("dgx-a100x16", ar, GB, "ring", quick=False)]
    return [c for c in out if c.quick or not quick]


def obtain(case: Case) -> tuple[Schedule, float | None]:
    """The case's schedule and how long synthesizing it took (None for a baseline), cached in ``CACHE``."""
    topo = resolve_topology(case.topology)
    path = CACHE / f"{case.key}.json"
    meta = CACHE / f"{case.key}.meta.json"
    if case.algorithm is not None:
        return baseline(topo, case.kind, case.algorithm, channels=case.channels, size_bytes=case.size), None
    if path.exists() and meta.exists():
        return load_schedule(path, topo), float(json.loads(meta.read_text())["synthesis_s"])
    started = time.perf_counter()
    result = synthesize(topo, case.kind, case.size, SynthesisOptions(time_limit_s=case.time_limit_s))
    seconds = time.perf_counter() - started
    CACHE.mkdir(parents=True, exist_ok=True)
    save_schedule(result.schedule, topo, path)
    meta.write_text(json.dumps({"synthesis_s": seconds, "chosen": result.chosen}))
    return result.schedule, seconds


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(case: Case, with_simulation: bool) -> dict[str, Any]:
    schedule, synthesis_s = obtain(case)
    topo = resolve_topology(case.topology)
    gc.collect()
    cpu0 = time.process_time()
    started = time.perf_counter()
    try:
        program = lower_schedule(schedule, topo)
    except LoweringError as exc:
        return {"case": case.key, "topology": case.topology, "gpus": topo.num_gpus, "collective": case.kind.value,
                "size": case.size, "algorithm": case.algorithm or "synthesized", "transfers": len(schedule),
                "synthesis_s": synthesis_s, "lower_s": time.perf_counter() - started, "error": str(exc),
                **({"xml_time_us": None} if with_simulation else {})}
    lowered = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        save_xml(program, Path(tmp) / "x.xml")
    written = time.perf_counter()
    report = verify_program(program)
    verified = time.perf_counter()
    cpu_s = time.process_time() - cpu0
    row: dict[str, Any] = {
        "case": case.key, "topology": case.topology, "gpus": topo.num_gpus, "collective": case.kind.value,
        "size": case.size, "algorithm": case.algorithm or "synthesized", "transfers": len(schedule),
        "steps": program.num_steps, "threadblocks": program.num_threadblocks,
        "nchunksperloop": program.nchunksperloop, "synthesis_s": synthesis_s,
        "lower_s": lowered - started, "write_s": written - lowered, "verify_s": verified - written,
        "valid": report.valid, "correct": report.correct, "verdict": report.verdict,
        "errors": [str(e) for e in report.errors[:3]], "notes": list(report.notes),
    }
    total = row["lower_s"] + row["write_s"] + row["verify_s"]
    row["total_s"] = total
    row["total_cpu_s"] = cpu_s
    row["budget_s"] = None if synthesis_s is None else 0.5 * synthesis_s + 3.0
    if with_simulation:
        sim_start = time.perf_counter()
        xml_time = simulate_program(program, topo, case.size).time_us
        row["simulate_xml_s"] = time.perf_counter() - sim_start
        row["xml_time_us"] = xml_time
        row["schedule_time_us"] = simulate(topo, schedule, case.size).time_us
    row["peak_rss_mib"] = _rss_mib()
    return row


def fmt_row(row: dict[str, Any]) -> str:
    if "error" in row:
        return (f"| {row['topology']} ({row['gpus']}) | {row['collective']} | {format_bytes(int(row['size']))} "
                f"| {row['algorithm']} | {row['transfers']:,} | - | - | {row['lower_s']:.2f} | - | - | - | - | - "
                f"| LoweringError: {row['error']} | - |" + (" - | - |" if "xml_time_us" in row else ""))
    budget = row["budget_s"]
    met = "-" if budget is None else ("met" if row["total_s"] <= budget and row["correct"] else "**not met**")
    if budget is not None and met != "met" and row["correct"] and row["total_cpu_s"] <= budget:
        met = "met in CPU time"
    synth = "-" if row["synthesis_s"] is None else f"{row['synthesis_s']:.1f}"
    verdict = {"correct": "yes", "unknown": "unknown"}.get(row["verdict"], "**no**")
    sim = ""
    if "xml_time_us" in row:
        sim = f" | {row['schedule_time_us'] / 1e3:.3f} | {row['xml_time_us'] / 1e3:.3f}"
    return (f"| {row['topology']} ({row['gpus']}) | {row['collective']} | {format_bytes(int(row['size']))} "
            f"| {row['algorithm']} | {row['transfers']:,} | {row['steps']:,} | {synth} | {row['lower_s']:.2f} "
            f"| {row['write_s']:.2f} | {row['verify_s']:.2f} | {row['total_s']:.2f} | {row['total_cpu_s']:.2f} "
            f"| {'-' if budget is None else f'{budget:.1f}'} | {verdict} | {met}{sim} |")


def render(rows: list[dict[str, Any]], command: str, machine: dict[str, Any]) -> str:
    sim = any(r.get("xml_time_us") is not None for r in rows)
    lines = ["## Lowering", "",
             f"Measured {machine['date']} on {machine['cpu_model']} ({machine['cpus']} CPUs), Python "
             f"{machine['python']}, load average {machine['load_before']:.2f} before and {machine['load_after']:.2f} "
             "after the run, with:", "", f"    {command}", "",
             "Per schedule: lower s = `lower_schedule`, write s = `save_xml`, verify s = `verify_program` (rules, "
             "deadlock, data-race check, data result in every buffer mode); budget = 0.5 x synthesis s + 3 s, so "
             "that `taccl synthesize -o` stays within 1.5 x synthesis s + 3 s (issue 16). Synthesis s is from "
             "when the cached schedule was synthesized (it varies with the machine's load); CPU s is the process's CPU time "
             "for lower + write + verify (what the wall time would be on an idle machine). Correct: the "
             "verifier's verdict (`unknown` if the race check could not run).", "",
             "| topology (GPUs) | collective | size | algorithm | transfers | steps | synthesis s | lower s | write s "
             "| verify s | total s | CPU s | budget s | correct | result |" + (" schedule ms | XML ms |" if sim else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if sim else "")]
    lines += [fmt_row(r) for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the 128-GPU instances and use fewer small sizes")
    parser.add_argument("--only", help="run cases whose key contains this text")
    parser.add_argument("--simulate", action="store_true", help="also time the XML against the schedule")
    parser.add_argument("--synthesize-only", action="store_true", help="only fill the schedule cache")
    parser.add_argument("--no-write", action="store_true", help="do not write results/lowering.{json,md}")
    args = parser.parse_args()
    selected = [c for c in cases(args.quick) if not args.only or args.only in c.key]
    if args.synthesize_only:
        for case in selected:
            obtain(case)
            print(case.key, flush=True)
        return
    load_before = os.getloadavg()[0]
    rows = []
    for case in selected:
        row = run_case(case, args.simulate)
        rows.append(row)
        print(fmt_row(row), flush=True)
    machine = {"date": time.strftime("%Y-%m-%d"), "cpu_model": cpu_model(), "cpus": os.cpu_count(),
               "python": platform.python_version(), "load_before": load_before, "load_after": os.getloadavg()[0]}
    command = " ".join([".venv/bin/python benchmarks/bench_lowering.py", *sys.argv[1:]])
    if not args.no_write:
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "lowering.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))
        (HERE / "results" / "lowering.md").write_text(render(rows, command, machine))
    print("done", file=sys.stderr)


if __name__ == "__main__":
    main()
