"""The runtime's transmissions and their happens-before graph, compiled (numba) over :class:`ProgramArrays`.

:func:`build` is :func:`taccl_py.msccl.machine.build_machine` written again over arrays: the
same emulation of the parser and the kernel's step counter (nops lend their dependency to
the next step, consecutive ``re`` steps fuse), the same matching of the k-th send with the
k-th receive of a connection, the same satisfier of every wait (the first flagged
transmission whose counter reaches ``deps``) and the same predecessor lists, in the same
order. :func:`order` is :meth:`Machine.topological_order` (the same FIFO Kahn order).
Only programs whose static rules found nothing fatal are built (as in the verifier).

Transmission ``n`` is column ``n`` of ``nodes`` (rows ``N_*``), its source offsets
``srcoffs[so_ptr[n]:so_ptr[n + 1]]``, its predecessors ``preds[pred_ptr[n]:pred_ptr[n + 1]]``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit
from numba import types as nbtypes
from numba.typed import Dict

from taccl_py.msccl.arrays import (
    S_CNT,
    S_DEPID,
    S_DEPS,
    S_DSTBUF,
    S_DSTOFF,
    S_HASDEP,
    S_SRCBUF,
    S_SRCOFF,
    S_TYPE,
    T_CHAN,
    T_ID,
    T_RECV,
    T_SEND,
    TYPE_CODE,
    ProgramArrays,
)
from taccl_py.msccl.ir import MAX_REDUCE_FUSION, StepType

__all__ = ["FastMachine", "build", "order"]

N_RANK, N_TB, N_SEQ, N_TYPE, N_FIRST, N_LAST, N_COUNT, N_SRCBUF, N_DSTBUF, N_DSTOFF, N_PUBLISH = range(11)
_NOP, _RE = TYPE_CODE[StepType.NOP], TYPE_CODE[StepType.REDUCE]
SENDS = np.array([t.sends for t in StepType], np.bool_)
"""Per step-type code: does it send."""
RECEIVES = np.array([t.receives for t in StepType], np.bool_)
_FUSE = MAX_REDUCE_FUSION


class FastMachine(NamedTuple):
    """The compiled machine's arrays (see the module); ``blocked[n]``: a wait of ``n`` nothing can satisfy."""

    nodes: np.ndarray
    so_ptr: np.ndarray
    srcoffs: np.ndarray
    tb_node: np.ndarray
    """CSR: threadblock ``g``'s transmissions are ``tb_node[g]:tb_node[g + 1]``."""
    pred_ptr: np.ndarray
    preds: np.ndarray
    match_send: np.ndarray
    """Per receive-type transmission, the send it receives from (-1: none)."""
    match_recv: np.ndarray
    blocked: np.ndarray


