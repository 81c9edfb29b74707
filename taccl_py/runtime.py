"""What a real runtime adds to the raw-link model: protocols, per-step and launch overheads, channels.

The simulator's own model (docs/simulator.md) is the raw link: a transfer waits its
route latency and moves its bytes at the link rate. NCCL (and the MSCCL runtime on
top of it) does not reach that rate and pays more per step. This module describes
those costs and turns them into what the simulator already understands, outside
the event kernel:

* a per-transfer **latency** (the runtime's per-hop step latency of the protocol
  and the link type, replacing the route latency),
* a per-link **weight** (the fluid model's consumption weight, ``1 / fraction``:
  a protocol that reaches a fraction f of a link's rate uses 1/f of the link per
  payload byte; :mod:`taccl_py.fluid`),
* a **launch** overhead added once to the collective's time.

Protocols (NCCL's, as MSCCL XML's ``proto`` names them):

==========  ===========================================  =================
protocol    what moves                                   payload per line
==========  ===========================================  =================
``Simple``  plain stores, a flag per step                all of it
``LL``      8-byte lines: 4 data bytes + 4 flag bytes    1/2
``LL128``   128-byte lines: 120 data bytes + 8 flag      120/128
==========  ===========================================  =================

The figures that are not calibrated come from NCCL's own tuning model,
``src/graph/tuning.cc`` in NVIDIA/nccl (commit 01afd20a77b5804e0ecf1042509dd9d20ebf9e93):
the ring base latencies (``baseLat``: LL 3.6, LL128 10.0, Simple 8.4 us), the
per-hop latencies (``hwLat``, ring: NVLink 0.47 / 1.9 / 3.4, PCI 1.0 / 2.5 / 5.7,
NET 2.7 / 4.0 / 9.6 us for LL / LL128 / Simple), LL's bandwidth factor (1/4 for
Allreduce and multi-machine runs, else 1/3), LL128's (0.92, or 0.7 with one GPU per
machine) and its per-channel cap (``ll128MaxBwPerCh``: 18.8 Broadcast, 12.0 Reduce,
18.3 Allgather, 15.2 ReduceScatter, 16.7 Allreduce GB/s), and the network post overhead that bounds how fast
a ring across machines steps (``getNetOverhead``: 1 us, 2 us on AMD hosts, x3 with Simple). The calibrated figures
(Simple's achievable share of each link type) carry their sources in
:data:`PRESETS`. Units: us, bytes, GB/s of 1e9 bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from taccl_py.collectives import CollectiveKind
from taccl_py.errors import InputError
from taccl_py.units import gbps_to_bytes_per_us

if TYPE_CHECKING:  # the topology module refers back to this one only for types
    from taccl_py.topology import Topology

__all__ = [
    "COPY_KINDS",
    "LINK_CLASSES",
    "MAX_TREE_PIECES",
    "NCCL_ALGORITHM_NAMES",
    "NCCL_MAX_THREADS",
    "NCCL_NVLS_CHANNELS",
    "NCCL_THREAD_THRESHOLD",
    "NVLS_ALGORITHMS",
    "NVLS_ONE_PHASE_KINDS",
    "PRESETS",
    "Protocol",
    "RuntimeModel",
    "TransferCosts",
    "gpus_per_machine",
    "link_class_of",
    "nccl_channels",
    "nccl_nvls_chunk_bytes",
    "nccl_nvls_occupancy",
    "nccl_nvls_pieces",
    "nccl_ring_pieces",
    "nccl_tree_pieces",
    "payload_fraction",
    "post_instant",
    "proxy_posts",
    "runtime_from_dict",
    "runtime_to_dict",
    "simple_step_latency",
    "takes_copy_share",
    "widest_gpu_link",
    "wire_bytes",
    "with_figures",
    "with_launch_offset",
]


class Protocol(StrEnum):
    """NCCL's protocols, spelled as MSCCL XML's ``proto`` attribute."""

    SIMPLE = "Simple"
    LL = "LL"
    LL128 = "LL128"


PROTOCOLS: tuple[Protocol, ...] = (Protocol.LL, Protocol.LL128, Protocol.SIMPLE)
"""In NCCL's order (its tables index protocols LL, LL128, Simple)."""

LINE_BYTES = {Protocol.LL: 8, Protocol.LL128: 128}
"""Bytes of one line on the wire (Simple has no lines)."""
LINE_PAYLOAD_BYTES = {Protocol.LL: 4, Protocol.LL128: 120}
"""Data bytes in one line: LL carries a 4-byte flag per 4 data bytes, LL128 an 8-byte flag per 120."""

LINK_CLASSES = ("nvlink", "pci", "net")
"""NCCL's hardware classes of a hop (its ``NCCL_HW_NVLINK``, ``NCCL_HW_PCI``, ``NCCL_HW_NET``)."""

_KIND_CLASS = {"nvlink": "nvlink", "xgmi": "nvlink", "nvswitch": "nvlink", "pcie": "pci", "pci": "pci",
               "nic": "net", "ib": "net", "net": "net", "ethernet": "net", "roce": "net", "efa": "net"}

# NCCL tuning.cc (commit 01afd20a): ring base latency per protocol and per-hop latency per hardware class
NCCL_BASE_LATENCY_US = {Protocol.LL: 3.6, Protocol.LL128: 10.0, Protocol.SIMPLE: 8.4}
NCCL_HOP_LATENCY_US = {
    "nvlink": {Protocol.LL: 0.47, Protocol.LL128: 1.9, Protocol.SIMPLE: 3.4},
    "pci": {Protocol.LL: 1.0, Protocol.LL128: 2.5, Protocol.SIMPLE: 5.7},
    "net": {Protocol.LL: 2.7, Protocol.LL128: 4.0, Protocol.SIMPLE: 9.6},
}
NCCL_LL128_MAX_BW_PER_CHANNEL = {CollectiveKind.BROADCAST: 18.8, CollectiveKind.REDUCE: 12.0,
                                 CollectiveKind.ALLGATHER: 18.3, CollectiveKind.REDUCESCATTER: 15.2,
                                 CollectiveKind.ALLREDUCE: 16.7, CollectiveKind.ALLTOALL: 18.3}
"""GB/s one channel moves with LL128 (tuning.cc ``ll128MaxBwPerCh``; Alltoall, which the table lacks, as Allgather)."""

# NCCL's buffer sizes (src/include/devcomm.h): NCCL_STEPS slots per connection
NCCL_STEPS = 8
SIMPLE_BUFFER_BYTES = 1 << 22
"""DEFAULT_BUFFSIZE: 4 MiB per connection, NCCL_STEPS steps of 512 KiB."""
LL_BUFFER_BYTES = 8 * 512 * NCCL_STEPS * 16
"""NCCL_LL_LINES_PER_THREAD x NCCL_LL_MAX_NTHREADS x NCCL_STEPS x a 16-byte FIFO line (two LL lines)."""
LL128_BUFFER_BYTES = 120 * 640 * NCCL_STEPS * 8
"""NCCL_LL128_ELEMS_PER_THREAD x NCCL_LL128_MAX_NTHREADS x NCCL_STEPS x 8 bytes."""
RING_CHUNK_STEPS = NCCL_STEPS // 2
"""ALLREDUCE_CHUNKSTEPS (= ALLGATHER_CHUNKSTEPS = REDUCESCATTER_CHUNKSTEPS): a chunk is 4 steps."""
RING_SLICE_STEPS = NCCL_STEPS // 4
"""ALLREDUCE_SLICESTEPS: a slice is 2 steps; a chunk is pipelined as 2 slices."""
MAX_RING_PIECES = 16
"""Deepest chunk pipelining the calibrated ring baselines emit per channel (beyond it the latency share is < 1%)."""
SLICES_PER_CHUNK = RING_CHUNK_STEPS // RING_SLICE_STEPS
"""Simple sends a ring chunk as this many slices (ALLREDUCE_CHUNKSTEPS / ALLREDUCE_SLICESTEPS)."""


