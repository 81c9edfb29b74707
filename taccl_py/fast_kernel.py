"""The simulator's event loop, fluid network and rules, compiled (numba) over arrays: millions of transfers.

This is :class:`taccl_py.simulator._Run` on :class:`taccl_py.event_kernel.EventKernel` and
:class:`taccl_py.fluid.FluidNetwork`, written again over arrays for schedules without
exchanges, network groups and endpoint limits, with every floating-point operation in
the same order and every tie broken the same way, so the times are the same (the tests
compare them to the Python simulator's, exactly). What each piece mirrors:

* the heap of events ``(time, seq, kind, transfer, group)`` with ``seq`` counting pushes
  (FIFO ties), batches of :func:`taccl_py.event_kernel.batch_end` width, one finish event
  per flow group and its ``NONE``/``QUEUED``/``LATE`` state;
* flow groups (one per distinct route), their members in a heap by (target, join number)
  (one fixed segment of an array per group), ``groups_on`` per link as a doubly linked
  list in insertion order, the touched set in insertion order, the selective max-min
  re-solve with frozen groups (``FluidNetwork._solve``) and the lone-group shortcut;
* start, arrival and commit rules with the dependency lists of
  :func:`taccl_py.simulator._dependencies` (built here too, in the same order);
* the data: every (rank, chunk) pair a run can touch (numbered by :mod:`taccl_py.fast_sim`) holds the id of a
  contribution mask; masks are rows of
  64-bit words in a pool, ids 1..N are the single ranks' masks, others are reference
  counted and reused when dropped. A copy moves an id, a reduction checks the overlap
  and writes the union into a new row.

A fault stops the run where the Python simulator would raise; :mod:`taccl_py.fast_sim`
turns its code into the same message. :func:`run` and :func:`build_dependencies` release the GIL (every array
they touch is their caller's), so runs of one schedule under several protocols' costs go side by side in threads
(:func:`taccl_py.predict.predict_schedule`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba.typed import List

from taccl_py.tolerances import SAME_INSTANT_REL

__all__ = ["COMMITTED", "EVENTS", "FAULT_CHUNK", "FAULT_DOUBLE", "FAULT_HELD", "FAULT_KIND", "FAULT_MASK", "FAULT_MISSING",
           "FAULT_TRANSFER", "PRUNED", "QUEUE_PEAK", "QUEUE_PRUNE_FROM", "SOLVES", "VISITED_GROUPS",
           "VISITED_RESOURCES", "build_dependencies", "close_busy", "event_pop", "event_push", "flow_leaves",
           "net_add", "new_network", "proxy_posts", "run", "settle"]

_SAME_RATE = 1e-12
_FROZEN_MARGIN = 1e-9
_KEEP = 1 - _FROZEN_MARGIN
_GROW = 1 + 1e-12
_NO_DEMAND = 1e-9
_HORIZON = SAME_INSTANT_REL
_ENTER, _FINISH, _TIMER = 0, 1, 2
_NONE, _QUEUED, _LATE = 0, 1, 2
FAULT_MISSING = 1
"""A transfer starts but its sender does not hold a chunk (``info``: transfer, chunk)."""
FAULT_DOUBLE = 2
"""A reduction adds a contribution twice (``info``: transfer, chunk, held mask id, incoming mask id)."""

# The counters (one int64 array that run returns): next event seq, next join seq, re-solves, transfers committed,
# the fault (kind, transfer, chunk, held mask id, incoming mask id), pool rows used, free rows, the lengths of the
# event queue, the touched and moved groups and the commit stack, the work the re-solves did (resources and
# groups visited), the event queue's longest length, the length from which settle drops its void events, the
# least that length may be, and how many void events it dropped.
(EVENTS, _JOIN, SOLVES, COMMITTED, FAULT_KIND, FAULT_TRANSFER, FAULT_CHUNK, FAULT_HELD, FAULT_MASK, _USED, _NFREE, _QN,
 _TN, _MN, _CN, VISITED_RESOURCES, VISITED_GROUPS, QUEUE_PEAK, _QLIMIT, _QFLOOR, PRUNED) = range(21)
QUEUE_PRUNE_FROM = 1 << 20
"""From this many queued events :func:`settle` drops the void finish events (a re-solve that moves a group's first
finish earlier leaves its old event in the heap), and again once the queue is twice what it kept (the callers pass
it to :func:`new_network`): a posted Alltoall on 512 GPUs queued 4.8 million events for 262,000 transfers, most of
them void (1.1 million kept)."""


# ---------------------------------------------------------------------------------------------- dependencies
@njit(cache=True, nogil=True)
def build_dependencies(cs: Any, chunk_ptr: Any, after_ptr: Any, after: Any, num_keys: int) -> Any:
    """Start and commit dependencies, as ``simulator._dependencies`` derives them (no exchanges or groups), from the
    (rank, chunk) pair each chunk slot reads and writes (``cs[CS_READ]``, ``cs[CS_WRITE]``, numbered below
    ``num_keys``).

    Returns start_pending, commit_pending and three CSR lists (pointer, waiters):
    start_on_commit, commit_on_commit, commit_on_arrive; each waiter list in increasing order.
    """
    n = len(chunk_ptr) - 1
    total = cs.shape[1]
    last_writer = np.full(num_keys, -1, np.int32)
    rd_head = np.full(num_keys, -1, np.int32)
    rd_tail = np.full(num_keys, -1, np.int32)
    nd_tr = np.empty(max(total, 1), np.int32)
    nd_next = np.empty(max(total, 1), np.int32)
    nodes = 0
    start_pending = np.zeros(n, np.int32)
    commit_pending = np.ones(n, np.int32)
    s_on = np.empty(total + len(after), np.int32)
    s_by = np.empty(total + len(after), np.int32)
    c_on = np.empty(max(total, 1), np.int32)
    c_by = np.empty(max(total, 1), np.int32)
    a_on = np.empty(max(total, 1), np.int32)
    a_by = np.empty(max(total, 1), np.int32)
    ns = nc = na = 0
    scratch = np.empty(64, np.int64)
    for i in range(n):
        p0, p1 = chunk_ptr[i], chunk_ptr[i + 1]
        # start: the writers of what it reads, and 'after'
        k = 0
        need = (p1 - p0) * 2 + (after_ptr[i + 1] - after_ptr[i])
        if need > len(scratch):
            scratch = np.empty(need, np.int64)
        for q in range(after_ptr[i], after_ptr[i + 1]):
            scratch[k] = after[q]
            k += 1
        for p in range(p0, p1):
            key = cs[CS_READ, p]
            w = last_writer[key]
            if w >= 0:
                scratch[k] = w
                k += 1
            nd_tr[nodes] = i
            nd_next[nodes] = -1
            if rd_head[key] < 0:
                rd_head[key] = nodes
            else:
                nd_next[rd_tail[key]] = nodes
            rd_tail[key] = nodes
            nodes += 1
        if k:
            deps = np.unique(scratch[:k])
            for w in deps:
                s_on[ns] = w
                s_by[ns] = i
                ns += 1
            start_pending[i] = len(deps)
        # commit: earlier writers there, earlier readers of it there
        k = 0
        for p in range(p0, p1):
            key = cs[CS_WRITE, p]
            w = last_writer[key]
            if w >= 0:
                scratch[k] = w
                k += 1
            last_writer[key] = i
        extra = 0
        if k:
            deps = np.unique(scratch[:k])
            for w in deps:
                c_on[nc] = w
                c_by[nc] = i
                nc += 1
            extra += len(deps)
        k = 0
        for p in range(p0, p1):
            key = cs[CS_WRITE, p]
            node = rd_head[key]
            while node >= 0:
                if k >= len(scratch):
                    grown = np.empty(2 * len(scratch), np.int64)
                    grown[:k] = scratch[:k]
                    scratch = grown
                scratch[k] = nd_tr[node]
                k += 1
                node = nd_next[node]
            rd_head[key] = -1
            rd_tail[key] = -1
        if k:
            deps = np.unique(scratch[:k])
            for r in deps:
                a_on[na] = r
                a_by[na] = i
                na += 1
            extra += len(deps)
        commit_pending[i] += extra
    return (start_pending, commit_pending, *_csr(s_on[:ns], s_by[:ns], n), *_csr(c_on[:nc], c_by[:nc], n),
            *_csr(a_on[:na], a_by[:na], n))


@njit(cache=True)
def _csr(on: Any, by: Any, n: int) -> Any:
    """Waiters grouped by what they wait on, each group in the order given (a stable counting sort)."""
    ptr = np.zeros(n + 1, np.int32)
    for w in on:
        ptr[w + 1] += 1
    for i in range(n):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    out = np.empty(len(on), np.int32)
    for k in range(len(on)):
        w = on[k]
        out[fill[w]] = by[k]
        fill[w] += 1
    return ptr, out


# ---------------------------------------------------------------------------------------------- array layout
# Every table is a 2-D array whose rows are fields (columns: transfer, resource, group, ...), so the compiled
# functions take a few arrays rather than tuples of many (each array argument costs reference counting).
# per transfer, int32 (T)
T_SRC, T_DST, T_ROUTE, T_SP, T_CP, T_NEXT, T_SC, T_CC, T_RED, T_ACT = range(10)
# per transfer, float (F): start, arrival, commit times (NaN: never)
F_START, F_ARRIVE, F_COMMIT = range(3)
# per chunk slot of a transfer, int32 (CS): the chunk, the mask id read at the start, the numbers of the (rank, chunk)
# pairs it reads at its sender and writes at its receiver
CS_CHUNK, CS_SNAP, CS_READ, CS_WRITE = range(4)
# dependency lists (EP pointers into ED): start on commit, commit on commit, commit on arrival
EP_SOC, EP_COC, EP_COA = range(3)
# per resource, float (RF) and int64 (RI)
RF_CAPACITY, RF_LEVEL, RF_LEFT, RF_COUNT, RF_SINCE, RF_BUSY, RF_CARRIED = range(7)
RI_LOAD, RI_REACHED, RI_HEAD, RI_TAIL, RI_COUNT = range(5)
# per (group, resource) node of the groups_on lists, int64 (NI)
NI_RES, NI_PREV, NI_NEXT, NI_GROUP = range(4)
# per group, float (GF) and int64 (GI)
GF_RATE, GF_DRAINED, GF_UPDATED, GF_DUE, GF_LATENCY = range(5)
# (GI_BOUND: where the group's binding resources end; its slots list those first, see new_network)
GI_SIZE, GI_SOLVED, GI_SEEN, GI_FIXED, GI_LINKED, GI_HLEN, GI_HBASE, GI_EVENT, GI_FINISH, GI_TOUCHED, GI_BOUND = range(11)
# member heap slots: target (HK, float) and join number, flow (HI, int32)
HI_SEQ, HI_FLOW = range(2)
# work lists per group (WG): touched, moved
WG_TOUCHED, WG_MOVED = range(2)


@njit(cache=True)
def _solve(seeds: Any, num_seeds: int, now: float, rf: Any, ri: Any, ni: Any, res_ptr: Any, gf: Any, gi: Any,
           wg: Any, stack: Any, hshare: Any, hres: Any, cnt: Any) -> None:
    """``FluidNetwork._solve`` (no weights): max-min rates where groups changed size, frozen groups kept."""
    cnt[SOLVES] += 1
    solve = cnt[SOLVES]
    floor = np.inf
    depth = 0
    for k in range(num_seeds):
        r = seeds[k]
        if ri[RI_REACHED, r] != solve:
            ri[RI_REACHED, r] = solve
            stack[depth] = r
            depth += 1
            if rf[RF_LEVEL, r] < floor:
                floor = rf[RF_LEVEL, r]
            demand = ri[RI_LOAD, r] + 0.0
            if rf[RF_CAPACITY, r] < floor * demand:
                floor = rf[RF_CAPACITY, r] / demand
    floor *= _KEEP
    size = 0
    while depth:
        depth -= 1
        r = stack[depth]
        cnt[VISITED_RESOURCES] += 1
        left = rf[RF_CAPACITY, r]
        n = 0
        p = ri[RI_HEAD, r]
        while p >= 0:
            g = ni[NI_GROUP, p]
            p = ni[NI_NEXT, p]
            cnt[VISITED_GROUPS] += 1
            m = gi[GI_SIZE, g]
            rate = gf[GF_RATE, g]
            if rate < floor and m == gi[GI_SOLVED, g]:
                left -= rate * m
                continue
            n += m
            if gi[GI_SEEN, g] != solve:
                gi[GI_SEEN, g] = solve
                for q in range(res_ptr[g], gi[GI_BOUND, g]):
                    r2 = ni[NI_RES, q]
                    if ri[RI_REACHED, r2] != solve:
                        ri[RI_REACHED, r2] = solve
                        stack[depth] = r2
                        depth += 1
        rf[RF_LEVEL, r] = np.inf
        if n:
            rf[RF_LEFT, r] = left
            rf[RF_COUNT, r] = n
            size = _h_push(hshare, hres, size, (left if left > 0 else 0.0) / n, r)
    while size:
        share, r = hshare[0], hres[0]
        size = _h_pop(hshare, hres, size)
        nf = rf[RF_COUNT, r]
        if nf < _NO_DEMAND:
            continue
        left = rf[RF_LEFT, r]
        current = left / nf if left > 0 else 0.0
        if current > share * _GROW + 1e-300:
            size = _h_push(hshare, hres, size, current, r)
            continue
        rf[RF_LEVEL, r] = current
        p = ri[RI_HEAD, r]
        while p >= 0:
            g = ni[NI_GROUP, p]
            p = ni[NI_NEXT, p]
            if gi[GI_SEEN, g] != solve or gi[GI_FIXED, g] == solve:
                continue
            gi[GI_FIXED, g] = solve
            m = gi[GI_SIZE, g]
            gi[GI_SOLVED, g] = m
            used = current * m
            for q in range(res_ptr[g], gi[GI_BOUND, g]):
                r2 = ni[NI_RES, q]
                rf[RF_LEFT, r2] -= used
                rf[RF_COUNT, r2] -= m
            old = gf[GF_RATE, g]
            if current - old > _SAME_RATE * old or old - current > _SAME_RATE * old:
                gf[GF_DRAINED, g] += old * (now - gf[GF_UPDATED, g])
                gf[GF_UPDATED, g] = now
                gf[GF_RATE, g] = current
                if not gi[GI_TOUCHED, g]:
                    wg[WG_MOVED, cnt[_MN]] = g
                    cnt[_MN] += 1


@njit(cache=True, inline="always")
def _h_push(share: Any, res: Any, size: int, value: float, r: int) -> int:
    """Push (value, r) on the solve's heap of ``size`` entries ordered by (share, resource); the new size."""
    j = size
    while j > 0:
        parent = (j - 1) >> 1
        if value < share[parent] or (value == share[parent] and r < res[parent]):
            share[j] = share[parent]
            res[j] = res[parent]
            j = parent
        else:
            break
    share[j] = value
    res[j] = r
    return size + 1