@njit(cache=True)
def _transmissions(tb_rank: Any, tb_step: Any, steps: Any) -> Any:
    """Emulate the runtime parser per threadblock (``machine._transmissions``); node rows, CSR lists, tb pointers."""
    num_tbs = len(tb_rank)
    total = steps.shape[1]
    nodes = np.empty((11, total), np.int32)
    so_ptr = np.zeros(total + 1, np.int64)
    srcoffs = np.empty(total, np.int32)
    w_ptr = np.zeros(total + 1, np.int64)
    w_depid = np.empty(total, np.int32)
    w_deps = np.empty(total, np.int32)
    tb_node = np.zeros(num_tbs + 1, np.int64)
    pend_depid = np.empty(total + 1, np.int32)
    pend_deps = np.empty(total + 1, np.int32)
    node = 0
    nso = 0
    nw = 0
    for g in range(num_tbs):
        tb_node[g] = node
        rank = tb_rank[g]
        npend = 0
        counter = 0
        have_current = False
        cur_hasdep = 0
        chain_ok = False
        chain_dstbuf = chain_dstoff = chain_srcbuf = 0
        total_re = 0
        first = node
        for pos in range(tb_step[g], tb_step[g + 1]):
            kind = steps[S_TYPE, pos]
            depid = steps[S_DEPID, pos]
            if depid >= 0:
                pend_depid[npend] = depid
                pend_deps[npend] = steps[S_DEPS, pos]
                npend += 1
            if kind == _NOP:
                continue
            local = pos - tb_step[g]
            if kind != _RE:
                if have_current:  # finish the fused 're'
                    have_current = False
                    node, counter, nso = _finish(nodes, so_ptr, w_ptr, node, counter, cur_hasdep, nso)
                _open_node(nodes, steps, node, pos, rank, g, node - first, kind, local)
                srcoffs[nso] = steps[S_SRCOFF, pos]
                nso += 1
                so_ptr[node + 1] = nso
                for k in range(npend):
                    w_depid[nw] = pend_depid[k]
                    w_deps[nw] = pend_deps[k]
                    nw += 1
                w_ptr[node + 1] = nw
                if npend > 1:
                    counter += npend - 1
                npend = 0
                nodes[N_PUBLISH, node] = counter if steps[S_HASDEP, pos] else -1
                counter += 1
                node += 1
                chain_ok = False
                continue
            if (have_current and depid < 0 and chain_ok and chain_dstbuf == steps[S_DSTBUF, pos]
                    and chain_dstoff == steps[S_DSTOFF, pos] and chain_srcbuf == steps[S_SRCBUF, pos]):
                nodes[N_LAST, node] = local
                nodes[N_COUNT, node] = steps[S_CNT, pos]
                cur_hasdep = steps[S_HASDEP, pos]
                srcoffs[nso] = steps[S_SRCOFF, pos]
                nso += 1
            else:
                if have_current:
                    node, counter, nso = _finish(nodes, so_ptr, w_ptr, node, counter, cur_hasdep, nso)
                have_current = True
                _open_node(nodes, steps, node, pos, rank, g, node - first, kind, local)
                cur_hasdep = steps[S_HASDEP, pos]
                srcoffs[nso] = steps[S_SRCOFF, pos]
                nso += 1
                for k in range(npend):
                    w_depid[nw] = pend_depid[k]
                    w_deps[nw] = pend_deps[k]
                    nw += 1
                w_ptr[node + 1] = nw
                npend = 0
            total_re += 1
            if steps[S_HASDEP, pos] or total_re == _FUSE:
                chain_ok = False
            else:
                chain_ok = True
                chain_dstbuf = steps[S_DSTBUF, pos]
                chain_dstoff = steps[S_DSTOFF, pos]
                chain_srcbuf = steps[S_SRCBUF, pos]
        if have_current:
            node, counter, nso = _finish(nodes, so_ptr, w_ptr, node, counter, cur_hasdep, nso)
    tb_node[num_tbs] = node
    return nodes[:, :node].copy(), so_ptr[:node + 1].copy(), srcoffs[:nso].copy(), w_ptr[:node + 1].copy(), \
        w_depid[:nw].copy(), w_deps[:nw].copy(), tb_node


@njit(cache=True, inline="always")
def _open_node(nodes: Any, steps: Any, node: int, pos: int, rank: int, g: int, seq: int, kind: int,
               local: int) -> None:
    """Node ``node`` starts at step ``pos`` (local index ``local`` of threadblock ``g``, ``seq``-th of its rank)."""
    nodes[N_RANK, node] = rank
    nodes[N_TB, node] = g
    nodes[N_SEQ, node] = seq
    nodes[N_TYPE, node] = kind
    nodes[N_FIRST, node] = local
    nodes[N_LAST, node] = local
    nodes[N_COUNT, node] = steps[S_CNT, pos]
    nodes[N_SRCBUF, node] = steps[S_SRCBUF, pos]
    nodes[N_DSTBUF, node] = steps[S_DSTBUF, pos]
    nodes[N_DSTOFF, node] = steps[S_DSTOFF, pos]


