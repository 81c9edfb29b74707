"""Latency trees and message fusion: the engine under the ``oneshot`` baselines.

A *hop* moves one item (a set of chunks) from GPU to GPU along a direct route
once the hops it needs have delivered (the hop that brought the item to its
sender; for a reduction, every hop that brought a child's partial sum).
:func:`fuse` turns hops into transfers, merging the hops that share a
connection and would otherwise queue behind one another: a hop joins the
message before it on its connection when its data is ready before that
message would arrive (on a FIFO connection it could not start earlier anyway),
so everything a rank sends on one connection at one moment goes as one
message and pays the route latency once. Readiness is estimated with the
alpha-beta model of each route alone (latency + bytes / bandwidth).

:func:`latency_tree` builds shortest-latency trees over GPU -> GPU routes
(relays through GPUs allowed), breaking ties toward the least-loaded links so
that trees built one after another spread over the fabric.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from taccl_py.baselines.common import NotApplicable, route_cost
from taccl_py.schedule import Op, Transfer
from taccl_py.tolerances import SAME_INSTANT_REL
from taccl_py.topology import Route, Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["Hop", "LatencyTree", "all_pairs_latency", "fuse", "latency_tree"]

_TICK_US = 1e-9
"""Latencies are added in whole ticks of this many us, so that equal sums compare equal."""


@dataclass(frozen=True, slots=True)
class Hop:
    """``item`` goes from GPU ``src`` to GPU ``dst`` once every hop in ``needs`` has delivered."""

    item: int
    src: int
    dst: int
    op: Op = Op.COPY
    needs: tuple[int, ...] = ()
    channel: int = 0


@dataclass(frozen=True)
class LatencyTree:
    """Shortest-latency tree: ``parent[v]`` is the GPU v hears from (forward) or sends to (reverse)."""

    roots: tuple[int, ...]
    parent: dict[int, int]
    distance: dict[int, float]
    order: tuple[int, ...]
    """Non-root GPUs by increasing distance from the roots."""

    @property
    def depth_us(self) -> float:
        return max(self.distance.values(), default=0.0)


@lru_cache(maxsize=16)
def _adjacency(topology: Topology, reverse: bool) -> tuple[tuple[tuple[int, Route, float, int], ...], ...]:
    """Per GPU u: (v, route, latency, latency in ticks) for every direct route u -> v (v -> u when ``reverse``).

    Ticks are 1e-9 us, so sums of latencies compare exactly (0.7 + 2.6 == 2.6 + 0.7).
    """
    n = topology.num_gpus
    out = []
    for u in range(n):
        row = []
        for v in range(n):
            if v == u:
                continue
            route = topology.gpu_route(v, u) if reverse else topology.gpu_route(u, v)
            if route is not None:
                latency = topology.route_latency(route)
                row.append((v, route, latency, round(latency / _TICK_US)))
        out.append(tuple(row))
    return tuple(out)


@lru_cache(maxsize=16)
def all_pairs_latency(topology: Topology) -> np.ndarray:
    """``[u, v]``: lowest latency from GPU u to GPU v over direct routes, relaying through GPUs (Floyd-Warshall)."""
    n = topology.num_gpus
    dist = np.full((n, n), np.inf)
    np.fill_diagonal(dist, 0.0)
    for u, row in enumerate(_adjacency(topology, False)):
        for v, _, latency, _ in row:
            dist[u, v] = latency
    for k in range(n):
        dist = np.minimum(dist, dist[:, k:k + 1] + dist[k:k + 1, :])
    if np.isinf(dist).any():
        u, v = (int(x) for x in np.argwhere(np.isinf(dist))[0])
        raise NotApplicable(f"GPU {u} cannot reach GPU {v}", where=topology.name)
    return dist


def latency_tree(topology: Topology, roots: Sequence[int], *, reverse: bool = False,
                 loads: list[float] | None = None, members: Sequence[int] | None = None,
                 spread: bool = False) -> LatencyTree:
    """Shortest-latency tree from ``roots`` to every GPU (to the roots when ``reverse``).

    Edges are direct GPU -> GPU routes (through switches only); paths relay
    through GPUs. Ties go to fewer hops, then to the route whose busiest link
    is least loaded in ``loads`` (uses per link, updated with the tree's
    routes), then to the lower GPU number. ``members`` restricts the GPUs.

    With ``spread`` (and ``loads``), a GPU may take a longer path as long as it
    stays within the tree's depth: its parent is the least-loaded one among
    those that reach it by then (so a block enters a machine over one NIC and
    spreads over the NVSwitch instead of crossing a NIC to every GPU).
    """
    allowed = set(range(topology.num_gpus) if members is None else members)
    adjacency = _adjacency(topology, reverse)
    best: dict[int, tuple[int, int, float, int]] = {}
    parent: dict[int, int] = {}
    heap: list[tuple[int, int, float, int, int]] = []
    for r in sorted(set(roots)):
        best[r] = (0, 0, 0.0, r)
        heap.append((0, 0, 0.0, r, r))
    heapq.heapify(heap)
    done: set[int] = set()
    order: list[int] = []
    distance: dict[int, float] = {}
    while heap:
        d, hops, _, u, via = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        distance[u] = d * _TICK_US
        if u != via:
            parent[u] = via
            order.append(u)
            if loads is not None:
                route = topology.gpu_route(u, via) if reverse else topology.gpu_route(via, u)
                assert route is not None
                for li in route:
                    loads[li] += 1.0
        for v, route, _, ticks in adjacency[u]:
            if v in done or v not in allowed:
                continue
            nd = d + ticks
            if v in best and nd > best[v][0]:
                continue
            ncost = route_cost(topology, route, loads) if loads is not None else 0.0
            label = (nd, hops + 1, ncost, u)
            if v not in best or label < best[v]:
                best[v] = label
                heapq.heappush(heap, (nd, hops + 1, ncost, v, u))
    missing = allowed - done
    if missing:
        side = "to" if reverse else "from"
        raise NotApplicable(f"GPU {min(missing)} cannot be reached {side} GPU(s) {sorted(set(roots))}",
                            where=topology.name)
    tree = LatencyTree(tuple(sorted(set(roots))), parent, distance, tuple(order))
    return _spread(topology, tree, reverse, loads, allowed) if spread and loads is not None else tree


def _spread(topology: Topology, tree: LatencyTree, reverse: bool, loads: list[float],
            allowed: set[int]) -> LatencyTree:
    """Re-choose every parent, in order of distance, as the least-loaded one within the tree's depth."""
    for v in tree.order:  # undo the loads the shortest-latency tree added
        p = tree.parent[v]
        for li in (topology.gpu_route(v, p) if reverse else topology.gpu_route(p, v)) or ():
            loads[li] -= 1.0
    depth = round(tree.depth_us / _TICK_US)
    incoming = _adjacency(topology, not reverse)  # per GPU v: (p, route p -> v) (v -> p when reverse)
    placed: dict[int, int] = dict.fromkeys(tree.roots, 0)
    parent: dict[int, int] = {}
    for v in tree.order:
        options = []
        for p, route, _, ticks in incoming[v]:
            if p in placed and p in allowed:
                d = placed[p] + ticks
                within = d <= depth
                options.append((not within, route_cost(topology, route, loads) if within else float(d), d, p, route))
        _, _, d, p, route = min(options)
        placed[v] = d
        parent[v] = p
        for li in route:
            loads[li] += 1.0
    position = {v: k for k, v in enumerate(tree.order)}
    order = tuple(sorted(tree.order, key=lambda v: (placed[v], position[v])))
    return LatencyTree(tree.roots, parent, {v: d * _TICK_US for v, d in placed.items()}, order)