@njit(cache=True, inline="always")
def _h_pop(share: Any, res: Any, size: int) -> int:
    """Drop the least entry of the solve's heap; the new size."""
    m = size - 1
    if m > 0:
        value, r = share[m], res[m]
        j = 0
        while True:
            c = 2 * j + 1
            if c >= m:
                break
            if c + 1 < m and (share[c + 1] < share[c] or (share[c + 1] == share[c] and res[c + 1] < res[c])):
                c += 1
            if share[c] < value or (share[c] == value and res[c] < r):
                share[j] = share[c]
                res[j] = res[c]
                j = c
            else:
                break
        share[j] = value
        res[j] = r
    return m


@njit(cache=True)
def _reshare(now: float, rf: Any, ri: Any, ni: Any, res_ptr: Any, gf: Any, gi: Any, wg: Any, seeds: Any,
             stack: Any, hshare: Any, hres: Any, cnt: Any) -> None:
    """``FluidNetwork.reshare_groups``: re-solve where sizes changed; WG_MOVED gets the groups to re-time."""
    num_seeds = 0
    for k in range(cnt[_TN]):
        g = wg[WG_TOUCHED, k]
        if gi[GI_SIZE, g]:
            wg[WG_MOVED, cnt[_MN]] = g
            cnt[_MN] += 1
            if gi[GI_SIZE, g] != gi[GI_SOLVED, g]:
                shared = False
                for q in range(res_ptr[g], gi[GI_BOUND, g]):
                    if ri[RI_COUNT, ni[NI_RES, q]] > 1:
                        shared = True
                        break
                if shared:
                    for q in range(res_ptr[g], gi[GI_BOUND, g]):
                        seeds[num_seeds] = ni[NI_RES, q]
                        num_seeds += 1
                else:  # _solve_alone
                    m = gi[GI_SIZE, g]
                    gi[GI_SOLVED, g] = m
                    least = np.inf
                    for q in range(res_ptr[g], gi[GI_BOUND, g]):
                        c = rf[RF_CAPACITY, ni[NI_RES, q]]
                        if c < least:
                            least = c
                    new = least / m
                    for q in range(res_ptr[g], gi[GI_BOUND, g]):
                        r = ni[NI_RES, q]
                        rf[RF_LEVEL, r] = new if rf[RF_CAPACITY, r] == least else np.inf
                    old = gf[GF_RATE, g]
                    if abs(new - old) > _SAME_RATE * old:
                        gf[GF_DRAINED, g] += old * (now - gf[GF_UPDATED, g])
                        gf[GF_UPDATED, g] = now
                        gf[GF_RATE, g] = new
        elif gi[GI_LINKED, g]:
            gi[GI_LINKED, g] = 0
            for q in range(res_ptr[g], gi[GI_BOUND, g]):
                r = ni[NI_RES, q]
                a, b = ni[NI_PREV, q], ni[NI_NEXT, q]  # unlink from groups_on[r]
                if a < 0:
                    ri[RI_HEAD, r] = b
                else:
                    ni[NI_NEXT, a] = b
                if b < 0:
                    ri[RI_TAIL, r] = a
                else:
                    ni[NI_PREV, b] = a
                ri[RI_COUNT, r] -= 1
                if not ri[RI_LOAD, r]:
                    rf[RF_LEVEL, r] = np.inf
                elif gi[GI_SOLVED, g]:
                    seeds[num_seeds] = r
                    num_seeds += 1
            gi[GI_HLEN, g] = 0
            gi[GI_SOLVED, g] = 0
            gf[GF_RATE, g] = 0.0
            gf[GF_DRAINED, g] = 0.0
            gf[GF_UPDATED, g] = now
    if num_seeds:
        _solve(seeds, num_seeds, now, rf, ri, ni, res_ptr, gf, gi, wg, stack, hshare, hres, cnt)
    for k in range(cnt[_TN]):
        gi[GI_TOUCHED, wg[WG_TOUCHED, k]] = 0
    cnt[_TN] = 0


