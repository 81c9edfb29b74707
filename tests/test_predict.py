"""Calibrated predictions: protocols timed side by side give what one loop over them gives."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import taccl_py.fast_sim as fast_sim
import taccl_py.predict as predict
import taccl_py.threads as threads
from taccl_py.runtime import PROTOCOLS, Protocol
from taccl_py.simulator import SimOptions
from taccl_py.testing import topologies

_TIMES = st.one_of(st.none(), st.sampled_from([5.0, 10.0, 20.0, 40.0]))


class _Job:
    """A prepared protocol's stand-in: one transfer."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol

    def __len__(self) -> int:
        return 1


def _one_loop(order: tuple[Protocol, ...], floors: dict[Protocol, float], times: dict[Protocol, float | None],
              fails: Protocol | None, job_floors: dict[Protocol, float] | None = None,
              compiled: dict[Protocol, bool] | None = None) -> list[tuple[Protocol, float | None]] | str:
    """What a plain loop runs: a protocol is skipped when its floor is at or above the best time before it, or,
    once prepared for the kernel, its prepared run's floor; one whose preparation fails stops it (its error)."""
    ran: list[tuple[Protocol, float | None]] = []
    best: float | None = None
    for p in order:
        if floors and best is not None and floors[p] >= best:
            continue
        if p is fails:
            return f"cannot prepare {p}"
        if floors and best is not None and job_floors and (compiled or {}).get(p) and job_floors[p] >= best:
            continue
        t = times[p]
        ran.append((p, t))
        if t is not None and (best is None or t < best):
            best = t
    return ran


@settings(max_examples=300, deadline=None)
@given(order=st.permutations(PROTOCOLS), floors=st.one_of(st.just({}), st.fixed_dictionaries(
    {p: st.sampled_from([1.0, 5.0, 10.0, 20.0, 50.0]) for p in PROTOCOLS})),
    times=st.fixed_dictionaries({p: _TIMES for p in PROTOCOLS}), cpus=st.integers(1, 4),
    compiled=st.fixed_dictionaries({p: st.booleans() for p in PROTOCOLS}),
    fails=st.one_of(st.none(), st.sampled_from(PROTOCOLS)), memory=st.integers(1, 3),
    job_floors=st.one_of(st.none(), st.fixed_dictionaries(
        {p: st.sampled_from([1.0, 5.0, 10.0, 20.0, 50.0]) for p in PROTOCOLS})))
def test_side_by_side_runs_what_one_loop_runs(order: list[Protocol], floors: dict[Protocol, float],
                                              times: dict[Protocol, float | None], cpus: int,
                                              compiled: dict[Protocol, bool], fails: Protocol | None,
                                              memory: int, job_floors: dict[Protocol, float] | None) -> None:
    """Whatever the floors (of the protocol, and of the run once prepared), the times, the CPUs, which runs the
    kernel takes, the memory for runs side by side and a preparation that fails: the protocols returned, their
    order and times, or the error raised, are the loop's; a protocol run ahead and then known to be skipped is
    dropped, and nothing runs beside a run off the kernel or beyond the memory."""
    simulated: list[tuple[Protocol, bool]] = []
    lock = threading.Lock()

    def prepare(p: Protocol) -> Any:
        if p is fails:
            raise ValueError(f"cannot prepare {p}")
        return _Job(p), SimOptions()

    def fake_simulate(topology: Any, job: Any, size: float, options: Any) -> Any:
        with lock:
            simulated.append((job.protocol, threading.current_thread() is threading.main_thread()))
        return SimpleNamespace(time_us=times[job.protocol])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(predict, "_simulate", fake_simulate)
        patch.setattr(threads, "available_cpus", lambda: cpus)
        patch.setattr(fast_sim, "runs_compiled", lambda _t, job, _o: compiled[job.protocol])
        patch.setattr(fast_sim, "full_simulation_bytes", lambda job: 1000)
        patch.setattr(fast_sim, "full_simulation_error",
                      lambda n, need: "no room" if n > memory or need != 1000 * n else None)
        try:
            outcome: list[tuple[Protocol, float | None]] | str = [
                (p, sim.time_us) for p, _, sim in predict._by_protocol(
                    None, tuple(order), floors, 1.0, prepare,  # type: ignore[arg-type]
                    job_floor=None if job_floors is None else lambda job: job_floors[job[0].protocol])]
        except ValueError as exc:
            outcome = str(exc)
    expected = _one_loop(tuple(order), floors, times, fails, job_floors, compiled)
    assert outcome == expected
    if isinstance(expected, list):
        assert {p for p, _ in expected} <= {p for p, _ in simulated}
    ahead = [p for p, here in simulated if not here]
    if cpus == 1 or memory == 1:
        assert not ahead  # each in its turn
    elif not compiled[order[0]]:
        assert order[1] not in ahead  # the first ran alone; the next starts the next wave, here
    elif memory >= min(cpus, len(order)) and compiled[order[1]] and fails not in (order[0], order[1]):
        assert order[1] in ahead  # the next ran beside the first
    assert all(compiled[p] for p in ahead)  # off the kernel nothing runs beside
    assert len(simulated) <= len(PROTOCOLS) and len({p for p, _ in simulated}) == len(simulated)


