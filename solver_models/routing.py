"""Routing: which route tree (or path) each chunk takes, as a column-generation MILP.

Commodities are the data of each representative GPU (Allgather, Broadcast: a
spanning arborescence of the logical graph rooted at the GPU; Alltoall: a path
to each destination). Their images under the symmetry group load every link of
an orbit equally, so capacity rows exist only per link orbit.

1. *Master LP* (GLOP): weights ``w`` of known columns per commodity summing to 1,
   minimizing the bottleneck time ``T`` with ``sum w * load[o] <= B[o] * T``.
2. *Pricing*: with link-orbit duals ``y``, a cheapest arborescence
   (Chu-Liu/Edmonds) or shortest path under edge costs ``sum_links y`` joins the
   master if it beats the commodity's dual; repeat until none does. The LP
   optimum is then the fractional bandwidth optimum over the allowed routes.
3. *Integer master* (CP-SAT or any PuLP solver, e.g. CBC): each commodity's
   ``pieces`` chunks are split over the generated columns, minimizing the
   bandwidth time plus the latency of the slowest route used.

Column generation stops on deterministic limits (:class:`ColumnBudget`: a
round count and an estimate of the pricing work), so the same inputs give the
same routes on any machine; the wall clock is only an outer guard.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from solver_models._backend import (
    STOPPED_BY_TIME,
    STOPPED_BY_WORK,
    IntegerProgram,
    SolverConfig,
    SolveStats,
    solve_integer_program,
    solve_lp,
)
from solver_models.arborescence import min_arborescence
from solver_models.logical import LogicalGraph
from solver_models.symmetry import Symmetry
from taccl_py.errors import Infeasible, SolverTimeout
from taccl_py.tolerances import EDGE_COST_FLOOR, PATH_IMPROVEMENT, PRICING_TIE_REL, REDUCED_COST_REL
from taccl_py.topology import Topology
from taccl_py.units import BYTES_PER_US_PER_GBPS, gbps_to_bytes_per_us

__all__ = ["PATH_PRICING_S", "TREE_PRICING_S", "Assignment", "Column", "ColumnBudget", "ColumnPool", "GpuResource",
           "LinkModel", "RoutingPlan", "assign_pieces", "path_columns", "tree_columns"]

Commodity = tuple[int, int]  # (representative source, destination or -1 for a spanning tree)

TREE_PRICING_S = (1e-3, 8e-6)
"""Estimated seconds of one arborescence pricing, ``a + b x GPUs^2``, with its share of the master LP:
about a second per round of 8 commodities on 128 GPUs (measured on a 2-core AMD EPYC under load).
Column generation counts its work in these estimated seconds, not on the clock."""

PATH_PRICING_S = (1e-3, 1.5e-6)
"""The same for one shortest-path pricing (Alltoall)."""


@dataclass(frozen=True)
class ColumnBudget:
    """Limits of column generation: deterministic ones (rounds, estimated pricing work in seconds,
    GLOP deterministic seconds per master LP) and the wall-clock guard ``time_limit_s``."""

    max_rounds: int = 200
    work_limit: float = 20.0
    lp_work_limit: float = 60.0
    time_limit_s: float = math.inf


@dataclass(frozen=True)
class Column:
    """A route tree (``dst == -1``) or path for one commodity, as logical edges in travel order."""

    rep: int
    dst: int
    edges: tuple[int, ...]
    load: tuple[float, ...]
    hops: int
    latency_us: float

    def path_time_us(self, graph: LogicalGraph, piece_bytes: float) -> float:
        """Store-and-forward time of one piece to the farthest destination, alone on the network."""
        depth: dict[int, float] = {self.rep: 0.0}
        worst = 0.0
        for e in self.edges:
            u, v = graph.edges[e]
            depth[v] = depth[u] + graph.latency_us[e] + piece_bytes / gbps_to_bytes_per_us(graph.bandwidth_GBps[e])
            worst = max(worst, depth[v])
        return worst

    def image_link_usage(self, graph: LogicalGraph, symmetry: Symmetry, g: int) -> dict[int, int]:
        """How many times one piece on the image of this column under group element ``g`` crosses each link."""
        perm = symmetry.perms[g]
        usage: dict[int, int] = {}
        for e in self.edges:
            u, v = graph.edges[e]
            for li in graph.routes[graph.index[(perm[u], perm[v])]]:
                usage[li] = usage.get(li, 0) + 1
        return usage


@dataclass(frozen=True)
class GpuResource:
    """A resource of each GPU besides its links (its memory, its communication channels) that routes load.

    A piece crossing a logical edge costs the sending GPU's resource ``at_src``
    and the receiving GPU's ``at_dst`` bytes per byte it moves (the endpoint
    model's weights, :mod:`taccl_py.endpoint`). ``capacity_GBps`` per GPU; None:
    the GPU does not have the resource (no capacity row).
    """

    name: str
    capacity_GBps: tuple[float | None, ...]
    at_src: float
    at_dst: float


@dataclass(frozen=True)
class LinkModel:
    """Per-logical-edge charges to link orbits (sparse), and orbit capacities in GB/s.

    With :class:`GpuResource` s, every (resource, GPU orbit) with a capacity is one
    more orbit after the link orbits, charged by the edges leaving and entering
    its GPUs, so the master LP, the pricing and the integer master count it like
    a link.
    """

    entry_edge: np.ndarray
    entry_orbit: np.ndarray
    entry_weight: np.ndarray
    capacity_GBps: np.ndarray
    num_edges: int
    link_bandwidth: tuple[float, ...]
    edge_signature: tuple[tuple[int, ...], ...]
    resources: tuple[GpuResource, ...] = ()

    @staticmethod
    def build(topology: Topology, graph: LogicalGraph, symmetry: Symmetry,
              resources: Sequence[GpuResource] = ()) -> LinkModel:
        order = symmetry.order
        edge_ids, orbits, weights = [], [], []
        for e, route in enumerate(graph.routes):
            for li in route:
                o = symmetry.link_orbit[li]
                edge_ids.append(e)
                orbits.append(o)
                weights.append(order / symmetry.orbit_size[o])
        capacity = [0.0] * symmetry.num_link_orbits
        for li, link in enumerate(topology.links):
            capacity[symmetry.link_orbit[li]] = link.bandwidth
        signature = [tuple(sorted(symmetry.link_orbit[li] for li in route)) for route in graph.routes]
        if resources:
            _add_gpu_resources(graph, symmetry, resources, capacity, edge_ids, orbits, weights, signature)
        return LinkModel(np.array(edge_ids, dtype=np.int64), np.array(orbits, dtype=np.int64),
                         np.array(weights, dtype=float), np.array(capacity), len(graph.edges),
                         tuple(link.bandwidth for link in topology.links), tuple(signature), tuple(resources))

    def image_resource_usage(self, graph: LogicalGraph, column: Column, perm: Sequence[int]) -> dict[int, float]:
        """Bytes per byte one piece on the image of ``column`` under ``perm`` costs each GPU resource, keyed
        ``resource index x GPUs + GPU`` (GPUs without the resource left out)."""
        usage: dict[int, float] = {}
        n = graph.num_gpus
        for t, res in enumerate(self.resources):
            for e in column.edges:
                u, v = graph.edges[e]
                for gpu, weight in ((perm[u], res.at_src), (perm[v], res.at_dst)):
                    if weight and res.capacity_GBps[gpu] is not None:
                        key = t * n + gpu
                        usage[key] = usage.get(key, 0.0) + weight
        return usage

    def resource_capacity(self, key: int, num_gpus: int) -> float:
        """GB/s of the GPU resource keyed as in :meth:`image_resource_usage`."""
        cap = self.resources[key // num_gpus].capacity_GBps[key % num_gpus]
        assert cap is not None
        return cap

    def edge_costs(self, orbit_price: np.ndarray) -> np.ndarray:
        costs = np.zeros(self.num_edges)
        np.add.at(costs, self.entry_edge, orbit_price[self.entry_orbit] * self.entry_weight)
        return costs

    def column_load(self, edges: Sequence[int]) -> tuple[float, ...]:
        load = np.zeros(len(self.capacity_GBps))
        mask = np.isin(self.entry_edge, np.asarray(edges, dtype=np.int64))
        counts = np.bincount(np.asarray(edges, dtype=np.int64), minlength=self.num_edges)
        np.add.at(load, self.entry_orbit[mask], self.entry_weight[mask] * counts[self.entry_edge[mask]])
        return tuple(float(x) for x in load)


@dataclass(frozen=True)
class Assignment:
    """``count`` pieces of a GPU's data routed on the image of ``column`` under group element ``perm``."""

    column: Column
    perm: int
    count: int


