"""Lower bounds on the time of a collective: the physical limit every report compares against.

All bounds hold in the fluid model the simulator implements (a flow waits its
route latency, then moves bytes; links are shared), so for every correct
schedule ``simulated time >= bound``. Bandwidth terms come from cuts: a set S
of vertices (switches included) that some data must leave, over the bandwidth
leaving it.

* Allgather: ``T >= (M/N) |S n GPUs| / B_out(S)``, maximised exactly by
  Dinkelbach's method with one max-flow per GPU kept outside S (ForestColl).
  ReduceScatter: the same with the bandwidth entering S.
* Alltoall: ``T >= (M/N) |S n GPUs| |GPUs \\ S| / B_out(S)`` over single GPUs,
  machines, unions of machines, their complements and the Allgather cuts
  (each with its best switch set, by max-flow); where small enough, the exact
  multi-commodity-flow LP optimum (``solver_models.mcf_bound``).
* Allreduce: ReduceScatter + Allgather is *not* a valid bound in general (a
  GPU whose only link is slow can stream its data out while the sum streams
  back in). Valid instead: every cut separating GPUs carries the whole buffer
  each way (``M / B(S)``), and, splitting the GPUs into P parts (single GPUs,
  machines, the groups of a multi-dimensional network along every proper set
  of its dimensions), every element needs 2(P-1) messages between parts
  (one-way gossip), so ``T >= 2(P-1) M / sum of the parts' outgoing
  bandwidth``. On symmetric systems this equals ReduceScatter + Allgather.
  The proof is in docs/simulator.md.
* Broadcast / Reduce: ``M`` over the min cut between the root and any GPU.
* Switch capabilities (``multicast``, ``reduce`` flags): every cut bound above
  stays valid with them (a block still crosses a cut at least once; a GPU's
  whole contribution still leaves it and the whole sum still enters it). What
  changes: without multicast an Allgather also needs ``(N-1) M`` bytes
  injected by the GPUs in all (every delivery is one send), so ``T >= (N-1) M
  / sum of the GPUs' injection bandwidth``; with multicast each block is
  injected once (``M`` in all, never binding beyond the cuts). An Allreduce
  partition bound (2(P-1) messages between parts) needs every reduce-capable
  switch inside one part: a switch that combines the parts' data in the
  network (NVLS, SHARP) voids it, leaving ``M`` each way per GPU. Every bound
  says in ``assumes`` which capabilities it took into account.
* Latency: data must travel from its source to its farthest destination (the
  latency eccentricity, relays allowed); and the bytes crossing the binding
  cut cannot start before the cheapest route through it has paid its latency,
  so that latency is added to the bandwidth term.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from taccl_py.collectives import CollectiveKind, parse_collective
from taccl_py.endpoint import EndpointMode
from taccl_py.errors import InputError
from taccl_py.tolerances import SEARCH_IMPROVEMENT_REL
from taccl_py.topology import Topology, Vertex
from taccl_py.units import algbw_gbps, bytes_per_us_to_gbps, gbps_to_bytes_per_us

__all__ = ["Bound", "BoundProfile", "CrossingBound", "JointBound", "PairBound", "bound_profile", "crossing_bound",
           "joint_lower_bound", "leave_demand", "lower_bound", "pair_bound", "unicast_view"]

_ECCENTRICITY_SOURCES = 64
"""Above this many GPUs the latency eccentricity is taken over this many evenly spaced sources (still valid)."""
_LP_SAFETY = 1 - 1e-7
"""GLOP's optimum carries a tolerance; shave it so the bound stays below every schedule."""
_ROUNDING = 1e-9
"""Relative float noise between a bound and a schedule time that meets it exactly."""


@dataclass(frozen=True)
class BoundProfile:
    """The size-independent part of a bound: ``bandwidth_us = size_bytes * us_per_byte``."""

    kind: CollectiveKind
    us_per_byte: float
    cut: tuple[Vertex, ...]
    cut_latency_us: float
    latency_us: float
    reason: str
    assumes: str = "unicast: no switch multicast or in-network reduction"
    """The switch capabilities the bound takes into account."""


@dataclass(frozen=True)
class Bound:
    """A lower bound on the time of one collective at one size (us)."""

    kind: CollectiveKind
    size_bytes: float
    bound_us: float
    bandwidth_us: float
    """Bytes that must cross the binding cut over its bandwidth."""
    cut_latency_us: float
    """Latency before any byte can cross the binding cut (added to the bandwidth term)."""
    latency_us: float
    """Latency eccentricity: the slowest source-to-destination route."""
    cut: tuple[Vertex, ...]
    """The binding vertex set S (empty when the bound comes from a partition or the flow LP)."""
    explanation: str
    assumes: str = "unicast: no switch multicast or in-network reduction"
    """The switch capabilities the bound takes into account (see the module)."""

    @property
    def algbw_GBps(self) -> float | None:
        """The best algbw any schedule can reach at this size."""
        return algbw_gbps(self.size_bytes, self.bound_us) if self.bound_us > 0 else None

    def efficiency(self, time_us: float | None) -> float | None:
        """``bound_us / time_us`` (1.0 means optimal).

        A schedule that meets the bound can come out an ulp or so faster after
        its times are summed in another order; within :data:`_ROUNDING` that
        reads 1.0. A larger excess is kept: it would mean the bound is wrong.
        """
        if time_us is None or time_us <= 0:
            return None
        ratio = self.bound_us / time_us
        return 1.0 if 1.0 < ratio <= 1.0 + _ROUNDING else ratio

    def summary(self) -> dict[str, Any]:
        return {"bound_us": self.bound_us, "algbw_GBps": self.algbw_GBps, "bandwidth_us": self.bandwidth_us,
                "cut_latency_us": self.cut_latency_us, "latency_us": self.latency_us,
                "cut": [v for v in self.cut], "explanation": self.explanation, "assumes": self.assumes}


