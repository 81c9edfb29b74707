"""Calibrated predictions: protocols timed side by side give what one loop over them gives."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import taccl_py.fast_sim as fast_sim
import taccl_py.predict as predict
from taccl_py.runtime import PROTOCOLS, Protocol
from taccl_py.simulator import SimOptions

_TIMES = st.one_of(st.none(), st.sampled_from([5.0, 10.0, 20.0, 40.0]))


def _one_loop(order: tuple[Protocol, ...], floors: dict[Protocol, float],
              times: dict[Protocol, float | None]) -> list[tuple[Protocol, float | None]]:
    """What a plain loop runs: a protocol is skipped when its floor is at or above the best time before it."""
    ran: list[tuple[Protocol, float | None]] = []
    best: float | None = None
    for p in order:
        if floors and best is not None and floors[p] >= best:
            continue
        ran.append((p, times[p]))
        if times[p] is not None and (best is None or times[p] < best):  # type: ignore[operator]
            best = times[p]
    return ran


@settings(max_examples=200, deadline=None)
@given(order=st.permutations(PROTOCOLS), floors=st.one_of(st.just({}), st.fixed_dictionaries(
    {p: st.sampled_from([1.0, 5.0, 10.0, 20.0, 50.0]) for p in PROTOCOLS})),
    times=st.fixed_dictionaries({p: _TIMES for p in PROTOCOLS}), cpus=st.integers(1, 4), compiled=st.booleans())
def test_side_by_side_runs_what_one_loop_runs(order: list[Protocol],
                                              floors: dict[Protocol, float], times: dict[Protocol, float | None],
                                              cpus: int, compiled: bool) -> None:
    """Whatever the floors, the times, the CPUs: the protocols returned, their order and times are the loop's; a
    protocol run ahead and then known to be skipped is dropped, and nothing runs side by side off the kernel."""
    simulated: list[Protocol] = []
    lock = threading.Lock()

    def fake_simulate(topology: Any, schedule: Any, size: float, options: Any) -> Any:
        with lock:
            simulated.append(schedule)
        return SimpleNamespace(time_us=times[schedule])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(predict, "_simulate", fake_simulate)
        patch.setattr(fast_sim, "available_cpus", lambda: cpus)
        patch.setattr(fast_sim, "runs_compiled", lambda *_: compiled)
        ran = predict._by_protocol(None, tuple(order), floors, 1.0,  # type: ignore[arg-type]
                                   lambda p: (p, SimOptions()))  # type: ignore[arg-type,return-value]
    expected = _one_loop(tuple(order), floors, times)
    assert [(p, sim.time_us) for p, _, sim in ran] == expected
    assert [p for p, schedule, _ in ran] == [schedule for _, schedule, _ in ran]
    if cpus == 1 or not compiled:
        assert sorted(simulated) == sorted(p for p, _ in expected)  # nothing ahead of its turn
    assert set(p for p, _ in expected) <= set(simulated)


def test_a_protocol_run_ahead_then_skipped_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CPUs: LL128 runs with Simple; Simple's floor (20) is above LL128's time (10), so a loop would not have
    run it: it is not in what comes back."""
    simulated: list[Protocol] = []
    times = {Protocol.LL128: 10.0, Protocol.SIMPLE: 30.0, Protocol.LL: 50.0}
    monkeypatch.setattr(predict, "_simulate", lambda _t, p, _s, _o: simulated.append(p) or SimpleNamespace(
        time_us=times[p]))
    monkeypatch.setattr(fast_sim, "available_cpus", lambda: 2)
    monkeypatch.setattr(fast_sim, "runs_compiled", lambda *_: True)
    order = (Protocol.LL128, Protocol.SIMPLE, Protocol.LL)
    floors = {Protocol.LL128: 5.0, Protocol.SIMPLE: 20.0, Protocol.LL: 25.0}
    ran = predict._by_protocol(None, order, floors, 1.0, lambda p: (p, SimOptions()))  # type: ignore[arg-type]
    assert sorted(simulated) == sorted([Protocol.LL128, Protocol.SIMPLE])
    assert [p for p, _, _ in ran] == [Protocol.LL128]


def test_the_kernel_releases_the_gil() -> None:
    """The compiled run and its dependency lists are what the threads run side by side."""
    from taccl_py import fast_kernel

    assert fast_kernel.run.targetoptions["nogil"] and fast_kernel.build_dependencies.targetoptions["nogil"]


@pytest.mark.parametrize("size", [64 << 10, 256 << 20])
def test_a_posted_schedule_gets_the_same_prediction_side_by_side(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """The direct Allgather of five DGX A100 machines (1,560 transfers waiting for proxy posts: the compiled kernel)
    under every protocol: one CPU or several, the same times to the last digit and the same choice."""
    from taccl_py.baselines import baseline
    from taccl_py.collectives import CollectiveKind
    from taccl_py.library.fabrics import dgx_a100_cluster

    topo = dgx_a100_cluster(5)
    schedule = baseline(topo, CollectiveKind.ALLGATHER, "direct")
    model = topo.runtime
    assert model is not None
    options = SimOptions(costs=model.costs(Protocol.SIMPLE, CollectiveKind.ALLGATHER, topo))
    assert fast_sim.runs_compiled(topo, schedule, options)
    monkeypatch.setattr(fast_sim, "available_cpus", lambda: 1)
    alone = predict.predict_schedule(topo, schedule, size, model)
    monkeypatch.setattr(fast_sim, "available_cpus", lambda: 3)
    together = predict.predict_schedule(topo, schedule, size, model)
    assert together.times_us == alone.times_us and len(alone.times_us) == len(PROTOCOLS)
    assert together.protocol == alone.protocol
    assert (together.sim.commit_us == alone.sim.commit_us).all()


@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_synthesize_gives_the_same_report_with_work_started_ahead(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """On the rail-stream path (here from 16 GPUs) ``synthesize -o`` starts the reference ring before the synthesis
    and the protocol choice before the lowering, in threads (here for every schedule): the same file and report
    as when each runs in its turn on one CPU."""
    import taccl_py.cli.synth_cmd as synth_cmd
    import taccl_py.synthesis.multidim as multidim
    from cli_runner import only_json, run

    started: list[str] = []
    in_background = synth_cmd._in_background

    def counted(work: Any) -> Any:
        started.append(threading.current_thread().name)
        return in_background(work)

    monkeypatch.setattr(synth_cmd, "_in_background", counted)
    monkeypatch.setattr(multidim, "RAIL_GPUS", 16)
    reports, files = [], []
    for ahead in (False, True):
        monkeypatch.setattr(fast_sim, "available_cpus", lambda ahead=ahead: 2 if ahead else 1)
        monkeypatch.setattr(fast_sim, "FAST_MIN_TRANSFERS", 1 if ahead else 100_000)
        xml = tmp_path / f"{ahead}.xml"
        code, out, err = run(["synthesize", "-t", "dgx-a100x2", "-c", kind, "-s", "1MB", "-o", str(xml), "--json"],
                             capsys)
        assert code == 0, err
        report = only_json(out)
        assert str(report["candidates"]).count("rail streams"), report["candidates"]
        for key in ("wall_s", "stages_s", "synthesis_s", "xml"):
            report.pop(key)
        reports.append(report)
        files.append(xml.read_bytes())
        assert len(started) == (2 if ahead else 0)  # the reference ring, the protocol
    assert reports[0] == reports[1] and files[0] == files[1]
    assert reports[0]["ring_time_us"] is not None and reports[0]["calibrated"]["proto_times_us"]
