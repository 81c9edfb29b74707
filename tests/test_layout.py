"""The chain and ring search of the baselines' layouts (``taccl_py/baselines/layout.py``).

``hamiltonian_path`` is a budgeted branch and bound; given budget enough to finish, its path must be one of
least bottleneck, which a brute force over every ordering of a few GPUs finds independently.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.baselines.layout import SearchSpace, hamiltonian_path
from taccl_py.library.builder import TopologyBuilder
from taccl_py.topology import Topology


@st.composite
def _graphs(draw: st.DrawFn) -> tuple[Topology, list[float]]:
    """A few GPUs on a directed ring (so the topology is connected) and random extra direct links; bandwidths
    and loads from small sets, so that routes tie."""
    n = draw(st.integers(2, 7))
    builder = TopologyBuilder(f"random{n}", n)
    pairs = {(g, (g + 1) % n) for g in range(n)}
    pairs |= set(draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] != p[1]),
                               max_size=n * n)))
    for src, dst in sorted(pairs):
        builder.link(src, dst, draw(st.sampled_from([25.0, 50.0, 100.0])), 1.0, "link", both=False)
    topology = builder.build(source="random directed graph")
    loads = draw(st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=len(topology.links),
                          max_size=len(topology.links)))
    return topology, loads


def _bottleneck(order: list[int], space: SearchSpace, *, cycle: bool, reverse: bool) -> float | None:
    legs = list(itertools.pairwise(order)) + ([(order[-1], order[0])] if cycle else [])
    costs = [space.cost(b, a) if reverse else space.cost(a, b) for a, b in legs]
    return None if any(c is None for c in costs) else max((c for c in costs if c is not None), default=0.0)


@settings(max_examples=200, deadline=None)
@given(graph=_graphs(), data=st.data())
def test_a_finished_search_finds_a_least_bottleneck_path(graph: tuple[Topology, list[float]],
                                                         data: st.DataObject) -> None:
    topology, loads = graph
    n = topology.num_gpus
    start = data.draw(st.integers(0, n - 1), label="start")
    cycle, reverse = data.draw(st.booleans(), label="cycle"), data.draw(st.booleans(), label="reverse")
    end = data.draw(st.none() | st.integers(0, n - 1).filter(lambda g: g != start), label="end")
    space = SearchSpace(topology, loads)
    found = hamiltonian_path(list(range(n)), start, space, end=end, cycle=cycle, reverse=reverse,
                             budget=1_000_000)
    best = math.inf
    for rest in itertools.permutations([g for g in range(n) if g != start]):
        order = [start, *rest]
        if end is not None and order[-1] != end:
            continue
        cost = _bottleneck(order, space, cycle=cycle, reverse=reverse)
        if cost is not None:
            best = min(best, cost)
    if found is None:
        assert best == math.inf
        return
    assert sorted(found) == list(range(n)) and found[0] == start and (end is None or found[-1] == end)
    assert _bottleneck(found, space, cycle=cycle, reverse=reverse) == best


def test_the_search_goes_past_a_first_path_that_can_be_beaten() -> None:
    """From GPU 0 the cheapest first hop (to 1) leads on through the slowest link (1 -> 2); 0 -> 2 -> 1 is better,
    and only its bottleneck meets the bound (the cheapest way into GPU 2) where the search may stop."""
    builder = TopologyBuilder("three", 3)
    for src, dst, bandwidth in [(0, 1, 100.0), (1, 2, 25.0), (0, 2, 50.0), (2, 1, 50.0), (1, 0, 100.0),
                                (2, 0, 100.0)]:
        builder.link(src, dst, bandwidth, 1.0, "link", both=False)
    space = SearchSpace(builder.build(source="three GPUs"), [0.0] * 6)
    assert hamiltonian_path([0, 1, 2], 0, space) == [0, 2, 1]