@dataclass(frozen=True)
class RoutingPlan:
    """Integer split of every GPU's pieces (keyed by actual (gpu, destination)), with solver statistics."""

    pieces: int
    assignment: dict[Commodity, tuple[Assignment, ...]]
    lp_time_per_byte_us: float
    columns: int
    stats: tuple[SolveStats, ...]


def _add_gpu_resources(graph: LogicalGraph, symmetry: Symmetry, resources: Sequence[GpuResource],
                       capacity: list[float], edge_ids: list[int], orbits: list[int], weights: list[float],
                       signature: list[tuple[int, ...]]) -> None:
    """One orbit per (resource, GPU orbit) with a capacity (the least in the orbit), charged by every edge
    leaving (``at_src``) or entering (``at_dst``) its GPUs; the orbits join the edges' signatures."""
    rep_of = [r for r, _ in symmetry.image_of[:graph.num_gpus]]
    members: dict[int, list[int]] = {}
    for gpu, r in enumerate(rep_of):
        members.setdefault(r, []).append(gpu)
    orbit: dict[tuple[int, int], int] = {}
    for t, res in enumerate(resources):
        for r, gpus in sorted(members.items()):
            caps = [c for c in (res.capacity_GBps[g] for g in gpus) if c is not None]
            if caps:
                orbit[(t, r)] = len(capacity)
                capacity.append(min(caps))
    order = symmetry.order
    for e, (u, v) in enumerate(graph.edges):
        extra = []
        for t, res in enumerate(resources):
            for gpu, weight in ((u, res.at_src), (v, res.at_dst)):
                o = orbit.get((t, rep_of[gpu]))
                if o is not None and weight:
                    edge_ids.append(e)
                    orbits.append(o)
                    weights.append(weight * order / len(members[rep_of[gpu]]))
                    extra.append(o)
        signature[e] = tuple(sorted((*signature[e], *extra)))


