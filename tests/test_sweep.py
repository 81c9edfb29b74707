"""The job runner and ``taccl sweep``: streaming results, resume after a kill, the same file whatever the
backend or the order jobs finish in, Ray's local mode."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any

import pytest
from cli_runner import only_json, run
from hypothesis import given
from hypothesis import strategies as st

from taccl_py.errors import InputError, TacclError
from taccl_py.sweep import (
    InlineBackend,
    Job,
    ProcessBackend,
    ResultsFile,
    SweepOptions,
    SweepTask,
    grid_jobs,
    run_jobs,
    run_sweep_job,
    thin_sizes,
)

TACCL = str(Path(sys.executable).with_name("taccl"))


# Job functions live at module level: the workers of a process pool import them by name.
def square_job(payload: tuple[int, float, str | None]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Square a number after a delay; ``log`` (a file) records every call so tests can count them."""
    value, delay_s, log = payload
    time.sleep(delay_s)
    if log:
        with open(log, "a") as handle:
            handle.write(f"{value}\n")
    if value < 0:
        raise InputError(f"negative input {value}", where="payload")
    return {"square": value * value}, {"delay_s": delay_s}


def square_jobs(values: list[int], *, reverse_delays: bool = False, log: Path | None = None) -> list[Job]:
    n = len(values)
    return [Job(f"v={v}", (v, 0.05 * (n - k) if reverse_delays else 0.0, str(log) if log else None), {"value": v})
            for k, v in enumerate(values)]