@njit(cache=True, inline="always")
def _less(ka: float, sa: int, kb: float, sb: int) -> bool:
    """(key a, seq a) < (key b, seq b): the order of a group's members (target, then join number)."""
    return ka < kb or (ka == kb and sa < sb)


# ---------------------------------------------------------------------------------------------- the fluid network
# Its tables (``new_network``) and steps, shared by ``run`` here and :func:`taccl_py.msccl.fast_timing.run` and inlined
# into both (numba ``inline="always"``), so the hot path costs what closures over the tables did. ``net`` is the tuple
# ``new_network`` returns; ``active`` is the per-flow "in the network" flag (an integer or boolean array).
@njit(cache=True)
def new_network(capacity: Any, latency: Any, res_ptr: Any, res: Any, route_count: Any, members: int,
                binding: Any, prune_from: int) -> Any:
    """The fluid network of ``capacity`` per resource and routes ``res[res_ptr[g]:res_ptr[g + 1]]`` (with their
    ``latency`` and ``route_count`` flows each), room for ``members`` flows; an empty event heap, whose void
    events are dropped from ``prune_from`` queued events (:data:`QUEUE_PRUNE_FROM`).

    ``binding`` per resource (:func:`taccl_py.fluid.binding_resources`): each group's slots list its binding
    resources first, in route order, up to ``GI_BOUND``; the re-solves see only those (``FlowGroup.bound``), the
    load, busy time and bytes carried are kept on all."""
    num_res = len(capacity)
    num_groups = len(res_ptr) - 1
    slots = len(res)
    rf = np.zeros((7, num_res))
    rf[RF_CAPACITY] = capacity
    rf[RF_LEVEL] = np.inf
    ri = np.zeros((5, num_res), np.int64)
    ri[RI_HEAD] = -1
    ri[RI_TAIL] = -1
    ni = np.full((4, slots), -1, np.int64)
    gf = np.zeros((5, num_groups))
    gf[GF_DUE] = np.inf
    gf[GF_LATENCY] = latency
    gi = np.zeros((11, num_groups), np.int64)
    for g in range(num_groups):
        q = res_ptr[g]
        for p in range(res_ptr[g], res_ptr[g + 1]):
            if binding[res[p]]:
                ni[NI_RES, q] = res[p]
                q += 1
        gi[GI_BOUND, g] = q
        for p in range(res_ptr[g], res_ptr[g + 1]):
            if not binding[res[p]]:
                ni[NI_RES, q] = res[p]
                q += 1
        for p in range(res_ptr[g], res_ptr[g + 1]):
            ni[NI_GROUP, p] = g
    base = 0
    for g in range(num_groups):
        gi[GI_HBASE, g] = base
        base += route_count[g]
    hk = np.empty(max(members, 1))
    hi = np.empty((2, max(members, 1)), np.int32)
    wg = np.empty((2, num_groups), np.int64)
    seeds = np.empty(slots + 1, np.int64)
    stack = np.empty(num_res, np.int64)
    hshare = np.empty(num_res)
    hres = np.empty(num_res, np.int64)
    cnt = np.zeros(24, np.int64)
    cnt[EVENTS] = 1
    cnt[_QLIMIT] = cnt[_QFLOOR] = prune_from
    queue = List([np.empty((1024, 5))])
    return rf, ri, ni, gf, gi, hk, hi, wg, seeds, stack, hshare, hres, cnt, queue


