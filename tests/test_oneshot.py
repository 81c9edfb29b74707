"""Exchanges in the schedule IR and the ``oneshot`` baseline (latency-optimal small collectives).

Hand-computed figures come from the link parameters (alpha-beta, one message
per connection), never from the planner or the bound code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from helpers import round_trip
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import NotApplicable, applicable_baselines, baseline
from taccl_py.baselines.fused import fuse
from taccl_py.baselines.oneshot import ALLREDUCE_FORMS, _tree_hops, oneshot_schedule
from taccl_py.bounds import lower_bound
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.library import resolve_topology, switch_star
from taccl_py.msccl import lower_schedule, simulate_program, verify_program
from taccl_py.schedule import Op, Schedule, Transfer, exchange_blocks, schedule_from_dict, schedule_to_dict
from taccl_py.simulator import simulate
from taccl_py.testing import topologies
from taccl_py.topology import Topology

KB = 1024
KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE,
         CollectiveKind.BROADCAST, CollectiveKind.REDUCE)


@functools.cache
def shipped(name: str) -> Topology:
    return resolve_topology(name)


# ------------------------------------------------------------------ exchanges
def _swap(topology: Topology, exchange: int | None) -> Schedule:
    """Two ranks add each other's whole buffer: the one-shot Allreduce on 2 GPUs."""
    col = Collective(CollectiveKind.ALLREDUCE, 2, 1)
    route01, route10 = topology.gpu_route(0, 1), topology.gpu_route(1, 0)
    assert route01 is not None and route10 is not None
    return Schedule(col, (Transfer(0, 1, (0, 1), route01, Op.REDUCE, exchange=exchange),
                          Transfer(1, 0, (0, 1), route10, Op.REDUCE, exchange=exchange)))


def test_an_exchange_reads_before_it_writes() -> None:
    """Without the exchange the second message reads the first one's sum (a contribution counted twice);
    with it both read their own buffers: one latency plus the bytes, 1 + 2 x 1000 B / 10 GB/s."""
    topo = switch_star(2, 10.0, 0.5)  # GPU -> switch -> GPU: 1 us, 10 GB/s
    plain = simulate(topo, _swap(topo, None), 2000)
    assert not plain.correct and "a second time" in (plain.error or "")
    swapped = simulate(topo, _swap(topo, 7), 2000)
    assert swapped.correct, swapped.error
    assert swapped.time_us == pytest.approx(1.0 + 2000 / 10e3)
    # and in MSCCL: the receive lands in scratch and is added once the rank's own send has gone
    program = lower_schedule(_swap(topo, 7), topo)
    report = verify_program(program)
    assert report.valid and report.correct, report.errors
    assert simulate_program(program, topo, 2000).time_us == pytest.approx(swapped.time_us)
    assert all(gpu.s_chunks == 2 for gpu in program.gpus)


def test_exchange_must_be_one_run_and_survives_json() -> None:
    topo = switch_star(3, 10.0, 0.5)
    col = Collective(CollectiveKind.ALLREDUCE, 3, 1)
    r = topo.gpu_route
    split = Schedule(col, (Transfer(0, 1, (0,), r(0, 1) or (), Op.REDUCE, exchange=1),
                           Transfer(1, 2, (0,), r(1, 2) or (), Op.REDUCE),
                           Transfer(2, 0, (0,), r(2, 0) or (), Op.REDUCE, exchange=1)))
    assert "exchange 1 is not one run" in (split.structural_error(topo) or "")
    assert exchange_blocks(split.transfers) == [(0, 1), (1, 2), (2, 3)]
    schedule = oneshot_schedule(topo, CollectiveKind.ALLREDUCE, size_bytes=3 * KB)
    assert exchange_blocks(schedule.transfers) == [(0, 6)]
    back = schedule_from_dict(schedule_to_dict(schedule, topo), topo)
    assert back.transfers == schedule.transfers


