"""Where sweep jobs run: in this process, in a pool of local processes, or on a Ray cluster.

All three hand back ``concurrent.futures.Future`` objects, so :func:`taccl_py.sweep.runner.run_jobs`
has one code path for them. Local workers are started with ``spawn`` (a fresh interpreter, like a Ray
worker: no state inherited from the parent, no fork of a threaded process). Ray is optional
(``pip install 'taccl_py[ray]'``) and imported only when asked for.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from taccl_py.errors import InputError
from taccl_py.sweep.runner import Job, JobFunction, execute_job

__all__ = ["InlineBackend", "ProcessBackend", "RayBackend", "make_backend"]

_Triple = tuple[Any, str | None, dict[str, Any]]


class InlineBackend:
    """Runs each job in this process when it is submitted (``--jobs 1``): no pickling, no workers."""

    name = "in-process"
    slots = 1

    def submit(self, function: JobFunction, job: Job) -> Future[_Triple]:
        future: Future[_Triple] = Future()
        future.set_result(execute_job(function, job.payload))
        return future

    def close(self, *, cancel: bool) -> None:
        return None


class ProcessBackend:
    """A pool of ``workers`` local processes (``--jobs N``)."""

    name = "local process pool"

    def __init__(self, workers: int) -> None:
        self.slots = 2 * workers
        from taccl_py.threads import available_cpus, share_cpus

        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=share_cpus, initargs=(available_cpus() // workers,))

    def submit(self, function: JobFunction, job: Job) -> Future[_Triple]:
        return self._pool.submit(execute_job, function, job.payload)

    def close(self, *, cancel: bool) -> None:
        self._pool.shutdown(wait=not cancel, cancel_futures=cancel)  # an interrupt does not wait for running jobs


class RayBackend:
    """Jobs as Ray tasks on the cluster at ``address`` (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``), or on a
    new single-machine Ray instance with ``local`` (``num_cpus`` caps it). Each task asks for its job's CPUs."""

    name = "Ray"

    def __init__(self, address: str, *, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise InputError("needs Ray, which is not installed: pip install 'taccl_py[ray]'",
                             where="--ray") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            options: dict[str, Any] = {"address": address, "logging_level": logging.WARNING,
                                       "log_to_driver": False, "configure_logging": True}
            if address == "local":
                options.update(num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False)
            try:
                ray.init(**options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise InputError(f"cannot start or reach Ray at {address!r}: {exc}", where="--ray") from None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.slots = max(2, 2 * cpus)
        self._remote = ray.remote(execute_job)
        self._refs: list[Any] = []

    def submit(self, function: JobFunction, job: Job) -> Future[_Triple]:
        ref = self._remote.options(num_cpus=job.cpus).remote(function, job.payload)
        self._refs.append(ref)
        future: Future[_Triple] = ref.future()
        return future

    def close(self, *, cancel: bool) -> None:
        if cancel:  # do not leave tasks running on a cluster nobody listens to
            for ref in self._refs:
                with contextlib.suppress(Exception):  # already finished or gone: nothing to cancel
                    self._ray.cancel(ref)
        self._refs.clear()
        if self._started:
            self._ray.shutdown()


def make_backend(jobs: int, ray_address: str | None) -> InlineBackend | ProcessBackend | RayBackend:
    """The backend the command line asks for: Ray when an address is given, else ``jobs`` local processes."""
    if jobs < 1:
        raise InputError(f"must be >= 1 (got {jobs})", where="--jobs")
    if ray_address is not None:
        return RayBackend(ray_address, num_cpus=jobs if ray_address == "local" else None)
    return InlineBackend() if jobs == 1 else ProcessBackend(jobs)