def lower_bound(topology: Topology, kind: CollectiveKind | str, size_bytes: float, *, root: int = 0,
                step_overhead_us: float = 0.0, offload: bool = True, endpoint: EndpointMode | None = None) -> Bound:
    """Lower bound on the time of ``kind`` for an nccl-tests ``size_bytes`` on ``topology``.

    ``step_overhead_us`` (the simulator option of the same name) is paid at
    least once by every transfer, so it is added to both latency terms.
    ``offload=False`` ignores the switches' multicast and reduce flags: the
    bound of unicast algorithms (every transfer point to point). Where GPUs
    declare endpoint limits (memory, channels), the bound also holds every
    algorithm to them (:func:`taccl_py.endpoint.endpoint_bound`): in any mode
    when ``endpoint`` is None, tighter for a GPU-driven ``endpoint``.
    """
    kind = kind if isinstance(kind, CollectiveKind) else parse_collective(kind)
    if not size_bytes > 0:
        raise InputError(f"must be > 0 bytes (got {size_bytes!r})", where="--size")
    if not 0 <= root < topology.num_gpus:
        raise InputError(f"must be a rank in 0..{topology.num_gpus - 1} (got {root})", where="--root")
    profile = bound_profile(topology if offload else unicast_view(topology), kind, root)
    bandwidth_us = size_bytes * profile.us_per_byte
    if topology.num_gpus < 2:
        return Bound(kind, size_bytes, 0.0, 0.0, 0.0, 0.0, (), "a single GPU moves nothing", profile.assumes)
    cut_latency = profile.cut_latency_us + step_overhead_us
    latency = profile.latency_us + step_overhead_us
    bound = max(latency, bandwidth_us + cut_latency)
    if bandwidth_us + cut_latency >= latency:
        text = f"{profile.reason}: {bandwidth_us:.6g} us of data after {cut_latency:.6g} us of latency"
    else:
        text = f"latency: the farthest destination is {latency:.6g} us away"
    if topology.has_endpoint_limits:  # GPU memory and channels (docs/workloads.md)
        from taccl_py.endpoint import endpoint_bound

        unicast = not offload or not (_capable(topology, "multicast") or _capable(topology, "reduce"))
        term = endpoint_bound(topology, kind, size_bytes, root, endpoint, unicast=unicast)
        if term is not None and term.time_us > bound:
            return Bound(kind, size_bytes, term.time_us, bandwidth_us, cut_latency, latency, (), term.explanation,
                         profile.assumes)
    return Bound(kind, size_bytes, bound, bandwidth_us, cut_latency, latency, profile.cut, text, profile.assumes)


def unicast_view(topology: Topology) -> Topology:
    """``topology`` with every switch's multicast and reduce flags off (itself when none is on)."""
    if not any(s.multicast or s.reduce for s in topology.switches):
        return topology
    return replace(topology, switches=tuple(replace(s, multicast=False, reduce=False) for s in topology.switches))


def _capable(topology: Topology, flag: str) -> list[str]:
    """Names of the switches with ``flag`` (``multicast`` or ``reduce``) on."""
    return [s.name for s in topology.switches if getattr(s, flag)]


