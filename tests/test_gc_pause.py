"""The collector's pause nests across threads and gives back what it found."""

from __future__ import annotations

import gc
import threading

from taccl_py.gc_pause import paused_gc


def test_the_collector_comes_back_when_the_last_pause_ends() -> None:
    """Two threads pause it; the first to finish does not turn it back on under the other."""
    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with paused_gc():
            first_in.set()
            second_in.wait(5)  # both pauses overlap
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with paused_gc():
            second_in.set()
            first_out.wait(5)
            seen.append(gc.isenabled())  # the first pause has ended, this one has not

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off_and_false_leaves_it_alone() -> None:
    gc.disable()
    try:
        with paused_gc(), paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with paused_gc(False):
        assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