# ---------------------------------------------------------------------- fusion
@dataclass
class _Link:
    route: Route
    latency: float
    us_per_byte: float


def fuse(topology: Topology, hops: Sequence[Hop], item_chunks: Sequence[tuple[int, ...]],
         chunk_bytes: float | None, *, merge: bool = True) -> list[Transfer]:
    """Transfers for ``hops`` in a valid program order, hops on one connection merged where that saves waiting.

    ``item_chunks[i]``: the chunks of item i; ``chunk_bytes``: bytes per chunk
    for the time estimates (None: latency only). Hops with different ops must
    use different channels (a message has one op). ``merge=False`` keeps every
    hop a message of its own (more messages; better pipelining when bandwidth
    rather than latency binds).
    """
    links: dict[tuple[int, int], _Link] = {}
    for h in hops:
        if (h.src, h.dst) not in links:
            route = topology.gpu_route(h.src, h.dst)
            if route is None:
                raise NotApplicable(f"no direct route from GPU {h.src} to GPU {h.dst}", where=topology.name)
            bytes_per_us = gbps_to_bytes_per_us(topology.route_bandwidth(route))
            links[(h.src, h.dst)] = _Link(route, topology.route_latency(route),
                                          1.0 / bytes_per_us if bytes_per_us > 0 else 0.0)
    ops: dict[tuple[int, int, int], Op] = {}
    for h in hops:
        assert ops.setdefault((h.src, h.dst, h.channel), h.op) is h.op, "one op per connection"
    size = [len(item_chunks[h.item]) * (chunk_bytes or 0.0) for h in hops]
    batches, channels = _merge(hops, links, size, merge)
    timed = _times(hops, batches, channels, links, size)
    if timed is None:  # merging created a cycle (not seen in practice): every hop its own message
        batches, channels = [[i] for i in range(len(hops))], [h.channel for h in hops]
        timed = _times(hops, batches, channels, links, size)
    assert timed is not None  # single hops follow the needs, which point backwards
    out = []
    for b in timed.order:
        members = batches[b]
        first = hops[members[0]]
        chunks = sorted({c for i in members for c in item_chunks[hops[i].item]})
        out.append(Transfer(first.src, first.dst, tuple(chunks), links[(first.src, first.dst)].route, first.op,
                            channels[b]))
    return out


