"""The verifier's symbolic execution and happens-before race check, compiled (numba) over a :class:`FastMachine`.

:func:`execute` runs ``verify._Execution`` on arrays: transmissions in the machine's
topological order, every buffer slot's last write and readers since, and every access
judged by ``verify._HappensBefore``'s exact rules in the same order (same threadblock,
a direct wait, the rank's own vector clocks made on first need, then the search backwards
with its level/height cut-offs and its shared budget, counted the same way). So it finds
a race, or runs out of budget, exactly where the Python check does.

Values are contribution sets as in :mod:`taccl_py.msccl.semantics`, held as ids: 0 nothing
written, -1 garbage, ``1 + r * I + j`` the single contribution of rank ``r``'s input chunk
``j``, larger ids rows of a pool (one input chunk ``j`` and a set of ranks, 64 per word):
every value a sound program makes has that form. A reduction of two different input
chunks has no row; the execution then stops as *unsupported*.

It only answers "clean or not": :data:`CLEAN` when no race, no garbage and the expected
result on every rank; any other status means the verifier runs the Python execution,
which names what it finds (the messages come from one place).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba.typed import List

from taccl_py.collectives import CollectiveKind
from taccl_py.msccl.arrays import BUFFER_CODE, TYPE_CODE
from taccl_py.msccl.fast_machine import (
    N_COUNT,
    N_DSTBUF,
    N_DSTOFF,
    N_RANK,
    N_SEQ,
    N_SRCBUF,
    N_TB,
    N_TYPE,
    FastMachine,
)
from taccl_py.msccl.ir import Buffer, StepType
from taccl_py.msccl.semantics import DataSpec

__all__ = ["CLEAN", "EXHAUSTED", "RACE", "UNSUPPORTED", "WRONG", "execute"]

CLEAN, RACE, EXHAUSTED, WRONG, UNSUPPORTED = range(5)
"""Statuses: nothing found; a race; the race check's budget ran out; a wrong or garbage result; a value with no row."""

_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLTOALL,
          CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
_AG, _AR, _RS, _A2A, _BC, _RED = range(6)
_I, _O, _S = BUFFER_CODE[Buffer.INPUT], BUFFER_CODE[Buffer.OUTPUT], BUFFER_CODE[Buffer.SCRATCH]
_SEND, _RECV, _RCS = TYPE_CODE[StepType.SEND], TYPE_CODE[StepType.RECV], TYPE_CODE[StepType.RECV_COPY_SEND]
_RRS, _RRC, _RRCS = (TYPE_CODE[StepType.RECV_REDUCE_SEND], TYPE_CODE[StepType.RECV_REDUCE_COPY],
                     TYPE_CODE[StepType.RECV_REDUCE_COPY_SEND])
_CPY, _RE = TYPE_CODE[StepType.COPY], TYPE_CODE[StepType.REDUCE]


# ------------------------------------------------------------------------------------------ aliasing
@njit(cache=True, inline="always")
def _alias_buffer(kind: int, in_place: bool, rank: int, buffer: int, block: int) -> Any:
    """``DataSpec.alias``: (canonical buffer, shift)."""
    b = np.int64(buffer)
    zero = np.int64(0)
    if not in_place or b == _S:
        return b, zero
    if kind == _AG:
        return (np.int64(_O), np.int64(rank) * block) if b == _I else (b, zero)
    if kind == _RS:
        return (np.int64(_I), np.int64(rank) * block) if b == _O else (b, zero)
    return np.int64(_I), zero


# ------------------------------------------------------------------------------------------ happens-before
@njit(cache=True)
def _labels(order: Any, size: int, pred_ptr: Any, preds: Any, n: int) -> Any:
    level = np.zeros(n, np.int64)
    for k in range(size):
        v = order[k]
        best = 0
        for q in range(pred_ptr[v], pred_ptr[v + 1]):
            if level[preds[q]] > best:
                best = level[preds[q]]
        level[v] = best + 1
    height = np.ones(n, np.int64)
    for k in range(size - 1, -1, -1):
        v = order[k]
        h = height[v] + 1
        for q in range(pred_ptr[v], pred_ptr[v + 1]):
            if height[preds[q]] < h:
                height[preds[q]] = h
    return level, height