def test_a_protocol_run_ahead_then_skipped_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CPUs: LL128 runs with Simple; Simple's floor (20) is above LL128's time (10), so a loop would not have
    run it: it is not in what comes back."""
    simulated: list[Protocol] = []
    times = {Protocol.LL128: 10.0, Protocol.SIMPLE: 30.0, Protocol.LL: 50.0}

    def fake(_t: Any, p: Protocol, _s: float, _o: Any) -> Any:
        simulated.append(p)
        return SimpleNamespace(time_us=times[p])

    monkeypatch.setattr(predict, "_simulate", fake)
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    monkeypatch.setattr(fast_sim, "runs_compiled", lambda *_: True)
    monkeypatch.setattr(fast_sim, "full_simulation_bytes", lambda _: 1)
    monkeypatch.setattr(fast_sim, "full_simulation_error", lambda *_: None)
    order = (Protocol.LL128, Protocol.SIMPLE, Protocol.LL)
    floors = {Protocol.LL128: 5.0, Protocol.SIMPLE: 20.0, Protocol.LL: 25.0}
    ran = predict._by_protocol(None, order, floors, 1.0, lambda p: (p, SimOptions()))  # type: ignore[arg-type,return-value]
    assert sorted(simulated) == sorted([Protocol.LL128, Protocol.SIMPLE])
    assert [p for p, _, _ in ran] == [Protocol.LL128]


def test_an_error_of_a_protocol_a_loop_would_skip_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simple, run beside LL128, fails; its floor is above LL128's time, so a loop would never have run it: the
    prediction stands. With a floor below, the error is what a loop meets too, and it is raised."""
    def fake(_t: Any, p: Protocol, _s: float, _o: Any) -> Any:
        if p is Protocol.SIMPLE:
            raise MemoryError("no room")
        return SimpleNamespace(time_us=10.0)

    monkeypatch.setattr(predict, "_simulate", fake)
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    monkeypatch.setattr(fast_sim, "runs_compiled", lambda *_: True)
    monkeypatch.setattr(fast_sim, "full_simulation_bytes", lambda _: 1)
    monkeypatch.setattr(fast_sim, "full_simulation_error", lambda *_: None)
    order = (Protocol.LL128, Protocol.SIMPLE)
    ran = predict._by_protocol(None, order, {Protocol.LL128: 5.0, Protocol.SIMPLE: 20.0}, 1.0,  # type: ignore[arg-type]
                               lambda p: (p, SimOptions()))  # type: ignore[arg-type,return-value]
    assert [p for p, _, _ in ran] == [Protocol.LL128]
    with pytest.raises(MemoryError):
        predict._by_protocol(None, order, {Protocol.LL128: 5.0, Protocol.SIMPLE: 8.0}, 1.0,  # type: ignore[arg-type]
                             lambda p: (p, SimOptions()))  # type: ignore[arg-type,return-value]