# ------------------------------------------------------------ hand-computed
@pytest.mark.parametrize("size", [1 * KB, 4 * KB, 16 * KB])
def test_one_shot_on_dgx_a100_is_one_latency(size: int) -> None:
    """Every GPU sends its buffer to 7 peers and receives 7 buffers through its 300 GB/s NVSwitch port:
    0.7 us (GPU -> NVSwitch -> GPU) + 7 x size / 300 GB/s."""
    topo = shipped("dgx-a100")
    schedule = baseline(topo, "allreduce", "oneshot", size_bytes=size)
    assert schedule.notes["form"] == "one-shot"
    assert len({t.exchange for t in schedule.transfers}) == 1
    result = simulate(topo, schedule, size)
    assert result.correct, result.error
    assert result.time_us == pytest.approx(0.7 + 7 * size / 300e3)


@pytest.mark.parametrize("size", [1 * KB, 8 * KB, 16 * KB])
def test_one_shot_meets_the_two_latency_floor(size: int) -> None:
    """Finishing before two route latencies (2 x 0.7 us) means every byte a GPU receives is one peer's raw
    input, so it must receive 7 buffers: T >= min(1.4, 0.7 + 7 x size / 300 GB/s). The one-shot form is
    that floor up to 16 KB (above it two latencies are cheaper)."""
    topo = shipped("dgx-a100")
    floor = min(1.4, 0.7 + 7 * size / 300e3)
    result = simulate(topo, baseline(topo, "allreduce", "oneshot", size_bytes=size), size)
    assert result.time_us == pytest.approx(floor)


def test_dgx1_uses_quads_then_pairs() -> None:
    """DGX-1: GPUs 0-3 and 4-7 are fully connected, GPU i is linked to i+4: two exchanges, half the buffer
    taking quads first, the other half pairs first; 2 x 0.7 us plus the bytes."""
    topo = shipped("dgx1")
    schedule = baseline(topo, "allreduce", "oneshot", size_bytes=KB)
    assert schedule.notes["form"] == "grid"
    assert sorted({t.exchange for t in schedule.transfers}) == [0, 1]
    pairs = {(t.src, t.dst) for t in schedule.transfers}
    assert pairs == {(a, b) for q in ((0, 1, 2, 3), (4, 5, 6, 7)) for a in q for b in q if a != b} | {
        (i, i ^ 4) for i in range(8)}
    result = simulate(topo, schedule, KB)
    assert result.correct and 1.4 < (result.time_us or 0) < 1.45


@pytest.mark.parametrize(("name", "kind", "limit"), [
    ("dgx-a100x2", "allreduce", 1.03), ("dgx-a100x2", "allgather", 1.01), ("ndv2x2", "allreduce", 1.06),
    ("ndv2x2", "allgather", 1.03), ("ndv2x4", "allgather", 1.03), ("dgx2x2", "allgather", 1.02),
])
def test_multi_machine_at_1kb_is_near_the_latency_bound(name: str, kind: str, limit: float) -> None:
    """At 1 KB the latency-optimal forms sit within a few percent of the bound (issue 16: 1.7x on ndv2x2
    before)."""
    topo = shipped(name)
    schedule = baseline(topo, kind, "oneshot", size_bytes=KB)
    result = simulate(topo, schedule, KB)
    assert result.correct, result.error
    bound = lower_bound(topo, kind, KB).bound_us
    assert bound <= (result.time_us or 0) <= limit * bound


def test_hierarchical_needs_one_exchange_across_machines() -> None:
    """ndv2x2: quads, pairs, then GPU 1 and GPU 9 (the NIC receivers) take the other machine's sum; the
    others get a copy of the result (latencies 0.7 + 0.7 + 1.3 + 2 x 0.7 = 4.1 us, the bound)."""
    topo = shipped("ndv2x2")
    schedule = oneshot_schedule(topo, CollectiveKind.ALLREDUCE, size_bytes=KB, form="hierarchical")
    last = max(t.exchange for t in schedule.transfers if t.exchange is not None)
    across = [(t.src, t.dst) for t in schedule.transfers if t.exchange == last]
    assert sorted(across) == [(0, 9), (8, 1)]
    copies = [t for t in schedule.transfers if t.exchange is None]
    assert copies and all(t.op is Op.COPY for t in copies)
    assert {t.dst for t in copies} == set(range(16)) - {1, 9}


