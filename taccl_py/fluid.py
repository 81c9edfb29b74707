"""Max-min fair sharing of resource capacity among concurrent flows (the fluid model).

The network is a list of *resources*, each with a capacity in bytes per
microsecond: a topology's links first (resource i is link i), then whatever else
a flow may use (a GPU's memory bandwidth, for example). Every active flow uses a
set of resources, given as a tuple of indices (each at most once; a route's
links, a multicast tree's links, or links plus the endpoints' memory: nothing
requires a connected path). Each resource's capacity is shared so that no flow
can get more without taking from a flow that has less (progressive filling).
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
which the first changed resource could saturate (see :meth:`FluidNetwork._solve`).

:meth:`FluidNetwork.reshare_groups` returns the groups whose next finish may
have moved (:meth:`FluidNetwork.reshare`: with that finish); the event loop (:mod:`taccl_py.event_kernel`) keeps one finish
event per group, whose state lives on the group (``finish``, ``event``, ``due``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from enum import IntEnum

__all__ = ["Finish", "FlowGroup", "FluidNetwork"]

_SAME_RATE = 1e-12
"""Relative change below which a re-solved rate counts as unchanged (so the flow's finish event stands)."""

_FROZEN_MARGIN = 1e-9
"""Rates within this relative margin below the freezing level are re-solved, not frozen (see ``_solve``)."""

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

    __slots__ = ("_fixed", "_linked", "_order", "_seen", "_solved_size", "drained", "due", "event", "finish",
                 "members", "rate", "resources", "size", "updated_at")

    def __init__(self, resources: tuple[int, ...], now: float) -> None:
        self.resources = resources
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
    ``level`` (its fair share when it last saturated).
    """

    def __init__(self, capacities: Sequence[float]) -> None:
        count = len(capacities)
        self.capacity = list(capacities)
        self.groups_on: list[dict[FlowGroup, None]] = [{} for _ in range(count)]  # ordered sets
        self.load: list[int] = [0] * count
        """Active flows using each resource."""
        self.group_of: dict[int, FlowGroup] = {}
        self.busy_since: list[float] = [0.0] * count
        self.busy_us: list[float] = [0.0] * count
        self.bytes_carried: list[float] = [0.0] * count
        self._groups: dict[tuple[int, ...], FlowGroup] = {}
        self._touched: dict[FlowGroup, None] = {}  # groups flows joined or left since the last reshare
        self._cap: list[float] = [0.0] * count
        self._count: list[int] = [0] * count
        self._reached: list[int] = [0] * count  # number of the last solve that reached each resource
        self.level: list[float] = [math.inf] * count
        """The fair share at which each resource saturated in the last solve that reached it (inf: it did not)."""
        self._solves = 0
        self._joined = itertools.count()

    def add(self, flow: int, resources: tuple[int, ...], num_bytes: float, now: float) -> None:
        """``flow`` starts moving ``num_bytes`` over ``resources`` (non-empty, each index once) at ``now``."""
        group = self._groups.get(resources)
        if group is None:
            group = self._groups[resources] = FlowGroup(resources, now)
        if not group._linked:
            group._linked = True
            for r in resources:
                self.groups_on[r][group] = None
        entry = (group.drained + group.rate * (now - group.updated_at) + num_bytes, next(self._joined), flow)
        group.members[flow] = entry
        heapq.heappush(group._order, entry)
        group.size += 1
        self.group_of[flow] = group
        self._touched[group] = None
        load, carried = self.load, self.bytes_carried
        for r in resources:
            if not load[r]:
                self.busy_since[r] = now
            load[r] += 1
            carried[r] += num_bytes

    def remove(self, flow: int, now: float) -> None:
        """``flow`` leaves the network at ``now`` (it finished)."""
        group = self.group_of.pop(flow)
        del group.members[flow]
        group.size -= 1
        self._touched[group] = None
        load = self.load
        for r in group.resources:
            load[r] -= 1
            if not load[r]:
                self.busy_us[r] += now - self.busy_since[r]

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
                    for r in group.resources:
                        if len(groups_on[r]) > 1:
                            seeds.extend(group.resources)
                            break
                    else:
                        self._solve_alone(group, now)
            elif group._linked:  # empty: unlist it, and keep it for the next flow on these resources
                group._linked = False
                for r in group.resources:
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
        least = min(capacity[r] for r in group.resources)
        m = group._solved_size = group.size
        new = least / m
        for r in group.resources:
            level[r] = new if capacity[r] == least else math.inf
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
        groups_on, load, capacity, level = self.groups_on, self.load, self.capacity, self.level
        cap, count, reached = self._cap, self._count, self._reached  # scratch, indexed by resource
        floor = math.inf
        stack = []
        for r in seeds:
            if reached[r] != solve:
                reached[r] = solve
                stack.append(r)
                if level[r] < floor:
                    floor = level[r]
                if capacity[r] < floor * load[r]:
                    floor = capacity[r] / load[r]
        floor *= 1 - _FROZEN_MARGIN  # rates this close to the bound are re-solved, not frozen
        heap: list[tuple[float, int]] = []
        while stack:  # the resources reached through groups not frozen, and what is left on them
            r = stack.pop()
            left = capacity[r]
            n = 0
            for group in groups_on[r]:
                m = group.size
                if group.rate < floor and m == group._solved_size:
                    left -= group.rate * m
                    continue
                n += m
                if group._seen != solve:
                    group._seen = solve
                    for r2 in group.resources:
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
            if not n:
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
                for r2 in group.resources:
                    cap[r2] -= used
                    count[r2] -= m
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
