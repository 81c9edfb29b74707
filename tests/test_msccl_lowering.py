"""Schedule -> XML -> load -> verify is valid and correct, and the XML takes the schedule's time.

The schedules are hand-written here (ring, direct, hub-relayed alltoall, tree
broadcast, chain reduce) so the lowering is tested on its own; the NCCL-style
baselines are run through the same property (``tests/helpers.py::round_trip``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import helpers
import pytest
from helpers import ring, round_trip
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from taccl_py import baselines
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import LoweringError
from taccl_py.library import resolve_topology
from taccl_py.msccl import (
    lower_schedule,
    parse_program,
    simulate_program,
    verify_program,
    write_schedule_xml,
    write_xml,
)
from taccl_py.msccl.ir import StepType
from taccl_py.msccl.lowering import fewest_connections
from taccl_py.schedule import Op, Schedule, Transfer, load_schedule
from taccl_py.simulator import simulate
from taccl_py.testing import spanning_tree_allgathers, spanning_tree_reductions, topologies
from taccl_py.topology import Link, Topology, check_topology

SIZE = 1 << 20
K = CollectiveKind


# ------------------------------------------------------------------ schedules
def route(topo: Topology, src: int, dst: int) -> tuple[int, ...]:
    found = topo.gpu_route(src, dst)
    assert found is not None, f"no route {src}->{dst}"
    return found


def block(rank: int, c: int) -> tuple[int, ...]:
    return tuple(range(rank * c, (rank + 1) * c))


def ring_allgather(topo: Topology, c: int = 1, kind: CollectiveKind = K.ALLGATHER,
                   head: list[Transfer] | None = None) -> Schedule:
    n = topo.num_gpus
    out = list(head or [])
    for s in range(n - 1):
        for i in range(n):
            out.append(Transfer(i, (i + 1) % n, block((i - s) % n, c), route(topo, i, (i + 1) % n)))
    return Schedule(Collective(kind, n, c), tuple(out), name="ring")


def ring_reducescatter_transfers(topo: Topology, c: int) -> list[Transfer]:
    n = topo.num_gpus
    return [Transfer(i, (i + 1) % n, block((i - s - 1) % n, c), route(topo, i, (i + 1) % n), Op.REDUCE)
            for s in range(n - 1) for i in range(n)]


def ring_reducescatter(topo: Topology, c: int = 1) -> Schedule:
    return Schedule(Collective(K.REDUCESCATTER, topo.num_gpus, c), tuple(ring_reducescatter_transfers(topo, c)))


def ring_allreduce(topo: Topology, c: int = 1) -> Schedule:
    rs = ring_reducescatter_transfers(topo, c)
    # after the reduce-scatter phase rank i holds block i: the allgather phase starts from it
    n = topo.num_gpus
    ag = [Transfer(i, (i + 1) % n, block((i - s) % n, c), route(topo, i, (i + 1) % n))
          for s in range(n - 1) for i in range(n)]
    return Schedule(Collective(K.ALLREDUCE, n, c), tuple(rs + ag))


def direct_allgather(topo: Topology, c: int = 1) -> Schedule:
    n = topo.num_gpus
    out = [Transfer(s, d, block(s, c), route(topo, s, d)) for k in range(1, n) for s in range(n)
           for d in [(s + k) % n]]
    return Schedule(Collective(K.ALLGATHER, n, c), tuple(out))


def direct_alltoall(topo: Topology, c: int = 1) -> Schedule:
    n = topo.num_gpus
    out = [Transfer(s, d, tuple((s * n + d) * c + j for j in range(c)), route(topo, s, d))
           for k in range(1, n) for s in range(n) for d in [(s + k) % n]]
    return Schedule(Collective(K.ALLTOALL, n, c), tuple(out))


def hub_alltoall(topo: Topology, c: int = 1, hub: int = 0) -> Schedule:
    """Everything goes through ``hub`` in one message per rank each way: non-contiguous on both sides."""
    n = topo.num_gpus

    def chunks(s: int, d: int) -> list[int]:
        return [(s * n + d) * c + j for j in range(c)]

    up = [Transfer(s, hub, tuple(k for d in range(n) if d != s for k in chunks(s, d)), route(topo, s, hub))
          for s in range(n) if s != hub]
    down = [Transfer(hub, d, tuple(k for s in range(n) if s not in (d, hub) for k in chunks(s, d)),
                     route(topo, hub, d)) for d in range(n) if d != hub]
    own = [Transfer(hub, d, tuple(chunks(hub, d)), route(topo, hub, d)) for d in range(n) if d != hub]
    return Schedule(Collective(K.ALLTOALL, n, c), tuple(up + own + down))


def tree_broadcast(topo: Topology, pieces: int = 3) -> Schedule:
    """Binary tree over ranks 0..n-1 (heap order), pipelined: piece p flows down after piece p-1."""
    n = topo.num_gpus
    out = [Transfer(parent, child, (p,), route(topo, parent, child))
           for p in range(pieces) for child in range(1, n) for parent in [(child - 1) // 2]]
    return Schedule(Collective(K.BROADCAST, n, pieces), tuple(out))


def chain_reduce(topo: Topology, pieces: int = 3) -> Schedule:
    """n-1 -> n-2 -> ... -> 0, pipelined, reducing on the way."""
    n = topo.num_gpus
    out = [Transfer(r, r - 1, (p,), route(topo, r, r - 1), Op.REDUCE) for p in range(pieces)
           for r in range(n - 1, 0, -1)]
    return Schedule(Collective(K.REDUCE, n, pieces), tuple(out))


RING_BUILDERS = [ring_allgather, ring_reducescatter, ring_allreduce]
PAIR_BUILDERS = [direct_allgather, direct_alltoall, hub_alltoall, tree_broadcast]


def star(n: int) -> Topology:
    return helpers.star(n, bandwidth=50.0, latency=0.5)


# ------------------------------------------------------------------ properties
@pytest.mark.slow
@settings(max_examples=25)
@given(topo=topologies(min_gpus=2, max_gpus=6), builder=st.sampled_from(RING_BUILDERS),
       c=st.integers(1, 2), dialect=st.sampled_from(["v1", "v2"]))
def test_ring_schedules_round_trip_on_random_topologies(topo: Topology, builder: object, c: int,
                                                       dialect: str) -> None:
    assume(all(topo.gpu_route(i, (i + 1) % topo.num_gpus) is not None for i in topo.gpus))
    round_trip(builder(topo, c), topo, dialect=dialect)  # type: ignore[operator]


@pytest.mark.slow
@settings(max_examples=25)
@given(topo=topologies(min_gpus=3, max_gpus=6, min_switches=1), builder=st.sampled_from(PAIR_BUILDERS),
       in_place=st.sampled_from([None, False]))
def test_pairwise_schedules_round_trip_on_random_topologies(topo: Topology, builder: object,
                                                           in_place: bool | None) -> None:
    n = topo.num_gpus
    assume(all(topo.gpu_route(s, d) is not None for s in range(n) for d in range(n) if s != d))
    round_trip(builder(topo), topo, in_place=in_place)  # type: ignore[operator]


@pytest.mark.slow
@settings(max_examples=15)
@given(topo=topologies(min_gpus=2, max_gpus=5))
def test_chain_reduce_and_out_of_place_reductions(topo: Topology) -> None:
    n = topo.num_gpus
    assume(all(topo.gpu_route(r, r - 1) is not None for r in range(1, n)))
    round_trip(chain_reduce(topo), topo)
    round_trip(chain_reduce(topo), topo, in_place=False, dialect="v1")
    assume(all(topo.gpu_route(i, (i + 1) % n) is not None for i in topo.gpus))
    round_trip(ring_allreduce(topo), topo, in_place=False)
    round_trip(ring_reducescatter(topo, 2), topo, in_place=False)
    round_trip(ring_allgather(topo, 2), topo, in_place=False)


@pytest.mark.parametrize("instances", [2, 3])
@pytest.mark.parametrize("builder", [ring_allreduce, hub_alltoall, direct_allgather, tree_broadcast])
def test_instances_split_chunks_over_parallel_channels(builder: object, instances: int) -> None:
    topo = star(4)
    schedule = builder(topo)  # type: ignore[operator]
    one = lower_schedule(schedule, topo)
    many = lower_schedule(schedule, topo, instances=instances)
    assert many.nchunksperloop == instances * one.nchunksperloop
    assert many.num_threadblocks >= instances * (one.num_threadblocks - 4)
    round_trip(schedule, topo, instances=instances)


@pytest.mark.slow
@settings(max_examples=10)
@given(topo=topologies(min_gpus=2, max_gpus=5), kind=st.sampled_from(list(CollectiveKind)))
def test_baselines_round_trip_on_random_topologies(topo: Topology, kind: CollectiveKind) -> None:
    for algorithm in baselines.applicable_baselines(topo, kind):
        round_trip(baselines.baseline(topo, kind, algorithm, size_bytes=SIZE), topo)


# ------------------------------------------------------------------ structure
def test_ring_allgather_golden_value_through_xml() -> None:
    """ASTRA-sim / SimGrid golden value: 8-rank ring, 1 MiB per rank = 140.21875 us, also from the XML."""
    topo = ring(8)
    program = parse_program(write_xml(lower_schedule(ring_allgather(topo), topo)))
    result = simulate_program(program, topo, 8 * 2**20)
    assert result.time_us == pytest.approx(140.21875, abs=1e-9)


def test_ring_allreduce_looks_like_msccl_tools() -> None:
    """One threadblock per rank: s, rrs..., rrcs, rcs..., r — the shape msccl-tools emits."""
    topo = star(4)
    program = lower_schedule(ring_allreduce(topo), topo)
    assert program.nchannels == 1
    for gpu in program.gpus:
        (tb,) = gpu.threadblocks
        assert (tb.send, tb.recv) == ((gpu.id + 1) % 4, (gpu.id - 1) % 4)
        kinds = [s.type for s in tb.steps]
        assert kinds == [StepType.SEND, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_SEND,
                         StepType.RECV_REDUCE_COPY_SEND, StepType.RECV_COPY_SEND, StepType.RECV_COPY_SEND,
                         StepType.RECV]
        assert gpu.s_chunks == 0 and all(s.depid == -1 for s in tb.steps)


def test_hub_alltoall_stages_non_contiguous_messages() -> None:
    topo = star(4)
    program = lower_schedule(hub_alltoall(topo, c=2), topo)
    hub = program.gpus[0]
    assert hub.s_chunks > 0
    kinds = {s.type for tb in hub.threadblocks for s in tb.steps}
    assert StepType.COPY in kinds  # gathered into scratch before sending, scattered after receiving
    assert verify_program(program).correct


def test_long_staged_runs_are_cut_below_the_count_limit() -> None:
    """Copies into and out of scratch of more than 71 contiguous chunks are cut in pieces (cnt < 72)."""
    topo = star(4)
    program = lower_schedule(hub_alltoall(topo, c=40), topo)  # runs of 80 chunks on both sides of the hub
    counts = [s.cnt for gpu in program.gpus for tb in gpu.threadblocks for s in tb.steps
              if s.type is StepType.COPY]
    assert counts and max(counts) == 71
    assert verify_program(program).correct


def test_output_is_byte_identical(tmp_path: Path) -> None:
    topo = star(5)
    schedule = hub_alltoall(topo, c=2)
    first = write_xml(lower_schedule(schedule, topo))
    second = write_xml(lower_schedule(schedule, topo))
    assert first == second
    write_schedule_xml(schedule, topo, tmp_path / "a2a.xml")
    assert (tmp_path / "a2a.xml").read_text() == first
    assert write_xml(lower_schedule(schedule, topo, dialect="v1"), "v1") == write_xml(
        lower_schedule(schedule, topo, dialect="v1"), "v1")


def test_written_files_are_verified_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """write_schedule_xml refuses to write a program the verifier finds wrong (and writes nothing)."""
    import taccl_py.msccl.lowering as lowering
    from taccl_py.msccl.report import VerifyReport, Violation

    topo = star(4)
    broken = VerifyReport(valid=True, correct=False, errors=(Violation("data-race", "injected"),), dialect="v2")
    monkeypatch.setattr(lowering, "verify_program", lambda program, dialect: broken)
    with pytest.raises(LoweringError, match="injected"):
        write_schedule_xml(ring_allgather(topo), topo, tmp_path / "x.xml")
    assert not (tmp_path / "x.xml").exists()
    write_schedule_xml(ring_allgather(topo), topo, tmp_path / "x.xml", verify=False)
    assert (tmp_path / "x.xml").exists()
    # a verdict of "unknown" (a check could not run) still writes the file
    unknown = VerifyReport(valid=True, correct=False, errors=(Violation("unchecked-races", "budget"),), dialect="v2")
    monkeypatch.setattr(lowering, "verify_program", lambda program, dialect: unknown)
    write_schedule_xml(ring_allgather(topo), topo, tmp_path / "y.xml")
    assert (tmp_path / "y.xml").exists()


@pytest.mark.slow
def test_long_connections_are_split_over_channels() -> None:
    """A ring allgather with many pieces needs more than 64 steps per threadblock in v2."""
    topo = star(4)
    schedule = ring_allgather(topo, c=1)
    transfers = []
    for t in schedule.transfers:  # cut every block into 30 single-chunk transfers
        transfers += [Transfer(t.src, t.dst, (t.chunks[0] * 30 + j,), t.route) for j in range(30)]
    long = Schedule(Collective(K.ALLGATHER, 4, 30), tuple(transfers))
    v2 = lower_schedule(long, topo)
    assert v2.nchannels > 1 and max(len(tb.steps) for g in v2.gpus for tb in g.threadblocks) <= 64
    v1 = lower_schedule(long, topo, dialect="v1")
    assert v1.nchannels == 1
    round_trip(long, topo)
    round_trip(long, topo, dialect="v1")


def test_broadcast_root_is_written_for_v2() -> None:
    topo = star(4)
    schedule = Schedule(Collective(K.BROADCAST, 4, 2, root=2),
                        tuple(Transfer(2, d, (0, 1), route(topo, 2, d)) for d in (0, 1, 3)))
    program = lower_schedule(schedule, topo)
    assert program.root == 2 and 'root="2"' in write_xml(program)
    round_trip(schedule, topo)
    with pytest.raises(LoweringError, match="root"):
        lower_schedule(schedule, topo, dialect="v1")


# ------------------------------------------------------------------ limits
def test_bad_options_are_lowering_errors() -> None:
    topo = star(4)
    schedule = ring_allgather(topo)
    with pytest.raises(LoweringError, match="dialect"):
        lower_schedule(schedule, topo, dialect="v3")
    with pytest.raises(LoweringError, match="protocol"):
        lower_schedule(schedule, topo, proto="simple")
    with pytest.raises(LoweringError, match="instances"):
        lower_schedule(schedule, topo, instances=0)
    with pytest.raises(LoweringError, match="instances"):
        lower_schedule(schedule, topo, instances=33)
    with pytest.raises(LoweringError, match="maxBytes"):
        lower_schedule(schedule, topo, min_bytes=10, max_bytes=5)
    with pytest.raises(LoweringError, match="in place"):
        lower_schedule(direct_alltoall(topo), topo, in_place=True)
    with pytest.raises(LoweringError, match="does not fit topology"):
        lower_schedule(schedule, star(5))


def test_too_many_channels_between_two_ranks() -> None:
    topo = star(2)
    transfers = tuple(Transfer(0, 1, (j,), route(topo, 0, 1), channel=j) for j in range(33))
    schedule = Schedule(Collective(K.ALLGATHER, 2, 33), transfers)
    with pytest.raises(LoweringError, match="32 are taken"):
        lower_schedule(schedule, topo)
    assert fewest_connections(schedule) == 33


@pytest.mark.parametrize(("chunks", "floor", "floor_v1"), [(64 * 32, 32, 8), (64 * 32 + 1, 64, 16)])
def test_fewest_connections_counts_the_halvings_of_a_long_connection(chunks: int, floor: int, floor_v1: int) -> None:
    """2,048 single-chunk transfers on one connection fill 32 threadblocks of 64 steps; one more takes 64 (the
    lowering halves): the floor says the lowering must fail before it analyses anything, and it does."""
    topo = star(2)
    transfers = tuple(Transfer(0, 1, (j,), route(topo, 0, 1)) for j in range(chunks))
    schedule = Schedule(Collective(K.ALLGATHER, 2, chunks), transfers)
    assert (fewest_connections(schedule), fewest_connections(schedule, "v1")) == (floor, floor_v1)
    if floor > 32:
        with pytest.raises(LoweringError, match=r"32 are taken \(at least 64 connections") as refused:
            lower_schedule(schedule, topo)
        assert refused.value.over == 2.0


def test_fewest_connections_counts_the_nop_of_a_forwarding_part() -> None:
    """255 forwards on 1 -> 2 fit 4 parts of 64 steps but for the nop each part after the first takes (its first
    send waits for the chunk 0 -> 1 delivered): the lowering cuts 8, and the floor says 8, not 4."""
    topo = star(3)
    chunks = 255
    transfers = tuple(Transfer(0, 1, (j,), route(topo, 0, 1)) for j in range(chunks)) + tuple(
        Transfer(1, 2, (j,), route(topo, 1, 2)) for j in range(chunks))
    schedule = Schedule(Collective(K.BROADCAST, 3, chunks), transfers)
    assert fewest_connections(schedule) == 8
    program = lower_schedule(schedule, topo)
    assert len({tb.chan for tb in program.gpu(1).threadblocks if tb.send == 2}) == 8


@settings(max_examples=15, deadline=None)
@given(topo=topologies(min_gpus=2, max_gpus=5), c=st.integers(1, 40), data=st.data())
def test_fewest_connections_is_a_floor_on_the_lowered_connections(topo: Topology, c: int,
                                                                  data: st.DataObject) -> None:
    """Every pair of ranks gets at least the floor's channels in the lowered program (one per connection)."""
    if data.draw(st.booleans()):
        topo = star(topo.num_gpus)  # direct sends need a route between every two GPUs
        base = direct_allgather(topo)
    else:
        base = ring_allgather(topo)
    transfers = [Transfer(t.src, t.dst, (k * c + j,), t.route, channel=t.channel)
                 for t in base.transfers for k in t.chunks for j in range(c)]  # every chunk cut in c
    schedule = Schedule(Collective(K.ALLGATHER, topo.num_gpus, base.collective.chunk_factor * c), tuple(transfers))
    program = lower_schedule(schedule, topo)
    channels: dict[tuple[int, int], set[int]] = {}
    for gpu in program.gpus:
        for tb in gpu.threadblocks:
            if tb.send >= 0:
                channels.setdefault((gpu.id, tb.send), set()).add(tb.chan)
    assert fewest_connections(schedule) <= max(len(chans) for chans in channels.values())


