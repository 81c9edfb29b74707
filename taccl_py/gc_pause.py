"""Pause Python's cyclic garbage collector around work that makes millions of objects and no cycles.

Simulations and the lowering allocate millions of short-lived tuples and objects; the collector's passes would
walk them again and again. :func:`paused_gc` nests and is shared by threads (a calibrated prediction runs its
protocols in threads while the lowering runs in the main one): the collector comes back when the last pause
ends, and only if it was running when the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]

_lock = threading.Lock()
_depth = 0
_resume = False


@contextmanager
def paused_gc(pause: bool = True) -> Iterator[None]:
    """The collector off for the block (``pause`` False: left as it is)."""
    global _depth, _resume
    if not pause:
        yield
        return
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
