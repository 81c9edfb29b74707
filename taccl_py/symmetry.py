"""Simulate a rank-translation-symmetric schedule through one representative per orbit (exactly).

A :class:`SymmetricSchedule` is a collective, a translation ``shift`` d of the
ranks (rank r -> r + d mod N) and representative transfers. It stands for the
full schedule ``[tau^a(rep) for rep in reps for a in range(N // d)]``, where
``tau`` moves ranks by d, chunks with their ranks (:func:`translate_chunk`)
and links with their endpoints (a topology automorphism found and checked by
:func:`translation_automorphism`). Each representative's block is one orbit.

:func:`simulate_symmetric` runs only the representatives, and gives exactly the
times the full schedule gets from :func:`taccl_py.simulator.simulate`, because:

* the topology is invariant (every link maps to a link of the same bandwidth,
  latency and kind, so a runtime model's costs, which read a route's link kinds,
  per-kind shares of a link and figures of the whole topology, and add a launch
  time once, are invariant too); a link orbit of k links (k divides the orbit
  size m = N/d: a link that moving by k*d maps to itself, as a switch port
  every machine shares) carries m/k members of each orbit whose route crosses
  it once, so the max-min problem on link orbits, one flow per representative
  consuming m/k of a k-link orbit per byte (the fluid network's weights), has
  the full problem's rates (the full solution is unique, hence invariant);
* the collective's pre- and post-conditions are invariant (Allgather,
  ReduceScatter, Allreduce, Alltoall; rooted collectives are refused);
* every block is a whole orbit and its members touch no common (rank, chunk)
  (checked: :func:`symmetry_error`), so program order, which the start and
  commit rules read, is invariant up to the order inside a block, which then
  decides nothing: every member waits for the translate of what its
  representative waits for;
* a runtime's proxy posts (:func:`taccl_py.runtime.proxy_posts`) are made at
  the end of an instant, receives first, each kind in program order: an
  orbit posts one send at every rank of its sender's rank orbit and one
  receive at every rank of its receiver's, so every rank of a rank orbit has
  posted the same at every instant (one counter per rank orbit), and the
  full schedule's program order (:func:`expand`: representative-major) sees
  any one rank's posts in representative order.

The data is tracked too, per orbit of (rank, chunk) in the frame of its member
on ranks 0..d-1, the contribution masks rotated by the translation, so a wrong
representative schedule is reported as the full one would be (same first
fault up to which member shows it). Not supported (refused with a reason):
``after``, ``not_before_us``, exchanges and network groups, a route that
crosses two links of one orbit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import ScheduleError
from taccl_py.event_kernel import EventKernel, Fault
from taccl_py.gc_pause import paused_gc
from taccl_py.runtime import post_instant
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import SimOptions, SimResult
from taccl_py.topology import Topology, Vertex
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["SYMMETRIC_MIN_GPUS", "SymmetricSchedule", "expand", "simulate_symmetric", "symmetry_error",
           "translate_chunk", "translation_automorphism"]

_SUPPORTED = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE,
              CollectiveKind.ALLTOALL)


SYMMETRIC_MIN_GPUS = 256
"""From this many GPUs the ring Allgather, ReduceScatter and Allreduce baselines are simulated through one
representative per orbit of a rank translation, when topology and rings have one: the same times, far fewer events."""


@dataclass(frozen=True)
class SymmetricSchedule:
    """Representatives of a schedule invariant under moving every rank by ``shift`` (see the module)."""

    collective: Collective
    shift: int
    reps: tuple[Transfer, ...]
    name: str = ""
    topology: str = ""
    notes: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """As :attr:`taccl_py.schedule.Schedule.notes` (a baseline's algorithm, channels, pieces)."""
    _verdict: list[tuple[Topology, str | _Checked]] = field(default_factory=list, init=False, repr=False,
                                                           compare=False, hash=False)
    """The check's verdict on the topology it was made for (:func:`_check`): a schedule timed per protocol is
    checked once, and the verdict lives as long as the schedule."""

    def __len__(self) -> int:
        """Transfers of the full schedule."""
        return self.num_transfers

    @property
    def orbit_size(self) -> int:
        return self.collective.num_ranks // self.shift

    @property
    def num_transfers(self) -> int:
        """Transfers of the full schedule."""
        return len(self.reps) * self.orbit_size


def translate_chunk(collective: Collective, chunk: int, by: int) -> int:
    """The chunk that ``chunk`` becomes when every rank moves by ``by`` (mod N)."""
    n, c = collective.num_ranks, collective.chunk_factor
    if collective.kind is CollectiveKind.ALLTOALL:
        pair, j = divmod(chunk, c)
        s, d = divmod(pair, n)
        return (((s + by) % n) * n + (d + by) % n) * c + j
    block, j = divmod(chunk, c)
    return ((block + by) % n) * c + j


def translation_automorphism(topology: Topology, shift: int) -> list[int] | None:
    """The link permutation induced by moving every GPU by ``shift``, if it is an automorphism; else None.

    Switches are matched to switches by their (already matched) neighbours,
    until every switch has an image; a link must map to a link of the same
    bandwidth, latency and kind. None when no such map exists (or it is not
    found unambiguously).
    """
    n = topology.num_gpus
    if shift <= 0 or n % shift:
        return None
    neighbours: dict[Vertex, set[Vertex]] = {v: set() for v in topology.vertices}
    for link in topology.links:
        neighbours[link.src].add(link.dst)
        neighbours[link.dst].add(link.src)
    image: dict[Vertex, Vertex] = {g: (g + shift) % n for g in range(n)}
    used: set[Vertex] = set(image.values())
    pending = [s.name for s in topology.switches]
    kind_of = {s.name: s.kind for s in topology.switches}
    while pending:
        left = []
        for s in pending:
            known = [image[u] for u in neighbours[s] if u in image]
            if not known:
                left.append(s)
                continue
            candidates = [v for v in neighbours[known[0]] if isinstance(v, str) and v not in used
                          and kind_of[v] == kind_of[s] and len(neighbours[v]) == len(neighbours[s])
                          and all(k in neighbours[v] for k in known)]
            if not candidates:
                return None
            if len(candidates) > 1:
                left.append(s)
                continue
            image[s] = candidates[0]
            used.add(candidates[0])
        if len(left) == len(pending):
            return None  # nothing progressed: unmatched or ambiguous switches
        pending = left
    index = topology.link_index
    out = []
    for link in topology.links:
        j = index.get((image[link.src], image[link.dst]))
        if j is None:
            return None
        other = topology.links[j]
        if (other.bandwidth, other.latency, other.kind) != (link.bandwidth, link.latency, link.kind):
            return None
        out.append(j)
    return out


def expand(schedule: SymmetricSchedule, topology: Topology) -> Schedule:
    """The full schedule a symmetric one stands for (for checks on small cases)."""
    links = translation_automorphism(topology, schedule.shift)
    if links is None:
        raise ScheduleError(f"moving every GPU by {schedule.shift} is not a symmetry of topology {topology.name!r}")
    coll, d, m = schedule.collective, schedule.shift, schedule.orbit_size
    n = coll.num_ranks
    out: list[Transfer] = []
    for rep in schedule.reps:
        route = rep.route
        for a in range(m):
            out.append(Transfer((rep.src + a * d) % n, (rep.dst + a * d) % n,
                                tuple(translate_chunk(coll, x, a * d) for x in rep.chunks), route, rep.op,
                                rep.channel))
            route = tuple(links[i] for i in route)
    return Schedule(coll, tuple(out), name=schedule.name, topology=schedule.topology, notes=dict(schedule.notes))


def _link_orbits(links: list[int]) -> tuple[list[int], list[int]]:
    """Orbit number of every link under the permutation ``links``, and the number of links of each orbit."""
    orbit = [-1] * len(links)
    sizes: list[int] = []
    for first in range(len(links)):
        if orbit[first] >= 0:
            continue
        size, i = 0, first
        while orbit[i] < 0:
            orbit[i] = len(sizes)
            size += 1
            i = links[i]
        sizes.append(size)
    return orbit, sizes


@dataclass(frozen=True)
class _Checked:
    """What :func:`_check` derived on the way: the link map's orbits and each representative's canonical keys."""

    link_orbit: list[int]
    orbit_links: list[int]
    """Links per link orbit (each divides the schedule's orbit size)."""
    reads: list[list[tuple[int, int]]]
    writes: list[list[tuple[int, int]]]


def symmetry_error(schedule: SymmetricSchedule, topology: Topology) -> str | None:
    """Why the representative simulation would not be exact for this schedule (None: it is)."""
    problem = _check(schedule, topology)
    return problem if isinstance(problem, str) else None


def _check(schedule: SymmetricSchedule, topology: Topology) -> str | _Checked:
    """The reason the schedule is refused, or what checking it derived (kept on the schedule for this topology)."""
    kept = list(schedule._verdict)
    if kept and kept[0][0] is topology:
        return kept[0][1]
    verdict = _checked_now(schedule, topology)
    schedule._verdict[:] = [(topology, verdict)]
    return verdict


def _checked_now(schedule: SymmetricSchedule, topology: Topology) -> str | _Checked:
    coll, d = schedule.collective, schedule.shift
    if coll.kind not in _SUPPORTED:
        return f"{coll.kind.value} has a root, which no rank translation keeps"
    if topology.has_endpoint_limits:
        return "GPU memory or channels are declared: their resources are per GPU, not in the link orbits"
    if topology.store_and_forward:
        return "store-and-forward switches: the representative run times every transfer over its whole route"
    if coll.num_ranks != topology.num_gpus or d <= 0 or coll.num_ranks % d:
        return f"shift {d} does not divide the {topology.num_gpus} GPUs"
    links = translation_automorphism(topology, d)
    if links is None:
        return f"moving every GPU by {d} is not a symmetry of topology {topology.name!r}"
    orbit, orbit_links = _link_orbits(links)
    uneven = next((k for k in orbit_links if schedule.orbit_size % k), None)
    if uneven is not None:
        return (f"moving every GPU by {d} leaves a link orbit of {uneven} links, which does not divide the "
                f"{schedule.orbit_size} members of an orbit")
    problem = Schedule(coll, schedule.reps).structural_error(topology)
    if problem:
        return problem
    all_reads, all_writes = [], []
    for i, t in enumerate(schedule.reps):
        if t.after or t.not_before_us is not None or t.exchange is not None or t.group is not None:
            return f"representative {i}: after, not_before_us, exchanges and groups are not supported"
        if len({orbit[x] for x in t.route}) != len(t.route):
            return f"representative {i}: its route crosses two links of one orbit"
        if not 0 <= t.src < d:
            return f"representative {i}: its source {t.src} is not in 0..{d - 1}"
        reads = [_canonical(coll, d, t.src, x) for x in t.chunks]
        writes = [_canonical(coll, d, t.dst, x) for x in t.chunks]
        write_orbits = {key for key, _ in writes}
        if len(write_orbits) != len(writes) or any(key in write_orbits for key, _ in reads):
            return (f"representative {i}: members of its orbit touch the same (rank, chunk), so their order "
                    "would matter")
        all_reads.append(reads)
        all_writes.append(writes)
    return _Checked(orbit, orbit_links, all_reads, all_writes)


def _canonical(coll: Collective, d: int, rank: int, chunk: int) -> tuple[int, int]:
    """(orbit key, shift a) of (rank, chunk): the key of its member on ranks 0..d-1, moved by a*d back."""
    a, r = divmod(rank, d)
    return r * coll.num_chunks + translate_chunk(coll, chunk, -a * d), a


def _rotate(mask: int, by: int, n: int, full: int) -> int:
    """A contribution mask with every rank moved by ``by`` (mod n)."""
    by %= n
    return ((mask << by) | (mask >> (n - by))) & full if by else mask


def _initial(coll: Collective, d: int) -> dict[int, int]:
    """The pre-condition's (rank, chunk) -> mask for ranks 0..d-1 (as :meth:`Collective.initial` gives them)."""
    n, c, num = coll.num_ranks, coll.chunk_factor, coll.num_chunks
    state: dict[int, int] = {}
    for r in range(d):
        if coll.kind is CollectiveKind.ALLGATHER:
            chunks: Sequence[int] = range(r * c, r * c + c)
        elif coll.kind is CollectiveKind.ALLTOALL:
            chunks = range(r * n * c, (r + 1) * n * c)
        else:
            chunks = range(num)
        for x in chunks:
            state[r * num + x] = 1 << r
    return state


def _required(coll: Collective, d: int) -> list[tuple[int, int]]:
    """The post-condition's (rank, chunk) pairs for ranks 0..d-1."""
    n, c, num = coll.num_ranks, coll.chunk_factor, coll.num_chunks
    if coll.kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE):
        return [(r, x) for r in range(d) for x in range(num)]
    if coll.kind is CollectiveKind.REDUCESCATTER:
        return [(r, x) for r in range(d) for x in range(r * c, r * c + c)]
    return [(t, (s * n + t) * c + j) for t in range(d) for s in range(n) for j in range(c)]