def _names(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


# ------------------------------------------------------------------ the graph
class _Graph:
    """Dense vertex ids, link arrays and helpers for cuts and flows."""

    def __init__(self, topology: Topology, *, reverse: bool = False) -> None:
        self.topology = topology
        self.n = topology.num_gpus
        self.v = len(topology.vertices)
        vid = topology.vertex_id
        src = [vid[link.src] for link in topology.links]
        dst = [vid[link.dst] for link in topology.links]
        self.tail = np.array(dst if reverse else src, dtype=np.int64)
        self.head = np.array(src if reverse else dst, dtype=np.int64)
        self.cap_bytes_per_us = np.array([gbps_to_bytes_per_us(link.bandwidth) for link in topology.links],
                            dtype=np.float64)  # bytes/us

    def out_bandwidth(self, inside: np.ndarray) -> float:
        """Bytes/us leaving the vertex set ``inside`` (a boolean mask)."""
        crossing = inside[self.tail] & ~inside[self.head]
        return float(self.cap_bytes_per_us[crossing].sum())

    def mask(self, vertices: Iterable[int]) -> np.ndarray:
        m = np.zeros(self.v, dtype=bool)
        m[list(vertices)] = True
        return m

    def names(self, inside: np.ndarray) -> tuple[Vertex, ...]:
        verts = self.topology.vertices
        return tuple(verts[i] for i in np.flatnonzero(inside))

    def max_flow(self, sources: Sequence[int], sinks: Sequence[int],
                 capacity: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """Max flow from a set of vertices to another (as bytes/us) and the source side of a min cut."""
        from solver_models._backend import max_flow_min_cut

        cap = self.cap_bytes_per_us if capacity is None else capacity
        scale = 2.0 ** 50 / max(1.0, float(cap.sum()))
        s, t = self.v, self.v + 1
        big = 2 ** 60
        tails = np.concatenate([self.tail, np.full(len(sources), s), np.asarray(sinks, dtype=np.int64)])
        heads = np.concatenate([self.head, np.asarray(sources, dtype=np.int64), np.full(len(sinks), t)])
        caps = np.concatenate([np.floor(cap * scale).astype(np.int64), np.full(len(sources) + len(sinks), big)])
        value, source_side = max_flow_min_cut(tails, heads, caps, s, t, what="cut bound")
        side = np.zeros(self.v, dtype=bool)
        for node in source_side:
            if node < self.v:
                side[node] = True
        return value / scale, side


# ------------------------------------------------------ Allgather-type ratio cut
def _max_ratio_cut(graph: _Graph, seeds: Iterable[np.ndarray]) -> tuple[float, np.ndarray]:
    """max over S (>= 1 GPU inside and outside) of |S n GPUs| / B_out(S), by Dinkelbach + max-flow."""
    from solver_models._backend import max_flow_min_cut

    n, v = graph.n, graph.v
    best, best_side = 0.0, np.zeros(v, dtype=bool)

    def consider(side: np.ndarray) -> bool:
        nonlocal best, best_side
        gpus = int(side[:n].sum())
        if gpus == 0 or gpus == n:
            return False
        out = graph.out_bandwidth(side)
        ratio = math.inf if out <= 0 else gpus / out
        if ratio > best * (1 + SEARCH_IMPROVEMENT_REL):
            best, best_side = ratio, side
            return True
        return False

    for side in seeds:
        consider(side)
    s, t = v, v + 1
    gpu_ids = np.arange(n, dtype=np.int64)
    for _ in range(100):
        improved = False
        for outside in range(n):
            # min over S not holding `outside` of |GPUs \ S| + best * B_out(S)
            scale = 2.0 ** 50 / (n + best * float(graph.cap_bytes_per_us.sum()) + 1.0)
            others = gpu_ids[gpu_ids != outside]
            tails = np.concatenate([graph.tail, np.full(n - 1, s), [outside]])
            heads = np.concatenate([graph.head, others, [t]])
            caps = np.concatenate([np.floor(graph.cap_bytes_per_us * best * scale).astype(np.int64),
                                   np.full(n - 1, int(scale)), [2 ** 60]])
            _, source_side = max_flow_min_cut(tails, heads, caps, s, t, what="ratio cut bound")
            side = np.zeros(v, dtype=bool)
            for node in source_side:
                if node < v:
                    side[node] = True
            if consider(side):
                improved = True
        if not improved:
            break
    return best, best_side


def _seed_sets(graph: _Graph) -> list[np.ndarray]:
    """Single GPUs, their complements, machines and their complements (switches on either side)."""
    topology, n = graph.topology, graph.n
    seeds = []
    groups = [[g] for g in range(n)] + [list(m) for m in topology.machines if len(topology.machines) > 1]
    for members in groups:
        side = graph.mask(members)
        seeds += [side, ~side]
        with_switches = side.copy()
        with_switches[n:] = True
        seeds += [with_switches, ~with_switches]
    return seeds


# ------------------------------------------------------------------ latencies
_Label = list[tuple[float, int]]
_Labels = list[_Label]


def _switch_distances(topology: Topology, *, forward: bool) -> _Labels:
    """The two nearest GPUs of every vertex, through switches only: ``[(latency, gpu), ...]`` per vertex.

    Forward: latency from the GPU to the vertex; backward: from the vertex to
    the GPU. A GPU's only entry is itself at 0 (a route cannot pass through a
    GPU). Two distinct GPUs are kept so a route never starts and ends at the
    same GPU (``u -> NIC -> u`` is no route).
    """
    vid = topology.vertex_id
    n = topology.num_gpus
    labels: _Labels = [[] for _ in topology.vertices]
    heap = [(0.0, g, g) for g in range(n)]
    heapq.heapify(heap)
    adjacency = topology.out_links if forward else topology.in_links
    while heap:
        d, u, origin = heapq.heappop(heap)
        held = labels[u]
        if len(held) == 2 or any(o == origin for _, o in held) or (u < n and d > 0):
            continue
        held.append((d, origin))
        for li in adjacency[u]:
            link = topology.links[li]
            w = vid[link.dst] if forward else vid[link.src]
            if w < n or len(labels[w]) == 2:
                continue
            heapq.heappush(heap, (d + link.latency, w, origin))
    return labels


def _route_latency_through(to_vertex: _Label, latency: float, from_vertex: _Label) -> float:
    """Cheapest GPU u -> ... -> link -> ... -> GPU v route latency with u != v (inf if none)."""
    return min((du + latency + dv for du, u in to_vertex for dv, v in from_vertex if u != v), default=math.inf)


def _cut_latency(topology: Topology, side: np.ndarray, *, entering: bool = False) -> float:
    """Cheapest GPU-to-GPU route latency among routes that cross out of (or into) ``side``."""
    vid = topology.vertex_id
    to_vertex = _switch_distances(topology, forward=True)
    from_vertex = _switch_distances(topology, forward=False)
    best = math.inf
    for link in topology.links:
        a, b = vid[link.src], vid[link.dst]
        crosses = (not side[a] and side[b]) if entering else (side[a] and not side[b])
        if crosses:
            best = min(best, _route_latency_through(to_vertex[a], link.latency, from_vertex[b]))
    return 0.0 if math.isinf(best) else best


def _min_route_latency(topology: Topology) -> float:
    """Cheapest latency of any GPU-to-GPU route: no byte moves before it."""
    vid = topology.vertex_id
    to_vertex = _switch_distances(topology, forward=True)
    from_vertex = _switch_distances(topology, forward=False)
    best = min((_route_latency_through(to_vertex[vid[link.src]], link.latency, from_vertex[vid[link.dst]])
                for link in topology.links), default=math.inf)
    return 0.0 if math.isinf(best) else best


def _distances_from(topology: Topology, source: int, *, reverse: bool = False) -> list[float]:
    """Latency from GPU ``source`` to every vertex (to it when ``reverse``), relays through GPUs allowed."""
    vid = topology.vertex_id
    dist = [math.inf] * len(topology.vertices)
    dist[source] = 0.0
    heap = [(0.0, source)]
    adjacency = topology.in_links if reverse else topology.out_links
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for li in adjacency[u]:
            link = topology.links[li]
            w = vid[link.src] if reverse else vid[link.dst]
            nd = d + link.latency
            if nd < dist[w]:
                dist[w] = nd
                heapq.heappush(heap, (nd, w))
    return dist


def _eccentricity(topology: Topology, kind: CollectiveKind, root: int) -> float:
    n = topology.num_gpus
    if kind is CollectiveKind.BROADCAST:
        return max(_distances_from(topology, root)[:n])
    if kind is CollectiveKind.REDUCE:
        return max(_distances_from(topology, root, reverse=True)[:n])
    step = max(1, n // _ECCENTRICITY_SOURCES)
    return max(max(_distances_from(topology, s)[:n]) for s in range(0, n, step))


# ------------------------------------------------------------ per collective
def _describe(topology: Topology, side: np.ndarray) -> str:
    """Short name of a vertex set by its GPUs: one GPU, all but one, a machine, or a count."""
    n = topology.num_gpus
    inside = [g for g in range(n) if side[g]]
    outside = [g for g in range(n) if not side[g]]
    if len(inside) == 1:
        return f"GPU {inside[0]}"
    if len(outside) == 1:
        return f"every GPU but {outside[0]}"
    for m, members in enumerate(topology.machines):
        if len(topology.machines) > 1 and sorted(members) == inside:
            return f"machine {m}"
        if len(topology.machines) > 1 and sorted(members) == outside:
            return f"every machine but {m}"
    return f"{len(inside)} of {n} GPUs"


def _gather_profile(topology: Topology, kind: CollectiveKind, latency: float) -> BoundProfile:
    entering = kind is CollectiveKind.REDUCESCATTER
    graph = _Graph(topology, reverse=entering)
    ratio, side = _max_ratio_cut(graph, _seed_sets(graph))
    gpus = int(side[:graph.n].sum())
    bandwidth = bytes_per_us_to_gbps(graph.out_bandwidth(side))
    verb = "enter" if entering else "leave"
    reason = f"cut bound: {gpus} of {graph.n} blocks must {verb} {_describe(topology, side)} over {bandwidth:.6g} GB/s"
    profile = BoundProfile(kind, ratio / graph.n, graph.names(side), _cut_latency(topology, side, entering=entering),
                           latency, reason)
    if kind is not CollectiveKind.ALLGATHER:
        reducing = _capable(topology, "reduce")
        return replace(profile, assumes=f"in-network reduction at {_names(reducing)}: only the cuts bind"
                       if reducing else "no in-network reduction")
    multicast = _capable(topology, "multicast")
    if multicast:
        return replace(profile, assumes=f"switch multicast at {_names(multicast)}: each block is injected once "
                                        "(M/N per GPU), so only the cuts bind")
    n = graph.n
    injection = gbps_to_bytes_per_us(sum(topology.injection_bandwidth(g) for g in range(n)))
    if injection > 0 and (n - 1) / injection > profile.us_per_byte * (1 + SEARCH_IMPROVEMENT_REL):
        return replace(profile, us_per_byte=(n - 1) / injection, cut=(), cut_latency_us=_min_route_latency(topology),
                       reason=f"traffic bound: without multicast the GPUs inject {n - 1} buffers' worth in all "
                              f"over {bytes_per_us_to_gbps(injection):.6g} GB/s")
    return replace(profile, assumes="no switch multicast: every delivery is one send")


def _direct_alltoall_us_per_pair_byte(topology: Topology) -> float | None:
    """The makespan per pair byte of Alltoall with every pair on one lowest-latency route (relaying through GPUs
    where it must), in the fluid model: the busiest link's pairs over its rate. A feasible flow of the flow LP
    (:mod:`solver_models.mcf_bound`), so an upper bound on its optimum; None when some pair has no route at all."""
    n = topology.num_gpus
    used_links: list[int] = []
    for s in range(n):
        routes = topology.gpu_routes_from(s, through_gpus=True)
        if len(routes) < n - 1:
            return None
        for r in routes.values():
            used_links.extend(r)
    used = np.array(used_links, dtype=np.int64)
    pairs = np.bincount(used, minlength=len(topology.links))
    rates = np.array([gbps_to_bytes_per_us(link.bandwidth) for link in topology.links], dtype=np.float64)
    busy = pairs > 0
    return float((pairs[busy] / rates[busy]).max()) if busy.any() else None


def _alltoall_profile(topology: Topology, latency: float) -> BoundProfile:
    graph = _Graph(topology)
    n = graph.n
    candidates: list[frozenset[int]] = [frozenset([g]) for g in range(n)]
    machines = [frozenset(m) for m in topology.machines] if len(topology.machines) > 1 else []
    candidates += machines
    union: set[int] = set()
    for members in machines[:-1]:
        union |= members
        candidates.append(frozenset(union))
    for reverse in (False, True):
        _, side = _max_ratio_cut(_Graph(topology, reverse=reverse), _seed_sets(graph))
        candidates.append(frozenset(int(g) for g in np.flatnonzero(side[:n])))
    everyone = frozenset(range(n))
    candidates += [everyone - c for c in candidates]
    best, best_side = 0.0, graph.mask([])
    for gpus in sorted(set(candidates), key=sorted):
        if not gpus or gpus == everyone:
            continue
        value, side = graph.max_flow(sorted(gpus), sorted(everyone - gpus))
        ratio = len(gpus) * (n - len(gpus)) / value if value > 0 else math.inf
        if ratio > best * (1 + SEARCH_IMPROVEMENT_REL):
            best, best_side = ratio, side
    bandwidth = bytes_per_us_to_gbps(graph.out_bandwidth(best_side))
    k = int(best_side[:n].sum())
    profile = BoundProfile(CollectiveKind.ALLTOALL, best / n, graph.names(best_side),
                           _cut_latency(topology, best_side), latency,
                           f"cut bound: {k} x {n - k} pieces must leave {_describe(topology, best_side)} "
                           f"over {bandwidth:.6g} GB/s")
    from solver_models.mcf_bound import MAX_LP_VARIABLES, alltoall_mcf

    if n * len(graph.tail) > MAX_LP_VARIABLES:
        return profile
    routed = _direct_alltoall_us_per_pair_byte(topology)
    if routed is not None and routed / n <= profile.us_per_byte:
        return profile  # the LP's optimum is at most what the direct routes reach: it cannot beat the cut
    links = [(int(a), int(b), float(c)) for a, b, c in zip(graph.tail, graph.head, graph.cap_bytes_per_us, strict=True)]
    mcf = alltoall_mcf(n, graph.v, links)
    if mcf is not None and mcf.us_per_pair_byte * _LP_SAFETY / n > profile.us_per_byte:
        return BoundProfile(CollectiveKind.ALLTOALL, mcf.us_per_pair_byte * _LP_SAFETY / n, (),
                            _min_route_latency(topology), latency,
                            "flow bound: the optimum of the multi-commodity flow LP")
    return profile


def _part_masks(topology: Topology, graph: _Graph, parts: Sequence[Sequence[int]] | None = None
                ) -> list[np.ndarray]:
    """GPU parts (machines by default) with the switches only they use (NVSwitch, NICs); shared switches stay
    apart."""
    parts = topology.machines if parts is None else parts
    owner = {g: k for k, members in enumerate(parts) for g in members}
    vid = topology.vertex_id
    masks = [graph.mask(members) for members in parts]
    for switch in topology.switches:
        sid = vid[switch.name]
        touching: set[int] = set()
        for li in (*topology.out_links[sid], *topology.in_links[sid]):
            link = topology.links[li]
            for end in (link.src, link.dst):
                if topology.is_gpu(end):
                    assert isinstance(end, int)
                    touching.add(owner[end])
        if len(touching) == 1:
            masks[touching.pop()][sid] = True
    return masks


def _dimension_partitions(topology: Topology) -> list[tuple[str, list[list[int]]]]:
    """For every proper, non-empty set J of dimensions: the groups of GPUs that differ only along J."""
    active = [d for d, dim in enumerate(topology.dimensions) if dim.size > 1]
    out = []
    for size in range(1, len(active)):
        for varying in itertools.combinations(active, size):
            groups: dict[tuple[int, ...], list[int]] = {}
            for g in topology.gpus:
                coords = topology.coordinates(g)
                groups.setdefault(tuple(coords[d] for d in active if d not in varying), []).append(g)
            label = f"groups along dimension{'s' if size > 1 else ''} {', '.join(map(str, varying))}"
            out.append((label, [groups[key] for key in sorted(groups)]))
    return out


def _allreduce_profile(topology: Topology, latency: float) -> BoundProfile:
    graph = _Graph(topology)
    n = graph.n
    # every cut separating GPUs carries the whole buffer, each way
    cut_value, cut_side = math.inf, graph.mask([0])
    for t in range(1, n):
        for sources, sinks in (([0], [t]), ([t], [0])):
            value, side = graph.max_flow(sources, sinks)
            if value < cut_value * (1 - SEARCH_IMPROVEMENT_REL):
                cut_value, cut_side = value, side
    best = BoundProfile(CollectiveKind.ALLREDUCE, 1.0 / cut_value, graph.names(cut_side),
                        _cut_latency(topology, cut_side), latency,
                        f"cut bound: the whole buffer must leave {_describe(topology, cut_side)} over "
                        f"{bytes_per_us_to_gbps(cut_value):.6g} GB/s")
    # 2(P-1) messages per element between P parts (one-way gossip)
    partitions = [("single GPUs", [graph.mask([g]) for g in range(n)])]
    if len(topology.machines) > 1:
        partitions.append(("machines", _part_masks(topology, graph)))
    partitions += [(label, _part_masks(topology, graph, parts)) for label, parts in _dimension_partitions(topology)]
    route_latency = _min_route_latency(topology)
    reducing = _capable(topology, "reduce")
    if reducing:  # a partition bound holds only when no switch outside the parts combines their data
        vid = topology.vertex_id
        ids = [vid[name] for name in reducing]
        partitions = [(label, parts) for label, parts in partitions
                      if all(any(m[i] for m in parts) for i in ids)]
        best = replace(best, assumes=f"in-network reduction at {_names(reducing)}: a partition's 2(P-1) messages "
                                     "count only where no such switch joins the parts (M each way per GPU)")
    multicast = [topology.vertex_id[name] for name in _capable(topology, "multicast")]
    for label, parts in partitions:
        inward = _Graph(topology, reverse=True)
        out_total = sum(graph.out_bandwidth(m) for m in parts)
        in_total = sum(inward.out_bandwidth(m) for m in parts)
        # a multicast switch joining the parts lets one send reach several parts: count receptions only
        shared_multicast = any(not any(m[i] for m in parts) for i in multicast)
        total = in_total if shared_multicast else min(out_total, in_total)
        us_per_byte = 2 * (len(parts) - 1) / total
        if us_per_byte > best.us_per_byte * (1 + SEARCH_IMPROVEMENT_REL):
            best = BoundProfile(CollectiveKind.ALLREDUCE, us_per_byte, (), route_latency, latency,
                                f"traffic bound: {2 * (len(parts) - 1)} buffer copies must move between "
                                f"{len(parts)} {label} over {bytes_per_us_to_gbps(total):.6g} GB/s", best.assumes)
    return best


def _rooted_profile(topology: Topology, kind: CollectiveKind, root: int, latency: float) -> BoundProfile:
    graph = _Graph(topology)
    best_value, best_side = math.inf, graph.mask([root])
    for g in range(graph.n):
        if g == root:
            continue
        sources, sinks = ([root], [g]) if kind is CollectiveKind.BROADCAST else ([g], [root])
        value, side = graph.max_flow(sources, sinks)
        if value < best_value * (1 - SEARCH_IMPROVEMENT_REL):
            best_value, best_side = value, side
    return BoundProfile(kind, 1.0 / best_value, graph.names(best_side), _cut_latency(topology, best_side), latency,
                        f"cut bound: the whole buffer must leave {_describe(topology, best_side)} over "
                        f"{bytes_per_us_to_gbps(best_value):.6g} GB/s")


@lru_cache(maxsize=64)
def bound_profile(topology: Topology, kind: CollectiveKind, root: int = 0) -> BoundProfile:
    """The size-independent bound of ``kind`` on ``topology`` (cached; ``root`` for Broadcast/Reduce)."""
    if topology.num_gpus < 2:
        return BoundProfile(kind, 0.0, (), 0.0, 0.0, "a single GPU moves nothing")
    latency = _eccentricity(topology, kind, root)
    if kind in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER):
        return _gather_profile(topology, kind, latency)
    if kind is CollectiveKind.ALLTOALL:
        return _alltoall_profile(topology, latency)
    if kind is CollectiveKind.ALLREDUCE:
        return _allreduce_profile(topology, latency)
    return _rooted_profile(topology, kind, root, latency)


# ------------------------------------------------------- several collectives at once
@dataclass(frozen=True)
class JointBound:
    """A lower bound on the makespan of collectives that all start at time 0 on one topology (us)."""

    bound_us: float
    parts_us: tuple[float, ...]
    """Each collective's own bound (:func:`lower_bound`); ``bound_us`` is at least the largest."""
    explanation: str
    cut: tuple[Vertex, ...]
    """The binding vertex set when a summed cut binds, else empty."""
    assumes: str

    def efficiency(self, makespan_us: float | None) -> float | None:
        """``bound_us / makespan_us`` (1.0 means no schedule of these collectives can end sooner)."""
        if makespan_us is None or makespan_us <= 0:
            return None
        ratio = self.bound_us / makespan_us
        return 1.0 if 1.0 < ratio <= 1.0 + _ROUNDING else ratio

    def summary(self) -> dict[str, Any]:
        return {"bound_us": self.bound_us, "parts_us": list(self.parts_us), "explanation": self.explanation,
                "cut": list(self.cut), "assumes": self.assumes}


def leave_demand(kind: CollectiveKind, size_bytes: float, n: int, inside: int, root_inside: bool) -> float:
    """Bytes of one collective that must leave a vertex set holding ``inside`` of the ``n`` GPUs (0 < inside < n).

    With or without switch multicast and in-network reduction: a block (or a
    contribution, or a sum) needed outside the set crosses out of it at least once.
    Allgather: the set's blocks; ReduceScatter: the set's contributions to the
    blocks owned outside (one partial sum each); Allreduce: the whole buffer;
    Alltoall (``size_bytes`` per rank): one piece per (inside, outside) pair;
    Broadcast: the buffer if the root is inside; Reduce: if it is outside.
    """
    block = size_bytes / n
    return {CollectiveKind.ALLGATHER: inside * block,
            CollectiveKind.REDUCESCATTER: (n - inside) * block,
            CollectiveKind.ALLREDUCE: size_bytes,
            CollectiveKind.ALLTOALL: inside * (n - inside) * block,
            CollectiveKind.BROADCAST: size_bytes if root_inside else 0.0,
            CollectiveKind.REDUCE: 0.0 if root_inside else size_bytes}[kind]


def _traffic_totals(kind: CollectiveKind, size_bytes: float, n: int, multicast: bool,
                    reduce: bool) -> tuple[float, float]:
    """(bytes all GPUs inject, bytes all GPUs receive), at least, for one collective.

    Without multicast every reception is one injection; without in-network
    reduction every combining of two partial sums is one reception.
    Allgather/Broadcast: (N-1) M received, injected too unless switches
    replicate (then M); ReduceScatter/Reduce: every contribution leaves its GPU,
    (N-1) M injected, received too unless switches combine (then M); Allreduce:
    one-way gossip needs 2(N-1) messages per element, or M per GPU each way where
    the switches replicate or combine; Alltoall: (N-1) M each way.
    """
    total = (n - 1) * size_bytes
    if kind in (CollectiveKind.ALLGATHER, CollectiveKind.BROADCAST):
        return (size_bytes if multicast else total), total
    if kind in (CollectiveKind.REDUCESCATTER, CollectiveKind.REDUCE):
        return total, (size_bytes if reduce else total)
    if kind is CollectiveKind.ALLREDUCE:
        return (n * size_bytes, n * size_bytes) if multicast or reduce else (2 * total, 2 * total)
    return total, total


def joint_lower_bound(topology: Topology, parts: Sequence[tuple[CollectiveKind | str, float]], *, root: int = 0,
                      step_overhead_us: float = 0.0, offload: bool = True,
                      endpoint: EndpointMode | None = None) -> JointBound:
    """Lower bound on the makespan of ``parts`` (collective, nccl-tests size) started together on ``topology``.

    The largest of: each collective's own bound; for every vertex set S of a
    candidate family (the single bounds' binding cuts and their complements,
    single GPUs, machines, the minimum cuts between GPU 0 and every other GPU,
    all with or without the switches), the bytes *all* collectives must move
    out of S over the bandwidth leaving S, after the cheapest route latency
    through the cut; and the GPUs' total injection and ejection over their
    total bandwidth. Different collectives move different data, so their
    demands on a cut add (docs/simulator.md proves it). Every candidate gives a
    valid bound; the family makes it exact on the usual cases (FSDP's Allgather
    + ReduceScatter of one size: every cut separating GPUs carries M). Where
    GPUs declare endpoint limits, the collectives' memory and channel bytes add
    up too (:func:`taccl_py.endpoint.joint_endpoint_bound`, in ``endpoint`` mode).
    """
    view = topology if offload else unicast_view(topology)
    kinds = [k if isinstance(k, CollectiveKind) else parse_collective(k) for k, _ in parts]
    sizes = [float(size) for _, size in parts]
    singles = [lower_bound(topology, k, s, root=root, step_overhead_us=step_overhead_us, offload=offload,
                           endpoint=endpoint) for k, s in zip(kinds, sizes, strict=True)]
    n = topology.num_gpus
    multicast, reduce = bool(_capable(view, "multicast")), bool(_capable(view, "reduce"))
    flags = [name for name, on in (("switch multicast", multicast), ("in-network reduction", reduce)) if on]
    assumes = ("with " + " and ".join(flags) if flags else "unicast") + "; the collectives' data add on every cut"
    best = max(range(len(singles)), key=lambda k: singles[k].bound_us)
    result = JointBound(singles[best].bound_us, tuple(b.bound_us for b in singles),
                        f"collective {best + 1} ({kinds[best].value}) alone: {singles[best].explanation}", (), assumes)
    if n < 2 or len(parts) < 2:
        return result
    graph = _Graph(view)
    to_vertex = _switch_distances(view, forward=True)
    from_vertex = _switch_distances(view, forward=False)
    vid = view.vertex_id
    links = [(vid[link.src], vid[link.dst], link.latency) for link in view.links]
    considered: set[bytes] = set()
    for side in _joint_candidates(view, graph, singles):
        key = side.tobytes()
        if key in considered:
            continue
        considered.add(key)
        inside = int(side[:n].sum())
        if inside in (0, n):
            continue
        out = graph.out_bandwidth(side)
        demand = sum(leave_demand(k, s, n, inside, bool(side[root])) for k, s in zip(kinds, sizes, strict=True))
        if out <= 0 or demand <= 0:
            continue
        latency = min((_route_latency_through(to_vertex[a], lat, from_vertex[b]) for a, b, lat in links
                       if side[a] and not side[b]), default=math.inf)
        value = demand / out + (0.0 if math.isinf(latency) else latency) + step_overhead_us
        if value > result.bound_us * (1 + SEARCH_IMPROVEMENT_REL):
            result = replace(result, bound_us=value, cut=graph.names(side),
                             explanation=f"summed cut bound: {demand:.6g} bytes of all {len(parts)} collectives must "
                                         f"leave {_describe(view, side)} over "
                                         f"{bytes_per_us_to_gbps(out):.6g} GB/s")
    injected = sum(_traffic_totals(k, s, n, multicast, reduce)[0] for k, s in zip(kinds, sizes, strict=True))
    ejected = sum(_traffic_totals(k, s, n, multicast, reduce)[1] for k, s in zip(kinds, sizes, strict=True))
    latency = _min_route_latency(view) + step_overhead_us
    for what, total, bandwidth in (
            ("inject", injected, sum(view.injection_bandwidth(g) for g in range(n))),
            ("receive", ejected, sum(view.ejection_bandwidth(g) for g in range(n)))):
        if bandwidth <= 0:
            continue
        value = latency + total / gbps_to_bytes_per_us(bandwidth)
        if value > result.bound_us * (1 + SEARCH_IMPROVEMENT_REL):
            result = replace(result, bound_us=value, cut=(),
                             explanation=f"traffic bound: the GPUs {what} {total:.6g} bytes of all {len(parts)} "
                                         f"collectives in all over {bandwidth:.6g} GB/s")
    if topology.has_endpoint_limits:
        from taccl_py.endpoint import joint_endpoint_bound

        term = joint_endpoint_bound(topology, list(zip(kinds, sizes, strict=True)), root, endpoint,
                                    unicast=not (multicast or reduce))
        if term is not None and term.time_us > result.bound_us * (1 + SEARCH_IMPROVEMENT_REL):
            result = replace(result, bound_us=term.time_us, cut=(),
                             explanation=f"{term.explanation} (all {len(parts)} collectives)")
    return result


def _joint_candidates(topology: Topology, graph: _Graph, singles: Sequence[Bound]) -> Iterable[np.ndarray]:
    """The vertex sets the joint bound tries (see :func:`joint_lower_bound`)."""
    vid = topology.vertex_id
    for bound in singles:
        if bound.cut:
            side = graph.mask(vid[v] for v in bound.cut)
            yield side
            yield ~side
    yield from _seed_sets(graph)
    n = graph.n
    if n <= _JOINT_FLOW_GPUS:
        for t in range(1, n):
            for sources, sinks in (([0], [t]), ([t], [0])):
                _, side = graph.max_flow(sources, sinks)
                yield side
                yield ~side


_JOINT_FLOW_GPUS = 256
"""Up to this many GPUs the joint bound also tries the minimum cuts between GPU 0 and every other GPU."""


# ------------------------------------------------------------ latency plus data, per pair
@dataclass(frozen=True)
class PairBound:
    """Latency and data together for one (source, destination) pair: see :func:`pair_bound`."""

    bound_us: float
    source: int
    destination: int
    bytes: float
    """What of the source's data must enter the destination."""

    @property
    def explanation(self) -> str:
        return (f"latency and data: {self.bytes:.6g} B of GPU {self.source}'s data must enter GPU "
                f"{self.destination}, each link into it carrying it only from when it can first arrive "
                f"there: {self.bound_us:.6g} us")


def pair_bound(topology: Topology, kind: CollectiveKind | str, size_bytes: float, *, root: int = 0,
               step_overhead_us: float = 0.0) -> PairBound | None:
    """A lower bound that adds latency and data for one pair of GPUs (None for fewer than 2 GPUs).

    Every element of the data GPU ``s`` contributes to GPU ``r``'s result enters
    ``r`` in some transfer whose sender already held data depending on it: that
    transfer starts no earlier than the cheapest chain of routes from ``s`` to
    its sender (``d``, relays allowed), and its bytes move on its last link
    ``l`` (into ``r``) only after its route latency, so not before
    ``e_l = d(s, tail of l) + latency(l)``. The transfers into ``r`` that carry
    ``s``'s data carry every element of it at least once (``B`` bytes: the
    buffer for Allreduce, Broadcast from the root and Reduce to it; a block,
    ``size / N``, for Allgather, ReduceScatter and Alltoall), and link ``l``
    moves at most ``bandwidth(l)`` of them per microsecond, so
    ``T >= min {T : sum_l bandwidth(l) x max(0, T - e_l) >= B}``. This
    combines the latency of the farthest pair with the bandwidth into it,
    which neither the latency eccentricity nor the cut bounds do (on `ring8`
    Allreduce 32 KB: 2.305 us against 2.0). It holds with multicast and
    in-network reduction (data still enters ``r`` over its links). The
    maximum is over every pair, above 64 GPUs over 64 evenly spaced sources
    (still a valid bound). Proof and figures: docs/simulator.md, "Latency
    and data together".
    """
    kind = _pair_kind(kind, size_bytes)
    n = topology.num_gpus
    if n < 2:
        return None
    if kind is CollectiveKind.BROADCAST:
        sources, need = [root], float(size_bytes)
    elif kind in (CollectiveKind.ALLREDUCE, CollectiveKind.REDUCE):
        sources, need = list(range(0, n, max(1, n // _ECCENTRICITY_SOURCES))), float(size_bytes)
    else:
        sources, need = list(range(0, n, max(1, n // _ECCENTRICITY_SOURCES))), size_bytes / n
    vid = topology.vertex_id
    best = PairBound(0.0, -1, -1, need)
    for s in sources:
        dist = _distances_from(topology, s)
        destinations = [root] if kind is CollectiveKind.REDUCE else range(n)
        for r in destinations:
            if r == s:
                continue
            arrivals = sorted((dist[vid[topology.links[li].src]] + topology.links[li].latency + step_overhead_us,
                               gbps_to_bytes_per_us(topology.links[li].bandwidth)) for li in topology.in_links[r])
            t = _fill_time(arrivals, need)
            if t > best.bound_us:
                best = PairBound(t, s, r, need)
    return best if best.source >= 0 else None


@dataclass(frozen=True)
class CrossingBound:
    """Latency and data across a cut of direct GPU-to-GPU links: see :func:`crossing_bound`."""

    bound_us: float
    side: tuple[int, ...]
    """The GPUs on the sources' side of the cut."""
    sources: tuple[int, ...]
    destination: int
    bytes: float

    @property
    def explanation(self) -> str:
        return (f"latency and data across a cut: {self.bytes:.6g} B of the data of GPU(s) {format_gpus(self.sources)} "
                f"must leave GPUs {format_gpus(self.side)} over direct links and then reach GPU {self.destination}: "
                f"{self.bound_us:.6g} us")


def format_gpus(gpus: Sequence[int]) -> str:
    """``0-7`` for a run, else the list."""
    ordered = sorted(gpus)
    if ordered and ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 2:
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered))


def crossing_bound(topology: Topology, kind: CollectiveKind | str, size_bytes: float, *, root: int = 0,
                   step_overhead_us: float = 0.0) -> CrossingBound | None:
    """A lower bound that adds latency and data across a cut made of direct GPU-to-GPU links (None if none).

    The sides tried: every machine (of several), and every single GPU (above 64 GPUs, 64 evenly spaced),
    whose outgoing links all join two GPUs. A transfer over such a link ``l = (g, h)`` goes from ``g`` to ``h`` and nowhere else (a route passes
    through switches only). If its bytes carry data of GPU ``s`` (on the side), it starts once ``g`` holds
    data depending on ``s``, no earlier than ``d(s, g)`` (the cheapest chain of routes), and its bytes move
    from ``latency(l)`` after the start; that data then reaches GPU ``r`` (off the side) no earlier than
    ``d(h, r)`` after the transfer arrives. So ``s``'s bytes cross ``l`` only within
    ``[d(s, g) + latency(l), T - d(h, r)]``. Every element of ``s``'s data that ``r``'s result needs crosses
    the cut (every path from ``s`` to ``r`` does): ``B`` bytes (as in :func:`pair_bound`), so
    ``B <= sum_l bandwidth(l) x max(0, T - d(s, g) - latency(l) - d(h, r))``. For Allgather and Alltoall,
    whose bytes each carry one GPU's data, the blocks of several sources ``S`` add up, each link counted from
    the nearest of them; ``S`` ranges over the side's GPUs at least a given distance from the cut. On
    ``ndv2x2`` (the machines joined by one 12.5 GB/s link each way) Allreduce 16 KB: 1.4 + 1.3 + 1.4 +
    16384 B / 12.5 GB/s = 5.41 us, where the latency bound is 4.1 us. Proof: docs/simulator.md, "Latency and
    data across a cut".
    """
    kind = _pair_kind(kind, size_bytes)
    n = topology.num_gpus
    if n < 2:
        return None
    sides = [tuple(m) for m in topology.machines] if len(topology.machines) > 1 else []
    sides += [(g,) for g in range(0, n, max(1, n // _ECCENTRICITY_SOURCES))]
    block = size_bytes / n
    whole = kind in (CollectiveKind.ALLREDUCE, CollectiveKind.REDUCE, CollectiveKind.BROADCAST)
    vid = topology.vertex_id
    forward: dict[int, list[float]] = {}  # latency from a GPU to every vertex
    best: CrossingBound | None = None
    for side in sides:
        inside = set(side)
        cut = [li for g in side for li in topology.out_links[g] if topology.links[li].dst not in inside]
        if not cut or any(not isinstance(topology.links[li].dst, int) for li in cut):
            continue  # a link into a switch: its transfers may end anywhere, the window does not apply
        sources = [s for s in side if kind is not CollectiveKind.BROADCAST or s == root]
        targets = [r for r in range(n) if r not in inside and (kind is not CollectiveKind.REDUCE or r == root)]
        heads = {vid[topology.links[li].dst] for li in cut}
        for g in {*sources, *heads} - forward.keys():
            forward[g] = _distances_from(topology, g)
        for r in targets:
            groups: list[list[int]] = [[s] for s in sources]
            if kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLTOALL) and len(sources) > 1:
                near = {s: min(forward[s][vid[topology.links[li].src]] for li in cut) for s in sources}
                groups += [[s for s in sources if near[s] >= level] for level in sorted(set(near.values()))]
            for group in groups:
                need = float(size_bytes) if whole else block * len(group)
                arrivals = sorted((min(forward[s][vid[topology.links[li].src]] for s in group)
                                   + topology.links[li].latency + step_overhead_us
                                   + forward[vid[topology.links[li].dst]][r],
                                   gbps_to_bytes_per_us(topology.links[li].bandwidth)) for li in cut)
                t = _fill_time(arrivals, need)
                if best is None or t > best.bound_us:
                    best = CrossingBound(t, tuple(side), tuple(group), r, need)
    return best


def _pair_kind(kind: CollectiveKind | str, size_bytes: float) -> CollectiveKind:
    """The collective of a latency-and-data bound, and its size checked."""
    if not size_bytes > 0:
        raise InputError(f"must be > 0 bytes (got {size_bytes!r})", where="--size")
    return kind if isinstance(kind, CollectiveKind) else parse_collective(kind)


def _fill_time(arrivals: Sequence[tuple[float, float]], need: float) -> float:
    """The first T with sum of rate x max(0, T - start) >= need, for (start, rate) sorted by start."""
    rate = moved = 0.0
    now = math.inf
    for start, link_rate in arrivals:
        if math.isinf(start):
            break
        if rate > 0 and moved + rate * (start - now) >= need:
            break
        if rate > 0:
            moved += rate * (start - now)
        now = start
        rate += link_rate
    if rate <= 0:
        return math.inf
    return now + (need - moved) / rate