@pytest.mark.slow
def test_too_many_threadblocks_for_v1() -> None:
    topo = star(8)
    c = 16
    transfers = tuple(Transfer(s, d, (s * c + j,), route(topo, s, d), channel=j)
                      for j in range(c) for s in range(8) for d in range(8) if s != d)
    schedule = Schedule(Collective(K.ALLGATHER, 8, c), transfers)
    with pytest.raises(LoweringError, match="216 per GPU"):
        lower_schedule(schedule, topo, dialect="v1")
    assert verify_program(lower_schedule(schedule, topo)).correct  # v2 allows 1024


def test_one_transfer_over_the_step_limit() -> None:
    topo = star(2)
    chunks = tuple(range(0, 130, 2))  # 65 chunks, none adjacent: 65 copies into scratch + 1 send
    schedule = Schedule(Collective(K.ALLGATHER, 2, 130), (Transfer(0, 1, chunks, route(topo, 0, 1)),))
    with pytest.raises(LoweringError, match="more than 64 steps"):
        lower_schedule(schedule, topo)
    assert lower_schedule(schedule, topo, dialect="v1").num_steps > 64


@pytest.mark.slow
def test_offsets_beyond_sixteen_bits() -> None:
    topo = star(2)
    schedule = Schedule(Collective(K.ALLGATHER, 2, 16400), (Transfer(1, 0, (32799,), route(topo, 1, 0)),))
    with pytest.raises(LoweringError, match="16 bits"):
        lower_schedule(schedule, topo)


