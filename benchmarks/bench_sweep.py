"""Parallel sweeps: the same grid with ``--jobs 1`` and ``--jobs 2``, and the algbw curves it produces.

A benchmark module of benchmarks/harness.py (the "Parallel sweeps" section of RESULTS.md and the README's
picture). The grid is dgx-a100x2 x {Allgather, Allreduce} x sizes 1KB..1GB (quick: every 8th power of
two; full: every one), each point a synthesize job and a baselines job, run through
:func:`taccl_py.sweep.run_jobs` exactly as ``taccl sweep`` runs it: once in-process one job at a time,
once on a pool of two worker processes. It records both wall times, the speedup, and whether the two
results files agree (they must: every job has its own solver seed and thread count).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

NAME, TITLE, ORDER = "sweep", "Parallel sweeps", 30
TOPOLOGY = "dgx-a100x2"
COLLECTIVES = ("allgather", "allreduce")
TIME_LIMIT_S = 60.0


def _figure_name(collective: str) -> str:
    return f"sweep-{TOPOLOGY}-{collective}.png"


def _pass(jobs: int, grid: list[Any], path: Path) -> tuple[float, float, float]:
    """Run the grid with ``jobs`` workers: (wall seconds, load average before, after)."""
    from harness import note

    from taccl_py.sweep import ResultsFile, make_backend, run_jobs, run_sweep_job

    load_before = os.getloadavg()[0]
    started = time.perf_counter()

    def progress(done: int, total: int, record: Any) -> None:
        if record is not None:
            note(f"--jobs {jobs}: {done}/{total} {record.key}")

    run_jobs(run_sweep_job, grid, make_backend(jobs, None), sink=ResultsFile(path), progress=progress)
    return time.perf_counter() - started, load_before, os.getloadavg()[0]


def run(quick: bool) -> dict[str, Any]:
    from taccl_py.sweep import SweepOptions, SweepTask, grid_jobs, thin_sizes
    from taccl_py.units import parse_size_range

    sizes = thin_sizes(parse_size_range("1KB:1GB"), 8 if quick else 1)
    grid = grid_jobs([TOPOLOGY], list(COLLECTIVES), sizes, list(SweepTask), SweepOptions(TIME_LIMIT_S, 1, 0))
    with tempfile.TemporaryDirectory() as tmp:
        one, two = Path(tmp) / "jobs1.jsonl", Path(tmp) / "jobs2.jsonl"
        wall1, load1a, load1b = _pass(1, grid, one)
        wall2, load2a, load2b = _pass(2, grid, two)
        records = [json.loads(line) for line in one.read_text().splitlines()]
        second = [json.loads(line) for line in two.read_text().splitlines()]
    strip = [{k: v for k, v in r.items() if k != "measured"} for r in records]
    identical = strip == [{k: v for k, v in r.items() if k != "measured"} for r in second]
    return {"topology": TOPOLOGY, "collectives": list(COLLECTIVES), "sizes": sizes, "jobs": len(grid),
            "time_limit_s": TIME_LIMIT_S, "wall_s": {"1": wall1, "2": wall2}, "speedup": wall1 / wall2,
            "load": {"1": [load1a, load1b], "2": [load2a, load2b]}, "identical": identical,
            "job_wall_s": sum(r["measured"]["wall_s"] for r in records), "records": records}


def _points(data: dict[str, Any]) -> list[Any]:
    from taccl_py.sweep import JobRecord
    from taccl_py.sweep.summary import summarize

    return summarize(JobRecord.from_json(r, where="sweep.json") for r in data["records"])


def render(data: dict[str, Any], figures: Path) -> str:
    from taccl_py.plots import SeriesKind, TimeSeries, algbw_figure, save_figure
    from taccl_py.units import format_bytes

    points = _points(data)
    wall, load = data["wall_s"], data["load"]
    lines = [f"The grid: {data['topology']} x {', '.join(data['collectives'])} x {len(data['sizes'])} sizes "
             f"({format_bytes(data['sizes'][0])} to {format_bytes(data['sizes'][-1])}), a synthesize job (1 solver "
             f"thread, {data['time_limit_s']:g} s budget) and a baselines job per point: {data['jobs']} jobs, "
             f"{data['job_wall_s']:.0f} s of job wall time in all, run by `taccl_py.sweep.run_jobs` as "
             "`taccl sweep` runs them.", "",
             "| workers | wall s | load average before / after | speedup | results files identical |",
             "|---|---|---|---|---|",
             f"| 1 (in-process) | {wall['1']:.1f} | {load['1'][0]:.2f} / {load['1'][1]:.2f} | 1.00x | |",
             f"| 2 (process pool) | {wall['2']:.1f} | {load['2'][0]:.2f} / {load['2'][1]:.2f} | "
             f"{data['speedup']:.2f}x | {'yes' if data['identical'] else '**no**'} |", "",
             "Two workers on two cores cannot reach 2x: each worker process imports the solvers once (a few "
             "seconds), the jobs differ in length so the last ones run alone, and the machine may be shared "
             "(the load averages). Identical means byte-identical records apart from their `measured` wall "
             "times.", ""]
    for collective in data["collectives"]:
        mine = sorted((p for p in points if p.collective == collective), key=lambda p: p.size_bytes)
        sizes = tuple(p.size_bytes for p in mine)
        series = [TimeSeries("taccl synthesized", SeriesKind.SYNTHESIZED, sizes,
                             tuple(p.synthesized_time_us for p in mine))]
        for name in sorted({n for p in mine for n in p.baselines_us}):
            series.append(TimeSeries(f"NCCL-style {name}", SeriesKind.BASELINE, sizes,
                                     tuple(p.baselines_us.get(name) for p in mine)))
        series.append(TimeSeries("lower bound", SeriesKind.BOUND, sizes, tuple(p.bound_us for p in mine)))
        save_figure(algbw_figure(f"{collective} on {data['topology']} (16 GPUs)", series),
                    figures / _figure_name(collective))
        lines += [f"![{collective} algbw versus size](figures/{_figure_name(collective)})", "",
                  "| size | taccl algbw | algorithm | best baseline algbw | bound algbw | efficiency |",
                  "|---|---|---|---|---|---|"]
        for p in mine:
            best = p.best_baseline
            algbw = p.algbw(p.time_us)
            bound = p.algbw(p.bound_us)
            lines.append(f"| {format_bytes(p.size_bytes)} | {algbw:.2f} | {p.algorithm} | "
                         f"{best[0]} {p.algbw(best[1]):.2f} | {bound:.2f} | {100 * (p.efficiency or 0):.1f}% |"
                         if best and algbw and bound else f"| {format_bytes(p.size_bytes)} | - | - | - | - | - |")
        lines.append("")
    return "\n".join(lines)


def headline(data: dict[str, Any]) -> list[list[str]]:
    speed = f"{data['speedup']:.2f}x"
    return [[f"sweep of {data['jobs']} jobs ({data['topology']}, {len(data['sizes'])} sizes)",
             f"`--jobs 2` {speed} faster than `--jobs 1`, identical results: "
             f"{'yes' if data['identical'] else 'no'}", f"{data['wall_s']['2']:.0f} s"]]
