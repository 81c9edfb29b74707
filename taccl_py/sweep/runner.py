"""Run independent jobs on a backend, stream every finished result to a results file, resume from it.

A job is a key (unique and stable: the resume key), a payload (the argument of a module-level job
function, picklable) and a JSON description. The job function returns ``(result, measured)``: ``result``
is deterministic (the same inputs give the same result), ``measured`` holds wall-clock figures. Every
finished job is appended to the results file at once (one JSON line, flushed and fsynced), so a killed
run loses nothing finished and a rerun computes only what is missing. At the end the file is rewritten
in the order of the job list (then any records of other jobs, by key): its content does not depend on
the order in which jobs finished, nor on the backend.

Backends (see :mod:`taccl_py.sweep.backends`) turn ``submit`` into a ``concurrent.futures.Future``: one
loop serves the in-process, the process-pool and the Ray backend alike.
"""

from __future__ import annotations

import socket
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from taccl_py.errors import InputError, TacclError

__all__ = ["Backend", "Job", "JobFunction", "JobRecord", "ProgressFn", "execute_job", "run_jobs"]

JobFunction = Callable[[Any], tuple[dict[str, Any], dict[str, Any]]]
"""A module-level function: payload -> (deterministic result, wall-clock measurements)."""

ProgressFn = Callable[[int, int, "JobRecord | None"], None]
"""Called as (finished, total, the record just finished or None at the start)."""


@dataclass(frozen=True)
class Job:
    """One unit of work: ``key`` identifies it across runs; ``cpus`` is what it occupies (Ray schedules it)."""

    key: str
    payload: Any
    describe: Mapping[str, Any] = field(default_factory=dict)
    cpus: int = 1


@dataclass(frozen=True)
class JobRecord:
    """A finished job as stored: its result, or the error it ended with (an error is a result too)."""

    key: str
    job: Mapping[str, Any]
    result: Mapping[str, Any] | None
    error: str | None
    measured: Mapping[str, Any]
    resumed: bool = False
    """Read back from the results file rather than computed by this run (not stored)."""

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "job": dict(self.job), "result": None if self.result is None else dict(self.result),
                "error": self.error, "measured": dict(self.measured)}

    @staticmethod
    def from_json(data: Any, *, where: str) -> JobRecord:
        if not isinstance(data, dict):
            raise InputError(f"expected a JSON object, got {type(data).__name__}", where=where)
        for name, kinds in (("key", (str,)), ("job", (dict,)), ("result", (dict, type(None))),
                            ("error", (str, type(None))), ("measured", (dict,))):
            if not isinstance(data.get(name), kinds):
                raise InputError(f"field {name!r} is missing or of the wrong type", where=where)
        return JobRecord(data["key"], data["job"], data["result"], data["error"], data["measured"], resumed=True)


class Backend(Protocol):
    """Where jobs run. ``submit`` returns a future of :func:`execute_job`'s triple."""

    name: str
    slots: int
    """How many jobs to keep submitted at once (1 for the in-process backend: it runs a job on submit)."""

    def submit(self, function: JobFunction, job: Job) -> Future[tuple[Any, str | None, dict[str, Any]]]: ...

    def close(self, *, cancel: bool) -> None: ...


class ResultSink(Protocol):
    """Where finished records go (:class:`taccl_py.sweep.store.ResultsFile`, or nothing)."""

    def load(self) -> dict[str, JobRecord]: ...

    def append(self, record: JobRecord) -> None: ...

    def finalize(self, order: Sequence[str]) -> None: ...


def execute_job(function: JobFunction, payload: Any) -> tuple[Any, str | None, dict[str, Any]]:
    """Run one job where the backend put it: (result or None, error text or None, measured).

    Errors are caught here, on the worker, so that one failed job is recorded and the others go on;
    a :class:`TacclError` is the user's (an infeasible sketch, a bad file), anything else a bug and keeps
    its traceback's last line.
    """
    started = time.perf_counter()
    result: Any = None
    error: str | None = None
    measured: dict[str, Any] = {}
    try:
        result, measured = function(payload)
    except TacclError as exc:
        error = str(exc)
    except Exception as exc:  # a bug in one job must not lose the others; record it
        last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" ({last.filename.rsplit('/', 1)[-1]}:{last.lineno})" if last else ""
        error = f"internal error {type(exc).__name__}: {exc}{where}"
    return result, error, {**measured, "wall_s": round(time.perf_counter() - started, 3),
                           "host": socket.gethostname()}


def _failure(future: Future[Any]) -> BaseException | None:
    """Why a finished future has no result (its worker died, it was cancelled), or None."""
    try:
        return future.exception()
    except CancelledError as exc:
        return exc


def _check_keys(jobs: Sequence[Job]) -> None:
    seen: set[str] = set()
    for job in jobs:
        if job.key in seen:
            raise InputError(f"the job {job.key!r} appears twice in the grid", where="jobs")
        seen.add(job.key)


def run_jobs(function: JobFunction, jobs: Sequence[Job], backend: Backend, *, sink: ResultSink | None = None,
             progress: ProgressFn | None = None) -> list[JobRecord]:
    """Run every job not already in ``sink``; return the records in the order of ``jobs``.

    ``function`` must be a module-level function (workers import it by name). On an interrupt or a dead
    worker the pending jobs are cancelled and the error is raised; everything finished is in ``sink``.
    """
    _check_keys(jobs)
    done = sink.load() if sink is not None else {}
    pending = [job for job in jobs if job.key not in done]
    total = len(jobs)
    finished = total - len(pending)
    if progress:
        progress(finished, total, None)
    futures: dict[Future[tuple[Any, str | None, dict[str, Any]]], Job] = {}
    queue = iter(pending)
    try:
        while True:
            while len(futures) < max(1, backend.slots):
                job = next(queue, None)
                if job is None:
                    break
                futures[backend.submit(function, job)] = job
            if not futures:
                break
            ready, _ = wait(list(futures), return_when=FIRST_COMPLETED)
            lost = next(((futures[f], exc) for f in sorted(ready, key=lambda f: futures[f].key)
                         if (exc := _failure(f)) is not None), None)
            if lost is not None:  # first save every job that did finish, those ready with it and since
                ready = {f for f in futures if f.done() and _failure(f) is None}
            for future in sorted(ready, key=lambda f: futures[f].key):
                job = futures.pop(future)
                result, error, measured = future.result()
                record = JobRecord(job.key, dict(job.describe), result, error, measured)
                if sink is not None:
                    sink.append(record)
                done[job.key] = record
                finished += 1
                if progress:
                    progress(finished, total, record)
            if lost is not None:
                job, exc = lost
                raise TacclError(f"job {job.key!r} was lost on the {backend.name} backend "
                                 f"({type(exc).__name__}: {exc}); every finished job is saved, rerun to "
                                 "resume") from exc
    except BaseException:
        backend.close(cancel=True)
        raise
    backend.close(cancel=False)
    if sink is not None:
        sink.finalize([job.key for job in jobs])
    return [done[job.key] for job in jobs]