def payload_fraction(protocol: Protocol | str) -> float:
    """Share of the bytes on the wire that are data: 1 for Simple, 1/2 for LL, 120/128 for LL128."""
    p = Protocol(protocol)
    if p is Protocol.SIMPLE:
        return 1.0
    return LINE_PAYLOAD_BYTES[p] / LINE_BYTES[p]


def wire_bytes(protocol: Protocol | str, payload: float) -> float:
    """Bytes a protocol puts on the wire for ``payload`` data bytes (whole lines for LL and LL128)."""
    p = Protocol(protocol)
    if p is Protocol.SIMPLE or payload <= 0:
        return float(max(payload, 0.0))
    lines = math.ceil(payload / LINE_PAYLOAD_BYTES[p])
    return float(lines * LINE_BYTES[p])


def chunk_bytes(protocol: Protocol | str, simple_buffer_bytes: int = SIMPLE_BUFFER_BYTES) -> float:
    """Data bytes of one ring chunk per channel (NCCL: buffer / NCCL_STEPS x chunk steps, payload share).
    ``simple_buffer_bytes``: Simple's buffer per connection (NCCL_BUFFSIZE; LL and LL128 keep their own)."""
    p = Protocol(protocol)
    buffer = {Protocol.SIMPLE: simple_buffer_bytes, Protocol.LL: LL_BUFFER_BYTES,
              Protocol.LL128: LL128_BUFFER_BYTES}[p]
    return buffer / NCCL_STEPS * RING_CHUNK_STEPS * payload_fraction(p)


def nccl_ring_pieces(protocol: Protocol | str, size_bytes: float, num_ranks: int, channels: int,
                     simple_buffer_bytes: int = SIMPLE_BUFFER_BYTES) -> int:
    """How many chunk loops NCCL's ring makes per channel for ``size_bytes`` (at most :data:`MAX_RING_PIECES`).

    Each loop moves one chunk per rank per channel; a buffer that needs more loops is pipelined
    through the connection's FIFO, so the per-step latency is paid once per loop and step.
    ``simple_buffer_bytes``: Simple's buffer per connection (NCCL_BUFFSIZE).
    """
    per_loop = chunk_bytes(protocol, simple_buffer_bytes) * max(num_ranks, 1) * max(channels, 1)
    return max(1, min(MAX_RING_PIECES, math.ceil(size_bytes / per_loop)))


NCCL_MAX_THREADS = {Protocol.LL: 512, Protocol.LL128: 640, Protocol.SIMPLE: 512}
"""Threads per channel NCCL gives a ring or tree by protocol (``NCCL_LL_MAX_NTHREADS``, ``NCCL_LL128_MAX_NTHREADS``,
``NCCL_SIMPLE_MAX_NTHREADS``; Simple's ring gets 256 only where the ring is no faster than PCIe)."""
NCCL_THREAD_THRESHOLD = {Protocol.LL: 8, Protocol.LL128: 8, Protocol.SIMPLE: 64}
"""Bytes per thread below which NCCL gives a collective fewer channels (``NCCL_*_THREAD_THRESHOLD``; a ring's LL
threshold is this times the ranks)."""


def nccl_channels(algorithm: str, protocol: Protocol | str, size_bytes: float, num_ranks: int, channels: int) -> int:
    """The channels NCCL runs a collective of ``size_bytes`` on (its buffer's bytes, as nccl-tests counts them).

    A ring or tree starts from all of the communicator's ``channels`` and drops one while the buffer holds fewer
    than ``channels x threads x threshold`` bytes (enqueue.cc ``topoGetAlgoInfo``, NCCL 2.19 on): a ring's LL gets
    every channel from 32 KB a channel on 8 ranks, LL128 from 5 KB, Simple from 32 KB. NVLS runs on its own
    :data:`NCCL_NVLS_CHANNELS`; point-to-point sends (``direct``) are not reduced here (``channels``).
    """
    if algorithm in NVLS_ALGORITHMS:
        return NCCL_NVLS_CHANNELS
    if algorithm not in ("ring", "tree"):
        return max(1, channels)
    p = Protocol(protocol)
    threshold = NCCL_THREAD_THRESHOLD[p] * (max(num_ranks, 1) if algorithm == "ring" and p is Protocol.LL else 1)
    per_channel = NCCL_MAX_THREADS[p] * threshold
    return max(1, min(channels, math.floor(size_bytes / per_channel)))  # NCCL's loop, in closed form


MAX_TREE_PIECES = 256
"""Most chunk steps per channel in which the calibrated Simple tree is simulated (NCCL's own count at 4 GB on 32
channels; beyond, the pipeline's fill and drain are under a 100th of the time on 2 machines of 8 GPUs)."""


def nccl_tree_pieces(size_bytes: float, channels: int, simple_buffer_bytes: int = SIMPLE_BUFFER_BYTES) -> int:
    """How many chunk steps each channel of NCCL's Simple tree takes for ``size_bytes`` (at most
    :data:`MAX_TREE_PIECES`): each loop hands every channel one step of Simple's buffer, 512 KB with NCCL's
    default 4 MiB (enqueue.cc's ``calcCollChunking``, NCCL 2.19 on, which no longer halves the Simple tree's
    chunk for small buffers as 2.18's ``computeColl`` did; ``simple_buffer_bytes`` is NCCL_BUFFSIZE). LL and
    LL128 forward their data line by line, so their steps are not the pipeline's depth (not modelled here)."""
    chunk = simple_buffer_bytes // NCCL_STEPS
    return max(1, min(MAX_TREE_PIECES, math.ceil(size_bytes / (max(channels, 1) * chunk))))


def simple_slice_bytes(chunk: float, simple_buffer_bytes: int = SIMPLE_BUFFER_BYTES) -> float:
    """Bytes of the first slice of a Simple ring step of ``chunk`` bytes (the whole step when it is one slice): at
    least 1/32 of a full slice of 2 steps of Simple's buffer (``simple_buffer_bytes``, NCCL_BUFFSIZE: 32 KiB with
    the default 4 MiB)."""
    least = simple_buffer_bytes // NCCL_STEPS * RING_SLICE_STEPS // 32
    return min(chunk, max(chunk / SLICES_PER_CHUNK, least))


def simple_step_latency(hop_us: float, chunk: float, rate_bytes_per_us: float,
                        simple_buffer_bytes: int = SIMPLE_BUFFER_BYTES) -> float:
    """The part of a Simple step's latency a pipelined ring does not hide.

    Simple moves a step as slices and posts a slice's flag when the slice is written; the next
    rank forwards a slice as soon as its flag arrives. A ring step that sends ``chunk`` bytes at
    ``rate_bytes_per_us`` therefore hides the hop latency behind the slices after the first:
    the step costs ``max(chunk / rate, hop + slice / rate)``, i.e. ``chunk / rate`` plus
    ``max(0, hop - (chunk - slice) / rate)``, which this returns. A one-slice step pays the hop in full.
    ``simple_buffer_bytes`` (NCCL_BUFFSIZE) sets the smallest slice (:func:`simple_slice_bytes`).
    """
    if rate_bytes_per_us <= 0 or chunk <= 0:
        return hop_us
    return max(0.0, hop_us - (chunk - simple_slice_bytes(chunk, simple_buffer_bytes)) / rate_bytes_per_us)


def link_class_of(kind: str) -> str:
    """NCCL hardware class of a link kind: nvlink, pci or net (unknown kinds count as nvlink)."""
    return _KIND_CLASS.get(kind.lower(), "nvlink")