@njit(cache=True)
def _local_clocks(nodes: Any, order: Any, size: int, pred_ptr: Any, preds: Any, tb_index: Any, rank_tbs: Any,
                  ngpus: int) -> Any:
    """``_HappensBefore._local_clocks``: per node the offset of its clock row in a pool (rows shared as there)."""
    n = nodes.shape[1]
    pool_size = 0
    empty_at = np.zeros(ngpus, np.int64)
    for r in range(ngpus):
        empty_at[r] = pool_size
        pool_size += rank_tbs[r]
    capacity = max(pool_size * 2, 1024)
    pool = np.zeros(capacity, np.int32)
    clock = np.empty(n, np.int64)
    for v in range(n):
        clock[v] = empty_at[nodes[N_RANK, v]]
    for k in range(size):
        v = order[k]
        rank = nodes[N_RANK, v]
        width = rank_tbs[rank]
        first = 1 if nodes[N_SEQ, v] else 0
        row = clock[v - 1] if nodes[N_SEQ, v] else clock[v]
        fresh = False
        for q in range(pred_ptr[v] + first, pred_ptr[v + 1]):
            p = preds[q]
            if nodes[N_RANK, p] != rank:
                continue
            if not fresh:
                if pool_size + width > capacity:
                    capacity = max(2 * capacity, pool_size + width)
                    grown = np.zeros(capacity, np.int32)
                    grown[:pool_size] = pool[:pool_size]
                    pool = grown
                for i in range(width):
                    pool[pool_size + i] = pool[row + i]
                row = pool_size
                pool_size += width
                fresh = True
            other = clock[p]
            for i in range(width):
                if pool[other + i] > pool[row + i]:
                    pool[row + i] = pool[other + i]
            g = tb_index[nodes[N_TB, p]]
            if pool[row + g] <= nodes[N_SEQ, p]:
                pool[row + g] = nodes[N_SEQ, p] + 1
        clock[v] = row
    return clock, pool