def test_fusion_sends_one_message_per_connection_and_moment() -> None:
    """ndv2x2 Allgather: everything machine 1 sends to machine 0 crosses the one NIC link 8 -> 1. Merged, it
    goes as one message once the farthest block has reached GPU 8 (one 1.3 us latency instead of one per
    block); unmerged, every block is its own message on its own channel."""
    topo = shipped("ndv2x2")
    hops, items = _tree_hops(topo, CollectiveKind.ALLGATHER, 0, 1, False)
    merged = [t for t in fuse(topo, hops, items, KB / 16) if (t.src, t.dst) == (8, 1)]
    assert len(merged) == 1 and sorted(merged[0].chunks) == list(range(8, 16))
    apart = [t for t in fuse(topo, hops, items, KB / 16, merge=False) if (t.src, t.dst) == (8, 1)]
    assert sorted(c for t in apart for c in t.chunks) == list(range(8, 16)) and len(apart) == 8
    # the baseline keeps whichever is faster at the size; both sit at the bound at 1 KB
    for transfers in (fuse(topo, hops, items, KB / 16), fuse(topo, hops, items, KB / 16, merge=False)):
        schedule = Schedule(Collective(CollectiveKind.ALLGATHER, 16, 1), tuple(transfers))
        result = simulate(topo, schedule, KB)
        assert result.correct and (result.time_us or 0) <= 1.02 * 4.1


def test_forms_and_channels_are_checked() -> None:
    topo = shipped("dgx-a100")
    with pytest.raises(NotApplicable, match="unknown allreduce form"):
        oneshot_schedule(topo, CollectiveKind.ALLREDUCE, form="nope")
    with pytest.raises(NotApplicable, match="hierarchical needs more than one machine"):
        oneshot_schedule(topo, CollectiveKind.ALLREDUCE, form="hierarchical")
    split = baseline(topo, "allreduce", "oneshot", channels=2, size_bytes=4 * KB)
    assert split.collective.chunk_factor == 2 and split.num_channels == 2 and len(split.transfers) == 2 * 56
    assert simulate(topo, split, 4 * KB).time_us == pytest.approx(0.7 + 7 * 4 * KB / 300e3)
    with pytest.raises(NotApplicable, match="multiple of the 2 channels"):
        baseline(topo, "allreduce", "oneshot", channels=2, chunk_factor=3)
    with pytest.raises(NotApplicable, match="no oneshot alltoall"):
        baseline(topo, "alltoall", "oneshot")
    assert "oneshot" in applicable_baselines(topo, "allreduce")
    assert "oneshot" not in applicable_baselines(topo, "alltoall")
    assert ALLREDUCE_FORMS[0] == "one-shot"


# ------------------------------------------------------ random topologies
def _judge(topology: Topology, schedule: Schedule, size: int) -> None:
    """Correct, no faster than the bound, lowers to XML the verifier finds correct, same time in MSCCL."""
    kind = schedule.collective.kind
    result = simulate(topology, schedule, size)
    assert result.correct, f"{kind.value} {schedule.notes.get('form')}: {result.error}"
    assert result.time_us is not None
    bound = lower_bound(topology, kind, size, root=schedule.collective.root).bound_us
    assert result.time_us >= bound * (1 - 1e-9)
    round_trip(schedule, topology, size, time_rel=1e-6)


RANDOM = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@RANDOM
@given(topology=topologies(max_gpus=7), kind=st.sampled_from(KINDS), size=st.sampled_from([KB, 48 * KB, 1 << 20]),
       root=st.integers(0, 6))
def test_oneshot_is_correct_on_random_topologies(topology: Topology, kind: CollectiveKind, size: int,
                                                 root: int) -> None:
    schedule = baseline(topology, kind, "oneshot", size_bytes=size, root=root % topology.num_gpus)
    _judge(topology, schedule, size)


