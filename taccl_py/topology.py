"""The topology model: GPUs, switches and directed links with latency and bandwidth.

GPUs are ranks ``0..N-1`` (ints); switches, NICs and other non-compute vertices
are named (strings) and carry capability flags. A directed link ``u -> v`` has a
latency (us) and a bandwidth (GB/s, 1e9 bytes). Data can only *rest* on GPUs: a
route between two GPUs passes through switches only, and a relay through a
third GPU is two transfers.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from taccl_py.errors import TopologyError
from taccl_py.limits import MAX_BANDWIDTH_GBPS, MAX_GPUS, MAX_LATENCY_US, MIN_BANDWIDTH_GBPS, limit_text

if TYPE_CHECKING:
    from taccl_py.runtime import RuntimeModel

__all__ = ["Dimension", "DimensionKind", "Endpoint", "Link", "Route", "Switch", "SwitchModel", "Topology", "Vertex",
           "check_dimensions", "check_endpoints", "check_topology"]

Vertex = int | str
"""A GPU rank (int) or a switch name (str)."""

Route = tuple[int, ...]
"""A route as the indices of its links in ``Topology.links``, in travel order."""


@dataclass(frozen=True)
class Switch:
    """A non-compute vertex: an NVSwitch, an IB switch, a NIC, a PCIe switch.

    ``multicast``: one injected chunk can leave on several ports (replication).
    ``reduce``: the switch can combine contributions in the network.
    """

    name: str
    kind: str = "switch"
    multicast: bool = False
    reduce: bool = False


@dataclass(frozen=True)
class Link:
    """A directed link ``src -> dst``: latency in us, bandwidth in GB/s (1e9 B/s)."""

    src: Vertex
    dst: Vertex
    bandwidth: float
    latency: float
    kind: str = "nvlink"
    provenance: Mapping[str, Any] | None = field(default=None, hash=False, compare=True)


@dataclass(frozen=True)
class Endpoint:
    """What a GPU's own memory system gives to communication (ACE's endpoint; see docs/simulator.md).

    ``memory_bandwidth``: the GPU's memory bandwidth in GB/s, shared by every
    transfer's reads and writes at this GPU (and by compute kernels in a
    workload). ``comm_channels`` x ``channel_bandwidth`` (GB/s per channel):
    what the channels (SMs / threadblocks) a GPU-driven runtime gives to
    communication can move; an offload engine needs none. None: unlimited.
    """

    memory_bandwidth: float | None = None
    comm_channels: int | None = None
    channel_bandwidth: float | None = None

    @property
    def channel_capacity(self) -> float | None:
        """GB/s the communication channels can move (None: unlimited)."""
        if self.comm_channels is None or self.channel_bandwidth is None:
            return None
        return self.comm_channels * self.channel_bandwidth

    @property
    def limited(self) -> bool:
        return self.memory_bandwidth is not None or self.channel_capacity is not None


class DimensionKind(StrEnum):
    """How the GPUs of one group along a dimension are joined."""

    RING = "ring"
    """Neighbours linked both ways, wrapping around (a torus dimension, ASTRA-sim's ``Ring``)."""
    FULLY_CONNECTED = "fully-connected"
    """A direct link between every ordered pair (ASTRA-sim's ``FullyConnected``)."""
    SWITCH = "switch"
    """Every member reaches every other through switch vertices (ASTRA-sim's ``Switch``, an NVSwitch, an IB fabric)."""
    LINE = "line"
    """Neighbours linked both ways without wrap-around (a mesh dimension)."""


@dataclass(frozen=True)
class Dimension:
    """One dimension of a multi-dimensional network: ``size`` GPUs per group, joined as ``kind``.

    GPU ids are mixed radix over the dimensions, dimension 0 varying fastest: the
    group of GPU g along dimension d is the ``size`` GPUs that share all of g's other
    coordinates. Dimensions describe how a topology was built (ASTRA-sim networks,
    tori, DGX clusters as GPUs-in-a-machine x machines); the links stay the truth.
    """

    kind: DimensionKind
    size: int


class SwitchModel(StrEnum):
    """How a transfer crosses the switches on its route (docs/simulator.md, "Switch models")."""

    CUT_THROUGH = "cut-through"
    """The route's latency, then the bytes stream over every link of the route at once (the default; SimGrid's CM02,
    ASTRA-sim's congestion-unaware backend)."""
    STORE_AND_FORWARD = "store-and-forward"
    """Hop by hop: each link's latency, then the whole message over that link alone, before the next link starts
    (the way ASTRA-sim's congestion-aware backend forwards a message at every device)."""


_UNLIMITED = Endpoint()


@dataclass(frozen=True)
class Topology:
    """A multi-GPU system. Build it directly, from a generator, or with ``load_topology``.

    ``machines`` optionally partitions the GPUs into servers; links between
    machines usually pass through NIC and IB-switch vertices.
    """

    name: str
    num_gpus: int
    links: tuple[Link, ...]
    switches: tuple[Switch, ...] = ()
    machines: tuple[tuple[int, ...], ...] = ()
    source: str = ""
    dimensions: tuple[Dimension, ...] = ()
    """Optional multi-dimensional structure (see :class:`Dimension`); empty when the topology has none."""
    endpoints: tuple[Endpoint, ...] = ()
    """Per GPU (indexed by rank), its :class:`Endpoint`; empty when no GPU declares one (memory is free)."""
    switch_model: SwitchModel = SwitchModel.CUT_THROUGH
    """How transfers cross switches in the simulator (:class:`SwitchModel`)."""
    runtime: RuntimeModel | None = field(default=None, compare=False)
    """Calibrated runtime costs (protocols, overheads; :mod:`taccl_py.runtime`), None for the raw-link model only."""

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        """Computed once: caches keyed by a topology (bounds, baselines) hash it on every lookup."""
        return hash((self.name, self.num_gpus, self.links, self.switches, self.machines, self.source,
                     self.dimensions, self.endpoints, self.switch_model))

    # ----------------------------------------------------------------- vertices
    @property
    def gpus(self) -> range:
        return range(self.num_gpus)

    @cached_property
    def vertices(self) -> tuple[Vertex, ...]:
        """GPUs first (by rank), then switches in declaration order."""
        return (*range(self.num_gpus), *(s.name for s in self.switches))

    @cached_property
    def vertex_id(self) -> dict[Vertex, int]:
        """Dense integer id of every vertex: a GPU's rank, then N + switch position."""
        return {v: i for i, v in enumerate(self.vertices)}

    def is_gpu(self, vertex: Vertex) -> bool:
        return isinstance(vertex, int) and not isinstance(vertex, bool) and 0 <= vertex < self.num_gpus

    @cached_property
    def switch_by_name(self) -> dict[str, Switch]:
        return {s.name: s for s in self.switches}

    # -------------------------------------------------------------------- links
    @cached_property
    def out_links(self) -> tuple[tuple[int, ...], ...]:
        """Link indices leaving each vertex, by dense vertex id."""
        out: list[list[int]] = [[] for _ in self.vertices]
        for i, link in enumerate(self.links):
            out[self.vertex_id[link.src]].append(i)
        return tuple(tuple(x) for x in out)

    @cached_property
    def _out_arcs(self) -> tuple[tuple[tuple[int, int, float], ...], ...]:
        """Per vertex id, (link index, head vertex id, latency) of each link leaving it, in :attr:`out_links`
        order: what a route search reads per step, with no link or vertex looked up."""
        vid, links = self.vertex_id, self.links
        return tuple(tuple((li, vid[links[li].dst], links[li].latency) for li in out) for out in self.out_links)

    @cached_property
    def in_links(self) -> tuple[tuple[int, ...], ...]:
        """Link indices entering each vertex, by dense vertex id."""
        inc: list[list[int]] = [[] for _ in self.vertices]
        for i, link in enumerate(self.links):
            inc[self.vertex_id[link.dst]].append(i)
        return tuple(tuple(x) for x in inc)

    def links_from(self, vertex: Vertex) -> tuple[int, ...]:
        return self.out_links[self.vertex_id[vertex]]

    def links_to(self, vertex: Vertex) -> tuple[int, ...]:
        return self.in_links[self.vertex_id[vertex]]

    @cached_property
    def link_index(self) -> dict[tuple[Vertex, Vertex], int]:
        """Index of the link ``(src, dst)``; links are unique per ordered pair."""
        return {(link.src, link.dst): i for i, link in enumerate(self.links)}

    def injection_bandwidth(self, gpu: int) -> float:
        """Total GB/s a GPU can send on all its outgoing links."""
        return sum(self.links[i].bandwidth for i in self.links_from(gpu))

    def ejection_bandwidth(self, gpu: int) -> float:
        """Total GB/s a GPU can receive on all its incoming links."""
        return sum(self.links[i].bandwidth for i in self.links_to(gpu))

    # ----------------------------------------------------------------- machines
    @cached_property
    def machine_of(self) -> dict[int, int]:
        """Machine index of every GPU (every GPU is its own machine when none are declared)."""
        if not self.machines:
            return {g: g for g in self.gpus}
        return {g: m for m, members in enumerate(self.machines) for g in members}

    @property
    def num_machines(self) -> int:
        return len(self.machines) if self.machines else self.num_gpus

    # --------------------------------------------------------------- dimensions
    def coordinates(self, gpu: int) -> tuple[int, ...]:
        """Mixed-radix coordinates of ``gpu`` over :attr:`dimensions` (dimension 0 fastest)."""
        coords = []
        for dim in self.dimensions:
            coords.append(gpu % dim.size)
            gpu //= dim.size
        return tuple(coords)

    def dimension_group(self, gpu: int, dim: int) -> tuple[int, ...]:
        """The GPUs sharing every coordinate of ``gpu`` but the one of dimension ``dim``, by that coordinate."""
        stride = math.prod(d.size for d in self.dimensions[:dim])
        size = self.dimensions[dim].size
        base = gpu - ((gpu // stride) % size) * stride
        return tuple(base + i * stride for i in range(size))

    # ------------------------------------------------------------------- routes
    def route_latency(self, route: Route) -> float:
        return sum(self.links[i].latency for i in route)

    def route_bandwidth(self, route: Route) -> float:
        """Bottleneck bandwidth of a route in GB/s (infinite for an empty route)."""
        return min((self.links[i].bandwidth for i in route), default=float("inf"))

    def route_vertices(self, route: Route) -> tuple[Vertex, ...]:
        if not route:
            return ()
        return (self.links[route[0]].src, *(self.links[i].dst for i in route))

    def route_from_vertices(self, vertices: Sequence[Vertex]) -> Route:
        """Link indices along a vertex sequence; raises TopologyError for a missing link."""
        route = []
        for u, v in pairwise(vertices):
            try:
                route.append(self.link_index[(u, v)])
            except KeyError:
                raise TopologyError(f"no link {u!r} -> {v!r} in topology {self.name!r}") from None
        return tuple(route)

    def _dijkstra(self, source: Vertex, *, through_gpus: bool) -> dict[int, tuple[float, int, int]]:
        """Shortest routes from ``source`` by (latency, hops); returns id -> (lat, hops, via link)."""
        start = self.vertex_id[source]
        best: dict[int, tuple[float, int, int]] = {start: (0.0, 0, -1)}
        heap: list[tuple[float, int, int]] = [(0.0, 0, start)]
        done: set[int] = set()
        arcs, num_gpus = self._out_arcs, self.num_gpus
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            lat, hops, u = pop(heap)
            if u in done:
                continue
            done.add(u)
            if u != start and u < num_gpus and not through_gpus:
                continue  # data rests on a GPU: a route does not pass through one
            hops += 1
            for li, v, link_latency in arcs[u]:
                reach = lat + link_latency
                old = best.get(v)
                if old is None or reach < old[0] or (reach == old[0] and hops < old[1]):
                    best[v] = (reach, hops, li)
                    push(heap, (reach, hops, v))
        return best

    @cached_property
    def _route_cache(self) -> dict[int, dict[int, Route]]:
        return {}

    def gpu_route(self, src: int, dst: int) -> Route | None:
        """Lowest-latency route from GPU ``src`` to GPU ``dst`` through switches only.

        ``None`` when the two GPUs are not connected without relaying through
        another GPU. Ties break on fewer hops, then on link order.
        """
        cache = self._route_cache
        if src not in cache:
            cache[src] = self.gpu_routes_from(src)
        return cache[src].get(dst)

    def gpu_routes_from(self, src: int, *, through_gpus: bool = False) -> dict[int, Route]:
        """Lowest-latency routes from GPU ``src`` to every GPU it reaches (through switches only, or relaying
        through other GPUs too when ``through_gpus``); ties as :meth:`gpu_route`'s."""
        best = self._dijkstra(src, through_gpus=through_gpus)
        start = self.vertex_id[src]
        known: dict[int, Route] = {start: ()}  # routes share their beginnings: each vertex's is built once
        return {g: self._route_back(best, start, g, known) for g in range(self.num_gpus) if g != src and g in best}

    @cached_property
    def _relay_cache(self) -> dict[int, dict[int, Route]]:
        return {}

    def relay_route(self, src: int, dst: int) -> Route | None:
        """Lowest-latency route from GPU ``src`` to GPU ``dst`` relaying through other GPUs where it must (the
        route :meth:`shortest_path` gives); ``None`` when ``dst`` is unreachable. The routes from each source are
        found once (one search per source, not per pair: a direct Alltoall asks for every pair)."""
        cache = self._relay_cache
        if src not in cache:
            cache[src] = self.gpu_routes_from(src, through_gpus=True)
        return cache[src].get(dst)

    def shortest_path(self, src: Vertex, dst: Vertex, *, through_gpus: bool = True) -> Route | None:
        """Lowest-latency route between any two vertices (may relay through GPUs if allowed)."""
        best = self._dijkstra(src, through_gpus=through_gpus)
        target = self.vertex_id[dst]
        return self._route_back(best, self.vertex_id[src], target) if target in best else None

    def _route_back(self, best: dict[int, tuple[float, int, int]], start: int, target: int,
                    known: dict[int, Route] | None = None) -> Route:
        """The route :meth:`_dijkstra`'s ``best`` reached vertex id ``target`` by, from vertex id ``start``.

        ``known``: routes from ``start`` already built, by vertex id (holding ``start``'s empty route); the route
        to every vertex passed is added to it."""
        if known is None:
            known = {start: ()}
        vid, links = self.vertex_id, self.links
        passed: list[tuple[int, int]] = []  # (vertex id, the link reaching it), from the target back
        v = target
        while v not in known:
            li = best[v][2]
            passed.append((v, li))
            v = vid[links[li].src]
        route = known[v]
        for v, li in reversed(passed):
            route = (*route, li)
            known[v] = route
        return route

    def gpu_neighbors(self, gpu: int) -> tuple[int, ...]:
        """GPUs reachable from ``gpu`` through switches only (one logical hop)."""
        return tuple(g for g in self.gpus if g != gpu and self.gpu_route(gpu, g) is not None)

    # ---------------------------------------------------------------- endpoints
    def endpoint(self, gpu: int) -> Endpoint:
        """GPU ``gpu``'s endpoint (an unlimited one when none is declared)."""
        return self.endpoints[gpu] if self.endpoints else _UNLIMITED

    @property
    def has_endpoint_limits(self) -> bool:
        """Whether any GPU declares a memory or channel limit (else the simulator adds no resource)."""
        return any(e.limited for e in self.endpoints)

    def with_endpoints(self, endpoint: Endpoint) -> Topology:
        """The same topology with ``endpoint`` on every GPU."""
        return replace(self, endpoints=(endpoint,) * self.num_gpus)

    def with_switch_model(self, model: SwitchModel) -> Topology:
        """The same topology with switches of ``model`` (itself when it already has them)."""
        return self if model is self.switch_model else replace(self, switch_model=model)

    @property
    def store_and_forward(self) -> bool:
        """Whether transfers cross the route hop by hop (:attr:`SwitchModel.STORE_AND_FORWARD`)."""
        return self.switch_model is SwitchModel.STORE_AND_FORWARD

    # --------------------------------------------------------------- transforms
    def reversed(self) -> Topology:
        """Every link turned around (same bandwidth and latency); used to synthesize reductions."""
        links = tuple(replace(link, src=link.dst, dst=link.src) for link in self.links)
        return replace(self, name=f"{self.name}-reversed", links=links)

    def to_networkx(self) -> Any:
        """A ``networkx.DiGraph`` with ``bandwidth``, ``latency``, ``kind`` and ``index`` on edges."""
        import networkx as nx

        graph = nx.DiGraph(name=self.name)
        for v in self.vertices:
            graph.add_node(v, gpu=self.is_gpu(v))
        for i, link in enumerate(self.links):
            graph.add_edge(link.src, link.dst, bandwidth=link.bandwidth, latency=link.latency,
                           kind=link.kind, index=i)
        return graph

    def summary(self) -> dict[str, Any]:
        """Counts and per-GPU bandwidths, the figures ``taccl topo show`` prints."""
        kinds: dict[str, dict[str, float]] = {}
        for link in self.links:
            entry = kinds.setdefault(link.kind, {"count": 0, "min_bandwidth": link.bandwidth,
                                                 "max_bandwidth": link.bandwidth,
                                                 "min_latency": link.latency, "max_latency": link.latency})
            entry["count"] += 1
            entry["min_bandwidth"] = min(entry["min_bandwidth"], link.bandwidth)
            entry["max_bandwidth"] = max(entry["max_bandwidth"], link.bandwidth)
            entry["min_latency"] = min(entry["min_latency"], link.latency)
            entry["max_latency"] = max(entry["max_latency"], link.latency)
        return {
            "name": self.name,
            "gpus": self.num_gpus,
            "switches": len(self.switches),
            "switch_kinds": sorted({s.kind for s in self.switches}),
            "links": len(self.links),
            "link_kinds": {k: kinds[k] for k in sorted(kinds)},
            "machines": [list(m) for m in self.machines],
            "dimensions": [{"kind": d.kind.value, "size": d.size} for d in self.dimensions],
            "injection_GBps": [self.injection_bandwidth(g) for g in self.gpus],
            "ejection_GBps": [self.ejection_bandwidth(g) for g in self.gpus],
            "source": self.source,
        }


def _reachable(topology: Topology, start: int, *, forward: bool) -> set[int]:
    adjacency = topology.out_links if forward else topology.in_links
    seen = {start}
    stack = [start]
    while stack:
        u = stack.pop()
        for li in adjacency[u]:
            link = topology.links[li]
            v = topology.vertex_id[link.dst if forward else link.src]
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen


def check_topology(topology: Topology, *, where: str = "") -> Topology:
    """Raise :class:`TopologyError` naming the first inconsistency; return the topology.

    Checks vertices, duplicate links, bandwidth > 0, latency >= 0, machines
    partitioning the GPUs, and that every GPU can reach every other GPU.
    """
    where = where or topology.name
    if topology.num_gpus < 1:
        raise TopologyError(f"must be >= 1 (got {topology.num_gpus})", where=where, field="gpus")
    if topology.num_gpus > MAX_GPUS:
        raise TopologyError(f"is {topology.num_gpus}; {limit_text('MAX_GPUS', MAX_GPUS)}", where=where, field="gpus")
    names: set[str] = set()
    for k, switch in enumerate(topology.switches):
        if not isinstance(switch.name, str) or not switch.name:
            raise TopologyError(f"must be a non-empty string (got {switch.name!r})", where=where,
                                field=f"switches[{k}].name")
        if switch.name in names:
            raise TopologyError(f"duplicates switch name {switch.name!r}", where=where, field=f"switches[{k}].name")
        names.add(switch.name)
    seen: dict[tuple[Vertex, Vertex], int] = {}
    for i, link in enumerate(topology.links):
        for end in ("src", "dst"):
            v = getattr(link, end)
            if isinstance(v, bool) or not (topology.is_gpu(v) or (isinstance(v, str) and v in names)):
                raise TopologyError(_unknown_vertex(v, topology.num_gpus), where=where, field=f"links[{i}].{end}")
        if link.src == link.dst:
            raise TopologyError(f"is a self-loop on {link.src!r}", where=where, field=f"links[{i}]")
        if not link.bandwidth > 0:
            raise TopologyError(f"must be > 0 (got {link.bandwidth:g})", where=where, field=f"links[{i}].bandwidth")
        if not link.latency >= 0:
            raise TopologyError(f"must be >= 0 (got {link.latency:g})", where=where, field=f"links[{i}].latency")
        if not MIN_BANDWIDTH_GBPS <= link.bandwidth <= MAX_BANDWIDTH_GBPS:
            raise TopologyError(f"is {link.bandwidth:g} GB/s, outside {MIN_BANDWIDTH_GBPS:g}..{MAX_BANDWIDTH_GBPS:g} "
                                "GB/s (MIN_BANDWIDTH_GBPS..MAX_BANDWIDTH_GBPS)", where=where,
                                field=f"links[{i}].bandwidth")
        if not link.latency <= MAX_LATENCY_US:
            raise TopologyError(f"is {link.latency:g} us; {limit_text('MAX_LATENCY_US', MAX_LATENCY_US, 'us')}",
                                where=where, field=f"links[{i}].latency")
        key = (link.src, link.dst)
        if key in seen:
            raise TopologyError(f"duplicates links[{seen[key]}] ({link.src!r} -> {link.dst!r})", where=where,
                                field=f"links[{i}]")
        seen[key] = i
    check_machines(topology.machines, topology.num_gpus, where=where)
    check_dimensions(topology.dimensions, topology.num_gpus, where=where)
    check_endpoints(topology.endpoints, topology.num_gpus, where=where)
    check_connected(topology, where=where)
    return topology


MAX_COMM_CHANNELS = 4096
"""At most this many communication channels per GPU (NCCL uses at most 32; an H100 has 132 SMs)."""


def check_endpoints(endpoints: Sequence[Endpoint], num_gpus: int, *, where: str, field: str = "endpoints") -> None:
    """Endpoints, when given, are one per GPU with figures in range (``channel_*`` given together)."""
    if not endpoints:
        return
    if len(endpoints) != num_gpus:
        raise TopologyError(f"has {len(endpoints)} entries for {num_gpus} GPUs", where=where, field=field)
    for g, e in enumerate(endpoints):
        bw = e.memory_bandwidth
        if bw is not None and not (isinstance(bw, int | float) and not isinstance(bw, bool)
                                   and MIN_BANDWIDTH_GBPS <= bw <= MAX_BANDWIDTH_GBPS):
            raise TopologyError(f"is {bw!r}, not a bandwidth in {MIN_BANDWIDTH_GBPS:g}..{MAX_BANDWIDTH_GBPS:g} GB/s",
                                where=where, field=f"{field} (GPU {g}).memory_bandwidth")
        if (e.comm_channels is None) != (e.channel_bandwidth is None):
            raise TopologyError("comm_channels and channel_bandwidth go together (give both or neither)",
                                where=where, field=f"{field} (GPU {g})")
        n = e.comm_channels
        if n is not None and not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_COMM_CHANNELS):
            raise TopologyError(f"is {n!r}, not an integer in 1..{MAX_COMM_CHANNELS}", where=where,
                                field=f"{field} (GPU {g}).comm_channels")
        cb = e.channel_bandwidth
        if cb is not None and not (isinstance(cb, int | float) and not isinstance(cb, bool)
                                   and MIN_BANDWIDTH_GBPS <= cb <= MAX_BANDWIDTH_GBPS):
            raise TopologyError(f"is {cb!r}, not a bandwidth in {MIN_BANDWIDTH_GBPS:g}..{MAX_BANDWIDTH_GBPS:g} GB/s",
                                where=where, field=f"{field} (GPU {g}).channel_bandwidth")


def _unknown_vertex(v: object, num_gpus: int) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return f"is GPU {v} but GPU ids are 0..{num_gpus - 1}"
    return f"names unknown vertex {v!r} (GPUs are 0..{num_gpus - 1}; switches must be declared)"


def check_machines(machines: Iterable[Sequence[int]], num_gpus: int, *, where: str) -> None:
    """Machines, when given, must partition the GPUs ``0..N-1``."""
    machines = list(machines)
    if not machines:
        return
    owner: dict[int, int] = {}
    for m, members in enumerate(machines):
        if not members:
            raise TopologyError("is empty (a machine holds at least one GPU)", where=where, field=f"machines[{m}]")
        for k, g in enumerate(members):
            if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < num_gpus:
                raise TopologyError(f"must be a GPU id in 0..{num_gpus - 1} (got {g!r})", where=where,
                                    field=f"machines[{m}][{k}]")
            if g in owner:
                raise TopologyError(f"lists GPU {g} already in machines[{owner[g]}]", where=where,
                                    field=f"machines[{m}][{k}]")
            owner[g] = m
    missing = [g for g in range(num_gpus) if g not in owner]
    if missing:
        raise TopologyError(f"do not include GPU {missing[0]} (machines must cover every GPU)", where=where,
                            field="machines")


def check_dimensions(dimensions: Sequence[Dimension], num_gpus: int, *, where: str) -> None:
    """Dimensions, when given, have sizes >= 1 whose product is the GPU count."""
    if not dimensions:
        return
    for k, dim in enumerate(dimensions):
        if not isinstance(dim, Dimension) or not isinstance(dim.kind, DimensionKind):
            raise TopologyError(f"must be a Dimension with a DimensionKind (got {dim!r})", where=where,
                                field=f"dimensions[{k}]")
        if isinstance(dim.size, bool) or not isinstance(dim.size, int) or dim.size < 1:
            raise TopologyError(f"must be an integer >= 1 (got {dim.size!r})", where=where,
                                field=f"dimensions[{k}].size")
    total = math.prod(dim.size for dim in dimensions)
    if total != num_gpus:
        shape = " x ".join(str(dim.size) for dim in dimensions)
        raise TopologyError(f"multiply to {total} ({shape}) but the topology has {num_gpus} GPUs", where=where,
                            field="dimensions")


def check_connected(topology: Topology, *, where: str) -> None:
    """Every GPU must reach every other GPU (through switches or relaying GPUs)."""
    if topology.num_gpus < 2:
        return
    forward = _reachable(topology, 0, forward=True)
    for g in topology.gpus:
        if g not in forward:
            raise TopologyError(f"GPU 0 cannot reach GPU {g}", where=where, field="links")
    backward = _reachable(topology, 0, forward=False)
    for g in topology.gpus:
        if g not in backward:
            raise TopologyError(f"GPU {g} cannot reach GPU 0", where=where, field="links")
