"""The streamed machine-link layout (taccl_py/synthesis/streams.py): same data, two chained streams per NIC."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import applicable_baselines, baseline
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.library import resolve_topology
from taccl_py.library.builder import TopologyBuilder
from taccl_py.library.machines import add_nvswitch_machine
from taccl_py.msccl import lower_schedule, verify_program
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import simulate
from taccl_py.synthesis import SynthesisOptions, synthesize
from taccl_py.synthesis.chunking import selectable_at
from taccl_py.synthesis.streams import Rotation, StreamLayout, stream_layouts, stream_transfers
from taccl_py.testing import spanning_tree_allgathers, spanning_tree_reductions, topologies
from taccl_py.topology import Topology

LAYOUTS = (*stream_layouts(), StreamLayout(Rotation.PIECE, 2), StreamLayout(Rotation.MACHINE, 8))


def _with_machines(topology: Topology, machines: int) -> Topology:
    """The same links, the GPUs split into ``machines`` consecutive groups."""
    n = topology.num_gpus
    bounds = [round(k * n / machines) for k in range(machines + 1)]
    return replace(topology, machines=tuple(tuple(range(bounds[k], bounds[k + 1])) for k in range(machines)))


def _single_chunk(schedule: Schedule) -> Schedule:
    return schedule.with_transfers(replace(t, channel=0) for t in schedule.transfers)


def _check_streams(topology: Topology, schedule: Schedule, streamed: tuple[Collective, tuple[Transfer, ...]],
                   layout: StreamLayout) -> None:
    collective, transfers = streamed
    assert collective.chunk_factor == schedule.collective.chunk_factor * layout.parts
    machine = topology.machine_of
    for i, t in enumerate(transfers):
        for a in t.after:  # a stream waits on its own sender's previous message, earlier in program order
            assert a < i and transfers[a].src == t.src
            assert machine[transfers[a].src] != machine[transfers[a].dst] and machine[t.src] != machine[t.dst]
        if t.after:
            assert t.channel == transfers[t.after[0]].channel
        assert len(t.chunks) == max(t.chunks) - min(t.chunks) + 1, "a message carries contiguous chunks"
    # every original message's data is still moved, cut into parts
    moved: dict[tuple[int, int, Op], int] = {}
    for t in transfers:
        key = (t.src, t.dst, t.op)
        moved[key] = moved.get(key, 0) + len(t.chunks)
    expected: dict[tuple[int, int, Op], int] = {}
    for t in schedule.transfers:
        key = (t.src, t.dst, t.op)
        expected[key] = expected.get(key, 0) + layout.parts
    assert moved == expected


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_streamed_schedules_compute_the_same_result(data: st.DataObject) -> None:
    """On random topologies split into machines, random Allgather/ReduceScatter/Allreduce schedules stay correct
    in every layout, with chained streams on the sender and contiguous parts."""
    topology = data.draw(topologies(min_gpus=4, max_gpus=8, max_switches=2), label="topology")
    topology = _with_machines(topology, data.draw(st.integers(2, min(4, topology.num_gpus // 2)), label="machines"))
    kind = data.draw(st.sampled_from([CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER,
                                      CollectiveKind.ALLREDUCE]), label="kind")
    if kind is CollectiveKind.ALLGATHER:
        schedule = data.draw(spanning_tree_allgathers(topology, max_extra_copies=1), label="schedule")
    else:
        schedule = data.draw(spanning_tree_reductions(topology, CollectiveKind.REDUCESCATTER), label="schedule")
        if kind is CollectiveKind.ALLREDUCE:  # the reduction, then an Allgather of the reduced chunks
            gather = data.draw(spanning_tree_allgathers(topology, max_chunk_factor=1, max_extra_copies=1),
                               label="gather")
            c = schedule.collective.chunk_factor
            spread = [replace(t, chunks=(t.chunks[0] * c + k,)) for k in range(c) for t in gather.transfers]
            schedule = Schedule(Collective(kind, topology.num_gpus, c), (*schedule.transfers, *spread))
    schedule = _single_chunk(schedule)
    assert simulate(topology, schedule, 1 << 20).correct
    layout = data.draw(st.sampled_from(LAYOUTS), label="layout")
    streamed = stream_transfers(topology, schedule.collective, schedule.transfers, 1 << 20, layout)
    event("streamed" if streamed is not None else "layout does not apply")
    if streamed is None:
        return
    _check_streams(topology, schedule, streamed, layout)
    result = simulate(topology, Schedule(*streamed), 1 << 20)
    assert result.correct, result.error


@pytest.mark.slow
def test_streams_do_not_apply_where_they_cannot_help() -> None:
    topology = resolve_topology("dgx-a100")  # one machine: no machine links
    schedule = synthesize(topology, CollectiveKind.ALLGATHER, 1 << 26).schedule
    assert stream_transfers(topology, schedule.collective, schedule.transfers, 1 << 26, stream_layouts()[0]) is None
    two = resolve_topology("dgx-a100x2-forestcoll")
    a2a = synthesize(two, CollectiveKind.ALLTOALL, 1 << 24, SynthesisOptions(compare_baselines=False)).schedule
    assert stream_transfers(two, a2a.collective, a2a.transfers, 1 << 24, stream_layouts()[0]) is None


@st.composite
def nic_clusters(draw: st.DrawFn) -> Topology:
    """Random clusters where streams can apply: machines of NVSwitch-joined GPUs, one NIC per GPU into one
    IB switch, the NIC slower than the NVSwitch port (random bandwidths and latencies)."""
    machines = draw(st.integers(2, 3), label="machines")
    per = draw(st.integers(2, 4), label="gpus per machine")
    nvswitch = draw(st.floats(50.0, 300.0), label="nvswitch GB/s")
    nic = draw(st.floats(5.0, nvswitch / 2), label="nic GB/s")
    nic_latency = draw(st.floats(0.2, 3.0), label="nic latency us")
    builder = TopologyBuilder("random-nic-cluster", machines * per)
    builder.add_switch("ib", "ib")
    for m in range(machines):
        add_nvswitch_machine(builder, f"m{m}.nvswitch", per * m, per, nvswitch)
        for g in range(per * m, per * (m + 1)):
            builder.link(g, builder.add_switch(f"nic{g}", "nic"), nic, nic_latency / 2, "nic")
            builder.link(f"nic{g}", "ib", nic, nic_latency / 2, "ib")
    return builder.build(source="random NIC cluster (tests)", machines=[range(per * m, per * (m + 1))
                                                                         for m in range(machines)])


def _best_baseline_us(topology: Topology, kind: CollectiveKind, size: int, *, selectable_only: bool) -> float:
    """The fastest baseline, tuned for the size; only those the runtime would run at the size if asked."""
    times = []
    for name in applicable_baselines(topology, kind):
        schedule = baseline(topology, kind, name, size_bytes=size)
        if not selectable_only or selectable_at(schedule.collective, size, 4):
            times.append(simulate(topology, schedule, size).time_us)
    return min((t for t in times if t is not None), default=float("inf"))


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=nic_clusters(), kind=st.sampled_from([CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER,
                                                      CollectiveKind.ALLREDUCE]),
       size=st.sampled_from([1 << 24, 1 << 27]))
def test_synthesis_with_streamed_candidates_is_correct_and_never_slower_than_a_baseline(
        topology: Topology, kind: CollectiveKind, size: int) -> None:
    """End to end on random NIC clusters: streamed candidates are built and judged with the others; what is
    chosen is correct, verifies as XML (races included) and is never slower than the best baseline."""
    result = synthesize(topology, kind, size, SynthesisOptions(time_limit_s=10))
    streamed = [c for c in result.candidates if c.variant is not None and c.variant.stream is not None]
    event("streamed candidates built" if streamed else "no streamed candidate")
    chosen = result.synthesized
    event("streamed chosen" if result.chosen == "synthesized" and chosen is not None and chosen.variant is not None
          and chosen.variant.stream is not None else "plain or baseline chosen")
    assert result.sim.correct, result.sim.error
    assert result.sim.time_us is not None
    # never slower than a baseline the runtime would run at this size (a file it skips is worth nothing there)
    selectable = selectable_at(result.schedule.collective, size, 4)
    assert result.sim.time_us <= _best_baseline_us(topology, kind, size, selectable_only=selectable) * (1 + 1e-9)
    for c in streamed:  # every streamed candidate is a correct program (time_us None: the simulator rejected it)
        assert c.time_us is not None, c.note
    report = verify_program(lower_schedule(result.schedule, topology))
    assert report.valid and report.correct, report.errors[:3]


@pytest.mark.slow
@pytest.mark.parametrize("kind", [CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE])
def test_streams_close_the_gap_to_the_bound_on_a_nic_bound_cluster(kind: CollectiveKind) -> None:
    """dgx-a100x4 (ForestColl's model) at 256 MB: the streamed candidate is chosen and within 2% of the bound
    (the plain candidates lose 3-5%: NIC flows finishing together, then the fan-out)."""
    from taccl_py.bounds import lower_bound

    topology = resolve_topology("dgx-a100x4-forestcoll")
    size = 1 << 28
    result = synthesize(topology, kind, size, SynthesisOptions(compare_baselines=False))
    assert result.candidates[0].variant is not None
    plain = min(c.time_us for c in result.candidates if c.time_us and c.variant and c.variant.stream is None)
    assert result.chosen == "synthesized" and result.synthesized is not None
    assert result.synthesized.variant is not None and result.synthesized.variant.stream is not None
    assert result.sim.time_us is not None and result.sim.time_us < plain
    assert lower_bound(topology, kind, size).bound_us / result.sim.time_us >= 0.98
