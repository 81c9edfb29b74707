"""Schedule -> MSCCL program: threadblocks, fused steps, dependencies, within a dialect's limits.

A transfer ``src -> dst`` on channel ``c`` becomes a send-type step in the
threadblock of ``src`` that sends to ``dst`` on ``c`` and a receive-type step in
the threadblock of ``dst`` that receives from ``src`` on ``c``, each connection
keeping the schedule's program order (its FIFO). Where a rank receives chunks
and forwards the same chunks on (a ring), the receiving and sending
connections share one threadblock and the two steps fuse into ``rcs``
(``rrcs``/``rrs`` for reductions), but only where that placement delays
nothing the schedule would not delay. Every other ordering the schedule needs
(read-after-write at the sender, write-after-read/write at the receiver,
``after``) becomes a ``depid``/``deps`` dependency, with ``nop`` steps for
extra ones. Non-contiguous messages, and messages of an exchange, go through
scratch (``cpy``/``re``, which take no time). ``instances`` splits every chunk in parts sent on parallel
channels. Threadblocks over the step limit are split over more channels; what
cannot fit raises :class:`LoweringError` naming the limit.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import LoweringError
from taccl_py.msccl.analysis import ARRIVE, COMMIT, INITIAL, START, ScheduleOrder, analyze
from taccl_py.msccl.assembly import Connection, LoweredOp, TbKey, assemble
from taccl_py.msccl.ir import (
    DIALECTS,
    MAX_COUNT,
    PROTOCOLS,
    Buffer,
    Gpu,
    Program,
    StepType,
    dialect_coll_name,
)
from taccl_py.msccl.layout import BufferLayout, Location, contiguous_runs, plan_layout
from taccl_py.msccl.machine import build_machine
from taccl_py.msccl.verify import find_deadlock
from taccl_py.msccl.writer import save_xml
from taccl_py.schedule import Op, Schedule
from taccl_py.topology import Topology

__all__ = ["LoweringOptions", "lower_schedule", "write_schedule_xml"]

_MAX_ROUNDS = 40

V1_NO_LIMIT = 1 << 62
"""maxBytes written for v1 when there is no upper size (v1 defaults to 128 MiB when it is absent)."""

_Emit = Callable[[TbKey, StepType, Location, Location, int], int]
"""Appends one operation to a threadblock and returns its id."""


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
                   name: str | None = None) -> Program:
    """The MSCCL program of ``schedule`` (see the module docstring).

    Raises :class:`LoweringError` when the schedule does not fit the dialect
    (too many channels, threadblocks, steps, offsets...), naming the limit.
    """
    options = LoweringOptions(dialect, instances, proto, min_bytes, max_bytes, in_place, name)
    _check_options(schedule, topology, options)
    col = schedule.collective
    in_place_mode = options.in_place if options.in_place is not None else col.kind is not CollectiveKind.ALLTOALL
    expanded = _expand(schedule, options.instances)
    order = analyze(expanded)
    builder = _Lowering(expanded, order, in_place_mode, options)
    return builder.run()


def write_schedule_xml(schedule: Schedule, topology: Topology, path: str | os.PathLike[str], *,
                       dialect: str = "v2", instances: int = 1, proto: str = "Simple", min_bytes: int = 0,
                       max_bytes: int = 0, in_place: bool | None = None, name: str | None = None) -> Program:
    """Lower ``schedule`` and write it to ``path`` atomically; returns the program."""
    program = lower_schedule(schedule, topology, dialect=dialect, instances=instances, proto=proto,
                             min_bytes=min_bytes, max_bytes=max_bytes, in_place=in_place, name=name)
    save_xml(program, path, dialect)
    return program


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


# ------------------------------------------------------------------- items
@dataclass(frozen=True)
class _Item:
    """One entry of a threadblock's order: the send side, the receive side, or both fused."""

    recv: int = -1
    send: int = -1