@njit(cache=True)
def _finish(nodes: Any, so_ptr: Any, w_ptr: Any, node: int, counter: int, hasdep: int, nso: int) -> Any:
    """Close a fused ``re`` transmission (``finish`` in ``machine._transmissions``)."""
    waits = w_ptr[node + 1] - w_ptr[node]
    if waits:
        counter += waits - 1
    offs = nso - so_ptr[node]
    if offs > 1:
        counter += offs - 1
    so_ptr[node + 1] = nso
    nodes[N_PUBLISH, node] = counter if hasdep else -1
    return node + 1, counter + 1, nso


@njit(cache=True)
def _graph(nodes: Any, tb_node: Any, tbs: Any, tb_rank: Any, w_ptr: Any, w_depid: Any, w_deps: Any,
           sends: Any, receives: Any, ngpus: int) -> Any:
    """Matching sends and receives, wait satisfiers and predecessor lists (``build_machine``)."""
    n = nodes.shape[1]
    num_tbs = len(tb_rank)
    width = np.int64(max(ngpus, 1))
    sender_of = Dict.empty(key_type=nbtypes.int64, value_type=nbtypes.int64)
    receiver_of = Dict.empty(key_type=nbtypes.int64, value_type=nbtypes.int64)
    index_of = Dict.empty(key_type=nbtypes.int64, value_type=nbtypes.int64)
    for g in range(num_tbs):
        rank = np.int64(tb_rank[g])
        send, recv, chan = np.int64(tbs[T_SEND, g]), np.int64(tbs[T_RECV, g]), np.int64(tbs[T_CHAN, g])
        if send >= 0:
            key = (rank * width + send) * 4096 + chan
            if key not in sender_of:
                sender_of[key] = g
        if recv >= 0:
            key = (recv * width + rank) * 4096 + chan
            if key not in receiver_of:
                receiver_of[key] = g
        key = rank * (1 << 32) + np.int64(tbs[T_ID, g])
        if key not in index_of:
            index_of[key] = g
    match_send = np.full(n, -1, np.int64)
    match_recv = np.full(n, -1, np.int64)
    for key, gs in sender_of.items():
        if key not in receiver_of:
            continue
        gr = receiver_of[key]
        a = tb_node[gs]
        b = tb_node[gr]
        while True:
            while a < tb_node[gs + 1] and not sends[nodes[N_TYPE, a]]:
                a += 1
            while b < tb_node[gr + 1] and not receives[nodes[N_TYPE, b]]:
                b += 1
            if a >= tb_node[gs + 1] or b >= tb_node[gr + 1]:
                break
            match_send[b] = a
            match_recv[a] = b
            a += 1
            b += 1
    # published counters per threadblock (increasing) and their nodes
    flag_ptr = np.zeros(num_tbs + 1, np.int64)
    for g in range(num_tbs):
        count = 0
        for v in range(tb_node[g], tb_node[g + 1]):
            if nodes[N_PUBLISH, v] >= 0:
                count += 1
        flag_ptr[g + 1] = flag_ptr[g] + count
    flags = np.empty(flag_ptr[num_tbs], np.int64)
    flag_node = np.empty(flag_ptr[num_tbs], np.int64)
    k = 0
    for v in range(n):
        if nodes[N_PUBLISH, v] >= 0:
            flags[k] = nodes[N_PUBLISH, v]
            flag_node[k] = v
            k += 1
    pred_ptr = np.zeros(n + 1, np.int64)
    preds = np.empty(n + len(w_depid) + n, np.int64)
    blocked = np.zeros(n, np.bool_)
    m = 0
    for v in range(n):
        start = m
        rank = np.int64(nodes[N_RANK, v])
        if nodes[N_SEQ, v]:
            preds[m] = v - 1
            m += 1
        for w in range(w_ptr[v], w_ptr[v + 1]):
            key = rank * (1 << 32) + np.int64(w_depid[w])
            if key not in index_of:
                blocked[v] = True
                continue
            target = index_of[key]
            lo, hi = flag_ptr[target], flag_ptr[target + 1]
            want = w_deps[w]
            while lo < hi:  # bisect_left
                mid = (lo + hi) // 2
                if flags[mid] < want:
                    lo = mid + 1
                else:
                    hi = mid
            if lo == flag_ptr[target + 1]:
                blocked[v] = True
                continue
            m = _append_distinct(preds, start, m, flag_node[lo])
        if receives[nodes[N_TYPE, v]]:
            if match_send[v] < 0:
                blocked[v] = True
            else:
                m = _append_distinct(preds, start, m, match_send[v])
        pred_ptr[v + 1] = m
    return match_send, match_recv, pred_ptr, preds[:m].copy(), blocked