@dataclass(frozen=True)
class TransferCosts:
    """A protocol's costs on one topology, as the simulator applies them (per transfer, per link, once).

    ``hop_latency_us`` (per link class) replaces a transfer's route latency: the class of a route is
    ``net`` when any link on it is, else ``pci`` when any is, else ``nvlink``. ``fraction`` (per link
    class) is the share of a link's rate the protocol reaches: the link's capacity is scaled by it
    (:meth:`link_capacity_us`). ``launch_us`` is added once to the collective's time. ``post_us`` is what
    a rank's proxy thread spends posting one network send or receive (0 on one machine): a transfer over
    the network starts once both proxies have posted it, each proxy posting one after another.
    """

    protocol: Protocol
    hop_latency_us: Mapping[str, float]
    fraction: Mapping[str, float]
    launch_us: float
    model: str = ""
    post_us: float = 0.0

    def route_class(self, topology: Topology, route: Sequence[int]) -> str:
        classes = {link_class_of(topology.links[i].kind) for i in route}
        for c in ("net", "pci"):
            if c in classes:
                return c
        return "nvlink"

    def posts(self, topology: Topology, route: Sequence[int]) -> bool:
        """Whether a transfer along ``route`` waits for the proxies to post it (it crosses the network)."""
        return self.post_us > 0 and self.route_class(topology, route) == "net"

    def route_latency_us(self, topology: Topology, route: Sequence[int]) -> float:
        """The runtime's per-step latency for a transfer along ``route``."""
        return self.hop_latency_us[self.route_class(topology, route)]

    def link_capacity_us(self, topology: Topology) -> list[float]:
        """Every link's capacity (bytes/us) at the share of its class the protocol reaches.

        The share depends only on the link's class, so every flow on a link sees the same
        fraction of it: scaling the capacity gives exactly the max-min rates of a per-flow
        consumption weight ``1 / fraction``, with no weights to carry through the fluid solve.
        """
        return [gbps_to_bytes_per_us(link.bandwidth) * self.fraction[link_class_of(link.kind)]
                for link in topology.links]


def proxy_posts(posted: list[float], pairs: Sequence[tuple[int, int]], now: float, post_us: float) -> list[float]:
    """When the sends over the network that became ready together at ``now`` can start, one per (rank, peer) of
    ``pairs`` (in program order); updates ``posted`` (per rank, when its proxy has posted all it was asked).

    Each post costs ``post_us``. A proxy's progress loop posts first what needs nothing (the receives: receives
    are posted ahead of the data), then the sends, which wait for the receiver's go-ahead: every receive of
    ``pairs`` is posted, in order, after what its rank's proxy posted before; then every send, no earlier than
    ``now`` and after what its proxy posted before. A send starts once both are posted. Posting the receives of
    an instant first makes the result independent of the order in which the instant's transfers became ready
    (and invariant when the ranks are translated: :mod:`taccl_py.symmetry`)."""
    received = []
    for _, peer in pairs:
        posted[peer] += post_us
        received.append(posted[peer])
    starts = []
    for (rank, _), receive in zip(pairs, received, strict=True):
        posted[rank] = max(now, posted[rank]) + post_us
        starts.append(max(posted[rank], receive))
    return starts



def post_instant(pending: list[int], pair_of: Callable[[int], tuple[int, int]], posted: list[float], now: float,
                 post_us: float) -> list[tuple[int, float]]:
    """The transfers ``pending`` (emptied) that became ready at ``now`` and wait for the proxies' posts, in program
    order (by index), each with the time it starts (:func:`proxy_posts` of their (rank, peer), ``pair_of``): what
    every simulator does at the end of an instant."""
    order = sorted(pending)
    pending.clear()
    return list(zip(order, proxy_posts(posted, [pair_of(i) for i in order], now, post_us), strict=True))

NCCL_NVLS_CHANNELS = 16
"""Channels NCCL's NVLS algorithm runs on (``NCCL_NVLS_NCHANNELS``, 16 on H100: enough for its peak)."""
NCCL_NVLS_MAX_CHUNK_BYTES = 128 << 10


NCCL_ALGORITHM_NAMES = ("ring", "tree", "nvls", "nvls-tree", "direct")
"""The names of NCCL's algorithms as the baselines build them (``direct``: its point-to-point Alltoall), which a run
can be said to have allowed (a fit's ``--algorithm``, a fidelity case's ``algorithms``)."""

NVLS_ALGORITHMS = frozenset({"nvls", "nvls-tree"})
"""NCCL's algorithms on NVLink SHARP (NVLS inside one machine, NVLSTree across machines): Simple only, with the
NVLS costs of :meth:`RuntimeModel.costs` on NVLink."""


def gpus_per_machine(topology: Topology) -> int:
    """GPUs in a machine of ``topology`` (its first; all of them when it names no machines)."""
    return max(1, len(topology.machines[0]) if topology.machines else topology.num_gpus)


def nccl_nvls_chunk_bytes(size_bytes: float, ranks: int, channels: int = NCCL_NVLS_CHANNELS) -> int:
    """The chunk NCCL's NVLS Allreduce moves per step at ``size_bytes`` (enqueue.cc: 128 KB,
    halved to 64, 32 and 16 KB below 64, 8 and 2 times ``channels x ranks`` such chunks of the larger size).

    ``ranks`` is NVLS's heads: the GPUs of one machine. Across machines NCCL also caps the chunk at 32 KB when
    its NVLS bandwidth estimate is low; that is not modelled.
    """
    ops = max(channels * ranks, 1)
    chunk = NCCL_NVLS_MAX_CHUNK_BYTES
    for times, smaller in ((64, 64 << 10), (8, 32 << 10), (2, 16 << 10)):
        if size_bytes < times * ops * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def nccl_nvls_occupancy(size_bytes: float, ranks: int, channels: int = NCCL_NVLS_CHANNELS) -> float:
    """The share of NVLS's channels that carry data at ``size_bytes``.

    NCCL's NVLS (and NVLSTree) Allreduce loop hands each channel ``ranks`` chunks of the size
    :func:`nccl_nvls_chunk_bytes` picks and does not shrink them to spread a small buffer (the ring's loop does):
    below ``channels x ranks x chunk`` bytes only ``ceil(size / (ranks x chunk))`` channels work, each on a
    whole block, so the collective takes about as long as at the loop's size. ``ranks`` is NVLS's heads (the GPUs
    of one machine). From 2 MB :func:`nccl_nvls_pieces` counts the loops instead.
    """
    heads = max(ranks, 1)
    chunk = nccl_nvls_chunk_bytes(size_bytes, heads, channels)
    active = min(channels, max(1, math.ceil(size_bytes / (heads * chunk))))
    return active / channels


def nccl_nvls_pieces(size_bytes: float, ranks: int, channels: int = NCCL_NVLS_CHANNELS, *,
                     blocks: int | None = None) -> int:
    """How many chunk steps each block takes under NVLS: ``size / (blocks x channels x chunk)``, at least 1.

    ``blocks``: the collective's blocks (every rank's, across machines for NVLSTree); None: ``ranks``.
    """
    chunk = nccl_nvls_chunk_bytes(size_bytes, ranks, channels)
    return max(1, math.ceil(size_bytes / (max(blocks or ranks, 1) * channels * chunk)))