@njit(cache=True)
def proxy_posts(posted: Any, ranks: Any, peers: Any, now: float, post_us: float) -> Any:
    """When the sends over the network that became ready together at ``now`` start, one per (``ranks[k]``,
    ``peers[k]``) in program order: :func:`taccl_py.runtime.proxy_posts` over arrays (``posted`` is updated)."""
    k = len(ranks)
    starts = np.empty(k)
    for j in range(k):  # the receives first
        peer = peers[j]
        posted[peer] += post_us
        starts[j] = posted[peer]
    for j in range(k):
        rank = ranks[j]
        posted[rank] = max(now, posted[rank]) + post_us
        starts[j] = max(posted[rank], starts[j])
    return starts


@njit(cache=True, inline="always")
def _put(q: Any, j: int, time: float, fseq: float, kind: float, item: float, group: float) -> None:
    """Write event row ``j``."""
    q[j, 0] = time
    q[j, 1] = fseq
    q[j, 2] = kind
    q[j, 3] = item
    q[j, 4] = group


@njit(cache=True, inline="always")
def event_push(queue: Any, cnt: Any, time: float, kind: int, item: int, group: int) -> int:
    """Push ``(time, seq, kind, item, group)`` on the event heap (``seq`` counts pushes: FIFO ties); its seq."""
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
    _put(q, j, time, fseq, kind, item, group)
    cnt[_QN] = size + 1
    if size >= cnt[QUEUE_PEAK]:
        cnt[QUEUE_PEAK] = size + 1
    return seq