def _tree_edges(graph: LogicalGraph, parent: np.ndarray, root: int) -> tuple[int, ...]:
    children: dict[int, list[int]] = {}
    for v, p in enumerate(parent):
        if p >= 0:
            children.setdefault(int(p), []).append(v)
    order: list[int] = []
    frontier = [root]
    while frontier:
        nxt = []
        for u in frontier:
            for v in sorted(children.get(u, ())):
                order.append(graph.index[(u, v)])
                nxt.append(v)
        frontier = nxt
    return tuple(order)


def _make_column(graph: LogicalGraph, model: LinkModel, rep: int, dst: int, edges: tuple[int, ...]) -> Column:
    depth = {rep: (0, 0.0)}
    for e in edges:
        u, v = graph.edges[e]
        depth[v] = (depth[u][0] + 1, depth[u][1] + float(graph.latency_us[e]))
    hops = max(h for h, _ in depth.values())
    lat = max(latency for _, latency in depth.values())
    return Column(rep, dst, edges, model.column_load(edges), hops, lat)


def _shallow(graph: LogicalGraph, signature: Sequence[tuple[int, ...]], parent: np.ndarray, root: int,
             forbidden: frozenset[int]) -> np.ndarray:
    """Re-parent vertices to shallower parents whose edge loads the same link orbits.

    The tree's load on every link orbit (hence its LP cost) is unchanged, but
    its depth shrinks, which shortens the pipeline (measured: shallow, wide trees
    schedule better than balanced ones once links are serialized).
    """
    n = len(parent)
    parent = parent.copy()
    for _ in range(4):
        order = sorted(range(n), key=lambda v: _depth(parent, v, root))
        depth = np.zeros(n, dtype=np.int64)
        for v in order:
            depth[v] = 0 if v == root else depth[parent[v]] + 1
        children = np.bincount(parent[parent >= 0], minlength=n)
        changed = False
        for v in order:
            if v == root:
                continue
            p = int(parent[v])
            sig = signature[graph.index[(p, v)]]
            best = (int(depth[p]), int(children[p]) - 1, p)
            for q in range(n):
                if q in (v, p):
                    continue
                e = graph.index.get((q, v))
                if e is None or e in forbidden or signature[e] != sig:
                    continue
                cand = (int(depth[q]), int(children[q]), q)
                if cand < best and not _is_ancestor(parent, v, q, root):
                    best = cand
            if best[2] != p:
                children[p] -= 1
                children[best[2]] += 1
                parent[v] = best[2]
                depth[v] = depth[best[2]] + 1
                changed = True
        if not changed:
            break
    return parent


