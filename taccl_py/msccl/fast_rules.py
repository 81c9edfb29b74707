"""The static rules over :class:`ProgramArrays`: a compiled scan decides whether any rule could be broken.

:func:`rules_found` returns what :func:`taccl_py.msccl.rules.check_rules` returns. The rules
about ``<algo>`` (and the tokenizer's findings) are cheap and run as they are on the header.
The rules about GPUs, threadblocks, steps and connections run compiled as one pass over the
arrays that flags anything any of them would report (it may flag more than the rules
report, never less); when it flags something, or the loader found tokenizer issues, the
Python rules run on the program's objects and their report is returned, so the messages
and their order are the Python rules' own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba import types as nbtypes
from numba.typed import Dict

from taccl_py.msccl.arrays import (
    BUFFER_CODE,
    G_I,
    G_ID,
    G_O,
    G_S,
    S_CNT,
    S_DEPID,
    S_DEPS,
    S_DSTBUF,
    S_DSTOFF,
    S_HASDEP,
    S_INDEX,
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
from taccl_py.msccl.ir import (
    DIALECTS,
    INT8_MAX,
    INT16_MAX,
    MAX_CHANNELS,
    MAX_CHILDREN,
    MAX_COUNT,
    MAX_NODES_PER_RANK,
    MAX_REDUCE_FUSION,
    MAX_TBS_PER_CHANNEL,
    Buffer,
    StepType,
)
from taccl_py.msccl.report import Violation
from taccl_py.msccl.rules import check_header_rules, check_rules

__all__ = ["rules_found"]

_NOP, _RE, _RA = TYPE_CODE[StepType.NOP], TYPE_CODE[StepType.REDUCE], TYPE_CODE[StepType.RECV_REDUCE_ALIAS]
_SENDS = np.array([t.sends for t in StepType], np.bool_)
_RECEIVES = np.array([t.receives for t in StepType], np.bool_)
_READS_SRC = np.array([t.reads_src for t in StepType], np.bool_)
_WRITES_DST = np.array([t.writes_dst for t in StepType], np.bool_)
_I, _O = BUFFER_CODE[Buffer.INPUT], BUFFER_CODE[Buffer.OUTPUT]


@njit(cache=True)
def _body_flagged(gpus: Any, gpu_tb: Any, tbs: Any, tb_step: Any, steps: Any, ngpus: int, nchannels: int,
                  max_steps: int, max_tbs: int, sends: Any, receives: Any, reads_src: Any, writes_dst: Any) -> int:
    """0 when no GPU, threadblock, step or connection rule can be broken; else a code of the first suspicion."""
    num_gpus = gpus.shape[1]
    if num_gpus != ngpus:
        return 1
    seen_rank = np.zeros(max(ngpus, 1), np.bool_)
    conn_send = Dict.empty(key_type=nbtypes.int64, value_type=nbtypes.int64)
    conn_recv = Dict.empty(key_type=nbtypes.int64, value_type=nbtypes.int64)
    for g in range(num_gpus):
        rank = gpus[G_ID, g]
        if rank < 0 or rank >= ngpus or seen_rank[rank]:
            return 2
        seen_rank[rank] = True
        if gpus[G_I, g] < 0 or gpus[G_O, g] < 0 or gpus[G_S, g] < 0:
            return 3
        t0, t1 = gpu_tb[g], gpu_tb[g + 1]
        if t1 - t0 > MAX_CHILDREN or 1 + num_gpus + (t1 - t0) + (tb_step[t1] - tb_step[t0]) > MAX_NODES_PER_RANK:
            return 4
        # threadblocks: ids 0..k-1 in any order, each once; peers, channels, limits, one per (role, channel, peer)
        k = t1 - t0
        by_id = np.full(max(k, 1), -1, np.int64)
        per_chan = np.zeros((2, MAX_CHANNELS), np.int64)
        for t in range(t0, t1):
            tid = tbs[T_ID, t]
            if tid < 0 or tid >= k or tid >= max_tbs or by_id[tid] >= 0:
                return 5
            by_id[tid] = t
            chan = tbs[T_CHAN, t]
            if chan < 0 or chan >= MAX_CHANNELS or chan >= nchannels:
                return 6
            if tb_step[t + 1] - tb_step[t] > max_steps:
                return 7
            for role in range(2):
                peer = tbs[T_SEND, t] if role == 0 else tbs[T_RECV, t]
                if peer < -1 or peer == rank or peer >= ngpus:
                    return 8
                if peer < 0:
                    continue
                per_chan[role, chan] += 1
                if per_chan[role, chan] > MAX_TBS_PER_CHANNEL:
                    return 9
                if role == 0:
                    key = (np.int64(rank) * ngpus + peer) * MAX_CHANNELS + chan
                    if key in conn_send:
                        return 10
                    conn_send[key] = t
                else:
                    key = (np.int64(peer) * ngpus + rank) * MAX_CHANNELS + chan
                    if key in conn_recv:
                        return 10
                    conn_recv[key] = t
        # steps
        for t in range(t0, t1):
            s0, s1 = tb_step[t], tb_step[t + 1]
            last_data = -1  # the last step that is not a nop
            for p in range(s0, s1):
                if steps[S_TYPE, p] != _NOP:
                    last_data = p
            pending_nop = False
            chain = False
            chain_dstbuf = chain_dstoff = chain_srcbuf = chain_cnt = 0
            total_re = 0
            for p in range(s0, s1):
                kind = steps[S_TYPE, p]
                if steps[S_INDEX, p] != p - s0 or (steps[S_HASDEP, p] != 0 and steps[S_HASDEP, p] != 1):
                    return 11
                if not (-INT16_MAX - 1 <= steps[S_SRCOFF, p] <= INT16_MAX and -INT16_MAX - 1 <= steps[S_DSTOFF, p]
                        <= INT16_MAX and steps[S_DEPID, p] <= INT8_MAX and -INT16_MAX - 1 <= steps[S_DEPS, p]
                        <= INT16_MAX):
                    return 12
                depid = steps[S_DEPID, p]
                if depid >= 0:
                    if depid >= k:
                        return 13
                    target = by_id[depid]
                    deps = steps[S_DEPS, p]
                    if target == t or deps < 0 or deps >= tb_step[target + 1] - tb_step[target]:
                        return 13
                    if steps[S_HASDEP, tb_step[target] + deps] != 1:
                        return 13
                if kind == _NOP:
                    if depid < 0 or last_data < p:
                        return 14
                    pending_nop = True
                    continue
                if kind == _RA:
                    return 15
                continuing = (kind == _RE and chain and chain_dstbuf == steps[S_DSTBUF, p]
                              and chain_dstoff == steps[S_DSTOFF, p] and chain_srcbuf == steps[S_SRCBUF, p]
                              and depid < 0)
                if continuing and steps[S_CNT, p] != chain_cnt:
                    return 16
                if pending_nop and not continuing and depid < 0:
                    return 17
                if not continuing:
                    pending_nop = False
                if kind == _RE:
                    total_re += 1
                    chain = not (steps[S_HASDEP, p] or total_re == MAX_REDUCE_FUSION)
                    chain_dstbuf, chain_dstoff, chain_srcbuf = steps[S_DSTBUF, p], steps[S_DSTOFF, p], steps[S_SRCBUF, p]
                    chain_cnt = steps[S_CNT, p]
                else:
                    chain = False
                cnt = steps[S_CNT, p]
                if cnt < 1 or cnt >= MAX_COUNT:
                    return 18
                if (sends[kind] and tbs[T_SEND, t] < 0) or (receives[kind] and tbs[T_RECV, t] < 0):
                    return 19
                for role in range(2):
                    used = reads_src[kind] if role == 0 else writes_dst[kind]
                    if not used:
                        continue
                    buffer = steps[S_SRCBUF, p] if role == 0 else steps[S_DSTBUF, p]
                    offset = steps[S_SRCOFF, p] if role == 0 else steps[S_DSTOFF, p]
                    capacity = gpus[G_I, g] if buffer == _I else gpus[G_O, g] if buffer == _O else gpus[G_S, g]
                    if offset < 0 or offset + max(cnt, 1) > capacity:
                        return 20
    # connections: every sender has its receiver, and their steps pair up with equal counts
    if len(conn_send) != len(conn_recv):
        return 21
    for key, ts in conn_send.items():
        if key not in conn_recv:
            return 21
        tr = conn_recv[key]
        a, b = tb_step[ts], tb_step[tr]
        while True:
            while a < tb_step[ts + 1] and not sends[steps[S_TYPE, a]]:
                a += 1
            while b < tb_step[tr + 1] and not receives[steps[S_TYPE, b]]:
                b += 1
            if a >= tb_step[ts + 1] or b >= tb_step[tr + 1]:
                if a < tb_step[ts + 1] or b < tb_step[tr + 1]:
                    return 22
                break
            if steps[S_CNT, a] != steps[S_CNT, b]:
                return 23
            a += 1
            b += 1
    return 0


def body_flagged(arrays: ProgramArrays, dialect: str) -> int:
    """0 when the GPU, threadblock, step and connection rules of ``dialect`` find nothing; else a nonzero code."""
    spec = DIALECTS[dialect]
    h = arrays.header
    if spec.chunk_count_check:  # v1: i_chunks / o_chunks against nchunksperloop
        n, c = h.ngpus, h.nchunksperloop
        i_mult = n if h.coll == "allgather" else 1
        o_mult = n if h.coll == "reduce_scatter" else 1
        i, o = arrays.gpus[G_I].astype(np.int64), arrays.gpus[G_O].astype(np.int64)
        if np.any((i != 0) & (i * i_mult != c)) or np.any((o != 0) & (o * o_mult != c)):
            return 24
    return int(_body_flagged(arrays.gpus, arrays.gpu_tb, arrays.tbs, arrays.tb_step, arrays.steps, h.ngpus,
                             h.nchannels, spec.max_steps, spec.max_threadblocks, _SENDS, _RECEIVES, _READS_SRC,
                             _WRITES_DST))


def rules_found(arrays: ProgramArrays, dialect: str) -> list[Violation]:
    """``check_rules(arrays.program(), dialect)``, without the objects when nothing is broken (see the module)."""
    if arrays.header.source_issues or body_flagged(arrays, dialect):
        return check_rules(arrays.program(), dialect)
    return check_header_rules(arrays.header, dialect)
