"""CPUs a process keeps busy, and work started in a daemon thread."""

from __future__ import annotations

import os
import threading

import pytest

from taccl_py.threads import CPUS_ENV, available_cpus, in_background, share_cpus


def test_a_pool_workers_share_is_what_it_keeps_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CPUS_ENV, raising=False)
    own = available_cpus()
    assert own >= 1
    share_cpus(0)  # never below one
    assert os.environ[CPUS_ENV] == "1" and available_cpus() == 1
    monkeypatch.setenv(CPUS_ENV, "3")
    assert available_cpus() == 3
    monkeypatch.setenv(CPUS_ENV, "none")  # not a count: the affinity again
    assert available_cpus() == own


def test_background_work_runs_in_a_thread_the_exit_waits_for_and_hands_back_its_error() -> None:
    """Not a daemon: one still in the compiled kernel when the interpreter finalizes would abort the process."""
    seen: list[tuple[bool, bool]] = []

    def work() -> int:
        here = threading.current_thread()
        seen.append((here is threading.main_thread(), here.daemon))
        return 7

    assert in_background(work).result(10) == 7 and seen == [(False, False)]

    def fails() -> int:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        in_background(fails).result(10)
