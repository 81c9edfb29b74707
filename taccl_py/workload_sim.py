"""Simulating a training step: compute kernels and collectives overlapped on one topology (``taccl workload simulate``).

Every node of a :class:`~taccl_py.workload.Workload` runs on every GPU. All of
it runs in one event kernel (:mod:`taccl_py.event_kernel`), so collectives share
links with each other and, through the GPUs' memory (:mod:`taccl_py.endpoint`),
with compute:

* a collective runs its schedule with the simulator's start and commit rules
  (program order, connection FIFOs, ``after``, ``not_before_us`` counted from the
  collective's start); its transfers use their route's links and, when the
  topology declares them, the memory and channels of their two GPUs with the
  weights of the endpoint mode. The schedule's data correctness is the
  simulator's business (the command checks every schedule once on its own);
* a compute kernel on GPU g is a flow of ``duration x memory_bandwidth`` bytes
  over two resources: a private one of capacity ``memory_bandwidth`` (so alone it
  takes exactly its duration) and g's memory. When the memory is shared it
  slows down, and so does communication: ACE's contention. A kernel that draws
  no memory bandwidth simply takes its duration.

The step time is the last node's end. A node's end is the end of its last
GPU's part (a compute kernel) or its last commit (a collective).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from taccl_py.endpoint import EndpointMode, endpoint_flows, endpoint_layout
from taccl_py.errors import InputError
from taccl_py.event_kernel import EventKernel
from taccl_py.gc_pause import paused_gc
from taccl_py.schedule import Schedule
from taccl_py.simulator import _dependencies
from taccl_py.topology import Topology
from taccl_py.units import gbps_to_bytes_per_us
from taccl_py.workload import CollectiveNode, ComputeNode, Workload

__all__ = ["NodeTiming", "ResourceUse", "StepResult", "check_cut_through", "simulate_step"]


@dataclass(frozen=True)
class NodeTiming:
    id: str
    type: str
    start_us: float
    end_us: float


@dataclass(frozen=True)
class ResourceUse:
    """One resource (or a class of links) over the step: when it was busy, how much it carried."""

    name: str
    kind: str
    """``memory``, ``channels``, ``compute`` (a GPU's compute stream) or ``links`` (every link of one kind)."""
    capacity_GBps: float | None
    bytes: float
    busy_us: float
    intervals: tuple[tuple[float, float], ...]
    """The merged intervals during which it carried at least one flow (a kernel ran, for ``compute``)."""


@dataclass(frozen=True)
class StepResult:
    """What one simulated training step took."""

    workload: str
    topology: str
    endpoint: EndpointMode
    step_time_us: float
    compute_us: float
    """Time during which some compute kernel ran."""
    communication_us: float
    """Time during which some collective was in progress."""
    exposed_communication_us: float
    """Time during which a collective was in progress and no compute kernel ran."""
    injected_bytes: float
    """Bytes the collectives' transfers put on the network (each transfer once)."""
    network_utilization: float
    """``injected_bytes`` / (the GPUs' total injection bandwidth x ``communication_us``)."""
    nodes: tuple[NodeTiming, ...]
    resources: tuple[ResourceUse, ...]

    def summary(self) -> dict[str, object]:
        return {"workload": self.workload, "topology": self.topology, "endpoint": self.endpoint.value,
                "step_time_us": self.step_time_us, "compute_us": self.compute_us,
                "communication_us": self.communication_us, "exposed_communication_us": self.exposed_communication_us,
                "network_utilization": self.network_utilization, "injected_bytes": self.injected_bytes}


def _merge(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _length(intervals: Sequence[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the merged intervals ``a`` outside the merged intervals ``b``."""
    total = 0.0
    j = 0
    for start, end in a:
        cursor = start
        while j < len(b) and b[j][1] <= cursor:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                total += b[k][0] - cursor
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            total += end - cursor
    return total


class _Collective:
    """The start/commit bookkeeping of one collective node's schedule (transfers ``base .. base + n - 1``)."""

    __slots__ = ("base", "commit_on_arrive", "commit_on_commit", "commit_pending", "committed", "conn_next", "node",
                 "not_before", "start_on_commit", "start_pending", "started_at")

    def __init__(self, node: int, schedule: Schedule, base: int) -> None:
        deps = _dependencies(schedule.transfers, schedule.collective.num_chunks)
        self.node, self.base = node, base
        self.start_pending, self.commit_pending = deps.start_pending, deps.commit_pending
        self.start_on_commit, self.commit_on_commit = deps.start_on_commit, deps.commit_on_commit
        self.commit_on_arrive, self.conn_next = deps.commit_on_arrive, deps.conn_next
        self.not_before = [t.not_before_us for t in schedule.transfers]
        self.committed = 0
        self.started_at = math.nan


def check_cut_through(topology: Topology) -> None:
    """:class:`InputError` unless ``topology``'s switches are cut-through (a step's busy timeline is per transfer)."""
    if topology.store_and_forward:
        raise InputError("has store-and-forward switches, which workload simulation does not model (it times "
                         "every transfer over its whole route): use cut-through", where=topology.name,
                         field="switch_model")


def simulate_step(topology: Topology, workload: Workload, schedules: Sequence[Schedule | None],
                  endpoint: EndpointMode = EndpointMode.GPU, step_overhead_us: float = 0.0) -> StepResult:
    """Run ``workload`` on ``topology``; ``schedules[k]`` is collective node k's schedule (None for compute nodes).

    Every schedule must be for ``topology`` and correct on its own (the caller checks it with
    :func:`taccl_py.simulator.simulate`). Switches are cut-through: a topology with
    store-and-forward switches is refused (:func:`check_cut_through`).
    """
    check_cut_through(topology)
    with paused_gc():
        run = _Step(topology, workload, schedules, endpoint, step_overhead_us)
        run.run()
        return run.result()


class _Step(EventKernel):
    """Items (the kernel's transfer ids): every collective's transfers, then one per (compute node, GPU)."""

    def __init__(self, topology: Topology, workload: Workload, schedules: Sequence[Schedule | None],
                 endpoint: EndpointMode, step_overhead_us: float) -> None:
        self.topology, self.workload, self.endpoint = topology, workload, endpoint
        nodes = workload.nodes
        capacities = [gbps_to_bytes_per_us(link.bandwidth) for link in topology.links]
        layout = endpoint_layout(topology, len(capacities)) if topology.has_endpoint_limits else None
        if layout is not None:
            capacities += layout.capacities
        resources: list[tuple[int, ...]] = []
        weights: list[tuple[float, ...] | None] = []
        latency: list[float] = []
        num_bytes: list[float] = []
        self.item_node: list[int] = []
        self.collectives: dict[int, _Collective] = {}
        self.parts_left = [0] * len(nodes)
        self.injected = 0.0
        self.item_gpu: list[int] = []
        self.first_item = [0] * len(nodes)
        for k, node in enumerate(nodes):
            self.first_item[k] = len(resources)
            if isinstance(node, CollectiveNode):
                schedule = schedules[k]
                assert schedule is not None
                base = len(resources)
                self.collectives[k] = _Collective(k, schedule, base)
                chunk_bytes = schedule.collective.chunk_bytes(node.size_bytes)
                if layout is not None:
                    used, weighted = endpoint_flows(topology, schedule, endpoint, layout)
                else:
                    used, weighted = [t.route for t in schedule.transfers], [None] * len(schedule.transfers)
                resources += used
                weights += weighted
                for t in schedule.transfers:
                    latency.append(topology.route_latency(t.route) + step_overhead_us)
                    b = len(t.chunks) * chunk_bytes
                    num_bytes.append(b)
                    self.injected += b
                    self.item_node.append(k)
                    self.item_gpu.append(t.src)
                self.parts_left[k] = len(schedule.transfers)
            else:
                for g in topology.gpus:
                    if node.memory_bandwidth > 0:
                        own = len(capacities)
                        capacities.append(gbps_to_bytes_per_us(node.memory_bandwidth))
                        memory = -1 if layout is None else layout.memory[g]
                        resources.append((own,) if memory < 0 else (own, memory))
                        latency.append(0.0)
                        num_bytes.append(gbps_to_bytes_per_us(node.memory_bandwidth) * node.duration_us)
                    else:  # no memory drawn: the kernel is a delay
                        resources.append(())
                        latency.append(node.duration_us)
                        num_bytes.append(0.0)
                    weights.append(None)
                    self.item_node.append(k)
                    self.item_gpu.append(g)
                self.parts_left[k] = topology.num_gpus
        super().__init__(capacities, resources, latency, num_bytes, weights)
        self.layout = layout
        self.waiting = [len(n.after) for n in nodes]
        self.dependents: list[list[int]] = [[] for _ in nodes]
        for k, n in enumerate(nodes):
            for a in n.after:
                self.dependents[a].append(k)
        self.node_start = [math.nan] * len(nodes)
        self.node_end = [math.nan] * len(nodes)
        self.item_start = [math.nan] * len(resources)
        self.item_arrive = [math.nan] * len(resources)

    # ------------------------------------------------------------------ nodes
    def start(self) -> None:
        for k, waiting in enumerate(self.waiting):
            if not waiting:
                self.begin_node(k, 0.0)

    def begin_node(self, k: int, now: float) -> None:
        self.node_start[k] = now
        coll = self.collectives.get(k)
        if coll is None:
            first = self.first_item[k]
            for item in range(first, first + self.topology.num_gpus):
                self.item_start[item] = now
                self.send(item, now)
            return
        coll.started_at = now
        if not self.parts_left[k]:
            self.end_node(k, now)
            return
        for i, pending in enumerate(coll.start_pending):
            if not pending:
                self.begin_transfer(coll, i, now)

    def end_node(self, k: int, now: float) -> None:
        self.node_end[k] = now
        for j in self.dependents[k]:
            self.waiting[j] -= 1
            if not self.waiting[j]:
                self.begin_node(j, now)

    # ------------------------------------------------------------------ transfers
    def begin_transfer(self, coll: _Collective, i: int, now: float) -> None:
        not_before = coll.not_before[i]
        item = coll.base + i
        if not_before is not None and coll.started_at + not_before > now:
            self.wake_at(coll.started_at + not_before, item)
            return
        self.item_start[item] = now
        self.send(item, now)

    def wake(self, item: int, time: float) -> None:
        self.item_start[item] = time
        self.send(item, time)

    def release(self, coll: _Collective, i: int, now: float) -> None:
        coll.start_pending[i] -= 1
        if not coll.start_pending[i]:
            self.begin_transfer(coll, i, now)

    def arrive(self, item: int, now: float) -> None:
        self.item_arrive[item] = now
        k = self.item_node[item]
        coll = self.collectives.get(k)
        if coll is None:
            self.parts_left[k] -= 1
            if not self.parts_left[k]:
                self.end_node(k, now)
            return
        i = item - coll.base
        j = coll.conn_next[i]
        if j >= 0:
            self.release(coll, j, now)
        commits: list[int] = []
        waiters = coll.commit_on_arrive[i]
        for j in waiters or ():
            coll.commit_pending[j] -= 1
            if not coll.commit_pending[j]:
                commits.append(j)
        coll.commit_pending[i] -= 1
        if not coll.commit_pending[i]:
            commits.append(i)
        while commits:
            c = commits.pop()
            coll.committed += 1
            for j in coll.start_on_commit[c] or ():
                self.release(coll, j, now)
            for j in coll.commit_on_commit[c] or ():
                coll.commit_pending[j] -= 1
                if not coll.commit_pending[j]:
                    commits.append(j)
        if coll.committed == self.parts_left[k]:
            self.end_node(k, now)

    # ------------------------------------------------------------------ the report
    def result(self) -> StepResult:
        topology, nodes = self.topology, self.workload.nodes
        stuck = [n.id for k, n in enumerate(nodes) if math.isnan(self.node_end[k])]
        if stuck:  # a schedule checked on its own cannot deadlock here; say so rather than report nonsense
            raise AssertionError(f"workload nodes never finished: {stuck[:5]}")
        step = max(self.node_end, default=0.0)
        compute = _merge([(self.node_start[k], self.node_end[k]) for k, n in enumerate(nodes)
                          if isinstance(n, ComputeNode)])
        comm = _merge([(self.node_start[k], self.node_end[k]) for k, n in enumerate(nodes)
                       if isinstance(n, CollectiveNode)])
        comm_us = _length(comm)
        injection = sum(topology.injection_bandwidth(g) for g in topology.gpus)
        utilization = self.injected / (gbps_to_bytes_per_us(injection) * comm_us) if comm_us > 0 else 0.0
        timings = tuple(NodeTiming(n.id, "compute" if isinstance(n, ComputeNode) else "collective",
                                   self.node_start[k], self.node_end[k]) for k, n in enumerate(nodes))
        return StepResult(self.workload.name, topology.name, self.endpoint, step, _length(compute), comm_us,
                          _minus(comm, compute), self.injected, utilization, timings, self._resources(step))

    def _flow_intervals(self, item: int) -> tuple[float, float]:
        """When the item's bytes were in the network (after its latency)."""
        return self.item_start[item] + self.latency_us[item], self.item_arrive[item]

    def _resources(self, step: float) -> tuple[ResourceUse, ...]:
        topology, net = self.topology, self.net
        per_resource: dict[int, list[tuple[float, float]]] = {}
        for item, used in enumerate(self.resources):
            if self.num_bytes[item] > 0:
                interval = self._flow_intervals(item)
                for r in used:
                    per_resource.setdefault(r, []).append(interval)
        out: list[ResourceUse] = []
        layout = self.layout
        compute_parts: list[list[tuple[float, float]]] = [[] for _ in topology.gpus]
        for k in range(len(self.workload.nodes)):
            if k not in self.collectives:
                for g in topology.gpus:
                    i = self.first_item[k] + g
                    compute_parts[g].append((self.item_start[i], self.item_arrive[i]))
        for g in topology.gpus:
            merged = _merge(compute_parts[g])
            out.append(ResourceUse(f"gpu{g}.compute", "compute", None, 0.0, _length(merged), tuple(merged)))
            if layout is not None:
                for kind, index in (("memory", layout.memory[g]), ("channels", layout.channels[g])):
                    if index >= 0:
                        merged = _merge(per_resource.get(index, []))
                        out.append(ResourceUse(f"gpu{g}.{kind}", kind, net.capacity[index] / 1e3,
                                               net.bytes_carried[index], _length(merged), tuple(merged)))
        by_kind: dict[str, list[int]] = {}
        for li, link in enumerate(topology.links):
            by_kind.setdefault(link.kind, []).append(li)
        for kind, links in sorted(by_kind.items()):
            merged = _merge([iv for li in links for iv in per_resource.get(li, [])])
            out.append(ResourceUse(f"{kind} links", "links", sum(topology.links[li].bandwidth for li in links),
                                   sum(net.bytes_carried[li] for li in links), _length(merged), tuple(merged)))
        return tuple(out)