def test_a_prediction_no_longer_wanted_stops_before_its_next_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Work started ahead checks its stop event before each wave of runs: set, nothing more is simulated."""
    simulated: list[Protocol] = []

    def fake(_t: Any, p: Protocol, _s: float, _o: Any) -> Any:
        simulated.append(p)
        stop.set()  # wanted no longer once the first run is under way
        return SimpleNamespace(time_us=10.0)

    stop = threading.Event()
    monkeypatch.setattr(predict, "_simulate", fake)
    monkeypatch.setattr(threads, "available_cpus", lambda: 1)
    with pytest.raises(threads.Cancelled):
        predict._by_protocol(None, PROTOCOLS, {}, 1.0, lambda p: (p, SimOptions()),  # type: ignore[arg-type,return-value]
                             stop)
    assert simulated == [PROTOCOLS[0]]


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
    simulate, where = predict._simulate, []

    def recorded(*args: Any) -> Any:
        where.append(threading.current_thread() is threading.main_thread())
        return simulate(*args)

    monkeypatch.setattr(predict, "_simulate", recorded)
    monkeypatch.setattr(threads, "available_cpus", lambda: 1)
    alone = predict.predict_schedule(topo, schedule, size, model)
    assert where == [True] * len(PROTOCOLS)
    where.clear()
    monkeypatch.setattr(threads, "available_cpus", lambda: 3)
    together = predict.predict_schedule(topo, schedule, size, model)
    assert sorted(where) == [False, False, True]  # the first here, two beside it
    assert together.times_us == alone.times_us and len(alone.times_us) == len(PROTOCOLS)
    assert together.protocol == alone.protocol
    assert (together.sim.commit_us == alone.sim.commit_us).all()


@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_synthesize_gives_the_same_file_and_report_with_work_started_ahead(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """On the rail-stream path (here from 16 GPUs) ``synthesize -o`` starts the reference ring before the synthesis
    and the protocol choice before the lowering, in threads (here for every schedule): the same file, and the same
    report but for its wall times, as when each runs in its turn on one CPU."""
    from cli_runner import only_json, run

    import taccl_py.cli.synth_cmd as synth_cmd
    import taccl_py.synthesis.multidim as multidim

    started: list[str] = []
    calls = {"ring": 0, "proto": 0}
    in_background, reference_time, choose_proto = threads.in_background, synth_cmd._reference_time, \
        synth_cmd._choose_proto

    def counted(work: Any) -> Any:
        started.append(threading.current_thread().name)
        return in_background(work)

    def ring(*args: Any) -> Any:
        calls["ring"] += 1
        return reference_time(*args)

    def proto(*args: Any) -> Any:
        calls["proto"] += 1
        return choose_proto(*args)

    synthesize = synth_cmd.synthesize

    def rail_first(*args: Any) -> Any:  # at 16 GPUs hier-lb wins: the rail-stream choice is put first, as at 1,024
        result = synthesize(*args)
        return replace(result, ranked=tuple(sorted(result.ranked, key=lambda c: not c.candidate.rail)))

    monkeypatch.setattr(synth_cmd, "synthesize", rail_first)
    monkeypatch.setattr(synth_cmd, "in_background", counted)
    monkeypatch.setattr(synth_cmd, "_reference_time", ring)
    monkeypatch.setattr(synth_cmd, "_choose_proto", proto)
    monkeypatch.setattr(multidim, "RAIL_GPUS", 16)
    monkeypatch.setattr(synth_cmd, "RERUN_MAX_GPUS", 8)
    monkeypatch.setattr(fast_sim, "FAST_MIN_TRANSFERS", 1)  # every schedule counts as large
    reports, files = [], []
    for ahead in (False, True):
        monkeypatch.setattr(threads, "available_cpus", lambda ahead=ahead: 2 if ahead else 1)
        calls.update(ring=0, proto=0)
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
        assert calls == {"ring": 1, "proto": 1}  # what started ahead is used, not computed again
    assert reports[0] == reports[1] and files[0] == files[1]
    assert reports[0]["ring_time_us"] is not None and reports[0]["calibrated"]["proto_times_us"]


def test_a_refused_schedule_stops_its_protocol_choice_started_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lowering refuses the schedule: the choice started for it is told to stop and is not waited for; the end
    of the XML stages stops any other."""
    import taccl_py.cli.synth_cmd as synth_cmd
    import taccl_py.msccl as msccl
    from taccl_py.baselines import baseline
    from taccl_py.collectives import CollectiveKind
    from taccl_py.errors import LoweringError
    from taccl_py.library.fabrics import dgx_a100_cluster

    topo = dgx_a100_cluster(2)
    ring, direct = (baseline(topo, CollectiveKind.ALLGATHER, name) for name in ("ring", "direct"))
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    monkeypatch.setattr(fast_sim, "FAST_MIN_TRANSFERS", 1)
    release = threading.Event()
    monkeypatch.setattr(synth_cmd, "_choose_proto", lambda *args: release.wait(10) and ("Simple", "", None))

    def refuse(*_: Any, **__: Any) -> Any:
        raise LoweringError("too many nodes")

    monkeypatch.setattr(msccl, "lower_schedule", refuse)
    memo = synth_cmd._Lowerings(topo, "v2", 1, "Simple", 1 << 20, 1 << 20)
    try:
        memo.protocol_ahead(ring, 1 << 20, None, topo.runtime)
        memo.protocol_ahead(direct, 1 << 20, None, topo.runtime)
        stops = {key: started[2] for key, started in memo.ahead.items()}
        assert len(stops) == 2 and not any(e.is_set() for e in stops.values())
        with pytest.raises(LoweringError):
            memo.lower(ring)
        assert stops[id(ring)].is_set() and not stops[id(direct)].is_set() and id(ring) not in memo.ahead
        memo.stop_ahead()
        assert stops[id(direct)].is_set() and not memo.ahead
    finally:
        release.set()


