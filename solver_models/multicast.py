"""Routing through switches that replicate (or combine) data: multicast trees as columns.

The unicast routing (:mod:`solver_models.routing`) spreads each GPU's data over
spanning arborescences of the logical graph, every logical edge one transfer
from a GPU to a GPU. Where switches can replicate a chunk (the ``multicast``
flag; on the reversed topology of a reduction, the switches that ``reduce``), a
chunk can instead leave its GPU once and be copied in the network to several
GPUs: one network group (docs/simulator.md). This module adds those switches to
the logical graph as vertices, the *branch graph*:

* the logical graph's GPU -> GPU edges whose route crosses no branching switch
  (a unicast transfer; one that crosses one is two segments below);
* *segments* GPU -> branching switch, branching switch -> GPU and between
  branching switches: the lowest-latency route between the two through
  non-branching switches only (a NIC, a switch without the flag).

A column is an arborescence of the branch graph rooted at the GPU whose data it
carries, reaching every GPU; branching switches are Steiner vertices (pruned
when no GPU lies below them). It decomposes into *hops*: a GPU's edge to a GPU
is one unicast transfer, a GPU's edge into a switch one network group whose
members are the GPUs below that switch (down to the next GPUs, which may relay
further hops), each along its concatenated segments. A hop's links carry the
piece once (the union of its members' routes), so a column's load counts a link
once per hop: the multicast saving, which the master LP of
:func:`~solver_models.routing.tree_columns` then prices exactly like unicast
trees. Pricing: Chu-Liu/Edmonds on the branch graph under the link duals (its
cost is the hop loads' price as long as no two segments of one hop share a
link); a hop whose members cannot form one network group (two segments through
one non-branching switch) is split into unicast transfers, and its load
counted as such.

The integer master, the orderings and the scheduling model of the unicast
synthesis then run unchanged on these columns (:func:`assign_pieces`).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import numpy as np

from solver_models.arborescence import min_arborescence
from solver_models.logical import LogicalGraph
from solver_models.routing import (
    TREE_PRICING_S,
    Column,
    ColumnBudget,
    ColumnPool,
    Commodity,
    LinkModel,
    _column_generation,
)
from solver_models.symmetry import Symmetry
from taccl_py.errors import Infeasible
from taccl_py.schedule import Transfer, group_error
from taccl_py.topology import Route, Topology
from taccl_py.units import BYTES_PER_US_PER_GBPS, gbps_to_bytes_per_us

__all__ = ["BranchGraph", "Hop", "HopColumn", "branch_graph", "branching_view", "hops_of", "multicast_columns"]


@dataclass(frozen=True)
class Hop:
    """One send of a piece: ``sender`` to each ``(receiver, route)`` of ``members``.

    Several members form one network group (the switches replicate the piece);
    one member is a plain unicast transfer. ``links``: every link the hop's
    bytes cross, once each for a group, as routed for a unicast transfer.
    """

    sender: int
    members: tuple[tuple[int, Route], ...]
    links: tuple[int, ...]
    latency_us: tuple[float, ...]
    """Each member's route latency."""
    bandwidth_GBps: float
    """The slowest link the bytes cross."""

    @property
    def receivers(self) -> tuple[int, ...]:
        return tuple(r for r, _ in self.members)

    @property
    def is_group(self) -> bool:
        return len(self.members) > 1

    def time_us(self, piece_bytes: float) -> float:
        """Alone on the network, when the farthest receiver has the piece (the bytes move at the slowest link)."""
        return max(self.latency_us) + piece_bytes / gbps_to_bytes_per_us(self.bandwidth_GBps)

    def image(self, symmetry: Symmetry, g: int) -> Hop:
        """The hop moved by group element ``g`` (GPUs by its vertex permutation, links by its link permutation)."""
        if g == 0:
            return self
        perm, links = symmetry.perms[g], symmetry.link_perms[g]
        return Hop(perm[self.sender], tuple((perm[r], tuple(links[li] for li in route)) for r, route in self.members),
                   tuple(links[li] for li in self.links), self.latency_us, self.bandwidth_GBps)