@njit(cache=True, inline="always")
def event_pop(queue: Any, cnt: Any) -> Any:
    """Take the first event off the heap: (time, seq, kind, item, group)."""
    q = queue[0]
    top = (q[0, 0], int(q[0, 1]), int(q[0, 2]), int(q[0, 3]), int(q[0, 4]))
    m = cnt[_QN] - 1
    cnt[_QN] = m
    if m > 0:
        _sift_down(q, 0, m, m)
    return top


@njit(cache=True, inline="always")
def _sift_down(q: Any, hole: int, m: int, row: int) -> None:
    """Put event row ``row`` in the heap of the first ``m`` rows from the place ``hole`` down, by (time, seq)."""
    time, fseq, kind, item, group = q[row, 0], q[row, 1], q[row, 2], q[row, 3], q[row, 4]
    j = hole
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
    _put(q, j, time, fseq, kind, item, group)


@njit(cache=True, inline="always")
def _member_pop(hk: Any, hi: Any, at: int, length: int) -> None:
    """Drop the root of the member heap at ``at`` of ``length`` entries (the caller shortens it)."""
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


@njit(cache=True, inline="always")
def first_finish(net: Any, active: Any, g: int) -> Any:
    """``FlowGroup.next_finish``: skip departed members; (time, flow) of the first to finish."""
    gf, gi, hk, hi = net[3], net[4], net[5], net[6]
    at = gi[GI_HBASE, g]
    while not active[hi[HI_FLOW, at]]:
        _member_pop(hk, hi, at, gi[GI_HLEN, g])
        gi[GI_HLEN, g] -= 1
    rate = gf[GF_RATE, g]
    time = gf[GF_UPDATED, g] + (hk[at] - gf[GF_DRAINED, g]) / rate if rate > 0 else np.inf
    return time, int(hi[HI_FLOW, at])


@njit(cache=True, inline="always")
def _queue_finish(net: Any, g: int, time: float, flow: int) -> None:
    gf, gi, cnt, queue = net[3], net[4], net[12], net[13]
    gf[GF_DUE, g] = time
    gi[GI_EVENT, g] = event_push(queue, cnt, time, _FINISH, flow, g)
    gi[GI_FINISH, g] = _QUEUED


