"""Streamed machine links: a candidate layout that keeps every NIC busy and drains the pipeline fast.

Where a GPU sends to several machines through one NIC, the plain schedules run
all those connections at once: the fluid model shares the NIC equally between
them, so their messages finish together, every NIC then waits out the route
latency at the same moment (a gap on the binding link at every round), and the
last piece of every connection lands at once, leaving a burst of intra-machine
fan-out after the last byte has crossed the network (measured on
``dgx-a100x4`` Allgather 1 GB: 44 us of NIC gaps and 95 us of tail, 3.3%).

This layout rewrites one candidate's transfers (same routes, same data) so that:

* every GPU sends its cross-machine messages on two *streams* (channels 0 and
  1), each message waiting for the previous one of its stream (an ``after``
  edge on the same sender, which MSCCL expresses), so a NIC carries two flows;
* the messages go round the destination machines in rotation (piece by piece,
  or machine by machine), the k-th message of every GPU at the same moment, so
  that in every slot each NIC receives from one machine;
* one stream starts with half a piece: the two streams stay half a message
  apart, and while one waits out its latency the other moves bytes at full rate;
* the last pieces of a copy phase are cut in ever smaller parts (and so is
  everything that forwards them), so little remains to forward inside the
  machines once the last byte has arrived; the first pieces of a reduction
  phase likewise (and everything that gathers them), so little must be reduced
  before the first byte can leave.

Cutting pieces multiplies the chunk factor by ``parts`` (the XML's chunks per
block). Every transfer keeps its route. The program order is rebuilt from
estimated times (the streams' message times; what gathers a stream message's
data just before it, what forwards what it delivers just after it arrives),
subject to every chunk's reads and writes at each rank keeping their original
order, so the schedule computes the same thing. The simulator judges the
result like any other candidate.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Op, Transfer
from taccl_py.topology import Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["Rotation", "StreamLayout", "stream_layouts", "stream_transfers", "streams_apply"]

_STREAMED_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE)
_DOWN, _UP, _ALONE = "down", "up", ""


class Rotation(Enum):
    """The order in which a GPU's cross-machine messages go round the destination machines."""

    PIECE = "piece by piece"
    """Piece j to every other machine in turn, then piece j+1."""
    MACHINE = "machine by machine"
    """Every piece to the next machine, then every piece to the one after."""


@dataclass(frozen=True)
class StreamLayout:
    """How cross-machine sends are streamed: the rotation and how many parts each piece is cut into.

    ``parts`` is a power of two, at least 2: the schedule's chunk factor is
    multiplied by it. One stream starts with half a piece; with 4 or more, the
    edge pieces (the last ones of a copy phase, the first ones of a reduction)
    are also cut into halving parts.
    """

    rotation: Rotation
    parts: int

    def describe(self) -> str:
        return f"NIC streams ({self.rotation.value}, pieces cut in {self.parts})"


def streams_apply(topology: Topology, kind: CollectiveKind) -> bool:
    """Streamed candidates can be built for ``kind`` on ``topology``: Allgather, ReduceScatter or Allreduce on GPUs
    grouped in at least two machines of several GPUs each (other conditions depend on the candidate)."""
    return kind in _STREAMED_KINDS and 2 <= topology.num_machines < topology.num_gpus


def stream_layouts() -> tuple[StreamLayout, ...]:
    """The layouts tried for each chunk factor (each is simulated; the fastest wins)."""
    return (StreamLayout(Rotation.PIECE, 4), StreamLayout(Rotation.MACHINE, 4))


def _halving(total: int) -> list[int]:
    """``total`` chunks as halving parts: 4 -> [2, 1, 1], 2 -> [1, 1], 1 -> [1]."""
    out: list[int] = []
    while total > 1:
        out.append(total - total // 2)
        total //= 2
    return [*out, total] if total else out


@dataclass
class _Part:
    """One message of the rewritten schedule: chunks ``[lo, hi)`` of original transfer ``origin``'s piece."""

    origin: int
    lo: int
    hi: int
    start: float = 0.0
    """Estimated start (us): the program order follows it."""
    arrive: float = 0.0
    channel: int = -1
    after: int = -1
    """Index (in the parts list) of the previous message of its stream, or -1."""


@dataclass
class _Value:
    """The accesses to one value of one (rank, chunk): what must precede its writes, its writes, its reads."""

    before: list[int] = field(default_factory=list)
    writes: list[int] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)
    copy: int = -1
    """The copy that began the value (reductions onto it follow it), or -1."""