class _Lowering:
    """The lowering of one schedule; ``run`` retries with fewer pairings / more segments until it fits."""

    def __init__(self, schedule: Schedule, order: ScheduleOrder, in_place: bool, options: LoweringOptions) -> None:
        self.schedule = schedule
        self.order = order
        self.in_place = in_place
        self.options = options
        self.transfers = schedule.transfers
        self.connections: dict[tuple[int, int, int], list[int]] = {}
        self.conn_index: list[int] = []
        for i, t in enumerate(self.transfers):
            members = self.connections.setdefault((t.src, t.dst, t.channel), [])
            self.conn_index.append(len(members))
            members.append(i)
        self.required = set(schedule.collective.required())
        self.segments: dict[tuple[int, int, int], int] = {}
        self.pairs: set[tuple[int, int, int, int]] = set()  # (rank, channel, recv peer, send peer)
        self.banned: set[tuple[int, int, int, int]] = set()

    # -- structure
    def connection_of(self, t: int) -> Connection:
        tr = self.transfers[t]
        key = (tr.src, tr.dst, tr.channel)
        parts = self.segments.get(key, 1)
        if parts == 1:
            return (*key, 0)
        return (*key, self.conn_index[t] * parts // len(self.connections[key]))

    def run(self) -> Program:
        base_layout = plan_layout(self.schedule, self.in_place)
        self.pairs = self._choose_pairs(base_layout)
        for _ in range(_MAX_ROUNDS):
            layout = plan_layout(self.schedule, self.in_place)
            orders = self._threadblock_orders(layout)
            layout = self._leaner_layout(orders, layout)
            ops, tb_ops = self._build_ops(orders, layout)
            preferred = {self.connection_of(t): self.transfers[t].channel for t in range(len(self.transfers))}
            col = self.schedule.collective
            result = assemble(ops, tb_ops, col.num_ranks, self.options.dialect, preferred,
                              (layout.i_chunks, layout.o_chunks), layout.scratch)
            if result.overflowing:
                self._relieve(result.overflowing)
                continue
            program = self._program(result.gpus, result.nchannels)
            deadlock = find_deadlock(build_machine(program))
            if deadlock is None:
                return program
            if not self.pairs:
                raise LoweringError(f"the schedule cannot be expressed in MSCCL: {deadlock.message}")
            self.banned |= self.pairs
            self.pairs = set()
        raise LoweringError("could not fit the schedule in the dialect's limits after splitting threadblocks "
                            f"{_MAX_ROUNDS} times")

    def _leaner_layout(self, orders: dict[TbKey, list[_Item]], layout: BufferLayout) -> BufferLayout:
        """Keep chunks in the input buffer when their only writes become ``rrs`` (nothing stored)."""
        fused = [item for items in orders.values() for item in items if item.recv >= 0 and item.send >= 0]
        unstored = frozenset(item.recv for item in fused if self.transfers[item.recv].op is Op.REDUCE
                             and self._dead_after(item.recv, item.send))
        if not unstored:
            return layout
        leaner = plan_layout(self.schedule, self.in_place, unstored)
        for item in fused:
            ta = self.transfers[item.recv]
            if not _contiguous([leaner.where(ta.dst, k) for k in ta.chunks]):
                return layout
        return leaner

    def _relieve(self, keys: list[TbKey]) -> None:
        """Unpair threadblocks over the step limit, or split single-connection ones over more channels."""
        limit = DIALECTS[self.options.dialect].max_steps
        split: set[tuple[int, int, int]] = set()
        for key in keys:
            if key.send is not None and key.recv is not None:
                pair = (key.rank, key.send[2], key.recv[0], key.send[1])
                self.pairs.discard(pair)
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
            parts = self.segments.get(base, 1)
            if parts >= count:
                raise LoweringError(f"one transfer of connection {base[0]}->{base[1]} needs more than {limit} steps "
                                    f"(the {self.options.dialect} limit per threadblock)")
            self.segments[base] = min(count, parts * 2)

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

    # -- pairing
    def _fusable(self, a: int, b: int, layout: BufferLayout) -> bool:
        """Receive ``a`` and send ``b`` can be one rcs/rrcs/rrs step."""
        ta, tb = self.transfers[a], self.transfers[b]
        if ta.chunks != tb.chunks or ta.dst != tb.src or ta.channel != tb.channel or ta.exchange is not None:
            return False
        if self.order.raw[b] != (a,) or any(x != a for x in tb.after):
            return False
        locs = [layout.where(ta.dst, k) for k in ta.chunks]
        if not _contiguous(locs):
            return False
        q, r, p = ta.src, ta.dst, tb.dst
        for d in self.order.dependents[a]:
            if d == b:
                continue
            td = self.transfers[d]
            if td.channel != ta.channel or (td.src, td.dst) not in ((q, r), (r, p)):
                return False
        return True

    def _choose_pairs(self, layout: BufferLayout) -> set[tuple[int, int, int, int]]:
        """Per rank and channel, match receiving and sending peers by how many chunks flow straight through."""
        counts: dict[tuple[int, int, int, int], int] = {}
        for b, tb in enumerate(self.transfers):
            raw = self.order.raw[b]
            if len(raw) == 1 and raw[0] >= 0 and self._fusable(raw[0], b, layout):
                a = raw[0]
                key = (tb.src, tb.channel, self.transfers[a].src, tb.dst)
                counts[key] = counts.get(key, 0) + 1
        chosen: set[tuple[int, int, int, int]] = set()
        used_recv: set[tuple[int, int, int]] = set()
        used_send: set[tuple[int, int, int]] = set()
        for key in sorted(counts, key=lambda k: (-counts[k], k)):
            r, ch, q, p = key
            if key in self.banned or (r, ch, q) in used_recv or (r, ch, p) in used_send:
                continue
            chosen.add(key)
            used_recv.add((r, ch, q))
            used_send.add((r, ch, p))
        return chosen

    def _threadblock_orders(self, layout: BufferLayout) -> dict[TbKey, list[_Item]]:
        """Items of every threadblock, in order; pairs whose merge would delay something are dropped."""
        while True:
            orders: dict[TbKey, list[_Item]] = {}
            paired_send: set[Connection] = set()
            paired_recv: set[Connection] = set()
            failed = None
            for pair in sorted(self.pairs):
                r, ch, q, p = pair
                recv_conn, send_conn = (q, r, ch, 0), (r, p, ch, 0)
                if self.segments.get((q, r, ch), 1) > 1 or self.segments.get((r, p, ch), 1) > 1:
                    failed = pair
                    break
                items = self._merge(self.connections[(q, r, ch)], self.connections[(r, p, ch)], layout)
                if items is None:
                    failed = pair
                    break
                orders[TbKey(r, send_conn, recv_conn)] = items
                paired_send.add(send_conn)
                paired_recv.add(recv_conn)
            if failed is not None:
                self.pairs.discard(failed)
                self.banned.add(failed)
                continue
            for t in range(len(self.transfers)):
                conn = self.connection_of(t)
                if conn not in paired_send:
                    orders.setdefault(TbKey(conn[0], conn, None), []).append(_Item(send=t))
                if conn not in paired_recv:
                    orders.setdefault(TbKey(conn[1], None, conn), []).append(_Item(recv=t))
            return orders

    def _merge(self, recvs: list[int], sends: list[int], layout: BufferLayout) -> list[_Item] | None:
        """Interleave a connection's receives and another's sends in one threadblock, fusing forwards."""
        order = self.order
        items: list[_Item] = []
        i = j = 0
        prev: _Item | None = None
        conns = {(self.transfers[recvs[0]].src, self.transfers[recvs[0]].dst),
                 (self.transfers[sends[0]].src, self.transfers[sends[0]].dst)}
        channel = self.transfers[recvs[0]].channel
        while i < len(recvs) or j < len(sends):
            a = recvs[i] if i < len(recvs) else -1
            b = sends[j] if j < len(sends) else -1
            if a >= 0 and b >= 0 and self._fusable(a, b, layout):
                item = _Item(recv=a, send=b)
                i += 1
                j += 1
            else:
                b_ok = b >= 0 and not (a >= 0 and order.waits((b, START), (a, COMMIT))) and self._send_after(prev, b)
                a_ok = a >= 0 and not (b >= 0 and order.waits((a, COMMIT), (b, ARRIVE))) and self._recv_after(
                    prev, a, conns, channel)
                if b_ok:
                    item = _Item(send=b)
                    j += 1
                elif a_ok:
                    item = _Item(recv=a)
                    i += 1
                else:
                    return None
            items.append(item)
            prev = item
        return items

    def _send_after(self, prev: _Item | None, b: int) -> bool:
        """Placing send ``b`` right after ``prev`` delays nothing: b waits for prev anyway."""
        if prev is None or prev.send >= 0:
            return True
        return self.order.waits((b, START), (prev.recv, COMMIT))

    def _recv_after(self, prev: _Item | None, a: int, conns: set[tuple[int, int]], channel: int) -> bool:
        """Placing receive ``a`` after ``prev`` delays nothing outside this threadblock."""
        if prev is None or prev.send < 0:
            return True
        b = prev.send
        for d in self.order.dependents[a]:
            td = self.transfers[d]
            if td.channel == channel and (td.src, td.dst) in conns:
                continue
            event = START if (a in self.order.raw[d] or a in td.after) else COMMIT
            if not self.order.waits((d, event), (b, ARRIVE)):
                return False
        return True

    # -- operations
    def _build_ops(self, orders: dict[TbKey, list[_Item]], layout: BufferLayout) -> tuple[
            list[LoweredOp], dict[TbKey, list[int]]]:
        ops: list[LoweredOp] = []
        tb_ops: dict[TbKey, list[int]] = {}
        start_op: dict[int, int] = {}
        arrive_op: dict[int, int] = {}
        commit_first: dict[int, int] = {}
        commit_op: dict[int, int] = {}
        init_op: dict[tuple[int, int], int] = {}

        def emit(key: TbKey, kind: StepType, src: Location, dst: Location, cnt: int) -> int:
            op = LoweredOp(len(ops), key, kind, src, dst, cnt)
            ops.append(op)
            tb_ops.setdefault(key, []).append(op.id)
            return op.id

        for rank in sorted(layout.initial_copies):
            copies = sorted(layout.initial_copies[rank], key=lambda c: (c[1], c[2]))
            key = TbKey(rank, None, None, 0)
            by_move = {(src, dst): chunk for chunk, src, dst in copies}
            for src, dst, cnt in contiguous_runs([(src, dst) for _, src, dst in copies]):
                for start in range(0, cnt, MAX_COUNT - 1):
                    n = min(MAX_COUNT - 1, cnt - start)
                    op_id = emit(key, StepType.COPY, (src[0], src[1] + start), (dst[0], dst[1] + start), n)
                    for k in range(start, start + n):
                        init_op[(rank, by_move[((src[0], src[1] + k), (dst[0], dst[1] + k))])] = op_id
        # split the local copies over threadblocks of at most max_steps
        self._split_local(tb_ops)

        for key in sorted(orders, key=TbKey.sort_key):
            for item in orders[key]:
                if item.recv >= 0 and item.send >= 0:
                    first, last = self._fused(key, item.recv, item.send, layout, emit)
                    commit_first[item.recv] = start_op[item.send] = first
                    commit_op[item.recv] = arrive_op[item.send] = last
                elif item.send >= 0:
                    start_op[item.send], arrive_op[item.send] = self._send_side(key, item.send, layout, emit)
                else:
                    commit_first[item.recv], commit_op[item.recv] = self._recv_side(key, item.recv, layout, emit)

        by_id = ops
        for t, tr in enumerate(self.transfers):
            start_step = by_id[start_op[t]]
            for w in self.order.raw[t]:
                if w == INITIAL:
                    start_step.deps += [init_op[(tr.src, k)] for k in tr.chunks if (tr.src, k) in init_op]
                else:
                    start_step.deps.append(commit_op[w])
            for x in tr.after:
                tx = self.transfers[x]
                if tx.dst == tr.src:
                    start_step.deps.append(commit_op[x])
                elif tx.src == tr.src:
                    start_step.deps.append(arrive_op[x])
                # an order between different ranks cannot be written in MSCCL: data dependencies suffice
            conn = self.connection_of(t)
            pos = self.conn_index[t]
            if conn[3] and self.connection_of(self.connections[conn[:3]][pos - 1]) != conn:
                start_step.deps.append(arrive_op[self.connections[conn[:3]][pos - 1]])
            first_step = by_id[commit_first[t]]
            for w in self.order.waw[t]:
                if w == INITIAL:
                    first_step.deps += [init_op[(tr.dst, k)] for k in tr.chunks if (tr.dst, k) in init_op]
                else:
                    first_step.deps.append(commit_op[w])
            for x in self.order.war[t]:
                first_step.deps.append(arrive_op[x])
        for op in ops:
            op.deps = [d for d in dict.fromkeys(op.deps) if d != op.id]
        return ops, tb_ops

    def _split_local(self, tb_ops: dict[TbKey, list[int]]) -> None:
        limit = DIALECTS[self.options.dialect].max_steps
        for key in [k for k in tb_ops if k.send is None and k.recv is None]:
            ids = tb_ops.pop(key)
            for part in range(0, len(ids), limit):
                tb_ops[replace(key, local=part // limit)] = ids[part:part + limit]

    def _send_side(self, key: TbKey, t: int, layout: BufferLayout, emit: _Emit) -> tuple[int, int]:
        tr = self.transfers[t]
        locs = [layout.where(tr.src, k) for k in tr.chunks]
        first = -1
        if _contiguous(locs):
            base = locs[0]
        else:
            start = layout.allocate_scratch(tr.src, len(locs))
            base = (Buffer.SCRATCH, start)
            for src, dst, cnt in contiguous_runs([(loc, (Buffer.SCRATCH, start + i)) for i, loc in enumerate(locs)]):
                op_id = emit(key, StepType.COPY, src, dst, cnt)
                first = op_id if first < 0 else first
        last = -1
        for off, cnt in _pieces(len(locs)):
            loc = (base[0], base[1] + off)
            last = emit(key, StepType.SEND, loc, loc, cnt)
            first = last if first < 0 else first
        return first, last

    def _recv_side(self, key: TbKey, t: int, layout: BufferLayout, emit: _Emit) -> tuple[int, int]:
        tr = self.transfers[t]
        locs = [layout.where(tr.dst, k) for k in tr.chunks]
        reduce = tr.op is Op.REDUCE
        # an exchange member lands in scratch and is applied once the rank's own sends of it are done, so the
        # receive never waits on them (a waiting receive would stall its sender once the FIFO is full)
        if _contiguous(locs) and tr.exchange is None:
            first = last = -1
            for off, cnt in _pieces(len(locs)):
                loc = (locs[0][0], locs[0][1] + off)
                last = emit(key, StepType.RECV_REDUCE_COPY if reduce else StepType.RECV, loc, loc, cnt)
                first = last if first < 0 else first
            return first, last
        start = layout.allocate_scratch(tr.dst, len(locs))
        for off, cnt in _pieces(len(locs)):
            loc = (Buffer.SCRATCH, start + off)
            emit(key, StepType.RECV, loc, loc, cnt)
        first = -1
        moves = [((Buffer.SCRATCH, start + i), loc) for i, loc in enumerate(locs)]
        for src, dst, cnt in contiguous_runs(moves):
            last = emit(key, StepType.REDUCE if reduce else StepType.COPY, src, dst, cnt)
            first = last if first < 0 else first
        return first, last

    def _fused(self, key: TbKey, a: int, b: int, layout: BufferLayout, emit: _Emit) -> tuple[int, int]:
        ta = self.transfers[a]
        locs = [layout.where(ta.dst, k) for k in ta.chunks]
        if ta.op is Op.COPY:
            kind = StepType.RECV_COPY_SEND
        else:
            kind = StepType.RECV_REDUCE_SEND if self._dead_after(a, b) else StepType.RECV_REDUCE_COPY_SEND
        first = last = -1
        for off, cnt in _pieces(len(locs)):
            loc = (locs[0][0], locs[0][1] + off)
            last = emit(key, kind, loc, loc, cnt)
            first = last if first < 0 else first
        return first, last

    def _dead_after(self, a: int, b: int) -> bool:
        """The reduced value ``a`` writes is read only by ``b`` and then overwritten or never needed."""
        ta = self.transfers[a]
        for k in ta.chunks:
            readers, next_writer = self.order.after_write[a].get(k, ((), -1))
            if readers != (b,):
                return False
            if next_writer >= 0:
                if self.transfers[next_writer].op is not Op.COPY:
                    return False
            elif (ta.dst, k) in self.required:
                return False
        return True



def _pieces(count: int) -> list[tuple[int, int]]:
    """(offset, cnt) pieces of at most 71 chunks (cnt must stay below 72)."""
    step = MAX_COUNT - 1
    return [(off, min(step, count - off)) for off in range(0, count, step)]


def _contiguous(locs: list[Location]) -> bool:
    return all(loc[0] == locs[0][0] and loc[1] == locs[0][1] + i for i, loc in enumerate(locs))
