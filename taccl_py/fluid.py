"""Max-min fair sharing of link bandwidth among concurrent flows (the fluid model).

Every active flow crosses a set of links; each link's capacity is shared so that
no flow can get more without taking from a flow that has less (progressive
filling). Only the part of the flow/link graph that an event touched is
re-solved, as SimGrid's selective update does.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

__all__ = ["FluidNetwork"]


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

    def add(self, flow: int, route: tuple[int, ...], num_bytes: float, now: float) -> None:
        self.route[flow] = route
        self.remaining[flow] = num_bytes
        self.rate[flow] = 0.0
        self.updated_at[flow] = now
        for link in route:
            flows = self.flows_on[link]
            if not flows:
                self.busy_since[link] = now
            flows[flow] = None
            self.bytes_carried[link] += num_bytes
            self._dirty[link] = None

    def remove(self, flow: int, now: float) -> None:
        for link in self.route.pop(flow):
            flows = self.flows_on[link]
            del flows[flow]
            if not flows:
                self.busy_us[link] += now - self.busy_since[link]
            self._dirty[link] = None
        del self.rate[flow], self.remaining[flow], self.updated_at[flow]

    def reshare(self, now: float) -> list[int]:
        """Re-solve max-min rates where flows came or went; return the flows whose rate was set."""
        if not self._dirty:
            return []
        links, flows = self._component(self._dirty)
        self._dirty = {}
        rate, remaining, updated_at = self.rate, self.remaining, self.updated_at
        for f in flows:
            remaining[f] -= rate[f] * (now - updated_at[f])
            updated_at[f] = now
        self._progressive_filling(links, flows)
        return flows

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

    def _progressive_filling(self, links: list[int], flows: list[int]) -> None:
        flows_on, route, rate = self.flows_on, self.route, self.rate
        cap = {link: self.capacity[link] for link in links}
        count = {link: len(flows_on[link]) for link in links}
        heap = [(cap[link] / count[link], link) for link in links if count[link]]
        heapq.heapify(heap)
        fixed: set[int] = set()
        while heap:
            share, link = heapq.heappop(heap)
            n = count[link]
            if n == 0:
                continue
            current = max(cap[link], 0.0) / n
            if current > share * (1 + 1e-12) + 1e-300:
                continue  # stale entry: a fresher, larger one is in the heap
            for f in flows_on[link]:
                if f in fixed:
                    continue
                fixed.add(f)
                rate[f] = current
                for l2 in route[f]:
                    cap[l2] -= current
                    count[l2] -= 1
                    if l2 != link and count[l2]:
                        heapq.heappush(heap, (max(cap[l2], 0.0) / count[l2], l2))
            count[link] = 0

    def finish_busy(self, now: float) -> None:
        """Close the busy intervals of links still carrying flows (used when a run stops early)."""
        for link, flows in enumerate(self.flows_on):
            if flows:
                self.busy_us[link] += now - self.busy_since[link]
                self.busy_since[link] = now
