"""The GPU endpoint: memory traffic of every transfer, in GPU-driven and offload-engine mode (ACE).

A transfer of b bytes also touches the memory of the GPUs at its two ends. How
much depends on who runs the collective:

* ``gpu`` (the default; NCCL/MSCCL kernels on the GPU's SMs): the sender reads
  b, a receiver that copies writes b, a receiver that reduces reads 2b (what
  arrived and its own contribution) and writes b. Every step goes through
  memory.
* ``engine`` (ACE's collectives engine beside the network): each chunk is read
  from memory once into the engine and written back once, when its final value
  arrives; forwarding and reducing happen in the engine. A sender reads a
  chunk only if it holds its own input of it and has not read it before; a
  reducing receiver reads its own contribution the first time it touches the
  chunk; a receiver writes a chunk only when this transfer is the last to write
  it there (program order) and the collective's result includes it there.

The simulator turns this into resources of the fluid network
(:func:`endpoint_flows`): a GPU's memory (its ``memory_bandwidth``) is used by a
transfer with weight "memory bytes per network byte" at each end, and in
``gpu`` mode the communication channels (``comm_channels`` x
``channel_bandwidth``) carry every byte a GPU sends or receives. A GPU without
the fields adds no resource, so without them every time is what it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from taccl_py.collectives import CollectiveKind
from taccl_py.schedule import Op, Schedule
from taccl_py.topology import Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["EndpointLayout", "EndpointMode", "MemoryDemand", "MemoryTraffic", "endpoint_flows", "endpoint_layout",
           "endpoint_sides",
           "memory_bound", "memory_demand", "memory_traffic", "min_memory_bytes"]


class EndpointMode(StrEnum):
    """Who drives a collective at the endpoint."""

    GPU = "gpu"
    """GPU-driven (NCCL, MSCCL): kernels on SMs move every step through memory."""
    ENGINE = "engine"
    """An offload engine (ACE): each chunk touches memory once."""


@dataclass(frozen=True)
class MemoryDemand:
    """Per transfer, memory bytes per network byte: read at the sender, read and written at the receiver."""

    src_read: tuple[float, ...]
    dst_read: tuple[float, ...]
    dst_write: tuple[float, ...]


def memory_demand(schedule: Schedule, mode: EndpointMode) -> MemoryDemand:
    """What each transfer of ``schedule`` reads and writes in memory per byte it moves, in ``mode``."""
    transfers = schedule.transfers
    n = len(transfers)
    if mode is EndpointMode.GPU:
        return MemoryDemand(src_read=(1.0,) * n,
                            dst_read=tuple(2.0 if t.op is Op.REDUCE else 0.0 for t in transfers),
                            dst_write=(1.0,) * n)
    collective = schedule.collective
    holds_input = {(rank, chunk) for rank, chunk, _ in collective.initial()}
    kept = set(collective.required())  # what must be in memory at the end
    last_writer: dict[tuple[int, int], int] = {}
    for i, t in enumerate(transfers):
        for c in t.chunks:
            last_writer[(t.dst, c)] = i
    in_engine: set[tuple[int, int]] = set()  # (rank, chunk) already read from memory or received
    src_read, dst_read, dst_write = [], [], []
    for i, t in enumerate(transfers):
        reads = 0
        for c in t.chunks:
            key = (t.src, c)
            if key not in in_engine:
                in_engine.add(key)
                reads += key in holds_input
        local = writes = 0
        for c in t.chunks:
            key = (t.dst, c)
            if key not in in_engine:
                in_engine.add(key)
                local += t.op is Op.REDUCE and key in holds_input
            writes += last_writer[key] == i and key in kept
        k = len(t.chunks)
        src_read.append(reads / k)
        dst_read.append(local / k)
        dst_write.append(writes / k)
    return MemoryDemand(tuple(src_read), tuple(dst_read), tuple(dst_write))


@dataclass(frozen=True)
class MemoryTraffic:
    """Memory bytes a schedule reads and writes per GPU, against the bytes it puts on the network."""

    mode: EndpointMode
    read_bytes: tuple[float, ...]
    write_bytes: tuple[float, ...]
    network_bytes: float
    """Bytes the transfers move (each counted once, however many links it crosses)."""

    @property
    def memory_bytes(self) -> float:
        return sum(self.read_bytes) + sum(self.write_bytes)

    @property
    def per_network_byte(self) -> float:
        """Memory bytes touched per network byte (0 for a schedule that moves nothing)."""
        return self.memory_bytes / self.network_bytes if self.network_bytes else 0.0

    def summary(self) -> dict[str, float | str]:
        return {"endpoint": self.mode.value, "memory_bytes": self.memory_bytes, "network_bytes": self.network_bytes,
                "memory_bytes_per_network_byte": self.per_network_byte}


def memory_traffic(schedule: Schedule, size_bytes: float, mode: EndpointMode) -> MemoryTraffic:
    """The memory traffic of ``schedule`` run at the nccl-tests ``size_bytes`` in ``mode``."""
    demand = memory_demand(schedule, mode)
    chunk_bytes = schedule.collective.chunk_bytes(size_bytes)
    ranks = schedule.collective.num_ranks
    reads, writes = [0.0] * ranks, [0.0] * ranks
    network = 0.0
    for i, t in enumerate(schedule.transfers):
        b = len(t.chunks) * chunk_bytes
        network += b
        reads[t.src] += demand.src_read[i] * b
        reads[t.dst] += demand.dst_read[i] * b
        writes[t.dst] += demand.dst_write[i] * b
    return MemoryTraffic(mode, tuple(reads), tuple(writes), network)


@dataclass(frozen=True)
class EndpointLayout:
    """Where the endpoint resources sit in the fluid network's resource list (-1: the GPU has none)."""

    memory: tuple[int, ...]
    """Per GPU, the resource index of its memory."""
    channels: tuple[int, ...]
    """Per GPU, the resource index of its communication channels."""
    capacities: tuple[float, ...]
    """The capacities (bytes per us) of the resources it adds, in index order from ``base``."""
    base: int


