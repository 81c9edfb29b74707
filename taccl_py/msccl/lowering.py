"""Schedule -> MSCCL program: threadblocks, fused steps, dependencies, within a dialect's limits.

A transfer ``src -> dst`` on channel ``c`` becomes a send-type step in the
threadblock of ``src`` that sends to ``dst`` on ``c`` and a receive-type step in
the threadblock of ``dst`` that receives from ``src`` on ``c``, each connection
keeping the schedule's program order (its FIFO). Where a rank receives chunks
and forwards the same chunks on (a ring), the receiving and sending
connections share one threadblock and the two steps fuse into ``rcs``
(``rrcs``/``rrs`` for reductions), but only where that placement delays
nothing the schedule would not delay (the policy is :mod:`.pairing`). Every
other ordering the schedule needs (read-after-write at the sender,
write-after-read/write at the receiver, ``after``) becomes a
``depid``/``deps`` dependency, with ``nop`` steps for extra ones. Non-contiguous
messages, and messages of an exchange, go through scratch (``cpy``/``re``, which
take no time).
``instances`` splits every chunk in parts sent on parallel channels.
Threadblocks over the step limit are split over more channels; what cannot fit
raises :class:`LoweringError` naming the limit.

The stages, each a function of the previous one's frozen result:
schedule -> :func:`analyze` (orderings) -> :func:`plan_layout` (buffers) ->
pairing (threadblock item orders) -> :func:`_build_ops` (steps and their
dependencies) -> :func:`assemble` (XML threadblocks) -> deadlock check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import LoweringError
from taccl_py.gc_pause import paused_gc
from taccl_py.msccl.analysis import COMMIT, INITIAL, ScheduleOrder, analyze
from taccl_py.msccl.assembly import Connection, LoweredOp, TbKey, assemble
from taccl_py.msccl.ir import (
    DIALECTS,
    MAX_CHANNELS,
    MAX_COUNT,
    PROTOCOLS,
    Buffer,
    Gpu,
    Program,
    StepType,
    dialect_coll_name,
)
from taccl_py.msccl.layout import BufferLayout, Location, contiguous_runs, is_contiguous, plan_layout
from taccl_py.msccl.machine import build_machine
from taccl_py.msccl.pairing import Item, Pair, Precedence, choose_pairs, dead_after, deferred_receives, merge
from taccl_py.msccl.verify import find_deadlock, verify_program
from taccl_py.msccl.writer import save_xml
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import SimResult
from taccl_py.topology import Topology

__all__ = ["LoweringOptions", "check_connection_floor", "fewest_connections", "fewest_connections_from_waits",
           "lower_schedule", "send_waits", "write_program_xml", "write_schedule_xml"]

_MAX_ROUNDS = 40

_NO_GC_TRANSFERS = 50_000
"""From this many transfers the lowering runs with Python's cyclic garbage collector paused."""

V1_NO_LIMIT = 1 << 62
"""maxBytes written for v1 when there is no upper size (v1 defaults to 128 MiB when it is absent)."""

BaseConnection = tuple[int, int, int]
"""(src rank, dst rank, schedule channel)."""

APPLY_LOCAL = 1 << 16
"""Local threadblocks from this index on apply deferred receives (lower indices hold the initial copies)."""

_APPLY_TAILS = 8
"""How many chains (besides those ending in a writer it waits for) a deferred receive's apply may join."""


@dataclass(frozen=True)
class LoweringOptions:
    """Dialect, protocol, size range, buffer mode (None: in place except Alltoall) and instances."""

    dialect: str = "v2"
    instances: int = 1
    proto: str = "Simple"
    min_bytes: int = 0
    max_bytes: int = 0
    in_place: bool | None = None
    name: str | None = None


MULTICAST_NOT_XML = ("the schedule uses switch multicast or in-network reduction (network groups), which MSCCL XML "
                     "cannot express: an MSCCL step sends from one rank to one rank and reduces only on GPUs; "
                     "write it as schedule JSON instead")


def lower_schedule(schedule: Schedule, topology: Topology, *, dialect: str = "v2", instances: int = 1,
                   proto: str = "Simple", min_bytes: int = 0, max_bytes: int = 0, in_place: bool | None = None,
                   name: str | None = None, timing: SimResult | None = None) -> Program:
    """The MSCCL program of ``schedule`` (see the module docstring).

    ``timing``: the schedule's simulation at the size the file is for. A
    threadblock runs its steps in order; where the schedule's structure alone
    does not show that an order delays nothing, these times decide, so the
    XML takes the schedule's time at that size with fewer steps and
    threadblocks. Without it the lowering relies on the structure alone.

    Raises :class:`LoweringError` when the schedule does not fit the dialect
    (too many channels, threadblocks, steps, offsets...), naming the limit.
    """
    options = LoweringOptions(dialect, instances, proto, min_bytes, max_bytes, in_place, name)
    _check_options(schedule, topology, options)
    col = schedule.collective
    in_place_mode = options.in_place if options.in_place is not None else col.kind is not CollectiveKind.ALLTOALL
    expanded = _expand(schedule, options.instances)
    check_connection_floor(send_waits(expanded), options.dialect)
    # millions of short-lived tuples and no cycles: collections would only walk them again and again
    with paused_gc(len(expanded.transfers) >= _NO_GC_TRANSFERS):
        order = analyze(expanded)
        return _Lowering(order, in_place_mode, options, Precedence(order, _event_times(schedule, timing, instances))).run()