@pytest.mark.slow
def test_node_limit_per_rank() -> None:
    topo = star(2)
    c = 4200
    schedule = Schedule(Collective(K.ALLGATHER, 2, c),
                        tuple(Transfer(0, 1, (j,), route(topo, 0, 1)) for j in range(c)))
    with pytest.raises(LoweringError, match="XML nodes"):
        lower_schedule(schedule, topo, dialect="v1")


def _local_groups(groups: int, length: int) -> tuple[list, dict, list]:
    """Groups of three local threadblocks on rank 0: A and B copy, C's i-th step waits for A's and B's i-th."""
    from taccl_py.msccl.assembly import LoweredOp, TbKey
    from taccl_py.msccl.ir import Buffer

    ops: list[LoweredOp] = []
    order: dict[TbKey, list[int]] = {}
    deps: list[tuple[int, ...]] = []
    for g in range(groups):
        a, b, c = (TbKey(0, None, None, 3 * g + i) for i in range(3))
        for key in (a, b, c):
            order[key] = []
        for i in range(length):
            for key in (a, b, c):
                op_id = len(ops)
                ops.append(LoweredOp(op_id, key, StepType.COPY, (Buffer.INPUT, 0), (Buffer.OUTPUT, 0), 1))
                order[key].append(op_id)
                deps.append((order[a][i], order[b][i]) if key == c else ())
    return ops, order, deps


