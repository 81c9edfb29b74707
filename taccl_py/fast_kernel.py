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
* the data: every (rank, chunk) holds the id of a contribution mask; masks are rows of
  64-bit words in a pool, ids 1..N are the single ranks' masks, others are reference
  counted and reused when dropped. A copy moves an id, a reduction checks the overlap
  and writes the union into a new row.

A fault stops the run where the Python simulator would raise; :mod:`taccl_py.fast_sim`
turns its code into the same message.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba.typed import List

from taccl_py.tolerances import SAME_INSTANT_REL

__all__ = ["FAULT_DOUBLE", "FAULT_MISSING", "build_dependencies", "run"]

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

# counters (one int64 array): next event seq, next join seq, solves, committed, fault kind/transfer/chunk/a/b,
# pool rows used, free rows
# and the lengths of the event queue, the touched and moved groups and the commit stack
# and work done: resources and groups the re-solves visited
_SEQ, _JOIN, _SOLVES, _DONE, _FK, _FI, _FC, _FA, _FB, _USED, _NFREE, _QN, _TN, _MN, _CN, _VR, _VG = range(17)


# ---------------------------------------------------------------------------------------------- dependencies
@njit(cache=True)
def build_dependencies(src: Any, dst: Any, chunk_ptr: Any, chunks: Any, after_ptr: Any, after: Any,
                       num_chunks: int, num_keys: int) -> Any:
    """Start and commit dependencies, as ``simulator._dependencies`` derives them (no exchanges or groups).

    Returns start_pending, commit_pending and three CSR lists (pointer, waiters):
    start_on_commit, commit_on_commit, commit_on_arrive; each waiter list in increasing order.
    """
    n = len(src)
    total = len(chunks)
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
        sb = src[i] * num_chunks
        db = dst[i] * num_chunks
        # start: the writers of what it reads, and 'after'
        k = 0
        need = (p1 - p0) * 2 + (after_ptr[i + 1] - after_ptr[i])
        if need > len(scratch):
            scratch = np.empty(need, np.int64)
        for q in range(after_ptr[i], after_ptr[i + 1]):
            scratch[k] = after[q]
            k += 1
        for p in range(p0, p1):
            key = sb + chunks[p]
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
            key = db + chunks[p]
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
            key = db + chunks[p]
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
    ptr = np.zeros(n + 1, np.int64)
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


# ---------------------------------------------------------------------------------------------- member heaps
@njit(cache=True, inline="always")
def _less(ka: float, sa: int, kb: float, sb: int) -> bool:
    return ka < kb or (ka == kb and sa < sb)


@njit(cache=True, inline="always")
def _mh_push(hk: Any, hs: Any, hf: Any, base: int, length: int, key: float, seq: int, flow: int) -> None:
    j = length
    while j > 0:
        parent = (j - 1) >> 1
        if _less(key, seq, hk[base + parent], hs[base + parent]):
            hk[base + j] = hk[base + parent]
            hs[base + j] = hs[base + parent]
            hf[base + j] = hf[base + parent]
            j = parent
        else:
            break
    hk[base + j] = key
    hs[base + j] = seq
    hf[base + j] = flow


@njit(cache=True, inline="always")
def _mh_pop(hk: Any, hs: Any, hf: Any, base: int, length: int) -> None:
    """Drop the root of a heap of ``length`` entries (the caller shortens it by one)."""
    m = length - 1
    if m == 0:
        return
    key, seq, flow = hk[base + m], hs[base + m], hf[base + m]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= m:
            break
        if c + 1 < m and _less(hk[base + c + 1], hs[base + c + 1], hk[base + c], hs[base + c]):
            c += 1
        if _less(hk[base + c], hs[base + c], key, seq):
            hk[base + j] = hk[base + c]
            hs[base + j] = hs[base + c]
            hf[base + j] = hf[base + c]
            j = c
        else:
            break
    hk[base + j] = key
    hs[base + j] = seq
    hf[base + j] = flow


@njit(cache=True, inline="always")
def _head(g: int, hk: Any, hs: Any, hf: Any, hbase: Any, hlen: Any, active: Any) -> int:
    """Skip departed members at the top of group g's heap; the position of its first member."""
    base = hbase[g]
    while not active[hf[base]]:
        _mh_pop(hk, hs, hf, base, hlen[g])
        hlen[g] -= 1
    return base


