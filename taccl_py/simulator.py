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

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taccl_py.collectives import Collective
from taccl_py.fluid import FluidNetwork
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.topology import Topology

__all__ = ["SimOptions", "SimResult", "simulate"]

_START, _ACTIVATE, _FLOW_DONE = 0, 1, 2


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
        return self.size_bytes / self.time_us / 1e3

    @property
    def busbw_GBps(self) -> float | None:
        algbw = self.algbw_GBps
        return None if algbw is None else algbw * self.collective.busbw_factor

    def link_utilisation(self, topology: Topology) -> list[float]:
        """Bytes carried over what the link could carry during the makespan."""
        if not self.time_us:
            return [0.0] * len(topology.links)
        return [b / (link.bandwidth * 1e3 * self.time_us) for b, link in zip(self.link_bytes, topology.links,
                                                                               strict=True)]

    def summary(self) -> dict[str, Any]:
        return {"correct": self.correct, "error": self.error, "time_us": self.time_us,
                "algbw_GBps": self.algbw_GBps, "busbw_GBps": self.busbw_GBps}


def _dependencies(schedule: Schedule, num_chunks: int) -> tuple[list[set[int]], list[int], list[set[int]],
                                                                  list[set[int]]]:
    """Per transfer: start-after-commit deps, connection predecessor, commit-after-commit deps,
    commit-after-arrival deps (all on earlier transfers, except explicit ``after``)."""
    last_writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    last_on_connection: dict[tuple[int, int, int], int] = {}
    start_commit: list[set[int]] = []
    connection_prev: list[int] = []
    commit_commit: list[set[int]] = []
    commit_arrive: list[set[int]] = []
    for i, t in enumerate(schedule.transfers):
        s_deps: set[int] = set(t.after)
        c_deps: set[int] = set()
        a_deps: set[int] = set()
        src_base, dst_base = t.src * num_chunks, t.dst * num_chunks
        for c in t.chunks:
            key = src_base + c
            w = last_writer.get(key)
            if w is not None:
                s_deps.add(w)
            readers.setdefault(key, []).append(i)
        for c in t.chunks:
            key = dst_base + c
            w = last_writer.get(key)
            if w is not None:
                c_deps.add(w)
            prior = readers.pop(key, None)
            if prior:
                a_deps.update(prior)
            last_writer[key] = i
        conn = (t.src, t.dst, t.channel)
        connection_prev.append(last_on_connection.get(conn, -1))
        last_on_connection[conn] = i
        start_commit.append(s_deps)
        commit_commit.append(c_deps)
        commit_arrive.append(a_deps)
    return start_commit, connection_prev, commit_commit, commit_arrive


def _describe(t: Transfer, i: int) -> str:
    return f"transfer {i} (rank {t.src} -> rank {t.dst}, chunks {list(t.chunks)})"