def without_measured(path: Path) -> list[dict[str, Any]]:
    """The records of a results file in file order, less the wall-clock part."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        line.pop("measured")
    return lines


# ------------------------------------------------------------------ runner
@pytest.mark.slow
def test_the_file_does_not_depend_on_backend_or_finishing_order(tmp_path: Path) -> None:
    jobs = square_jobs(list(range(8)), reverse_delays=True)  # later jobs finish first in the pool
    inline, pool = tmp_path / "inline.jsonl", tmp_path / "pool.jsonl"
    finished: list[str] = []
    run_jobs(square_job, jobs, InlineBackend(), sink=ResultsFile(inline))
    records = run_jobs(square_job, jobs, ProcessBackend(2), sink=ResultsFile(pool),
                       progress=lambda done, total, r: finished.append(r.key) if r else None)
    assert finished != [j.key for j in jobs]  # they did finish out of order ...
    assert [r.key for r in records] == [j.key for j in jobs]
    assert without_measured(inline) == without_measured(pool)  # ... and the files agree
    assert [line["key"] for line in without_measured(pool)] == [j.key for j in jobs]
    assert without_measured(pool)[3]["result"] == {"square": 9}
    measured = json.loads(pool.read_text().splitlines()[0])["measured"]
    assert set(measured) == {"delay_s", "wall_s", "host"}


def test_resume_never_recomputes_a_finished_job(tmp_path: Path) -> None:
    log, out = tmp_path / "calls.log", tmp_path / "r.jsonl"
    jobs = square_jobs(list(range(6)), log=log)

    def stop_after_two(done: int, total: int, record: object) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_jobs(square_job, jobs, InlineBackend(), sink=ResultsFile(out), progress=stop_after_two)
    assert len(out.read_text().splitlines()) == 2  # finished work is on disk at once
    first = out.read_text().splitlines()
    records = run_jobs(square_job, jobs, InlineBackend(), sink=ResultsFile(out))
    assert log.read_text().split() == ["0", "1", "2", "3", "4", "5"]  # 0 and 1 ran once
    assert [r.resumed for r in records] == [True, True, False, False, False, False]
    assert out.read_text().splitlines()[:2] == first  # kept as written, measured figures included


def test_a_failed_job_is_recorded_and_the_others_go_on(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    records = run_jobs(square_job, square_jobs([2, -1, 3]), InlineBackend(), sink=ResultsFile(out))
    assert [r.error for r in records] == [None, "payload: negative input -1", None]
    assert records[1].result is None and records[2].result == {"square": 9}
    assert json.loads(out.read_text().splitlines()[1])["error"] == "payload: negative input -1"


def test_a_line_cut_by_a_kill_is_dropped_and_the_job_rerun(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    jobs = square_jobs([1, 2, 3])
    run_jobs(square_job, jobs, InlineBackend(), sink=ResultsFile(out))
    whole = out.read_text().splitlines()
    out.write_text("\n".join(whole[:2]) + "\n" + whole[2][:25])  # the third line half-written
    records = run_jobs(square_job, jobs, InlineBackend(), sink=ResultsFile(out))
    assert [r.resumed for r in records] == [True, True, False]
    assert without_measured(out)[2]["result"] == {"square": 9}


def test_a_foreign_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text('{"key": "a", "job": {}, "result": null, "error": null, "measured": {}}\nhello\n')
    with pytest.raises(InputError, match=r"r\.jsonl:2: not a JSON line"):
        ResultsFile(out).load()
    out.write_text('{"key": 3}\n')
    with pytest.raises(InputError, match=r"r\.jsonl:1: field 'key'"):
        ResultsFile(out).load()


def test_records_of_other_jobs_are_kept_after_the_grid(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    run_jobs(square_job, square_jobs([5, 1]), InlineBackend(), sink=ResultsFile(out))
    run_jobs(square_job, square_jobs([3, 2]), InlineBackend(), sink=ResultsFile(out))
    assert [line["key"] for line in without_measured(out)] == ["v=3", "v=2", "v=1", "v=5"]


def test_duplicate_keys_are_refused() -> None:
    with pytest.raises(InputError, match="appears twice"):
        run_jobs(square_job, square_jobs([1, 1]), InlineBackend())


class LateLookingBackend(ProcessBackend):
    """A process pool whose runner looks late, as on a loaded machine: after submitting the job that kills its
    worker, it waits until that job is over, so the runner then finds it lost and the job before it finished,
    both at once ("die" sorts before "v=2": the order it handles them in)."""

    def submit(self, function: Any, job: Job) -> Future[Any]:
        future = super().submit(function, job)
        if job.payload[0] == DIE:
            wait([future])
        return future


@pytest.mark.parametrize("backend", [ProcessBackend, LateLookingBackend])
def test_a_dead_worker_loses_nothing_finished(tmp_path: Path, backend: type[ProcessBackend]) -> None:
    out, log = tmp_path / "r.jsonl", tmp_path / "calls.log"
    jobs = [*square_jobs([1, 2], log=log), Job("die", (DIE, 0.0, None), {})]
    with pytest.raises(TacclError, match="'die' was lost"):
        run_jobs(exit_job, jobs, backend(1), sink=ResultsFile(out))
    assert [line["key"] for line in without_measured(out)] == ["v=1", "v=2"]
    assert log.read_text().split() == ["1", "2"]
    records = run_jobs(square_job, square_jobs([1, 2, 3], log=log), InlineBackend(), sink=ResultsFile(out))
    assert [r.resumed for r in records] == [True, True, False]  # a rerun resumes: only v=3 is computed
    assert log.read_text().split() == ["1", "2", "3"]


DIE = 13


def exit_job(payload: tuple[int, float, str | None]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Like square_job, but the value DIE ends the worker process at once (as the OOM killer would)."""
    if payload[0] == DIE:
        os._exit(3)
    return square_job(payload)


@given(st.lists(st.integers(0, 40), min_size=1, max_size=12, unique=True), st.sampled_from([1, 2, 4, 8, 1024]))
def test_thin_sizes(exponents: list[int], step: int) -> None:
    sizes = [1 << e for e in sorted(exponents)]
    kept = thin_sizes(sizes, step)
    assert kept[0] == sizes[0] and kept[-1] == sizes[-1]
    assert set(kept) <= set(sizes) and kept == sorted(kept)
    assert all(b >= a * step for a, b in itertools.pairwise(kept[:-1]))  # the last may be closer


def test_thin_sizes_wants_a_power_of_two() -> None:
    with pytest.raises(InputError, match="power of two"):
        thin_sizes([1, 2, 4], 3)


