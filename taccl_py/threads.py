"""CPUs a process may keep busy, and work started in a thread of its own.

The compiled simulator releases the GIL, so simulations of one schedule under several protocols' costs, or one
next to the lowering (which works in Python), run side by side in threads (:mod:`taccl_py.predict`,
``taccl synthesize -o``). A process of a ``--jobs N`` pool gets its share of the machine's CPUs
(:func:`share_cpus`), so N jobs do not each start as many threads as the machine has CPUs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any, TypeVar

__all__ = ["BACKGROUND_NAME", "CPUS_ENV", "Cancelled", "available_cpus", "background_running", "in_background",
           "share_cpus", "wait_background"]

_T = TypeVar("_T")

_lock = threading.Lock()
_started: set[Future[Any]] = set()

BACKGROUND_NAME = "taccl-background"
"""The name of every thread :func:`in_background` starts."""

CPUS_ENV = "TACCL_CPUS"
"""When set (a positive integer), the CPUs this process keeps busy: what a job pool gives each of its workers."""


def available_cpus() -> int:
    """The CPUs this process may keep busy: :data:`CPUS_ENV` when set, else those its affinity allows."""
    given = os.environ.get(CPUS_ENV, "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def share_cpus(cpus: int) -> None:
    """This process keeps at most ``cpus`` CPUs busy (a pool worker's initializer: its share of the machine)."""
    os.environ[CPUS_ENV] = str(max(1, cpus))


class Cancelled(Exception):
    """Work started ahead stopped at a point where it checks whether it is still wanted."""


def in_background(work: Callable[[], _T]) -> Future[_T]:
    """``work`` run in a thread of its own; its result or exception in the future.

    Not a daemon: the process waits for it before it exits. A daemon thread still inside the compiled kernel
    when the interpreter finalizes aborts the process ("terminate called without an active exception"), so work
    whose result is no longer wanted is stopped where it checks (:class:`Cancelled`), not left behind."""
    future: Future[_T] = Future()
    with _lock:
        _started.add(future)

    def run() -> None:
        try:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(work())
                except BaseException as exc:  # handed to whoever waits for it
                    future.set_exception(exc)
        finally:
            with _lock:
                _started.discard(future)

    threading.Thread(target=run, name=BACKGROUND_NAME, daemon=False).start()
    return future


def background_running() -> bool:
    """Whether work :func:`in_background` started is still under way (its result not set yet)."""
    with _lock:
        return any(not f.done() for f in _started)


def wait_background(timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the work :func:`in_background` started; whether all of it ended."""
    with _lock:
        pending = list(_started)
    return not wait(pending, timeout=timeout_s).not_done