# ---------------------------------------------------------------------------------------------- the event heap
@njit(cache=True, inline="always")
def _q_push(queue: Any, cnt: Any, time: float, kind: int, item: int, group: int) -> int:
    """Queue an event (time, seq, kind, item, group); seq is the next push number (FIFO ties)."""
    q = queue[0]
    size = cnt[_QN]
    if size == q.shape[0]:
        grown = np.empty((2 * size, 5))
        grown[:size] = q
        queue[0] = grown
        q = grown
    seq = cnt[_SEQ]
    cnt[_SEQ] += 1
    fseq = float(seq)
    j = size
    while j > 0:
        parent = (j - 1) >> 1
        pt = q[parent, 0]
        if time < pt or (time == pt and fseq < q[parent, 1]):
            q[j, 0] = q[parent, 0]
            q[j, 1] = q[parent, 1]
            q[j, 2] = q[parent, 2]
            q[j, 3] = q[parent, 3]
            q[j, 4] = q[parent, 4]
            j = parent
        else:
            break
    q[j, 0] = time
    q[j, 1] = fseq
    q[j, 2] = kind
    q[j, 3] = item
    q[j, 4] = group
    cnt[_QN] = size + 1
    return seq


@njit(cache=True, inline="always")
def _q_pop(queue: Any, cnt: Any) -> Any:
    """Remove the first event; (time, seq, kind, item, group)."""
    q = queue[0]
    top = (q[0, 0], int(q[0, 1]), int(q[0, 2]), int(q[0, 3]), int(q[0, 4]))
    m = cnt[_QN] - 1
    cnt[_QN] = m
    if m > 0:
        time, fseq, kind, item, group = q[m, 0], q[m, 1], q[m, 2], q[m, 3], q[m, 4]
        j = 0
        while True:
            c = 2 * j + 1
            if c >= m:
                break
            if c + 1 < m and (q[c + 1, 0] < q[c, 0] or (q[c + 1, 0] == q[c, 0] and q[c + 1, 1] < q[c, 1])):
                c += 1
            if q[c, 0] < time or (q[c, 0] == time and q[c, 1] < fseq):
                q[j, 0] = q[c, 0]
                q[j, 1] = q[c, 1]
                q[j, 2] = q[c, 2]
                q[j, 3] = q[c, 3]
                q[j, 4] = q[c, 4]
                j = c
            else:
                break
        q[j, 0] = time
        q[j, 1] = fseq
        q[j, 2] = kind
        q[j, 3] = item
        q[j, 4] = group
    return top


# ---------------------------------------------------------------------------------------------- the network
@njit(cache=True, inline="always")
def _link(g: int, res_ptr: Any, res: Any, on_head: Any, on_tail: Any, on_count: Any, nd_prev: Any,
          nd_next: Any) -> None:
    for p in range(res_ptr[g], res_ptr[g + 1]):
        r = res[p]
        tail = on_tail[r]
        nd_prev[p] = tail
        nd_next[p] = -1
        if tail < 0:
            on_head[r] = p
        else:
            nd_next[tail] = p
        on_tail[r] = p
        on_count[r] += 1


@njit(cache=True, inline="always")
def _unlink_one(p: int, r: int, on_head: Any, on_tail: Any, on_count: Any, nd_prev: Any, nd_next: Any) -> None:
    a, b = nd_prev[p], nd_next[p]
    if a < 0:
        on_head[r] = b
    else:
        nd_next[a] = b
    if b < 0:
        on_tail[r] = a
    else:
        nd_prev[b] = a
    on_count[r] -= 1