@dataclass(frozen=True)
class RuntimeModel:
    """A runtime's costs on a machine family: the calibrated figures plus NCCL's published ones.

    ``efficiency`` (per link class, 0 < e <= 1): the share of the raw link rate the Simple protocol
    reaches (calibrated, see ``sources``). ``hop_latency_us`` and ``launch_us`` (per protocol) default
    to NCCL's tuning model. ``channels``: the channels (threadblocks) the runtime gives a collective on
    each GPU; with LL128 they cap what one GPU drives at ``channels x ll128MaxBwPerCh``.
    """

    name: str
    efficiency: Mapping[str, float]
    channels: int = 24
    hop_latency_us: Mapping[str, Mapping[Protocol, float]] = field(default_factory=lambda: NCCL_HOP_LATENCY_US)
    launch_us: Mapping[Protocol, float] = field(default_factory=lambda: dict(NCCL_BASE_LATENCY_US))
    sources: tuple[str, ...] = ()
    fitted: Mapping[str, Any] | None = None
    """What ``taccl profile fit --runtime`` fitted (files, figures, residuals), None when nothing was fitted."""
    ll128_channels: float | None = None
    """Channels' worth of LL128 bandwidth one GPU drives (the cap is this x ``ll128MaxBwPerCh``); None: ``channels``."""
    nvls_efficiency: float | None = None
    """Share of the NVLink rate NCCL's NVLS algorithm reaches (NVLink SHARP); None: the NVLink efficiency. With
    :attr:`nvls_half_chunk_bytes`, the share its largest chunks would reach (see there)."""
    nvls_latency_us: float = 0.0
    """NVLS's fixed cost per collective beyond Simple's launch overhead (us; tuning.cc gives NVLS a latency of its
    own, 25 us on NVLink, where a ring pays a launch and per-step latencies)."""
    nvls_half_chunk_bytes: float = 0.0
    """NVLS moves its data in chunks whose size NCCL picks by the size (:func:`nccl_nvls_chunk_bytes`), each with a
    fixed cost: its share is ``nvls_efficiency x c / (c + this)`` for chunks of ``c`` bytes (0: no chunk cost)."""
    nvls_tree_share: float = 1.0
    """Share of NVLS's own NVLink rate (:attr:`nvls_efficiency`, chunk cost included) that the NVLS phases of NCCL's
    NVLSTree reach (1: the same). NVLSTree runs NVLS inside each machine and a tree over the NICs on the same
    channels, so its NVLS phases may move data more slowly than NVLS alone; fitted by ``taccl profile fit
    --runtime --class nvls-tree``."""
    tree_caps: bool = False
    """Cap trees at tuning.cc's ``maxTreeBw`` per GPU (figures of the NCCL of the A100 era; later NCCLs raised them)."""
    simple_buffer_bytes: int = SIMPLE_BUFFER_BYTES
    """Simple's buffer per connection (NCCL_BUFFSIZE, 4 MiB by default): a step is an eighth of it, so it sets the
    size of the ring's chunks, their smallest slice and the tree's chunk steps. A setting of the runs, not a
    calibrated figure: Google's A3 Mega profile sets 8 MiB."""
    protocols: tuple[Protocol, ...] | None = None
    """The protocols the runs allow (NCCL_PROTO), None: all. Another setting of the runs: NCCL's collectives run
    only these (Alltoall, NCCL's point-to-point sends, picks LL or Simple by its threshold whatever NCCL_PROTO
    says). A model fitted on runs of one protocol keeps to it: the others' figures were never fitted."""
    net_overhead_us: float = 1.0
    """Least time per step within a machine of a pipelined ring that spans machines, and the proxy's cost per posted
    network send or receive (tuning.cc ``getNetOverhead``, NCCL 2.19 on: 1 us on Intel hosts, 2 us on AMD ones;
    three times that per ring step with Simple)."""
    copy_efficiency: Mapping[str, float] = field(default_factory=dict)
    """Per link class, Simple's share for collectives that only copy (:data:`COPY_KINDS`); a class not named
    here takes ``efficiency``. A reduction's step also reads the local buffer and adds, so the same channels
    move its data more slowly than a copy's."""
    alltoall_net_share: float = 1.0
    """Share of the network's own share (``efficiency`` or ``copy_efficiency`` of ``net``) that Alltoall's traffic
    over the network reaches (1: the same). In an Alltoall every GPU sends to every GPU of the other machines at
    once, so each NIC exchanges with all the others' NICs at the same time, where a ring's NIC streams to one;
    on NDmv4 NCCL's Alltoall moved 20.2 GB/s per NIC where its rings move 23.3. Applies to every Alltoall across
    machines (NCCL's point-to-point and a synthesized or XML schedule alike: the figure is fitted on NCCL's, and a
    schedule's own traffic over the NICs is not told apart); other collectives whose NICs exchange with many peers
    at once (a direct Allgather) have no figure of their own. Fitted by ``taccl profile fit --runtime --class
    net-alltoall``."""

    def __post_init__(self) -> None:
        if self.protocols is not None:  # NCCL's order, whatever order they were given in
            object.__setattr__(self, "protocols", tuple(p for p in PROTOCOLS if p in self.protocols))

    def costs(self, protocol: Protocol | str, kind: CollectiveKind, topology: Topology, *,
              algorithm: str | None = None, size_bytes: float | None = None) -> TransferCosts:
        """The per-transfer costs of ``protocol`` for ``kind`` on ``topology``.

        ``algorithm`` ``tree`` applies tuning.cc's tree refinements (90 % of the share, at most ``maxTreeBw``
        per GPU when :attr:`tree_caps`, LL at 1/3.8, LL128 at 7/9 on one machine, and the correction factor
        of ``size_bytes``);
        ``nvls`` and ``nvls-tree`` (:data:`NVLS_ALGORITHMS`) Allreduce use the NVLS efficiency on NVLink when the
        model has one (at the chunk size NCCL picks for ``size_bytes`` when :attr:`nvls_half_chunk_bytes` is set),
        scale every class's share by the share of NVLS's channels that hold data at ``size_bytes``
        (:func:`nccl_nvls_occupancy`) and add :attr:`nvls_latency_us` to the launch; ``nvls`` Allgather and ReduceScatter (one phase,
        :data:`NVLS_ONE_PHASE_KINDS`) take the NVLink copy share and Simple's launch; ``nvls-tree``'s network part, a tree, gets a tree's
        :data:`NCCL_TREE_SHARE` of the network's share, and its NVLink part :attr:`nvls_tree_share` of NVLS's.
        """
        p = Protocol(protocol)
        multi_machine = len(topology.machines) > 1
        per_gpu = gpus_per_machine(topology)
        lanes = self.channels if self.ll128_channels is None else self.ll128_channels
        fractions: dict[str, float] = {}
        occupancy = nccl_nvls_occupancy(size_bytes, per_gpu) if (  # idle channels below NVLS's loop size
            algorithm in NVLS_ALGORITHMS and kind not in NVLS_ONE_PHASE_KINDS and size_bytes) else 1.0
        for c in LINK_CLASSES:
            base = self.efficiency.get(c, 1.0)
            if takes_copy_share(kind, algorithm, c):
                base = self.copy_efficiency.get(c, base)
            elif algorithm in NVLS_ALGORITHMS and c == "nvlink" and self.nvls_efficiency is not None:
                base = self.nvls_efficiency
                if self.nvls_half_chunk_bytes > 0 and size_bytes:
                    chunk = nccl_nvls_chunk_bytes(size_bytes, per_gpu)
                    base *= chunk / (chunk + self.nvls_half_chunk_bytes)
            base *= occupancy
            if algorithm == "nvls-tree":
                base *= NCCL_TREE_SHARE if c == "net" else self.nvls_tree_share if c == "nvlink" else 1.0
            if kind is CollectiveKind.ALLTOALL and c == "net" and multi_machine:
                base *= self.alltoall_net_share
            widest = widest_gpu_link(topology, c)
            if algorithm == "tree":
                fractions[c] = _tree_share(p, base, widest if self.tree_caps else None, lanes, kind,
                                           multi_machine=len(topology.machines) > 2, one_machine=not multi_machine,
                                           size_bytes=size_bytes)
            elif p is Protocol.LL:
                share = 0.25 if multi_machine or kind in (CollectiveKind.ALLREDUCE, CollectiveKind.REDUCE) else 1 / 3
                fractions[c] = base * share
            elif p is Protocol.LL128:
                fraction = base * (0.7 if per_gpu < 2 else 0.92)
                cap = lanes * NCCL_LL128_MAX_BW_PER_CHANNEL.get(kind, 18.3)
                if widest is not None and widest > 0:
                    fraction = min(fraction, cap / widest)
                fractions[c] = fraction
            else:
                fractions[c] = base
        hops = {c: self.hop_latency_us.get(c, NCCL_HOP_LATENCY_US[c])[p] for c in LINK_CLASSES}
        two_phase_nvls = algorithm in NVLS_ALGORITHMS and kind not in NVLS_ONE_PHASE_KINDS
        launch = self.launch_us[p] + (self.nvls_latency_us if two_phase_nvls else 0.0)
        return TransferCosts(p, hops, fractions, launch, self.name, self.net_overhead_us if multi_machine else 0.0)