@RANDOM
@given(topology=topologies(min_gpus=2, max_gpus=8, min_switches=1), form=st.sampled_from(ALLREDUCE_FORMS))
def test_every_allreduce_form_is_correct_where_it_applies(topology: Topology, form: str) -> None:
    try:
        schedule = oneshot_schedule(topology, CollectiveKind.ALLREDUCE, size_bytes=4 * KB, form=form)
    except NotApplicable:
        return
    _judge(topology, schedule, 4 * KB)


@settings(max_examples=10, deadline=None)
@given(n=st.integers(2, 9), size=st.sampled_from([KB, 64 * KB]))
def test_one_shot_on_a_switch_is_one_exchange(n: int, size: int) -> None:
    """Around one switch every pair has a direct route: the one-shot form, one exchange, N (N-1) messages."""
    topo = switch_star(n, 50.0, 0.5)
    schedule = oneshot_schedule(topo, CollectiveKind.ALLREDUCE, size_bytes=size, form="one-shot")
    assert len(schedule.transfers) == n * (n - 1)
    result = simulate(topo, schedule, size)
    assert result.time_us == pytest.approx(1.0 + (n - 1) * size / 50e3)
    _judge(topo, schedule, size)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dgx1", "dgx-a100", "ndv2x2", "dgx-a100x2", "dgx2x2", "mi250"])
def test_shipped_oneshot_lowers_and_verifies(name: str) -> None:
    topo = shipped(name)
    for kind in KINDS:
        _judge(topo, baseline(topo, kind, "oneshot", size_bytes=8 * KB), 8 * KB)