@njit(cache=True, inline="always")
def _touch(net: Any, g: int) -> None:
    gi, wg, cnt = net[4], net[7], net[12]
    if not gi[GI_TOUCHED, g]:
        gi[GI_TOUCHED, g] = 1
        wg[WG_TOUCHED, cnt[_TN]] = g
        cnt[_TN] += 1


@njit(cache=True, inline="always")
def net_add(net: Any, active: Any, res_ptr: Any, i: int, g: int, nbytes: float, now: float) -> None:
    """``FluidNetwork.add``: flow i joins group g (its route) with ``nbytes`` to move."""
    rf, ri, ni, gf, gi, hk, hi, cnt = net[0], net[1], net[2], net[3], net[4], net[5], net[6], net[12]
    if not gi[GI_LINKED, g]:
        gi[GI_LINKED, g] = 1
        for p in range(res_ptr[g], gi[GI_BOUND, g]):  # append to groups_on of each binding resource
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
    target = gf[GF_DRAINED, g] + gf[GF_RATE, g] * (now - gf[GF_UPDATED, g]) + nbytes
    seq = cnt[_JOIN]
    cnt[_JOIN] += 1
    active[i] = 1
    at, j = gi[GI_HBASE, g], gi[GI_HLEN, g]  # push (target, seq, i) on the member heap
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
    _touch(net, g)
    for p in range(res_ptr[g], res_ptr[g + 1]):
        r = ni[NI_RES, p]
        if not ri[RI_LOAD, r]:
            rf[RF_SINCE, r] = now
        ri[RI_LOAD, r] += 1
        rf[RF_CARRIED, r] += nbytes


