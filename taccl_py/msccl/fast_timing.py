"""The XML timing compiled (numba): :class:`taccl_py.msccl.timing._Timing` on the compiled fluid network.

:func:`run` is ``_Timing`` on :class:`~taccl_py.event_kernel.EventKernel` written again over
the arrays of a :class:`~taccl_py.msccl.fast_machine.FastMachine`, as
:mod:`taccl_py.fast_kernel` is the schedule simulator's: the same event heap with FIFO
sequence numbers and batch horizon, flow groups per route with their members in a heap,
the selective max-min re-solve (``fast_kernel._reshare``, shared), and the client's steps
in the same order: what waits for nothing is ready at time 0 (in node order), a ready
send waits its route latency and moves its bytes, a transmission completes when its data
arrives (sends) or as soon as it is ready (everything else), and completing one readies
its successors depth first. Every floating-point operation is the same, so the times are
the same (the tests compare them with ``==``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba.typed import List

from taccl_py.errors import TopologyError
from taccl_py.fast_kernel import (
    _FINISH,
    _HORIZON,
    _JOIN,
    _LATE,
    _MN,
    _NONE,
    _QN,
    _QUEUED,
    _TN,
    EVENTS,
    GF_DRAINED,
    GF_DUE,
    GF_LATENCY,
    GF_RATE,
    GF_UPDATED,
    GI_EVENT,
    GI_FINISH,
    GI_HBASE,
    GI_HLEN,
    GI_LINKED,
    GI_SIZE,
    GI_TOUCHED,
    HI_FLOW,
    HI_SEQ,
    NI_GROUP,
    NI_NEXT,
    NI_PREV,
    NI_RES,
    RF_BUSY,
    RF_CAPACITY,
    RF_CARRIED,
    RF_LEVEL,
    RF_SINCE,
    RI_COUNT,
    RI_HEAD,
    RI_LOAD,
    RI_TAIL,
    WG_MOVED,
    WG_TOUCHED,
    _less,
    _reshare,
)
from taccl_py.msccl.arrays import STEP_TYPES, T_ID, T_SEND, ProgramArrays
from taccl_py.msccl.fast_machine import N_COUNT, N_FIRST, N_RANK, N_TB, N_TYPE, SENDS
from taccl_py.msccl.fast_rules import rules_found
from taccl_py.msccl.fast_verify import FastChecks
from taccl_py.msccl.report import VerifyReport
from taccl_py.msccl.timing import TimedRun, failed_result, fast_timing_error, timed_collective, timed_result
from taccl_py.msccl.verify import checked_dialect, checked_report
from taccl_py.simulator import SimOptions, SimResult
from taccl_py.topology import Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["run", "simulate_arrays"]

_ENTER = 0


@njit(cache=True)
def run(group: Any, nbytes: Any, succ_ptr: Any, succs: Any, pending: Any, blocked: Any, capacity: Any,
        latency: Any, res_ptr: Any, res: Any, route_count: Any) -> Any:
    """Time every transmission; (start, done, cause, busy_us, bytes carried, counters).

    Per transmission: ``group`` its route's group (-1: it does not send), ``nbytes`` what a send
    moves, ``succs[succ_ptr[n]:succ_ptr[n + 1]]`` what waits for it (in node order), ``pending``
    how many transmissions it waits for (updated), ``blocked`` a wait nothing satisfies. Per group:
    ``latency`` (with the step overhead) and its resources ``res[res_ptr[g]:res_ptr[g + 1]]``.
    """
    n = len(group)
    num_res = len(capacity)
    num_groups = len(res_ptr) - 1
    slots = len(res)
    start_at = np.full(n, np.nan)
    done_at = np.full(n, np.nan)
    cause = np.full(n, -1, np.int64)
    rf = np.zeros((7, num_res))
    rf[RF_CAPACITY] = capacity
    rf[RF_LEVEL] = np.inf
    ri = np.zeros((5, num_res), np.int64)
    ri[RI_HEAD] = -1
    ri[RI_TAIL] = -1
    ni = np.full((4, slots), -1, np.int64)
    ni[NI_RES] = res
    for g in range(num_groups):
        for q in range(res_ptr[g], res_ptr[g + 1]):
            ni[NI_GROUP, q] = g
    gf = np.zeros((5, num_groups))
    gf[GF_DUE] = np.inf
    gf[GF_LATENCY] = latency
    gi = np.zeros((10, num_groups), np.int64)
    base = 0
    for g in range(num_groups):
        gi[GI_HBASE, g] = base
        base += route_count[g]
    hk = np.empty(max(base, 1))
    hi = np.empty((2, max(base, 1)), np.int32)
    active = np.zeros(n, np.bool_)
    wg = np.empty((2, num_groups), np.int64)
    seeds = np.empty(slots + 1, np.int64)
    stack = np.empty(num_res, np.int64)
    hshare = np.empty(num_res)
    hres = np.empty(num_res, np.int64)
    work = np.empty(max(n, 1), np.int64)
    cnt = np.zeros(20, np.int64)
    cnt[EVENTS] = 1
    queue = List([np.empty((1024, 5))])

    # ------------------------------------------------------------------ the event heap (fast_kernel.run's)
    def push(time: float, kind: int, item: int, grp: int) -> int:
        q = queue[0]
        size = cnt[_QN]
        if size == q.shape[0]:
            grown = np.empty((2 * size, 5))
            grown[:size] = q
            queue[0] = grown
            q = grown
        seq = cnt[EVENTS]
        cnt[EVENTS] += 1
        fseq = float(seq)
        j = size
        while j > 0:
            parent = (j - 1) >> 1
            pt = q[parent, 0]
            if time < pt or (time == pt and fseq < q[parent, 1]):
                for c in range(5):
                    q[j, c] = q[parent, c]
                j = parent
            else:
                break
        q[j, 0] = time
        q[j, 1] = fseq
        q[j, 2] = kind
        q[j, 3] = item
        q[j, 4] = grp
        cnt[_QN] = size + 1
        return seq

    def pop(q: Any) -> Any:
        top = (q[0, 0], int(q[0, 1]), int(q[0, 2]), int(q[0, 3]), int(q[0, 4]))
        m = cnt[_QN] - 1
        cnt[_QN] = m
        if m > 0:
            time, fseq, kind, item, grp = q[m, 0], q[m, 1], q[m, 2], q[m, 3], q[m, 4]
            j = 0
            while True:
                c = 2 * j + 1
                if c >= m:
                    break
                if c + 1 < m and (q[c + 1, 0] < q[c, 0] or (q[c + 1, 0] == q[c, 0] and q[c + 1, 1] < q[c, 1])):
                    c += 1
                if q[c, 0] < time or (q[c, 0] == time and q[c, 1] < fseq):
                    for k in range(5):
                        q[j, k] = q[c, k]
                    j = c
                else:
                    break
            q[j, 0] = time
            q[j, 1] = fseq
            q[j, 2] = kind
            q[j, 3] = item
            q[j, 4] = grp
        return top

    # ------------------------------------------------------------------ flow groups (fast_kernel.run's)
    def member_pop(at: int, length: int) -> None:
        m = length - 1
        if m == 0:
            return
        key, seq, flow = hk[at + m], hi[HI_SEQ, at + m], hi[HI_FLOW, at + m]
        j = 0
        while True:
            c = 2 * j + 1
            if c >= m:
                break
            if c + 1 < m and _less(hk[at + c + 1], hi[HI_SEQ, at + c + 1], hk[at + c], hi[HI_SEQ, at + c]):
                c += 1
            if _less(hk[at + c], hi[HI_SEQ, at + c], key, seq):
                hk[at + j] = hk[at + c]
                hi[HI_SEQ, at + j] = hi[HI_SEQ, at + c]
                hi[HI_FLOW, at + j] = hi[HI_FLOW, at + c]
                j = c
            else:
                break
        hk[at + j] = key
        hi[HI_SEQ, at + j] = seq
        hi[HI_FLOW, at + j] = flow

    def first_finish(g: int) -> Any:
        at = gi[GI_HBASE, g]
        while not active[hi[HI_FLOW, at]]:
            member_pop(at, gi[GI_HLEN, g])
            gi[GI_HLEN, g] -= 1
        rate = gf[GF_RATE, g]
        time = gf[GF_UPDATED, g] + (hk[at] - gf[GF_DRAINED, g]) / rate if rate > 0 else np.inf
        return time, int(hi[HI_FLOW, at])

    def queue_finish(g: int, time: float, flow: int) -> None:
        gf[GF_DUE, g] = time
        gi[GI_EVENT, g] = push(time, _FINISH, flow, g)
        gi[GI_FINISH, g] = _QUEUED

    def touch(g: int) -> None:
        if not gi[GI_TOUCHED, g]:
            gi[GI_TOUCHED, g] = 1
            wg[WG_TOUCHED, cnt[_TN]] = g
            cnt[_TN] += 1

    def net_add(i: int, g: int, size: float, now: float) -> None:
        if not gi[GI_LINKED, g]:
            gi[GI_LINKED, g] = 1
            for p in range(res_ptr[g], res_ptr[g + 1]):
                r = ni[NI_RES, p]
                tail = ri[RI_TAIL, r]
                ni[NI_PREV, p] = tail
                ni[NI_NEXT, p] = -1
                if tail < 0:
                    ri[RI_HEAD, r] = p
                else:
                    ni[NI_NEXT, tail] = p
                ri[RI_TAIL, r] = p
                ri[RI_COUNT, r] += 1
        target = gf[GF_DRAINED, g] + gf[GF_RATE, g] * (now - gf[GF_UPDATED, g]) + size
        seq = cnt[_JOIN]
        cnt[_JOIN] += 1
        active[i] = True
        at, j = gi[GI_HBASE, g], gi[GI_HLEN, g]
        while j > 0:
            parent = (j - 1) >> 1
            if _less(target, seq, hk[at + parent], hi[HI_SEQ, at + parent]):
                hk[at + j] = hk[at + parent]
                hi[HI_SEQ, at + j] = hi[HI_SEQ, at + parent]
                hi[HI_FLOW, at + j] = hi[HI_FLOW, at + parent]
                j = parent
            else:
                break
        hk[at + j] = target
        hi[HI_SEQ, at + j] = seq
        hi[HI_FLOW, at + j] = i
        gi[GI_HLEN, g] += 1
        gi[GI_SIZE, g] += 1
        touch(g)
        for p in range(res_ptr[g], res_ptr[g + 1]):
            r = ni[NI_RES, p]
            if not ri[RI_LOAD, r]:
                rf[RF_SINCE, r] = now
            ri[RI_LOAD, r] += 1
            rf[RF_CARRIED, r] += size

    # ------------------------------------------------------------------ the client (_Timing)
    def send(i: int, now: float) -> None:
        g = group[i]
        lat = gf[GF_LATENCY, g]
        if lat > 0 or not nbytes[i] > 0:
            push(now + lat, _ENTER, i, -1)
        else:
            net_add(i, g, nbytes[i], now)

    def complete(node: int, now: float) -> None:
        done_at[node] = now
        work[0] = node
        depth = 1
        while depth:
            depth -= 1
            done = work[depth]
            for q in range(succ_ptr[done], succ_ptr[done + 1]):
                s = succs[q]
                pending[s] -= 1
                if pending[s] == 0:
                    cause[s] = done
                    start_at[s] = now
                    if group[s] >= 0:
                        send(s, now)
                    else:
                        done_at[s] = now
                        work[depth] = s
                        depth += 1

    now = 0.0
    first = np.empty(n, np.int64)
    ready = 0
    for v in range(n):
        if pending[v] == 0 and not blocked[v]:
            first[ready] = v
            ready += 1
    for k in range(ready):
        v = first[k]
        start_at[v] = 0.0
        if group[v] >= 0:
            send(v, 0.0)
        else:
            complete(v, 0.0)
    while True:
        if cnt[_TN]:
            _reshare(now, rf, ri, ni, res_ptr, gf, gi, wg, seeds, stack, hshare, hres, cnt)
            for k in range(cnt[_MN]):
                g = wg[WG_MOVED, k]
                time, flow = first_finish(g)
                if gi[GI_FINISH, g] == _NONE or time < gf[GF_DUE, g]:
                    queue_finish(g, time, flow)
                elif gi[GI_FINISH, g] == _QUEUED:
                    gi[GI_FINISH, g] = _LATE
            cnt[_MN] = 0
        q = queue[0]
        while cnt[_QN] and int(q[0, 2]) == _FINISH:
            seq, g = int(q[0, 1]), int(q[0, 4])
            if gi[GI_EVENT, g] == seq and gi[GI_FINISH, g] == _QUEUED:
                break
            pop(q)
            if gi[GI_EVENT, g] == seq:
                time, flow = first_finish(g)
                queue_finish(g, time, flow)
                q = queue[0]
        if not cnt[_QN]:
            break
        now = q[0, 0]
        horizon = now + _HORIZON * max(1.0, abs(now))
        while cnt[_QN] and q[0, 0] <= horizon:
            time, seq, kind, i, g = pop(q)
            if kind == _FINISH:
                if gi[GI_EVENT, g] != seq:
                    continue
                if gi[GI_FINISH, g] == _LATE:
                    time, i = first_finish(g)
                    if time > horizon:
                        queue_finish(g, time, i)
                        q = queue[0]
                        continue
                active[i] = False
                gi[GI_SIZE, g] -= 1
                touch(g)
                for p in range(res_ptr[g], res_ptr[g + 1]):
                    r = ni[NI_RES, p]
                    ri[RI_LOAD, r] -= 1
                    if not ri[RI_LOAD, r]:
                        rf[RF_BUSY, r] += now - rf[RF_SINCE, r]
                if gi[GI_SIZE, g]:
                    time, flow = first_finish(g)
                    queue_finish(g, time, flow)
                else:
                    gi[GI_FINISH, g] = _NONE
                    gi[GI_EVENT, g] = 0
                complete(i, now)
            elif kind == _ENTER:
                if nbytes[i] > 0:
                    net_add(i, group[i], nbytes[i], now)
                else:
                    complete(i, time)
            q = queue[0]
    for r in range(num_res):
        if ri[RI_LOAD, r]:
            rf[RF_BUSY, r] += now - rf[RF_SINCE, r]
            rf[RF_SINCE, r] = now
    return start_at, done_at, cause, rf[RF_BUSY].copy(), rf[RF_CARRIED].copy(), cnt


# ---------------------------------------------------------------------------------------------- the program
def _verified(arrays: ProgramArrays) -> tuple[VerifyReport, FastChecks]:
    """The verifier's report (its own dialect) and the compiled machine it built, made once per arrays."""
    cached = arrays.cache.get("verified")
    if cached is None:
        checks = FastChecks(arrays)
        dialect = checked_dialect(arrays.header, None)
        cached = arrays.cache["verified"] = (checked_report(arrays.header, dialect, rules_found(arrays, dialect),
                                                            checks), checks)
    return cached