class _QuotientRun(EventKernel):
    """The simulator's start/arrive/commit rules on representatives (see :class:`taccl_py.simulator._Run`)."""

    def __init__(self, topology: Topology, schedule: SymmetricSchedule, size_bytes: float,
                 options: SimOptions, checked: _Checked, expand_times: bool = True) -> None:
        self.expand_times = expand_times
        """Per-transfer times for every transfer of the full schedule (False: one per representative)."""
        coll = self.collective = schedule.collective
        self.topology, self.schedule, self.size_bytes = topology, schedule, size_bytes
        reps = self.reps = schedule.reps
        d = self.d = schedule.shift
        self.n, self.full = coll.num_ranks, coll.full_mask
        k = len(reps)
        link_orbit = checked.link_orbit
        orbits = max(link_orbit) + 1
        costs = options.costs
        self.launch_us = 0.0 if costs is None else costs.launch_us
        rates = ([gbps_to_bytes_per_us(link.bandwidth) for link in topology.links] if costs is None
                 else costs.link_capacity_us(topology))
        capacity = [0.0] * orbits
        for i, rate in enumerate(rates):
            capacity[link_orbit[i]] = rate
        chunk_bytes = coll.chunk_bytes(size_bytes)
        resources = [tuple(link_orbit[i] for i in t.route) for t in reps]
        m = schedule.orbit_size
        members_on = [m // k for k in checked.orbit_links]  # members of an orbit on each link of a link orbit
        weights = None if all(c == 1 for c in members_on) else [
            None if all(members_on[o] == 1 for o in r) else tuple(float(members_on[o]) for o in r)
            for r in resources]
        latency = [(topology.route_latency(t.route) if costs is None else costs.route_latency_us(topology, t.route))
                   + options.step_overhead_us for t in reps]
        num_bytes = [len(t.chunks) * chunk_bytes for t in reps]
        super().__init__(capacity, resources, latency, num_bytes, weights)
        self.link_orbit = link_orbit
        # (orbit key, shift) of every chunk a representative reads and writes
        self.reads, self.writes = checked.reads, checked.writes
        self.start_pending = [0] * k
        self.commit_pending = [1] * k
        self.start_on_commit: list[list[int]] = [[] for _ in range(k)]
        self.commit_on_commit: list[list[int]] = [[] for _ in range(k)]
        self.commit_on_arrive: list[list[int]] = [[] for _ in range(k)]
        self.conn_next = [-1] * k
        last_writer: dict[int, int] = {}
        readers: dict[int, list[int]] = {}
        last_on: dict[tuple[int, int, int], int] = {}
        n = self.n
        for i, t in enumerate(reps):
            s_deps = {w for w in (last_writer.get(key) for key, _ in self.reads[i]) if w is not None}
            for key, _ in self.reads[i]:
                readers.setdefault(key, []).append(i)
            c_deps: set[int] = set()
            a_deps: set[int] = set()
            for key, _ in self.writes[i]:
                w = last_writer.get(key)
                if w is not None:
                    c_deps.add(w)
                a_deps.update(readers.pop(key, ()))
                last_writer[key] = i
            for w in sorted(s_deps):
                self.start_on_commit[w].append(i)
            for w in sorted(c_deps):
                self.commit_on_commit[w].append(i)
            for r in sorted(a_deps):
                self.commit_on_arrive[r].append(i)
            self.start_pending[i] = len(s_deps)
            self.commit_pending[i] += len(c_deps) + len(a_deps)
            conn = (t.src, (t.dst - (t.src // d) * d) % n, t.channel)
            p = last_on.get(conn)
            if p is not None:
                self.conn_next[p] = i
                self.start_pending[i] += 1
            last_on[conn] = i
        self.post_us = 0.0 if costs is None else costs.post_us
        self.posting = [costs is not None and costs.posts(topology, t.route) for t in reps]
        """Per representative: its orbit waits for the proxies' posts (it crosses the network)."""
        self.posted = [0.0] * d
        """Per rank orbit (rank mod d): when each of its ranks' proxies has posted all it was asked (the same for
        every rank of an orbit: each representative's orbit posts one send at each rank of its sender's and one
        receive at each rank of its receiver's)."""
        self.to_post: list[int] = []
        self.state = _initial(coll, d)
        nan = math.nan
        self.start_at, self.arrive_at, self.commit_at = [nan] * k, [nan] * k, [nan] * k
        self.snapshot: list[list[int] | None] = [None] * k
        self.commits: list[int] = []
        self.committed = 0

    def start(self) -> None:
        for i, pending in enumerate(self.start_pending):
            if pending == 0:
                self.begin(i, 0.0)

    def begin(self, i: int, now: float) -> None:
        """Read the sender's masks (in the representative's frame) and send."""
        masks: list[int] = []
        step = self.d
        for key, a in self.reads[i]:
            mask = self.state.get(key, 0)
            if not mask:
                t = self.reps[i]
                x = t.chunks[len(masks)]
                raise Fault(f"representative {i} (rank {t.src} -> rank {t.dst}, chunks {list(t.chunks)}) starts "
                            f"at {now:.6g} us but rank {t.src} does not hold {self.collective.describe_chunk(x)}")
            masks.append(_rotate(mask, a * step, self.n, self.full))
        self.snapshot[i] = masks
        self.start_at[i] = now
        if self.posting[i]:
            self.to_post.append(i)
        else:
            self.send(i, now)

    def end_batch(self, now: float) -> None:
        """The proxies post what became ready in this instant (:func:`taccl_py.runtime.proxy_posts`), per rank
        orbit; in representative order, which is the full schedule's program order (:func:`expand`) as far as
        any one rank sees it."""
        if self.to_post:
            d, reps = self.d, self.reps
            for i, start in post_instant(self.to_post, lambda i: (reps[i].src % d, reps[i].dst % d), self.posted,
                                         now, self.post_us):
                self.send_at(i, start)

    def wake(self, item: int, time: float) -> None:
        raise AssertionError("no timers in a representative simulation")

    def release(self, i: int, now: float) -> None:
        self.start_pending[i] -= 1
        if not self.start_pending[i]:
            self.begin(i, now)

    def arrive(self, i: int, now: float) -> None:
        self.arrive_at[i] = now
        j = self.conn_next[i]
        if j >= 0:
            self.release(j, now)
        pending = self.commit_pending
        for j in self.commit_on_arrive[i]:
            pending[j] -= 1
            if not pending[j]:
                self.commits.append(j)
        pending[i] -= 1
        if not pending[i]:
            self.commits.append(i)
        self.settle(now)

    def settle(self, now: float) -> None:
        commits, state, step = self.commits, self.state, self.d
        while commits:
            i = commits.pop()
            masks = self.snapshot[i]
            assert masks is not None
            self.snapshot[i] = None
            t = self.reps[i]
            for (key, a), mask, x in zip(self.writes[i], masks, t.chunks, strict=True):
                local = _rotate(mask, -a * step, self.n, self.full)
                if t.op is Op.COPY:
                    state[key] = local
                else:
                    held = state.get(key, 0)
                    if held & local:
                        raise Fault(f"representative {i} (rank {t.src} -> rank {t.dst}) reduces a contribution into "
                                    f"{self.collective.describe_chunk(x)} at rank {t.dst} a second time")
                    state[key] = held | local
            self.commit_at[i] = now
            self.committed += 1
            for j in self.start_on_commit[i]:
                self.release(j, now)
            for j in self.commit_on_commit[i]:
                self.commit_pending[j] -= 1
                if not self.commit_pending[j]:
                    commits.append(j)

    def result(self, error: str | None) -> SimResult:
        m = self.schedule.orbit_size
        links = len(self.topology.links)
        busy = tuple(self.net.busy_us[self.link_orbit[i]] for i in range(links))
        carried = tuple(self.net.bytes_carried[self.link_orbit[i]] for i in range(links))
        times = [np.array(self.start_at), np.array(self.arrive_at), np.array(self.commit_at)]
        if self.expand_times:
            times = [np.repeat(t, m) for t in times]
        notes: dict[str, Any] = {"representatives": len(self.reps), "orbit_size": m}
        if not self.expand_times:
            notes["times_per"] = "representative"
        return SimResult(correct=error is None, error=error,
                         time_us=(max(self.commit_at, default=0.0) + self.launch_us) if error is None else None,
                         size_bytes=self.size_bytes, collective=self.collective, start_us=times[0],
                         arrive_us=times[1], commit_us=times[2], link_busy_us=busy, link_bytes=carried,
                         critical_path=(), notes=notes)

    def verdict(self) -> SimResult:
        if self.committed < len(self.reps):
            stuck = [i for i, c in enumerate(self.commit_at) if math.isnan(c)]
            return self.result(f"deadlock: {len(stuck)} representative transfer(s) (each standing for "
                               f"{self.schedule.orbit_size}) can never commit, e.g. representative {stuck[0]}")
        coll, num = self.collective, self.collective.num_chunks
        for rank, chunk in _required(coll, self.d):
            have = self.state.get(rank * num + chunk, 0)
            if have != coll.complete_mask(chunk):
                return self.result(f"post-condition violated: rank {rank} ends with the wrong data for "
                                   f"{coll.describe_chunk(chunk)}")
        return self.result(None)


def simulate_symmetric(topology: Topology, schedule: SymmetricSchedule, size_bytes: float,
                       options: SimOptions | None = None, *, expand_times: bool = True) -> SimResult:
    """The full schedule's :class:`SimResult`, computed from the representatives (see the module).

    Per-transfer arrays are in the full schedule's order (:func:`expand`), or with ``expand_times`` False one
    per representative (``notes["times_per"] == "representative"``; every member of an orbit has its
    representative's times: what a caller that reads the makespan and link figures only keeps, 134 million
    transfers' times being 3 GiB at 4,096 GPUs); ``critical_path`` is left empty. A runtime's costs (``options.costs``) are honoured, proxy posts
    included (the module says why they stay exact). A schedule :func:`symmetry_error` refuses
    raises :class:`~taccl_py.errors.ScheduleError` with its reason: callers check first.
    """
    checked = _check(schedule, topology)
    if isinstance(checked, str):
        raise ScheduleError(checked)
    options = options or SimOptions()
    with paused_gc():
        run = _QuotientRun(topology, schedule, size_bytes, options, checked, expand_times)
        try:
            run.run()
        except Fault as fault:
            return run.result(str(fault))
        return run.verdict()