@njit(cache=True)
def _prune_queue(queue: Any, cnt: Any, gi: Any) -> None:
    """Drop the void finish events (not their group's current one) and heap the rest again: the order in which
    they come off, by (time, seq), is the same."""
    q = queue[0]
    m = 0
    for j in range(cnt[_QN]):
        if int(q[j, 2]) != _FINISH or gi[GI_EVENT, int(q[j, 4])] == int(q[j, 1]):
            for c in range(5):
                q[m, c] = q[j, c]
            m += 1
    for top in range(m // 2 - 1, -1, -1):  # sift every parent down, last first
        _sift_down(q, top, m, top)
    cnt[PRUNED] += cnt[_QN] - m
    cnt[_QN] = m
    cnt[_QLIMIT] = max(cnt[_QFLOOR], 2 * m)


@njit(cache=True, inline="always")
def settle(net: Any, active: Any, res_ptr: Any, now: float) -> None:
    """Before a batch: re-solve where sizes changed, re-time the groups whose first finish may have moved, and
    drop void finish events from the top of the heap (late ones move to their actual finish)."""
    rf, ri, ni, gf, gi, wg, seeds, stack, hshare, hres, cnt, queue = (net[0], net[1], net[2], net[3], net[4], net[7],
                                                                      net[8], net[9], net[10], net[11], net[12],
                                                                      net[13])
    if cnt[_TN]:
        _reshare(now, rf, ri, ni, res_ptr, gf, gi, wg, seeds, stack, hshare, hres, cnt)
        for k in range(cnt[_MN]):  # where rates changed, the first finish may have moved
            g = wg[WG_MOVED, k]
            time, flow = first_finish(net, active, g)
            if gi[GI_FINISH, g] == _NONE or time < gf[GF_DUE, g]:
                _queue_finish(net, g, time, flow)
            elif gi[GI_FINISH, g] == _QUEUED:
                gi[GI_FINISH, g] = _LATE
        cnt[_MN] = 0
    if cnt[_QN] >= cnt[_QLIMIT]:
        _prune_queue(queue, cnt, gi)
    while cnt[_QN] and int(queue[0][0, 2]) == _FINISH:  # void and late finish events must not open a batch
        seq, g = int(queue[0][0, 1]), int(queue[0][0, 4])
        if gi[GI_EVENT, g] == seq and gi[GI_FINISH, g] == _QUEUED:
            break
        event_pop(queue, cnt)
        if gi[GI_EVENT, g] == seq:  # late: move it to the actual finish
            time, flow = first_finish(net, active, g)
            _queue_finish(net, g, time, flow)


@njit(cache=True, inline="always")
def flow_leaves(net: Any, active: Any, res_ptr: Any, g: int, seq: int, flow: int, now: float, horizon: float) -> int:
    """A finish event ``(seq, flow)`` of group g: the flow that leaves the network now (``net.remove``), or -1 when the event is
    void (a later one replaced it) or late past the batch's horizon (moved to its actual finish)."""
    rf, ri, ni, gi = net[0], net[1], net[2], net[4]
    if gi[GI_EVENT, g] != seq:
        return -1
    i = flow
    if gi[GI_FINISH, g] == _LATE:
        time, i = first_finish(net, active, g)
        if time > horizon:
            _queue_finish(net, g, time, i)
            return -1
    active[i] = 0
    gi[GI_SIZE, g] -= 1
    _touch(net, g)
    for p in range(res_ptr[g], res_ptr[g + 1]):
        r = ni[NI_RES, p]
        ri[RI_LOAD, r] -= 1
        if not ri[RI_LOAD, r]:
            rf[RF_BUSY, r] += now - rf[RF_SINCE, r]
    if gi[GI_SIZE, g]:
        time, flow = first_finish(net, active, g)
        _queue_finish(net, g, time, flow)
    else:
        gi[GI_FINISH, g] = _NONE
        gi[GI_EVENT, g] = 0
    return i


@njit(cache=True, inline="always")
def close_busy(net: Any, now: float) -> None:
    """``finish_busy``: links still loaded at the end are busy until ``now``."""
    rf, ri = net[0], net[1]
    for r in range(rf.shape[1]):
        if ri[RI_LOAD, r]:
            rf[RF_BUSY, r] += now - rf[RF_SINCE, r]
            rf[RF_SINCE, r] = now


# ---------------------------------------------------------------------------------------------- the run
@njit(cache=True, nogil=True)
def run(t: Any, f: Any, chunk_ptr: Any, cs: Any, ep: Any, ed: Any, not_before: Any, bytes_by_count: Any,
        capacity: Any, latency: Any, res_ptr: Any, res: Any, route_count: Any, state: Any, words: Any,
        n_ranks: int, route_posts: Any, post_us: float, posted: Any, binding: Any, prune_from: int) -> Any:
    """Run every transfer of the tables (see the layout above; ``t`` and ``f`` are updated in place).

    ``capacity`` per resource, ``latency`` per route (with the step overhead), ``res_ptr``/``res`` the
    resources of each route, ``route_count`` the transfers on each route, ``state`` the mask id of every
    numbered (rank, chunk) pair (updated in place; ``cs[CS_READ]`` and ``cs[CS_WRITE]`` number each slot's),
    ``words`` the mask pool; ``route_posts`` per route whether its transfers wait for the proxies to post them
    (``post_us`` each; ``posted`` per rank, updated: as :func:`taccl_py.runtime.proxy_posts`), ``binding`` per
    resource whether it may limit a rate and ``prune_from`` when to drop void events (:func:`new_network`).
    Returns (busy_us, bytes carried, counters, pool words, fault time); ``counters[FAULT_KIND]`` is a fault code
    (0: none).

    The rules are closures over the tables and the fluid network's steps are inline functions (numba inlines
    both), so the hot path passes no arrays.
    """
    n = t.shape[1]
    net = new_network(capacity, latency, res_ptr, res, route_count, n, binding, prune_from)
    rf, gf, cnt, queue = net[0], net[3], net[12], net[13]
    active = t[T_ACT]
    cm = np.empty((2, max(n, 1)), np.int32)
    cnt[_USED] = n_ranks + 1
    fl = np.zeros(1)
    pi = List([np.zeros(words.shape[0], np.int64), np.zeros(words.shape[0], np.int64)])  # free rows, counts
    words_box = List([words])
    timed = len(not_before) > 0
    to_post = np.empty(max(n, 1), np.int32)  # transfers ready in this instant that wait for the proxies' posts
    counts = np.zeros(1, np.int64)

    # ------------------------------------------------------------------ the rules
    def begin(i: int, now: float) -> bool:
        """``_Run.begin``: read the sender's masks (a missing chunk is a fault: False) and send."""
        p0, p1 = chunk_ptr[i], chunk_ptr[i + 1]
        for p in range(p0, p1):
            if state[cs[CS_READ, p]] == 0:
                cnt[FAULT_KIND] = FAULT_MISSING
                cnt[FAULT_TRANSFER] = i
                cnt[FAULT_CHUNK] = cs[CS_CHUNK, p]
                fl[0] = now
                return False
        for p in range(p0, p1):
            mid = state[cs[CS_READ, p]]
            cs[CS_SNAP, p] = mid
            if mid > n_ranks:
                pi[1][mid] += 1
        f[F_START, i] = now
        g = t[T_ROUTE, i]  # send: the latency, then the bytes
        lat = gf[GF_LATENCY, g]
        nb = bytes_by_count[p1 - p0]
        if route_posts[g]:  # its proxies post it at the end of the instant (flush)
            to_post[counts[0]] = i
            counts[0] += 1
        elif lat > 0 or not nb > 0:
            event_push(queue, cnt, now + lat, _ENTER, i, -1)
        else:
            net_add(net, active, res_ptr, i, g, nb, now)
        return True

    def flush(now: float) -> None:
        """``_Run.end_batch``: the proxies post what became ready in this instant, in program order."""
        k = counts[0]
        if k:
            counts[0] = 0
            order = np.sort(to_post[:k])
            starts = proxy_posts(posted, t[T_SRC][order], t[T_DST][order], now, post_us)
            for j in range(k):
                i = order[j]
                event_push(queue, cnt, starts[j] + gf[GF_LATENCY, t[T_ROUTE, i]], _ENTER, i, -1)

    def release(j: int, now: float, cause: int) -> bool:
        """``_Run.release``: one of j's start conditions is met; it starts when it was the last."""
        t[T_SP, j] -= 1
        if t[T_SP, j]:
            return True
        t[T_SC, j] = cause
        if timed and not_before[j] > now:  # NaN (none) is never greater
            event_push(queue, cnt, not_before[j], _TIMER, j, -1)
            return True
        return begin(j, now)

    def drop(mid: int) -> None:
        """One reference less to mask ``mid`` (single-rank masks are permanent)."""
        if mid > n_ranks:
            refc = pi[1]
            refc[mid] -= 1
            if refc[mid] == 0:
                pi[0][cnt[_NFREE]] = mid
                cnt[_NFREE] += 1

    def commit_ready(j: int, cause: int) -> None:
        cm[0, cnt[_CN]] = j
        cm[1, cnt[_CN]] = cause
        cnt[_CN] += 1

    def deliver(i: int, now: float) -> bool:
        """``_Run.delivered`` then ``settle``: i's bytes are at its receiver; commit what may. False on a fault."""
        f[F_ARRIVE, i] = now
        j = t[T_NEXT, i]
        if j >= 0 and not release(j, now, i):
            return False
        for q in range(ep[EP_COA, i], ep[EP_COA, i + 1]):
            j = ed[q]
            t[T_CP, j] -= 1
            if not t[T_CP, j]:
                commit_ready(j, i)
        t[T_CP, i] -= 1
        if not t[T_CP, i]:
            commit_ready(i, i)
        while cnt[_CN]:
            cnt[_CN] -= 1
            k, cause = cm[0, cnt[_CN]], cm[1, cnt[_CN]]
            t[T_CC, k] = cause
            if not t[T_RED, k]:
                for p in range(chunk_ptr[k], chunk_ptr[k + 1]):
                    key = cs[CS_WRITE, p]
                    old = state[key]
                    state[key] = cs[CS_SNAP, p]
                    drop(old)
            else:
                for p in range(chunk_ptr[k], chunk_ptr[k + 1]):
                    key = cs[CS_WRITE, p]
                    held = state[key]
                    mid = cs[CS_SNAP, p]
                    if held == 0:
                        state[key] = mid
                        continue
                    pool = words_box[0]
                    for w in range(pool.shape[1]):
                        if pool[held, w] & pool[mid, w]:
                            cnt[FAULT_KIND] = FAULT_DOUBLE
                            cnt[FAULT_TRANSFER] = k
                            cnt[FAULT_CHUNK] = cs[CS_CHUNK, p]
                            cnt[FAULT_HELD] = held
                            cnt[FAULT_MASK] = mid
                            return False
                    if cnt[_NFREE]:
                        cnt[_NFREE] -= 1
                        new = pi[0][cnt[_NFREE]]
                    else:
                        if cnt[_USED] == pool.shape[0]:  # grow the pool, its free list and its counts
                            rows = pool.shape[0]
                            grown = np.zeros((2 * rows, pool.shape[1]), np.uint64)
                            grown[:rows] = pool
                            words_box[0] = grown
                            pool = grown
                            for b in range(2):
                                bigger = np.zeros(2 * rows, np.int64)
                                bigger[:rows] = pi[b]
                                pi[b] = bigger
                        new = cnt[_USED]
                        cnt[_USED] += 1
                    for w in range(pool.shape[1]):
                        pool[new, w] = pool[held, w] | pool[mid, w]
                    pi[1][new] = 1
                    state[key] = new
                    drop(held)
                    drop(mid)
            f[F_COMMIT, k] = now
            cnt[COMMITTED] += 1
            for q in range(ep[EP_SOC, k], ep[EP_SOC, k + 1]):
                if not release(ed[q], now, k):
                    return False
            for q in range(ep[EP_COC, k], ep[EP_COC, k + 1]):
                j = ed[q]
                t[T_CP, j] -= 1
                if not t[T_CP, j]:
                    commit_ready(j, k)
        return True

    # ------------------------------------------------------------------ the loop
    now = 0.0
    ok = True
    for i in range(n):  # start: transfers that wait for nothing
        if t[T_SP, i] == 0:
            if timed and not_before[i] > 0:
                event_push(queue, cnt, not_before[i], _TIMER, i, -1)
            elif not begin(i, 0.0):
                ok = False
                break
    if ok:
        flush(now)
    while ok:
        settle(net, active, res_ptr, now)
        if not cnt[_QN]:
            break
        q = queue[0]
        now = q[0, 0]
        horizon = now + _HORIZON * max(1.0, abs(now))
        while cnt[_QN] and q[0, 0] <= horizon:
            time, seq, kind, i, g = event_pop(queue, cnt)
            arrived = -1  # the transfer whose bytes are now at its receiver, if any
            if kind == _FINISH:  # -1: a void or late event
                arrived, time = flow_leaves(net, active, res_ptr, g, seq, i, now, horizon), now
            elif kind == _ENTER:
                nb = bytes_by_count[chunk_ptr[i + 1] - chunk_ptr[i]]
                if nb > 0:
                    net_add(net, active, res_ptr, i, t[T_ROUTE, i], nb, now)
                else:
                    arrived = i  # at the event's time
            else:
                ok = begin(i, time)
            if arrived >= 0:
                ok = deliver(arrived, time)
            if not ok:
                break
            q = queue[0]
        if ok:
            flush(now)
    close_busy(net, now)
    return rf[RF_BUSY].copy(), rf[RF_CARRIED].copy(), cnt, words_box[0], fl[0]