def stream_transfers(topology: Topology, collective: Collective, transfers: Sequence[Transfer], size_bytes: float,
                     layout: StreamLayout) -> tuple[Collective, tuple[Transfer, ...]] | None:
    """The transfers with their cross-machine sends streamed (see the module docstring), or None.

    None when the layout does not apply: a single machine (or one GPU per
    machine), a collective other than Allgather/ReduceScatter/Allreduce,
    messages already carrying several chunks, explicit orders, or a GPU with
    fewer than two cross-machine sends, or streams whose order the data cannot follow (relays both ways).
    """
    machine = topology.machine_of
    if not streams_apply(topology, collective.kind) or layout.parts < 2 or layout.parts & (layout.parts - 1):
        return None
    if any(len(t.chunks) != 1 or t.after or t.not_before_us is not None or t.exchange is not None
           for t in transfers):
        return None
    cross: dict[int, list[int]] = {}
    for i, t in enumerate(transfers):
        if machine[t.src] != machine[t.dst]:
            cross.setdefault(t.src, []).append(i)
    if not cross or any(len(ids) < 2 for ids in cross.values()):
        return None
    plans, cuts = _plan_streams(topology, collective, transfers, cross, layout)
    u = layout.parts
    parts: list[_Part] = []
    index: dict[tuple[int, int], int] = {}
    for i in range(len(transfers)):
        for j, (lo, hi) in enumerate(cuts.get(i, [(0, u)])):
            index[(i, j)] = len(parts)
            parts.append(_Part(i, lo, hi))
    streams = [[index[entry] for entry in stream] for sender in sorted(plans) for stream in plans[sender]]
    for number, stream in enumerate(streams):
        for k, p in enumerate(stream):
            parts[p].channel = number % 2
            parts[p].after = stream[k - 1] if k else -1
    chunk_bytes = collective.chunk_bytes(size_bytes) / u
    try:
        return _assemble(topology, collective, transfers, parts, streams, chunk_bytes, u)
    except _Cycle:  # the streams' order contradicts what the data needs (relays both ways): not this layout
        return None