# ------------------------------------------------------------------------------------------ the execution
@njit(cache=True)
def _execute(nodes: Any, so_ptr: Any, srcoffs: Any, pred_ptr: Any, preds: Any, match_send: Any, order: Any,
             tb_index: Any, rank_tbs: Any, kind: int, ngpus: int, nchunks: int, in_place: bool, root: int,
             budget: int) -> Any:
    """Run the program on contribution ids; (status, searches made, where it stopped: a slot or node, or -1)."""
    n = nodes.shape[1]
    size = len(order)
    block = nchunks // ngpus
    per_rank = block if kind == _AG else nchunks  # input chunks per rank (DataSpec.input_chunks)
    singles = ngpus * per_rank
    words = (ngpus + 63) // 64
    # buffer widths: every offset a step, the initial data or the result uses, after aliasing
    width = np.zeros(3, np.int64)
    for v in range(n):
        rank = nodes[N_RANK, v]
        t = nodes[N_TYPE, v]
        count = nodes[N_COUNT, v]
        if t in (_SEND, _RRS, _RRC, _RRCS, _CPY, _RE):
            b, shift = _alias_buffer(kind, in_place, rank, nodes[N_SRCBUF, v], block)
            for q in range(so_ptr[v], so_ptr[v + 1]):
                if srcoffs[q] + shift + count > width[b]:
                    width[b] = srcoffs[q] + shift + count
        if t != _SEND and t != _RRS:
            b, shift = _alias_buffer(kind, in_place, rank, nodes[N_DSTBUF, v], block)
            if nodes[N_DSTOFF, v] + shift + count > width[b]:
                width[b] = nodes[N_DSTOFF, v] + shift + count
    for rank in range(ngpus):  # the initial data and the result
        b, shift = _alias_buffer(kind, in_place, rank, _I, block)
        width[b] = max(width[b], shift + per_rank)
        b, shift = _alias_buffer(kind, in_place, rank, _O, block)
        width[b] = max(width[b], shift + nchunks)
    span = width[0] + width[1] + width[2]
    base = np.zeros(3, np.int64)
    base[1] = width[0]
    base[2] = width[0] + width[1]
    slots = ngpus * span
    memory = np.zeros(slots, np.int64)
    last_write = np.full(slots, -1, np.int64)
    head = np.full(slots, -1, np.int64)
    tail = np.full(slots, -1, np.int64)
    rd = List([np.empty(1024, np.int64), np.empty(1024, np.int64)])  # readers: node, next (grown)
    rows = List([np.empty(1024, np.int64)])  # pool: the input chunk of each row
    bits = List([np.zeros((1024, words), np.uint64)])  # pool: the ranks of each row
    counters = np.zeros(4, np.int64)  # readers used, rows used, searches, budget left
    counters[3] = budget
    for rank in range(ngpus):  # DataSpec.initial
        if kind == _BC and rank != root:
            continue
        b, shift = _alias_buffer(kind, in_place, rank, _I, block)
        for j in range(per_rank):
            memory[rank * span + base[b] + j + shift] = 1 + rank * per_rank + j
    pay_ptr = np.zeros(n + 1, np.int64)
    for v in range(n):
        t = nodes[N_TYPE, v]
        sends = t in (_SEND, _RCS, _RRS, _RRCS)
        pay_ptr[v + 1] = pay_ptr[v] + (nodes[N_COUNT, v] if sends else 0)
    payload = np.empty(pay_ptr[n], np.int64)
    values = np.empty(72, np.int64)
    other = np.empty(72, np.int64)
    position = np.empty(n, np.int64)
    for k in range(size):
        position[order[k]] = k
    lazy = List([np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)])  # clock rows, level, height
    clock_pool = List([np.zeros(0, np.int32)])
    seen = np.zeros(n, np.int64)
    stack = np.empty(max(n, 1), np.int64)

    def decode(x: int) -> Any:
        """(input chunk, single rank or -1, pool row or -1) of a value id."""
        if x <= singles:
            return (x - 1) % per_rank, (x - 1) // per_rank, -1
        r = x - singles - 1
        return rows[0][r], -1, r

    def reduce(x: int, y: int) -> int:
        """Union of two disjoint contribution sets of one input chunk; -1 garbage, -2 no row for it."""
        if x < 0 or y < 0:
            return -1
        cx, sx, rx = decode(x)
        cy, sy, ry = decode(y)
        if cx != cy:
            return -2
        pool = bits[0]
        if rx < 0 and ry < 0:
            if sx == sy:
                return -1
        elif rx < 0:
            if pool[ry, sx // 64] & (np.uint64(1) << np.uint64(sx % 64)):
                return -1
        elif ry < 0:
            if pool[rx, sy // 64] & (np.uint64(1) << np.uint64(sy % 64)):
                return -1
        else:
            for w in range(words):
                if pool[rx, w] & pool[ry, w]:
                    return -1
        used = counters[1]
        if used == pool.shape[0]:
            grown = np.zeros((2 * used, words), np.uint64)
            grown[:used] = pool
            bits[0] = grown
            pool = grown
            chunks = np.empty(2 * used, np.int64)
            chunks[:used] = rows[0][:used]
            rows[0] = chunks
        for w in range(words):
            pool[used, w] = 0
        for s, r in ((sx, rx), (sy, ry)):
            if r < 0:
                pool[used, s // 64] |= np.uint64(1) << np.uint64(s % 64)
            else:
                for w in range(words):
                    pool[used, w] |= pool[r, w]
        rows[0][used] = cx
        counters[1] = used + 1
        return singles + 1 + used

    def ordered(earlier: int, later: int) -> int:
        """``_HappensBefore.ordered``: 1 ordered, 0 not (a race), 2 the budget ran out."""
        if earlier == later:
            return 1
        if nodes[N_TB, earlier] == nodes[N_TB, later]:
            return 1 if nodes[N_SEQ, earlier] < nodes[N_SEQ, later] else 0
        for q in range(pred_ptr[later], pred_ptr[later + 1]):
            if preds[q] == earlier:
                return 1
        if not len(lazy[0]):
            clock, pool = _local_clocks(nodes, order, size, pred_ptr, preds, tb_index, rank_tbs, ngpus)
            lazy[0] = clock
            clock_pool[0] = pool
        same_rank = nodes[N_RANK, earlier] == nodes[N_RANK, later]
        if same_rank and clock_pool[0][lazy[0][later] + tb_index[nodes[N_TB, earlier]]] > nodes[N_SEQ, earlier]:
            return 1
        counters[2] += 1
        if not len(lazy[1]):
            level, height = _labels(order, size, pred_ptr, preds, n)
            lazy[1] = level
            lazy[2] = height
        level, height = lazy[1], lazy[2]
        tb, seq = nodes[N_TB, earlier], nodes[N_SEQ, earlier]
        floor, low, high = position[earlier], level[earlier], height[earlier]
        mark = counters[2]
        stack[0] = later
        depth = 1
        seen[later] = mark
        visited = 1
        found = False
        while depth and not found:
            depth -= 1
            u = stack[depth]
            for q in range(pred_ptr[u], pred_ptr[u + 1]):
                p = preds[q]
                if seen[p] == mark:
                    continue
                seen[p] = mark
                visited += 1
                if nodes[N_TB, p] == tb:
                    if nodes[N_SEQ, p] >= seq:
                        found = True
                        break
                    continue
                if position[p] > floor and level[p] > low and height[p] < high:
                    stack[depth] = p
                    depth += 1
        counters[3] -= visited
        if counters[3] < 0:
            return 2
        return 1 if found else 0

    for k in range(size):
        v = order[k]
        t = nodes[N_TYPE, v]
        rank = nodes[N_RANK, v]
        count = nodes[N_COUNT, v]
        if count > 72:
            return UNSUPPORTED, counters[2], v
        received = 0
        if t in (_RECV, _RCS, _RRS, _RRC, _RRCS):
            sender = match_send[v]
            if pay_ptr[sender + 1] - pay_ptr[sender] != count:
                return UNSUPPORTED, counters[2], v  # a count mismatch: garbage the Python execution describes
            received = pay_ptr[sender]
        reads = 0  # the reads, in the Python execution's order (for 're': dst, then every src)
        if t in (_SEND, _RRS, _RRC, _RRCS, _CPY):
            reads = 1
        elif t == _RE:
            reads = 1 + (so_ptr[v + 1] - so_ptr[v])
        for a in range(reads):
            if t == _RE and a == 0:
                buffer, offset = nodes[N_DSTBUF, v], nodes[N_DSTOFF, v]
            elif t == _RE:
                buffer, offset = nodes[N_SRCBUF, v], srcoffs[so_ptr[v] + a - 1]
            else:
                buffer, offset = nodes[N_SRCBUF, v], srcoffs[so_ptr[v]]
            b, shift = _alias_buffer(kind, in_place, rank, buffer, block)
            at = rank * span + base[b] + offset + shift
            for i in range(count):
                slot = at + i
                w = last_write[slot]
                if w >= 0 and w != v:
                    status = ordered(w, v)
                    if status != 1:
                        return (RACE if status == 0 else EXHAUSTED), counters[2], slot
                used = counters[0]
                if used == len(rd[0]):
                    for z in range(2):
                        grown = np.empty(2 * used, np.int64)
                        grown[:used] = rd[z]
                        rd[z] = grown
                rd[0][used] = v
                rd[1][used] = -1
                if head[slot] < 0:
                    head[slot] = used
                else:
                    rd[1][tail[slot]] = used
                tail[slot] = used
                counters[0] = used + 1
                value = memory[slot]
                if value == 0:
                    value = -1  # read before anything wrote it: garbage
                if a == 0:
                    values[i] = value
                else:
                    other[i] = value
            if a > 0 or t in (_RRS, _RRC, _RRCS):
                for i in range(count):
                    z = reduce(values[i], other[i]) if a > 0 else reduce(payload[received + i], values[i])
                    if z == -2:
                        return UNSUPPORTED, counters[2], v
                    values[i] = z
        if t in (_RECV, _RCS):
            for i in range(count):
                values[i] = payload[received + i]
        if t in (_RECV, _RCS, _RRC, _RRCS, _CPY, _RE):
            b, shift = _alias_buffer(kind, in_place, rank, nodes[N_DSTBUF, v], block)
            at = rank * span + base[b] + nodes[N_DSTOFF, v] + shift
            for i in range(count):
                slot = at + i
                w = last_write[slot]
                if w >= 0 and w != v:
                    status = ordered(w, v)
                    if status != 1:
                        return (RACE if status == 0 else EXHAUSTED), counters[2], slot
                r = head[slot]
                head[slot] = -1
                tail[slot] = -1
                while r >= 0:
                    reader = rd[0][r]
                    if reader != v:
                        status = ordered(reader, v)
                        if status != 1:
                            return (RACE if status == 0 else EXHAUSTED), counters[2], slot
                    r = rd[1][r]
                last_write[slot] = v
                memory[slot] = values[i]
        if t in (_SEND, _RCS, _RRS, _RRCS):
            at = pay_ptr[v]
            for i in range(count):
                payload[at + i] = values[i]
    # the post-condition (DataSpec.expected)
    full = np.zeros(words, np.uint64)
    for r in range(ngpus):
        full[r // 64] |= np.uint64(1) << np.uint64(r % 64)
    for rank in range(ngpus):
        b, shift = _alias_buffer(kind, in_place, rank, _O, block)
        at = rank * span + base[b] + shift
        if kind in (_AG, _BC, _A2A):
            for k in range(nchunks):
                if kind == _AG:
                    want = 1 + k
                elif kind == _BC:
                    want = 1 + root * per_rank + k
                else:
                    want = 1 + (k // block) * per_rank + rank * block + k % block
                if memory[at + k] != want:
                    return WRONG, counters[2], at + k
        elif kind in (_AR, _RS) or (kind == _RED and rank == root):
            chunks = block if kind == _RS else nchunks
            for k in range(chunks):
                column = rank * block + k if kind == _RS else k
                have = memory[at + k]
                if ngpus == 1:
                    if have != 1 + column:
                        return WRONG, counters[2], at + k
                    continue
                if have <= singles:
                    return WRONG, counters[2], at + k
                r = have - singles - 1
                if rows[0][r] != column:
                    return WRONG, counters[2], at + k
                for w in range(words):
                    if bits[0][r, w] != full[w]:
                        return WRONG, counters[2], at + k
    return CLEAN, counters[2], -1


def execute(machine: FastMachine, order: np.ndarray, spec: DataSpec, num_tbs_of: np.ndarray, tb_index: np.ndarray,
            budget: int) -> tuple[int, int]:
    """Execute in one buffer mode; (status, searches). ``spec`` must be runnable (``verify.unrunnable`` is None).

    ``num_tbs_of[r]``: threadblocks of rank ``r``; ``tb_index[g]``: threadblock ``g``'s index among its rank's.
    """
    status, searches, _ = _execute(machine.nodes, machine.so_ptr, machine.srcoffs, machine.pred_ptr, machine.preds,
                                   machine.match_send, order, tb_index, num_tbs_of, _KINDS.index(spec.kind),
                                   spec.ngpus, spec.nchunks, spec.in_place, spec.root, budget)
    return int(status), int(searches)
