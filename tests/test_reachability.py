"""GPU reachability through switches (baselines.layout.gpu_reachability) against a search from every GPU."""

from __future__ import annotations

from hypothesis import given, settings

from taccl_py.baselines.layout import SearchSpace, gpu_reachability
from taccl_py.library import resolve_topology
from taccl_py.testing import topologies
from taccl_py.topology import Link, Switch, Topology


def _searched(topology: Topology, src: int) -> tuple[int, ...]:
    """GPUs with a route from ``src`` that passes through switches only: a depth-first search."""
    vid, n = topology.vertex_id, topology.num_gpus
    seen, found, stack = {src}, [], [src]
    while stack:
        u = stack.pop()
        for li in topology.out_links[u]:
            w = vid[topology.links[li].dst]
            if w not in seen:
                seen.add(w)
                (found if w < n else stack).append(w)
    return tuple(sorted(found))


def _check(topology: Topology) -> None:
    out, into = gpu_reachability(topology)
    n = topology.num_gpus
    want = [_searched(topology, g) for g in range(n)]
    assert list(out) == want
    assert list(into) == [tuple(g for g in range(n) if h in want[g]) for h in range(n)]
    space = SearchSpace(topology, [0.0] * len(topology.links))
    assert [space.reachable(g) for g in range(n)] == [list(w) for w in want]


def test_shipped_fabrics() -> None:
    for name in ("dgx-a100x4", "ndv2x2", "dgx2x2", "mi250x2", "ring8"):
        _check(resolve_topology(name))


def test_one_way_switch_chains() -> None:
    """Switches that reach others only one way (not strongly connected): each reaches only what is downstream."""
    links = [Link(0, "a", 10.0, 1.0), Link("a", "b", 10.0, 1.0), Link("b", 1, 10.0, 1.0), Link("a", 2, 10.0, 1.0),
             Link(1, "b", 10.0, 1.0), Link(2, "c", 10.0, 1.0), Link("c", "a", 10.0, 1.0), Link(3, 0, 10.0, 1.0)]
    _check(Topology("chains", 4, tuple(links), (Switch("a"), Switch("b"), Switch("c"))))


@settings(max_examples=30, deadline=None)
@given(topologies(max_gpus=6, max_switches=3))
def test_random_topologies(topology: Topology) -> None:
    _check(topology)
