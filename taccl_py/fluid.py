"""Max-min fair sharing of resource capacity among concurrent flows (the fluid model).

The network is a list of *resources*, each with a capacity in bytes per
microsecond: a topology's links first (resource i is link i), then whatever else
a flow may use (a GPU's memory bandwidth, for example). Every active flow uses a
set of resources, given as a tuple of indices (each at most once; a route's
links, a multicast tree's links, or links plus the endpoints' memory: nothing
requires a connected path). Each resource's capacity is shared so that no flow
can get more without taking from a flow that has less (progressive filling).

A flow may also carry *weights*, one per resource (> 0): a flow moving at rate
x consumes ``w x`` of a resource it uses with weight w, as SimGrid's consumption
weights (a link listed w times in a route). Endpoint memory uses this: a
reduction that reads 2b and writes b for every b bytes it receives uses its
receiver's memory with weight 3. Without weights every weight is 1.
Only the part of the flow/resource graph that an event touched is re-solved, as
SimGrid's selective update does.

Flows on the same resources always get the same max-min rate, so active flows
are kept in flow groups (:class:`FlowGroup`: a resource tuple and its flows) and
both the search for the touched component and the filling work on groups
weighted by their size. When an event leaves every group's size as it was at the
last solve, nothing is re-solved. Members of a group drain in lockstep: the
group counts ``drained``, the bytes each member has sent since the group formed,
and a member finishes when that count reaches its ``target`` (the count when it
joined plus its size), so a rate change updates a group, not each of its flows.

A re-solve also leaves alone every group whose rate is below the level at
which the first changed resource could saturate (see :meth:`FluidNetwork._solve`),
and never looks at a resource that cannot limit any rate: a NIC's cable behind the
NIC's own port, a spine whose capacity is the sum of the leaves under it
(:func:`binding_resources`; their load, busy time and bytes are still kept).

:meth:`FluidNetwork.reshare_groups` returns the groups whose next finish may
have moved (:meth:`FluidNetwork.reshare`: with that finish); the event loop (:mod:`taccl_py.event_kernel`) keeps one finish
event per group, whose state lives on the group (``finish``, ``event``, ``due``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Sequence
from enum import IntEnum

__all__ = ["Finish", "FlowGroup", "FluidNetwork", "binding_resources"]

_SAME_RATE = 1e-12
"""Relative change below which a re-solved rate counts as unchanged (so the flow's finish event stands)."""

_FROZEN_MARGIN = 1e-9
"""Rates within this relative margin below the freezing level are re-solved, not frozen (see ``_solve``)."""

_NO_DEMAND = 1e-9
"""A resource whose weighted count of unfixed flows is below this has none (weighted counts are sums of floats)."""

_Entry = tuple[float, int, int]
"""A member of a group: (target drained bytes, join sequence number, flow)."""


class Finish(IntEnum):
    """The state of a flow group's finish event in the event loop (``FlowGroup.finish``)."""

    NONE = 0
    """No event: the group has no flows."""
    QUEUED = 1
    """``FlowGroup.event`` is queued at ``FlowGroup.due``, when the group's first member finishes."""
    LATE = 2
    """The queued event is earlier than the first member's finish (a rate dropped since); it moves when it comes up."""


_NO_EVENT = Finish.NONE
_heappop = heapq.heappop


class FlowGroup:
    """The active flows on one resource tuple; max-min fairness gives them one rate (bytes per microsecond).

    ``drained`` is exact as of ``updated_at``; between updates it grows at ``rate``.
    ``finish``, ``event`` and ``due`` belong to the event loop: the state of the
    group's finish event, its sequence number (0: none) and its time.
    """

    __slots__ = ("_fixed", "_linked", "_order", "_seen", "_solved_size", "bound", "drained", "due", "event", "finish",
                 "members", "rate", "resources", "size", "updated_at", "weight_on", "weights")

    def __init__(self, resources: tuple[int, ...], now: float, weights: tuple[float, ...] | None = None,
                 bound: tuple[int, ...] | None = None) -> None:
        self.resources = resources
        self.bound = resources if bound is None else bound
        """The resources that may limit the group's rate (:func:`binding_resources`), in ``resources``' order."""
        self.weights = weights
        """Per resource (aligned with ``resources``), what one byte of a member uses of it; None: all 1."""
        self.weight_on: dict[int, float] | None = None if weights is None else dict(zip(resources, weights,
                                                                                           strict=True))
        self.members: dict[int, _Entry] = {}
        self._order: list[_Entry] = []  # heap of members by target; entries of departed flows are skipped
        self.size = 0
        self._solved_size = 0  # size when the rate was last solved
        self._seen = self._fixed = 0  # number of the last solve that reached it, that fixed its rate
        self._linked = False  # listed in the network's groups_on (while it has flows, and until the next reshare)
        self.rate = 0.0
        self.drained = 0.0
        self.updated_at = now
        self.due = math.inf
        self.event = 0
        self.finish = _NO_EVENT

    def next_finish(self) -> tuple[float, int]:
        """When the member with the least left finishes at the current rate (inf if 0), and which flow it is."""
        order, members = self._order, self.members
        entry = order[0]
        while members.get(entry[2]) is not entry:
            _heappop(order)
            entry = order[0]
        rate = self.rate
        if rate > 0:
            return self.updated_at + (entry[0] - self.drained) / rate, entry[2]
        return math.inf, entry[2]

    def remaining(self, flow: int, now: float | None = None) -> float:
        """Bytes ``flow`` has left at ``now`` (default: as of ``updated_at``)."""
        left = self.members[flow][0] - self.drained
        return left if now is None else left - self.rate * (now - self.updated_at)


class FluidNetwork:
    """Active flows on resources of given capacities (bytes per microsecond).

    Per resource (indexed as ``capacities``): ``load`` (active flows using it),
    ``busy_us`` (time it carried at least one flow), ``bytes_carried`` and
    ``level`` (its fair share when it last saturated). ``binding`` (optional, per
    resource): False for a resource that can limit no rate, which the re-solves then
    skip; it must come from :func:`binding_resources` over every route the network
    will carry, all of them without weights.
    """

    def __init__(self, capacities: Sequence[float], binding: Sequence[bool] | None = None) -> None:
        count = len(capacities)
        self.capacity = list(capacities)
        if binding is not None and len(binding) != count:
            raise ValueError(f"binding names {len(binding)} resources, the network has {count}")
        self.binding: list[bool] | None = None if binding is None or all(binding) else list(binding)
        self.groups_on: list[dict[FlowGroup, None]] = [{} for _ in range(count)]  # ordered sets
        self.load: list[int] = [0] * count
        """Active flows using each resource."""
        self.group_of: dict[int, FlowGroup] = {}
        self.busy_since: list[float] = [0.0] * count
        self.busy_us: list[float] = [0.0] * count
        self.bytes_carried: list[float] = [0.0] * count
        self._groups: dict[object, FlowGroup] = {}  # by resources, or (resources, weights) for a weighted group
        self._extra: list[float] = [0.0] * count  # per resource: sum over active weighted flows of (weight - 1)
        self._touched: dict[FlowGroup, None] = {}  # groups flows joined or left since the last reshare
        self._cap: list[float] = [0.0] * count
        self._count: list[float] = [0.0] * count
        self._reached: list[int] = [0] * count  # number of the last solve that reached each resource
        self.level: list[float] = [math.inf] * count
        """The fair share at which each resource saturated in the last solve that reached it (inf: it did not)."""
        self._solves = 0
        self._joined = itertools.count()

    def add(self, flow: int, resources: tuple[int, ...], num_bytes: float, now: float,
            weights: tuple[float, ...] | None = None) -> None:
        """``flow`` starts moving ``num_bytes`` over ``resources`` (non-empty, each index once) at ``now``.

        ``weights`` (optional, one per resource, each > 0): the flow uses ``w``
        bytes of a resource per byte it moves (``bytes_carried`` counts them).
        """
        if weights is not None and self.binding is not None:
            raise ValueError("a network told which resources bind carries flows without weights only")
        key: object = resources if weights is None else (resources, weights)
        group = self._groups.get(key)
        if group is None:
            binding = self.binding
            bound = None if binding is None else tuple(r for r in resources if binding[r])
            group = self._groups[key] = FlowGroup(resources, now, weights, bound)
        if not group._linked:
            group._linked = True
            for r in group.bound:
                self.groups_on[r][group] = None
        entry = (group.drained + group.rate * (now - group.updated_at) + num_bytes, next(self._joined), flow)
        group.members[flow] = entry
        heapq.heappush(group._order, entry)
        group.size += 1
        self.group_of[flow] = group
        self._touched[group] = None
        load, carried = self.load, self.bytes_carried
        if weights is None:
            for r in resources:
                if not load[r]:
                    self.busy_since[r] = now
                load[r] += 1
                carried[r] += num_bytes
        else:
            extra = self._extra
            for r, w in zip(resources, weights, strict=True):
                if not load[r]:
                    self.busy_since[r] = now
                load[r] += 1
                extra[r] += w - 1
                carried[r] += num_bytes * w

    def remove(self, flow: int, now: float) -> None:
        """``flow`` leaves the network at ``now`` (it finished)."""
        group = self.group_of.pop(flow)
        del group.members[flow]
        group.size -= 1
        self._touched[group] = None
        load = self.load
        weights = group.weights
        if weights is not None:
            extra = self._extra
            for r, w in zip(group.resources, weights, strict=True):
                extra[r] -= w - 1
        for r in group.resources:
            load[r] -= 1
            if not load[r]:
                self.busy_us[r] += now - self.busy_since[r]
                if weights is not None:
                    self._extra[r] = 0.0  # no rounding residue outlives the flows

    def reshare_groups(self, now: float) -> list[FlowGroup]:
        """Re-solve max-min rates where group sizes changed; return the groups whose next finish may have moved.

        Those are the groups whose rate changed and the groups flows joined or left.
        """
        touched = self._touched
        if not touched:
            return []
        self._touched = {}
        seeds: list[int] = []  # resources whose groups changed size (and still carry flows)
        moved: list[FlowGroup] = []
        groups_on, load, level = self.groups_on, self.load, self.level
        for group in touched:
            if group.size:
                moved.append(group)
                if group.size != group._solved_size:
                    for r in group.bound:
                        if len(groups_on[r]) > 1:
                            seeds.extend(group.bound)
                            break
                    else:
                        self._solve_alone(group, now)
            elif group._linked:  # empty: unlist it, and keep it for the next flow on these resources
                group._linked = False
                for r in group.bound:
                    del groups_on[r][group]
                    if not load[r]:
                        level[r] = math.inf
                    elif group._solved_size:
                        seeds.append(r)
                group._order.clear()
                group._solved_size = 0
                group.rate = group.drained = 0.0
                group.updated_at = now
        if seeds:
            self._solve(seeds, now, touched, moved)
        return moved

    def reshare(self, now: float) -> list[tuple[FlowGroup, float, int]]:
        """:meth:`reshare_groups`, each group with its next finish: ``(group, time, flow)`` as ``next_finish`` gives.

        What the event loop needs after every batch; the finish is computed here
        rather than by a call per group because this is the simulator's hot path.
        """
        if not self._touched:  # a batch where only latencies ended: nothing to re-solve
            return []
        out = []
        for group in self.reshare_groups(now):
            order, members = group._order, group.members
            entry = order[0]
            while members.get(entry[2]) is not entry:  # skip departed members (as next_finish does)
                _heappop(order)
                entry = order[0]
            rate = group.rate
            out.append((group, group.updated_at + (entry[0] - group.drained) / rate if rate > 0 else math.inf,
                        entry[2]))
        return out

    def _solve_alone(self, group: FlowGroup, now: float) -> None:
        """The rate of a group that shares none of its resources: its smallest capacity split among its flows."""
        capacity, level = self.capacity, self.level
        m = group._solved_size = group.size
        weights = group.weights
        if weights is None:
            least = min(capacity[r] for r in group.bound)
            new = least / m
            for r in group.bound:
                level[r] = new if capacity[r] == least else math.inf
        else:
            least = min(capacity[r] / w for r, w in zip(group.resources, weights, strict=True))
            new = least / m
            for r, w in zip(group.resources, weights, strict=True):
                level[r] = new if capacity[r] / w == least else math.inf
        old = group.rate
        if abs(new - old) > _SAME_RATE * old:
            group.drained += old * (now - group.updated_at)
            group.updated_at = now
            group.rate = new

    def _solve(self, seeds: list[int], now: float, touched: dict[FlowGroup, None], moved: list[FlowGroup]) -> None:
        """Max-min rates after the groups on resources ``seeds`` changed size; append to ``moved`` those that changed.

        Progressive filling raises every rate together and fixes the flows of a
        resource when it saturates, at increasing levels. Before the first level
        at which a seed resource saturates (in the old or the new configuration)
        both runs are the same, so every unchanged group whose rate is below a
        lower bound ``floor`` of that level keeps its rate: it is frozen, and
        only the other groups connected to the seeds through them are filled,
        in what frozen groups leave of each resource. The bound is the least of
        the seed resources' old saturation levels (``level``) and new equal shares.
        """
        solve = self._solves = self._solves + 1
        groups_on, load, capacity, level, extra = self.groups_on, self.load, self.capacity, self.level, self._extra
        cap, count, reached = self._cap, self._count, self._reached  # scratch, indexed by resource
        floor = math.inf
        stack = []
        for r in seeds:
            if reached[r] != solve:
                reached[r] = solve
                stack.append(r)
                if level[r] < floor:
                    floor = level[r]
                demand = load[r] + extra[r]  # the weighted number of flows on r
                if capacity[r] < floor * demand:
                    floor = capacity[r] / demand
        floor *= 1 - _FROZEN_MARGIN  # rates this close to the bound are re-solved, not frozen
        heap: list[tuple[float, int]] = []
        while stack:  # the resources reached through groups not frozen, and what is left on them
            r = stack.pop()
            left = capacity[r]
            n: float = 0
            for group in groups_on[r]:
                m = group.size
                weight_on = group.weight_on
                if weight_on is None:
                    if group.rate < floor and m == group._solved_size:
                        left -= group.rate * m
                        continue
                    n += m
                else:
                    if group.rate < floor and m == group._solved_size:
                        left -= group.rate * m * weight_on[r]
                        continue
                    n += m * weight_on[r]
                if group._seen != solve:
                    group._seen = solve
                    for r2 in group.bound:
                        if reached[r2] != solve:
                            reached[r2] = solve
                            stack.append(r2)
            level[r] = math.inf
            if n:
                cap[r] = left
                count[r] = n
                heap.append(((left if left > 0 else 0.0) / n, r))
        heapq.heapify(heap)
        heappop, heappush = heapq.heappop, heapq.heappush
        same = _SAME_RATE
        while heap:
            share, r = heappop(heap)
            n = count[r]
            if n < _NO_DEMAND:
                continue
            left = cap[r]
            current = left / n if left > 0 else 0.0
            if current > share * (1 + 1e-12) + 1e-300:
                heappush(heap, (current, r))  # its share grew since it was queued
                continue
            level[r] = current
            for group in groups_on[r]:
                if group._seen != solve or group._fixed == solve:
                    continue  # frozen, or fixed at an earlier resource
                group._fixed = solve
                m = group._solved_size = group.size
                used = current * m
                weights = group.weights
                if weights is None:
                    for r2 in group.bound:
                        cap[r2] -= used
                        count[r2] -= m
                else:
                    for r2, w in zip(group.resources, weights, strict=True):
                        cap[r2] -= used * w
                        count[r2] -= m * w
                old = group.rate
                if current - old > same * old or old - current > same * old:
                    group.drained += old * (now - group.updated_at)
                    group.updated_at = now
                    group.rate = current
                    if group not in touched:
                        moved.append(group)

    def finish_busy(self, now: float) -> None:
        """Close the busy intervals of resources still in use (used when a run stops early)."""
        for r, flows in enumerate(self.load):
            if flows:
                self.busy_us[r] += now - self.busy_since[r]
                self.busy_since[r] = now


def binding_resources(capacities: Sequence[float], routes: Iterable[tuple[int, ...]]) -> list[bool]:
    """Per resource, whether it may limit a rate when flows use only ``routes`` (each without weights).

    A resource r cannot, and is marked False, when its flows' total is bounded by capacities
    the solve keeps, so the max-min rates over the other resources already respect r:

    * every route through r also crosses one resource m of no more capacity (a NIC's cable
      and its PCIe port: the same flows); m must rank before r by capacity, then by the
      routes it carries (more first), then index, so of two alike one stays, and a chain of
      such marks ends at a resource this rule keeps, whose flows include r's;
    * the set of the first (or the last) other kept resources of the routes through r has
      capacities summing (exactly, :func:`math.fsum`) to at most r's (a spine link as wide
      as the NICs under its leaf). These are decided after the first kind, one at a time in
      index order, each on resources kept at that moment.

    Every allocation within the kept resources' capacities then respects the marked ones: the
    second kind in the reverse of the order they were marked (each rests on resources kept
    then: unmarked, or marked later and so already shown), then the first kind through their
    chains. The max-min allocation over the kept resources is thus feasible for all of them,
    and being unique it is theirs: the marks change no rate (up to the rounding of sums taken
    in another order), only work. Every route keeps a resource: the first rule keeps its
    least-ranked one, the second never takes a route's last.
    """
    count = len(capacities)
    distinct = list(dict.fromkeys(routes))
    through: list[list[int]] = [[] for _ in range(count)]
    for k, route in enumerate(distinct):
        for r in route:
            through[r].append(k)
    sets = [frozenset(route) for route in distinct]

    def rank(r: int) -> tuple[float, int, int]:
        return capacities[r], -len(through[r]), r

    keep = [True] * count
    for r in range(count):
        mine = through[r]
        if not mine:
            continue
        own = rank(r)
        candidates = {m for m in sets[mine[0]] if m != r and rank(m) < own}
        for k in mine[1:]:
            if not candidates:
                break
            candidates &= sets[k]
        if candidates:
            keep[r] = False
    for r in range(count):
        if keep[r] and len(through[r]) > 1:
            keep[r] = not (_covered(r, capacities, distinct, through[r], keep, reverse=False)
                           or _covered(r, capacities, distinct, through[r], keep, reverse=True))
    return keep


def _covered(r: int, capacities: Sequence[float], routes: list[tuple[int, ...]], mine: list[int], keep: list[bool],
             *, reverse: bool) -> bool:
    """Whether the first (``reverse``: last) kept resources other than ``r`` of the routes through ``r``, each counted
    once, sum to at most its capacity."""
    limit = capacities[r]
    cover: dict[int, None] = {}
    total = 0.0
    for k in mine:
        route = routes[k]
        for m in (reversed(route) if reverse else route):
            if m != r and keep[m]:
                if m not in cover:
                    cover[m] = None
                    total += capacities[m]
                    if total > limit:
                        return False
                break
        else:
            return False
    return math.fsum(capacities[m] for m in cover) <= limit