@njit(cache=True)
def _solve(seeds: Any, num_seeds: int, now: float, net: Any, grp: Any, touched_flag: Any, moved: Any,
           scratch: Any, cnt: Any) -> None:
    """``FluidNetwork._solve`` (no weights): max-min rates where groups changed size, frozen groups kept."""
    capacity, load, level, cap, count, reached = net[0], net[1], net[2], net[3], net[4], net[5]
    on_head, nd_next, nd_group = net[6], net[7], net[8]
    res_ptr, res, g_size, g_solved, g_seen, g_fixed, g_rate, g_drained, g_upd = grp
    stack, hshare, hres = scratch
    cnt[_SOLVES] += 1
    solve = cnt[_SOLVES]
    floor = np.inf
    depth = 0
    for k in range(num_seeds):
        r = seeds[k]
        if reached[r] != solve:
            reached[r] = solve
            stack[depth] = r
            depth += 1
            if level[r] < floor:
                floor = level[r]
            demand = load[r] + 0.0
            if capacity[r] < floor * demand:
                floor = capacity[r] / demand
    floor *= _KEEP
    size = 0
    while depth:
        depth -= 1
        r = stack[depth]
        cnt[_VR] += 1
        left = capacity[r]
        n = 0
        p = on_head[r]
        while p >= 0:
            g = nd_group[p]
            p = nd_next[p]
            cnt[_VG] += 1
            m = g_size[g]
            if g_rate[g] < floor and m == g_solved[g]:
                left -= g_rate[g] * m
                continue
            n += m
            if g_seen[g] != solve:
                g_seen[g] = solve
                for q in range(res_ptr[g], res_ptr[g + 1]):
                    r2 = res[q]
                    if reached[r2] != solve:
                        reached[r2] = solve
                        stack[depth] = r2
                        depth += 1
        level[r] = np.inf
        if n:
            cap[r] = left
            count[r] = n
            size = _h_push(hshare, hres, size, (left if left > 0 else 0.0) / n, r)
    while size:
        share, r = hshare[0], hres[0]
        size = _h_pop(hshare, hres, size)
        nf = count[r]
        if nf < _NO_DEMAND:
            continue
        left = cap[r]
        current = left / nf if left > 0 else 0.0
        if current > share * _GROW + 1e-300:
            size = _h_push(hshare, hres, size, current, r)
            continue
        level[r] = current
        p = on_head[r]
        while p >= 0:
            g = nd_group[p]
            p = nd_next[p]
            if g_seen[g] != solve or g_fixed[g] == solve:
                continue
            g_fixed[g] = solve
            m = g_size[g]
            g_solved[g] = m
            used = current * m
            for q in range(res_ptr[g], res_ptr[g + 1]):
                r2 = res[q]
                cap[r2] -= used
                count[r2] -= m
            old = g_rate[g]
            if current - old > _SAME_RATE * old or old - current > _SAME_RATE * old:
                g_drained[g] += old * (now - g_upd[g])
                g_upd[g] = now
                g_rate[g] = current
                if not touched_flag[g]:
                    moved[cnt[_MN]] = g
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


@njit(cache=True, inline="always")
def _touch(g: int, touched: Any, touched_flag: Any, cnt: Any) -> None:
    if not touched_flag[g]:
        touched_flag[g] = True
        touched[cnt[_TN]] = g
        cnt[_TN] += 1


@njit(cache=True, inline="always")
def _net_add(i: int, g: int, nbytes: float, now: float, net: Any, grp: Any, heaps: Any, touched: Any,
             touched_flag: Any, busy: Any, cnt: Any) -> None:
    load = net[1]
    on_head, on_tail, on_count, nd_prev, nd_next = net[6], net[9], net[10], net[11], net[7]
    res_ptr, res, g_size, g_rate, g_drained, g_upd = grp[0], grp[1], grp[2], grp[6], grp[7], grp[8]
    hk, hs, hf, hbase, hlen, active, g_linked = heaps
    busy_since, carried = busy[0], busy[2]
    if not g_linked[g]:
        g_linked[g] = True
        _link(g, res_ptr, res, on_head, on_tail, on_count, nd_prev, nd_next)
    target = g_drained[g] + g_rate[g] * (now - g_upd[g]) + nbytes
    seq = cnt[_JOIN]
    cnt[_JOIN] += 1
    active[i] = True
    _mh_push(hk, hs, hf, hbase[g], hlen[g], target, seq, i)
    hlen[g] += 1
    g_size[g] += 1
    _touch(g, touched, touched_flag, cnt)
    for q in range(res_ptr[g], res_ptr[g + 1]):
        r = res[q]
        if not load[r]:
            busy_since[r] = now
        load[r] += 1
        carried[r] += nbytes


