"""What the commands that run many jobs share: --jobs / --ray, and a progress bar on a terminal."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from taccl_py.cli.common import err_console, out_console
from taccl_py.errors import TacclError
from taccl_py.units import format_bytes

if TYPE_CHECKING:
    from taccl_py.sweep.runner import JobFunction, JobRecord, ProgressFn

__all__ = ["default_jobs", "job_progress", "jobs_option", "ray_option", "run_bands"]

F = TypeVar("F", bound=Callable[..., Any])


def default_jobs() -> int:
    """One job per core this process may use."""
    from taccl_py.threads import available_cpus

    return available_cpus()


def jobs_option(default: int | None = None) -> Callable[[F], F]:
    """``--jobs N``: jobs run at once on local cores (the default: one per core, or ``default``)."""
    help_default = "one per core" if default is None else str(default)
    return click.option("--jobs", "-j", "jobs", type=click.IntRange(min=1), default=default, metavar="N",
                        help=f"Jobs run at once in local processes (default: {help_default}); with --ray local, "
                             "the CPUs of the local Ray instance.")


def ray_option(func: F) -> F:
    return click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
                        help="Run the jobs on a Ray cluster: auto (RAY_ADDRESS or the local head), HOST:PORT, "
                             "ray://HOST:10001, or local (start a Ray instance on this machine). "
                             "Needs pip install 'taccl_py[ray]'.")(func)


def _describe(record: JobRecord) -> str:
    job = record.job
    parts = [str(job.get(k)) for k in ("task", "topology", "collective") if job.get(k) is not None]
    if "size_bytes" in job:
        parts.append(format_bytes(int(job["size_bytes"])))
    return " ".join(parts) + (" [failed]" if record.error else "")


@contextmanager
def job_progress(label: str, enabled: bool) -> Iterator[ProgressFn | None]:
    """A transient progress bar on stderr (jobs done / total, elapsed, remaining, last finished) when stdout and
    stderr are terminals and ``enabled``; otherwise no callback at all (silent in pipes and with --json)."""
    if not enabled or not err_console.is_terminal or not out_console.is_terminal:
        yield None
        return
    columns = (SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[last]}"))
    with Progress(*columns, console=err_console, transient=True) as progress:
        task = progress.add_task(label, total=None, last="")

        def update(done: int, total: int, record: JobRecord | None) -> None:
            progress.update(task, total=total, completed=done, last=_describe(record) if record else "")

        yield update


def run_bands(function: JobFunction, payloads: Sequence[Any], sizes: Sequence[int], jobs: int, *,
              show_progress: bool) -> list[dict[str, Any]]:
    """The sizes of ``taccl synthesize -s LO:HI`` as jobs (``--jobs N`` at once); their rows in size order."""
    from taccl_py.sweep import Job, make_backend, run_jobs

    grid = [Job(f"size={size}", payload, {"task": "synthesize", "size_bytes": size})
            for size, payload in zip(sizes, payloads, strict=True)]
    backend = make_backend(jobs, None)
    with job_progress(f"synthesizing {len(grid)} sizes ({backend.name})", show_progress) as progress:
        records = run_jobs(function, grid, backend, progress=progress)
    for record in records:
        if record.error is not None or record.result is None:
            raise TacclError(f"size {format_bytes(int(record.job['size_bytes']))}: {record.error}")
    return [dict(record.result) for record in records if record.result is not None]
