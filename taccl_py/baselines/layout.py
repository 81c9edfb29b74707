"""Where NCCL-style rings run: machine groups, Hamiltonian paths, one ring per channel.

A ring is a cyclic order of all GPUs. Inside a machine it follows a Hamiltonian
path over direct GPU -> GPU routes (through the NVSwitch where there is one);
between machines it leaves at one GPU and enters the next machine at another,
through the NICs. Rings are chosen one channel at a time, each preferring the
links (NICs first of all) that earlier channels loaded least, and the channel
count is the one that spreads the load best: the most loaded link, in uses per
GB/s per channel, is lowest. When no Hamiltonian path exists (a 3x3 mesh), a
ring step relays through other GPUs as several legs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import networkx as nx

from taccl_py.baselines.common import (
    Leg,
    NotApplicable,
    channel_us_per_byte,
    choose_channel_count,
    legs_between,
    route_cost,
)
from taccl_py.topology import Topology

__all__ = ["Ring", "RingPlan", "SearchSpace", "gpu_reachability", "groups_of", "hamiltonian_path", "ring_plan"]

MAX_CHANNELS = 16
"""Most rings a plan considers (NCCL allows 32 channels; 16 already saturate every shipped machine)."""
_SEARCH_BUDGET = 20_000
"""Expansions a Hamiltonian search may spend beyond the group size before settling for what it found."""


@dataclass(frozen=True)
class Ring:
    """A cyclic order of every GPU and the legs joining each GPU to the next."""

    order: tuple[int, ...]
    legs: tuple[tuple[Leg, ...], ...]
    """``legs[i]`` carries data from ``order[i]`` to ``order[(i + 1) % n]`` (several when relayed)."""

    @property
    def relays(self) -> bool:
        return any(len(step) > 1 for step in self.legs)

    def rotated(self, first: int) -> Ring:
        """The same ring starting at GPU ``first``."""
        at = self.order.index(first)
        return Ring(self.order[at:] + self.order[:at], self.legs[at:] + self.legs[:at])


@dataclass(frozen=True)
class RingPlan:
    """The rings of every channel and how evenly they load the links."""

    rings: tuple[Ring, ...]
    groups: tuple[tuple[int, ...], ...]
    us_per_byte: float
    """Max over links of (ring legs crossing it) / (channels x bytes per us): a ring step of b bytes
    per rank (summed over channels) keeps the busiest link busy ``b * us_per_byte`` us."""
    step_latency_us: float
    """Largest latency of one ring step (the sum over its legs when it relays)."""

    @property
    def channels(self) -> int:
        return len(self.rings)

    @property
    def relays(self) -> bool:
        return any(ring.relays for ring in self.rings)


def groups_of(topology: Topology) -> tuple[tuple[int, ...], ...]:
    """Machines as GPU groups; a topology without machines is one group."""
    if len(topology.machines) > 1:
        return tuple(tuple(m) for m in topology.machines)
    return (tuple(topology.gpus),)


class SearchSpace:
    """Direct GPU -> GPU routes and how loaded they are, for path searches."""

    def __init__(self, topology: Topology, loads: Sequence[float], *, like: SearchSpace | None = None) -> None:
        """``like``: a search space of the same topology whose reachability (load-independent) is shared."""
        self.topology = topology
        self.loads = loads
        self._cost: dict[tuple[int, int], float | None] = {}
        self._reach: dict[int, list[int]] = {} if like is None else like._reach
        self._reaching: dict[int, list[int]] = {} if like is None else like._reaching

    def cost(self, src: int, dst: int) -> float | None:
        """Load of the direct route ``src -> dst`` with one more use; None without a direct route."""
        key = (src, dst)
        if key not in self._cost:
            route = self.topology.gpu_route(src, dst)
            self._cost[key] = None if route is None else route_cost(self.topology, route, self.loads)
        return self._cost[key]

    def reachable(self, src: int) -> list[int]:
        """GPUs with a direct route from ``src`` (through switches only), in id order."""
        if src not in self._reach:
            self._reach[src] = list(gpu_reachability(self.topology)[0][src])
        return self._reach[src]

    def reaching(self, dst: int) -> list[int]:
        """GPUs with a direct route to ``dst``, in id order."""
        if dst not in self._reaching:
            self._reaching[dst] = list(gpu_reachability(self.topology)[1][dst])
        return self._reaching[dst]


@lru_cache(maxsize=16)
def gpu_reachability(topology: Topology) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """Per GPU, the GPUs it has a direct route to (through switches only), and those with one to it; in id order.

    Computed once per topology over the strongly connected components of the switches (every switch
    of a component reaches the same GPUs), not by a search from every GPU: on a 1,024-GPU fabric
    the searches took seconds, and every ring or tree channel's search space repeated them.
    """
    n = topology.num_gpus
    vid = topology.vertex_id
    links = topology.links
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n, len(topology.vertices)))
    direct: dict[int, set[int]] = {}  # a switch's GPU out-neighbours
    for link in links:
        u, w = vid[link.src], vid[link.dst]
        if u >= n and w >= n:
            graph.add_edge(u, w)
        elif u >= n:
            direct.setdefault(u, set()).add(w)
    dag = nx.condensation(graph)
    reached: dict[int, frozenset[int]] = {}
    for c in reversed(list(nx.topological_sort(dag))):
        found: set[int] = set()
        for u in dag.nodes[c]["members"]:
            found |= direct.get(u, set())
        for d in dag.successors(c):
            found |= reached[d]
        reached[c] = frozenset(found)
    component = dag.graph["mapping"]
    out: list[tuple[int, ...]] = []
    for g in range(n):
        found = set()
        for li in topology.out_links[g]:
            w = vid[links[li].dst]
            found |= {w} if w < n else reached[component[w]]
        found.discard(g)
        out.append(tuple(sorted(found)))
    into: list[list[int]] = [[] for _ in range(n)]
    for g in range(n):
        for h in out[g]:
            into[h].append(g)
    return tuple(out), tuple(tuple(x) for x in into)


def hamiltonian_path(members: Sequence[int], start: int, space: SearchSpace, *, end: int | None = None,
                     cycle: bool = False, reverse: bool = False, budget: int = _SEARCH_BUDGET) -> list[int] | None:
    """A path from ``start`` through every member on direct routes, or None.

    ``end`` fixes the last member, ``cycle`` requires a direct route back to
    ``start``; ``reverse`` searches on reversed routes (the path is returned
    as walked backwards from ``start``). Depth-first branch and bound on the
    bottleneck route cost; neighbours are tried cheapest first, then fewest
    onward options first (Warnsdorff), so structured graphs are solved at once,
    and the search ends at a path no other can beat (one at the lower bound).
    """
    n = len(members)
    if n == 1:
        return [start] if end in (None, start) else None

    def cost(a: int, b: int) -> float | None:
        return space.cost(b, a) if reverse else space.cost(a, b)

    member_set = set(members)
    adjacency: dict[int, list[tuple[float, int]]] = {}
    for g in members:
        candidates = space.reaching(g) if reverse else space.reachable(g)
        nbrs = [(c, h) for h in candidates if h in member_set and (c := cost(g, h)) is not None]
        nbrs.sort()
        adjacency[g] = nbrs
    dense = max(len(v) for v in adjacency.values()) > 16
    # Warnsdorff's count, kept as the path grows and shrinks: free[g] is how many of g's neighbours are off it
    # (a dense search tries the cheapest first only, and keeps no count)
    free = {g: len(nbrs) for g, nbrs in adjacency.items()}
    feeds: dict[int, list[int]] = {g: [] for g in members}
    cheapest_in = dict.fromkeys(members, math.inf)
    for g, nbrs in adjacency.items():
        for c, h in nbrs:
            if not dense:
                feeds[h].append(g)
            cheapest_in[h] = min(cheapest_in[h], c)
    # No path's bottleneck is below its cheapest way out of start and into each other member: a path at that
    # bound cannot be beaten, so the search stops there.
    floor = max(adjacency[start][0][0] if adjacency[start] else math.inf,
                *(c for g, c in cheapest_in.items() if g != start))
    visited: set[int] = set()

    def visit(g: int) -> None:
        visited.add(g)
        for f in feeds[g]:
            free[f] -= 1

    def leave(g: int) -> None:
        visited.discard(g)
        for f in feeds[g]:
            free[f] += 1

    def options(g: int) -> list[tuple[float, int]]:
        nbrs = [(c, h) for c, h in adjacency[g] if h not in visited]
        if not dense:
            nbrs.sort(key=lambda ch: (ch[0], free[ch[1]], ch[1]))
        return nbrs

    visit(start)
    path = [start]
    bottleneck = [0.0]
    best: list[int] | None = None
    best_cost = float("inf")
    spent = 0
    limit = budget + 4 * n
    stack = [iter(options(start))]
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            leave(path.pop())
            bottleneck.pop()
            continue
        spent += 1
        if spent > limit and best is not None:
            break
        if spent > 4 * limit:
            break
        c, nxt = step
        if end is not None and nxt == end and len(path) + 1 < n:
            continue
        bn = max(bottleneck[-1], c)
        if bn >= best_cost:
            continue
        if len(path) + 1 == n:
            if cycle:
                back = cost(nxt, start)
                if back is None:
                    continue
                bn = max(bn, back)
                if bn >= best_cost:
                    continue
            best, best_cost = [*path, nxt], bn
            if best_cost <= floor:
                break
            continue
        path.append(nxt)
        visit(nxt)
        bottleneck.append(bn)
        stack.append(iter(options(nxt)))
    return best


def _fallback_order(topology: Topology, members: Sequence[int], start: int, space: SearchSpace,
                    end: int | None = None) -> list[int]:
    """Visit every member greedily (cheapest direct neighbour, else the nearest by relay latency)."""
    order = [start]
    left = [g for g in members if g != start and g != end]
    while left:
        here = order[-1]
        direct = [(c, g) for g in left if (c := space.cost(here, g)) is not None]
        if direct:
            nxt = min(direct)[1]
        else:
            nxt = min(left, key=lambda g: (sum(topology.route_latency(leg.route)
                                               for leg in legs_between(topology, here, g)), g))
        order.append(nxt)
        left.remove(nxt)
    if end is not None and end != start:
        order.append(end)
    return order


def _single_group_ring(topology: Topology, members: Sequence[int], space: SearchSpace) -> list[int]:
    start = members[0]
    cycle = hamiltonian_path(members, start, space, cycle=True)
    if cycle is not None:
        return cycle
    path = hamiltonian_path(members, start, space)
    return path if path is not None else _fallback_order(topology, members, start, space)


def _multi_group_ring(topology: Topology, groups: Sequence[Sequence[int]], space: SearchSpace) -> list[int]:
    """Ring over machines in order: pick each machine's exit and the next one's entry, least loaded first."""
    count = len(groups)
    entries: list[int | None] = [None] * count
    exits: list[int | None] = [None] * count
    paths: dict[tuple[int, int, int], list[int] | None] = {}
    tries = [0]
    budget = 64 * count + 1024

    def inner(m: int, entry: int, exit_: int) -> list[int] | None:
        key = (m, entry, exit_)
        if key not in paths:
            members = groups[m]
            if len(members) == 1:
                paths[key] = [entry] if entry == exit_ else None
            elif entry == exit_:
                paths[key] = None
            else:
                paths[key] = hamiltonian_path(members, entry, space, end=exit_, budget=2_000)
        return paths[key]

    def candidates(b: int) -> list[tuple[int, int]]:
        here, there = groups[b], groups[(b + 1) % count]
        entry_here = entries[b]
        exit_there = exits[0] if b + 1 == count else None
        scored = []
        for x in here:
            if entry_here is not None and (x == entry_here) != (len(here) == 1):
                continue
            for e in there:
                if exit_there is not None and (e == exit_there) != (len(there) == 1):
                    continue
                route = topology.gpu_route(x, e)
                if route is not None:
                    scored.append((route_cost(topology, route, space.loads), x, e))
        scored.sort()
        return [(x, e) for _, x, e in scored]

    def search(b: int) -> bool:
        for x, e in candidates(b):
            tries[0] += 1
            if tries[0] > budget:
                return False
            entry = entries[b]
            if entry is not None and inner(b, entry, x) is None:
                continue
            exits[b] = x
            if b + 1 < count:
                entries[b + 1] = e
                if search(b + 1):
                    return True
                entries[b + 1] = None
            elif inner(0, e, exits[0] or x) is not None:
                entries[0] = e
                return True
        exits[b] = None
        return False

    found = search(0)
    order: list[int] = []
    for m, members in enumerate(groups):
        if found:
            entry, exit_ = entries[m], exits[m]
            assert entry is not None and exit_ is not None
            path = inner(m, entry, exit_)
        else:
            path = None
        if path is None:
            first = members[0] if not found or entries[m] is None else entries[m]
            assert first is not None
            last = exits[m] if found else None
            path = _fallback_order(topology, members, first, space, end=last)
        order.extend(path)
    return order


def _ring_from_order(topology: Topology, order: Sequence[int]) -> Ring:
    n = len(order)
    legs = tuple(legs_between(topology, order[i], order[(i + 1) % n]) for i in range(n))
    return Ring(tuple(order), legs)


def build_ring(topology: Topology, groups: Sequence[Sequence[int]], loads: Sequence[float], *,
               like: SearchSpace | None = None) -> Ring:
    """One more ring, avoiding the links ``loads`` marks as used (``like``: share its reachability)."""
    space = SearchSpace(topology, loads, like=like)
    if len(groups) == 1:
        order = _single_group_ring(topology, groups[0], space)
    else:
        order = _multi_group_ring(topology, groups, space)
    return _ring_from_order(topology, order)


def _add_loads(loads: list[float], ring: Ring) -> None:
    for step in ring.legs:
        for leg in step:
            for li in leg.route:
                loads[li] += 1.0


@lru_cache(maxsize=16)
def ring_plan(topology: Topology, channels: int | None = None) -> RingPlan:
    """NCCL-style rings for ``topology``: ``channels`` of them, or as many as spread the load best.

    Raises :class:`NotApplicable` for a single GPU.
    """
    if topology.num_gpus < 2:
        raise NotApplicable("a ring needs at least 2 GPUs", where=topology.name)
    if channels is not None and not 1 <= channels <= 64:
        raise NotApplicable(f"channels must be in 1..64 (got {channels})", where=topology.name)
    groups = groups_of(topology)
    loads = [0.0] * len(topology.links)
    rings: list[Ring] = []
    reach = SearchSpace(topology, loads)  # which GPU reaches which: computed once for every ring's search

    def add_ring(_: int) -> None:
        ring = build_ring(topology, groups, loads, like=reach)
        rings.append(ring)
        _add_loads(loads, ring)

    count = choose_channel_count(topology, loads, add_ring, channels=channels, limit=MAX_CHANNELS)
    rings = rings[:count]
    final = [0.0] * len(topology.links)
    for ring in rings:
        _add_loads(final, ring)
    latency = max(sum(topology.route_latency(leg.route) for leg in step) for ring in rings for step in ring.legs)
    return RingPlan(tuple(rings), tuple(tuple(g) for g in groups), channel_us_per_byte(topology, final, count), latency)