def write_schedule_xml(schedule: Schedule, topology: Topology, path: str | os.PathLike[str], *,
                       dialect: str = "v2", instances: int = 1, proto: str = "Simple", min_bytes: int = 0,
                       max_bytes: int = 0, in_place: bool | None = None, name: str | None = None,
                       verify: bool = True, timing: SimResult | None = None) -> Program:
    """Lower ``schedule``, verify the program and write it to ``path`` atomically; returns the program.

    With ``verify`` (the default) the program is checked as ``taccl verify``
    would (rules, deadlock, data races, the result in every buffer mode)
    before anything is written; a program found wrong raises
    :class:`LoweringError` naming the first problem, and nothing is written.
    """
    program = lower_schedule(schedule, topology, dialect=dialect, instances=instances, proto=proto,
                             min_bytes=min_bytes, max_bytes=max_bytes, in_place=in_place, name=name, timing=timing)
    return write_program_xml(program, path, dialect=dialect, verify=verify)


def write_program_xml(program: Program, path: str | os.PathLike[str], *, dialect: str = "v2",
                      verify: bool = True) -> Program:
    """Verify a lowered ``program`` (see :func:`write_schedule_xml`) and write it to ``path`` atomically."""
    if verify:
        report = verify_program(program, dialect)
        if report.verdict == "incorrect":
            first = str(report.errors[0]) if report.errors else "no buffer mode could be checked"
            raise LoweringError(f"the lowered program is not correct ({len(report.errors)} problem(s)); the first: "
                                f"{first}")
    save_xml(program, path, dialect)
    return program


def fewest_connections(schedule: Schedule, dialect: str = "v2") -> int:
    """A floor on the connections the lowering needs between the busiest two ranks, without its analysis.

    The lowering cuts a connection with more steps than a threadblock holds in halves until each part fits
    (:meth:`_Lowering._initial_structure`), a part after the first taking a ``nop`` more when its first send waits
    for something. Here every transfer counts one step on each side (it takes at least that), and a send waits
    only where that is sure (an ``after``, or data an earlier transfer delivered to the sender), so each
    connection gets at most the parts the lowering gives it. Above :data:`MAX_CHANNELS` the lowering must fail,
    and :func:`lower_schedule` says so before its analysis (a second where the analysis takes tens, a ring of
    500 GPUs).
    """
    return fewest_connections_from_waits(send_waits(schedule), dialect)


def fewest_connections_from_waits(waits: Mapping[BaseConnection, Sequence[bool]], dialect: str = "v2") -> int:
    """:func:`fewest_connections` of a schedule given, per connection ``(src, dst, channel)``, whether each of its
    transfers' first send surely waits (in program order); a caller that knows these from a plan (a ring's:
    :func:`taccl_py.baselines.ring.ring_send_waits`) asks without building millions of transfers."""
    return max(_floor_of_waits(waits, DIALECTS[dialect].max_steps)[0].values(), default=0)


def check_connection_floor(waits: Mapping[BaseConnection, Sequence[bool]], dialect: str = "v2") -> None:
    """Raise the :class:`LoweringError` :func:`lower_schedule` raises before its analysis when the floor of
    :func:`fewest_connections_from_waits` is above the runtime's channels (nothing when it is not)."""
    _check_channels(*_floor_of_waits(waits, DIALECTS[dialect].max_steps), DIALECTS[dialect].max_steps, "at least ")


def send_waits(schedule: Schedule) -> dict[BaseConnection, list[bool]]:
    """Per connection, whether each of its transfers' first send surely waits (an ``after``, or data an earlier
    transfer delivered to the sender), in program order: what :func:`fewest_connections` counts from."""
    num_chunks = schedule.collective.num_chunks
    delivered: set[int] = set()
    members: dict[BaseConnection, list[bool]] = {}  # connection -> does each transfer's first send surely wait
    for t in schedule.transfers:
        chunks = t.chunks
        if t.after:
            waits = True
        elif t.exchange is not None:
            waits = False  # an exchange member reads before the exchange writes: not sure without the analysis
        elif len(chunks) == 1:
            waits = t.src * num_chunks + chunks[0] in delivered
        else:
            base = t.src * num_chunks
            waits = any(base + c in delivered for c in chunks)
        key = (t.src, t.dst, t.channel)
        sent = members.get(key)
        if sent is None:
            members[key] = [waits]
        else:
            sent.append(waits)
        if len(chunks) == 1:
            delivered.add(t.dst * num_chunks + chunks[0])
        else:
            base = t.dst * num_chunks
            delivered.update(base + c for c in chunks)
    return members


def _floor_of_waits(members: Mapping[BaseConnection, Sequence[bool]], limit: int
                    ) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """(parts per pair of ranks when each connection is cut as the lowering cuts it, connections per pair)."""
    between: dict[tuple[int, int], int] = {}
    uncut: dict[tuple[int, int], int] = {}
    parts_of: dict[int, int] = {}  # the same list object (a plan's connections share theirs) is cut once
    for (src, dst, _), waits_list in members.items():
        parts = parts_of.get(id(waits_list)) if len(waits_list) > limit else 1
        if parts is None:
            count = len(waits_list)
            ones = [1] * count
            parts = 1
            while parts < count and _largest_segment(ones, parts, waits_list) > limit:
                parts = min(count, parts * 2)
            parts_of[id(waits_list)] = parts
        between[(src, dst)] = between.get((src, dst), 0) + parts
        uncut[(src, dst)] = uncut.get((src, dst), 0) + 1
    return between, uncut