NVLS_ONE_PHASE_KINDS = frozenset({CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER})
"""NVLS collectives of one phase (the switches multicast each block, or sum it into its owner): priced as a copy,
at the NVLink copy share (:attr:`RuntimeModel.copy_efficiency`: the switch adds, not the GPU), each block one
stream (nothing to overlap, so no chunk steps) and no NVLS latency beyond Simple's launch. Allreduce runs both phases
at once and keeps :attr:`RuntimeModel.nvls_efficiency`, the chunk cost and :attr:`RuntimeModel.nvls_latency_us`.
Reasoned, not checked against a run: no published log of NCCL running NVLS Allgather or ReduceScatter was found (the
Together host's logs with NVLS enabled ran its ring for them; docs/runtime.md, "NVLS of one phase")."""

COPY_KINDS = frozenset({CollectiveKind.ALLGATHER, CollectiveKind.ALLTOALL, CollectiveKind.BROADCAST})
"""Collectives whose steps only copy (no reduction): :attr:`RuntimeModel.copy_efficiency` applies to them."""


def takes_copy_share(kind: CollectiveKind, algorithm: str | None, link_class: str) -> bool:
    """Whether ``algorithm`` running ``kind`` moves ``link_class``'s data at the copy share
    (:attr:`RuntimeModel.copy_efficiency`): the collectives of :data:`COPY_KINDS`, and NVLS of one phase on NVLink
    (:data:`NVLS_ONE_PHASE_KINDS`)."""
    return kind in COPY_KINDS or (algorithm in NVLS_ALGORITHMS and kind in NVLS_ONE_PHASE_KINDS
                                  and link_class == "nvlink")


NCCL_TREE_SHARE = 0.9
"""tuning.cc: a tree reaches 90 % of the bus bandwidth a ring does (``busBw * .9``); NVLSTree's network part, a
tree, too."""

# tuning.cc: trees stop at maxTreeBw per GPU (more than two machines / at most two), LL128 on A100 a little higher
NCCL_MAX_TREE_BW = {(True, Protocol.LL128): 105.0, (True, None): 80.0, (False, Protocol.LL128): 130.0,
                    (False, None): 110.0}
NCCL_TREE_CORRECTION = {
    Protocol.LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0),
    Protocol.LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0),
    Protocol.SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),
}
"""tuning.cc ``treeCorrectionFactor``: trees' bandwidth factor per power of two of the size, 64 B to 128 MB."""


def _tree_share(p: Protocol, base: float, widest: float | None, lanes: float, kind: CollectiveKind, *,
                multi_machine: bool, one_machine: bool, size_bytes: float | None) -> float:
    """A link class's share for NCCL's tree (tuning.cc's tree refinements, per GPU link of the class).

    ``widest`` None: no ``maxTreeBw`` cap (nor LL128's per-channel cap).
    """
    cap = NCCL_MAX_TREE_BW[(multi_machine, Protocol.LL128 if p is Protocol.LL128 else None)]
    share = NCCL_TREE_SHARE * base if widest is None or widest <= 0 else min(NCCL_TREE_SHARE * base, cap / widest)
    if p is Protocol.LL:
        share /= 3.8
    elif p is Protocol.LL128:
        share *= 7 / 9 if one_machine else 0.915
        if widest is not None and widest > 0:
            share = min(share, lanes * NCCL_LL128_MAX_BW_PER_CHANNEL.get(kind, 18.3) * 7 / 9 / widest)
    if size_bytes is not None and size_bytes >= 64:
        log_size = int(math.log2(size_bytes / 64))
        if log_size < len(NCCL_TREE_CORRECTION[p]):
            share *= NCCL_TREE_CORRECTION[p][log_size]
    return share


def widest_gpu_link(topology: Topology, link_class: str) -> float | None:
    """The largest bandwidth of a link of ``link_class`` that leaves a GPU (None when there is none)."""
    widest = None
    for link in topology.links:
        if topology.is_gpu(link.src) and link_class_of(link.kind) == link_class:
            widest = link.bandwidth if widest is None else max(widest, link.bandwidth)
    return widest


_NCCL_SOURCE = ("per-hop and launch latencies, LL / LL128 factors: NVIDIA/nccl src/graph/tuning.cc "
                "(commit 01afd20a77b5804e0ecf1042509dd9d20ebf9e93)")
_H100_NET = ("net (per-step latency per protocol, Simple efficiency): fitted by `taccl profile fit --runtime --per-rank "
             "tests/data/nccl_tests/nccl_tests_309_h100x2_xe9680_all_reduce.log@512B:256KB --per-rank "
             "'tests/data/nccl_tests/nccl_tests_309_h100x2_ring_all_reduce.log@64MB:8GB#ring' --rows even --class net "
             "--into tests/data/nccl_tests/dgx-h100x2-nvls-start.json -o FILE` (after the NVLink and NVLS fits; from "
             "tuning.cc's latencies and 48-49 GB/s per 400 Gb/s NDR NIC of 50 GB/s, 0.97: NVIDIA, "
             "https://github.com/NVIDIA/nccl-tests/issues/267) on every other row of two 2 x 8 H100 runs of "
             "nccl-tests#309 (https://github.com/NVIDIA/nccl-tests/issues/309), one GPU per rank, 8 x 400 Gb/s "
             "InfiniBand NICs per machine: the Dell XE9680 run's (NCCL 2.26.2, NCCL's default algorithm, its tree at "
             "these sizes) from 512 B to 256 KB, and the ring-only run's from 64 MB: 4.7 % rms over the 9 rows "
             "(worst 7.7 %); 0.9465 of 50 GB/s is 47.3 GB/s per NIC; LL128's step is only bounded (one row runs it); "
             "the other rows of both runs are held out")

_H100_NVLS_TREE = ("nvls-tree (the share of NVLS's NVLink rate NVLSTree's NVLS phases reach): fitted by `taccl profile fit "
                   "--runtime --per-rank 'tests/data/nccl_tests/nccl_tests_309_h100x2_xe9680_all_reduce.log@2MB:16GB"
                   "#nvls-tree' --rows even --class nvls-tree --into dgx-h100x2-nvls -o FILE` (after the network fit; "
                   "from 1, NVLS's own rate) on every other row from 2 MB of the Dell XE9680 2 x 8 H100 run of "
                   "nccl-tests#309 (https://github.com/NVIDIA/nccl-tests/issues/309; NCCL 2.26.2, one GPU per rank, "
                   "NVLSTree at these sizes per NCCL's maintainer in the thread): 0.9278, 4.3 % rms in time over the 7 rows "
                   "(worst 9.6 %, the 2 MB row); with NVLS's own rate the run's largest rows were 10-12 % fast (2 machines reached "
                   "one machine's NVLS busbw); the odd rows and the 4 and 8-machine runs of the thread are held out")