@pytest.mark.parametrize(("groups", "qualifier"), [(14, "at least "), (12, "")])
def test_node_limit_is_checked_before_and_after_the_nops(groups: int, qualifier: str) -> None:
    """14 groups: the steps alone are over 4096 nodes; 12 groups: 3,638 nodes of steps, 4,838 with the nops."""
    from taccl_py.msccl.assembly import assemble

    ops, order, deps = _local_groups(groups, 100)
    with pytest.raises(LoweringError, match=f"rank 0 needs {qualifier}[0-9]+ XML nodes"):
        assemble(ops, order, deps, (), 1, "v1", {}, (1, 1), (0,))


def test_local_groups_within_the_node_limit_assemble() -> None:
    """The same shape below the limit: every C step keeps one dependency on its step and one on a nop."""
    from taccl_py.msccl.assembly import assemble

    ops, order, deps = _local_groups(2, 100)
    result = assemble(ops, order, deps, (), 1, "v1", {}, (1, 1), (0,))
    steps = sum(len(tb.steps) for tb in result.gpus[0].threadblocks)
    assert steps == 2 * 400


def test_largest_segment_counts_the_nop_of_a_waiting_segment_start() -> None:
    """Later segments whose first send waits for something take one nop more; the first segment never does."""
    from taccl_py.msccl.lowering import _largest_segment

    sizes = [1] * 8
    assert _largest_segment(sizes, 2) == 4
    assert _largest_segment(sizes, 2, [True] * 8) == 5
    assert _largest_segment(sizes, 2, [True, True, True, True, False, True, True, True]) == 4
    assert _largest_segment(sizes, 1, [True] * 8) == 8
    assert _largest_segment([3, 1, 1, 1], 4, [True] * 4) == 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 80), min_size=1, max_size=60), st.data())
