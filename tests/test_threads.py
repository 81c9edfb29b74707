"""CPUs a process keeps busy, and work started in a thread of its own."""

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


def test_ctrl_c_with_simulations_in_threads_leaves_at_once(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Interrupted while a background run is still in the kernel: the one line, then an immediate exit with 130
    (not the interpreter's wait for the thread, whose finalization would abort the process); none running: the
    usual exit."""
    import taccl_py.cli.main as cli_main
    import taccl_py.cli.synth_cmd as synth_cmd
    import taccl_py.threads as threads

    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    left: list[int] = []
    really_running = threads.background_running

    def exit_now(status: int) -> None:
        left.append(status)
        raise SystemExit(status)

    monkeypatch.setattr(synth_cmd, "synthesize", interrupt)
    monkeypatch.setattr(cli_main.os, "_exit", exit_now)
    for running in (True, False):
        monkeypatch.setattr(threads, "background_running", lambda running=running: running)
        with pytest.raises(SystemExit) as done:
            cli_main.main(["synthesize", "-t", "ring8", "-c", "allgather", "-s", "1KB"])
        assert done.value.code == 130 and capsys.readouterr().err == "taccl: interrupted\n"
    assert left == [130]
    release = threading.Event()
    try:
        started = in_background(lambda: release.wait(10))
        assert really_running()
    finally:
        release.set()
    assert started.result(10) and threads.wait_background(10) and not really_running()
