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

from taccl_py import fast_kernel
from taccl_py.errors import TopologyError
from taccl_py.fast_kernel import (
    _FINISH,
    _HORIZON,
    _QN,
    GF_LATENCY,
    RF_BUSY,
    RF_CARRIED,
    close_busy,
    event_pop,
    event_push,
    flow_leaves,
    net_add,
    new_network,
    proxy_posts,
    settle,
)
from taccl_py.fluid import binding_resources
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
        latency: Any, res_ptr: Any, res: Any, route_count: Any, post_rank: Any, post_peer: Any, post_us: float,
        posted: Any, binding: Any, prune_from: int) -> Any:
    """Time every transmission; (start, done, cause, busy_us, bytes carried, counters).

    Per transmission: ``group`` its route's group (-1: it does not send), ``nbytes`` what a send
    moves, ``succs[succ_ptr[n]:succ_ptr[n + 1]]`` what waits for it (in node order), ``pending``
    how many transmissions it waits for (updated), ``blocked`` a wait nothing satisfies, and for a
    send the proxies post (-1: none) ``post_rank`` / ``post_peer``. Per group: ``latency`` (with the
    step overhead) and its resources ``res[res_ptr[g]:res_ptr[g + 1]]``. ``posted``: per rank, when
    its proxy has posted what it was asked (updated; each post costs ``post_us``, as
    :func:`taccl_py.runtime.proxy_posts`). ``prune_from``: :func:`taccl_py.fast_kernel.new_network`.
    """
    n = len(group)
    net = new_network(capacity, latency, res_ptr, res, route_count, int(route_count.sum()), binding, prune_from)
    rf, gf, cnt, queue = net[0], net[3], net[12], net[13]
    start_at = np.full(n, np.nan)
    done_at = np.full(n, np.nan)
    cause = np.full(n, -1, np.int64)
    active = np.zeros(n, np.bool_)
    work = np.empty(max(n, 1), np.int64)
    to_post = np.empty(max(n, 1), np.int64)  # sends ready in this instant that wait for the proxies' posts
    counts = np.zeros(1, np.int64)

    # ------------------------------------------------------------------ the client (_Timing)
    def send(i: int, now: float) -> None:
        g = group[i]
        lat = gf[GF_LATENCY, g]
        if post_rank[i] >= 0:  # its proxies post it at the end of the instant (flush)
            to_post[counts[0]] = i
            counts[0] += 1
        elif lat > 0 or not nbytes[i] > 0:
            event_push(queue, cnt, now + lat, _ENTER, i, -1)
        else:
            net_add(net, active, res_ptr, i, g, nbytes[i], now)

    def flush(now: float) -> None:
        """``_Timing.end_batch``: the proxies post the sends ready in this instant, in node order."""
        k = counts[0]
        if k:
            counts[0] = 0
            order = np.sort(to_post[:k])
            starts = proxy_posts(posted, post_rank[order], post_peer[order], now, post_us)
            for j in range(k):
                i = order[j]
                event_push(queue, cnt, starts[j] + gf[GF_LATENCY, group[i]], _ENTER, i, -1)

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
    flush(now)
    while True:
        settle(net, active, res_ptr, now)
        if not cnt[_QN]:
            break
        q = queue[0]
        now = q[0, 0]
        horizon = now + _HORIZON * max(1.0, abs(now))
        while cnt[_QN] and q[0, 0] <= horizon:
            time, seq, kind, i, g = event_pop(queue, cnt)
            if kind == _FINISH:
                i = flow_leaves(net, active, res_ptr, g, seq, i, now, horizon)
                if i >= 0:
                    complete(i, now)
            elif kind == _ENTER:
                if nbytes[i] > 0:
                    net_add(net, active, res_ptr, i, group[i], nbytes[i], now)
                else:
                    complete(i, time)
            q = queue[0]
        flush(now)
    close_busy(net, now)
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
    posts = np.zeros(len(distinct), np.bool_)
    for g in np.argsort(first, kind="stable").tolist():  # in node order: the first send without a route fails
        rank, peer = divmod(int(distinct[g]), header.ngpus)
        route = topology.gpu_route(rank, peer)
        if not route:  # the verifier rejects a send to itself, so no route means none through switches
            raise TopologyError(f"ranks {rank} and {peer} communicate but topology {topology.name!r} has "
                                "no route between them through switches only", where="topology")
        routes[g] = route
        posts[g] = costs is not None and costs.posts(topology, route)
        hop = topology.route_latency(route) if costs is None else costs.route_latency_us(topology, route)
        latency[g] = hop + options.step_overhead_us
    group = np.full(count, -1, np.int64)
    group[send_nodes] = group_of
    post_rank = np.full(count, -1, np.int64)
    post_peer = np.full(count, -1, np.int64)
    posting = send_nodes[posts[group_of]]
    post_rank[posting] = nodes[N_RANK][posting]
    post_peer[posting] = peers[posting]
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
                                                     capacity, latency, res_ptr, res, route_count, post_rank,
                                                     post_peer, 0.0 if costs is None else costs.post_us,
                                                     np.zeros(topology.num_gpus),
                                                     np.array(binding_resources(capacity.tolist(), routes), np.bool_),
                                                     fast_kernel.QUEUE_PRUNE_FROM)
    tb_ids = arrays.tbs[T_ID]

    def describe(node: int) -> str:
        return (f"rank {int(nodes[N_RANK, node])} tb {int(tb_ids[nodes[N_TB, node]])} step "
                f"{int(nodes[N_FIRST, node])} ({STEP_TYPES[nodes[N_TYPE, node]].value})")

    timed = TimedRun(start_at, done_at, cause, tuple(busy.tolist()), tuple(carried.tolist()), send_nodes,
                     machine.match_recv[send_nodes], describe)
    return timed_result(header, topology, size_bytes, options, collective, report, timed)