def test_largest_segment_is_the_largest_total_of_the_lowerings_cut(sizes: list[int], data: st.DataObject) -> None:
    """Against a plain walk: transfer i goes to segment i * parts // n, and each segment after the first whose first
    transfer waits for something carries one step more."""
    from taccl_py.msccl.lowering import _largest_segment

    parts = data.draw(st.integers(1, len(sizes)))
    waits = data.draw(st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes)))
    for given_waits in (None, waits):
        totals = [0] * parts
        for i, size in enumerate(sizes):
            segment = i * parts // len(sizes)
            first = i == 0 or (i - 1) * parts // len(sizes) != segment
            totals[segment] += size + int(given_waits is not None and first and segment > 0 and given_waits[i])
        assert _largest_segment(sizes, parts, given_waits) == max(totals)


# ------------------------------------------------------------------ the XML takes the schedule's time
def full(n: int, slow: dict[tuple[int, int], float]) -> Topology:
    """``n`` GPUs, every ordered pair linked at 1 GB/s (``slow``: other bandwidths), no latency."""
    links = tuple(Link(u, v, slow.get((u, v), 1.0), 0.0) for u in range(n) for v in range(n) if u != v)
    return check_topology(Topology(f"full{n}", n, links))


def test_a_receive_waiting_for_another_writer_does_not_hold_back_its_connection() -> None:
    """Rank 1 gets chunk 0 from 2 early but must add it after 3's slow contribution; chunk 1 follows on 2->1.

    1 us per chunk (1000 bytes at 1 GB/s), 10 us on 3->1. The schedule: chunk 1 commits on rank 1 at 2, goes
    to the root over 2..3, and chunk 0 leaves at 10 (after 3->1) and arrives at 11. A threadblock takes
    its receives in order, so if the first receive wrote in place it would hold chunk 1 until 10 and the
    XML would take 12 us; it lands in scratch and is added by a local threadblock instead.
    """
    topo = full(4, {(3, 1): 0.1})

    def t(u: int, v: int, c: int) -> Transfer:
        return Transfer(u, v, (c,), route(topo, u, v), Op.REDUCE)

    schedule = Schedule(Collective(K.REDUCE, 4, 2, 0), (t(3, 1, 0), t(2, 1, 0), t(2, 1, 1), t(3, 0, 1),
                                                        t(1, 0, 1), t(1, 0, 0)))
    assert simulate(topo, schedule, 2000).time_us == pytest.approx(11.0, abs=1e-9)
    for timing in ({}, {"timing": None}):  # by the times at the size, by the structure alone
        program = round_trip(schedule, topo, 2000, time_rel=1e-9, **timing)
        rank1 = program.gpus[1].threadblocks
        applies = [tb for tb in rank1 if tb.send < 0 and tb.recv < 0 and tb.steps[-1].type is StepType.REDUCE]
        assert applies and applies[0].steps[-1].srcbuf.value == "s"