def test_choosing_a_protocol_stops_the_others_started_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """The protocol of the schedule written is waited for; one started for another choice is stopped, and asked
    for later it is computed again, not waited for."""
    import taccl_py.cli.synth_cmd as synth_cmd
    from taccl_py.baselines import baseline
    from taccl_py.collectives import CollectiveKind
    from taccl_py.library.fabrics import dgx_a100_cluster

    topo = dgx_a100_cluster(2)
    ring, direct = (baseline(topo, CollectiveKind.ALLGATHER, name) for name in ("ring", "direct"))
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    monkeypatch.setattr(fast_sim, "FAST_MIN_TRANSFERS", 1)
    calls: list[tuple[int, bool]] = []

    def choose(schedule: Any, *args: Any) -> Any:
        calls.append((id(schedule), threading.current_thread() is threading.main_thread()))
        return ("LL", "", None) if schedule is ring else ("Simple", "", None)

    monkeypatch.setattr(synth_cmd, "_choose_proto", choose)
    memo = synth_cmd._Lowerings(topo, "v2", 1, "Simple", 1 << 20, 1 << 20)
    memo.protocol_ahead(ring, 1 << 20, None, topo.runtime)
    memo.protocol_ahead(direct, 1 << 20, None, topo.runtime)
    stop_direct = memo.ahead[id(direct)][2]
    assert memo.protocol(ring, 1 << 20, None, topo.runtime)[0] == "LL"
    assert stop_direct.is_set() and not memo.ahead
    assert memo.protocol(direct, 1 << 20, None, topo.runtime)[0] == "Simple"
    assert calls.count((id(direct), True)) == 1 and (id(ring), False) in calls