_A100_FIT = ("nvlink (per-step latency per protocol, LL's launch latency, Simple efficiency and its share for copies, "
             "LL128 cap): fitted by `taccl profile fit --runtime tests/data/nccl_tests/azure_nda100v4_all_reduce.csv "
             "--per-rank tests/data/nccl_tests/azure_nda100v4_all_reduce.csv@2MB:8GB --per-rank "
             "tests/data/nccl_tests/mscclpp_ndmv4.csv --select machines=1 --collective allreduce,allgather,alltoall "
             "--overlap --into tests/data/nccl_tests/dgx-a100-offset-fit.json -o FILE` (from the figures of the earlier "
             "fit that added a launch offset, 25.09 us, to the -g 8 rows, itself from tuning.cc's figures) on the "
             "published all_reduce_perf curve of Azure ND A100 v4 (8 x A100-SXM4-80GB, NCCL 2.18.5, 1 KB..8 GB, -g 8 in "
             "one process: https://github.com/Azure/AI-benchmarking-guide/blob/"
             "3f6a4d7c08c6fb1996437ff8d3aeb17a60d3ffd2/Azure_Results/ND_A100_v4_results.md) where the GPUs bind (from "
             "2 MB) together with the one-GPU-per-rank Allreduce, Allgather and Alltoall of Azure NDm A100 v4 at 1 KB "
             "and 1 GB (NCCL 2.17.1: https://github.com/microsoft/mscclpp/blob/"
             "7f3f36696f99719f72a5171baccc9465ba08a657/docs/performance-ndmv4.md), which, running LL over 7 ring steps "
             "(Allgather) and one point-to-point step (Alltoall), tell LL's launch latency (8.691 us) from its per-step "
             "one; then the -g 8 host's cost, overlapping the GPUs' work, on every row of the curve: 42.81 us + 0.32 us "
             "per channel (the host the longer in 11 rows, up to 1 MB): 2.8 % rms in time over the figures' 19 rows, and "
             "over the curve's 24 with the host (worst 10.1 %, its 128 MB row); the host is that harness's, not kept "
             "here")

_A100_NET = ("net (per-step latency per protocol, Simple efficiency): fitted by `taccl profile fit --runtime --per-rank "
             "tests/data/nccl_tests/mscclpp_ndmv4.csv --select machines=2 --collective allreduce --class net --into "
             "tests/data/nccl_tests/dgx-a100x2-start.json -o FILE` (from tuning.cc's latencies and 24 of 25 GB/s per "
             "HDR NIC: S. Jeaugey, NVIDIA, https://github.com/NVIDIA/nccl-tests/issues/119) on the one-GPU-per-rank "
             "Allreduce of 2 x Azure NDm A100 v4 (one 200 Gb/s HDR NIC per GPU, same page) at 1 KB, 1 GB and 4 GB: "
             "2.1 % rms (worst 3.3 %); LL's latency (8.87 us, from 2.7) rests on its 1 KB row only (a tree row), "
             "LL128's (tuning.cc's 4.0) is only bounded; 0.9306 of 25 GB/s is 23.3 GB/s per NIC")

_A100_NET_ALLTOALL = ("net-alltoall (the share of the network's rate Alltoall's traffic reaches): fitted by `taccl profile "
                      "fit --runtime --per-rank tests/data/nccl_tests/mscclpp_ndmv4.csv@4GB:4GB --select machines=2 "
                      "--collective alltoall --class net-alltoall --into dgx-a100x2 -o FILE` (after the network fit; "
                      "from 1) on the one-GPU-per-rank Alltoall of 2 x Azure NDm A100 v4 at 4 GB (same page): 0.8672, "
                      "20.2 GB/s per NIC where the Allreduce rows give 23.3; its 1 KB and 1 GB rows are held out (the "
                      "1 GB row checks only that the share holds across sizes: both rows are bandwidth-bound)")

_H100_FIT = ("nvlink (per-step latency per protocol, Simple efficiency and its share for copies, LL128 cap): fitted by "
             "`taccl profile fit --runtime tests/data/nccl_tests/together_h100x8_all_reduce_ring.log "
             "tests/data/nccl_tests/together_h100x8_all_gather_ring.log --per-rank "
             "tests/data/nccl_tests/together_h100x8_all_reduce_ring.log@4MB:8GB --per-rank "
             "tests/data/nccl_tests/together_h100x8_all_gather_ring.log@8MB:8GB --per-rank "
             "tests/data/nccl_tests/dgxc_h100x8_all_reduce.log@64B:512KB --algorithm ring --overlap --into "
             "tests/data/nccl_tests/dgx-h100-offset-fit.json -o FILE` (from the figures of the earlier fit that added a "
             "launch offset to the -g 8 rows, itself from tuning.cc's latencies and NVLink 370 of 450 GB/s: "
             "S. Jeaugey, NVIDIA, https://github.com/NVIDIA/nccl-tests/issues/212) on the one-GPU-per-process "
             "all_reduce_perf of NVIDIA DGX Cloud's 8 x H100 at 64 B..512 KB (https://github.com/NVIDIA/dgxc-benchmarking/"
             "blob/46e420155bec6e791fd720f1ce7430781271d5e6/nccl/README.md; taken to run the ring there: the log does not "
             "say; from 2 MB its times match Azure's NVLS-only run) and on the sizes where the GPUs bind Together AI's "
             "ring-only all_reduce_perf (from 4 MB) and all_gather_perf (from 8 MB) of 8 x H100 SXM (NCCL 2.26.2, "
             "-g 8 in one process: https://github.com/togethercomputer/together-nccl-tests/tree/"
             "6698e53c1dc519f8ab54f72193630849f5abf178/benchmarks/H100/results/20260305_220944; the first size whose "
             "time is 10 % above the most the log takes up to 1 MB): 6.4 % rms over those 37 rows (worst 27.1 %, DGX "
             "Cloud's 4 KB row, 23.6 us between 17.1 and 17.4); that host's harness, whose launches overlap the "
             "GPUs' work, is fitted after them on the whole of both logs (35.51 us + 0.2174 us per channel, 3.7 % rms "
             "over 56 rows, not kept here); the same host's reduce_scatter_perf is held out")

_H100_NVLS = ("nvls (NVLS's latency beyond Simple's launch, its share of NVLink with chunks of any size, the chunk at "
              "which it reaches half that share): fitted by `taccl profile fit --runtime "
              "tests/data/nccl_tests/azure_ndh100v5_all_reduce.csv --per-rank "
              "tests/data/nccl_tests/dgxc_h100x8_all_reduce.log@2MB:16GB --rows even --class nvls --algorithm nvls "
              "--into tests/data/nccl_tests/dgx-h100-nvls-start.json -o FILE` (after the NVLink fit; from the share "
              "0.623 at which the nvls baseline gives the maintainers' 'peak busBw of ~480GB/s (algbw ~275GB/s)' on 8 GPUs, S. Jeaugey, NVIDIA, "
              "https://github.com/NVIDIA/nccl-tests/issues/212) on every other row of Azure ND H100 v5's all_reduce_perf "
              "with NCCL_ALGO=NVLS (NCCL 2.18.5, 1 KB..8 GB, -g 8: https://github.com/Azure/AI-benchmarking-guide/blob/"
              "f350e7e65b82cfcb9220b32b582bc34342d9c1a6/Azure%20Results/ND_H100_v5_results.md) and of DGX Cloud's "
              "one-GPU-per-process all_reduce from 2 MB (NCCL's choice there is NVLS: its busbw is within 6 % of "
              "Azure's NVLS-only run at every size from 2 MB), simulated in NCCL's NVLS chunk steps (enqueue.cc: 16 to "
              "128 KB by size) on the channels that hold data (below 2 MB NCCL's NVLS loop leaves some idle): 5.2 % rms "
              "over the 19 rows (worst 15.7 %, Azure's 64 KB row); the launch offset fitted on the -g 8 rows (0.51 us) "
              "is that host's, not kept here; the other rows of both runs are held out")