def simulate_arrays(arrays: ProgramArrays, topology: Topology, size_bytes: float,
                    options: SimOptions | None = None) -> SimResult:
    """:func:`taccl_py.msccl.simulate_program` of the program ``arrays`` holds (the same result)."""
    options = options or SimOptions()
    header = arrays.header
    collective = timed_collective(header, topology, size_bytes)
    if fast_timing_error(topology, options) is not None:
        from taccl_py.msccl.timing import simulate_program

        return simulate_program(arrays.program(), topology, size_bytes, options)
    report, checks = _verified(arrays)
    if not report.valid:
        return failed_result(collective, size_bytes, topology, report, f"invalid program: {report.errors[0]}")
    machine = checks.machine
    nodes = machine.nodes
    count = nodes.shape[1]
    sending = SENDS[nodes[N_TYPE]]
    send_nodes = np.flatnonzero(sending)
    peers = arrays.tbs[T_SEND][nodes[N_TB]].astype(np.int64)
    pair = nodes[N_RANK].astype(np.int64) * header.ngpus + peers
    distinct, first, group_of = np.unique(pair[send_nodes], return_index=True, return_inverse=True)
    costs = options.costs  # the runtime's costs of the program's protocol (taccl_py.runtime), if any
    routes: list[tuple[int, ...]] = [()] * len(distinct)
    latency = np.empty(len(distinct))
    for g in np.argsort(first, kind="stable").tolist():  # in node order: the first send without a route fails
        rank, peer = divmod(int(distinct[g]), header.ngpus)
        route = topology.gpu_route(rank, peer)
        if not route:  # the verifier rejects a send to itself, so no route means none through switches
            raise TopologyError(f"ranks {rank} and {peer} communicate but topology {topology.name!r} has "
                                "no route between them through switches only", where="topology")
        routes[g] = route
        hop = topology.route_latency(route) if costs is None else costs.route_latency_us(topology, route)
        latency[g] = hop + options.step_overhead_us
    group = np.full(count, -1, np.int64)
    group[send_nodes] = group_of
    chunk_bytes = size_bytes / header.nchunksperloop
    nbytes = np.array([k * chunk_bytes for k in range(int(nodes[N_COUNT].max(initial=0)) + 1)])[nodes[N_COUNT]]
    capacity = np.array([gbps_to_bytes_per_us(link.bandwidth) for link in topology.links] if costs is None else
                        costs.link_capacity_us(topology), np.float64)
    res_ptr = np.zeros(len(routes) + 1, np.int64)
    res_ptr[1:] = np.cumsum([len(r) for r in routes])
    res = np.array([li for r in routes for li in r], np.int64)
    route_count = np.bincount(group_of, minlength=len(routes)).astype(np.int64)
    # successors in node order (every transmission after those it waits for)
    waiting = np.repeat(np.arange(count, dtype=np.int64), np.diff(machine.pred_ptr))
    by_pred = np.argsort(machine.preds, kind="stable")
    succs = waiting[by_pred]
    succ_ptr = np.zeros(count + 1, np.int64)
    succ_ptr[1:] = np.cumsum(np.bincount(machine.preds, minlength=count))
    pending = np.diff(machine.pred_ptr).astype(np.int64)
    start_at, done_at, cause, busy, carried, _ = run(group, nbytes, succ_ptr, succs, pending, machine.blocked,
                                                     capacity, latency, res_ptr, res, route_count)
    tb_ids = arrays.tbs[T_ID]

    def describe(node: int) -> str:
        return (f"rank {int(nodes[N_RANK, node])} tb {int(tb_ids[nodes[N_TB, node]])} step "
                f"{int(nodes[N_FIRST, node])} ({STEP_TYPES[nodes[N_TYPE, node]].value})")

    timed = TimedRun(start_at, done_at, cause, tuple(busy.tolist()), tuple(carried.tolist()), send_nodes,
                     machine.match_recv[send_nodes], describe)
    return timed_result(header, topology, size_bytes, options, collective, report, timed)
