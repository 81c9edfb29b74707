"""Lowering, writing and verifying MSCCL XML for the synthesis benchmark's schedules and a few baselines.

A benchmark module of benchmarks/harness.py (the "Lowering" section): ``benchmarks/run.py --only lowering``
measures it into results/lowering.{json,md}; ``.venv/bin/python benchmarks/bench_lowering.py [--full]
[--only TEXT]`` does the same without touching RESULTS.md, and prints the table.

The schedules are those the synthesis benchmark (``bench_synthesis.py``) produces for its instances
(synthesized with the same time limits; quick mode: a few of them) plus NCCL-style baselines. Synthesizing
them is not what is measured here, so each schedule is cached as JSON in ``benchmarks/results/schedules/``
(not in git) with its ``synthesis_s``; delete the directory to re-synthesize. Per schedule the benchmark
times ``lower_schedule``, ``save_xml`` (to a temporary file) and ``verify_program`` (rules, deadlock,
race check and the data result), in wall and CPU time, and compares ``simulate_program`` of the program
with ``simulate`` of the schedule (the two times must agree). The target (issue 16) is lower + write +
verify <= 0.5 x synthesis_s + 3 s, so that the whole ``synthesize -o`` command stays within
1.5 x synthesis_s + 3 s.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import resource
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench_synthesis import small_buffer_targets, targets  # same directory

from taccl_py.baselines import baseline
from taccl_py.cli.synth_cmd import MIN_LEFT_SHARE, SOLVE_SHARE
from taccl_py.collectives import CollectiveKind
from taccl_py.errors import LoweringError, ScheduleError
from taccl_py.library import resolve_topology
from taccl_py.msccl import lower_schedule, save_xml, simulate_program, verify_program
from taccl_py.schedule import Schedule, load_schedule, save_schedule
from taccl_py.simulator import simulate
from taccl_py.synthesis import SynthesisOptions, synthesize
from taccl_py.synthesis.multidim import RERUN_MAX_GPUS
from taccl_py.units import format_bytes

NAME, TITLE, ORDER = "lowering", "Lowering", 40
HERE = Path(__file__).parent
CACHE = HERE / "results" / "schedules"
GB = 2**30
QUICK_SYNTHESIZED = {("ndv2x2", CollectiveKind.ALLGATHER, GB), ("dgx2x2", CollectiveKind.ALLGATHER, GB),
                     ("dgx-a100x2", CollectiveKind.ALLGATHER, GB), ("ndv2x2", CollectiveKind.ALLTOALL, GB),
                     ("ndv2x2", CollectiveKind.ALLGATHER, 1024), ("dgx-a100x4", CollectiveKind.ALLGATHER, 65536)}
"""Synthesized instances of quick mode (the rest of the synthesis benchmark's take too long to synthesize)."""


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
    """The synthesis benchmark's instances (quick: ``QUICK_SYNTHESIZED``), then the baselines."""
    out = [Case(t.topology, t.kind, t.size, time_limit_s=t.time_limit_s,
                quick=(t.topology, t.kind, t.size) in QUICK_SYNTHESIZED)
           for t in [*targets(False), *small_buffer_targets(False)]]
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
        try:
            return load_schedule(path, topo), float(json.loads(meta.read_text())["synthesis_s"])
        except ScheduleError:
            pass  # made for an earlier model of the topology (its links changed): synthesize again
    started = time.perf_counter()
    options = SynthesisOptions(time_limit_s=case.time_limit_s)
    result = synthesize(topo, case.kind, case.size, options)
    schedule, chosen, skipped = result.schedule, result.chosen, []
    fallback_s = 0.0
    refused: set[str] = set()
    if result.shortcut and result.ranked and topo.num_gpus <= RERUN_MAX_GPUS:
        # as `taccl synthesize -o`: a shortcut choice the runtime cannot load sends it to the solver stages
        tried = time.process_time()
        try:
            lower_schedule(result.ranked[0].schedule, topo)
        except LoweringError as exc:
            fallback_s += time.process_time() - tried
            refused.add(result.ranked[0].label)
            skipped.append(f"{result.ranked[0].label}: {exc}")
            left = case.time_limit_s - (time.perf_counter() - started)
            if left >= MIN_LEFT_SHARE * case.time_limit_s:
                rerun = replace(options, multidim_shortcut=False, time_limit_s=max(1.0, SOLVE_SHARE * left))
                result = synthesize(topo, case.kind, case.size, rerun, baselines=result.comparison)
    seconds = time.perf_counter() - started
    # what `taccl synthesize -o` writes: the first ranked choice that fits the runtime's limits
    for choice in result.ranked:
        if choice.label in refused:
            continue  # the shortcut's choice, refused above
        tried = time.process_time()
        try:
            lower_schedule(choice.schedule, topo)
        except LoweringError as exc:
            skipped.append(f"{choice.label}: {exc}")
            fallback_s += time.process_time() - tried
            continue
        schedule, chosen = choice.schedule, choice.label
        break
    CACHE.mkdir(parents=True, exist_ok=True)
    save_schedule(schedule, topo, path)
    meta.write_text(json.dumps({"synthesis_s": seconds, "chosen": chosen, "skipped": skipped,
                                "fallback_cpu_s": fallback_s}))
    return schedule, seconds


def fallback_cpu_s(case: Case) -> float:
    """CPU seconds the command spends lowering better-ranked choices that do not fit.

    Baselines are lowered again now (they are made afresh, so this measures the
    current lowering); synthesized choices are not cached, so for those the
    figure recorded when the schedule was cached is used.
    """
    meta = CACHE / f"{case.key}.meta.json"
    if case.algorithm is not None or not meta.exists():
        return 0.0
    recorded = json.loads(meta.read_text())
    skipped = [entry.split(":", 1)[0] for entry in recorded.get("skipped", [])]
    if not skipped or not all(label.startswith("baseline ") for label in skipped):
        return float(recorded.get("fallback_cpu_s", 0.0))
    topo = resolve_topology(case.topology)
    spent = 0.0
    for label in skipped:
        schedule = baseline(topo, case.kind, label.removeprefix("baseline "), size_bytes=case.size)
        started = time.process_time()
        with contextlib.suppress(LoweringError):  # it fails, or the synthesize command would have written it
            lower_schedule(schedule, topo)
        spent += time.process_time() - started
    return spent


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
                "synthesis_s": synthesis_s, "lower_s": time.perf_counter() - started, "error": str(exc)}
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
    row["fallback_cpu_s"] = fallback_cpu_s(case)
    row["total_s"] = total
    row["total_cpu_s"] = cpu_s + row["fallback_cpu_s"]
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
                f"| LoweringError: {row['error']} | - | - | - |")
    budget = row["budget_s"]
    met = "-" if budget is None else ("met" if row["total_s"] <= budget and row["correct"] else "**not met**")
    if budget is not None and met != "met" and row["correct"] and row["total_cpu_s"] <= budget:
        met = "met in CPU time"
    synth = "-" if row["synthesis_s"] is None else f"{row['synthesis_s']:.1f}"
    verdict = {"correct": "yes", "unknown": "unknown"}.get(row["verdict"], "**no**")
    sim = " | - | -"
    if row.get("xml_time_us") is not None:
        sim = f" | {row['schedule_time_us']:.6g} | {row['xml_time_us']:.6g}"
    return (f"| {row['topology']} ({row['gpus']}) | {row['collective']} | {format_bytes(int(row['size']))} "
            f"| {row['algorithm']} | {row['transfers']:,} | {row['steps']:,} | {synth} | {row['lower_s']:.2f} "
            f"| {row['write_s']:.2f} | {row['verify_s']:.2f} | {row['total_s']:.2f} | {row['total_cpu_s']:.2f} "
            f"| {'-' if budget is None else f'{budget:.1f}'} | {verdict} | {met}{sim} |")


