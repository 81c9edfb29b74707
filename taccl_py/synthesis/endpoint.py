"""Synthesis that knows the endpoint: GPU memory and communication channels in routing, ordering and choices.

Where the topology declares endpoint limits (``memory_bandwidth``, ``comm_channels`` x
``channel_bandwidth``; docs/workloads.md), the synthesizer counts them in the mode it
synthesizes for (``SynthesisOptions.endpoint``), with the endpoint model's weights
(:mod:`taccl_py.endpoint`):

* **routing** (:func:`gpu_resources`): GPU-driven, every logical edge a piece crosses
  reads it at the sender and writes it at the receiver, and a reduction reads twice
  more there; so each GPU's memory (and its channels, one byte per byte at each end)
  becomes one more capacity row of the routing LP and the integer master beside the
  links. Routes through a relay GPU cost that GPU a write and a read (the extra
  copy), reduction trees cost their receivers three bytes per byte. In engine mode
  a chunk touches memory once wherever it is routed (read once at its source,
  written once where it is kept), so routing has nothing to choose there.
* **ordering** (:func:`endpoint_use`): the greedy orderings' time estimates also
  queue each task's bytes on its GPUs' memory and channels, so the program order
  reflects when memory, not only a link, is free;
* **chunk factors** (:func:`effective_bandwidth`): a piece is sent at the rate its
  GPUs' memory allows, not only its link's, when choosing how finely to pipeline;
* **channels** (:func:`channel_limit`): GPU-driven, the synthesizer spreads its
  connections over no more channels than the GPUs give communication, and a
  baseline that uses more is rebuilt with that many;
* **ranking**: every candidate and baseline is simulated with the endpoint
  resources in the same mode (``Run.sim_options``), so the fastest is chosen under
  the model the report shows.

Without endpoint limits none of this adds anything: routing, ordering and every
time are what they were.
"""

from __future__ import annotations

from collections.abc import Sequence

from solver_models.ordering import EndpointUse, Task
from solver_models.routing import GpuResource
from taccl_py.collectives import CollectiveKind
from taccl_py.endpoint import EndpointMode
from taccl_py.topology import Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["channel_limit", "effective_bandwidth", "endpoint_use", "gpu_resources", "memory_per_network_byte"]

REDUCE_RECEIVE = 3.0
"""Memory bytes a GPU-driven reduction touches at its receiver per byte received (reads 2, writes 1)."""


def channel_limit(topology: Topology, mode: EndpointMode) -> int | None:
    """The fewest communication channels a GPU declares (GPU-driven only; None: no limit)."""
    if mode is not EndpointMode.GPU:
        return None
    counts = [e.comm_channels for e in (topology.endpoint(g) for g in topology.gpus)
              if e.channel_capacity is not None and e.comm_channels is not None]
    return min(counts) if counts else None


def gpu_resources(topology: Topology, mode: EndpointMode, *, reduction: bool) -> tuple[GpuResource, ...]:
    """The GPU resources a phase's routes load (none without limits, or in engine mode).

    ``reduction``: the phase runs on the reversed topology and is played backwards
    as reductions, so a logical edge u -> v there is a transfer v -> u reduced at u:
    u touches 3 bytes per byte, v reads 1.
    """
    if mode is not EndpointMode.GPU or not topology.has_endpoint_limits:
        return ()
    ends = [topology.endpoint(g) for g in topology.gpus]
    out = []
    memory = tuple(e.memory_bandwidth for e in ends)
    if any(m is not None for m in memory):
        out.append(GpuResource("memory", memory, REDUCE_RECEIVE if reduction else 1.0, 1.0))
    channels = tuple(e.channel_capacity for e in ends)
    if any(c is not None for c in channels):
        out.append(GpuResource("channels", channels, 1.0, 1.0))
    return tuple(out)


