"""Schedules as JSON files: save, load, and time them through ``taccl simulate --algorithm FILE.json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run

from taccl_py.baselines import baseline
from taccl_py.library import resolve_topology
from taccl_py.schedule import load_schedule, save_schedule
from taccl_py.simulator import simulate


def test_saved_schedule_round_trips_and_times_like_the_original(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    topo = resolve_topology("ndv2")
    schedule = baseline(topo, "allreduce", "ring", channels=2)
    path = tmp_path / "ar.json"
    save_schedule(schedule, topo, path)
    loaded = load_schedule(path, topo)
    assert loaded.transfers == schedule.transfers and loaded.collective == schedule.collective
    expected = simulate(topo, schedule, 2**24)
    code, out, err = run(["simulate", "--topology", "ndv2", "--size", "16MiB", "-a", str(path), "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["collective"] == "allreduce" and data["correct"] is True
    assert data["time_us"] == pytest.approx(expected.time_us, rel=1e-12)
    assert 0 < data["efficiency"] <= 1


def test_schedule_file_errors_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo = resolve_topology("ndv2")
    path = tmp_path / "ag.json"
    save_schedule(baseline(topo, "allgather", "ring"), topo, path)
    code, _, err = run(["simulate", "--topology", "ndv2", "--size", "1MB", "-a", str(path), "-c", "allreduce"],
                       capsys)
    assert code == 2 and err.strip() == "taccl: error: --collective: the schedule is for allgather, not allreduce"
    code, _, err = run(["simulate", "--topology", "ndv2", "--size", "1MB", "-a", str(path), "--channels", "2"],
                       capsys)
    assert code == 2 and err.count("\n") == 1 and "--channels" in err
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    code, _, err = run(["simulate", "--topology", "ndv2", "--size", "1MB", "-a", str(broken)], capsys)
    assert code == 2 and err.count("\n") == 1 and str(broken) in err and "not valid JSON" in err
    missing = tmp_path / "missing.json"
    code, _, err = run(["simulate", "--topology", "ndv2", "--size", "1MB", "-a", str(missing)], capsys)
    assert code == 2 and err.count("\n") == 1 and "no such file" in err


def test_incorrect_schedule_file_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo = resolve_topology("ndv2")
    schedule = baseline(topo, "allgather", "ring", channels=1)
    short = schedule.with_transfers(schedule.transfers[:-1])  # one chunk never reaches its last rank
    path = tmp_path / "short.json"
    save_schedule(short, topo, path)
    code, out, _ = run(["simulate", "--topology", "ndv2", "--size", "1MB", "-a", str(path), "--json"], capsys)
    assert code == 1
    data = json.loads(out)
    assert data["correct"] is False and data["time_us"] is None and data["error"]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["transfers"][3].__setitem__("not_before_us", float("nan")),
     "transfers[3] has a malformed field: not_before_us must be a number in 0..1e+09 us (MAX_START_US), got nan"),
    (lambda d: d["transfers"][3].__setitem__("not_before_us", -1.0),
     "transfers[3] has a malformed field: not_before_us must be a number in 0..1e+09 us (MAX_START_US), got -1.0"),
    (lambda d: d["collective"].__setitem__("kind", "bogus"), "collective.kind unknown collective 'bogus'"),
    (lambda d: d["transfers"][2].__setitem__("chunks", [999]), "transfers[2] chunk 999 out of range 0..7"),
])
def test_bad_schedule_fields_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       edit: Callable[[dict[str, Any]], None], message: str) -> None:
    topo = resolve_topology("ndv2")
    path = tmp_path / "ag.json"
    save_schedule(baseline(topo, "allgather", "ring", channels=1), topo, path)
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    code, _, err = run(["simulate", "--topology", "ndv2", "--size", "1MB", "-a", str(path)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"taccl: error: {path}: {message}"), err