def _plan_streams(topology: Topology, collective: Collective, transfers: Sequence[Transfer],
                  cross: dict[int, list[int]],
                  layout: StreamLayout) -> tuple[dict[int, list[list[tuple[int, int]]]], dict[int, list[tuple[int, int]]]]:
    """Every sender's two streams as (transfer, part) entries, and how transfers are cut into parts."""
    machine, num_machines = topology.machine_of, topology.num_machines
    c, u = collective.chunk_factor, layout.parts

    def rotation_key(i: int) -> tuple[int, int]:
        t = transfers[i]
        offset = (machine[t.dst] - machine[t.src]) % num_machines
        piece = t.chunks[0] % c
        return (piece, offset) if layout.rotation is Rotation.PIECE else (offset, piece)

    neighbours = _Neighbours.build(transfers)
    cuts: dict[int, list[tuple[int, int]]] = {}  # transfer -> its parts [lo, hi) (absent: one part of u chunks)

    def cut(i: int, sizes: Sequence[int], spread: str) -> list[tuple[int, int]]:
        """Cut transfer i into parts of ``sizes`` chunks (unless already cut), and likewise the transfers that
        forward what it delivers (``_DOWN``) or that gather what it sends (``_UP``); i's stream entries."""
        if i not in cuts:
            bounds, lo = [], 0
            for size in sizes:
                bounds.append((lo, lo + size))
                lo += size
            todo = [i]
            while todo:
                k = todo.pop()
                if k not in cuts:
                    cuts[k] = bounds
                    todo += neighbours.readers[k] if spread == _DOWN else neighbours.writers[k] if spread == _UP else []
        return [(i, j) for j in range(len(cuts[i]))]

    half = [u // 2, *(_halving(u // 2) if u >= 4 else [u // 2])]  # half a piece, then the rest in halving parts
    plans: dict[int, list[list[tuple[int, int]]]] = {}
    for src, ids in sorted(cross.items()):
        groups = [sorted((i for i in ids if transfers[i].op is op), key=rotation_key) for op in (Op.REDUCE, Op.COPY)]
        groups = [g for g in groups if g]
        streams: list[list[tuple[int, int]]] = [[], []]
        for phase, group in enumerate(groups):
            copy = transfers[group[0]].op is Op.COPY
            first, last = phase == 0, phase == len(groups) - 1
            for s, members in enumerate((group[0::2], group[1::2])):
                deferred: list[tuple[int, int]] = []
                for k, i in enumerate(members):
                    if first and k == 0 and s == (0 if copy else 1):
                        # half a piece first: the two streams run half a message apart; the rest at the end
                        entries = cut(i, half, _DOWN if copy else _UP)
                        streams[s].append(entries[0])
                        deferred = entries[1:]
                    elif copy and last and u >= 4 and k == len(members) - 1:
                        streams[s] += cut(i, _halving(u), _DOWN)
                    elif not copy and first and k == 0:
                        streams[s] += cut(i, list(reversed(_halving(u))), _UP)
                    else:
                        streams[s] += cut(i, [u], _ALONE)
                streams[s] += deferred
        plans[src] = streams
    return plans, cuts


@dataclass(frozen=True)
class _Neighbours:
    """Per transfer: the transfers that read the value it wrote, and those that wrote the value it reads."""

    readers: list[list[int]]
    writers: list[list[int]]

    @staticmethod
    def build(transfers: Sequence[Transfer]) -> _Neighbours:
        readers: list[list[int]] = [[] for _ in transfers]
        writers: list[list[int]] = [[] for _ in transfers]
        current: dict[tuple[int, int], list[int]] = {}  # (rank, chunk) -> writes of its current value
        read: set[tuple[int, int]] = set()
        for i, t in enumerate(transfers):
            for chunk in t.chunks:
                source = current.get((t.src, chunk), [])
                writers[i] += source
                for w in source:
                    readers[w].append(i)
                read.add((t.src, chunk))
                target = (t.dst, chunk)
                if t.op is Op.COPY or target in read:
                    current[target] = []
                    read.discard(target)
                current.setdefault(target, []).append(i)
        return _Neighbours(readers, writers)


def _dependencies(transfers: Sequence[Transfer], parts: Sequence[_Part],
                  u: int) -> tuple[list[list[int]], list[list[int]], list[_Value]]:
    """Order constraints between parts (every value's writes before its reads, the next value's writes after
    both; reductions onto one value commute), the data each part needs, and the values.

    A value is tracked per (rank, piece) while every access to it covers the whole piece, per chunk once
    some part covers less (most pieces are never cut: this keeps the work linear in the parts).
    """
    n = len(parts)
    preds: list[list[int]] = [[] for _ in range(n)]
    data: list[list[int]] = [[] for _ in range(n)]
    current: dict[tuple[int, int, int], _Value] = {}
    values: list[_Value] = []

    def keys(rank: int, piece: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
        whole = current.get((rank, piece, -1))
        if (lo, hi) == (0, u) and (whole is not None or (rank, piece, 0) not in current):
            return [(rank, piece, -1)]
        if whole is not None:  # from now on per chunk: each chunk starts with the piece's history
            del current[(rank, piece, -1)]
            for x in range(u):
                copy = _Value(list(whole.before), list(whole.writes), list(whole.reads), whole.copy)
                current[(rank, piece, x)] = copy
                values.append(copy)
        return [(rank, piece, x) for x in range(lo, hi)]

    for p, part in enumerate(parts):
        t = transfers[part.origin]
        piece = t.chunks[0]
        for key in keys(t.src, piece, part.lo, part.hi):
            value = current.setdefault(key, _Value())
            preds[p] += value.before
            preds[p] += value.writes
            data[p] += value.writes
            value.reads.append(p)
        for key in keys(t.dst, piece, part.lo, part.hi):
            value = current.get(key) or _Value()
            if key not in current or t.op is Op.COPY or value.reads:
                # a new value: after everything that wrote or read the old one
                if t.op is Op.REDUCE:
                    data[p] += value.writes
                value = _Value(before=value.before + value.writes + value.reads)
                values.append(value)
            elif value.copy >= 0:  # a reduction onto a copied value
                data[p].append(value.copy)
            preds[p] += value.before
            if value.copy >= 0:
                preds[p].append(value.copy)
            if t.op is Op.COPY:
                value.copy = p
            value.writes.append(p)
            current[key] = value
    for p, part in enumerate(parts):
        if part.after >= 0:
            preds[p].append(part.after)
    return [sorted(set(x)) for x in preds], [sorted(set(x)) for x in data], values


def _assemble(topology: Topology, collective: Collective, transfers: Sequence[Transfer], parts: list[_Part],
              streams: list[list[int]], chunk_bytes: float, u: int) -> tuple[Collective, tuple[Transfer, ...]]:
    """Estimated times, a program order that keeps every dependency, channels and ``after`` edges."""
    n = len(parts)
    preds, data, values = _dependencies(transfers, parts, u)
    succs: list[list[int]] = [[] for _ in range(n)]
    readers: list[list[int]] = [[] for _ in range(n)]
    for p in range(n):
        for q in preds[p]:
            succs[q].append(p)
        for q in data[p]:
            readers[q].append(p)
    latency = [topology.route_latency(transfers[part.origin].route) for part in parts]
    duration = [(part.hi - part.lo) * chunk_bytes
                / gbps_to_bytes_per_us(topology.route_bandwidth(transfers[part.origin].route)) for part in parts]
    fixed = [False] * n
    # the streams: one message after another, two streams sharing the link
    for stream in streams:
        now = 0.0
        for p in stream:
            parts[p].start, now = now, now + latency[p] + 2 * duration[p]
            parts[p].arrive = now
            fixed[p] = True
    end = max((parts[s[-1]].arrive for s in streams if s), default=0.0)
    order = _topological(n, preds, succs, [float(part.origin) for part in parts])
    # what gathers the data of a stream message runs just before it, in the stream's order
    for p in reversed(order):
        needed = [parts[q].start for q in readers[p] if fixed[q]]
        if not fixed[p] and needed:
            parts[p].start = min(needed) - latency[p] - duration[p]
            parts[p].arrive = min(needed)
            fixed[p] = True
    # writes commit in program order, and a stream message waits for the commit of the previous one: the
    # reductions done inside a machine onto a value that also receives stream messages go after them
    members = {p for stream in streams for p in stream}
    for value in values:
        streamed = [parts[q].start for q in value.writes if q in members]
        for q in value.writes if streamed else ():
            if not fixed[q]:
                parts[q].start = max(streamed) + 1e-6
                parts[q].arrive = parts[q].start + latency[q] + duration[q]
                fixed[q] = True
    # everything else: when its data has arrived (or, with no data to wait for, where it was in the order)
    for p in order:
        if fixed[p]:
            continue
        parts[p].start = max((parts[q].arrive for q in data[p]), default=end * parts[p].origin / len(transfers))
        parts[p].arrive = parts[p].start + latency[p] + duration[p]
    order = _topological(n, preds, succs, [part.start for part in parts])
    position = {p: k for k, p in enumerate(order)}
    out: list[Transfer] = []
    count: dict[tuple[int, int], int] = {}
    for p in order:
        part = parts[p]
        t = transfers[part.origin]
        channel = part.channel
        if channel < 0:  # the other connections alternate between two channels
            channel = count.get((t.src, t.dst), 0) % 2
            count[(t.src, t.dst)] = count.get((t.src, t.dst), 0) + 1
        out.append(replace(t, chunks=tuple(t.chunks[0] * u + x for x in range(part.lo, part.hi)), channel=channel,
                           after=(position[part.after],) if part.after >= 0 else ()))
    return replace(collective, chunk_factor=collective.chunk_factor * u), tuple(out)


def _topological(n: int, preds: list[list[int]], succs: list[list[int]], keys: list[float]) -> list[int]:
    """A topological order of the parts, smallest key first among those ready (ties by index)."""
    indegree = [len(p) for p in preds]
    heap = [(keys[p], p) for p in range(n) if indegree[p] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, p = heapq.heappop(heap)
        order.append(p)
        for q in succs[p]:
            indegree[q] -= 1
            if indegree[q] == 0:
                heapq.heappush(heap, (keys[q], q))
    if len(order) != n:
        raise _Cycle
    return order


class _Cycle(Exception):
    """The streams' order and the data dependencies form a cycle."""