@dataclass(frozen=True)
class HopColumn(Column):
    """A route tree through branching switches, as the hops that carry one piece from ``rep`` to every GPU."""

    sends: tuple[Hop, ...]
    """The hops, each after the one that brings the piece to its sender."""

    def path_time_us(self, graph: LogicalGraph, piece_bytes: float) -> float:
        """Store-and-forward at GPUs, cut-through in the switches: when the last GPU has one piece, alone."""
        reached: dict[int, float] = {self.rep: 0.0}
        worst = 0.0
        for hop in self.sends:
            start = reached[hop.sender]
            rate = gbps_to_bytes_per_us(hop.bandwidth_GBps)
            for (receiver, _), latency in zip(hop.members, hop.latency_us, strict=True):
                reached[receiver] = start + latency + piece_bytes / rate
                worst = max(worst, reached[receiver])
        return worst

    def image_link_usage(self, graph: LogicalGraph, symmetry: Symmetry, g: int) -> dict[int, int]:
        links = symmetry.link_perms[g]
        usage: dict[int, int] = {}
        for hop in self.sends:
            for li in hop.links:
                image = links[li]
                usage[image] = usage.get(image, 0) + 1
        return usage


@dataclass(frozen=True)
class BranchGraph(LogicalGraph):
    """The logical graph with the branching switches as extra vertices (ids ``num_gpus ..``).

    ``vertex_ids[k]``: the topology's dense vertex id of branch vertex k (a GPU's is its rank);
    ``branching``: the names of the switches that may replicate data on this direction.
    """

    vertex_ids: tuple[int, ...] = ()
    branching: tuple[str, ...] = ()
    num_vertices: int = 0

    def edge_matrix(self, values: np.ndarray, *, source: int | None = None) -> np.ndarray:
        matrix = np.full((self.num_vertices, self.num_vertices), np.inf)
        if self.edges:
            us = np.fromiter((u for u, _ in self.edges), dtype=np.int64, count=len(self.edges))
            vs = np.fromiter((v for _, v in self.edges), dtype=np.int64, count=len(self.edges))
            matrix[us, vs] = values
        return matrix

    def is_switch(self, vertex: int) -> bool:
        return vertex >= self.num_gpus


def _segments_from(topology: Topology, start: int, stops: Collection[int]) -> dict[int, Route]:
    """Lowest-latency routes (ties: fewer hops, then link order) from vertex id ``start`` to every vertex of
    ``stops`` (GPUs and branching switches), passing only through other vertices: non-branching switches."""
    links = topology.links
    vid = topology.vertex_id
    best: dict[int, tuple[float, int, int]] = {start: (0.0, 0, -1)}
    heap: list[tuple[float, int, int]] = [(0.0, 0, start)]
    done: set[int] = set()
    while heap:
        lat, hops, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        if u != start and u in stops:
            continue  # a GPU or a branching switch ends a segment
        for li in topology.out_links[u]:
            v = vid[links[li].dst]
            cand = (lat + links[li].latency, hops + 1, li)
            old = best.get(v)
            if old is None or cand[:2] < old[:2]:
                best[v] = cand
                heapq.heappush(heap, (cand[0], cand[1], v))
    routes: dict[int, Route] = {}
    for target in stops:
        if target == start or target not in best:
            continue
        path: list[int] = []
        v = target
        while v != start:
            li = best[v][2]
            path.append(li)
            v = vid[links[li].src]
        routes[target] = tuple(reversed(path))
    return routes


def branch_graph(topology: Topology, logical: LogicalGraph, branching: Collection[str]) -> BranchGraph:
    """The branch graph of ``logical`` with the switches named in ``branching`` as vertices (see the module)."""
    n = topology.num_gpus
    vid = topology.vertex_id
    names = tuple(s.name for s in topology.switches if s.name in branching)
    vertex_ids = (*range(n), *(vid[name] for name in names))
    local = {v: k for k, v in enumerate(vertex_ids)}
    switch_ids = frozenset(vertex_ids[n:])
    edges: list[tuple[int, int]] = []
    routes: list[Route] = []
    for (u, v), route in zip(logical.edges, logical.routes, strict=True):
        if not any(vid[topology.links[li].dst] in switch_ids for li in route):
            edges.append((u, v))
            routes.append(route)
    stops = frozenset(vertex_ids)
    for k, start in enumerate(vertex_ids):
        found = _segments_from(topology, start, stops)
        for target in sorted(found, key=lambda t: local[t]):
            if k < n and target < n:
                continue  # GPU -> GPU edges are the logical graph's (they respect the sketch)
            edges.append((k, local[target]))
            routes.append(found[target])
    index = {e: i for i, e in enumerate(edges)}
    latency = np.array([topology.route_latency(r) for r in routes], dtype=float)
    bandwidth = np.array([topology.route_bandwidth(r) for r in routes], dtype=float)
    machine = topology.machine_of
    inter = np.array([u < n and v < n and machine[u] != machine[v] for u, v in edges], dtype=bool)
    return BranchGraph(num_gpus=n, edges=tuple(edges), routes=tuple(routes), latency_us=latency,
                       bandwidth_GBps=bandwidth, index=index, inter_machine=inter, source_forbidden={},
                       description=f"{logical.description}; switches that branch: {', '.join(names) or 'none'}",
                       vertex_ids=vertex_ids, branching=names, num_vertices=len(vertex_ids))