def endpoint_use(topology: Topology, mode: EndpointMode, tasks: Sequence[Task], *,
                 reduction: bool, after_reduction: bool = False, paths: bool = False) -> EndpointUse | None:
    """How long each task occupies its GPUs' memory and channels (None without limits).

    Resources: GPU g's memory is ``g``, its channels ``N + g``. GPU-driven, the
    weights of :func:`gpu_resources`. Engine (tasks of a tree phase): forward, a
    chunk's source reads it once (shared by the tasks that send it from there) and
    every receiver writes it (``after_reduction``: the Allgather half of an
    Allreduce, whose chunks are already in the engine, reads nothing; ``paths``:
    Alltoall paths, where only the last hop's receiver keeps the chunk); played
    backwards as reductions, every GPU reads its own contribution once (shared by
    the tasks that touch it there) and the chunk's owner writes the result once
    (shared likewise).
    """
    if not topology.has_endpoint_limits:
        return None
    n = topology.num_gpus
    ends = [topology.endpoint(g) for g in topology.gpus]
    memory = [gbps_to_bytes_per_us(e.memory_bandwidth) if e.memory_bandwidth is not None else None for e in ends]
    channels = [gbps_to_bytes_per_us(e.channel_capacity) if e.channel_capacity is not None else None for e in ends]
    src_w, dst_w = _memory_weights(mode, tasks, reduction, after_reduction, paths)
    uses = []
    for i, t in enumerate(tasks):
        use: list[tuple[int, float]] = []
        for gpu, weight in ((t.src, src_w[i]), (t.dst, dst_w[i])):
            if memory[gpu] is not None and weight > 0:
                use.append((gpu, weight * t.bytes / memory[gpu]))  # type: ignore[operator]
        if mode is EndpointMode.GPU:
            for gpu in (t.src, t.dst):
                cap = channels[gpu]
                if cap is not None:
                    use.append((n + gpu, t.bytes / cap))
        uses.append(tuple(use))
    return EndpointUse(tuple(uses), 2 * n)


def _memory_weights(mode: EndpointMode, tasks: Sequence[Task], reduction: bool, after_reduction: bool,
                    paths: bool = False) -> tuple[list[float], list[float]]:
    """Memory bytes per byte at each task's sender and receiver (in the phase's own direction)."""
    count = len(tasks)
    if mode is EndpointMode.GPU:
        return [REDUCE_RECEIVE if reduction else 1.0] * count, [1.0] * count
    # engine: per (gpu, chunk), the tasks that touch it there share its one read (and the owner's one write)
    leaving: dict[tuple[int, tuple[int, ...]], int] = {}  # tasks sending each chunk from each GPU
    for t in tasks:
        leaving[(t.src, t.chunks)] = leaving.get((t.src, t.chunks), 0) + 1
    relays = {t.pred for t in tasks} if paths else set()  # a path task followed by another hop: a relay
    src_w, dst_w = [], []
    for i, t in enumerate(tasks):
        share = 1.0 / leaving[(t.src, t.chunks)]
        root = t.pred < 0
        if not reduction:  # forward: the source reads once, every receiver writes what it keeps
            src_w.append(share if root and not after_reduction else 0.0)
            dst_w.append(0.0 if i in relays else 1.0)
        else:
            # backwards t.dst sends its partial sum to t.src, which reduces it into its own contribution (read
            # once over its receives) and, as the chunk's owner (the root), writes the result once; t.dst reads
            # its own contribution to send it only when it received nothing before (a leaf: sends nothing on here)
            src_w.append(share * (2 if root else 1))
            dst_w.append(0.0 if (t.dst, t.chunks) in leaving else 1.0)
    return src_w, dst_w


def memory_per_network_byte(kind: CollectiveKind, mode: EndpointMode, num_gpus: int) -> float:
    """Memory bytes a GPU touches per byte it sends or receives in a bandwidth-optimal unicast algorithm
    (GPU-driven: Allgather 2, ReduceScatter 4, Allreduce 3, Alltoall and Broadcast 2, Reduce 4; engine:
    about one, N/(N-1))."""
    if mode is EndpointMode.ENGINE:
        return num_gpus / max(1, num_gpus - 1)
    return {CollectiveKind.REDUCESCATTER: 4.0, CollectiveKind.REDUCE: 4.0,
            CollectiveKind.ALLREDUCE: 3.0}.get(kind, 2.0)


def effective_bandwidth(topology: Topology, kind: CollectiveKind, mode: EndpointMode, link_GBps: float) -> float:
    """The rate (GB/s) a piece moves at when the GPUs' memory, touched :func:`memory_per_network_byte` bytes per
    byte, or their channels allow less than the links: what pipelining depth is chosen for."""
    rate = link_GBps
    ends = [topology.endpoint(g) for g in topology.gpus]
    memory = [e.memory_bandwidth for e in ends if e.memory_bandwidth is not None]
    if memory:
        rate = min(rate, min(memory) / memory_per_network_byte(kind, mode, topology.num_gpus))
    limit = [e.channel_capacity for e in ends if e.channel_capacity is not None]
    if limit and mode is EndpointMode.GPU:
        rate = min(rate, min(limit) / 2)
    return rate