def _mask_ranks(mask: int) -> list[int]:
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def simulate(topology: Topology, schedule: Schedule, size_bytes: float,
             options: SimOptions | None = None) -> SimResult:
    """Run ``schedule`` for an nccl-tests ``size_bytes`` on ``topology`` and judge it."""
    options = options or SimOptions()
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
    links = topology.links
    state: dict[int, int] = {}
    for rank, chunk, mask in collective.initial():
        state[rank * num_chunks + chunk] = mask

    start_commit, connection_prev, commit_commit, commit_arrive = _dependencies(schedule, num_chunks)
    start_pending = [0] * n
    commit_pending = [1] * n  # its own arrival
    on_commit_start: dict[int, list[int]] = defaultdict(list)
    on_arrive_start: dict[int, list[int]] = defaultdict(list)
    on_commit_commit: dict[int, list[int]] = defaultdict(list)
    on_arrive_commit: dict[int, list[int]] = defaultdict(list)
    for i in range(n):
        for w in start_commit[i]:
            on_commit_start[w].append(i)
        p = connection_prev[i]
        if p >= 0:
            on_arrive_start[p].append(i)
        start_pending[i] = len(start_commit[i]) + (p >= 0)
        for w in commit_commit[i]:
            on_commit_commit[w].append(i)
        for r in commit_arrive[i]:
            on_arrive_commit[r].append(i)
        commit_pending[i] += len(commit_commit[i]) + len(commit_arrive[i])
    del start_commit, commit_commit, commit_arrive

    latency = [topology.route_latency(t.route) + options.step_overhead_us for t in transfers]
    num_bytes = [len(t.chunks) * chunk_bytes for t in transfers]
    net = FluidNetwork([link.bandwidth * 1e3 for link in links])
    start_cause = [-1] * n
    commit_cause = [-1] * n
    snapshot: dict[int, tuple[int, ...]] = {}
    version = [0] * n
    heap: list[tuple[float, int, int, int, int]] = []
    seq = 0

    def push(time: float, kind: int, tid: int, ver: int = 0) -> None:
        nonlocal seq
        heapq.heappush(heap, (time, seq, kind, tid, ver))
        seq += 1

    def release_start(i: int, now: float, cause: int) -> None:
        start_pending[i] -= 1
        if start_pending[i] == 0:
            start_cause[i] = cause
            nb = transfers[i].not_before_us
            push(now if nb is None or nb <= now else nb, _START, i)

    for i in range(n):
        if start_pending[i] == 0:
            nb = transfers[i].not_before_us
            push(0.0 if nb is None else max(0.0, nb), _START, i)

    error: str | None = None
    committed = 0

    def commit(i: int, now: float) -> None:
        nonlocal error, committed
        t = transfers[i]
        base = t.dst * num_chunks
        masks = snapshot.pop(i)
        if t.op is Op.COPY:
            for c, mask in zip(t.chunks, masks, strict=True):
                state[base + c] = mask
        else:
            for c, mask in zip(t.chunks, masks, strict=True):
                held = state.get(base + c, 0)
                if held & mask:
                    if error is None:
                        error = (f"{_describe(t, i)} reduces the contribution of rank(s) {_mask_ranks(held & mask)} "
                                 f"into {collective.describe_chunk(c)} at rank {t.dst} a second time")
                    return
                state[base + c] = held | mask
        commit_at[i] = now
        committed += 1
        for j in on_commit_start.get(i, ()):
            release_start(j, now, i)
        for j in on_commit_commit.get(i, ()):
            release_commit(j, now, i)

    def release_commit(i: int, now: float, cause: int) -> None:
        commit_pending[i] -= 1
        if commit_pending[i] == 0:
            commit_cause[i] = cause
            commit(i, now)

    def arrive(i: int, now: float) -> None:
        arrive_at[i] = now
        for j in on_arrive_start.get(i, ()):
            release_start(j, now, i)
        for j in on_arrive_commit.get(i, ()):
            release_commit(j, now, i)
        release_commit(i, now, i)

    now = 0.0
    while heap and error is None:
        now = heap[0][0]
        horizon = now + 1e-9 * max(1.0, abs(now))
        while heap and heap[0][0] <= horizon and error is None:
            time, _, kind, i, ver = heapq.heappop(heap)
            if kind == _START:
                t = transfers[i]
                base = t.src * num_chunks
                masks = tuple(state.get(base + c, 0) for c in t.chunks)
                for c, mask in zip(t.chunks, masks, strict=True):
                    if mask == 0:
                        error = (f"{_describe(t, i)} starts at {time:.6g} us but rank {t.src} does not hold "
                                 f"{collective.describe_chunk(c)}")
                        break
                if error:
                    break
                snapshot[i] = masks
                start_at[i] = time
                if latency[i] > 0:
                    push(time + latency[i], _ACTIVATE, i)
                elif num_bytes[i] > 0:
                    net.add(i, t.route, num_bytes[i], now)
                else:
                    arrive(i, time)
            elif kind == _ACTIVATE:
                if num_bytes[i] > 0:
                    net.add(i, transfers[i].route, num_bytes[i], now)
                else:
                    arrive(i, time)
            elif ver == version[i]:  # _FLOW_DONE, not superseded by a later rate change
                net.remove(i, now)
                arrive(i, now)
        if error:
            break
        for f in net.reshare(now):
            version[f] += 1
            rate = net.rate[f]
            push(now + net.remaining[f] / rate if rate > 0 else math.inf, _FLOW_DONE, f, version[f])

    net.finish_busy(now)
    if error:
        return result(error, None, net)
    if committed < n:
        return result(_deadlock_message(schedule, start_at, commit_at, connection_prev), None, net,
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