@njit(cache=True, inline="always")
def _begin(i: int, now: float, tr: Any, data: Any, times: Any, queue: Any, net: Any, grp: Any, heaps: Any,
           touched: Any, touched_flag: Any, busy: Any, cnt: Any) -> bool:
    """Start transfer i (read the sender's masks, send it); False on a fault."""
    src, chunk_ptr, chunks, route, route_latency, nbytes_of = tr[0], tr[1], tr[2], tr[3], tr[4], tr[5]
    state, snap, refc, num_chunks, n_ranks = data
    base = src[i] * num_chunks
    for p in range(chunk_ptr[i], chunk_ptr[i + 1]):
        if state[base + chunks[p]] == 0:
            cnt[_FK] = FAULT_MISSING
            cnt[_FI] = i
            cnt[_FC] = chunks[p]
            times[5][0] = now
            return False
    for p in range(chunk_ptr[i], chunk_ptr[i + 1]):
        mid = state[base + chunks[p]]
        snap[p] = mid
        if mid > n_ranks:
            refc[mid] += 1
    times[0][i] = now
    g = route[i]  # send: the latency, then the bytes
    latency = route_latency[g]
    nb = nbytes_of[i]
    if latency > 0 or not nb > 0:
        _q_push(queue, cnt, now + latency, _ENTER, i, -1)
    else:
        _net_add(i, g, nb, now, net, grp, heaps, touched, touched_flag, busy, cnt)
    return True


@njit(cache=True, inline="always")
def _release(j: int, now: float, cause: int, deps: Any, not_before: Any, tr: Any, data: Any, times: Any,
             queue: Any, net: Any, grp: Any, heaps: Any, touched: Any, touched_flag: Any, busy: Any,
             cnt: Any) -> bool:
    pending = deps[0]
    pending[j] -= 1
    if pending[j]:
        return True
    times[3][j] = cause
    nb = not_before[j]
    if nb > now:  # NaN (none) is never greater
        _q_push(queue, cnt, nb, _TIMER, j, -1)
        return True
    return _begin(j, now, tr, data, times, queue, net, grp, heaps, touched, touched_flag, busy, cnt)


@njit(cache=True, inline="always")
def _decref(mid: int, refc: Any, free: Any, cnt: Any, n_ranks: int) -> None:
    if mid > n_ranks:
        refc[mid] -= 1
        if refc[mid] == 0:
            free[cnt[_NFREE]] = mid
            cnt[_NFREE] += 1


@njit(cache=True, inline="always")
def _deliver(i: int, now: float, deps: Any, not_before: Any, tr: Any, data: Any, pool: Any, times: Any,
             queue: Any, net: Any, grp: Any, heaps: Any, touched: Any, touched_flag: Any, busy: Any,
             cnt: Any, commits: Any) -> bool:
    """``_Run.delivered`` then ``settle``; False on a fault."""
    start_pending, commit_pending, soc_ptr, soc, coc_ptr, coc, coa_ptr, coa, conn_next = deps
    dst, chunk_ptr, chunks, is_reduce = tr[6], tr[1], tr[2], tr[7]
    state, snap, refc, num_chunks, n_ranks = data
    c_item, c_cause = commits
    times[1][i] = now
    j = conn_next[i]
    if j >= 0:
        if not _release(j, now, i, deps, not_before, tr, data, times, queue, net, grp, heaps, touched, touched_flag,
                        busy, cnt):
            return False
    for q in range(coa_ptr[i], coa_ptr[i + 1]):
        j = coa[q]
        commit_pending[j] -= 1
        if not commit_pending[j]:
            c_item[cnt[_CN]] = j
            c_cause[cnt[_CN]] = i
            cnt[_CN] += 1
    commit_pending[i] -= 1
    if not commit_pending[i]:
        c_item[cnt[_CN]] = i
        c_cause[cnt[_CN]] = i
        cnt[_CN] += 1
    words, free = pool[0][0], pool[1][0]
    while cnt[_CN]:
        cnt[_CN] -= 1
        k, cause = c_item[cnt[_CN]], c_cause[cnt[_CN]]
        times[4][k] = cause
        base = dst[k] * num_chunks
        if not is_reduce[k]:
            for p in range(chunk_ptr[k], chunk_ptr[k + 1]):
                key = base + chunks[p]
                old = state[key]
                state[key] = snap[p]
                _decref(old, refc, free, cnt, n_ranks)
        else:
            for p in range(chunk_ptr[k], chunk_ptr[k + 1]):
                key = base + chunks[p]
                held = state[key]
                mid = snap[p]
                if held == 0:
                    state[key] = mid
                    continue
                overlap = False
                for w in range(words.shape[1]):
                    if words[held, w] & words[mid, w]:
                        overlap = True
                        break
                if overlap:
                    cnt[_FK] = FAULT_DOUBLE
                    cnt[_FI] = k
                    cnt[_FC] = chunks[p]
                    cnt[_FA] = held
                    cnt[_FB] = mid
                    return False
                if cnt[_NFREE]:
                    cnt[_NFREE] -= 1
                    new = free[cnt[_NFREE]]
                else:
                    if cnt[_USED] == words.shape[0]:
                        grown = np.zeros((2 * words.shape[0], words.shape[1]), np.uint64)
                        grown[:words.shape[0]] = words
                        pool[0][0] = grown
                        words = grown
                        refc2 = np.zeros(2 * len(refc), np.int64)
                        refc2[:len(refc)] = refc
                        pool[2][0] = refc2
                        refc = refc2
                        data = (state, snap, refc, num_chunks, n_ranks)
                        free2 = np.zeros(2 * len(free), np.int64)
                        free2[:len(free)] = free
                        pool[1][0] = free2
                        free = free2
                    new = cnt[_USED]
                    cnt[_USED] += 1
                for w in range(words.shape[1]):
                    words[new, w] = words[held, w] | words[mid, w]
                refc[new] = 1
                state[key] = new
                _decref(held, refc, free, cnt, n_ranks)
                _decref(mid, refc, free, cnt, n_ranks)
        times[2][k] = now
        cnt[_DONE] += 1
        for q in range(soc_ptr[k], soc_ptr[k + 1]):
            if not _release(soc[q], now, k, deps, not_before, tr, data, times, queue, net, grp, heaps, touched,
                            touched_flag, busy, cnt):
                return False
        for q in range(coc_ptr[k], coc_ptr[k + 1]):
            j = coc[q]
            commit_pending[j] -= 1
            if not commit_pending[j]:
                c_item[cnt[_CN]] = j
                c_cause[cnt[_CN]] = k
                cnt[_CN] += 1
    return True