# ------------------------------------------------------------------- columns
def _children(graph: BranchGraph, edges: Sequence[int]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for e in edges:
        children.setdefault(graph.edges[e][0], []).append(e)
    return children


def _hop(topology: Topology, sender: int, members: list[tuple[int, Route]]) -> Hop:
    if len(members) == 1:
        links: tuple[int, ...] = members[0][1]
    else:
        links = tuple(dict.fromkeys(li for _, route in members for li in route))
    return Hop(sender, tuple(members), links, tuple(topology.route_latency(r) for _, r in members),
               topology.route_bandwidth(links))


def _valid_group(topology: Topology, sender: int, members: Sequence[tuple[int, Route]]) -> bool:
    """Can these members be one network group (the routes a tree whose branch points may replicate)?"""
    probe = [Transfer(sender, r, (0,), route, group=0) for r, route in members]
    return group_error(topology, probe, 0, len(probe)) is None


def branching_view(topology: Topology, branching: Collection[str]) -> Topology:
    """``topology`` with exactly the ``branching`` switches able to replicate (and none to combine): a group that is
    valid here replicates only where this direction allows (on the reversed topology of a reduction, where the
    switches combine)."""
    return replace(topology, switches=tuple(replace(s, multicast=s.name in branching, reduce=False)
                                            for s in topology.switches))


def hops_of(topology: Topology, graph: BranchGraph, rep: int, edges: Sequence[int]) -> tuple[Hop, ...]:
    """The hops of the tree ``edges`` (branch-graph edges, parents before children) rooted at GPU ``rep``.

    A GPU's edge to a GPU is a unicast hop; its edge into a switch one hop to
    every GPU below the switch. A hop that cannot be one network group on
    ``topology`` (give the :func:`branching_view`) is split into unicast
    transfers along the lowest-latency GPU routes.
    """
    children = _children(graph, edges)
    hops: list[Hop] = []
    frontier = [rep]
    while frontier:
        nxt: list[int] = []
        for u in frontier:
            for e in children.get(u, ()):
                v = graph.edges[e][1]
                if not graph.is_switch(v):
                    hops.append(_hop(topology, u, [(v, graph.routes[e])]))
                    nxt.append(v)
                    continue
                members: list[tuple[int, Route]] = []
                stack: list[tuple[int, Route]] = [(e, graph.routes[e])]
                while stack:
                    edge, route = stack.pop()
                    w = graph.edges[edge][1]
                    if not graph.is_switch(w):
                        members.append((w, route))
                        continue
                    stack += [(f, route + graph.routes[f]) for f in reversed(children.get(w, ()))]
                members.sort()
                if len(members) > 1 and not _valid_group(topology, u, members):
                    for w, _ in members:
                        direct = topology.gpu_route(u, w)
                        if direct is None:  # pragma: no cover - the segments are a switch-only route
                            raise Infeasible(f"routing: no route from GPU {u} to GPU {w} through switches")
                        hops.append(_hop(topology, u, [(w, direct)]))
                elif members:
                    hops.append(_hop(topology, u, members))
                nxt += [w for w, _ in members]
        frontier = sorted(nxt)
    return tuple(hops)


def _prune(graph: BranchGraph, parent: np.ndarray, root: int) -> tuple[int, ...]:
    """The tree's edges, parents first, without switches that lead to no GPU."""
    children: dict[int, list[int]] = {}
    for v, p in enumerate(parent):
        if p >= 0:
            children.setdefault(int(p), []).append(v)
    useful: dict[int, bool] = {}

    def leads_to_gpu(v: int) -> bool:
        if v not in useful:
            useful[v] = not graph.is_switch(v) or any(leads_to_gpu(w) for w in children.get(v, ()))
        return useful[v]

    order: list[int] = []
    frontier = [root]
    while frontier:
        nxt = []
        for u in frontier:
            for v in sorted(children.get(u, ())):
                if leads_to_gpu(v):
                    order.append(graph.index[(u, v)])
                    nxt.append(v)
        frontier = nxt
    return tuple(order)


def _reachable(graph: BranchGraph, root: int) -> np.ndarray:
    seen = np.zeros(graph.num_vertices, dtype=bool)
    seen[root] = True
    out: dict[int, list[int]] = {}
    for u, v in graph.edges:
        out.setdefault(u, []).append(v)
    stack = [root]
    while stack:
        u = stack.pop()
        for v in out.get(u, ()):
            if not seen[v]:
                seen[v] = True
                stack.append(v)
    return seen


def multicast_columns(topology: Topology, graph: BranchGraph, symmetry: Symmetry, *,
                      roots: Sequence[int] | None = None, budget: ColumnBudget | None = None) -> ColumnPool:
    """Route trees through the branching switches for every representative (Allgather; Broadcast with ``roots``).

    The same column generation as :func:`~solver_models.routing.tree_columns`
    (master LP over link orbits, deterministic budget), with columns priced on
    the branch graph and loaded per hop (a group's link once).
    """
    model = LinkModel.build(topology, graph, symmetry)
    commodities = [(r, -1) for r in (roots if roots is not None else symmetry.reps)]
    weights = np.array([symmetry.order / symmetry.orbit_size[symmetry.link_orbit[li]]
                        for li in range(len(topology.links))])
    reach = {c[0]: _reachable(graph, c[0]) for c in commodities}
    for rep, seen in reach.items():
        missing = [g for g in range(graph.num_gpus) if not seen[g]]
        if missing:
            raise Infeasible(f"routing: GPU {missing[0]} cannot be reached from GPU {rep} over the links the sketch "
                             "allows")

    # a GPU that relays into the switches pays one more latency in time: in a tie, the switches feed each other
    tails = np.array([u for u, _ in graph.edges], dtype=np.int64)
    relay = (tails < graph.num_gpus) & np.array([graph.is_switch(v) for _, v in graph.edges], dtype=bool)
    relay_us = min((link.latency for link in topology.links), default=0.0)

    def price(commodity: Commodity, edge_cost: np.ndarray, tie: float) -> tuple[int, ...]:
        rep = commodity[0]
        into_switch = relay & (tails != rep)
        matrix = graph.edge_matrix(edge_cost + tie * (graph.latency_us + relay_us * into_switch))
        keep = np.flatnonzero(reach[rep])
        sub = matrix[np.ix_(keep, keep)]
        parent_sub = min_arborescence(sub, int(np.searchsorted(keep, rep)))
        parent = np.full(graph.num_vertices, -1, dtype=np.int64)
        for k, p in enumerate(parent_sub):
            if p >= 0:
                parent[keep[k]] = keep[p]
        return _prune(graph, parent, rep)

    view = branching_view(topology, graph.branching)

    def make(commodity: Commodity, edges: tuple[int, ...]) -> Column:
        hops = hops_of(view, graph, commodity[0], edges)
        load = np.zeros(symmetry.num_link_orbits)
        for hop in hops:
            for li in hop.links:
                load[symmetry.link_orbit[li]] += weights[li]
        depth: dict[int, tuple[int, float]] = {commodity[0]: (0, 0.0)}
        for hop in hops:
            d, lat = depth[hop.sender]
            for (receiver, _), latency in zip(hop.members, hop.latency_us, strict=True):
                depth[receiver] = (d + 1, lat + latency)
        return HopColumn(commodity[0], commodity[1], edges, tuple(float(x) for x in load),
                         max(h for h, _ in depth.values()), max(t for _, t in depth.values()), hops)

    columns, lp_weights, objective, stats = _column_generation(graph, model, commodities, price, TREE_PRICING_S,
                                                               budget or ColumnBudget(), make)
    stats.stage = "multicast routing LP (column generation)"
    stats.solver = "GLOP + Edmonds pricing on the branch graph"
    return ColumnPool(graph, model, symmetry, columns, lp_weights, objective / BYTES_PER_US_PER_GBPS, stats)
