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

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from taccl_py.collectives import CollectiveKind
from taccl_py.schedule import Op, Schedule, network_groups
from taccl_py.topology import Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["EndpointBound", "EndpointLayout", "EndpointMode", "MemoryDemand", "MemoryTraffic", "endpoint_bound",
           "endpoint_flows", "endpoint_layout", "endpoint_sides", "joint_endpoint_bound", "memory_bound",
           "memory_demand", "memory_traffic", "min_memory_bytes", "min_network_bytes"]


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
    """What each transfer of ``schedule`` reads and writes in memory per byte it moves, in ``mode``.

    A network group (switch multicast or in-network reduction) touches each GPU's
    memory once for all its members: see :func:`_per_group`.
    """
    transfers = schedule.transfers
    n = len(transfers)
    if mode is EndpointMode.GPU:
        return _per_group(schedule, mode, MemoryDemand(
            src_read=(1.0,) * n, dst_read=tuple(2.0 if t.op is Op.REDUCE else 0.0 for t in transfers),
            dst_write=(1.0,) * n))
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
    return _per_group(schedule, mode, MemoryDemand(tuple(src_read), tuple(dst_read), tuple(dst_write)))


def _per_group(schedule: Schedule, mode: EndpointMode, demand: MemoryDemand) -> MemoryDemand:
    """Each network group's memory use at each GPU, on the first member that touches that GPU (0 on the rest).

    A group moves its data once: a multicast's sender reads it once, an
    in-network reduction's receiver gets the sum once. GPU-driven every member
    asks the same of a GPU it shares (a reduce's receiver 2 reads and a write),
    so the group needs the largest; in engine mode the one-time reads and writes
    fall on single members, so the group needs their sum. Put on one member, the
    simulator (one flow per group, each resource at its largest weight) and
    :func:`memory_traffic` (the sum over transfers) both count it once.
    """
    groups = network_groups(schedule.transfers)
    if not groups:
        return demand
    combine = max if mode is EndpointMode.GPU else (lambda a, b: a + b)
    transfers = schedule.transfers
    columns = [list(demand.src_read), list(demand.dst_read), list(demand.dst_write)]
    for first, end in groups:
        for side, column in enumerate(columns):
            total: dict[int, float] = {}
            holder: dict[int, int] = {}
            for j in range(first, end):
                gpu = transfers[j].src if side == 0 else transfers[j].dst
                total[gpu] = combine(total[gpu], column[j]) if gpu in total else column[j]
                holder.setdefault(gpu, j)
            for j in range(first, end):
                gpu = transfers[j].src if side == 0 else transfers[j].dst
                column[j] = total[gpu] if holder[gpu] == j else 0.0
    return MemoryDemand(tuple(columns[0]), tuple(columns[1]), tuple(columns[2]))


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


def min_network_bytes(kind: CollectiveKind, num_ranks: int, size_bytes: float) -> tuple[float, float]:
    """(bytes moved, bytes reduced on arrival) that any unicast algorithm needs in all, over every transfer.

    Per element of the buffer: an Allgather (Broadcast) element must reach the
    N - 1 GPUs that lack it, one transfer each; an Alltoall block crosses once;
    a ReduceScatter (Reduce) result combines N contributions, so N - 1
    transfers each reduce into their receiver (a reduce merges two disjoint
    sets of contributions); an Allreduce needs 2(N - 1) transfers per element
    (one-way gossip) of which N - 1 reduce. In bytes, over the nccl-tests size
    S: Allgather, ReduceScatter, Alltoall, Broadcast, Reduce (N-1) S moved
    (ReduceScatter and Reduce: all of it reduced); Allreduce 2 (N-1) S moved,
    (N-1) S reduced. Switch multicast or in-network reduction can do with
    less, so these hold for unicast algorithms only.
    """
    n, s = num_ranks, float(size_bytes)
    if n < 2:
        return 0.0, 0.0
    moved = (n - 1) * s * (2 if kind is CollectiveKind.ALLREDUCE else 1)
    reduced = (n - 1) * s if kind in (CollectiveKind.REDUCESCATTER, CollectiveKind.REDUCE,
                                      CollectiveKind.ALLREDUCE) else 0.0
    return moved, reduced