@njit(cache=True)
def _reshare(now: float, net: Any, grp: Any, heaps: Any, touched: Any, touched_flag: Any, moved: Any,
             seeds: Any, scratch: Any, cnt: Any) -> None:
    """``FluidNetwork.reshare_groups``: re-solve where sizes changed; ``moved`` gets the groups to re-time."""
    load, level = net[1], net[2]
    on_head, on_tail, on_count, nd_prev, nd_next = net[6], net[9], net[10], net[11], net[7]
    res_ptr, res, g_size, g_solved, g_rate, g_drained, g_upd = grp[0], grp[1], grp[2], grp[3], grp[6], grp[7], \
        grp[8]
    capacity = net[0]
    hlen, g_linked = heaps[4], heaps[6]
    num_seeds = 0
    for t in range(cnt[_TN]):
        g = touched[t]
        if g_size[g]:
            moved[cnt[_MN]] = g
            cnt[_MN] += 1
            if g_size[g] != g_solved[g]:
                shared = False
                for q in range(res_ptr[g], res_ptr[g + 1]):
                    if on_count[res[q]] > 1:
                        shared = True
                        break
                if shared:
                    for q in range(res_ptr[g], res_ptr[g + 1]):
                        seeds[num_seeds] = res[q]
                        num_seeds += 1
                else:  # _solve_alone
                    m = g_size[g]
                    g_solved[g] = m
                    least = np.inf
                    for q in range(res_ptr[g], res_ptr[g + 1]):
                        if capacity[res[q]] < least:
                            least = capacity[res[q]]
                    new = least / m
                    for q in range(res_ptr[g], res_ptr[g + 1]):
                        level[res[q]] = new if capacity[res[q]] == least else np.inf
                    old = g_rate[g]
                    if abs(new - old) > _SAME_RATE * old:
                        g_drained[g] += old * (now - g_upd[g])
                        g_upd[g] = now
                        g_rate[g] = new
        elif g_linked[g]:
            g_linked[g] = False
            for q in range(res_ptr[g], res_ptr[g + 1]):
                r = res[q]
                _unlink_one(q, r, on_head, on_tail, on_count, nd_prev, nd_next)
                if not load[r]:
                    level[r] = np.inf
                elif g_solved[g]:
                    seeds[num_seeds] = r
                    num_seeds += 1
            hlen[g] = 0
            g_solved[g] = 0
            g_rate[g] = 0.0
            g_drained[g] = 0.0
            g_upd[g] = now
    if num_seeds:
        _solve(seeds, num_seeds, now, net, grp, touched_flag, moved, scratch, cnt)
    for t in range(cnt[_TN]):
        touched_flag[touched[t]] = False
    cnt[_TN] = 0


