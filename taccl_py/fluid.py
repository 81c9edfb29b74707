"""Max-min fair sharing of link bandwidth among concurrent flows (the fluid model).

Every active flow crosses a set of links; each link's capacity is shared so that
no flow can get more without taking from a flow that has less (progressive
filling). Only the part of the flow/link graph that an event touched is
re-solved, as SimGrid's selective update does.

Flows on the same route always get the same max-min rate, so active flows are
kept in route groups (:class:`RouteGroup`: a route and its flows) and both the
search for the touched component and the filling work on groups weighted by
their size. When an event leaves every group's size as it was at the last
solve, nothing is re-solved. Members of a group drain in lockstep: the group
counts ``drained``, the bytes each member has sent since the group formed, and a
member finishes when that count reaches its ``target`` (the count when it joined
plus its size), so a rate change updates a group, not each of its flows.

A re-solve also leaves alone every group whose rate is below the level at
which the first changed link could saturate (see :meth:`FluidNetwork._solve`).

Callers either take the groups whose next finish may have moved
(:meth:`FluidNetwork.reshare_groups`, one event per group) or the flows
(:meth:`FluidNetwork.reshare`, with per-flow ``rate`` and ``remaining``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence

__all__ = ["FluidNetwork", "RouteGroup"]

_SAME_RATE = 1e-12
"""Relative change below which a re-solved rate counts as unchanged (so the flow's finish event stands)."""

_Entry = tuple[float, int, int]
"""A member of a group: (target drained bytes, join sequence number, flow)."""


class RouteGroup:
    """The active flows on one route; max-min fairness gives them one rate (bytes per microsecond).

    ``drained`` is exact as of ``updated_at``; between updates it grows at ``rate``.
    ``due`` and ``ticket`` are the caller's, for the event it queued for the group (0: none).
    """

    __slots__ = ("_fixed", "_linked", "_order", "_seen", "_solved_size", "drained", "due", "members", "rate", "route",
                 "size", "ticket", "updated_at")

    def __init__(self, route: tuple[int, ...], now: float) -> None:
        self.route = route
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
        self.ticket = 0

    def next_finish(self) -> tuple[float, int]:
        """When the member with the least left finishes at the current rate (inf if 0), and which flow it is."""
        order, members = self._order, self.members
        entry = order[0]
        while members.get(entry[2]) is not entry:
            heapq.heappop(order)
            entry = order[0]
        rate = self.rate
        if rate > 0:
            return self.updated_at + (entry[0] - self.drained) / rate, entry[2]
        return math.inf, entry[2]

    def remaining(self, flow: int, now: float | None = None) -> float:
        """Bytes ``flow`` has left at ``now`` (default: as of ``updated_at``)."""
        left = self.members[flow][0] - self.drained
        return left if now is None else left - self.rate * (now - self.updated_at)


class _FlowView(Mapping[int, float]):
    """A read-only per-flow view of the active flows' groups."""

    def __init__(self, group_of: dict[int, RouteGroup]) -> None:
        self._group_of = group_of

    def __getitem__(self, flow: int) -> float:
        raise NotImplementedError

    def __iter__(self) -> Iterator[int]:
        return iter(self._group_of)

    def __len__(self) -> int:
        return len(self._group_of)


class _Rates(_FlowView):
    """flow -> its current rate."""

    def __getitem__(self, flow: int) -> float:
        return self._group_of[flow].rate


class _Remaining(_FlowView):
    """flow -> bytes left, as of its group's ``updated_at`` (which :meth:`FluidNetwork.reshare` moves to now)."""

    def __getitem__(self, flow: int) -> float:
        return self._group_of[flow].remaining(flow)


class FluidNetwork:
    """Active flows on links of given capacities (bytes per microsecond)."""

    def __init__(self, capacities: Sequence[float]) -> None:
        self.capacity = list(capacities)
        self.groups_on: list[dict[RouteGroup, None]] = [{} for _ in capacities]  # ordered sets
        self.load: list[int] = [0] * len(capacities)
        """Active flows on each link."""
        self.group_of: dict[int, RouteGroup] = {}
        self.rate: Mapping[int, float] = _Rates(self.group_of)
        self.remaining: Mapping[int, float] = _Remaining(self.group_of)
        self.busy_since: list[float] = [0.0] * len(capacities)
        self.busy_us: list[float] = [0.0] * len(capacities)
        self.bytes_carried: list[float] = [0.0] * len(capacities)
        self._groups: dict[tuple[int, ...], RouteGroup] = {}
        self._touched: dict[RouteGroup, None] = {}  # groups flows joined or left since the last reshare
        self._cap: list[float] = [0.0] * len(capacities)
        self._count: list[int] = [0] * len(capacities)
        self._reached: list[int] = [0] * len(capacities)  # number of the last solve that reached each link
        self.level: list[float] = [math.inf] * len(capacities)
        """The fair share at which each link saturated in the last solve that reached it (inf: it did not)."""
        self._solves = 0
        self._joined = itertools.count()

    def add(self, flow: int, route: tuple[int, ...], num_bytes: float, now: float) -> None:
        group = self._groups.get(route)
        if group is None:
            group = self._groups[route] = RouteGroup(route, now)
        if not group._linked:
            group._linked = True
            for link in route:
                self.groups_on[link][group] = None
        entry = (group.drained + group.rate * (now - group.updated_at) + num_bytes, next(self._joined), flow)
        group.members[flow] = entry
        heapq.heappush(group._order, entry)
        group.size += 1
        self.group_of[flow] = group
        self._touched[group] = None
        load, carried = self.load, self.bytes_carried
        for link in route:
            if not load[link]:
                self.busy_since[link] = now
            load[link] += 1
            carried[link] += num_bytes

    def remove(self, flow: int, now: float) -> None:
        group = self.group_of.pop(flow)
        del group.members[flow]
        group.size -= 1
        self._touched[group] = None
        load = self.load
        for link in group.route:
            load[link] -= 1
            if not load[link]:
                self.busy_us[link] += now - self.busy_since[link]

    def reshare_groups(self, now: float) -> list[RouteGroup]:
        """Re-solve max-min rates where group sizes changed; return the groups whose next finish may have moved.

        Those are the groups whose rate changed and the groups flows joined or left.
        """
        touched = self._touched
        if not touched:
            return []
        self._touched = {}
        seeds: list[int] = []  # links whose groups changed size (and still carry flows)
        moved: list[RouteGroup] = []
        groups_on, load, level = self.groups_on, self.load, self.level
        for group in touched:
            if group.size:
                moved.append(group)
                if group.size != group._solved_size:
                    for link in group.route:
                        if len(groups_on[link]) > 1:
                            seeds.extend(group.route)
                            break
                    else:
                        self._solve_alone(group, now)
            elif group._linked:  # empty: unlist it, and keep it for the route's next flow
                group._linked = False
                for link in group.route:
                    del groups_on[link][group]
                    if not load[link]:
                        level[link] = math.inf
                    elif group._solved_size:
                        seeds.append(link)
                group._order.clear()
                group._solved_size = 0
                group.rate = group.drained = 0.0
                group.updated_at = now
        if seeds:
            self._solve(seeds, now, touched, moved)
        return moved

    def reshare(self, now: float) -> list[int]:
        """Like :meth:`reshare_groups`, but return the flows whose finish may have moved.

        For those, ``rate`` and ``remaining`` (as of ``now``) are up to date.
        """
        flows: list[int] = []
        for group in self.reshare_groups(now):
            if group.updated_at != now:
                group.drained += group.rate * (now - group.updated_at)
                group.updated_at = now
            flows.extend(group.members)
        return flows

    def _solve_alone(self, group: RouteGroup, now: float) -> None:
        """The rate of a group that shares none of its links: its slowest link split among its flows."""
        capacity, level = self.capacity, self.level
        least = min(capacity[link] for link in group.route)
        m = group._solved_size = group.size
        new = least / m
        for link in group.route:
            level[link] = new if capacity[link] == least else math.inf
        old = group.rate
        if abs(new - old) > _SAME_RATE * old:
            group.drained += old * (now - group.updated_at)
            group.updated_at = now
            group.rate = new

    def _solve(self, seeds: list[int], now: float, touched: dict[RouteGroup, None], moved: list[RouteGroup]) -> None:
        """Max-min rates after the groups on links ``seeds`` changed size; append to ``moved`` those that changed.

        Progressive filling raises every rate together and fixes the flows of a
        link when it saturates, at increasing levels. Before the first level
        at which a seed link saturates (in the old or the new configuration)
        both runs are the same, so every unchanged group whose rate is below a
        lower bound ``floor`` of that level keeps its rate: it is frozen, and
        only the other groups connected to the seeds through them are filled,
        in what frozen groups leave of each link. The bound is the least of the
        seed links' old saturation levels (``level``) and new equal shares.
        """
        solve = self._solves = self._solves + 1
        groups_on, load, capacity, level = self.groups_on, self.load, self.capacity, self.level
        cap, count, reached = self._cap, self._count, self._reached  # scratch, indexed by link
        floor = math.inf
        stack = []
        for link in seeds:
            if reached[link] != solve:
                reached[link] = solve
                stack.append(link)
                if level[link] < floor:
                    floor = level[link]
                if capacity[link] < floor * load[link]:
                    floor = capacity[link] / load[link]
        floor *= 1 - 1e-9  # rates this close to the bound are re-solved, not frozen
        heap: list[tuple[float, int]] = []
        while stack:  # the links reached through groups not frozen, and what is left on them
            link = stack.pop()
            left = capacity[link]
            n = 0
            for group in groups_on[link]:
                m = group.size
                if group.rate < floor and m == group._solved_size:
                    left -= group.rate * m
                    continue
                n += m
                if group._seen != solve:
                    group._seen = solve
                    for l2 in group.route:
                        if reached[l2] != solve:
                            reached[l2] = solve
                            stack.append(l2)
            level[link] = math.inf
            if n:
                cap[link] = left
                count[link] = n
                heap.append(((left if left > 0 else 0.0) / n, link))
        heapq.heapify(heap)
        heappop, heappush = heapq.heappop, heapq.heappush
        same = _SAME_RATE
        while heap:
            share, link = heappop(heap)
            n = count[link]
            if not n:
                continue
            left = cap[link]
            current = left / n if left > 0 else 0.0
            if current > share * (1 + 1e-12) + 1e-300:
                heappush(heap, (current, link))  # its share grew since it was queued
                continue
            level[link] = current
            for group in groups_on[link]:
                if group._seen != solve or group._fixed == solve:
                    continue  # frozen, or fixed at an earlier link
                group._fixed = solve
                m = group._solved_size = group.size
                used = current * m
                for l2 in group.route:
                    cap[l2] -= used
                    count[l2] -= m
                old = group.rate
                if current - old > same * old or old - current > same * old:
                    group.drained += old * (now - group.updated_at)
                    group.updated_at = now
                    group.rate = current
                    if group not in touched:
                        moved.append(group)

    def finish_busy(self, now: float) -> None:
        """Close the busy intervals of links still carrying flows (used when a run stops early)."""
        for link, flows in enumerate(self.load):
            if flows:
                self.busy_us[link] += now - self.busy_since[link]
                self.busy_since[link] = now