@dataclass(frozen=True)
class EndpointBound:
    """The least time the GPUs' endpoints allow (us) and why (the bound's explanation)."""

    time_us: float
    explanation: str


def endpoint_bound(topology: Topology, kind: CollectiveKind, size_bytes: float, root: int = 0,
                   mode: EndpointMode | None = None, *, unicast: bool = True) -> EndpointBound | None:
    """The endpoint term of the lower bound; None when the topology declares no endpoint limit.

    Always (any mode): every GPU touches at least :func:`min_memory_bytes` of
    its memory (:func:`memory_bound`). GPU-driven (``mode`` GPU) and
    ``unicast`` (no switch multicast or in-network reduction to use), with
    every GPU declaring the resource: every transfer of b bytes reads b at its
    sender and writes b at its receiver, a reduction reads 2b more, so the
    GPUs together touch at least ``2 moved + 2 reduced`` bytes of
    :func:`min_network_bytes`, at no more than the sum of their memory
    bandwidths; and the channels of both ends carry every byte, ``2 moved`` at
    the sum of the channel capacities. (Time T lets GPU g touch at most
    ``T x bandwidth_g``; summing over g gives the bound.)
    """
    return joint_endpoint_bound(topology, [(kind, size_bytes)], root, mode, unicast=unicast)


def joint_endpoint_bound(topology: Topology, parts: Sequence[tuple[CollectiveKind, float]], root: int = 0,
                         mode: EndpointMode | None = None, *, unicast: bool = True) -> EndpointBound | None:
    """:func:`endpoint_bound` of collectives that run at once: their memory (and channel) bytes add up."""
    if not topology.has_endpoint_limits or not parts:
        return None
    n = topology.num_gpus
    ends = [topology.endpoint(g) for g in topology.gpus]
    best: EndpointBound | None = None
    needs = [min_memory_bytes(kind, n, size, root) for kind, size in parts]
    for g, end in enumerate(ends):
        need = sum(per_gpu[g] for per_gpu in needs)
        if end.memory_bandwidth is not None and need > 0:
            us = need / gbps_to_bytes_per_us(end.memory_bandwidth)
            if best is None or us > best.time_us:
                best = EndpointBound(us, f"memory: GPU {g} must touch its memory for {us:.6g} us at "
                                         f"{end.memory_bandwidth:g} GB/s (every input read once, every result "
                                         "written once)")
    if mode is not EndpointMode.GPU or not unicast or n < 2:
        return best
    totals = [min_network_bytes(kind, n, size) for kind, size in parts]
    moved = sum(m for m, _ in totals)
    reduced = sum(r for _, r in totals)
    memory = [e.memory_bandwidth for e in ends]
    channels = [e.channel_capacity for e in ends]
    if all(bw is not None for bw in memory):
        total = sum(gbps_to_bytes_per_us(bw) for bw in memory if bw is not None)
        touched = 2 * moved + 2 * reduced
        us = touched / total
        if best is None or us > best.time_us:
            best = EndpointBound(us, f"memory (GPU-driven): the GPUs must touch {touched:.6g} bytes of memory in all "
                                     f"(each transfer reads b at its sender and writes b at its receiver, a reduce "
                                     f"reads 2b more) at {sum(b for b in memory if b is not None):g} GB/s together: "
                                     f"{us:.6g} us")
    if all(cap is not None for cap in channels):
        total = sum(gbps_to_bytes_per_us(cap) for cap in channels if cap is not None)
        us = 2 * moved / total
        if best is None or us > best.time_us:
            best = EndpointBound(us, f"channels (GPU-driven): {2 * moved:.6g} bytes through the communication channels "
                                     f"of both ends at {sum(c for c in channels if c is not None):g} GB/s together: "
                                     f"{us:.6g} us")
    return best