def endpoint_layout(topology: Topology, base: int) -> EndpointLayout:
    """Resources for every declared memory, then every declared channel budget, from index ``base`` on."""
    memory, channels = [-1] * topology.num_gpus, [-1] * topology.num_gpus
    capacities: list[float] = []
    for g in topology.gpus:
        bw = topology.endpoint(g).memory_bandwidth
        if bw is not None:
            memory[g] = base + len(capacities)
            capacities.append(gbps_to_bytes_per_us(bw))
    for g in topology.gpus:
        cap = topology.endpoint(g).channel_capacity
        if cap is not None:
            channels[g] = base + len(capacities)
            capacities.append(gbps_to_bytes_per_us(cap))
    return EndpointLayout(tuple(memory), tuple(channels), tuple(capacities), base)


def endpoint_flows(topology: Topology, schedule: Schedule, mode: EndpointMode, layout: EndpointLayout,
                   ) -> tuple[list[tuple[int, ...]], list[tuple[float, ...] | None]]:
    """Per transfer, its resources (route, then endpoint resources) and their weights (None: all 1)."""
    resources: list[tuple[int, ...]] = []
    weights: list[tuple[float, ...] | None] = []
    channels = {c for c in layout.channels if c >= 0}
    for t, (src_side, dst_side) in zip(schedule.transfers, endpoint_sides(schedule, mode, layout), strict=True):
        # the memories (sender's, receiver's), then the channels: the order the fluid network has always seen
        both = (*src_side, *dst_side)
        extra = [e for e in both if e[0] not in channels] + [e for e in both if e[0] in channels]
        resources.append(t.route + tuple(r for r, _ in extra))
        plain = all(w == 1.0 for _, w in extra)
        weights.append(None if plain else (1.0,) * len(t.route) + tuple(w for _, w in extra))
    return resources, weights


def endpoint_sides(schedule: Schedule, mode: EndpointMode, layout: EndpointLayout,
                   ) -> list[tuple[tuple[tuple[int, float], ...], tuple[tuple[int, float], ...]]]:
    """Per transfer, the endpoint resources it uses at its sender and at its receiver, as (resource, weight) pairs.

    The sender's side holds its memory (what the transfer reads there) and, GPU-driven, its
    channels; the receiver's its memory (reads and writes) and channels. Store-and-forward
    switches (:mod:`taccl_py.store_forward`) put each side on the leg that touches that GPU.
    """
    demand = memory_demand(schedule, mode)
    memory, channels = layout.memory, layout.channels
    gpu_driven = mode is EndpointMode.GPU
    sides: list[tuple[tuple[tuple[int, float], ...], tuple[tuple[int, float], ...]]] = []
    for i, t in enumerate(schedule.transfers):
        src: list[tuple[int, float]] = []
        dst: list[tuple[int, float]] = []
        src_weight = demand.src_read[i]
        dst_weight = demand.dst_read[i] + demand.dst_write[i]
        if memory[t.src] >= 0 and src_weight > 0:
            src.append((memory[t.src], src_weight))
        if memory[t.dst] >= 0 and dst_weight > 0:
            dst.append((memory[t.dst], dst_weight))
        if gpu_driven:
            if channels[t.src] >= 0:
                src.append((channels[t.src], 1.0))
            if channels[t.dst] >= 0:
                dst.append((channels[t.dst], 1.0))
        sides.append((tuple(src), tuple(dst)))
    return sides


def min_memory_bytes(kind: CollectiveKind, num_ranks: int, size_bytes: float, root: int = 0) -> list[float]:
    """Per GPU, the memory bytes any algorithm in any endpoint mode must touch (``size_bytes``: the nccl-tests size).

    Every input a GPU contributes must be read from its memory at least once and
    every result it keeps must be written once (the engine mode meets this for
    rings): Allgather reads its block and writes the N - 1 others (S); ReduceScatter
    reads its whole input and writes its block (S (1 + 1/N)); Allreduce reads and
    writes the buffer (2S); Alltoall reads what it sends and writes what it receives
    (2S (N-1)/N); Broadcast: the root reads S, the others write S; Reduce: every
    rank reads S, the root also writes S.
    """
    n, s = num_ranks, float(size_bytes)
    if n < 2:
        return [0.0] * n
    if kind is CollectiveKind.ALLGATHER:
        return [s] * n
    if kind is CollectiveKind.REDUCESCATTER:
        return [s * (1 + 1 / n)] * n
    if kind is CollectiveKind.ALLREDUCE:
        return [2 * s] * n
    if kind is CollectiveKind.ALLTOALL:
        return [2 * s * (n - 1) / n] * n
    if kind is CollectiveKind.BROADCAST:
        return [s] * n
    return [2 * s if g == root else s for g in range(n)]


def memory_bound(topology: Topology, kind: CollectiveKind, size_bytes: float, root: int = 0
                 ) -> tuple[float, int] | None:
    """The least time the GPUs' declared memory allows (us), and the GPU that binds; None without memory."""
    best: tuple[float, int] | None = None
    for g, need in enumerate(min_memory_bytes(kind, topology.num_gpus, size_bytes, root)):
        bw = topology.endpoint(g).memory_bandwidth
        if bw is not None and need > 0:
            us = need / gbps_to_bytes_per_us(bw)
            if best is None or us > best[0]:
                best = (us, g)
    return best
