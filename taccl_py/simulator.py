"""Discrete-event simulator: executes a schedule on a topology, checks it, times it.

The judge of everything the project produces; it imports no solver code. The
start/arrive/commit semantics are those documented in :mod:`taccl_py.schedule`;
links follow the fluid alpha-beta model (latency first, then bytes at the
max-min fair share of every link on the route), which is SimGrid's CM02 model
with equal sharing weights.

Correctness is about data: every (rank, chunk) holds a contribution bitmask. A
transfer reads the sender's mask when it starts (an empty mask means the rank
sends what it does not hold), a copy replaces the receiver's mask, a reduce
combines it (an overlap means a contribution reduced twice), and at the end
every required (rank, chunk) must hold the complete set.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taccl_py.collectives import Collective
from taccl_py.fluid import FluidNetwork, RouteGroup
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.tolerances import same_instant_horizon_us
from taccl_py.topology import Topology
from taccl_py.units import algbw_gbps, gbps_to_bytes_per_us

__all__ = ["SimOptions", "SimResult", "simulate"]

_ACTIVATE, _FLOW_DONE, _START = 0, 1, 2


@dataclass(frozen=True)
class SimOptions:
    """``step_overhead_us``: fixed software latency added to every transfer (NCCL's per-step cost)."""

    step_overhead_us: float = 0.0


@dataclass(frozen=True)
class SimResult:
    """What a simulation found. ``time_us`` is None unless the schedule is correct."""

    correct: bool
    error: str | None
    time_us: float | None
    size_bytes: float
    collective: Collective
    start_us: np.ndarray
    arrive_us: np.ndarray
    commit_us: np.ndarray
    link_busy_us: tuple[float, ...]
    link_bytes: tuple[float, ...]
    critical_path: tuple[int, ...]
    stuck: tuple[int, ...] = ()
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def algbw_GBps(self) -> float | None:
        if self.time_us is None or self.time_us <= 0:
            return None
        return algbw_gbps(self.size_bytes, self.time_us)

    @property
    def busbw_GBps(self) -> float | None:
        algbw = self.algbw_GBps
        return None if algbw is None else algbw * self.collective.busbw_factor

    def link_utilisation(self, topology: Topology) -> list[float]:
        """Bytes carried over what the link could carry during the makespan."""
        if not self.time_us:
            return [0.0] * len(topology.links)
        return [b / (gbps_to_bytes_per_us(link.bandwidth) * self.time_us) for b, link in zip(self.link_bytes, topology.links,
                                                                               strict=True)]

    def summary(self) -> dict[str, Any]:
        return {"correct": self.correct, "error": self.error, "time_us": self.time_us,
                "algbw_GBps": self.algbw_GBps, "busbw_GBps": self.busbw_GBps}


@dataclass
class _Dependencies:
    """Who waits for whom, derived once from program order (see :mod:`taccl_py.schedule`)."""

    start_pending: list[int]
    commit_pending: list[int]
    start_on_commit: list[list[int] | None]
    """Transfers whose start waits for this one's commit (earlier writers at the source, ``after``)."""
    conn_next: list[int]
    """The next transfer on the same connection (its start waits for this one's arrival), or -1."""
    conn_prev: list[int]
    commit_on_commit: list[list[int] | None]
    """Transfers whose commit waits for this one's commit (later writers of the same chunk there)."""
    commit_on_arrive: list[list[int] | None]
    """Transfers whose commit waits for this one's arrival (later writers of a chunk it read)."""


def _dependencies(transfers: tuple[Transfer, ...], num_chunks: int) -> _Dependencies:
    n = len(transfers)
    start_pending = [0] * n
    commit_pending = [1] * n  # its own arrival
    start_on_commit: list[list[int] | None] = [None] * n
    commit_on_commit: list[list[int] | None] = [None] * n
    commit_on_arrive: list[list[int] | None] = [None] * n
    conn_next = [-1] * n
    conn_prev = [-1] * n
    last_writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    last_on_connection: dict[tuple[int, int, int], int] = {}

    def wait(table: list[list[int] | None], on: int, waiter: int) -> None:
        entry = table[on]
        if entry is None:
            table[on] = [waiter]
        else:
            entry.append(waiter)

    def read(i: int, t: Transfer) -> None:
        """An exchange member's start: the writers before its exchange; it registers as a reader."""
        s_deps: set[int] = set(t.after)
        base = t.src * num_chunks
        for c in t.chunks:
            w = last_writer.get(base + c)
            if w is not None:
                s_deps.add(w)
            readers.setdefault(base + c, []).append(i)
        for w in sorted(s_deps):
            wait(start_on_commit, w, i)
        start_pending[i] = len(s_deps)

    for i, t in enumerate(transfers):
        chunks = t.chunks
        src_base, dst_base = t.src * num_chunks, t.dst * num_chunks
        if t.exchange is not None:
            if i == 0 or transfers[i - 1].exchange != t.exchange:  # the exchange begins: all its reads first
                end = i
                while end < len(transfers) and transfers[end].exchange == t.exchange:
                    read(end, transfers[end])
                    end += 1
            writers: set[int] = set()
            earlier_readers: set[int] = set()
            for c in chunks:
                key = dst_base + c
                w = last_writer.get(key)
                if w is not None:
                    writers.add(w)
                earlier_readers.update(readers.pop(key, ()))
                last_writer[key] = i
            for w in sorted(writers):
                wait(commit_on_commit, w, i)
            for r in sorted(earlier_readers):
                wait(commit_on_arrive, r, i)
            commit_pending[i] += len(writers) + len(earlier_readers)
        elif len(chunks) == 1 and not t.after:
            key = src_base + chunks[0]
            w = last_writer.get(key)
            if w is not None:
                wait(start_on_commit, w, i)
                start_pending[i] = 1
            prior = readers.get(key)
            if prior is None:
                readers[key] = [i]
            else:
                prior.append(i)
            key = dst_base + chunks[0]
            w = last_writer.get(key)
            if w is not None:
                wait(commit_on_commit, w, i)
                commit_pending[i] += 1
            prior = readers.pop(key, None)
            if prior:
                for r in prior:
                    wait(commit_on_arrive, r, i)
                commit_pending[i] += len(prior)
            last_writer[key] = i
        else:
            s_deps: set[int] = set(t.after)
            c_deps: set[int] = set()
            a_deps: set[int] = set()
            for c in chunks:
                key = src_base + c
                w = last_writer.get(key)
                if w is not None:
                    s_deps.add(w)
                prior = readers.get(key)
                if prior is None:
                    readers[key] = [i]
                else:
                    prior.append(i)
            for c in chunks:
                key = dst_base + c
                w = last_writer.get(key)
                if w is not None:
                    c_deps.add(w)
                prior = readers.pop(key, None)
                if prior:
                    a_deps.update(prior)
                last_writer[key] = i
            for w in sorted(s_deps):
                wait(start_on_commit, w, i)
            for w in sorted(c_deps):
                wait(commit_on_commit, w, i)
            for r in sorted(a_deps):
                wait(commit_on_arrive, r, i)
            start_pending[i] = len(s_deps)
            commit_pending[i] += len(c_deps) + len(a_deps)
        conn = (t.src, t.dst, t.channel)
        p = last_on_connection.get(conn)
        if p is not None:
            conn_next[p] = i
            conn_prev[i] = p
            start_pending[i] += 1
        last_on_connection[conn] = i
    return _Dependencies(start_pending, commit_pending, start_on_commit, conn_next, conn_prev, commit_on_commit,
                         commit_on_arrive)


def _describe(t: Transfer, i: int) -> str:
    return f"transfer {i} (rank {t.src} -> rank {t.dst}, chunks {list(t.chunks)})"


def _mask_ranks(mask: int) -> list[int]:
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def simulate(topology: Topology, schedule: Schedule, size_bytes: float,
             options: SimOptions | None = None) -> SimResult:
    """Run ``schedule`` for an nccl-tests ``size_bytes`` on ``topology`` and judge it.

    Python's cyclic garbage collector is paused while it runs: a simulation
    allocates millions of small objects and no cycles, and the collector's
    passes would otherwise dominate large runs.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        return _simulate(topology, schedule, size_bytes, options or SimOptions())
    finally:
        if paused:
            gc.enable()


def _simulate(topology: Topology, schedule: Schedule, size_bytes: float, options: SimOptions) -> SimResult:
    collective = schedule.collective
    transfers = schedule.transfers
    n = len(transfers)
    nan = math.nan
    start_at = [nan] * n
    arrive_at = [nan] * n
    commit_at = [nan] * n

    def result(error: str | None, time_us: float | None, net: FluidNetwork | None, path: tuple[int, ...] = (),
               stuck: tuple[int, ...] = ()) -> SimResult:
        busy = tuple(net.busy_us) if net else (0.0,) * len(topology.links)
        carried = tuple(net.bytes_carried) if net else (0.0,) * len(topology.links)
        return SimResult(correct=error is None, error=error, time_us=time_us if error is None else None,
                         size_bytes=size_bytes, collective=collective, start_us=np.array(start_at),
                         arrive_us=np.array(arrive_at), commit_us=np.array(commit_at), link_busy_us=busy,
                         link_bytes=carried, critical_path=path, stuck=stuck)

    problem = schedule.structural_error(topology)
    if problem:
        return result(problem, None, None)

    num_chunks = collective.num_chunks
    chunk_bytes = collective.chunk_bytes(size_bytes)
    state: dict[int, int] = {}
    for rank, chunk, mask in collective.initial():
        state[rank * num_chunks + chunk] = mask

    deps = _dependencies(transfers, num_chunks)
    start_pending, commit_pending = deps.start_pending, deps.commit_pending
    start_on_commit, commit_on_commit, commit_on_arrive = deps.start_on_commit, deps.commit_on_commit, \
        deps.commit_on_arrive
    conn_next = deps.conn_next

    overhead = options.step_overhead_us
    route_latency: dict[tuple[int, ...], float] = {}
    latency = [0.0] * n
    num_bytes = [0.0] * n
    for i, t in enumerate(transfers):
        lat = route_latency.get(t.route)
        if lat is None:
            lat = route_latency[t.route] = topology.route_latency(t.route)
        latency[i] = lat + overhead
        num_bytes[i] = len(t.chunks) * chunk_bytes
    net = FluidNetwork([gbps_to_bytes_per_us(link.bandwidth) for link in topology.links])
    net_add, net_remove = net.add, net.remove
    start_cause = [-1] * n
    commit_cause = [-1] * n
    snapshot: list[tuple[int, ...] | None] = [None] * n
    heap: list[tuple[float, int, int, int, RouteGroup | None]] = []
    heappush, heappop = heapq.heappush, heapq.heappop
    counter = itertools.count(1)  # event numbers; group tickets use 0 for none

    def queue_finish(g: RouteGroup, time: float, flow: int) -> None:
        """Queue the group's one live finish event: ``flow`` finishing at ``time``."""
        c = next(counter)
        g.due, g.ticket = time, c
        heappush(heap, (time, c, _FLOW_DONE, flow, g))
    copy = Op.COPY
    error: str | None = None
    committed = 0
    commits: list[tuple[int, int]] = []  # (transfer, cause) ready to commit, processed as a stack

    def begin(i: int, now: float) -> bool:
        """Start transfer i: read the sender's data now; False (and ``error``) if it holds none of a chunk."""
        nonlocal error
        t = transfers[i]
        base = t.src * num_chunks
        chunks = t.chunks
        if len(chunks) == 1:
            mask = state.get(base + chunks[0], 0)
            masks: tuple[int, ...] = (mask,)
            missing = mask == 0
        else:
            masks = tuple([state.get(base + c, 0) for c in chunks])
            missing = 0 in masks
        if missing:
            c = chunks[masks.index(0)]
            error = (f"{_describe(t, i)} starts at {now:.6g} us but rank {t.src} does not hold "
                     f"{collective.describe_chunk(c)}")
            return False
        snapshot[i] = masks
        start_at[i] = now
        lat = latency[i]
        if lat > 0:
            heappush(heap, (now + lat, next(counter), _ACTIVATE, i, None))
        else:
            net_add(i, t.route, num_bytes[i], now)
        return True

    def release_start(i: int, now: float, cause: int) -> bool:
        start_pending[i] -= 1
        if start_pending[i]:
            return True
        start_cause[i] = cause
        nb = transfers[i].not_before_us
        if nb is not None and nb > now:
            heappush(heap, (nb, next(counter), _START, i, None))
            return True
        return begin(i, now)

    def settle(now: float) -> bool:
        """Commit every transfer whose conditions now hold (and what that releases)."""
        nonlocal error, committed
        while commits:
            i, cause = commits.pop()
            commit_cause[i] = cause
            t = transfers[i]
            base = t.dst * num_chunks
            masks = snapshot[i]
            assert masks is not None
            snapshot[i] = None
            if t.op is copy:
                for c, mask in zip(t.chunks, masks, strict=True):
                    state[base + c] = mask
            else:
                for c, mask in zip(t.chunks, masks, strict=True):
                    held = state.get(base + c, 0)
                    if held & mask:
                        error = (f"{_describe(t, i)} reduces the contribution of rank(s) "
                                 f"{_mask_ranks(held & mask)} into {collective.describe_chunk(c)} at rank {t.dst} "
                                 f"a second time")
                        return False
                    state[base + c] = held | mask
            commit_at[i] = now
            committed += 1
            waiters = start_on_commit[i]
            if waiters is not None:
                for j in waiters:
                    if not release_start(j, now, i):
                        return False
            waiters = commit_on_commit[i]
            if waiters is not None:
                for j in waiters:
                    commit_pending[j] -= 1
                    if not commit_pending[j]:
                        commits.append((j, i))
        return True

    def arrive(i: int, now: float) -> bool:
        arrive_at[i] = now
        j = conn_next[i]
        if j >= 0 and not release_start(j, now, i):
            return False
        waiters = commit_on_arrive[i]
        if waiters is not None:
            for j in waiters:
                commit_pending[j] -= 1
                if not commit_pending[j]:
                    commits.append((j, i))
        commit_pending[i] -= 1
        if not commit_pending[i]:
            commits.append((i, i))
        return settle(now)

    ok = True
    for i in range(n):
        if start_pending[i] == 0:
            nb = transfers[i].not_before_us
            if nb is not None and nb > 0:
                heappush(heap, (nb, next(counter), _START, i, None))
            elif not begin(i, 0.0):
                ok = False
                break

    now = 0.0
    reshare_groups = net.reshare_groups
    while ok:
        # One finish event per route group, for its member that finishes first; the group's ``ticket`` names the
        # live one (negative: queued no later than the finish, which a rate change has since delayed; the event
        # moves to the actual finish when it comes up), other events of the group are void.
        for moved in reshare_groups(now):
            time, f = moved.next_finish()
            if not moved.ticket or time < moved.due:
                queue_finish(moved, time, f)
            elif moved.ticket > 0:
                moved.ticket = -moved.ticket
        while heap and heap[0][2] == _FLOW_DONE:
            time, c, _, _, g = heap[0]
            assert g is not None
            if g.ticket == c:
                break
            heappop(heap)
            if g.ticket == -c:  # delayed: move it to the actual finish (otherwise void)
                queue_finish(g, *g.next_finish())
        if not heap:
            break
        now = heap[0][0]
        horizon = same_instant_horizon_us(now)
        while heap and heap[0][0] <= horizon:
            time, c, kind, i, g = heappop(heap)
            if kind == _ACTIVATE:
                if num_bytes[i] > 0:
                    net_add(i, transfers[i].route, num_bytes[i], now)
                elif not arrive(i, time):
                    ok = False
                    break
            elif kind == _FLOW_DONE:
                assert g is not None
                if g.ticket != c:
                    if g.ticket != -c:
                        continue  # void
                    time, i = g.next_finish()
                    if time > horizon:  # delayed: re-queue at the actual finish
                        queue_finish(g, time, i)
                        continue
                net_remove(i, now)
                if g.size:  # queue the group's next member (it may finish in this same batch)
                    queue_finish(g, *g.next_finish())
                else:
                    g.ticket = 0
                if not arrive(i, now):
                    ok = False
                    break
            elif not begin(i, time):  # _START after not_before_us
                ok = False
                break

    net.finish_busy(now)
    if error:
        return result(error, None, net)
    if committed < n:
        return result(_deadlock_message(schedule, start_at, commit_at, deps.conn_prev), None, net,
                      stuck=tuple(i for i in range(n) if math.isnan(commit_at[i])))
    for rank, chunk in collective.required():
        have = state.get(rank * num_chunks + chunk, 0)
        want = collective.complete_mask(chunk)
        if have != want:
            if have == 0:
                why = f"rank {rank} never receives {collective.describe_chunk(chunk)}"
            elif collective.is_reduction:
                missing = _mask_ranks(want & ~have)
                why = (f"rank {rank} ends with {collective.describe_chunk(chunk)} missing the contribution of "
                       f"rank(s) {missing[:8]}{'...' if len(missing) > 8 else ''}")
            else:
                why = f"rank {rank} ends with the wrong data for {collective.describe_chunk(chunk)}"
            return result(f"post-condition violated: {why}", None, net)
    makespan = max(commit_at, default=0.0)
    return result(None, makespan, net, path=_critical_path(commit_at, start_cause, commit_cause))


def _critical_path(commit_at: list[float], start_cause: list[int], commit_cause: list[int]) -> tuple[int, ...]:
    if not commit_at:
        return ()
    current = max(range(len(commit_at)), key=lambda i: (commit_at[i], -i))
    path: list[int] = []
    seen: set[int] = set()
    while current >= 0 and current not in seen:
        seen.add(current)
        path.append(current)
        cause = commit_cause[current]
        current = cause if cause >= 0 and cause != current else start_cause[current]
    return tuple(reversed(path))


def _deadlock_message(schedule: Schedule, start_at: list[float], commit_at: list[float],
                      connection_prev: list[int]) -> str:
    transfers = schedule.transfers
    never_started = [i for i in range(len(transfers)) if math.isnan(start_at[i])]
    stuck = never_started or [i for i in range(len(transfers)) if math.isnan(commit_at[i])]
    first = stuck[0]
    t = transfers[first]
    waits = [a for a in t.after if math.isnan(commit_at[a])]
    prev = connection_prev[first]
    if prev >= 0 and math.isnan(commit_at[prev]):
        waits.append(prev)
    detail = f"; it waits for transfer(s) {sorted(set(waits))[:5]}" if waits else ""
    return (f"deadlock: {len(stuck)} transfer(s) can never {'start' if never_started else 'commit'}, "
            f"e.g. {_describe(t, first)}{detail}")