def render(data: dict[str, Any], figures: Path) -> str:
    """The section body (protocol of benchmarks/harness.py): how it was measured, the table."""
    rows = data["rows"]
    lines = ["Per schedule: lower s = `lower_schedule`, write s = `save_xml`, verify s = `verify_program` (rules, "
             "deadlock, data-race check, data result in every buffer mode); CPU s = the process's CPU time for the "
             "three (about the wall time on an idle machine), plus, where the fastest choice of the synthesizer does not fit "
             "the runtime's limits, the CPU time `taccl synthesize -o` spends finding that out before writing the next "
             "one (which is the schedule measured here). Budget = 0.5 x synthesis s + 3 s, so that "
             "`taccl synthesize -o` stays within 1.5 x synthesis s + 3 s (issue 16); synthesis s is from when the "
             "cached schedule was synthesized, under whatever load the machine had then. `met in CPU time`: over "
             "budget in wall time only. Correct: the verifier's verdict (`unknown` if a check could not run). "
             "Schedule us / XML us: `simulate` of the schedule and `simulate_program` of the lowered XML at the "
             "instance's size (they must agree). A `LoweringError` is a schedule that does not fit the runtime's "
             "limits (the synthesize command then writes the next candidate).", "",
             "| topology (GPUs) | collective | size | algorithm | transfers | steps | synthesis s | lower s | write s "
             "| verify s | total s | CPU s | budget s | correct | result | schedule us | XML us |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [fmt_row(r) for r in rows]
    return "\n".join(lines) + "\n"


def run(quick: bool) -> dict[str, Any]:
    """Every case (quick: the quick ones), in this process (protocol of benchmarks/harness.py)."""
    from harness import note

    rows = []
    for case in cases(quick):
        row = run_case(case, True)
        rows.append(row)
        note(fmt_row(row))
    return {"rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="every case (default: the quick ones)")
    parser.add_argument("--only", help="measure only cases whose key contains this text, print, store nothing")
    parser.add_argument("--synthesize-only", action="store_true", help="only fill the schedule cache")
    args = parser.parse_args()
    selected = [c for c in cases(not (args.full or args.only)) if not args.only or args.only in c.key]
    if args.synthesize_only:
        for case in selected:
            obtain(case)
            print(case.key, flush=True)
        return
    if args.only:
        for case in selected:
            print(fmt_row(run_case(case, True)), flush=True)
        return
    import harness

    bench = next(b for b in harness.discover() if b.name == NAME)
    command = ".venv/bin/python benchmarks/bench_lowering.py" + (" --full" if args.full else "")
    envelope = harness.run_benchmark(bench, not args.full, command)
    section = harness.render_section(bench, envelope)
    (HERE / "results" / f"{NAME}.md").write_text(section)
    print(section)


if __name__ == "__main__":
    main()
