"""Hypothesis strategies for property-testing schedules in your own code.

``from taccl_py.testing import topologies`` needs the ``hypothesis`` package
(installed with the ``test`` extra). Every topology drawn validates: GPUs are
strongly connected, bandwidths are positive, latencies non-negative.
``spanning_tree_allgathers(topology)`` draws *correct* Allgather schedules on
it (one random spanning tree per chunk plus a few redundant copies, random
routes, random channels and interleaving), so concurrent transfers share
links in many ways;
``spanning_tree_reductions(topology, kind)`` draws ReduceScatter / Reduce
schedules the same way (in-trees of reduce transfers), and
``with_waits(schedule)`` adds random ``after`` and ``not_before_us`` waits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.topology import Link, Route, Switch, Topology, check_topology

__all__ = ["direct_routes", "spanning_tree_allgathers", "spanning_tree_reductions", "topologies",
           "with_waits"]


@st.composite
def topologies(draw: Any, min_gpus: int = 2, max_gpus: int = 8, max_switches: int = 2,
               min_switches: int = 0, bandwidths: tuple[float, float] = (1.0, 100.0),
               latencies: tuple[float, float] = (0.0, 5.0)) -> Topology:
    """Random connected topologies, with and without switches.

    GPUs are joined by a backbone (a bidirectional ring, or a star through a
    switch) so that every GPU reaches every other; random extra directed links
    between GPUs and switches are then added.
    """
    n = draw(st.integers(min_gpus, max_gpus), label="gpus")
    num_switches = draw(st.integers(min_switches, max_switches), label="switches")
    switches = tuple(Switch(f"sw{k}") for k in range(num_switches))
    bw = st.sampled_from([bandwidths[0], bandwidths[1], (bandwidths[0] + bandwidths[1]) / 2]) | st.floats(
        bandwidths[0], bandwidths[1], allow_nan=False, allow_infinity=False)
    lat = st.sampled_from([latencies[0], latencies[1]]) | st.floats(latencies[0], latencies[1], allow_nan=False)
    links: dict[tuple[Any, Any], Link] = {}

    def add(u: Any, v: Any) -> None:
        if u != v and (u, v) not in links:
            links[(u, v)] = Link(u, v, draw(bw), draw(lat), kind="nvlink" if isinstance(v, int)
                                 and isinstance(u, int) else "switch")

    backbone_switch = num_switches > 0 and draw(st.booleans(), label="star backbone")
    if backbone_switch:
        for g in range(n):
            add(g, "sw0")
            add("sw0", g)
    else:
        for g in range(n):
            add(g, (g + 1) % n)
            add((g + 1) % n, g)
    vertices: list[Any] = [*range(n), *(s.name for s in switches)]
    for name in [s.name for s in switches]:
        # every switch is reachable and can reach back, so it never dangles
        g = draw(st.integers(0, n - 1))
        add(g, name)
        add(name, draw(st.integers(0, n - 1)))
    extra = draw(st.lists(st.tuples(st.sampled_from(vertices), st.sampled_from(vertices)), max_size=2 * n))
    for u, v in extra:
        add(u, v)
    return check_topology(Topology(name=f"random{n}", num_gpus=n, links=tuple(links.values()),
                                   switches=switches, source="hypothesis"))


def direct_routes(topology: Topology, src: int, dst: int, *, max_hops: int = 4,
                  limit: int = 8) -> list[Route]:
    """Up to ``limit`` loop-free routes from GPU ``src`` to ``dst`` through switches only, shortest first."""
    vid = topology.vertex_id
    found: list[Route] = []
    stack: list[tuple[int, tuple[int, ...], frozenset[int]]] = [(vid[src], (), frozenset([vid[src]]))]
    while stack:
        at, route, seen = stack.pop()
        for li in topology.out_links[at]:
            link = topology.links[li]
            nxt = vid[link.dst]
            if nxt in seen:
                continue
            if link.dst == dst:
                found.append((*route, li))
            elif not topology.is_gpu(link.dst) and len(route) + 1 < max_hops:
                stack.append((nxt, (*route, li), seen | {nxt}))
    found.sort(key=lambda r: (len(r), r))
    return found[:limit]


class _Routes:
    """Switch-only routes between GPU pairs, found once per pair."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.cache: dict[tuple[int, int], list[Route]] = {}

    def __call__(self, u: int, v: int) -> list[Route]:
        if (u, v) not in self.cache:
            self.cache[(u, v)] = direct_routes(self.topology, u, v)
        return self.cache[(u, v)]


def _interleave(draw: Any, sequences: list[list[Transfer]]) -> list[Transfer]:
    """A random merge of ``sequences`` that keeps each one's order."""
    order: list[Transfer] = []
    cursors = [0] * len(sequences)
    while True:
        open_ones = [k for k, seq in enumerate(sequences) if cursors[k] < len(seq)]
        if not open_ones:
            return order
        k = draw(st.sampled_from(open_ones), label="next tree")
        order.append(sequences[k][cursors[k]])
        cursors[k] += 1


def _tree_edges(draw: Any, routes: _Routes, root: int, n: int, *,
                inward: bool) -> list[tuple[int, int, Route]]:
    """A random spanning tree of the GPUs grown from ``root``: (src, dst, route) edges in growth order.

    Outward trees send away from the root; inward trees send towards it.
    """
    reached = [root]
    edges: list[tuple[int, int, Route]] = []
    while len(reached) < n:
        if inward:
            frontier = [(u, v) for v in reached for u in range(n) if u not in reached and routes(u, v)]
        else:
            frontier = [(u, v) for u in reached for v in range(n) if v not in reached and routes(u, v)]
        u, v = draw(st.sampled_from(frontier), label="tree edge")
        edges.append((u, v, draw(st.sampled_from(routes(u, v)), label="route")))
        reached.append(u if inward else v)
    return edges