PRESETS: dict[str, RuntimeModel] = {
    "dgx-a100": RuntimeModel(
        name="dgx-a100", efficiency={"nvlink": 0.7709, "pci": 1.0, "net": 0.9306}, channels=24,
        hop_latency_us={"nvlink": {Protocol.LL: 0.5762, Protocol.LL128: 2.160, Protocol.SIMPLE: 13.42},
                        "pci": dict(NCCL_HOP_LATENCY_US["pci"]),
                        "net": {Protocol.LL: 8.87, Protocol.LL128: 4.0, Protocol.SIMPLE: 9.6}},
        launch_us={**NCCL_BASE_LATENCY_US, Protocol.LL: 8.691},
        ll128_channels=7.411, tree_caps=True, copy_efficiency={"nvlink": 0.8616}, net_overhead_us=2.0,
        alltoall_net_share=0.8672, sources=(_A100_FIT, _A100_NET, _A100_NET_ALLTOALL, _NCCL_SOURCE)),
    "dgx-h100": RuntimeModel(
        name="dgx-h100", efficiency={"nvlink": 0.8138, "pci": 1.0, "net": 0.9465}, channels=32,
        hop_latency_us={"nvlink": {Protocol.LL: 0.9652, Protocol.LL128: 0.5686, Protocol.SIMPLE: 3.049},
                        "pci": dict(NCCL_HOP_LATENCY_US["pci"]),
                        "net": {Protocol.LL: 6.389, Protocol.LL128: 7.636, Protocol.SIMPLE: 9.6}},
        ll128_channels=13.01, copy_efficiency={"nvlink": 0.7615}, nvls_efficiency=0.6618, nvls_latency_us=11.67,
        nvls_half_chunk_bytes=7184.0, nvls_tree_share=0.9278,
        sources=(_H100_FIT, _H100_NVLS, _H100_NET, _H100_NVLS_TREE, _NCCL_SOURCE)),
}
"""Calibrated runtime models of the shipped machine families (their clusters share them)."""


def runtime_to_dict(model: RuntimeModel) -> dict[str, Any]:
    """The ``runtime`` object of a topology file: a preset by name, or every figure."""
    preset = PRESETS.get(model.name)
    if preset is not None and replace(preset, simple_buffer_bytes=model.simple_buffer_bytes,
                                      protocols=model.protocols) == model:
        return {"preset": model.name, **_run_settings(model)}
    data: dict[str, Any] = {"name": model.name, "efficiency": dict(model.efficiency), "channels": model.channels,
                            "hop_latency_us": {c: {p.value: v for p, v in lat.items()}
                                               for c, lat in model.hop_latency_us.items()},
                            "launch_us": {p.value: v for p, v in model.launch_us.items()},
                            "sources": list(model.sources)}
    if model.ll128_channels is not None:
        data["ll128_channels"] = model.ll128_channels
    if model.nvls_efficiency is not None:
        data["nvls_efficiency"] = model.nvls_efficiency
    if model.nvls_latency_us:
        data["nvls_latency_us"] = model.nvls_latency_us
    if model.nvls_half_chunk_bytes:
        data["nvls_half_chunk_bytes"] = model.nvls_half_chunk_bytes
    if model.nvls_tree_share != 1.0:
        data["nvls_tree_share"] = model.nvls_tree_share
    if model.tree_caps:
        data["tree_caps"] = True
    if model.copy_efficiency:
        data["copy_efficiency"] = dict(model.copy_efficiency)
    if model.alltoall_net_share != 1.0:
        data["alltoall_net_share"] = model.alltoall_net_share
    if model.net_overhead_us != 1.0:
        data["net_overhead_us"] = model.net_overhead_us
    data.update(_run_settings(model))
    if model.fitted is not None:
        data["fitted"] = dict(model.fitted)
    return data


RUN_SETTINGS = ("simple_buffer_bytes", "protocols")
"""Keys of a ``runtime`` object that are settings of the runs (NCCL_BUFFSIZE, NCCL_PROTO), not calibrated figures:
the only ones a preset takes beside its name."""


def _run_settings(model: RuntimeModel) -> dict[str, Any]:
    """The run settings of ``model`` that differ from NCCL's defaults, as a ``runtime`` object has them."""
    out: dict[str, Any] = {}
    if model.simple_buffer_bytes != SIMPLE_BUFFER_BYTES:
        out["simple_buffer_bytes"] = model.simple_buffer_bytes
    if model.protocols is not None:
        out["protocols"] = [p.value for p in model.protocols]
    return out


def runtime_from_dict(raw: Any, *, where: str) -> RuntimeModel:
    """Read a topology file's ``runtime`` object (see :func:`runtime_to_dict`); bad input names the field."""
    if not isinstance(raw, dict):
        raise InputError(f"must be an object (got {type(raw).__name__})", where=f"{where}: runtime")
    if "preset" in raw:
        name = raw["preset"]
        if name not in PRESETS:
            raise InputError(f"unknown preset {name!r} (known: {', '.join(sorted(PRESETS))})",
                             where=f"{where}: runtime.preset")
        extra = set(raw) - {"preset", *RUN_SETTINGS}
        if extra:
            raise InputError(f"a preset takes no other keys than {' and '.join(RUN_SETTINGS)} (got {sorted(extra)})",
                             where=f"{where}: runtime")
        return replace(PRESETS[name], simple_buffer_bytes=_buffer_bytes(raw, where),
                       protocols=_run_protocols(raw, where))
    known = {"name", "efficiency", "copy_efficiency", "net_overhead_us", "channels", "ll128_channels", "nvls_efficiency",
             "nvls_latency_us", "nvls_half_chunk_bytes", "nvls_tree_share", "alltoall_net_share", "tree_caps",
             "hop_latency_us", "launch_us", "sources", "fitted", *RUN_SETTINGS}
    unknown = set(raw) - known
    if unknown:
        raise InputError(f"unknown key(s) {sorted(unknown)}", where=f"{where}: runtime")
    efficiency = _class_numbers(raw.get("efficiency", {}), f"{where}: runtime.efficiency", upper=1.0)
    copy_efficiency = _class_numbers(raw.get("copy_efficiency", {}), f"{where}: runtime.copy_efficiency", upper=1.0)
    channels = raw.get("channels", 24)
    if isinstance(channels, bool) or not isinstance(channels, int) or not 1 <= channels <= 256:
        raise InputError(f"must be an integer in 1..256 (got {channels!r})", where=f"{where}: runtime.channels")
    hops: dict[str, dict[Protocol, float]] = {c: dict(v) for c, v in NCCL_HOP_LATENCY_US.items()}
    raw_hops = raw.get("hop_latency_us", {})
    if not isinstance(raw_hops, dict):
        raise InputError("must be an object", where=f"{where}: runtime.hop_latency_us")
    for c, per in raw_hops.items():
        if c not in LINK_CLASSES:
            raise InputError(f"unknown link class {c!r} (nvlink, pci, net)", where=f"{where}: runtime.hop_latency_us")
        hops[c].update(_protocol_numbers(per, f"{where}: runtime.hop_latency_us.{c}"))
    launch = dict(NCCL_BASE_LATENCY_US)
    launch.update(_protocol_numbers(raw.get("launch_us", {}), f"{where}: runtime.launch_us"))
    sources = raw.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise InputError("must be a list of strings", where=f"{where}: runtime.sources")
    fitted = raw.get("fitted")
    if fitted is not None and not isinstance(fitted, dict):
        raise InputError("must be an object", where=f"{where}: runtime.fitted")
    ll128 = raw.get("ll128_channels")
    if ll128 is not None and (isinstance(ll128, bool) or not isinstance(ll128, (int, float)) or not 0.1 <= ll128 <= 256):
        raise InputError(f"must be a number in 0.1..256 (got {ll128!r})", where=f"{where}: runtime.ll128_channels")
    nvls = raw.get("nvls_efficiency")
    if nvls is not None and (isinstance(nvls, bool) or not isinstance(nvls, (int, float)) or not 0 < nvls <= 1):
        raise InputError(f"must be a number in (0, 1] (got {nvls!r})", where=f"{where}: runtime.nvls_efficiency")
    tree_share = raw.get("nvls_tree_share", 1.0)
    if isinstance(tree_share, bool) or not isinstance(tree_share, (int, float)) or not 0 < tree_share <= 1:
        raise InputError(f"must be a number in (0, 1] (got {tree_share!r})", where=f"{where}: runtime.nvls_tree_share")
    extra_figures: dict[str, float] = {"nvls_tree_share": float(tree_share)}
    alltoall_share = raw.get("alltoall_net_share", 1.0)
    if isinstance(alltoall_share, bool) or not isinstance(alltoall_share, (int, float)) or not 0 < alltoall_share <= 1:
        raise InputError(f"must be a number in (0, 1] (got {alltoall_share!r})",
                         where=f"{where}: runtime.alltoall_net_share")
    extra_figures["alltoall_net_share"] = float(alltoall_share)
    for key, upper in (("nvls_latency_us", 1e4), ("nvls_half_chunk_bytes", float(1 << 30))):
        value = raw.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= upper:
            raise InputError(f"must be a number in 0..{upper:.0f} (got {value!r})", where=f"{where}: runtime.{key}")
        extra_figures[key] = float(value)
    tree_caps = raw.get("tree_caps", False)
    if not isinstance(tree_caps, bool):
        raise InputError(f"must be true or false (got {tree_caps!r})", where=f"{where}: runtime.tree_caps")
    overhead = raw.get("net_overhead_us", 1.0)
    if isinstance(overhead, bool) or not isinstance(overhead, (int, float)) or not 0 <= overhead <= 1e3:
        raise InputError(f"must be a number in 0..1000 us (got {overhead!r})", where=f"{where}: runtime.net_overhead_us")
    name = raw.get("name", "custom")
    if not isinstance(name, str):
        raise InputError("must be a string", where=f"{where}: runtime.name")
    return RuntimeModel(name=name, efficiency=efficiency, channels=channels, hop_latency_us=hops, launch_us=launch,
                        sources=tuple(sources), fitted=fitted, ll128_channels=None if ll128 is None else float(ll128),
                        nvls_efficiency=None if nvls is None else float(nvls), tree_caps=tree_caps, **extra_figures,
                        copy_efficiency=copy_efficiency, net_overhead_us=float(overhead),
                        simple_buffer_bytes=_buffer_bytes(raw, where), protocols=_run_protocols(raw, where))


