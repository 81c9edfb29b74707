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

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from taccl_py.collectives import Collective
from taccl_py.endpoint import EndpointMode, endpoint_flows, endpoint_layout, endpoint_sides
from taccl_py.errors import InputError
from taccl_py.event_kernel import EventKernel, Fault
from taccl_py.gc_pause import paused_gc
from taccl_py.runtime import TransferCosts, post_instant
from taccl_py.schedule import Op, Schedule, Transfer, network_groups, read_tag
from taccl_py.store_forward import LegPlan
from taccl_py.topology import Topology
from taccl_py.units import algbw_gbps, gbps_to_bytes_per_us

__all__ = ["ChunkSpace", "SimOptions", "SimResult", "simulate"]


class ChunkSpace(Protocol):
    """What the run needs to know about chunks: a :class:`Collective`, or several side by side
    (:mod:`taccl_py.concurrent`)."""

    @property
    def num_chunks(self) -> int: ...

    def initial(self) -> Iterator[tuple[int, int, int]]: ...

    def describe_chunk(self, chunk: int) -> str: ...

@dataclass(frozen=True)
class SimOptions:
    """``step_overhead_us``: fixed software latency added to every transfer (NCCL's per-step cost).

    ``endpoint``: who drives the collective at the GPUs (:mod:`taccl_py.endpoint`); it
    matters only on a topology whose GPUs declare memory or channel limits.
    """

    step_overhead_us: float = 0.0
    endpoint: EndpointMode = EndpointMode.GPU
    costs: TransferCosts | None = None
    """A runtime's protocol costs (:mod:`taccl_py.runtime`): per-step latency instead of the route latency,
    a weight on every link, a launch overhead added to the time. None: the raw-link model."""


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
    memory_busy_us: tuple[float, ...] = ()
    """Per GPU, the time its memory served at least one transfer (empty unless the topology declares memory)."""
    memory_bytes: tuple[float, ...] = ()
    """Per GPU, the memory bytes the transfers read and wrote there (empty unless the topology declares memory)."""

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
        if t.exchange is not None or t.group is not None:
            tag = read_tag(t)
            if i == 0 or read_tag(transfers[i - 1]) != tag:  # the exchange (or group) begins: all its reads first
                end = i
                while end < len(transfers) and read_tag(transfers[end]) == tag:
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
        elif len(chunks) == 1 and not t.after:  # the common case, with wait() written out (it is the hot path)
            key = src_base + chunks[0]
            w = last_writer.get(key)
            if w is not None:
                entry = start_on_commit[w]
                if entry is None:
                    start_on_commit[w] = [i]
                else:
                    entry.append(i)
                start_pending[i] = 1
            prior = readers.get(key)
            if prior is None:
                readers[key] = [i]
            else:
                prior.append(i)
            key = dst_base + chunks[0]
            w = last_writer.get(key)
            if w is not None:
                entry = commit_on_commit[w]
                if entry is None:
                    commit_on_commit[w] = [i]
                else:
                    entry.append(i)
                commit_pending[i] += 1
            prior = readers.pop(key, None)
            if prior:
                for r in prior:
                    entry = commit_on_arrive[r]
                    if entry is None:
                        commit_on_arrive[r] = [i]
                    else:
                        entry.append(i)
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
    with paused_gc():
        return _simulate(topology, schedule, size_bytes, options or SimOptions())


def _simulate(topology: Topology, schedule: Schedule, size_bytes: float, options: SimOptions) -> SimResult:
    problem = schedule.structural_error(topology)
    if problem:
        nan = np.full(len(schedule.transfers), math.nan)
        empty = (0.0,) * len(topology.links)
        return SimResult(correct=False, error=problem, time_us=None, size_bytes=size_bytes,
                         collective=schedule.collective, start_us=nan, arrive_us=nan.copy(), commit_us=nan.copy(),
                         link_busy_us=empty, link_bytes=empty, critical_path=())
    run = _Run(topology, schedule, size_bytes, options)
    try:
        run.run()
    except Fault as fault:
        return run.result(str(fault))
    return run.verdict()