def test_a_pair_is_not_made_when_its_order_would_delay_a_later_receive() -> None:
    """Rank 1 could serve 0->1 and 1->2 in one threadblock: s(1), rcs(0), r(2), r(3). But 1->2 is slow
    (5 us per chunk), so r(3) would complete only after rcs(0) has sent (10 us), and 1->3, which waits
    (``after``) for chunk 3 and takes 10 us, would end at 20 instead of 13: the pair is not made."""
    topo = full(4, {(1, 2): 0.2, (1, 3): 0.1})

    def t(u: int, v: int, c: int, after: tuple[int, ...] = ()) -> Transfer:
        return Transfer(u, v, (c,), route(topo, u, v), after=after)

    schedule = Schedule(Collective(K.ALLGATHER, 4, 1), (
        t(1, 2, 1), t(0, 1, 0), t(1, 2, 0), t(2, 0, 2), t(3, 0, 3), t(0, 1, 2), t(0, 1, 3), t(1, 3, 1, after=(6,)),
        t(3, 2, 3), t(2, 3, 2), t(1, 0, 1), t(0, 3, 0)))
    assert simulate(topo, schedule, 4000).time_us == pytest.approx(13.0, abs=1e-9)
    round_trip(schedule, topo, 4000, time_rel=1e-9)
    round_trip(schedule, topo, 4000, time_rel=1e-9, timing=None)


