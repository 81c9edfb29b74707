"""ScheduleOrder.waits is exact: it agrees with plain reachability over the start/arrive/commit events."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.collectives import CollectiveKind
from taccl_py.msccl.analysis import ARRIVE, COMMIT, START, ScheduleOrder, analyze
from taccl_py.schedule import Schedule
from taccl_py.testing import spanning_tree_allgathers, spanning_tree_reductions, topologies, with_waits
from taccl_py.topology import Topology

EVENTS = (START, ARRIVE, COMMIT)


def reachable(order: ScheduleOrder, source: tuple[int, int]) -> set[tuple[int, int]]:
    """Every event ``source`` waits for, by a search over the rules of taccl_py.schedule (no labels, no pruning)."""
    transfers = order.schedule.transfers

    def waits_for(event: tuple[int, int]) -> list[tuple[int, int]]:
        t, kind = event
        if kind == ARRIVE:
            return [(t, START)]
        if kind == START:
            out = [(w, COMMIT) for w in order.raw[t] if w >= 0] + [(a, COMMIT) for a in transfers[t].after]
            return out + ([(order.connection_prev[t], ARRIVE)] if order.connection_prev[t] >= 0 else [])
        return [(t, ARRIVE)] + [(w, COMMIT) for w in order.waw[t] if w >= 0] + [(x, ARRIVE) for x in order.war[t]]

    seen = {source}
    stack = [source]
    while stack:
        for e in waits_for(stack.pop()):
            if e not in seen:
                seen.add(e)
                stack.append(e)
    return seen


def check_exact(schedule: Schedule) -> None:
    order = analyze(schedule)
    events = [(t, k) for t in range(len(schedule.transfers)) for k in EVENTS]
    for source in events:
        truth = reachable(order, source)
        for target in events:
            assert order.waits(source, target) == (target in truth), (source, target)


@settings(max_examples=40)
@given(topo=topologies(min_gpus=2, max_gpus=5), data=st.data())
def test_waits_is_reachability(topo: Topology, data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from([CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER]))
    if kind is CollectiveKind.ALLGATHER:
        schedule = data.draw(spanning_tree_allgathers(topo))
    else:
        schedule = data.draw(spanning_tree_reductions(topo, kind))
    check_exact(schedule)


@settings(max_examples=25)
@given(topo=topologies(min_gpus=2, max_gpus=4), data=st.data())
def test_waits_with_after_constraints(topo: Topology, data: st.DataObject) -> None:
    """``after`` constraints, also pointing forward in program order (labels then come from a sort)."""
    schedule = data.draw(with_waits(data.draw(spanning_tree_allgathers(topo))))
    check_exact(schedule)
    order = analyze(schedule)
    assert order._forward_labels() == order._sorted_labels()
    # a forward 'after' from i to a later j that does not wait for i keeps the events acyclic
    transfers = list(schedule.transfers)
    i = data.draw(st.integers(0, len(transfers) - 1))
    later = [j for j in range(i + 1, len(transfers)) if (i, START) not in reachable(order, (j, COMMIT))]
    if later:
        j = data.draw(st.sampled_from(later))
        transfers[i] = replace(transfers[i], after=(*transfers[i].after, j))
        forward = schedule.with_transfers(transfers)
        assert analyze(forward).forward_after
        check_exact(forward)


@settings(max_examples=30)
@given(topo=topologies(min_gpus=2, max_gpus=5), budget=st.sampled_from([1, 4, 10**6]), data=st.data())
def test_surely_waits_is_never_wrong_and_exact_without_a_bound(topo: Topology, budget: int,
                                                               data: st.DataObject) -> None:
    """A bounded search may miss a wait (False) but never invents one; with room enough it is ``waits``."""
    if data.draw(st.booleans()):
        schedule = data.draw(spanning_tree_allgathers(topo))
    else:
        schedule = data.draw(spanning_tree_reductions(topo, CollectiveKind.REDUCE))
    order = analyze(schedule)
    events = [(t, k) for t in range(len(schedule.transfers)) for k in EVENTS]
    for source in events:
        truth = reachable(order, source)
        for target in events:
            found = order.surely_waits(source, target, budget)
            assert not found or target in truth, (source, target)
            if budget == 10**6:
                assert found == (target in truth), (source, target)