class _Run(EventKernel):
    """One simulation of a schedule: the kernel's transfers plus the start and commit rules and the data.

    The steps, each a method: :meth:`begin` (a transfer starts: it reads the
    sender's data and is sent), :meth:`release` (one of a transfer's start
    conditions is met), :meth:`arrive` (its bytes are at the receiver) and
    :meth:`settle` (commit every transfer whose conditions now hold). A wrong
    schedule raises :class:`Fault` from the step that finds it.
    """

    __slots__ = (
        "arrive_at",
        "collective",
        "commit_at",
        "commit_cause",
        "commit_on_arrive",
        "commit_on_commit",
        "commit_pending",
        "commits",
        "committed",
        "conn_next",
        "conn_prev",
        "extra_latency",
        "group_leader",
        "group_members",
        "group_waiting",
        "hop_by_hop",
        "launch_us",
        "memory",
        "num_chunks",
        "post_us",
        "posted",
        "posting",
        "schedule",
        "size_bytes",
        "snapshot",
        "space",
        "start_at",
        "start_cause",
        "start_on_commit",
        "start_pending",
        "state",
        "to_post",
        "topology",
        "transfers",
    )

    def __init__(self, topology: Topology, schedule: Schedule, size_bytes: float, options: SimOptions, *,
                 space: ChunkSpace | None = None, transfer_bytes: Sequence[float] | None = None) -> None:
        """``space`` and ``transfer_bytes`` (bytes per transfer) replace the schedule's collective and sizes when
        several collectives run as one program (:mod:`taccl_py.concurrent`)."""
        self.topology = topology
        self.schedule = schedule
        self.size_bytes = size_bytes
        collective = self.collective = schedule.collective
        space = self.space = space or collective
        transfers = self.transfers = schedule.transfers
        n = len(transfers)
        num_chunks = self.num_chunks = space.num_chunks
        self.state: dict[int, int] = {rank * num_chunks + chunk: mask for rank, chunk, mask in space.initial()}
        """(rank * num_chunks + chunk) -> the contributions that rank holds for that chunk (a bitmask)."""
        deps = _dependencies(transfers, num_chunks)
        self.start_pending, self.commit_pending = deps.start_pending, deps.commit_pending
        self.start_on_commit, self.commit_on_commit = deps.start_on_commit, deps.commit_on_commit
        self.commit_on_arrive, self.conn_next, self.conn_prev = deps.commit_on_arrive, deps.conn_next, deps.conn_prev
        chunk_bytes = collective.chunk_bytes(size_bytes)
        overhead = options.step_overhead_us
        route_latency: dict[tuple[int, ...], float] = {}
        latency = [0.0] * n
        num_bytes = [0.0] * n
        costs = options.costs
        for i, t in enumerate(transfers):
            lat = route_latency.get(t.route)
            if lat is None:
                lat = route_latency[t.route] = topology.route_latency(t.route) if costs is None else \
                    costs.route_latency_us(topology, t.route)
            latency[i] = lat + overhead
            num_bytes[i] = len(t.chunks) * chunk_bytes if transfer_bytes is None else transfer_bytes[i]
        # a runtime's protocol reaches a share of each link's rate (taccl_py.runtime): its capacity scaled
        capacities = [gbps_to_bytes_per_us(link.bandwidth) for link in topology.links] if costs is None else \
            costs.link_capacity_us(topology)
        self.memory: tuple[int, ...] = ()
        weights: list[tuple[float, ...] | None] | None = None
        layout = None
        if topology.has_endpoint_limits:  # memory and channels join the links as resources
            if costs is not None:
                raise InputError("a runtime model (protocol costs) and GPU memory / channel limits are not "
                                 "simulated together; use --ideal or drop the endpoint limits", where="topology")
            layout = endpoint_layout(topology, len(capacities))
            self.memory = layout.memory
            capacities = [*capacities, *layout.capacities]
        self.group_leader: list[int] | None = None
        """Per transfer, the first member of its network group (-1 outside one); None without groups."""
        self.group_members: dict[int, range] = {}
        self.group_waiting: dict[int, int] = {}
        """Per group leader, how many members have not yet met their start conditions."""
        self.extra_latency: list[float] = []
        """Per group member, how long after the group's bytes are through its receiver gets them (cut-through)."""
        groups = network_groups(transfers)
        if groups:
            leader = self.group_leader = [-1] * n
            for first, end in groups:
                members = range(first, end)
                self.group_members[first] = members
                self.group_waiting[first] = len(members)
                for j in members:
                    leader[j] = first
        self.hop_by_hop = topology.store_and_forward
        """Store-and-forward switches: transfers (and groups) cross their routes leg by leg (:mod:`taccl_py.store_forward`)."""
        if self.hop_by_hop:
            if costs is not None:
                raise InputError("a runtime model (protocol costs) and store-and-forward switches are not simulated "
                                 "together; use --ideal or cut-through switches", where="topology")
            sides = endpoint_sides(schedule, options.endpoint, layout) if layout is not None else None
            plan = LegPlan(n, [link.latency for link in topology.links])
            for i, t in enumerate(transfers):
                if self.group_leader is None or self.group_leader[i] < 0:
                    plan.relay(i, t.route, overhead, num_bytes[i], *(sides[i] if sides is not None else ((), ())))
            for first, end in groups:
                plan.relay_group(first, [transfers[j].route for j in range(first, end)], overhead, num_bytes[first],
                                 None if sides is None else sides[first:end])
            super().__init__(capacities, plan.resources, plan.latency_us, plan.num_bytes, plan.weights,
                             plan.relays())
        else:
            if layout is not None:
                resources, weights = endpoint_flows(topology, schedule, options.endpoint, layout)
            else:
                resources = [t.route for t in transfers]
            if groups:
                extra = self.extra_latency = [0.0] * n
            for first, end in groups:
                members = range(first, end)
                # the group is one flow over the union of its members' resources; a resource several members
                # share (a link, the sender's memory) carries the bytes once, at the largest weight asked of it
                used: dict[int, float] = {}
                to_receiver: dict[int, float] = {}
                for j in members:
                    mine = weights[j] if weights is not None else None
                    for k, r in enumerate(resources[j]):
                        used[r] = max(used.get(r, 0.0), mine[k] if mine is not None else 1.0)
                    d = transfers[j].dst
                    to_receiver[d] = max(to_receiver.get(d, 0.0), latency[j])
                flow_latency = min(latency[j] for j in members)
                for j in members:
                    extra[j] = to_receiver[transfers[j].dst] - flow_latency
                resources[first] = tuple(used)
                if weights is not None:
                    weights[first] = None if all(w == 1.0 for w in used.values()) else tuple(used.values())
                latency[first] = flow_latency
            super().__init__(capacities, resources, latency, num_bytes, weights)
        self.launch_us = 0.0 if costs is None else costs.launch_us
        """Added once to the collective's time (the runtime's launch overhead)."""
        self.post_us = 0.0 if costs is None else costs.post_us
        self.posting: list[bool] = [False] * n
        """Per transfer: it crosses the network under a runtime model whose proxies post (not a multicast group's)."""
        self.posted = [0.0] * topology.num_gpus
        """Per rank: when its proxy has posted everything asked of it so far (runtime.proxy_posts)."""
        self.to_post: list[int] = []
        """Transfers ready in this instant that wait for the proxies' posts (:meth:`end_batch`)."""
        if costs is not None and self.post_us > 0:
            in_group = self.group_leader
            for i, t in enumerate(transfers):
                self.posting[i] = (in_group is None or in_group[i] < 0) and costs.posts(topology, t.route)
        nan = math.nan
        self.start_at = [nan] * n
        self.arrive_at = [nan] * n
        self.commit_at = [nan] * n
        self.start_cause = [-1] * n
        self.commit_cause = [-1] * n
        self.snapshot: list[tuple[int, ...] | None] = [None] * n
        """What a started transfer read at its sender (one mask per chunk), until it commits."""
        self.committed = 0
        self.commits: list[tuple[int, int]] = []
        """(transfer, cause) ready to commit, handled as a stack by :meth:`settle`."""

    # ------------------------------------------------------------------ the steps
    def start(self) -> None:
        """Transfers that wait for nothing start at time 0 (or when their ``not_before_us`` comes)."""
        for i, pending in enumerate(self.start_pending):
            if pending == 0:
                not_before = self.transfers[i].not_before_us
                if not_before is not None and not_before > 0:
                    self.wake_at(not_before, i)
                else:
                    self.begin(i, 0.0)

    def begin(self, i: int, now: float) -> None:
        """Start transfer i: read the sender's data now (a chunk it does not hold is a fault) and send it."""
        t = self.transfers[i]
        state = self.state
        base = t.src * self.num_chunks
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
            raise Fault(f"{_describe(t, i)} starts at {now:.6g} us but rank {t.src} does not hold "
                        f"{self.space.describe_chunk(c)}")
        self.snapshot[i] = masks
        leader = self.group_leader
        if leader is not None and leader[i] >= 0:  # a network group starts when its last member may start
            first = leader[i]
            self.group_waiting[first] -= 1
            if self.group_waiting[first]:
                return
            for j in self.group_members[first]:
                self.start_at[j] = now
            self.send(first, now)
            return
        self.start_at[i] = now
        if self.posting[i]:  # its proxies post it at the end of the instant (taccl_py.runtime.proxy_posts)
            self.to_post.append(i)
            return
        self.send(i, now)

    def end_batch(self, now: float) -> None:
        """The proxies post what became ready in this instant, in program order (taccl_py.runtime.proxy_posts)."""
        if self.to_post:
            transfers = self.transfers
            for i, start in post_instant(self.to_post, lambda i: (transfers[i].src, transfers[i].dst), self.posted,
                                         now, self.post_us):
                self.send_at(i, start)

    def wake(self, item: int, time: float) -> None:
        """Transfer ``item``'s ``not_before_us`` has come (every other start condition held already).

        A negative ``item`` is ``~j``: group member j's receiver gets the group's bytes now.
        """
        if item < 0:
            self.delivered(~item, time)
        else:
            self.begin(item, time)

    def release(self, i: int, now: float, cause: int) -> None:
        """One of transfer i's start conditions is met (by ``cause``); start it when it was the last."""
        pending = self.start_pending
        pending[i] -= 1
        if pending[i]:
            return
        self.start_cause[i] = cause
        not_before = self.transfers[i].not_before_us
        if not_before is not None and not_before > now:
            self.wake_at(not_before, i)
        else:
            self.begin(i, now)

    def arrive(self, i: int, now: float) -> None:
        """Transfer i's bytes are through the network (a group's: each member's receiver its extra latency later).

        With store-and-forward switches every group member arrives on its own (its route's last leg).
        """
        leader = self.group_leader
        if leader is not None and leader[i] >= 0 and not self.hop_by_hop:
            extra = self.extra_latency
            for j in self.group_members[i]:
                if extra[j] > 0:
                    self.wake_at(now + extra[j], ~j)
                else:
                    self.delivered(j, now)
            return
        self.delivered(i, now)

    def delivered(self, i: int, now: float) -> None:
        """Transfer i's bytes are at the receiver: its connection's next transfer may start, commits may follow."""
        self.arrive_at[i] = now
        j = self.conn_next[i]
        if j >= 0:
            self.release(j, now, i)
        commit_pending, commits = self.commit_pending, self.commits
        waiters = self.commit_on_arrive[i]
        if waiters is not None:
            for j in waiters:
                commit_pending[j] -= 1
                if not commit_pending[j]:
                    commits.append((j, i))
        commit_pending[i] -= 1
        if not commit_pending[i]:
            commits.append((i, i))
        self.settle(now)

    def settle(self, now: float) -> None:
        """Commit every transfer whose conditions now hold, and what that releases (a double reduction is a fault)."""
        commits = self.commits
        if not commits:
            return
        transfers, state, snapshot = self.transfers, self.state, self.snapshot
        commit_at, commit_cause, num_chunks = self.commit_at, self.commit_cause, self.num_chunks
        start_on_commit, commit_on_commit, commit_pending = self.start_on_commit, self.commit_on_commit, \
            self.commit_pending
        release = self.release
        copy = Op.COPY
        committed = self.committed
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
                        raise Fault(f"{_describe(t, i)} reduces the contribution of rank(s) "
                                    f"{_mask_ranks(held & mask)} into {self.space.describe_chunk(c)} at rank "
                                    f"{t.dst} a second time")
                    state[base + c] = held | mask
            commit_at[i] = now
            committed += 1
            waiters = start_on_commit[i]
            if waiters is not None:
                for j in waiters:
                    release(j, now, i)
            waiters = commit_on_commit[i]
            if waiters is not None:
                for j in waiters:
                    commit_pending[j] -= 1
                    if not commit_pending[j]:
                        commits.append((j, i))
        self.committed = committed

    # ------------------------------------------------------------------ the verdict
    def result(self, error: str | None, path: tuple[int, ...] = (), stuck: tuple[int, ...] = ()) -> SimResult:
        links = len(self.topology.links)
        return SimResult(correct=error is None, error=error,
                         time_us=max(self.commit_at, default=0.0) + self.launch_us if error is None else None,
                         size_bytes=self.size_bytes, collective=self.collective, start_us=np.array(self.start_at),
                         arrive_us=np.array(self.arrive_at), commit_us=np.array(self.commit_at),
                         link_busy_us=tuple(self.net.busy_us[:links]),
                         link_bytes=tuple(self.net.bytes_carried[:links]), critical_path=path, stuck=stuck,
                         memory_busy_us=tuple(self.net.busy_us[r] if r >= 0 else 0.0 for r in self.memory),
                         memory_bytes=tuple(self.net.bytes_carried[r] if r >= 0 else 0.0 for r in self.memory))

    def verdict(self) -> SimResult:
        """After a run without a fault: a deadlock, a violated post-condition, or the time."""
        commit_at, collective = self.commit_at, self.collective
        if self.committed < len(self.transfers):
            return self.result(_deadlock_message(self.schedule, self.start_at, commit_at, self.conn_prev),
                               stuck=tuple(i for i, t in enumerate(commit_at) if math.isnan(t)))
        num_chunks, state = self.num_chunks, self.state
        complete = [collective.complete_mask(chunk) for chunk in range(num_chunks)]
        for rank, chunk in collective.required():
            have = state.get(rank * num_chunks + chunk, 0)
            want = complete[chunk]
            if have != want:
                if have == 0:
                    why = f"rank {rank} never receives {collective.describe_chunk(chunk)}"
                elif collective.is_reduction:
                    missing = _mask_ranks(want & ~have)
                    why = (f"rank {rank} ends with {collective.describe_chunk(chunk)} missing the contribution of "
                           f"rank(s) {missing[:8]}{'...' if len(missing) > 8 else ''}")
                else:
                    why = f"rank {rank} ends with the wrong data for {collective.describe_chunk(chunk)}"
                return self.result(f"post-condition violated: {why}")
        return self.result(None, path=_critical_path(commit_at, self.start_cause, self.commit_cause))


def _critical_path(commit_at: list[float], start_cause: list[int], commit_cause: list[int]) -> tuple[int, ...]:
    if not commit_at:
        return ()
    current = commit_at.index(max(commit_at))  # the first transfer to commit last (every time is set)
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