@njit(cache=True, inline="always")
def _append_distinct(preds: Any, start: int, m: int, value: int) -> int:
    for k in range(start, m):
        if preds[k] == value:
            return m
    preds[m] = value
    return m + 1


def build(arrays: ProgramArrays) -> FastMachine:
    """The machine of a program whose static rules found nothing fatal (see the module)."""
    tb_rank = arrays.gpus[0][arrays.tb_gpu].astype(np.int32)
    nodes, so_ptr, srcoffs, w_ptr, w_depid, w_deps, tb_node = _transmissions(tb_rank, arrays.tb_step, arrays.steps)
    match_send, match_recv, pred_ptr, preds, blocked = _graph(nodes, tb_node, arrays.tbs, tb_rank, w_ptr, w_depid,
                                                              w_deps, SENDS, RECEIVES, arrays.ngpus)
    return FastMachine(nodes, so_ptr, srcoffs, tb_node, pred_ptr, preds, match_send, match_recv, blocked)


@njit(cache=True)
def _order(nodes: Any, tb_node: Any, pred_ptr: Any, preds: Any, blocked: Any) -> Any:
    """``Machine._order``: nodes in the FIFO Kahn order (then the count of those that run)."""
    n = nodes.shape[1]
    indegree = np.empty(n, np.int64)
    counts = np.zeros(n + 1, np.int64)
    for v in range(n):
        indegree[v] = pred_ptr[v + 1] - pred_ptr[v]
        first = pred_ptr[v] + (1 if nodes[N_SEQ, v] else 0)
        for q in range(first, pred_ptr[v + 1]):
            counts[preds[q] + 1] += 1
    for v in range(n):
        counts[v + 1] += counts[v]
    fill = counts[:-1].copy()
    others = np.empty(counts[n], np.int64)
    for v in range(n):
        first = pred_ptr[v] + (1 if nodes[N_SEQ, v] else 0)
        for q in range(first, pred_ptr[v + 1]):
            p = preds[q]
            others[fill[p]] = v
            fill[p] += 1
    out = np.empty(n, np.int64)
    size = 0
    for v in range(n):
        if indegree[v] == 0 and not blocked[v]:
            out[size] = v
            size += 1
    head = 0
    while head < size:
        v = out[head]
        head += 1
        f = v + 1
        if f < n and nodes[N_TB, f] == nodes[N_TB, v]:
            indegree[f] -= 1
            if indegree[f] == 0 and not blocked[f]:
                out[size] = f
                size += 1
        for q in range(counts[v], counts[v + 1]):
            s = others[q]
            indegree[s] -= 1
            if indegree[s] == 0 and not blocked[s]:
                out[size] = s
                size += 1
    return out, size


def order(machine: FastMachine) -> tuple[np.ndarray, int]:
    """(the runnable order, how many run); fewer than all: some transmission never runs (a deadlock)."""
    out, size = _order(machine.nodes, machine.tb_node, machine.pred_ptr, machine.preds, machine.blocked)
    return out, int(size)