# ------------------------------------------------------------------ real jobs
def test_sweep_jobs_have_stable_keys() -> None:
    jobs = grid_jobs(["ring8"], ["allgather"], [1024], list(SweepTask), SweepOptions(30, 1, 0))
    assert [j.key for j in jobs] == ["synthesize|ring8|allgather|1024|tl=30,threads=1,seed=0,solver=cpsat",
                                     "baselines|ring8|allgather|1024|-"]
    result, _ = run_sweep_job(jobs[1].payload)
    times = result["baselines_us"]
    assert result["best"] == min(times, key=lambda name: times[name]) == "oneshot"  # latency trees at 1 KB
    assert result["bound_us"] <= result["best_time_us"] < times["ring"]


def sweep(tmp_path: Path, name: str, *extra: str) -> list[str]:
    return ["sweep", "-t", "ring8,dgx-a100", "-c", "allgather", "-s", "1KB:4KB", "--time-limit", "20", "-o",
            str(tmp_path / name), *extra]


@pytest.mark.slow
def test_cli_jobs_2_equals_jobs_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*sweep(tmp_path, "one.jsonl"), "--jobs", "1", "--json"], capsys)
    assert code == 0 and err == ""  # silent but for the one JSON object
    summary = only_json(out)
    assert (summary["jobs"], summary["computed"], summary["resumed"], summary["failed"]) == (12, 12, 0, [])
    point = summary["points"][0]
    assert (point["topology"], point["size_bytes"]) == ("ring8", 1024)
    assert point["bound_us"] <= point["time_us"] <= point["baselines_us"]["ring"]
    code, _, _ = run([*sweep(tmp_path, "two.jsonl"), "--jobs", "2", "--json"], capsys)
    assert code == 0
    assert without_measured(tmp_path / "one.jsonl") == without_measured(tmp_path / "two.jsonl")
    code, out, _ = run([*sweep(tmp_path, "one.jsonl"), "--json"], capsys)  # a rerun: nothing to do
    assert code == 0 and (only_json(out)["computed"], only_json(out)["resumed"]) == (0, 12)


