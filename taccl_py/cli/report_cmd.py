"""``taccl report``: synthesize and compare over a size range and collectives; write one HTML page."""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

from taccl_py.cli.common import check_output_file, emit_json, json_option, out_console, sizes_from
from taccl_py.cli.jobs_cli import default_jobs, job_progress, jobs_option, ray_option
from taccl_py.collectives import parse_collective
from taccl_py.errors import InputError
from taccl_py.library import resolve_topology
from taccl_py.sweep.grid import SweepOptions, run_sweep_job, thin_sizes
from taccl_py.topology_io import atomic_write_text

__all__ = ["DEFAULTS", "QUICK", "ReportDefaults", "report_command"]


@dataclass(frozen=True)
class ReportDefaults:
    """What a report covers when the options do not say."""

    collectives: str
    size: str
    size_step: int
    time_limit: float


DEFAULTS = ReportDefaults("allgather,allreduce", "1KB:1GB", 8, 60.0)
"""About two minutes on two cores for a 16-GPU machine: 2 collectives x 8 sizes."""
QUICK = ReportDefaults("allgather", "64KB:1MB", 4, 10.0)
"""Seconds: one collective, three sizes (for tests and a first look)."""


@click.command("report")
@click.option("--topology", "-t", "topology_spec", required=True, metavar="NAME|FILE",
              help="A shipped topology name or a topology file.")
@click.option("--collective", "-c", "collectives", multiple=True, metavar="NAME[,...]",
              help=f"Collectives (repeatable or comma-separated; default {DEFAULTS.collectives}).")
@click.option("--size", "-s", "size_spec", default=None, metavar="LO:HI",
              help=f"Size range, powers of two (default {DEFAULTS.size}).")
@click.option("--size-step", type=click.IntRange(min=1), default=None, metavar="K",
              help=f"Keep every size K times the previous one (default {DEFAULTS.size_step}).")
@click.option("-o", "--output", required=True, metavar="FILE.html", help="Where to write the page.")
@click.option("--quick", is_flag=True,
              help=f"Small defaults: {QUICK.collectives}, {QUICK.size} step {QUICK.size_step}, "
                   f"{QUICK.time_limit:g} s solver budget.")
@click.option("--time-limit", type=click.FloatRange(min=1.0), default=None,
              help=f"Solver budget per size, seconds (default {DEFAULTS.time_limit:g}).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Solver threads per synthesis (results do not depend on --jobs).")
@click.option("--seed", type=int, default=0, show_default=True)
@jobs_option()
@ray_option
@click.option("--results", "results_path", default=None, metavar="FILE.jsonl",
              help="Also stream the job results here; a rerun with it resumes (see taccl sweep).")
@json_option
def report_command(topology_spec: str, collectives: tuple[str, ...], size_spec: str | None, size_step: int | None,
                   output: str, quick: bool, time_limit: float | None, threads: int, seed: int, jobs: int | None,
                   ray_address: str | None, results_path: str | None, as_json: bool) -> None:
    """Write a self-contained HTML report: synthesized vs NCCL-style baselines vs the bound, with pictures.

    Example: taccl report -t dgx-a100x2 -o report.html
    """
    from taccl_py.report import ReportRequest, assemble_report, render_html, report_jobs
    from taccl_py.sweep.backends import make_backend
    from taccl_py.sweep.runner import run_jobs
    from taccl_py.sweep.store import ResultsFile

    defaults = QUICK if quick else DEFAULTS
    target = Path(output)
    if target.suffix.lower() not in (".html", ".htm"):
        raise InputError("give an .html file", where="-o")
    check_output_file(output, "-o")
    if results_path is not None:
        check_output_file(results_path, "--results")
    resolve_topology(topology_spec)
    names = [c.strip() for value in (collectives or (defaults.collectives,)) for c in value.split(",")
             if c.strip()]
    kinds = tuple(dict.fromkeys(parse_collective(c, where="--collective").value for c in names))
    sizes = tuple(thin_sizes(sizes_from(size_spec or defaults.size), size_step or defaults.size_step))
    options = SweepOptions(time_limit_s=time_limit or defaults.time_limit, threads=threads, seed=seed)
    command = shlex.join(["taccl", *sys.argv[1:]]) if Path(sys.argv[0]).name == "taccl" else ""
    request = ReportRequest(topology_spec, kinds, sizes, options, command)
    sink = ResultsFile(results_path) if results_path else None
    backend = make_backend(jobs or default_jobs(), ray_address)
    started = time.perf_counter()
    with job_progress(f"report ({backend.name})", not as_json) as progress:
        records = run_jobs(run_sweep_job, report_jobs(request), backend, sink=sink, progress=progress)
    report = assemble_report(request, records)
    atomic_write_text(target, render_html(report))
    wall_s = time.perf_counter() - started
    if as_json:
        emit_json({"report": str(target), "topology": report.topology.name, "collectives": list(kinds),
                   "sizes": list(sizes), "jobs": len(records), "failed": list(report.failures),
                   "points": [p.to_json() for c in report.collectives for p in c.points],
                   "wall_s": round(wall_s, 3)})
    else:
        out_console.print(f"wrote {target}: {', '.join(kinds)} on {report.topology.name}, {len(sizes)} sizes, "
                          f"{len(records)} jobs in {wall_s:.1f} s" +
                          (f"; {len(report.failures)} failed (listed in the page)" if report.failures else ""),
                          markup=False)
    if report.failures:
        raise click.exceptions.Exit(1)