@pytest.mark.slow
def test_protocols_are_pruned_from_64_gpus_without_changing_the_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """On 64 GPUs NCCL's Alltoall (4,032 posted transfers, under PRUNE_MIN_TRANSFERS) skips the protocols whose floor
    is above the best time found at 1 GB (LL there): the same protocol and time as when every protocol runs."""
    from taccl_py.collectives import CollectiveKind
    from taccl_py.library import resolve_topology

    topology = resolve_topology("dgx-a100x8")
    assert topology.num_gpus == predict.PRUNE_MIN_GPUS
    pruned = predict.predict_baseline(topology, CollectiveKind.ALLTOALL, "direct", 1 << 30, topology.runtime)
    monkeypatch.setattr(predict, "PRUNE_MIN_GPUS", 1 << 20)
    every = predict.predict_baseline(topology, CollectiveKind.ALLTOALL, "direct", 1 << 30, topology.runtime)
    assert (pruned.protocol, pruned.sim.time_us) == (every.protocol, every.sim.time_us) == (
        Protocol.SIMPLE, every.times_us["Simple"])
    assert set(every.times_us) == {"LL", "LL128", "Simple"} and "LL" not in pruned.times_us
    for name, t in every.times_us.items():  # what ran took what it takes alone; what was skipped is slower
        assert pruned.times_us.get(name, t) == t and (name in pruned.times_us or t >= every.sim.time_us)


def test_load_floor_is_the_busiest_links_bytes_at_its_rate() -> None:
    """NCCL's Alltoall on two DGX A100: each GPU's NIC link carries 8 remote blocks of 1 GB / 16, at 25 GB/s times
    the network's Simple share for Alltoall; the floor is that plus Simple's launch, and the run takes longer."""
    from taccl_py.baselines import baseline
    from taccl_py.collectives import CollectiveKind
    from taccl_py.library import resolve_topology

    topology = resolve_topology("dgx-a100x2")
    model = topology.runtime
    costs = model.costs(Protocol.SIMPLE, CollectiveKind.ALLTOALL, topology, algorithm="direct")
    schedule = baseline(topology, CollectiveKind.ALLTOALL, "direct")
    floor = predict.load_floor_us(topology, schedule, 1 << 30, SimOptions(costs=costs))
    nic = 25e3 * costs.fraction["net"]  # bytes per us
    assert floor == pytest.approx(costs.launch_us + 8 * (1 << 30) / 16 / nic, rel=1e-9)
    assert predict.load_floor_us(topology, predict.compact(schedule), 1 << 30, SimOptions(costs=costs)) == floor
    timed = predict.predict_baseline(topology, CollectiveKind.ALLTOALL, "direct", 1 << 30, model,
                                     protocols=(Protocol.SIMPLE,)).sim.time_us
    assert timed is not None and floor <= timed


@settings(max_examples=40, deadline=None)
@given(topology=topologies(max_gpus=6, max_switches=2), kind=st.sampled_from(
    ["allgather", "alltoall", "reducescatter", "allreduce"]), size=st.sampled_from([1 << 10, 1 << 20, 1 << 28]),
    protocol=st.sampled_from(PROTOCOLS))
def test_load_floor_never_exceeds_the_simulated_time(topology: Any, kind: str, size: int, protocol: Protocol) -> None:
    """Whatever the topology, collective, size and protocol: no baseline's run under the calibrated costs beats its
    load floor (a bound, so pruning by it never drops the fastest protocol)."""
    from taccl_py.baselines import applicable_baselines, baseline
    from taccl_py.collectives import CollectiveKind
    from taccl_py.runtime import PRESETS
    from taccl_py.simulator import simulate

    collective = CollectiveKind(kind)
    costs = PRESETS["dgx-a100"].costs(protocol, collective, topology)
    options = SimOptions(costs=costs)
    for name in applicable_baselines(topology, collective):
        schedule = baseline(topology, collective, name)
        if any(t.exchange is not None or t.group is not None for t in schedule.transfers):
            continue
        sim = simulate(topology, schedule, size, options)
        assert sim.time_us is not None
        assert predict.load_floor_us(topology, schedule, size, options) <= sim.time_us * (1 + 1e-9), name