@pytest.mark.slow
def test_cli_sweep_killed_halfway_resumes_to_the_same_file(tmp_path: Path) -> None:
    args = ["-t", "dgx-a100", "-c", "allgather,allreduce", "-s", "1KB:64KB", "--size-step", "2", "--jobs", "1",
            "--time-limit", "20", "--json"]
    whole, killed = tmp_path / "whole.jsonl", tmp_path / "killed.jsonl"
    subprocess.run([TACCL, "sweep", *args, "-o", str(whole)], check=True, capture_output=True)
    total = len(whole.read_text().splitlines())
    victim = subprocess.Popen([TACCL, "sweep", *args, "-o", str(killed)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and victim.poll() is None:
        if killed.exists() and len(killed.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    before = killed.read_text().splitlines()
    assert 3 <= len(before) < total, "the sweep was not killed halfway"
    done = subprocess.run([TACCL, "sweep", *args, "-o", str(killed)], check=True, capture_output=True, text=True)
    summary = json.loads(done.stdout)
    assert summary["resumed"] == len([line for line in before if line.endswith("}")])
    assert without_measured(killed) == without_measured(whole)
    after = killed.read_text().splitlines()
    assert all(line in after for line in before if line.endswith("}"))  # finished jobs kept, not recomputed


def test_cli_sweep_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["sweep", "-t", "no-such-machine", "-c", "allgather", "-s", "1KB", "-o",
                        str(tmp_path / "r.jsonl")], capsys)
    assert code == 2 and "no-such-machine" in err
    code, _, err = run(["sweep", "-t", "ring8", "-c", "allgather", "-s", "1KB", "-o", str(tmp_path / "r.txt")],
                       capsys)
    assert code == 2 and "-o" in err and ".jsonl" in err
    code, _, err = run(["sweep", "-t", "ring8", "-c", "allgather", "-s", "1KB:1MB", "--size-step", "3", "-o",
                        str(tmp_path / "r.jsonl")], capsys)
    assert code == 2 and "--size-step" in err
    assert not (tmp_path / "r.jsonl").exists()


# ------------------------------------------------------------------ Ray
def _ray_or_skip() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("TACCL_REQUIRE_RAY"):
            raise
        pytest.skip("Ray is not installed (pip install 'taccl_py[ray]'); .ci/run installs it")


@pytest.mark.slow
def test_ray_local_mode_gives_the_same_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _ray_or_skip()
    args = ["-t", "ring8", "-c", "allgather", "-s", "1KB:2KB", "--time-limit", "20", "--json"]
    code, _, _ = run(["sweep", *args, "--jobs", "1", "-o", str(tmp_path / "local.jsonl")], capsys)
    assert code == 0
    code, out, _ = run(["sweep", *args, "--ray", "local", "--jobs", "2", "-o", str(tmp_path / "ray.jsonl")], capsys)
    assert code == 0 and only_json(out)["backend"] == "Ray"
    assert without_measured(tmp_path / "local.jsonl") == without_measured(tmp_path / "ray.jsonl")


def test_ray_missing_is_one_clear_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    code, _, err = run(["sweep", "-t", "ring8", "-c", "allgather", "-s", "1KB", "--ray", "auto", "-o",
                        str(tmp_path / "r.jsonl")], capsys)
    assert code == 2 and err.strip() == ("taccl: error: --ray: needs Ray, which is not installed: "
                                         "pip install 'taccl_py[ray]'")


# ------------------------------------------------------------------ progress
def test_progress_shows_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from taccl_py.cli import jobs_cli

    screen = io.StringIO()
    monkeypatch.setattr(jobs_cli, "err_console", Console(file=screen, force_terminal=True, width=120))
    monkeypatch.setattr(jobs_cli, "out_console", Console(file=io.StringIO(), force_terminal=True))
    with jobs_cli.job_progress("sweep (test)", True) as progress:
        assert progress is not None
        run_jobs(square_job, square_jobs([1, 2, 3]), InlineBackend(), progress=progress)
    assert "sweep (test)" in screen.getvalue() and "3/3" in screen.getvalue()
    with jobs_cli.job_progress("sweep (test)", False) as progress:  # --json
        assert progress is None
    monkeypatch.setattr(jobs_cli, "err_console", Console(file=io.StringIO(), force_terminal=False))
    with jobs_cli.job_progress("sweep (test)", True) as progress:  # a pipe
        assert progress is None


@pytest.mark.slow
def test_synthesize_size_range_jobs_2_equals_jobs_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`taccl synthesize -s LO:HI` runs its sizes through the same runner: --jobs 2 changes nothing."""
    def rows(jobs: str, out: Path) -> list[dict[str, Any]]:
        code, stdout, _ = run(["synthesize", "-t", "dgx-a100", "-c", "allgather", "-s", "1KB:4KB", "--threads", "1",
                               "--jobs", jobs, "-o", str(out), "--json"], capsys)
        assert code == 0
        found = only_json(stdout)["rows"]
        for row in found:  # wall-clock figures
            for key in ("synthesis_s", "wall_s", "stages_s", "xml"):
                row.pop(key)
            for stage in row["solver_stages"]:
                stage.pop("time_s")
        return list(found)

    one, two = rows("1", tmp_path / "one"), rows("2", tmp_path / "two")
    assert one == two and [r["size_bytes"] for r in one] == [1024, 2048, 4096]
    for name in sorted(p.name for p in (tmp_path / "one").iterdir()):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()  # the same XML


def test_an_unknown_solver_is_bad_input_before_any_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.jsonl"
    code, _, err = run(["sweep", "-t", "ring8", "-c", "allgather", "-s", "1KB", "--solver", "bogus", "-o", str(out),
                        "-j", "1"], capsys)
    assert code == 2 and err.startswith("taccl: error: --solver: solver 'bogus' is not available"), err
    assert not out.exists()
    # a baselines-only sweep never runs a solver, so the option does not matter there
    code, _, err = run(["sweep", "-t", "ring8", "-c", "allgather", "-s", "1KB", "--task", "baselines",
                        "--solver", "bogus", "-o", str(out), "-j", "1"], capsys)
    assert code == 0, err