MIN_SIMPLE_BUFFER_BYTES = 1 << 16
"""Smallest NCCL_BUFFSIZE read from a file (64 KiB: 8 KiB steps)."""
MAX_SIMPLE_BUFFER_BYTES = 1 << 30
"""Largest NCCL_BUFFSIZE read from a file (1 GiB)."""


def _buffer_bytes(raw: dict[str, Any], where: str) -> int:
    """The ``simple_buffer_bytes`` of a ``runtime`` object (NCCL_BUFFSIZE), NCCL's 4 MiB when absent."""
    value = raw.get("simple_buffer_bytes", SIMPLE_BUFFER_BYTES)
    if isinstance(value, bool) or not isinstance(value, int) or not (
            MIN_SIMPLE_BUFFER_BYTES <= value <= MAX_SIMPLE_BUFFER_BYTES) or value % NCCL_STEPS:
        raise InputError(f"must be a whole number of bytes in {MIN_SIMPLE_BUFFER_BYTES}..{MAX_SIMPLE_BUFFER_BYTES}, "
                         f"a multiple of {NCCL_STEPS} (NCCL_BUFFSIZE; got {value!r})",
                         where=f"{where}: runtime.simple_buffer_bytes")
    return value


def _run_protocols(raw: dict[str, Any], where: str) -> tuple[Protocol, ...] | None:
    """The ``protocols`` of a ``runtime`` object (NCCL_PROTO) in NCCL's order, None (all) when absent."""
    value = raw.get("protocols")
    if value is None:
        return None
    names = [p.value for p in PROTOCOLS]
    if not isinstance(value, list) or not value or not all(v in names for v in value) or len(set(value)) < len(value):
        raise InputError(f"must be a non-empty list of distinct protocols among {', '.join(names)} (NCCL_PROTO; got "
                         f"{value!r})", where=f"{where}: runtime.protocols")
    return tuple(p for p in PROTOCOLS if p.value in value)


def _class_numbers(raw: Any, where: str, *, upper: float) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise InputError("must be an object", where=where)
    out: dict[str, float] = {}
    for c, v in raw.items():
        if c not in LINK_CLASSES:
            raise InputError(f"unknown link class {c!r} (nvlink, pci, net)", where=where)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= upper:
            raise InputError(f"must be a number in (0, {upper:g}] (got {v!r})", where=f"{where}.{c}")
        out[c] = float(v)
    return out


def _protocol_numbers(raw: Any, where: str) -> dict[Protocol, float]:
    if not isinstance(raw, dict):
        raise InputError("must be an object", where=where)
    out: dict[Protocol, float] = {}
    for p, v in raw.items():
        if p not in {q.value for q in Protocol}:
            raise InputError(f"unknown protocol {p!r} (Simple, LL, LL128)", where=where)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1e6 or not math.isfinite(v):
            raise InputError(f"must be a latency in 0..1e6 us (got {v!r})", where=f"{where}.{p}")
        out[Protocol(p)] = float(v)
    return out


def with_figures(model: RuntimeModel, link_class: str, *, efficiency: float | None = None,
                 copy_efficiency: float | None = None,
                 hop_latency_us: Mapping[Protocol, float] | None = None, launch_us: Mapping[Protocol, float] | None = None,
                 channels: int | None = None, ll128_channels: float | None = None, name: str | None = None,
                 fitted: Mapping[str, Any] | None = None, source: str | None = None) -> RuntimeModel:
    """``model`` with the figures of one link class (and the launch overheads, channels) replaced.

    ``copy_efficiency``: the class's share for collectives that only copy (:attr:`RuntimeModel.copy_efficiency`).
    """
    eff = dict(model.efficiency)
    if efficiency is not None:
        eff[link_class] = efficiency
    copy = dict(model.copy_efficiency)
    if copy_efficiency is not None:
        copy[link_class] = copy_efficiency
    hops = {c: dict(v) for c, v in model.hop_latency_us.items()}
    if hop_latency_us is not None:
        hops.setdefault(link_class, dict(NCCL_HOP_LATENCY_US[link_class])).update(hop_latency_us)
    launch = dict(model.launch_us)
    if launch_us is not None:
        launch.update(launch_us)
    sources = model.sources if source is None else (*model.sources, source)
    return replace(model, name=name or model.name, efficiency=eff, copy_efficiency=copy, hop_latency_us=hops,
                   launch_us=launch,
                   channels=model.channels if channels is None else channels,
                   ll128_channels=model.ll128_channels if ll128_channels is None else ll128_channels,
                   fitted=model.fitted if fitted is None else dict(fitted), sources=sources)


def with_launch_offset(model: RuntimeModel, offset_us: float) -> RuntimeModel:
    """``model`` with ``offset_us`` added to every protocol's launch overhead (a harness's host cost per collective:
    ``all_reduce_perf -g 8`` launches every GPU from one thread); named ``<model>+<offset>us``."""
    if offset_us == 0:
        return model
    return replace(model, name=f"{model.name}+{offset_us:g}us",
                   launch_us={p: v + offset_us for p, v in model.launch_us.items()})