def test_the_oneshot_allreduce_is_the_fastest_of_its_forms_under_the_runtime() -> None:
    """Its form is chosen on the raw links by the baseline; under the runtime's costs the prediction times every
    form: on two DGX A100s the time no longer drops from 16 KB to 32 KB (52.8 -> 27.5 us before), and each size's
    time is the least over the forms, each under its best protocol."""
    from taccl_py.baselines.common import NotApplicable
    from taccl_py.baselines.oneshot import ALLREDUCE_FORMS, oneshot_schedule
    from taccl_py.collectives import CollectiveKind
    from taccl_py.errors import InputError
    from taccl_py.library import resolve_topology

    topo = resolve_topology("dgx-a100x2")
    model = topo.runtime
    assert model is not None
    times = []
    for size in (16 << 10, 32 << 10):
        pred = predict.predict_baseline(topo, CollectiveKind.ALLREDUCE, "oneshot", size, model)
        per_form = []
        for form in ALLREDUCE_FORMS:
            try:
                schedule = oneshot_schedule(topo, CollectiveKind.ALLREDUCE, size_bytes=size, form=form)
            except NotApplicable:
                continue
            per_form.append(predict.predict_schedule(topo, schedule, size, model).sim.time_us)
        assert len(per_form) >= 2 and pred.sim.time_us == min(t for t in per_form if t is not None)
        times.append(pred.sim.time_us)
    assert times[0] <= times[1]
    with pytest.raises(InputError, match="--root: must be a rank"):  # the baseline's own argument checks still run
        predict.predict_baseline(topo, CollectiveKind.ALLREDUCE, "oneshot", 1024, model, root=99)


def test_the_calibrated_tree_runs_nccls_chunk_steps_and_pays_its_path_latency_once() -> None:
    """Under a runtime model the tree is simulated in NCCL's chunk steps (enqueue.cc's rule), each step carrying
    1/pieces of the hop latency and the launch the rest of tuning.cc's tree path (2 x (7 NVLink + 1 network hops)
    on two machines of 8); with one piece the costs are the model's own."""
    from taccl_py.collectives import CollectiveKind
    from taccl_py.library import resolve_topology
    from taccl_py.runtime import nccl_tree_pieces

    topo = resolve_topology("dgx-a100x2")
    model = topo.runtime
    assert model is not None
    kind = CollectiveKind.ALLREDUCE
    costs = model.costs(Protocol.SIMPLE, kind, topo, algorithm="tree", size_bytes=1 << 30)
    assert predict.tree_step_costs(topo, costs, kind, 1) is costs
    hops = costs.hop_latency_us
    stepped = predict.tree_step_costs(topo, costs, kind, 4)
    assert stepped.hop_latency_us == {c: v / 4 for c, v in hops.items()}
    path = 2 * (7 * hops["nvlink"] + 1 * hops["net"])
    assert stepped.launch_us == pytest.approx(costs.launch_us + path * 3 / 4)
    one_phase = predict.tree_step_costs(topo, costs, CollectiveKind.BROADCAST, 4)
    assert one_phase.launch_us == pytest.approx(costs.launch_us + path / 2 * 3 / 4)
    for size in (1 << 20, 64 << 20, 1 << 30):
        pred = predict.predict_baseline(topo, kind, "tree", size, model, protocols=(Protocol.SIMPLE,))
        want = nccl_tree_pieces(size, model.channels)
        assert isinstance(pred.schedule, predict.Schedule) and pred.schedule.notes["pieces"] == want
        assert pred.sim.correct, pred.sim.error
    # the prediction pays the stepped costs: its schedule under them takes its time, under the model's own more
    from taccl_py.simulator import simulate

    pred = predict.predict_baseline(topo, kind, "tree", 1 << 30, model, protocols=(Protocol.SIMPLE,))
    assert isinstance(pred.schedule, predict.Schedule)
    pieces = int(pred.schedule.notes["pieces"])
    assert pieces > 1
    unposted = replace(costs, post_us=0.0)  # NCCL's tree carries its proxy's cost in its latencies
    own = simulate(topo, pred.schedule, 1 << 30, SimOptions(costs=unposted))
    stepped = simulate(topo, pred.schedule, 1 << 30, SimOptions(costs=predict.tree_step_costs(topo, unposted, kind,
                                                                                               pieces)))
    assert pred.sim.time_us == pytest.approx(stepped.time_us)
    assert own.time_us is not None and stepped.time_us is not None and own.time_us > stepped.time_us
    # LL128 forwards line by line: its tree keeps the raw-link baseline's alpha-beta pipeline
    from taccl_py.baselines import baseline

    ll128 = predict.predict_baseline(topo, kind, "tree", 64 << 20, model, protocols=(Protocol.LL128,))
    hop = max(model.costs(Protocol.LL128, kind, topo, algorithm="tree", size_bytes=64 << 20).hop_latency_us.values())
    assert isinstance(ll128.schedule, predict.Schedule)
    assert ll128.schedule.notes["pieces"] == baseline(topo, kind, "tree", size_bytes=64 << 20,
                                                      step_overhead_us=hop).notes["pieces"]