@njit(cache=True, inline="always")
def _requeue(g: int, queue: Any, cnt: Any, g_due: Any, g_event: Any, g_finish: Any, grp: Any, heaps: Any) -> None:
    """Queue group g's one live finish event, for its first member at the current rate (``queue_finish``)."""
    hk, hs, hf, hbase, hlen, active = heaps[0], heaps[1], heaps[2], heaps[3], heaps[4], heaps[5]
    base = _head(g, hk, hs, hf, hbase, hlen, active)
    rate = grp[6][g]
    time = grp[8][g] + (hk[base] - grp[7][g]) / rate if rate > 0 else np.inf
    g_due[g] = time
    g_event[g] = _q_push(queue, cnt, time, _FINISH, hf[base], g)
    g_finish[g] = _QUEUED


@njit(cache=True)
def run(src: Any, dst: Any, chunk_ptr: Any, chunks: Any, is_reduce: Any, route: Any, route_latency: Any,
        nbytes_of: Any, not_before: Any, capacity: Any, res_ptr: Any, res: Any, route_count: Any, deps: Any,
        state: Any, words: Any, num_chunks: int, n_ranks: int) -> Any:
    """Run every transfer; returns (times, busy_us, bytes carried, counters, pool words, batch time reached).

    ``times``: start, arrive, commit (NaN: never), start cause, commit cause (-1: none), fault time.
    ``counters[_FK]`` is a fault code (0: none); ``state`` (mask id per key) is updated in place.
    """
    n = len(src)
    num_res = len(capacity)
    num_groups = len(res_ptr) - 1
    nan = np.nan
    start_at = np.full(n, nan)
    arrive_at = np.full(n, nan)
    commit_at = np.full(n, nan)
    start_cause = np.full(n, -1, np.int64)
    commit_cause = np.full(n, -1, np.int64)
    times = (start_at, arrive_at, commit_at, start_cause, commit_cause, np.zeros(1))
    # network: capacity, load, level, cap, count, reached, on_head, nd_next, nd_group, on_tail, on_count, nd_prev
    nd_group = np.empty(len(res), np.int64)
    for g in range(num_groups):
        for q in range(res_ptr[g], res_ptr[g + 1]):
            nd_group[q] = g
    net = (capacity, np.zeros(num_res, np.int64), np.full(num_res, np.inf), np.zeros(num_res),
           np.zeros(num_res), np.zeros(num_res, np.int64), np.full(num_res, -1, np.int64),
           np.full(len(res), -1, np.int64), nd_group, np.full(num_res, -1, np.int64), np.zeros(num_res, np.int64),
           np.full(len(res), -1, np.int64))
    g_finish = np.zeros(num_groups, np.int8)
    g_event = np.zeros(num_groups, np.int64)
    g_due = np.full(num_groups, np.inf)
    grp = (res_ptr, res, np.zeros(num_groups, np.int64), np.zeros(num_groups, np.int64),
           np.zeros(num_groups, np.int64), np.zeros(num_groups, np.int64), np.zeros(num_groups),
           np.zeros(num_groups), np.zeros(num_groups))
    hbase = np.zeros(num_groups + 1, np.int64)
    for g in range(num_groups):
        hbase[g + 1] = hbase[g] + route_count[g]
    heaps = (np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64), hbase, np.zeros(num_groups, np.int64),
             np.zeros(n, np.bool_), np.zeros(num_groups, np.bool_))
    active = heaps[5]
    busy = (np.zeros(num_res), np.zeros(num_res), np.zeros(num_res))
    busy_since, busy_us = busy[0], busy[1]
    load = net[1]
    cnt = np.zeros(20, np.int64)
    cnt[_SEQ] = 1
    cnt[_USED] = n_ranks + 1
    refc = np.zeros(words.shape[0], np.int64)
    free = np.zeros(words.shape[0], np.int64)
    pool = (List([words]), List([free]), List([refc]))
    snap = np.zeros(len(chunks), np.int64)
    tr = (src, chunk_ptr, chunks, route, route_latency, nbytes_of, dst, is_reduce)
    queue = List([np.empty((1024, 5))])
    touched = np.empty(num_groups, np.int64)
    touched_flag = np.zeros(num_groups, np.bool_)
    moved = np.empty(num_groups, np.int64)
    seeds = np.empty(len(res) + 1, np.int64)
    scratch = (np.empty(num_res, np.int64), np.empty(num_res), np.empty(num_res, np.int64))
    commits = (np.empty(n, np.int64), np.empty(n, np.int64))
    start_pending = deps[0]
    now = 0.0
    ok = True
    data = (state, snap, pool[2][0], num_chunks, n_ranks)
    for i in range(n):  # start: transfers that wait for nothing
        if start_pending[i] == 0:
            nb = not_before[i]
            if nb > 0:
                _q_push(queue, cnt, nb, _TIMER, i, -1)
            elif not _begin(i, 0.0, tr, data, times, queue, net, grp, heaps, touched, touched_flag, busy, cnt):
                ok = False
                break
    while ok:
        if cnt[_TN]:
            _reshare(now, net, grp, heaps, touched, touched_flag, moved, seeds, scratch, cnt)
            for k in range(cnt[_MN]):
                g = moved[k]
                hk, hf = heaps[0], heaps[2]
                base = _head(g, hk, heaps[1], hf, hbase, heaps[4], active)
                rate = grp[6][g]
                time = grp[8][g] + (hk[base] - grp[7][g]) / rate if rate > 0 else np.inf
                if g_finish[g] == _NONE or time < g_due[g]:
                    g_due[g] = time
                    g_event[g] = _q_push(queue, cnt, time, _FINISH, hf[base], g)
                    g_finish[g] = _QUEUED
                elif g_finish[g] == _QUEUED:
                    g_finish[g] = _LATE
            cnt[_MN] = 0
        while cnt[_QN] and int(queue[0][0, 2]) == _FINISH:
            q = queue[0]
            seq, g = int(q[0, 1]), int(q[0, 4])
            if g_event[g] == seq and g_finish[g] == _QUEUED:
                break
            _q_pop(queue, cnt)
            if g_event[g] == seq:  # late: move it to the actual finish
                _requeue(g, queue, cnt, g_due, g_event, g_finish, grp, heaps)
        if not cnt[_QN]:
            break
        now = queue[0][0, 0]
        horizon = now + _HORIZON * max(1.0, abs(now))
        while cnt[_QN] and queue[0][0, 0] <= horizon:
            time, seq, kind, i, g = _q_pop(queue, cnt)
            if kind == _FINISH:
                if g_event[g] != seq:
                    continue
                if g_finish[g] == _LATE:
                    hk, hf = heaps[0], heaps[2]
                    base = _head(g, hk, heaps[1], hf, hbase, heaps[4], active)
                    rate = grp[6][g]
                    time = grp[8][g] + (hk[base] - grp[7][g]) / rate if rate > 0 else np.inf
                    i = hf[base]
                    if time > horizon:
                        g_due[g] = time
                        g_event[g] = _q_push(queue, cnt, time, _FINISH, i, g)
                        g_finish[g] = _QUEUED
                        continue
                active[i] = False  # net.remove(i, now)
                grp[2][g] -= 1
                _touch(g, touched, touched_flag, cnt)
                for q in range(res_ptr[g], res_ptr[g + 1]):
                    r = res[q]
                    load[r] -= 1
                    if not load[r]:
                        busy_us[r] += now - busy_since[r]
                if grp[2][g]:
                    _requeue(g, queue, cnt, g_due, g_event, g_finish, grp, heaps)
                else:
                    g_finish[g] = _NONE
                    g_event[g] = 0
                if not _deliver(i, now, deps, not_before, tr, data, pool, times, queue, net, grp, heaps, touched,
                                touched_flag, busy, cnt, commits):
                    ok = False
                    break
                data = (state, snap, pool[2][0], num_chunks, n_ranks)
            elif kind == _ENTER:
                nb = nbytes_of[i]
                if nb > 0:
                    _net_add(i, route[i], nb, now, net, grp, heaps, touched, touched_flag, busy, cnt)
                else:
                    if not _deliver(i, time, deps, not_before, tr, data, pool, times, queue, net, grp, heaps,
                                    touched, touched_flag, busy, cnt, commits):
                        ok = False
                        break
                    data = (state, snap, pool[2][0], num_chunks, n_ranks)
            elif not _begin(i, time, tr, data, times, queue, net, grp, heaps, touched, touched_flag, busy, cnt):
                ok = False
                break
    for r in range(num_res):  # finish_busy
        if load[r]:
            busy_us[r] += now - busy_since[r]
            busy_since[r] = now
    return times, busy_us, busy[2], cnt, pool[0][0], now
