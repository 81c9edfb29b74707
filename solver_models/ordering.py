"""Ordering: greedy list schedulers that order chunk sends on every link and switch port.

Each task sends one chunk over one logical edge once the chunk has reached the
sender. The schedulers estimate start times under the model TACCL orders with
(a link carries one message at a time at the route's bottleneck rate); the
start times give the program order and, per connection, the send order. Three
rules are offered because none wins everywhere; the synthesizer simulates each:

* ``arrival``: tasks in order of readiness, each appended to its links' queues;
* ``list``: event-driven list scheduling, at each event the ready task whose
  links have the most work left goes first (keeps the critical links busy);
* ``pipeline``: piece by piece down the trees (the classic pipelined tree).

Where the GPUs declare endpoint limits, ``arrival`` and ``list`` also take
:class:`EndpointUse`: each task occupies its GPUs' memory (and channels) for
the bytes it touches there over their bandwidth, each such resource serving
one task after another like a link, and a task arrives only when its links
and its endpoint resources are all done.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from taccl_py.errors import SolverError
from taccl_py.tolerances import SAME_TIME_US
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["EndpointUse", "Task", "TaskTiming", "arrival_order", "list_order", "pipeline_order"]


@dataclass(frozen=True, slots=True)
class Task:
    """One chunk over one logical edge. ``pred`` brings the chunk to ``src`` (-1: it starts there)."""

    src: int
    dst: int
    chunks: tuple[int, ...]
    route: tuple[int, ...]
    latency_us: float
    bytes: float
    bandwidth_GBps: float
    pred: int
    priority: tuple[float, ...]
    reduce: bool = False

    @property
    def duration_us(self) -> float:
        return self.bytes / gbps_to_bytes_per_us(self.bandwidth_GBps)


@dataclass(frozen=True)
class TaskTiming:
    """Estimated start (latency phase begins) and arrival time of every task."""

    start_us: list[float]
    arrive_us: list[float]

    @property
    def makespan_us(self) -> float:
        return max(self.arrive_us, default=0.0)

    def order(self, tasks: Sequence[Task]) -> list[int]:
        """Program order: by start time, then priority, then id."""
        return sorted(range(len(tasks)), key=lambda i: (self.start_us[i], tasks[i].priority, i))


@dataclass(frozen=True)
class EndpointUse:
    """Per task, the endpoint resources it occupies and for how long: ``(resource, us)`` pairs."""

    uses: tuple[tuple[tuple[int, float], ...], ...]
    num_resources: int


def _endpoint_end(use: EndpointUse | None, i: int, begin: float, end: float, free: list[float]) -> float:
    """When task i, moving bytes from ``begin`` to ``end`` on its links, is also done with its endpoint
    resources (each serves its tasks one after another); books them."""
    if use is None:
        return end
    for r, us in use.uses[i]:
        done = max(free[r], begin) + us
        free[r] = done
        end = max(end, done)
    return end


def _successors(tasks: Sequence[Task]) -> list[list[int]]:
    successors: list[list[int]] = [[] for _ in tasks]
    for i, t in enumerate(tasks):
        if t.pred >= 0:
            successors[t.pred].append(i)
    return successors


def arrival_order(tasks: Sequence[Task], num_links: int, endpoint: EndpointUse | None = None) -> TaskTiming:
    """Tasks by ready time (ties by priority); a task's bytes start when its links are free."""
    n = len(tasks)
    successors = _successors(tasks)
    free_at = [0.0] * num_links
    endpoint_free = [0.0] * (endpoint.num_resources if endpoint else 0)
    start = [0.0] * n
    arrive = [0.0] * n
    heap = [(0.0, tasks[i].priority, i) for i in range(n) if tasks[i].pred < 0]
    heapq.heapify(heap)
    while heap:
        ready, _, i = heapq.heappop(heap)
        t = tasks[i]
        begin = max(ready + t.latency_us, *(free_at[link] for link in t.route))
        end = _endpoint_end(endpoint, i, begin, begin + t.duration_us, endpoint_free)
        for link in t.route:
            free_at[link] = end
        start[i] = begin - t.latency_us
        arrive[i] = end
        for j in successors[i]:
            heapq.heappush(heap, (end, tasks[j].priority, j))
    return TaskTiming(start, arrive)


def list_order(tasks: Sequence[Task], num_links: int, *, max_ready_scan: int = 4000,
               endpoint: EndpointUse | None = None) -> TaskTiming:
    """Event-driven list scheduling; a link is busy for a message's latency and bytes.

    At every event the ready tasks are scanned, those whose links have the most
    remaining work first, and started when all their links are idle.
    """
    n = len(tasks)
    successors = _successors(tasks)
    remaining = [0.0] * num_links
    for t in tasks:
        for link in t.route:
            remaining[link] += t.latency_us + t.duration_us
    busy_until = [0.0] * num_links
    endpoint_free = [0.0] * (endpoint.num_resources if endpoint else 0)
    start = [0.0] * n
    arrive = [0.0] * n
    ready = [i for i in range(n) if tasks[i].pred < 0]
    finishing: list[tuple[float, int]] = []
    now = 0.0
    done = 0
    while done < n:
        ready.sort(key=lambda i: (-max((remaining[link] for link in tasks[i].route), default=0.0),
                                  tasks[i].priority, i))
        still = ready[max_ready_scan:]
        for i in ready[:max_ready_scan]:
            t = tasks[i]
            if all(busy_until[link] <= now + SAME_TIME_US for link in t.route):
                end = _endpoint_end(endpoint, i, now + t.latency_us, now + t.latency_us + t.duration_us,
                                    endpoint_free)
                for link in t.route:
                    busy_until[link] = end
                    remaining[link] -= t.latency_us + t.duration_us
                start[i] = now
                arrive[i] = end
                heapq.heappush(finishing, (end, i))
            else:
                still.append(i)
        ready = still
        if not finishing:  # pragma: no cover - every task has a predecessor chain from a root
            raise SolverError("ordering: task dependencies form a cycle")
        now = finishing[0][0]
        while finishing and finishing[0][0] <= now + SAME_TIME_US:
            _, i = heapq.heappop(finishing)
            done += 1
            ready.extend(successors[i])
    return TaskTiming(start, arrive)


def pipeline_order(tasks: Sequence[Task]) -> TaskTiming:
    """Piece index first, then depth along the route: piece k of every tree before piece k+1.

    The 'times' are ranks, usable only as a program order.
    """
    depth = [0] * len(tasks)
    for i, t in enumerate(tasks):
        depth[i] = depth[t.pred] + 1 if t.pred >= 0 else 0
    ranked = sorted(range(len(tasks)), key=lambda i: (tasks[i].priority[2], depth[i], tasks[i].priority[1], i))
    rank = [0.0] * len(tasks)
    for k, i in enumerate(ranked):
        rank[i] = float(k)
    return TaskTiming(rank, [r + 0.5 for r in rank])
