"""Max-min fair sharing of link bandwidth among concurrent flows (the fluid model).

Every active flow crosses a set of links; each link's capacity is shared so that
no flow can get more without taking from a flow that has less (progressive
filling). Only the part of the flow/link graph that an event touched is
re-solved, as SimGrid's selective update does, and only flows whose rate
actually changed are reported, so a caller re-schedules just those.

A flow's ``remaining`` bytes are exact as of ``updated_at``; between updates
it drains at ``rate`` (bytes per microsecond).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

__all__ = ["FluidNetwork"]

_SAME_RATE = 1e-12
"""Relative change below which a re-solved rate counts as unchanged (so the flow's finish event stands)."""


class FluidNetwork:
    """Active flows on links of given capacities (bytes per microsecond)."""

    def __init__(self, capacities: Sequence[float]) -> None:
        self.capacity = list(capacities)
        self.flows_on: list[dict[int, None]] = [{} for _ in capacities]  # ordered sets
        self.route: dict[int, tuple[int, ...]] = {}
        self.rate: dict[int, float] = {}
        self.remaining: dict[int, float] = {}
        self.updated_at: dict[int, float] = {}
        self.busy_since: list[float] = [0.0] * len(capacities)
        self.busy_us: list[float] = [0.0] * len(capacities)
        self.bytes_carried: list[float] = [0.0] * len(capacities)
        self._dirty: dict[int, None] = {}
        self._count: list[int] = [0] * len(capacities)

    def add(self, flow: int, route: tuple[int, ...], num_bytes: float, now: float) -> None:
        self.route[flow] = route
        self.remaining[flow] = num_bytes
        self.rate[flow] = 0.0
        self.updated_at[flow] = now
        flows_on, dirty, carried = self.flows_on, self._dirty, self.bytes_carried
        for link in route:
            flows = flows_on[link]
            if not flows:
                self.busy_since[link] = now
            flows[flow] = None
            carried[link] += num_bytes
            dirty[link] = None

    def remove(self, flow: int, now: float) -> None:
        flows_on, dirty = self.flows_on, self._dirty
        for link in self.route.pop(flow):
            flows = flows_on[link]
            del flows[flow]
            if not flows:
                self.busy_us[link] += now - self.busy_since[link]
            dirty[link] = None
        del self.rate[flow], self.remaining[flow], self.updated_at[flow]

    def reshare(self, now: float) -> list[int]:
        """Re-solve max-min rates where flows came or went; return the flows whose rate changed."""
        if not self._dirty:
            return []
        links, flows = self._component(self._dirty)
        self._dirty = {}
        if not flows:
            return []
        new_rate = self._progressive_filling(links, flows)
        rate, remaining, updated_at = self.rate, self.remaining, self.updated_at
        changed = []
        for f in flows:
            old, new = rate[f], new_rate[f]
            if abs(new - old) <= _SAME_RATE * old:
                continue
            remaining[f] -= old * (now - updated_at[f])
            updated_at[f] = now
            rate[f] = new
            changed.append(f)
        return changed

    def _component(self, seeds: Iterable[int]) -> tuple[list[int], list[int]]:
        seen_links: dict[int, None] = dict.fromkeys(seeds)
        stack = list(seen_links)
        seen_flows: dict[int, None] = {}
        flows_on, route = self.flows_on, self.route
        while stack:
            link = stack.pop()
            for f in flows_on[link]:
                if f not in seen_flows:
                    seen_flows[f] = None
                    for l2 in route[f]:
                        if l2 not in seen_links:
                            seen_links[l2] = None
                            stack.append(l2)
        return list(seen_links), list(seen_flows)

    def _progressive_filling(self, links: list[int], flows: list[int]) -> dict[int, float]:
        """Max-min fair rates: repeatedly saturate the link with the smallest fair share."""
        flows_on, route = self.flows_on, self.route
        cap = self.capacity[:]  # scratch copies indexed by link; only the component's entries are used
        count = self._count
        heap = []
        for link in links:
            c = len(flows_on[link])
            count[link] = c
            if c:
                heap.append((cap[link] / c, link))
        heapq.heapify(heap)
        heappop, heappush = heapq.heappop, heapq.heappush
        fixed: dict[int, float] = {}
        while heap:
            share, link = heappop(heap)
            n = count[link]
            if n == 0:
                continue
            left = cap[link]
            current = left / n if left > 0 else 0.0
            if current > share * (1 + 1e-12) + 1e-300:
                continue  # stale entry: a fresher, larger one is in the heap
            touched = set()
            for f in flows_on[link]:
                if f in fixed:
                    continue
                fixed[f] = current
                for l2 in route[f]:
                    cap[l2] -= current
                    count[l2] -= 1
                    touched.add(l2)
            count[link] = 0
            touched.discard(link)
            for l2 in touched:
                c = count[l2]
                if c:
                    left = cap[l2]
                    heappush(heap, ((left if left > 0 else 0.0) / c, l2))
        return fixed

    def finish_busy(self, now: float) -> None:
        """Close the busy intervals of links still carrying flows (used when a run stops early)."""
        for link, flows in enumerate(self.flows_on):
            if flows:
                self.busy_us[link] += now - self.busy_since[link]
                self.busy_since[link] = now
