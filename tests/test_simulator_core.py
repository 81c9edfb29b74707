"""The simulator's core semantics on hand-checkable cases."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import ring, star
from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import SimOptions, simulate
from taccl_py.topology import Topology

GOLDEN_BW = 50 * 2**30 / 1e9  # ASTRA-sim's 50 GB/s of 2^30 bytes, in GB/s of 1e9 bytes


def ring_allgather(topology: Topology) -> Schedule:
    n = topology.num_gpus
    transfers = []
    for step in range(n - 1):
        for r in range(n):
            nxt = (r + 1) % n
            transfers.append(Transfer(r, nxt, ((r - step) % n,), (topology.link_index[(r, nxt)],)))
    return Schedule(Collective(CollectiveKind.ALLGATHER, n), tuple(transfers))


def test_golden_value_ring_allgather_8_ranks() -> None:
    topo = ring(8, GOLDEN_BW, 0.5)
    result = simulate(topo, ring_allgather(topo), 8 * 2**20)
    assert result.correct, result.error
    assert result.time_us == pytest.approx(140.21875, abs=1e-9)


@pytest.mark.parametrize("n", [2, 3, 5, 16])
def test_ring_formula(n: int) -> None:
    topo = ring(n, 25.0, 0.7)
    size = n * 3_000_000
    result = simulate(topo, ring_allgather(topo), size)
    assert result.correct
    assert result.time_us == pytest.approx((n - 1) * (0.7 + size / n / 25e3), rel=1e-12)
    assert result.algbw_GBps == pytest.approx(size / result.time_us / 1e3)
    assert result.busbw_GBps == pytest.approx(result.algbw_GBps * (n - 1) / n)


def test_two_flows_share_a_link_max_min() -> None:
    topo = star(3)
    up0, up1 = topo.link_index[(0, "sw")], topo.link_index[(1, "sw")]
    down2 = topo.link_index[("sw", 2)]
    col = Collective(CollectiveKind.ALLGATHER, 3)
    ag = [Transfer(0, 2, (0,), (up0, down2)), Transfer(1, 2, (1,), (up1, down2))]
    # rank 2's chunk and the remaining deliveries, so the schedule is a complete allgather
    rest = []
    for src in range(3):
        for dst in range(3):
            if src != dst and dst != 2:
                rest.append(Transfer(src, dst, (src,), topo.gpu_route(src, dst) or ()))
    sched = Schedule(col, tuple(ag + rest))
    size = 3 * 10_000.0
    result = simulate(topo, sched, size)
    assert result.correct, result.error
    # both flows into rank 2 share the 10 GB/s down-link: 2 us latency + 2 x 10 KB at 10 GB/s
    assert result.arrive_us[0] == pytest.approx(2.0 + 2 * 10_000 / 10e3)


def test_sending_a_chunk_not_held_is_caught() -> None:
    topo = ring(3, 10.0, 1.0)
    col = Collective(CollectiveKind.ALLGATHER, 3)
    bad = Schedule(col, (Transfer(0, 1, (2,), (topo.link_index[(0, 1)],)),))
    result = simulate(topo, bad, 3000)
    assert not result.correct
    assert result.time_us is None
    assert "does not hold" in (result.error or "")


def test_double_reduction_is_caught() -> None:
    topo = ring(2, 10.0, 1.0)
    col = Collective(CollectiveKind.ALLREDUCE, 2)
    l01 = topo.link_index[(0, 1)]
    sched = Schedule(col, (
        Transfer(0, 1, (0, 1), (l01,), Op.REDUCE),
        Transfer(0, 1, (0,), (l01,), Op.REDUCE),
    ))
    result = simulate(topo, sched, 2000)
    assert not result.correct and "second time" in (result.error or "")


def test_allreduce_two_ranks_correct() -> None:
    topo = ring(2, 10.0, 1.0)
    col = Collective(CollectiveKind.ALLREDUCE, 2)
    l01, l10 = topo.link_index[(0, 1)], topo.link_index[(1, 0)]
    sched = Schedule(col, (
        Transfer(0, 1, (1,), (l01,), Op.REDUCE),
        Transfer(1, 0, (0,), (l10,), Op.REDUCE),
        Transfer(1, 0, (1,), (l10,)),
        Transfer(0, 1, (0,), (l01,)),
    ))
    result = simulate(topo, sched, 2000)
    assert result.correct, result.error
    assert result.time_us == pytest.approx(2 * (1.0 + 1000 / 10e3))


def test_deadlock_names_stuck_transfers() -> None:
    topo = ring(2, 10.0, 1.0)
    col = Collective(CollectiveKind.ALLGATHER, 2)
    l01, l10 = topo.link_index[(0, 1)], topo.link_index[(1, 0)]
    sched = Schedule(col, (Transfer(0, 1, (0,), (l01,), after=(1,)), Transfer(1, 0, (1,), (l10,), after=(0,))))
    result = simulate(topo, sched, 2000)
    assert not result.correct and "deadlock" in (result.error or "")
    assert result.stuck == (0, 1)


def test_missing_delivery_violates_postcondition() -> None:
    topo = ring(3, 10.0, 1.0)
    sched = ring_allgather(topo)
    dropped = sched.with_transfers(sched.transfers[:-1])
    result = simulate(topo, dropped, 3000)
    assert not result.correct and "post-condition" in (result.error or "")


def test_step_overhead_adds_per_transfer() -> None:
    topo = ring(4, 10.0, 1.0)
    base = simulate(topo, ring_allgather(topo), 4000).time_us
    slow = simulate(topo, ring_allgather(topo), 4000, SimOptions(step_overhead_us=2.0)).time_us
    assert base is not None and slow == pytest.approx(base + 3 * 2.0)


def _route_problem_walked(topology: Topology, t: Transfer) -> str | None:
    """The test's own route check of one transfer, hop by hop from its sender (the oracle of the one below)."""
    links = topology.links
    if not t.route:
        return "empty route"
    at: object = t.src
    for k, li in enumerate(t.route):
        if not 0 <= li < len(links):
            return f"route names link {li}, which does not exist"
        if links[li].src != at:
            return f"route is not connected at hop {k} ({at!r} then link {links[li].src!r}->{links[li].dst!r})"
        at = links[li].dst
        if k < len(t.route) - 1 and topology.is_gpu(at):
            return f"route passes through GPU {at}; relaying through a GPU takes two transfers"
    return None if at == t.dst else f"route ends at {at!r}, not at rank {t.dst}"


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_routes_are_checked_once_each_and_worded_as_a_walk_from_the_sender(data: st.DataObject) -> None:
    """structural_error checks each distinct route once (check_route) and then each transfer's ends: every broken
    route, on its first transfer and on later ones sharing it, gets the message a hop-by-hop walk gives."""
    from taccl_py.baselines import baseline
    from taccl_py.library import resolve_topology

    topo = resolve_topology(data.draw(st.sampled_from(["dgx1", "ndv2x2", "ring8"])))
    schedule = baseline(topo, CollectiveKind.ALLTOALL, "direct")  # each sender's routes go to every receiver
    transfers = list(schedule.transfers)
    count = len(topo.links)
    hops = st.integers(-1, count)  # -1 and count name no link
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(transfers) - 1))
        route = list(transfers[i].route)
        how = data.draw(st.sampled_from(["empty", "replace", "insert", "drop", "another's"] if route else
                                        ["insert", "another's"]))
        if how == "empty":
            route = []
        elif how == "replace":
            route[data.draw(st.integers(0, len(route) - 1))] = data.draw(hops)
        elif how == "insert":
            route.insert(data.draw(st.integers(0, len(route))), data.draw(hops))
        elif how == "drop":
            route.pop(data.draw(st.integers(0, len(route) - 1)))
        else:  # a route of the same sender: it starts right and may end elsewhere
            same = [t.route for t in transfers if t.src == transfers[i].src]
            route = list(data.draw(st.sampled_from(same)))
        transfers[i] = replace(transfers[i], route=tuple(route))
    broken = schedule.with_transfers(transfers)
    want = next((f"transfer {i}: {problem}" for i, t in enumerate(transfers)
                 if (problem := _route_problem_walked(topo, t)) is not None), None)
    assert broken.structural_error(topo) == want


def test_route_through_gpu_is_rejected() -> None:
    topo = ring(3, 10.0, 1.0)
    col = Collective(CollectiveKind.ALLGATHER, 3)
    route = (topo.link_index[(0, 1)], topo.link_index[(1, 2)])
    result = simulate(topo, Schedule(col, (Transfer(0, 2, (0,), route),)), 3000)
    assert not result.correct and "passes through GPU 1" in (result.error or "")