def _check_channels(between: dict[tuple[int, int], int], uncut: dict[tuple[int, int], int], limit: int,
                    qualifier: str = "") -> None:
    """Fail when two ranks need more connections (``between``: after cutting, ``uncut``: before) than there are
    channels; ``qualifier`` says whether the count is exact or a floor."""
    for (src, dst), count in sorted(between.items()):
        if count > MAX_CHANNELS:
            why = (f"; {uncut[(src, dst)]} before connections of more than the dialect's {limit} steps per "
                   "threadblock were cut into threadblocks of their own, halving until each fits"
                   if uncut[(src, dst)] <= MAX_CHANNELS else "")
            raise LoweringError(f"connections {src}->{dst} need a channel but all {MAX_CHANNELS} are taken "
                                f"({qualifier}{count} connections between the two ranks; one connection per peer and "
                                f"channel{why})", over=count / MAX_CHANNELS)


def _check_options(schedule: Schedule, topology: Topology, options: LoweringOptions) -> None:
    if options.dialect not in DIALECTS:
        raise LoweringError(f"unknown dialect {options.dialect!r} (choose v1 or v2)")
    if options.proto not in PROTOCOLS:
        raise LoweringError(f"unknown protocol {options.proto!r} (choose Simple, LL or LL128)")
    if isinstance(options.instances, bool) or not 1 <= options.instances <= 32:
        raise LoweringError(f"instances must be in 1..32 (got {options.instances!r}); there are 32 channels")
    if options.min_bytes < 0 or options.max_bytes < 0:
        raise LoweringError(f"minBytes/maxBytes must be >= 0 (got {options.min_bytes}, {options.max_bytes})")
    if options.max_bytes and options.min_bytes > options.max_bytes:
        raise LoweringError(f"minBytes={options.min_bytes} is above maxBytes={options.max_bytes}")
    col = schedule.collective
    if col.kind is CollectiveKind.ALLTOALL and options.in_place:
        raise LoweringError("alltoall cannot be lowered in place: a rank would overwrite input it has not sent yet")
    problem = schedule.structural_error(topology)
    if problem:
        raise LoweringError(f"the schedule does not fit topology {topology.name!r}: {problem}")
    if schedule.uses_switch_offload:
        raise LoweringError(MULTICAST_NOT_XML)
    if col.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE) and options.dialect == "v1" and col.root:
        raise LoweringError(f"{col.kind.value} with root {col.root}: MSCCL XML has no root; only root 0 can be "
                            "written for v1")


