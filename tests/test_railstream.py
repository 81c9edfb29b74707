"""Rail streams (taccl_py/synthesis/railstream.py): the schedules are correct, move each block once per GPU, lower to
XML that takes their time, and the synthesizer uses them on large clusters of machines."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taccl_py.bounds import lower_bound
from taccl_py.collectives import CollectiveKind
from taccl_py.errors import NotApplicable
from taccl_py.library import resolve_topology
from taccl_py.schedule import Op, Transfer
from taccl_py.simulator import simulate
from taccl_py.synthesis import SynthesisOptions, multidim, synthesize
from taccl_py.synthesis.railstream import (
    CHAIN_STEPS,
    SINGLE_LEVEL_MACHINES,
    far_groups,
    rail_stream_applies,
    rail_stream_schedule,
    rail_variants,
)
from tests.helpers import ring, round_trip

K = CollectiveKind
KINDS = (K.ALLGATHER, K.REDUCESCATTER, K.ALLREDUCE)
GB = 1 << 30


def test_allgather_sends_every_block_once_to_every_gpu_with_rail_messages_in_rotation() -> None:
    """dgx-a100x3, one stream: N(N-1) one-block copies, each (GPU, block) received once; GPU (m, i)'s k-th rail
    message goes to (m + k + 1, i) on channel 1 and waits for its k-1-th."""
    topology = resolve_topology("dgx-a100x3")
    schedule = rail_stream_schedule(topology, K.ALLGATHER, streams=1)
    n = topology.num_gpus
    assert len(schedule.transfers) == n * (n - 1)
    received = Counter((t.dst, t.chunks) for t in schedule.transfers)
    assert set(received.values()) == {1}
    assert all(len(t.chunks) == 1 and t.op is Op.COPY and (t.chunks[0],) != (t.dst,) for t in schedule.transfers)
    for g in range(n):
        rail = [(i, t) for i, t in enumerate(schedule.transfers) if t.src == g and t.src // 8 != t.dst // 8]
        assert [t.dst for _, t in rail] == [((g // 8 + k + 1) % 3) * 8 + g % 8 for k in range(2)]
        assert [t.chunks for _, t in rail] == [(g,), (g,)]
        assert rail[0][1].after == () and rail[1][1].after == (rail[0][0],)
        assert {t.channel for _, t in rail} == {1}


def test_allreduce_is_the_reducescatter_then_the_allgather() -> None:
    """The same messages in the same order (the channels and waits differ: an Allreduce's two phases share the
    chains' threadblocks, and its gathering waits for the reduction's last chain hop into each GPU)."""
    topology = resolve_topology("dgx-a100x2")
    ar = rail_stream_schedule(topology, K.ALLREDUCE, streams=1).transfers
    rs = rail_stream_schedule(topology, K.REDUCESCATTER, streams=1).transfers
    ag = rail_stream_schedule(topology, K.ALLGATHER, streams=1).transfers

    def moves(transfers: tuple[Transfer, ...]) -> list[tuple[object, ...]]:
        return [(t.src, t.dst, t.chunks, t.route, t.op) for t in transfers]

    assert len(ar) == len(rs) + len(ag)
    assert moves(ar[:len(rs)]) == moves(rs) and moves(ar[len(rs):]) == moves(ag)
    assert all(t.op is Op.REDUCE for t in rs)
    assert all(a < i for i, t in enumerate(ar) for a in t.after)


@settings(max_examples=10, deadline=None)
@given(machines=st.sampled_from([2, 4, 8, 16]), kind=st.sampled_from(KINDS), far=st.booleans())
def test_chain_threadblocks_stay_within_msccl_step_and_channel_limits(machines: int, kind: CollectiveKind,
                                                                       far: bool) -> None:
    """Property: every chain lane (a connection on one channel inside a machine) carries at most CHAIN_STEPS
    messages into each GPU, and all channels fit MSCCL's 32."""
    topology = resolve_topology(f"dgx-a100x{machines}")
    schedule = rail_stream_schedule(topology, kind, streams=1, groups=machines // 2 if far else 1)
    per_connection = Counter((t.src, t.dst, t.channel) for t in schedule.transfers if t.src // 8 == t.dst // 8)
    assert max(per_connection.values()) <= CHAIN_STEPS
    assert max(t.channel for t in schedule.transfers) < 32


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines=st.sampled_from([2, 3, 4, 6, 8]), streams=st.integers(1, 3), kind=st.sampled_from(KINDS),
       data=st.data())
def test_every_variant_is_correct_and_within_the_bound(machines: int, streams: int, kind: CollectiveKind,
                                                      data: st.DataObject) -> None:
    """Property: any stream count, any number of far groups, every collective: the simulator finds the result
    right (each contribution reduced once, every GPU holds what it must) and never faster than the lower bound."""
    topology = resolve_topology(f"dgx-a100x{machines}")
    groups = data.draw(st.sampled_from([d for d in range(1, machines + 1) if machines % d == 0]))
    schedule = rail_stream_schedule(topology, kind, streams=streams, groups=groups)
    sim = simulate(topology, schedule, 64 << 20)
    assert sim.correct and sim.time_us is not None, sim.error
    assert sim.time_us >= lower_bound(topology, kind, 64 << 20).bound_us * (1 - 1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_the_xml_verifies_and_takes_the_schedules_time(kind: CollectiveKind) -> None:
    """Lowered with the simulated times (as `synthesize -o` does): valid, correct, the schedule's time; the chains
    fuse into one step per block received (receive-copy-send, receive-reduce-send)."""
    topology = resolve_topology("dgx-a100x3")
    program = round_trip(rail_stream_schedule(topology, kind, streams=1), topology, GB)
    types = Counter(step.type.value for tb in program.gpus[0].threadblocks for step in tb.steps)
    if kind is not K.REDUCESCATTER:
        assert types["rcs"] > 0
    if kind is not K.ALLGATHER:
        assert types["rrs"] > 0


def test_far_groups_and_variants() -> None:
    assert [far_groups(k) for k in (2, 16, 32, 64, 128, 256, 48, 17)] == [1, 1, 2, 4, 8, 16, 3, 17]
    assert rail_variants(SINGLE_LEVEL_MACHINES) == ((1, 1), (2, 1))
    assert rail_variants(128) == ((1, 8),)


def test_where_it_does_not_apply() -> None:
    assert rail_stream_applies(ring(8), K.ALLGATHER) is not None
    assert rail_stream_applies(resolve_topology("dgx-a100x2"), K.ALLTOALL) is not None
    assert rail_stream_applies(resolve_topology("dgx-a100x2"), K.ALLREDUCE) is None
    with pytest.raises(NotApplicable):
        rail_stream_schedule(ring(8), K.ALLGATHER)
    with pytest.raises(NotApplicable, match="divide"):
        rail_stream_schedule(resolve_topology("dgx-a100x4"), K.ALLGATHER, groups=3)
    with pytest.raises(NotApplicable, match="streams"):
        rail_stream_schedule(resolve_topology("dgx-a100x4"), K.ALLGATHER, streams=0)


def test_the_shortcut_compares_rail_streams_from_rail_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the threshold lowered to 32 GPUs, `synthesize` on dgx-a100x4 skips the solver stages, simulates the rail
    streams, and returns the fastest of them and the hierarchical baseline (simulated only when its model is faster)."""
    monkeypatch.setattr(multidim, "RAIL_GPUS", 32)
    topology = resolve_topology("dgx-a100x4")
    result = synthesize(topology, K.ALLGATHER, GB, SynthesisOptions(time_limit_s=10))
    assert result.shortcut and result.stats == ()
    assert any("rail-stream schedules are compared" in note for note in result.notes), result.notes
    assert [c.label for c in result.candidates] == ["rail streams (1 per GPU)", "rail streams (2 per GPU)"]
    times = [c.time_us for c in result.candidates if c.time_us is not None]
    times += [t for t in result.baselines.values() if t is not None]
    assert result.sim.time_us == min(times)
    assert result.synthesized is not None and result.synthesized.time_us == min(
        c.time_us for c in result.candidates if c.time_us is not None)


def test_the_compiled_verify_checks_the_result_beyond_the_python_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """An Allreduce of 1,024 ranks x 1,024 chunks is over the Python execution's limit; the compiled execution
    checks it (here with both limits scaled down to a 24-rank program), and still finds a wrong one wrong."""
    from dataclasses import replace

    from taccl_py.msccl import lower_schedule
    from taccl_py.msccl import verify as verify_module
    from taccl_py.msccl.arrays import program_arrays
    from taccl_py.msccl.fast_verify import verify_arrays

    topology = resolve_topology("dgx-a100x3")
    schedule = rail_stream_schedule(topology, K.ALLREDUCE, streams=1)
    program = lower_schedule(schedule, topology, timing=simulate(topology, schedule, GB))
    monkeypatch.setattr(verify_module, "_MAX_SYMBOLIC_CONTRIBUTIONS", 24 * 24 - 1)
    assert not verify_module.verify_program(program).correct  # the Python path: unchecked
    arrays = program_arrays(program)
    assert arrays is not None
    assert verify_arrays(arrays).correct
    gpu = program.gpus[0]
    broken_tb = next(tb for tb in gpu.threadblocks if any(st.type.value == "rrc" for st in tb.steps))
    k = next(i for i, st in enumerate(broken_tb.steps) if st.type.value == "rrc")
    steps = list(broken_tb.steps)
    steps[k] = replace(steps[k], dstoff=(steps[k].dstoff + 1) % 24, srcoff=(steps[k].srcoff + 1) % 24)
    tbs = tuple(replace(tb, steps=tuple(steps)) if tb is broken_tb else tb for tb in gpu.threadblocks)
    broken = replace(program, gpus=(replace(gpu, threadblocks=tbs), *program.gpus[1:]))
    broken_arrays = program_arrays(broken)
    assert broken_arrays is not None
    assert not verify_arrays(broken_arrays).correct