def test_synthesized_reduce_takes_its_time_as_xml() -> None:
    """A schedule ``synthesize`` chose for dgx-a100 Reduce 16 MiB (1 s limit; chunk factor 64, CP-SAT): the XML
    took 98.81 us for its 94.66 us (receives committing out of order on one connection)."""
    topo = resolve_topology("dgx-a100")
    schedule = load_schedule(Path(__file__).parent / "data" / "msccl" / "reduce-dgx-a100-16MiB-cf64.json", topo)
    assert simulate(topo, schedule, 16 << 20).time_us == pytest.approx(94.66358, rel=1e-6)
    round_trip(schedule, topo, 16 << 20, time_rel=1e-9)
    round_trip(schedule, topo, 16 << 20, time_rel=1e-9, timing=None)


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(topo=topologies(min_gpus=3, max_gpus=6), data=st.data())
def test_random_tree_schedules_take_their_time_as_xml(topo: Topology, data: st.DataObject) -> None:
    """Random spanning-tree Allgathers (with redundant copies), ReduceScatters and Reduces: receives commit out
    of connection order, pairs interleave unevenly; the XML takes the schedule's time (each transfer on the
    default route, the only one MSCCL XML can take)."""
    kind = data.draw(st.sampled_from([K.ALLGATHER, K.REDUCESCATTER, K.REDUCE]), label="kind")
    if kind is K.ALLGATHER:
        schedule = data.draw(spanning_tree_allgathers(topo, max_chunk_factor=3), label="schedule")
    else:
        schedule = data.draw(spanning_tree_reductions(topo, kind, max_chunk_factor=3), label="schedule")
    schedule = schedule.with_transfers(replace(t, route=route(topo, t.src, t.dst)) for t in schedule.transfers)
    round_trip(schedule, topo, time_rel=1e-9)  # placed by the times at the size
    round_trip(schedule, topo, time_rel=1e-9, timing=None)  # by the structure alone: at every size