def _depth(parent: np.ndarray, v: int, root: int) -> int:
    d = 0
    while v != root:
        v = int(parent[v])
        d += 1
    return d


def _is_ancestor(parent: np.ndarray, a: int, v: int, root: int) -> bool:
    """Is ``a`` on the path from ``v`` up to the root (or ``v`` itself)?"""
    while True:
        if v == a:
            return True
        if v == root:
            return False
        v = int(parent[v])


def _tree_pricer(graph: LogicalGraph, model: LinkModel) -> Callable[[Commodity, np.ndarray, float], tuple[int, ...]]:
    def price(commodity: Commodity, edge_cost: np.ndarray, tie: float) -> tuple[int, ...]:
        rep = commodity[0]
        forbidden = graph.source_forbidden.get(rep, frozenset())
        matrix = graph.edge_matrix(edge_cost + tie * graph.latency_us, source=rep)
        parent = min_arborescence(matrix, rep)
        parent = _shallow(graph, model.edge_signature, parent, rep, forbidden)
        return _tree_edges(graph, parent, rep)
    return price


def _shortest_path(graph: LogicalGraph, weights: np.ndarray, src: int, dst: int) -> tuple[int, ...]:
    n = graph.num_gpus
    out: list[list[int]] = [[] for _ in range(n)]
    for e, (u, _v) in enumerate(graph.edges):
        out[u].append(e)
    dist = [math.inf] * n
    via = [-1] * n
    dist[src] = 0.0
    heap = [(0.0, src)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        if u == dst:
            break
        for e in out[u]:
            v = graph.edges[e][1]
            nd = d + weights[e]
            if nd < dist[v] - PATH_IMPROVEMENT:
                dist[v] = nd
                via[v] = e
                heapq.heappush(heap, (nd, v))
    path = []
    v = dst
    while v != src:
        e = via[v]
        if e < 0:
            raise Infeasible(f"routing: GPU {dst} cannot be reached from GPU {src} over the links the sketch allows")
        path.append(e)
        v = graph.edges[e][0]
    return tuple(reversed(path))


def _path_pricer(graph: LogicalGraph) -> Callable[[Commodity, np.ndarray, float], tuple[int, ...]]:
    def price(commodity: Commodity, edge_cost: np.ndarray, tie: float) -> tuple[int, ...]:
        rep, dst = commodity
        return _shortest_path(graph, edge_cost + tie * graph.latency_us + EDGE_COST_FLOOR, rep, dst)
    return price


def _column_generation(graph: LogicalGraph, model: LinkModel, commodities: list[Commodity],
                       price: Callable[[Commodity, np.ndarray, float], tuple[int, ...]],
                       pricing_s: tuple[float, float], budget: ColumnBudget,
                       make_column: Callable[[Commodity, tuple[int, ...]], Column] | None = None,
                       ) -> tuple[dict[Commodity, list[Column]], dict[Commodity, list[float]], float, SolveStats]:
    """Master LP and pricing rounds; ``make_column`` turns priced edges into a column (default: a tree or path
    of logical edges, :func:`_make_column`)."""
    started = time.perf_counter()
    columns: dict[Commodity, list[Column]] = {c: [] for c in commodities}
    seen: set[tuple[Commodity, tuple[int, ...]]] = set()
    num_orbits = len(model.capacity_GBps)
    pricing_work = pricing_s[0] + pricing_s[1] * graph.num_gpus ** 2

    def add(c: Commodity, edges: tuple[int, ...]) -> bool:
        key = (c, tuple(sorted(edges)))
        if key in seen:
            return False
        seen.add(key)
        columns[c].append(make_column(c, edges) if make_column is not None
                          else _make_column(graph, model, c[0], c[1], edges))
        return True

    # start from the lowest-latency routes and from routes that avoid the slowest links
    zero = np.zeros(len(graph.edges))
    inv_bw = model.edge_costs(1.0 / model.capacity_GBps)
    for c in commodities:
        add(c, price(c, zero, 1.0))
        add(c, price(c, inv_bw, PRICING_TIE_REL))
    work = 2 * len(commodities) * pricing_work
    rounds = 0
    objective = math.inf
    stopped_by = ""
    while True:
        rounds += 1
        flat = [(c, col) for c in commodities for col in columns[c]]
        # variables: one weight per column, then T
        t_index = len(flat)
        rows: list[tuple[list[tuple[int, float]], str, float]] = []
        for c in commodities:
            rows.append(([(k, 1.0) for k, (cc, _) in enumerate(flat) if cc == c], "=", 1.0))
        for o in range(num_orbits):
            terms = [(k, col.load[o]) for k, (_, col) in enumerate(flat) if col.load[o]]
            if terms:
                rows.append(([*terms, (t_index, -float(model.capacity_GBps[o]))], "<=", 0.0))
        orbit_rows = [o for o in range(num_orbits) if any(col.load[o] for _, col in flat)]
        lp = solve_lp([0.0] * t_index + [1.0], rows, [0.0] * (t_index + 1), [math.inf] * (t_index + 1),
                      work_limit=budget.lp_work_limit)
        objective = lp.objective
        weights: dict[Commodity, list[float]] = {c: [] for c in commodities}
        for k, (c, _) in enumerate(flat):
            weights[c].append(lp.values[k])
        mu = {c: lp.duals[i] for i, c in enumerate(commodities)}
        price_vec = np.zeros(num_orbits)
        for k, o in enumerate(orbit_rows):
            price_vec[o] = max(0.0, -lp.duals[len(commodities) + k])
        if rounds >= budget.max_rounds or work + len(commodities) * pricing_work > budget.work_limit:
            stopped_by = STOPPED_BY_WORK
            break
        if time.perf_counter() - started > budget.time_limit_s:
            stopped_by = STOPPED_BY_TIME
            break
        edge_cost = model.edge_costs(price_vec)
        tie = PRICING_TIE_REL * max(EDGE_COST_FLOOR, float(price_vec.max()))
        improved = False
        for c in commodities:
            edges = price(c, edge_cost, tie)
            reduced = float(edge_cost[list(edges)].sum()) - mu[c]
            if reduced < -REDUCED_COST_REL * max(1.0, abs(mu[c])) and add(c, edges):
                improved = True
        work += len(commodities) * pricing_work
        if not improved:
            break
    status = {"": "optimal", STOPPED_BY_WORK: "work limit", STOPPED_BY_TIME: "time limit"}[stopped_by]
    stats = SolveStats(stage="routing LP (column generation)", solver="GLOP + Edmonds/Dijkstra pricing",
                       status=status, objective=objective, bound=None, time_s=time.perf_counter() - started,
                       iterations=rounds, variables=sum(len(v) for v in columns.values()) + 1,
                       constraints=len(commodities) + num_orbits, stopped_by=stopped_by,
                       note=f"bottleneck time per byte of each GPU's data (us/B x 1e3); pricing work {work:.3g} of "
                            f"{budget.work_limit:g} estimated s")
    return columns, weights, objective, stats


def _largest_remainder(weights: Sequence[float], pieces: int) -> list[int]:
    """Round LP weights (summing to 1) to ``pieces`` whole pieces."""
    raw = [max(0.0, w) * pieces for w in weights]
    counts = [math.floor(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda k: (-(raw[k] - counts[k]), k))
    for k in order[: pieces - sum(counts)]:
        counts[k] += 1
    return counts


def _integer_master(pool: ColumnPool, pieces: int, piece_bytes: float, config: SolverConfig,
                    max_variables: int) -> tuple[dict[Commodity, tuple[Assignment, ...]], SolveStats]:
    """Split every GPU's pieces over the images of its representative's columns.

    Per-GPU variables (the symmetry is broken here on purpose: different GPUs of
    an orbit may split differently, so fractional LP mixes round well); when that
    is too large, one split per representative shared by its whole orbit.
    """
    graph, model, symmetry, columns = pool.graph, pool.model, pool.symmetry, pool.columns
    images = {r: symmetry.images(r) for r in symmetry.reps}
    per_gpu = sum(len(cols) * len(images[c[0]]) for c, cols in columns.items()) <= max_variables
    program = IntegerProgram()
    z = program.var("bandwidth_time", 0.0, math.inf, integer=False, cost=1.0)
    lat = program.var("latency_time", 0.0, math.inf, integer=False, cost=1.0)
    link_terms: dict[int, list[tuple[int, float]]] = {}
    counts: dict[tuple[Commodity, int, int], int] = {}  # (rep commodity, column, image gpu or -1) -> var
    for c, cols in columns.items():
        rounding = _largest_remainder(pool.weights[c], pieces)
        owners = [(gpu, g) for gpu, g in images[c[0]]] if per_gpu else [(-1, 0)]
        cover: dict[int, list[tuple[int, float]]] = {owner: [] for owner, _ in owners}
        for k, col in enumerate(cols):
            used = program.var(f"used_{c[0]}_{c[1]}_{k}", 0, 1, integer=True)
            program.add([(lat, 1.0), (used, -col.path_time_us(graph, piece_bytes))], ">=", 0.0,
                        f"latency_{c[0]}_{c[1]}_{k}")
            if rounding[k]:
                program.hint[used] = 1.0
            for owner, g in owners:
                n = program.var(f"pieces_{c[0]}_{c[1]}_{k}_{owner}", 0, pieces, integer=True)
                counts[(c, k, owner)] = n
                cover[owner].append((n, 1.0))
                program.hint[n] = float(rounding[k])
                program.add([(n, 1.0), (used, -float(pieces))], "<=", 0.0, f"use_{c[0]}_{c[1]}_{k}_{owner}")
                if per_gpu:
                    for li, times in col.image_link_usage(graph, symmetry, g).items():
                        bw = model.link_bandwidth[li]
                        link_terms.setdefault(li, []).append((n, times * piece_bytes / gbps_to_bytes_per_us(bw)))
                    for key, weight in model.image_resource_usage(graph, col, symmetry.perms[g]).items():
                        cap = model.resource_capacity(key, graph.num_gpus)
                        link_terms.setdefault(len(model.link_bandwidth) + key, []).append(
                            (n, weight * piece_bytes / gbps_to_bytes_per_us(cap)))
                else:
                    for o, load in enumerate(col.load):
                        if load:
                            link_terms.setdefault(-1 - o, []).append(
                                (n, load * piece_bytes / gbps_to_bytes_per_us(model.capacity_GBps[o])))
        for owner, terms in cover.items():
            program.add(terms, "=", float(pieces), f"cover_{c[0]}_{c[1]}_{owner}")
    for key, terms in sorted(link_terms.items()):
        program.add([*terms, (z, -1.0)], "<=", 0.0, f"capacity_{key}")
    # a complete hint (the rounding with its objective) gives the solver a feasible start; the times are
    # hinted a little high so that the solver's integer scaling of the coefficients cannot make it infeasible
    rounded = _rounded_values(program, link_terms, z, lat)
    program.hint[z], program.hint[lat] = (rounded[z] * (1 + 1e-6) + 0.01, rounded[lat] * (1 + 1e-6) + 0.01)
    started = time.perf_counter()
    try:
        values, stats = solve_integer_program(program, config, "routing integer master")
    except SolverTimeout as exc:
        wall = time.perf_counter() - started >= config.time_limit_s * 0.999
        values, stats = _rounded_master(program, link_terms, z, lat, exc, STOPPED_BY_TIME if wall else STOPPED_BY_WORK)
        stats.time_s = time.perf_counter() - started
    stats.note = (f"{'per-GPU' if per_gpu else 'per-representative'} piece split; " + stats.note).strip("; ")
    result: dict[Commodity, tuple[Assignment, ...]] = {}
    for c, cols in columns.items():
        for gpu, g in images[c[0]]:
            owner = gpu if per_gpu else -1
            dst = symmetry.perms[g][c[1]] if c[1] >= 0 else -1
            result[(gpu, dst)] = tuple(Assignment(col, g, round(values[counts[(c, k, owner)]]))
                                       for k, col in enumerate(cols) if round(values[counts[(c, k, owner)]]) > 0)
    return result, stats


def _rounded_values(program: IntegerProgram, link_terms: dict[int, list[tuple[int, float]]], z: int,
                    lat: int) -> list[float]:
    """The hinted split (the LP optimum rounded by largest remainders) with its bandwidth and latency times."""
    values = [0.0] * len(program.names)
    for var, value in program.hint.items():
        values[var] = value
    values[z] = max((sum(coef * values[var] for var, coef in terms) for terms in link_terms.values()), default=0.0)
    values[lat] = 0.0
    for terms, _, _, name in program.rows:
        if name.startswith("latency_"):  # lat - used * path_time >= 0
            values[lat] = max(values[lat], -sum(coef * values[var] for var, coef in terms if var != lat))
    return values


def _rounded_master(program: IntegerProgram, link_terms: dict[int, list[tuple[int, float]]], z: int, lat: int,
                    timeout: SolverTimeout, stopped_by: str) -> tuple[list[float], SolveStats]:
    """The LP optimum rounded by largest remainders (the master's hint, always feasible).

    Used when the solver finds no integer solution within its budget: the
    result is then as good as the rounding, never a failure.
    """
    values = _rounded_values(program, link_terms, z, lat)
    stats = SolveStats(stage="routing integer master", solver="largest-remainder rounding", status=stopped_by,
                       objective=values[z] + values[lat], variables=len(program.names), stopped_by=stopped_by,
                       constraints=len(program.rows), note=f"{timeout}; LP optimum rounded instead")
    return values, stats


@dataclass(frozen=True)
class ColumnPool:
    """Routes generated for every commodity, with the fractional optimum they reach."""

    graph: LogicalGraph
    model: LinkModel
    symmetry: Symmetry
    columns: dict[Commodity, list[Column]]
    weights: dict[Commodity, list[float]]
    lp_time_per_byte_us: float
    stats: SolveStats


def tree_columns(topology: Topology, graph: LogicalGraph, symmetry: Symmetry, *,
                 roots: Sequence[int] | None = None, budget: ColumnBudget | None = None,
                 resources: Sequence[GpuResource] = ()) -> ColumnPool:
    """Spanning arborescences for every representative (Allgather; Broadcast with ``roots``); ``resources``:
    GPU resources the trees load besides the links."""
    model = LinkModel.build(topology, graph, symmetry, resources)
    commodities = [(r, -1) for r in (roots if roots is not None else symmetry.reps)]
    columns, weights, objective, stats = _column_generation(graph, model, commodities, _tree_pricer(graph, model),
                                                            TREE_PRICING_S, budget or ColumnBudget())
    return ColumnPool(graph, model, symmetry, columns, weights, objective / BYTES_PER_US_PER_GBPS, stats)


def path_columns(topology: Topology, graph: LogicalGraph, symmetry: Symmetry, *,
                 budget: ColumnBudget | None = None, resources: Sequence[GpuResource] = ()) -> ColumnPool:
    """Paths from every representative to every other GPU (Alltoall); ``resources`` as for trees."""
    model = LinkModel.build(topology, graph, symmetry, resources)
    commodities = [(r, d) for r in symmetry.reps for d in range(graph.num_gpus) if d != r]
    columns, weights, objective, stats = _column_generation(graph, model, commodities, _path_pricer(graph),
                                                            PATH_PRICING_S, budget or ColumnBudget())
    return ColumnPool(graph, model, symmetry, columns, weights, objective / BYTES_PER_US_PER_GBPS, stats)


def assign_pieces(pool: ColumnPool, pieces: int, piece_bytes: float, config: SolverConfig, *,
                  max_variables: int = 6000) -> RoutingPlan:
    """Integer split of each GPU's ``pieces`` chunks over the images of its representative's columns."""
    assignment, stats = _integer_master(pool, pieces, piece_bytes, config, max_variables)
    return RoutingPlan(pieces=pieces, assignment=assignment, lp_time_per_byte_us=pool.lp_time_per_byte_us,
                       columns=sum(len(c) for c in pool.columns.values()), stats=(pool.stats, stats))