def test_a_tree_given_its_pieces_builds_that_many() -> None:
    from taccl_py.baselines import baseline
    from taccl_py.errors import InputError
    from taccl_py.library import resolve_topology
    from taccl_py.simulator import simulate

    topo = resolve_topology("dgx-a100x2")
    for pieces in (1, 3, 40):
        schedule = baseline(topo, "allreduce", "tree", pieces=pieces)
        channels = int(schedule.notes["channels"])
        assert schedule.notes["pieces"] == pieces
        assert len(schedule.transfers) == pieces * len(baseline(topo, "allreduce", "tree", pieces=1).transfers)
        assert schedule.collective.num_chunks % (channels * pieces) == 0
        assert simulate(topo, schedule, 1 << 20).correct
    with pytest.raises(InputError, match="only the tree"):
        baseline(topo, "allreduce", "ring", pieces=2)
    with pytest.raises(InputError, match="pieces must be"):
        baseline(topo, "allreduce", "tree", pieces=2, chunk_factor=8)
    with pytest.raises(InputError, match="pieces must be"):
        baseline(topo, "allreduce", "tree", pieces=0)


def test_a_large_tree_takes_fewer_chunk_steps_within_its_transfer_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """NCCL's chunk steps while the schedule stays within the budget, else as many as fit, never fewer than 32."""
    from taccl_py.baselines.tree import tree_plan
    from taccl_py.collectives import CollectiveKind
    from taccl_py.library import resolve_topology

    topo = resolve_topology("dgx-a100x2")
    assert topo.runtime is not None
    kind, lanes = CollectiveKind.ALLREDUCE, topo.runtime.channels
    legs = sum(len(ch.reduce_legs) + len(ch.bcast_legs) for ch in tree_plan(topo, kind).channels)
    assert predict.tree_chunk_steps(topo, kind, 8 << 30, lanes) == 256  # NCCL's 512, capped
    assert predict.tree_chunk_steps(topo, kind, 1 << 20, lanes) == 1  # 24 x 512 KB a loop
    monkeypatch.setattr(predict, "TREE_TRANSFER_BUDGET", legs * 40)
    assert predict.tree_chunk_steps(topo, kind, 8 << 30, lanes) == 40
    monkeypatch.setattr(predict, "TREE_TRANSFER_BUDGET", legs * 10)
    assert predict.tree_chunk_steps(topo, kind, 8 << 30, lanes) == 32
    assert predict.tree_chunk_steps(topo, kind, 1 << 20, lanes) == 1
    pred = predict.predict_baseline(topo, kind, "tree", 8 << 30, topo.runtime, protocols=(Protocol.SIMPLE,))
    assert isinstance(pred.schedule, predict.Schedule) and pred.schedule.notes["pieces"] == 32
    assert len(pred.schedule.transfers) == 32 * legs