@dataclass
class _Timed:
    batch_of: list[int]
    start: list[float]
    arrive: list[float]
    order: list[int]


def _times(hops: Sequence[Hop], batches: list[list[int]], channels: list[int], links: dict[tuple[int, int], _Link],
           size: list[float]) -> _Timed | None:
    """Estimated start and arrival of every message, and an order respecting needs and connections (None: cycle)."""
    batch_of = [0] * len(hops)
    for b, members in enumerate(batches):
        for i in members:
            batch_of[i] = b
    preds: list[set[int]] = [set() for _ in batches]
    by_connection: dict[tuple[int, int, int], list[int]] = {}
    for b, members in enumerate(batches):
        h = hops[members[0]]
        by_connection.setdefault((h.src, h.dst, channels[b]), []).append(b)
        for i in members:
            for x in hops[i].needs:
                if batch_of[x] != b:
                    preds[b].add(batch_of[x])
    conn_prev = [-1] * len(batches)
    for chain in by_connection.values():
        for a, b in itertools.pairwise(chain):
            conn_prev[b] = a
            preds[b].add(a)
    succs: list[list[int]] = [[] for _ in batches]
    pending = [len(p) for p in preds]
    for b, p in enumerate(preds):
        for a in p:
            succs[a].append(b)
    start = [0.0] * len(batches)
    arrive = [0.0] * len(batches)
    duration = []
    for members in batches:
        link = links[(hops[members[0]].src, hops[members[0]].dst)]
        duration.append(link.latency + sum(size[i] for i in members) * link.us_per_byte)
    # program order follows the estimated arrivals, so writers of one chunk commit in the order they arrive
    heap = [(duration[b], b) for b in range(len(batches)) if pending[b] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, b = heapq.heappop(heap)
        t = _ready_at(b, batches, hops, batch_of, arrive, conn_prev)
        start[b] = t
        arrive[b] = t + duration[b]
        order.append(b)
        for s in succs[b]:
            pending[s] -= 1
            if pending[s] == 0:
                heapq.heappush(heap, (_ready_at(s, batches, hops, batch_of, arrive, conn_prev) + duration[s], s))
    if len(order) != len(batches):
        return None
    return _Timed(batch_of, start, arrive, order)


def _ready_at(b: int, batches: list[list[int]], hops: Sequence[Hop], batch_of: list[int], arrive: list[float],
              conn_prev: list[int]) -> float:
    """When message ``b`` can leave: what it needs and its predecessor on the connection have arrived."""
    t = max((arrive[batch_of[x]] for i in batches[b] for x in hops[i].needs), default=0.0)
    return max(t, arrive[conn_prev[b]]) if conn_prev[b] >= 0 else t


def _merge(hops: Sequence[Hop], links: dict[tuple[int, int], _Link], size: list[float],
           merge: bool) -> tuple[list[list[int]], list[int]]:
    """Messages and their channels, built in one pass in order of readiness.

    A hop is ready when the messages carrying what it needs arrive. It joins an
    open message on its connection when it is ready before that message would
    arrive and the later departure delays none of the message's hops past its
    *latest start* (the makespan of the latency-and-bytes estimate minus what
    still follows the hop); otherwise it starts a new message, on a further
    channel when the open one has not arrived yet (a FIFO would make it wait).
    Without ``merge`` every hop is its own message.
    """
    n = len(hops)
    dependents: list[list[int]] = [[] for _ in hops]
    for i, h in enumerate(hops):
        for x in set(h.needs):
            dependents[x].append(i)
    duration = [links[(h.src, h.dst)].latency + size[i] * links[(h.src, h.dst)].us_per_byte
                for i, h in enumerate(hops)]
    earliest = [0.0] * n
    for i, h in enumerate(hops):  # needs point backwards
        earliest[i] = max((earliest[x] + duration[x] for x in h.needs), default=0.0)
    tail = [0.0] * n
    for i in reversed(range(n)):
        tail[i] = max((duration[j] + tail[j] for j in dependents[i]), default=0.0)
    makespan = max((earliest[i] + duration[i] + tail[i] for i in range(n)), default=0.0)
    latest = [makespan - duration[i] - tail[i] for i in range(n)]
    stride = 1 + max((h.channel for h in hops), default=0)

    pending = [len(set(h.needs)) for h in hops]
    batch_of = [-1] * n
    batches: list[list[int]] = []
    channel: list[int] = []
    start: list[float] = []
    arrive: list[float] = []
    slack: list[float] = []  # the latest start its members allow
    lanes: dict[tuple[int, int, int], list[int]] = {}  # (src, dst, base channel) -> last message per lane

    def ready(i: int) -> float:
        return max((arrive[batch_of[x]] for x in hops[i].needs), default=0.0)

    heap = [(0.0, i) for i in range(n) if pending[i] == 0]
    heapq.heapify(heap)
    eps = SAME_INSTANT_REL * max(1.0, makespan)
    while heap:
        key, i = heapq.heappop(heap)
        now = ready(i)
        if now > key:  # a message it needs grew since it was queued
            heapq.heappush(heap, (now, i))
            continue
        h = hops[i]
        last = lanes.setdefault((h.src, h.dst, h.channel), [])
        joined = next((b for b in last if merge and now < arrive[b] - eps and max(start[b], now) <= slack[b] + eps), -1)
        if joined >= 0:
            b = joined
            batches[b].append(i)
            start[b] = max(start[b], now)
            slack[b] = min(slack[b], latest[i])
        else:
            lane = next((k for k, b in enumerate(last) if arrive[b] <= now + eps), len(last))
            b = len(batches)
            batches.append([i])
            channel.append(h.channel + stride * lane)
            start.append(max(now, arrive[last[lane]]) if lane < len(last) else now)
            arrive.append(0.0)
            slack.append(latest[i])
            if lane < len(last):
                last[lane] = b
            else:
                last.append(b)
        batch_of[i] = b
        link = links[(h.src, h.dst)]
        arrive[b] = start[b] + link.latency + sum(size[j] for j in batches[b]) * link.us_per_byte
        for j in dependents[i]:
            pending[j] -= 1
            if pending[j] == 0:
                heapq.heappush(heap, (ready(j), j))
    return batches, channel
