"""``taccl sweep``: a grid of topologies x collectives x sizes as independent jobs, locally or on Ray.

Results stream into a JSON-lines file (``-o``) as jobs finish; a rerun with the same file computes only
the missing jobs, and the finished file is in grid order whatever the order the jobs finished in.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from taccl_py.cli.common import (
    check_output_file,
    check_solver_option,
    emit_json,
    fmt,
    json_option,
    make_table,
    out_console,
    sizes_from,
)
from taccl_py.cli.jobs_cli import default_jobs, job_progress, jobs_option, ray_option
from taccl_py.collectives import parse_collective
from taccl_py.errors import InputError
from taccl_py.library import resolve_topology
from taccl_py.sweep.grid import SweepOptions, SweepTask, grid_jobs, run_sweep_job, thin_sizes
from taccl_py.units import format_bytes

__all__ = ["sweep_command"]


def _split(values: tuple[str, ...]) -> list[str]:
    """Repeated options and comma-separated lists alike, in the order given, without repeats."""
    out: list[str] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out


@click.command("sweep")
@click.option("--topology", "-t", "topologies", multiple=True, required=True, metavar="NAME|FILE[,...]",
              help="Topologies (repeatable, or comma-separated).")
@click.option("--collective", "-c", "collectives", multiple=True, required=True, metavar="NAME[,...]",
              help="Collectives (repeatable, or comma-separated): allgather, reducescatter, allreduce, ...")
@click.option("--size", "-s", "size_spec", required=True, metavar="SIZE|LO:HI",
              help="A size or a power-of-two range LO:HI (nccl-tests sizes, K/M/G binary).")
@click.option("--size-step", type=click.IntRange(min=1), default=1, show_default=True, metavar="K",
              help="Keep every size at least K times the previous one (K a power of two; the range ends stay).")
@click.option("--task", "tasks", type=click.Choice([t.value for t in SweepTask]), multiple=True,
              help="What to run per point (repeatable; default both): synthesize, baselines.")
@click.option("-o", "--output", required=True, metavar="FILE.jsonl",
              help="Results file, one JSON line per finished job; an existing one is resumed.")
@jobs_option()
@ray_option
@click.option("--time-limit", type=click.FloatRange(min=1.0), default=60.0, show_default=True,
              help="Solver budget per synthesize job, seconds.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Solver threads per synthesize job (part of the job: results do not depend on --jobs).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--solver", default="cpsat", show_default=True, help="Routing MILP solver (see taccl synthesize).")
@json_option
def sweep_command(topologies: tuple[str, ...], collectives: tuple[str, ...], size_spec: str, size_step: int,
                  tasks: tuple[str, ...], output: str, jobs: int | None, ray_address: str | None,
                  time_limit: float, threads: int, seed: int, solver: str, as_json: bool) -> None:
    """Run a grid of synthesize and baseline jobs in parallel; resume from the results file.

    Example: taccl sweep -t dgx-a100x2,ndv2x2 -c allgather,allreduce -s 1KB:1GB --size-step 4 -o sweep.jsonl
    """
    from taccl_py.sweep.backends import make_backend
    from taccl_py.sweep.runner import run_jobs
    from taccl_py.sweep.store import ResultsFile
    from taccl_py.sweep.summary import summarize

    names = _split(topologies)
    kinds = [parse_collective(c, where="--collective").value for c in _split(collectives)]
    for name in names:  # fail on a bad name now, not in every worker
        resolve_topology(name)
    chosen = [SweepTask(t) for t in tasks] if tasks else list(SweepTask)
    if SweepTask.SYNTHESIZE in chosen:
        check_solver_option(solver)
    sizes = thin_sizes(sizes_from(size_spec), size_step)
    if Path(output).suffix.lower() not in (".jsonl", ".json"):
        raise InputError("give a .jsonl file for the results", where="-o")
    check_output_file(output, "-o")
    sink = ResultsFile(output)
    grid = grid_jobs(names, kinds, sizes, chosen, SweepOptions(time_limit, threads, seed, solver))
    backend = make_backend(jobs or default_jobs(), ray_address)
    started = time.perf_counter()
    with job_progress(f"sweep ({backend.name})", not as_json) as progress:
        records = run_jobs(run_sweep_job, grid, backend, sink=sink, progress=progress)
    wall_s = time.perf_counter() - started
    failed = [r for r in records if r.error is not None]
    resumed = sum(1 for r in records if r.resumed)
    points = summarize(records)
    if as_json:
        emit_json({"results": output, "backend": backend.name, "jobs": len(records),
                   "computed": len(records) - resumed, "resumed": resumed,
                   "failed": [{"key": r.key, "error": r.error} for r in failed], "wall_s": round(wall_s, 3),
                   "points": [p.to_json() for p in points]})
    else:
        rows = []
        for p in points:
            best = p.best_baseline
            rows.append([p.topology, p.collective, format_bytes(p.size_bytes), fmt(p.algbw(p.time_us)),
                         p.algorithm or "-", f"{best[0]} {fmt(p.algbw(best[1]))}" if best else "-",
                         fmt(p.algbw(p.bound_us)), fmt(p.efficiency, 3), fmt(p.speedup_vs_best_baseline, 3)])
        out_console.print(make_table(
            f"sweep: {len(points)} points (algbw in GB/s; efficiency = bound / time)",
            ["topology", "collective", "size", "taccl algbw", "algorithm", "best baseline", "bound algbw",
             "efficiency", "speedup"], rows, right_align_from=2))
        out_console.print(f"{len(records)} jobs on the {backend.name} backend: {len(records) - resumed} run now, "
                          f"{resumed} from {output}, {len(failed)} failed; {wall_s:.1f} s", markup=False)
        for r in failed:
            out_console.print(f"failed: {r.key}: {r.error}", markup=False)
    if failed:
        raise click.exceptions.Exit(1)