# ------------------------------------------------------------------ SimGrid
@pytest.fixture(scope="module")
def oracle() -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The SimGrid oracle of ``test_simgrid_oracle`` (skips, or fails under TACCL_REQUIRE_SIMGRID=1)."""
    import os

    from test_simgrid_oracle import _simgrid_missing, run_oracle

    reason = _simgrid_missing()
    if reason:
        if os.environ.get("TACCL_REQUIRE_SIMGRID") == "1":
            pytest.fail(f"TACCL_REQUIRE_SIMGRID=1 but {reason}")
        pytest.skip(reason)
    return run_oracle


@pytest.mark.slow
@pytest.mark.simgrid
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(topology=topologies(max_gpus=6, min_switches=1), kind=st.sampled_from(KINDS),
       size=st.sampled_from([4 * KB, 96 * KB]))
def test_oneshot_matches_simgrid(oracle: Callable[[dict[str, Any]], dict[str, Any]], topology: Topology, kind: CollectiveKind, size: int) -> None:
    """SimGrid, which re-derives the exchange rule on its own, times the oneshot schedules the same."""
    from test_simgrid_oracle import assert_agrees

    schedule = baseline(topology, kind, "oneshot", size_bytes=size)
    assert_agrees(oracle, topology, schedule, size)


# ------------------------------------------------------------- rotated form
def test_rotation_needs_a_product_of_groups() -> None:
    """Counting the inputs in every buffer: rails then machines sums everything once in either order; a chain of
    exchanges that is not a product leaves a GPU short, and so does one group dimension alone."""
    from taccl_py.baselines.oneshot import _sums_everything

    machines = [(0, 1), (1, 0), (2, 3), (3, 2)]
    rails = [(0, 2), (2, 0), (1, 3), (3, 1)]
    assert _sums_everything(4, [machines, rails]) and _sums_everything(4, [rails, machines])
    chain = [(0, 1), (1, 0), (1, 2), (2, 1)]  # GPU 0 never sees GPU 2's input
    assert _sums_everything(3, [chain[:2], chain[2:]]) is False
    assert _sums_everything(4, [machines]) is False  # never crosses between the pairs


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(2, 70))
def test_the_bitset_count_agrees_with_counting_every_input(data: st.DataObject, n: int) -> None:
    """On random exchange rounds (repeated senders included), the bitset check says what a plain count of
    every input in every buffer says."""
    import numpy as np

    from taccl_py.baselines.oneshot import _sums_everything

    pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] != p[1])
    rounds = data.draw(st.lists(st.lists(pair, max_size=3 * n), min_size=1, max_size=3))
    held = np.eye(n, dtype=np.int64)
    for pairs in rounds:
        before = held.copy()
        for s, d in pairs:
            held[d] += before[s]
    assert _sums_everything(n, rounds) is bool((held == 1).all())


def test_a_product_of_groups_is_found_in_every_order() -> None:
    """Groups of 4 by 3 by 2 (24 GPUs as coordinates): every order of the three dimensions sums everything."""
    import itertools

    from taccl_py.baselines.oneshot import _sums_everything

    coords = list(itertools.product(range(4), range(3), range(2)))
    index = {c: i for i, c in enumerate(coords)}
    rounds = [[(index[a], index[b]) for a in coords for b in coords if a != b
               and all(a[j] == b[j] for j in range(3) if j != dim)] for dim in range(3)]
    for order in itertools.permutations(rounds):
        assert _sums_everything(24, list(order))
    assert not _sums_everything(24, rounds[:2])


@pytest.mark.parametrize("name", ["dgx-a100x2", "dgx-h100x2", "dgx-a100x4"])
def test_rotated_crosses_the_network_while_the_machines_reduce(name: str) -> None:
    """Half the buffer crosses the rails raw while the other half is reduced over NVLink, then they swap: at
    16 KB the rotated form is faster than the hierarchical one (same two latencies, half the bytes each way
    at a time), is chosen by the baseline, and lowers to XML that verifies and times the same."""
    topo = shipped(name)
    size = 16 * KB
    rotated = oneshot_schedule(topo, CollectiveKind.ALLREDUCE, size_bytes=size, form="rotated")
    plain = oneshot_schedule(topo, CollectiveKind.ALLREDUCE, size_bytes=size, form="hierarchical")
    assert rotated.num_channels == 2 and len(rotated.transfers) == 2 * len(plain.transfers)
    rotated_us, plain_us = simulate(topo, rotated, size).time_us, simulate(topo, plain, size).time_us
    assert rotated_us is not None and plain_us is not None and rotated_us < 0.95 * plain_us
    chosen = baseline(topo, "allreduce", "oneshot", size_bytes=size)
    assert simulate(topo, chosen, size).time_us <= rotated_us + 1e-9
    _judge(topo, rotated, size)


@pytest.mark.parametrize("size", [KB, 6 * KB, 64 * KB])
def test_the_rotated_estimate_counts_the_parts_sharing_the_nics(size: int) -> None:
    """Above 32 GPUs forms are chosen by the alpha-beta estimate: on four DGX A100 its figure for the rotated
    form is the simulated time (the parts cross the same NICs in different rounds; at 64 KB the NICs' bytes
    after the rail latency bind, which a per-part estimate alone put 24% low)."""
    from taccl_py.baselines.oneshot import estimate_us

    topo = shipped("dgx-a100x4")
    schedule = oneshot_schedule(topo, CollectiveKind.ALLREDUCE, size_bytes=size, form="rotated")
    assert estimate_us(topo, schedule, size) == pytest.approx(simulate(topo, schedule, size).time_us, rel=1e-6)


def test_rotated_is_refused_where_a_machine_cannot_be_reached_directly() -> None:
    with pytest.raises(NotApplicable, match="no direct route from some other machine"):
        oneshot_schedule(shipped("ndv2x2"), CollectiveKind.ALLREDUCE, size_bytes=4 * KB, form="rotated")


@pytest.mark.slow
@pytest.mark.simgrid
@pytest.mark.parametrize("size", [4 * KB, 64 * KB])
def test_rotated_matches_simgrid(oracle: Callable[[dict[str, Any]], dict[str, Any]], size: int) -> None:
    """SimGrid times the rotated form (parts on their own channels, exchanges of different latencies) the same,
    on two DGX A100 machines joined through leaf and spine switches."""
    from test_simgrid_oracle import assert_agrees

    topo = shipped("dgx-a100x2")
    assert_agrees(oracle, topo, oneshot_schedule(topo, CollectiveKind.ALLREDUCE, size_bytes=size, form="rotated"),
                  size)