def test_a_runs_nccl_proto_limits_the_choice() -> None:
    """``protocols`` (a run's NCCL_PROTO) keeps NCCL's choice to those protocols: at 64 KB on DGX H100 the model's
    choice runs LL128; under ``NCCL_PROTO=Simple`` it is a Simple algorithm, and NVLS (Simple only) has no protocol
    under ``NCCL_PROTO=LL``."""
    from taccl_py.collectives import CollectiveKind
    from taccl_py.library import resolve_topology

    topo = resolve_topology("dgx-h100-nvls")
    assert topo.runtime is not None
    kind = CollectiveKind.ALLREDUCE
    assert predict.allowed_protocols(kind, "ring") == PROTOCOLS
    assert predict.allowed_protocols(kind, "ring", protocols=(Protocol.SIMPLE, Protocol.LL)) == (Protocol.LL,
                                                                                                Protocol.SIMPLE)
    assert predict.allowed_protocols(kind, "nvls", protocols=(Protocol.LL,)) == ()
    free = predict.predict_nccl(topo, kind, 64 << 10, topo.runtime)
    simple = predict.predict_nccl(topo, kind, 64 << 10, topo.runtime, protocols=(Protocol.SIMPLE,))
    ll = predict.predict_nccl(topo, kind, 64 << 10, topo.runtime, protocols=(Protocol.LL,), algorithms=("nvls",))
    assert free is not None and simple is not None and ll is None
    assert free[1].protocol is not Protocol.SIMPLE and simple[1].protocol is Protocol.SIMPLE
    assert simple[1].sim.time_us is not None and free[1].sim.time_us is not None
    assert simple[1].sim.time_us > free[1].sim.time_us


@pytest.mark.parametrize(("name", "algorithm"), [("dgx-h100x2-nvls-sharp", "sharp"), ("dgx-a100x2", "direct")])
def test_a_baseline_no_protocol_changes_is_built_once_for_all_of_them(monkeypatch: pytest.MonkeyPatch, name: str,
                                                                       algorithm: str) -> None:
    """SHARP and the direct baseline take no step overhead, so every protocol times the one schedule: built once,
    with the times of building it for each protocol."""
    import taccl_py.baselines as baselines
    from taccl_py.collectives import CollectiveKind
    from taccl_py.library import resolve_topology

    topo = resolve_topology(name)
    assert topo.runtime is not None
    kind = CollectiveKind.ALLREDUCE if algorithm == "sharp" else CollectiveKind.ALLTOALL
    calls: list[str] = []
    build = baselines._build

    def counted(*args: Any) -> Any:
        calls.append(args[2])
        return build(*args)

    baselines.forget_built()
    monkeypatch.setattr(baselines, "_build", counted)
    once = predict.predict_baseline(topo, kind, algorithm, 1 << 20, topo.runtime)
    assert calls == [algorithm] and len(once.times_us) == len(PROTOCOLS) >= 2
    for p in PROTOCOLS:  # each protocol alone builds its own: the same times
        baselines.forget_built()
        alone = predict.predict_baseline(topo, kind, algorithm, 1 << 20, topo.runtime, protocols=(p,))
        assert alone.times_us == {p.value: once.times_us[p.value]}
    baselines.forget_built()
