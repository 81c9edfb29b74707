"""The logical graph: which GPU may send to which GPU in one transfer, and along which route.

A logical edge ``u -> v`` is a route from GPU u to GPU v through switches only
(``Topology.gpu_route``), kept if the sketch allows it. Relays through GPUs are
paths of several logical edges. Tree and path encodings work on this graph and
charge each logical edge to the physical links of its route.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from solver_models.symmetry import unusable_offset
from taccl_py.errors import Infeasible, SketchError
from taccl_py.sketch import Sketch, check_sketch
from taccl_py.topology import Route, Topology

__all__ = ["LogicalGraph", "build_logical_graph"]


@dataclass(frozen=True)
class LogicalGraph:
    """Allowed GPU-to-GPU connections with their physical routes."""

    num_gpus: int
    edges: tuple[tuple[int, int], ...]
    routes: tuple[Route, ...]
    latency_us: np.ndarray
    bandwidth_GBps: np.ndarray
    index: Mapping[tuple[int, int], int]
    inter_machine: np.ndarray
    source_forbidden: Mapping[int, frozenset[int]]
    description: str

    def edge_matrix(self, values: np.ndarray, *, source: int | None = None) -> np.ndarray:
        """N x N matrix of per-edge values, +inf where there is no (allowed) edge."""
        n = self.num_gpus
        matrix = np.full((n, n), np.inf)
        us = np.fromiter((u for u, _ in self.edges), dtype=np.int64, count=len(self.edges))
        vs = np.fromiter((v for _, v in self.edges), dtype=np.int64, count=len(self.edges))
        matrix[us, vs] = values
        if source is not None:
            for e in self.source_forbidden.get(source, ()):
                u, v = self.edges[e]
                matrix[u, v] = np.inf
        return matrix


def _local_ids(topology: Topology) -> dict[int, tuple[int, int]]:
    if not topology.machines:
        return {g: (0, g) for g in topology.gpus}
    return {g: (m, i) for m, members in enumerate(topology.machines) for i, g in enumerate(sorted(members))}


def _uc_min_pairs(group: tuple[int, ...]) -> set[tuple[int, int]]:
    """Few unique connections: position p talks to p +- 2^k (a hypercube-like sparse pattern)."""
    s = len(group)
    pairs: set[tuple[int, int]] = set()
    for p in range(s):
        step = 1
        while step < s:
            for q in ((p + step) % s, (p - step) % s):
                if q != p:
                    pairs.add((group[p], group[q]))
            step *= 2
    return pairs


def build_logical_graph(topology: Topology, sketch: Sketch) -> LogicalGraph:
    """Apply the sketch to the physical topology; raise :class:`Infeasible` if it disconnects GPUs."""
    n = topology.num_gpus
    local = _local_ids(topology)
    if sketch.num_machines is not None and topology.machines and sketch.num_machines != len(topology.machines):
        raise SketchError(f"is {sketch.num_machines} but topology {topology.name!r} has {len(topology.machines)} "
                          "machines", where=sketch.path or sketch.origin, field="nnodes")
    check_sketch(sketch, topology)
    allowed_switch: set[tuple[int, int]] | None = None
    if sketch.intranode == "switch" and sketch.switch_groups:
        allowed_switch = set()
        for group, policy in zip(sketch.switch_groups, sketch.hyperedge_policy or ("uc-max",) * len(
                sketch.switch_groups), strict=False):
            if policy == "uc-min":
                allowed_switch |= _uc_min_pairs(group)
            else:
                allowed_switch |= {(a, b) for a in group for b in group if a != b}

    edges: list[tuple[int, int]] = []
    routes: list[Route] = []
    for u in range(n):
        mu, lu = local[u]
        for v in range(n):
            if u == v:
                continue
            route = topology.gpu_route(u, v)
            if route is None:
                continue
            mv, lv = local[v]
            if mu == mv:
                direct = len(route) == 1
                if sketch.intranode == "direct" and not direct:
                    continue
                if not direct and allowed_switch is not None and (lu, lv) not in allowed_switch:
                    continue
            else:
                if sketch.direct_map and lu != lv:
                    continue
                if sketch.internode_conn is not None and lv not in sketch.internode_conn.get(lu, ()):
                    continue
            edges.append((u, v))
            routes.append(route)

    index = {e: k for k, e in enumerate(edges)}
    latency = np.array([topology.route_latency(r) for r in routes], dtype=float)
    bandwidth = np.array([topology.route_bandwidth(r) for r in routes], dtype=float)
    inter = np.array([local[u][0] != local[v][0] for u, v in edges], dtype=bool)

    forbidden: dict[int, frozenset[int]] = {}
    if sketch.sender_feeds is not None and topology.machines:
        for s in range(n):
            ms, ls = local[s]
            bad = frozenset(k for k, (u, _v) in enumerate(edges)
                            if inter[k] and local[u][0] == ms and ls not in sketch.sender_feeds.get(local[u][1], ()))
            if bad:
                forbidden[s] = bad
    graph = LogicalGraph(num_gpus=n, edges=tuple(edges), routes=tuple(routes), latency_us=latency,
                         bandwidth_GBps=bandwidth, index=index, inter_machine=inter, source_forbidden=forbidden,
                         description=sketch.describe())
    _check_reachable(graph, sketch)
    unusable = unusable_offset(topology, sketch.symmetry_offsets, frozenset(edges))
    if unusable is not None:
        k, why = unusable
        offset, group_size = sketch.symmetry_offsets[k]
        raise SketchError(f"[{offset}, {group_size}] {why}", where=sketch.path or sketch.origin,
                          field=f"symmetry_offsets[{k}]")
    return graph


def _check_reachable(graph: LogicalGraph, sketch: Sketch) -> None:
    n = graph.num_gpus
    out: list[list[int]] = [[] for _ in range(n)]
    for k, (u, _v) in enumerate(graph.edges):
        out[u].append(k)
    for s in range(n):
        forbidden = graph.source_forbidden.get(s, frozenset())
        seen = {s}
        stack = [s]
        while stack:
            u = stack.pop()
            for k in out[u]:
                v = graph.edges[k][1]
                if k not in forbidden and v not in seen:
                    seen.add(v)
                    stack.append(v)
        if len(seen) < n:
            missing = min(set(range(n)) - seen)
            rule = ("the sketch's internode_conn/gpus_to_sender_rev_map" if graph.inter_machine.any() or
                    sketch.internode_conn is not None else f"intranode strategy {sketch.intranode!r}")
            raise Infeasible(f"infeasible sketch: with {rule}, GPU {s}'s data cannot reach GPU {missing} "
                             f"({sketch.describe()})")