def _event_times(schedule: Schedule, timing: SimResult | None,
                 instances: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(start, arrival, commit) per transfer of the expanded schedule, from ``timing`` (None: none given)."""
    if timing is None:
        return None
    count = len(schedule.transfers)
    arrays = (timing.start_us, timing.arrive_us, timing.commit_us)
    if not timing.correct or any(len(a) != count for a in arrays):
        raise LoweringError(f"the timing given is not a correct simulation of this schedule ({count} transfers)")
    start, arrive, commit = (np.repeat(np.asarray(a, dtype=float), instances) for a in arrays)
    return start, arrive, commit


def _expand(schedule: Schedule, instances: int) -> Schedule:
    """Split every chunk in ``instances`` parts sent on parallel channels (chunk k -> k*I + i)."""
    if instances == 1:
        return schedule
    col = schedule.collective
    transfers = []
    for t in schedule.transfers:
        for i in range(instances):
            transfers.append(replace(t, chunks=tuple(k * instances + i for k in t.chunks),
                                     channel=t.channel * instances + i,
                                     after=tuple(a * instances + i for a in t.after)))
    return replace(schedule, collective=Collective(col.kind, col.num_ranks, col.chunk_factor * instances, col.root),
                   transfers=tuple(transfers))


# ------------------------------------------------------------------ structure
@dataclass(frozen=True)
class _Structure:
    """How connections are cut and paired in one attempt: segments per connection, pairs."""

    segments: dict[BaseConnection, int]
    """Connections cut into this many segments (each on its own channel); absent means 1."""
    pairs: frozenset[Pair]
    apply_cap: int = 0
    """At most this many deferred receives are applied per local threadblock (0: none is deferred)."""


@dataclass(frozen=True)
class _Ops:
    """The steps of every threadblock, in order, and what each waits for (op ids of the same rank)."""

    ops: tuple[LoweredOp, ...]
    tb_ops: dict[TbKey, list[int]]
    deps: tuple[tuple[int, ...], ...]
    matches: tuple[tuple[int, int], ...]
    """(send-type op, the receive-type op that takes its data), for every piece of every transfer."""
    scratch: tuple[int, ...]
    """Scratch chunks per rank, staging areas included."""
    deferred: frozenset[int] = frozenset()
    """Receives that land in scratch and are applied in local threadblocks (:func:`deferred_receives`)."""


class _Lowering:
    """The lowering of one schedule; ``run`` retries with fewer pairings / more segments until it fits."""

    def __init__(self, order: ScheduleOrder, in_place: bool, options: LoweringOptions, precedes: Precedence) -> None:
        self.schedule = order.schedule
        self.order = order
        self.precedes = precedes
        self.in_place = in_place
        self.options = options
        self.transfers = self.schedule.transfers
        self.connections: dict[BaseConnection, list[int]] = {}
        self.conn_index: list[int] = []
        for i, t in enumerate(self.transfers):
            members = self.connections.setdefault((t.src, t.dst, t.channel), [])
            self.conn_index.append(len(members))
            members.append(i)
        self.layout = plan_layout(self.schedule, in_place)
        self.banned: set[Pair] = set()
        self.merged: dict[Pair, tuple[Item, ...] | None] = {}
        """Cache: a pair's interleaving depends only on the schedule and the base layout."""
        self.leaner: dict[frozenset[int], BufferLayout] = {}

    @cached_property
    def required(self) -> frozenset[tuple[int, int]]:
        """(rank, chunk) pairs the collective's result needs (only reductions ask)."""
        return frozenset(self.schedule.collective.required())

    def connections_of(self, segments: dict[BaseConnection, int]) -> list[Connection]:
        """The connection (segment included) of every transfer."""
        out: list[Connection] = [(-1, -1, -1, -1)] * len(self.transfers)
        for key, members in self.connections.items():
            parts = segments.get(key, 1)
            whole = (*key, 0)
            for pos, t in enumerate(members):
                out[t] = whole if parts == 1 else (*key, pos * parts // len(members))
        return out

    def run(self) -> Program:
        structure = self._initial_structure()
        col = self.schedule.collective
        for _ in range(_MAX_ROUNDS):
            orders, structure = self._threadblock_orders(structure)
            layout = self._leaner_layout(orders)
            conn_of = self.connections_of(structure.segments)
            built = self._build_ops(orders, layout, conn_of, structure.apply_cap)
            preferred = {conn: conn[2] for conn in dict.fromkeys(conn_of)}
            try:
                result = assemble(built.ops, built.tb_ops, built.deps, built.matches, col.num_ranks,
                                  self.options.dialect, preferred, (layout.i_chunks, layout.o_chunks), built.scratch)
            except LoweringError:
                if not built.deferred:
                    raise
                # the applies' threadblocks exceed a limit: write in place, as the threadblocks receive
                structure = replace(structure, apply_cap=0)
                continue
            if result.overflowing:
                structure = self._relieve(structure, result.overflowing)
                continue
            program = self._program(result.gpus, result.nchannels)
            if not result.deadlocked:
                return program
            if not structure.pairs:
                deadlock = find_deadlock(build_machine(program))
                reason = deadlock.message if deadlock else "its waits form a cycle"
                raise LoweringError(f"the schedule cannot be expressed in MSCCL: {reason}")
            self.banned |= structure.pairs
            structure = _Structure(structure.segments, frozenset(), structure.apply_cap)
        raise LoweringError("could not fit the schedule in the dialect's limits after splitting threadblocks "
                            f"{_MAX_ROUNDS} times")

    def _initial_structure(self) -> _Structure:
        """Pairs by flow, and connections pre-cut where their own steps already exceed a threadblock."""
        limit = DIALECTS[self.options.dialect].max_steps
        segments: dict[BaseConnection, int] = {}
        for key, members in self.connections.items():
            sides = [[self._steps(t, sending) for t in members] for sending in (True, False)]
            if max(sum(sides[0]), sum(sides[1])) <= limit:
                continue
            waits = [self._waits_to_start(t) for t in members]
            parts = 1
            while parts < len(members) and (_largest_segment(sides[0], parts, waits) > limit
                                            or _largest_segment(sides[1], parts) > limit):
                parts = min(len(members), parts * 2)
            if parts > 1:
                segments[key] = parts
        self._check_channel_count(segments)
        return _Structure(segments, choose_pairs(self.order, self.layout, self.banned), max(1, limit // 2))

    def _waits_to_start(self, t: int) -> bool:
        """Does transfer ``t``'s first send wait for anything (data it forwards, an initial copy, an ``after``)?"""
        tr = self.transfers[t]
        if tr.after:
            return True
        copies = self.layout.initial_copies.get(tr.src)
        return any(w != INITIAL or copies for w in self.order.raw[t])

    def _check_channel_count(self, segments: dict[BaseConnection, int]) -> None:
        """Fail at once when two ranks need more connections (segments) than there are channels.

        Each connection between the same two ranks needs a channel of its own,
        and segments only multiply, so no later attempt could fit.
        """
        between: dict[tuple[int, int], int] = {}
        uncut: dict[tuple[int, int], int] = {}
        for key in self.connections:
            pair = key[:2]
            between[pair] = between.get(pair, 0) + segments.get(key, 1)
            uncut[pair] = uncut.get(pair, 0) + 1
        _check_channels(between, uncut, DIALECTS[self.options.dialect].max_steps)

    def _steps(self, t: int, sending: bool) -> int:
        """Steps transfer ``t`` takes on one side at least (copies through scratch, pieces of 71 chunks)."""
        tr = self.transfers[t]
        staged = not sending and tr.exchange is not None  # received into scratch, then copied or reduced
        if len(tr.chunks) == 1 and not staged:
            return 1
        rank = tr.src if sending else tr.dst
        where = self.layout.working
        locs = [where[(rank, k)] for k in tr.chunks]
        pieces = len(_pieces(len(locs)))
        if is_contiguous(locs) and not staged:
            return pieces
        return pieces + len(_runs(locs))

    def _threadblock_orders(self, structure: _Structure) -> tuple[dict[TbKey, list[Item]], _Structure]:
        """Items of every threadblock, in order; pairs that cannot be merged are dropped (and banned)."""
        segments = structure.segments
        limit = DIALECTS[self.options.dialect].max_steps
        orders: dict[TbKey, list[Item]] = {}
        paired_send: set[Connection] = set()
        paired_recv: set[Connection] = set()
        kept: set[Pair] = set()
        for pair in sorted(structure.pairs):
            r, ch, q, p = pair
            recv_conn, send_conn = (q, r, ch, 0), (r, p, ch, 0)
            items = None
            if segments.get((q, r, ch), 1) == 1 and segments.get((r, p, ch), 1) == 1:
                items = self._merge(pair)
            if items is None or self._paired_steps(items) > limit:
                self.banned.add(pair)  # over the limit it would overflow: the next attempt would unpair it
                continue
            kept.add(pair)
            orders[TbKey(r, send_conn, recv_conn)] = list(items)
            paired_send.add(send_conn)
            paired_recv.add(recv_conn)
        send_items: dict[Connection, list[Item]] = {}
        recv_items: dict[Connection, list[Item]] = {}
        for t, conn in enumerate(self.connections_of(segments)):
            if conn not in paired_send:
                items_of = send_items.get(conn)
                if items_of is None:
                    items_of = send_items[conn] = orders[TbKey(conn[0], conn, None)] = []
                items_of.append(Item(send=t))
            if conn not in paired_recv:
                items_of = recv_items.get(conn)
                if items_of is None:
                    items_of = recv_items[conn] = orders[TbKey(conn[1], None, conn)] = []
                items_of.append(Item(recv=t))
        return orders, _Structure(segments, frozenset(kept), structure.apply_cap)

    def _paired_steps(self, items: tuple[Item, ...]) -> int:
        """Steps a paired threadblock takes at least (a fused item: one step per piece of 71 chunks)."""
        total = 0
        for recv, send in items:
            if recv >= 0 and send >= 0:
                total += len(_pieces(len(self.transfers[recv].chunks)))
            elif send >= 0:
                total += self._steps(send, True)
            else:
                total += self._steps(recv, False)
        return total

    def _merge(self, pair: Pair) -> tuple[Item, ...] | None:
        if pair not in self.merged:
            r, ch, q, p = pair
            self.merged[pair] = merge(self.order, self.connections[(q, r, ch)], self.connections[(r, p, ch)],
                                      self.layout, self.precedes)
        return self.merged[pair]

    def _leaner_layout(self, orders: dict[TbKey, list[Item]]) -> BufferLayout:
        """Keep chunks in the input buffer when their only writes become ``rrs`` (nothing stored)."""
        fused = [item for items in orders.values() for item in items if item.fused]
        unstored = frozenset(item.recv for item in fused if self.transfers[item.recv].op is Op.REDUCE
                             and dead_after(self.order, self.required, item.recv, item.send))
        if not unstored:
            return self.layout
        if unstored not in self.leaner:
            leaner = plan_layout(self.schedule, self.in_place, unstored)
            for item in fused:
                ta = self.transfers[item.recv]
                if not is_contiguous([leaner.where(ta.dst, k) for k in ta.chunks]):
                    leaner = self.layout
                    break
            self.leaner[unstored] = leaner
        return self.leaner[unstored]

    def _relieve(self, structure: _Structure, keys: list[TbKey]) -> _Structure:
        """Unpair threadblocks over the step limit, or split single-connection ones over more channels."""
        limit = DIALECTS[self.options.dialect].max_steps
        pairs = set(structure.pairs)
        segments = dict(structure.segments)
        apply_cap = structure.apply_cap
        split: set[BaseConnection] = set()
        for key in keys:
            if key.local >= APPLY_LOCAL:  # deferred receives' applies with their nops: fewer per threadblock
                apply_cap = min(apply_cap, structure.apply_cap // 2)
                continue
            if key.send is not None and key.recv is not None:
                pair = (key.rank, key.send[2], key.recv[0], key.send[1])
                pairs.discard(pair)
                self.banned.add(pair)
                continue
            conn = key.send or key.recv
            if conn is None:
                raise LoweringError(f"rank {key.rank} needs more than {limit} local copy steps in one threadblock")
            base = conn[:3]
            if base in split:
                continue
            split.add(base)
            count = len(self.connections[base])
            parts = segments.get(base, 1)
            if parts >= count:
                raise LoweringError(f"one transfer of connection {base[0]}->{base[1]} needs more than {limit} steps "
                                    f"(the {self.options.dialect} limit per threadblock)")
            segments[base] = min(count, parts * 2)
        self._check_channel_count(segments)
        return _Structure(segments, frozenset(pairs), apply_cap)

    def _program(self, gpus: tuple[Gpu, ...], nchannels: int) -> Program:
        col = self.schedule.collective
        dialect = self.options.dialect
        coll = dialect_coll_name(col.kind, dialect)
        name = self.options.name or f"taccl_{self.schedule.name or 'schedule'}_{coll}"
        v2 = dialect == "v2"
        lo, hi = self.options.min_bytes, self.options.max_bytes
        if not v2 and not hi:
            hi = V1_NO_LIMIT  # without maxBytes the v1 runtime uses the algorithm only below 128 MiB
        attrs: tuple[str, ...] = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace")
        attrs += ("outofplace", "minBytes", "maxBytes") if v2 else ("minBytes", "maxBytes")
        if col.root:
            attrs += ("root",)
        return Program(name=name, coll=coll, ngpus=col.num_ranks, nchunksperloop=self._chunks_per_loop(),
                       nchannels=nchannels, proto=self.options.proto, inplace=int(self.in_place), gpus=gpus,
                       outofplace=int(not self.in_place) if v2 else None, min_bytes=lo, max_bytes=hi,
                       attributes=attrs, root=col.root)

    def _chunks_per_loop(self) -> int:
        col = self.schedule.collective
        if col.kind is CollectiveKind.ALLTOALL:
            return col.num_ranks * col.chunk_factor
        return col.num_chunks

    # -- operations
    def _build_ops(self, orders: dict[TbKey, list[Item]], layout: BufferLayout, conn_of: list[Connection],
                   apply_cap: int) -> _Ops:
        """Steps for every item, then each step's dependencies from the schedule's orderings.

        A deferred receive (see :func:`deferred_receives`) lands in scratch in
        its threadblock; its apply (``re``/``cpy`` into place) goes to a local
        threadblock holding a chain of applies, each waiting (in the schedule)
        for the commit of the one before it, so the chain delays none of them.
        """
        emitter = _Emitter(self.transfers, layout, self.options.dialect)
        init_op = emitter.initial_copies()
        count = len(self.transfers)
        start_op = [-1] * count
        arrive_op = [-1] * count
        commit_first = [-1] * count
        commit_op = [-1] * count
        deferred = deferred_receives(self.order, orders.values(), self.precedes) if apply_cap else frozenset()
        landed: dict[int, tuple[int, int]] = {}  # deferred receive -> (its last receive op, scratch offset)
        for key in sorted(orders, key=TbKey.sort_key):
            emitter.start(key)
            for recv, send in orders[key]:
                if recv >= 0 and send >= 0:
                    reduced = self.transfers[recv].op is Op.REDUCE
                    unstored = reduced and dead_after(self.order, self.required, recv, send)
                    first, last = emitter.fused(recv, send, reduced, unstored)
                    commit_first[recv] = start_op[send] = first
                    commit_op[recv] = arrive_op[send] = last
                elif send >= 0:
                    start_op[send], arrive_op[send] = emitter.send_side(send)
                elif recv in deferred:
                    landed[recv] = emitter.land(recv)
                else:
                    commit_first[recv], commit_op[recv] = emitter.recv_side(recv)
        local = APPLY_LOCAL
        for chain in self._apply_chains(deferred, apply_cap, layout):
            emitter.start(TbKey(self.transfers[chain[0]].dst, None, None, local))
            local += 1
            for t in chain:
                commit_first[t], commit_op[t] = emitter.apply(t, landed[t][1])

        deps: list[list[int]] = [[] for _ in emitter.ops]
        raw, waw, war = self.order.raw, self.order.waw, self.order.war
        for t, tr in enumerate(self.transfers):
            start_deps = deps[start_op[t]]
            for w in raw[t]:
                if w == INITIAL:
                    if init_op:
                        start_deps += [init_op[(tr.src, k)] for k in tr.chunks if (tr.src, k) in init_op]
                else:
                    start_deps.append(commit_op[w])
            for x in tr.after:
                tx = self.transfers[x]
                if tx.dst == tr.src:
                    start_deps.append(commit_op[x])
                elif tx.src == tr.src:
                    start_deps.append(arrive_op[x])
                # an order between different ranks cannot be written in MSCCL: data dependencies suffice
            conn = conn_of[t]
            if conn[3]:
                prev = self.connections[conn[:3]][self.conn_index[t] - 1]
                if conn_of[prev] != conn:
                    start_deps.append(arrive_op[prev])  # a segment starts after the previous one's last send
            first_deps = deps[commit_first[t]]
            for w in waw[t]:
                if w == INITIAL:
                    if init_op:
                        first_deps += [init_op[(tr.dst, k)] for k in tr.chunks if (tr.dst, k) in init_op]
                else:
                    first_deps.append(commit_op[w])
            for x in war[t]:
                first_deps.append(arrive_op[x])
            if t in landed:
                first_deps.append(landed[t][0])
        matches = tuple(pair for t in range(count)
                        for pair in zip(emitter.sends_of[t], emitter.recvs_of[t], strict=True))
        return _Ops(tuple(emitter.ops), emitter.tb_ops, tuple(_distinct(ds, op_id) for op_id, ds in enumerate(deps)),
                    matches, tuple(emitter.scratch), deferred)

    def _apply_chains(self, deferred: frozenset[int], cap: int, layout: BufferLayout) -> list[list[int]]:
        """Deferred receives grouped in chains of at most ``cap``, one local threadblock each.

        In program order (the schedule's waits point backwards), a receive
        joins a chain on its rank whose last member's commit it waits for: one
        ending in a writer of its chunks first, else one of the few last
        extended; else it starts a chain. Two ``re`` into the same place with
        different counts never follow each other (the runtime would fuse them).
        """
        order = self.order
        chains: list[list[int]] = []
        tail_of: dict[int, int] = {}  # transfer at the end of a chain -> the chain
        recent: dict[int, list[int]] = {}  # rank -> chains, most recently extended last
        for t in sorted(deferred):
            rank = self.transfers[t].dst
            mine = recent.setdefault(rank, [])
            direct = [tail_of[w] for w in order.waw[t] if w in tail_of]
            tried = direct + [c for c in reversed(mine[-_APPLY_TAILS:]) if c not in direct]
            chosen = -1
            for c in tried:
                tail = chains[c][-1]
                if len(chains[c]) < cap and self._applies_fuse_apart(tail, t, layout) and (
                        c in direct or self.precedes((t, COMMIT), (tail, COMMIT))):
                    chosen = c
                    break
            if chosen < 0:
                chosen = len(chains)
                chains.append([])
            else:
                del tail_of[chains[chosen][-1]]
                mine.remove(chosen)
            chains[chosen].append(t)
            tail_of[t] = chosen
            mine.append(chosen)
        return chains

    def _applies_fuse_apart(self, a: int, b: int, layout: BufferLayout) -> bool:
        """Applying ``b`` right after ``a`` cannot make the runtime fuse two ``re`` of different counts."""
        ta, tb = self.transfers[a], self.transfers[b]
        if ta.op is not Op.REDUCE or tb.op is not Op.REDUCE:
            return True
        last = _runs([layout.where(ta.dst, k) for k in ta.chunks])[-1]
        first = _runs([layout.where(tb.dst, k) for k in tb.chunks])[0]
        return last[0] != first[0] or last[1] == first[1]


class _Emitter:
    """Appends steps to threadblocks (one at a time) and stages non-contiguous messages through scratch."""

    def __init__(self, transfers: tuple[Transfer, ...], layout: BufferLayout, dialect: str) -> None:
        self.transfers = transfers
        self.layout = layout
        self.limit = DIALECTS[dialect].max_steps
        self.ops: list[LoweredOp] = []
        self.tb_ops: dict[TbKey, list[int]] = {}
        self.scratch = list(layout.scratch)
        self.sends_of: list[list[int]] = [[] for _ in transfers]
        self.recvs_of: list[list[int]] = [[] for _ in transfers]
        self.key = TbKey(-1, None, None)
        self.ids: list[int] = []

    def start(self, key: TbKey) -> None:
        """Steps emitted from now on go to threadblock ``key``."""
        self.key = key
        self.ids = self.tb_ops.setdefault(key, [])

    def emit(self, kind: StepType, src: Location, dst: Location, cnt: int, sends: int = -1,
             receives: int = -1) -> int:
        """Append a step; ``sends``/``receives``: the transfer whose data it sends / receives."""
        op_id = len(self.ops)
        self.ops.append(LoweredOp(op_id, self.key, kind, src, dst, cnt))
        self.ids.append(op_id)
        if sends >= 0:
            self.sends_of[sends].append(op_id)
        if receives >= 0:
            self.recvs_of[receives].append(op_id)
        return op_id

    def allocate_scratch(self, rank: int, count: int) -> int:
        """Reserve ``count`` contiguous scratch chunks on ``rank``; return the first offset."""
        start = self.scratch[rank]
        self.scratch[rank] += count
        return start

    def initial_copies(self) -> dict[tuple[int, int], int]:
        """The copies into working locations, in local threadblocks of at most max_steps; (rank, chunk) -> op."""
        init_op: dict[tuple[int, int], int] = {}
        copies_of = self.layout.initial_copies
        for rank in sorted(copies_of):
            copies = sorted(copies_of[rank], key=lambda c: (c[1], c[2]))
            by_move = {(src, dst): chunk for chunk, src, dst in copies}
            emitted = 0
            for src, dst, cnt in contiguous_runs([(src, dst) for _, src, dst in copies]):
                for start in range(0, cnt, MAX_COUNT - 1):
                    n = min(MAX_COUNT - 1, cnt - start)
                    if emitted % self.limit == 0:
                        self.start(TbKey(rank, None, None, emitted // self.limit))
                    op_id = self.emit(StepType.COPY, (src[0], src[1] + start), (dst[0], dst[1] + start), n)
                    emitted += 1
                    for k in range(start, start + n):
                        init_op[(rank, by_move[((src[0], src[1] + k), (dst[0], dst[1] + k))])] = op_id
        return init_op

    def send_side(self, t: int) -> tuple[int, int]:
        tr = self.transfers[t]
        where = self.layout.working
        if len(tr.chunks) == 1:
            loc = where[(tr.src, tr.chunks[0])]
            op_id = self.emit(StepType.SEND, loc, loc, 1, sends=t)
            return op_id, op_id
        locs = [where[(tr.src, k)] for k in tr.chunks]
        first = -1
        if is_contiguous(locs):
            base = locs[0]
        else:
            start = self.allocate_scratch(tr.src, len(locs))
            base = (Buffer.SCRATCH, start)
            for src, dst, cnt in _capped_runs([(loc, (Buffer.SCRATCH, start + i)) for i, loc in enumerate(locs)]):
                op_id = self.emit(StepType.COPY, src, dst, cnt)
                first = op_id if first < 0 else first
        last = -1
        for off, cnt in _pieces(len(locs)):
            loc = (base[0], base[1] + off)
            last = self.emit(StepType.SEND, loc, loc, cnt, sends=t)
            first = last if first < 0 else first
        return first, last

    def recv_side(self, t: int) -> tuple[int, int]:
        tr = self.transfers[t]
        where = self.layout.working
        reduce = tr.op is Op.REDUCE
        # an exchange member lands in scratch and is applied once the rank's own sends of it are done, so the
        # receive never waits on them (a waiting receive would stall its sender once the FIFO is full)
        direct = tr.exchange is None
        if len(tr.chunks) == 1 and direct:
            loc = where[(tr.dst, tr.chunks[0])]
            op_id = self.emit(StepType.RECV_REDUCE_COPY if reduce else StepType.RECV, loc, loc, 1, receives=t)
            return op_id, op_id
        locs = [where[(tr.dst, k)] for k in tr.chunks]
        if direct and is_contiguous(locs):
            first = last = -1
            kind = StepType.RECV_REDUCE_COPY if reduce else StepType.RECV
            for off, cnt in _pieces(len(locs)):
                loc = (locs[0][0], locs[0][1] + off)
                last = self.emit(kind, loc, loc, cnt, receives=t)
                first = last if first < 0 else first
            return first, last
        start = self.allocate_scratch(tr.dst, len(locs))
        for off, cnt in _pieces(len(locs)):
            loc = (Buffer.SCRATCH, start + off)
            self.emit(StepType.RECV, loc, loc, cnt, receives=t)
        first = last = -1
        moves = [((Buffer.SCRATCH, start + i), loc) for i, loc in enumerate(locs)]
        for src, dst, cnt in _capped_runs(moves):
            last = self.emit(StepType.REDUCE if reduce else StepType.COPY, src, dst, cnt)
            first = last if first < 0 else first
        return first, last

    def land(self, t: int) -> tuple[int, int]:
        """The receive of transfer ``t`` into fresh scratch; (its last op, the scratch offset)."""
        tr = self.transfers[t]
        start = self.allocate_scratch(tr.dst, len(tr.chunks))
        last = -1
        for off, cnt in _pieces(len(tr.chunks)):
            loc = (Buffer.SCRATCH, start + off)
            last = self.emit(StepType.RECV, loc, loc, cnt, receives=t)
        return last, start

    def apply(self, t: int, start: int) -> tuple[int, int]:
        """Copy or add transfer ``t``'s chunks from scratch at ``start`` into their places; (first op, last op)."""
        tr = self.transfers[t]
        kind = StepType.REDUCE if tr.op is Op.REDUCE else StepType.COPY
        moves = [((Buffer.SCRATCH, start + i), self.layout.working[(tr.dst, k)]) for i, k in enumerate(tr.chunks)]
        first = last = -1
        for src, dst, cnt in _capped_runs(moves):
            last = self.emit(kind, src, dst, cnt)
            first = last if first < 0 else first
        return first, last

    def fused(self, a: int, b: int, reduced: bool, unstored: bool) -> tuple[int, int]:
        ta = self.transfers[a]
        where = self.layout.working
        locs = [where[(ta.dst, k)] for k in ta.chunks]
        if not reduced:
            kind = StepType.RECV_COPY_SEND
        else:
            kind = StepType.RECV_REDUCE_SEND if unstored else StepType.RECV_REDUCE_COPY_SEND
        first = last = -1
        for off, cnt in _pieces(len(locs)):
            loc = (locs[0][0], locs[0][1] + off)
            last = self.emit(kind, loc, loc, cnt, sends=b, receives=a)
            first = last if first < 0 else first
        return first, last


def _distinct(deps: list[int], op_id: int) -> tuple[int, ...]:
    """``deps`` without repeats and without ``op_id`` itself, in first-seen order."""
    if not deps:
        return ()
    if len(deps) == 1:
        return () if deps[0] == op_id else (deps[0],)
    return tuple(d for d in dict.fromkeys(deps) if d != op_id)


def _capped_runs(moves: list[tuple[Location, Location]]) -> list[tuple[Location, Location, int]]:
    """:func:`contiguous_runs` of (from, to) moves, cut in pieces of at most 71 chunks."""
    out = []
    for (sb, so), (db, do), cnt in contiguous_runs(moves):
        out += [((sb, so + off), (db, do + off), n) for off, n in _pieces(cnt)]
    return out


def _runs(locs: list[Location]) -> list[tuple[Location, int]]:
    """(first location, count) of each step applying chunks at ``locs`` from consecutive scratch."""
    return [(dst, cnt) for _, dst, cnt in _capped_runs([((Buffer.SCRATCH, i), loc) for i, loc in enumerate(locs)])]


def _pieces(count: int) -> list[tuple[int, int]]:
    """(offset, cnt) pieces of at most 71 chunks (cnt must stay below 72)."""
    step = MAX_COUNT - 1
    if count <= step:
        return [(0, count)]
    return [(off, min(step, count - off)) for off in range(0, count, step)]


def _largest_segment(sizes: list[int], parts: int, waits: Sequence[bool] | None = None) -> int:
    """The most steps any segment gets when ``sizes`` (one per transfer) are cut into ``parts`` as the lowering does.

    ``waits`` (sending side): whether each transfer's first send waits for
    something. A segment after the first also waits for the previous
    segment's last send, so when its first transfer waits for something
    else too, the two dependencies take a ``nop`` step.
    """
    count = len(sizes)
    segment = np.arange(count, dtype=np.int64) * parts // count
    totals = np.asarray(np.bincount(segment, weights=np.asarray(sizes, dtype=np.float64), minlength=parts),
                        dtype=np.float64)
    if waits is not None:
        firsts = np.flatnonzero(np.diff(segment)) + 1  # the first transfer of every segment after the first
        totals[segment[firsts]] += np.asarray(waits, dtype=np.float64)[firsts]
    return int(totals.max())