def _extra_copies(draw: Any, routes: _Routes, edges: list[tuple[int, int, Route]], source: int, n: int,
                  max_extra: int) -> list[tuple[int, int, Route]]:
    """``edges`` (a tree in growth order) plus up to ``max_extra`` redundant copies.

    Each copy is placed after its sender has been reached.
    """
    edges = list(edges)
    for _ in range(draw(st.integers(0, max_extra), label="extra copies")):
        position = draw(st.integers(1, len(edges)), label="extra copy after")
        holders = [source, *(v for _, v, _ in edges[:position])]
        pairs = [(u, v) for u in holders for v in range(n) if v != u and routes(u, v)]
        u, v = draw(st.sampled_from(pairs), label="extra copy")
        edges.insert(position, (u, v, draw(st.sampled_from(routes(u, v)), label="route")))
    return edges


@st.composite
def spanning_tree_allgathers(draw: Any, topology: Topology, max_chunk_factor: int = 2,
                             max_channels: int = 2, max_extra_copies: int = 2) -> Schedule:
    """A correct Allgather on ``topology``: every chunk spreads along its own random spanning tree.

    Each tree edge is one transfer over a randomly drawn switch-only route; the
    trees' edges are interleaved at random (each tree in growth order, so a
    GPU forwards a chunk only after receiving it) and put on random channels.
    Each chunk also gets up to ``max_extra_copies`` redundant copies (to a GPU
    that holds or will hold it anyway): harmless to the result, they make
    later writes of a copy wait for earlier reads of it.
    """
    n = topology.num_gpus
    c = draw(st.integers(1, max_chunk_factor), label="chunk factor")
    channels = draw(st.integers(1, max_channels), label="channels")
    routes = _Routes(topology)
    trees: list[list[Transfer]] = []
    for source in range(n):
        for piece in range(c):
            chunk = source * c + piece
            edges = _tree_edges(draw, routes, source, n, inward=False)
            if n > 1 and max_extra_copies > 0:
                edges = _extra_copies(draw, routes, edges, source, n, max_extra_copies)
            trees.append([Transfer(u, v, (chunk,), route,
                                   channel=draw(st.integers(0, channels - 1), label="channel"))
                          for u, v, route in edges])
    return Schedule(Collective(CollectiveKind.ALLGATHER, n, c), tuple(_interleave(draw, trees)),
                    name="random-spanning-trees", topology=topology.name)


@st.composite
def spanning_tree_reductions(draw: Any, topology: Topology,
                             kind: CollectiveKind = CollectiveKind.REDUCESCATTER,
                             max_chunk_factor: int = 2, max_channels: int = 2) -> Schedule:
    """A correct ReduceScatter or Reduce on ``topology``: every chunk is reduced up its own random in-tree.

    Every GPU reduces its contribution into its parent's copy once all its
    children have reduced theirs into its own (each tree's edges run leaves
    first), so every contribution reaches the chunk's destination exactly once.
    Reduce draws its root. Routes, channels and the interleaving are random.
    """
    if kind not in (CollectiveKind.REDUCESCATTER, CollectiveKind.REDUCE):
        raise ValueError(f"spanning_tree_reductions draws reducescatter or reduce, not {kind.value}")
    n = topology.num_gpus
    c = draw(st.integers(1, max_chunk_factor), label="chunk factor")
    channels = draw(st.integers(1, max_channels), label="channels")
    root = draw(st.integers(0, n - 1), label="root") if kind is CollectiveKind.REDUCE else 0
    collective = Collective(kind, n, c, root)
    routes = _Routes(topology)
    trees: list[list[Transfer]] = []
    for chunk in range(collective.num_chunks):
        edges = _tree_edges(draw, routes, collective.destination_of(chunk), n, inward=True)
        trees.append([Transfer(u, v, (chunk,), route, op=Op.REDUCE,
                               channel=draw(st.integers(0, channels - 1), label="channel"))
                      for u, v, route in reversed(edges)])
    return Schedule(collective, tuple(_interleave(draw, trees)), name="random-reduction-trees",
                    topology=topology.name)


@st.composite
def with_waits(draw: Any, schedule: Schedule, max_after: int = 2, max_delay_us: float = 20.0) -> Schedule:
    """``schedule`` with random extra waits: ``after`` edges to earlier transfers and ``not_before_us``.

    Extra waits only delay transfers. The result stays correct when no copy
    a transfer reads is later overwritten with different data (true of the
    spanning-tree strategies above, whose repeated copies carry the same data).
    """
    transfers = list(schedule.transfers)
    for i, t in enumerate(transfers):
        after = t.after
        if i and draw(st.integers(0, 3), label="add after") == 0:
            extra = draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=max_after, unique=True),
                          label="after")
            after = tuple(sorted({*after, *extra}))
        not_before = t.not_before_us
        if draw(st.integers(0, 5), label="add not_before") == 0:
            not_before = draw(st.floats(0.0, max_delay_us, allow_nan=False), label="not_before_us")
        transfers[i] = replace(t, after=after, not_before_us=not_before)
    return schedule.with_transfers(transfers)
