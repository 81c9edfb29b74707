"""The ``oneshot`` baseline: latency-optimal small collectives.

At small sizes a collective's time is its number of sequential message
latencies; these algorithms keep that number at the topology's minimum.

* **Allgather**: every block travels its own shortest-latency tree, relaying
  through GPUs where two GPUs have no direct route; messages that share a
  connection and a moment are fused (:mod:`taccl_py.baselines.fused`).
* **ReduceScatter**: every block is reduced along the reverse tree into its
  owner (each relay adds its own contribution and passes the sum on), fused.
* **Broadcast / Reduce**: the whole buffer along the tree from / to the root.
* Trees come in two kinds, shortest-latency and *spread* (a GPU may take a
  longer path within the tree's depth when that avoids loaded links, so a
  block crosses into a machine once and spreads over its NVSwitch), and
  messages merged or one per hop; the fastest at the size is kept.
* **Allreduce**: rounds of *exchanges* (see :mod:`taccl_py.schedule`), every
  message the whole buffer, reduced by the receiver:

  - *one-shot*: where every two GPUs have a direct route, one exchange in
    which every rank sends its buffer to every other (one latency);
  - *grid*: where the GPUs form a product of cliques (DGX-1: two quads of
    fully connected GPUs, GPU i paired with GPU i+4), one exchange per clique
    dimension, each adding disjoint partial sums;
  - *hierarchical*: across machines, the grid (or one-shot) inside every
    machine, then one exchange in which every GPU receives each other
    machine's sum from a GPU of that machine with a direct route to it, then
    the result copied (along latency trees) to the GPUs that exchange could
    not reach;
  - *rotated*: the hierarchical exchanges with the buffer in as many parts as
    rounds, part j taking the rounds in the order rotated by j (one part
    crosses the network while another is reduced inside the machine), where
    the rounds form a product of groups (every GPU reached, every input
    summed once in every order; checked by counting);
  - *sliced* (for larger sizes across machines): slice j of the buffer has a
    receiving GPU in every machine (one reached directly from every other
    machine); it is reduced inside every machine into that GPU and into the
    GPUs that send the machine's sum to the other machines' receivers (one
    exchange, or latency trees when one GPU does both on a machine that is
    not fully connected), the sums cross in one exchange, and the result is
    copied back inside every machine: three latencies, and only 1/K of the
    buffer crosses each NIC;
  - otherwise *reduce-broadcast*: the buffer reduced along a reverse latency
    tree into a centre GPU and copied back along its tree (two tree depths).

  The fastest form that applies is used, judged by the simulator at the
  requested size (4 KiB when no size is given); above 32 GPUs by an
  alpha-beta estimate instead (:func:`estimate_us`), which costs far less.

Everything runs on one chunk per block (``chunk_factor`` 1) unless asked
otherwise, so the MSCCL file has ``nchunksperloop`` = N (N chunks for
Allgather, ReduceScatter, Allreduce; 1 for Broadcast and Reduce).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import lru_cache

import numpy as np

from taccl_py.baselines.common import NotApplicable
from taccl_py.baselines.fused import Hop, all_pairs_latency, fuse, latency_tree
from taccl_py.collectives import Collective, CollectiveKind, parse_collective
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.topology import Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["ALLREDUCE_FORMS", "DEFAULT_SIZE", "SIMULATED_UP_TO", "check_oneshot", "estimate_us", "oneshot_schedule"]

DEFAULT_SIZE = 4096
"""Size (bytes) at which the Allreduce form is chosen when none is given."""
SIMULATED_UP_TO = 32
"""Up to this many GPUs the Allreduce form is chosen by simulating every form; above, by :func:`estimate_us`."""
SIMULATED_TREES_UP_TO = 64
"""Up to this many GPUs the tree variants (spread or not, merged or not) are simulated and the fastest kept."""
ALLREDUCE_FORMS = ("one-shot", "grid", "hierarchical", "rotated", "sliced", "reduce-broadcast")
"""The Allreduce forms, in the order they are tried."""
_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE,
          CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
_SEARCH_BUDGET = 20_000
"""Backtracking steps a grid search may take before giving up (the search is for small machines)."""


def check_oneshot(topology: Topology, kind: CollectiveKind) -> None:
    """Raise :class:`NotApplicable` unless ``oneshot`` runs ``kind`` here."""
    if kind not in _KINDS:
        raise NotApplicable(f"there is no oneshot {kind.value} baseline (try direct)", where=topology.name)
    if topology.num_gpus < 2:
        raise NotApplicable("a oneshot algorithm needs at least 2 GPUs", where=topology.name)


def oneshot_schedule(topology: Topology, kind: CollectiveKind | str, *, root: int = 0,
                     chunk_factor: int | None = None, channels: int | None = None,
                     size_bytes: float | None = None, form: str | None = None,
                     step_overhead_us: float = 0.0) -> Schedule:
    """The latency-optimal ``kind`` (see the module docstring); ``form`` forces an Allreduce form.

    ``size_bytes`` and ``step_overhead_us`` are those the variants are compared at. ``channels`` = k
    splits every message into k parallel ones (chunk factor a multiple of k).
    """
    kind = kind if isinstance(kind, CollectiveKind) else parse_collective(kind)
    k = channels or 1
    if k > 1:
        c = chunk_factor if chunk_factor is not None else k
        if c % k:
            raise NotApplicable(f"chunk_factor {c} is not a positive multiple of the {k} channels")
        base = oneshot_schedule(topology, kind, root=root, chunk_factor=c // k, size_bytes=size_bytes, form=form,
                                step_overhead_us=step_overhead_us)
        return _split_channels(base, k)
    check_oneshot(topology, kind)
    c = chunk_factor or 1
    collective = Collective(kind, topology.num_gpus, c, root)
    if kind is CollectiveKind.ALLREDUCE:
        return _allreduce(topology, collective, size_bytes, form, step_overhead_us)
    if form is not None:
        raise NotApplicable(f"forms are for allreduce, not {kind.value}", where=topology.name)
    return _trees(topology, collective, size_bytes, step_overhead_us)


def _trees(topology: Topology, collective: Collective, size_bytes: float | None,
           step_overhead_us: float = 0.0) -> Schedule:
    """The tree algorithms: shortest-latency trees or trees spread over the least-loaded links within the same
    depth, messages merged or not; the fastest at the size (up to 64 GPUs; above, spread and merged)."""
    from taccl_py.simulator import SimOptions, simulate

    size = size_bytes if size_bytes is not None else DEFAULT_SIZE
    chunk_bytes = collective.chunk_bytes(size)
    variants = [(True, True)] if topology.num_gpus > SIMULATED_TREES_UP_TO else [
        (spread, merge) for spread in (True, False) for merge in (True, False)]
    best: tuple[float, int, Schedule] | None = None
    for spread, merge in variants:
        hops, items = _tree_hops(topology, collective.kind, collective.root, collective.chunk_factor, spread)
        transfers = fuse(topology, hops, items, chunk_bytes, merge=merge)
        form = f"{'spread' if spread else 'shortest'} trees, {'merged' if merge else 'one message per hop'}"
        schedule = _schedule(topology, collective, transfers, form)
        if len(variants) == 1:
            return schedule
        sim = simulate(topology, schedule, size, SimOptions(step_overhead_us=step_overhead_us))
        assert sim.correct and sim.time_us is not None, f"oneshot {form}: {sim.error}"
        key = (round(sim.time_us, 9), len(transfers))
        if best is None or key < (round(best[0], 9), best[1]):
            best = (sim.time_us, len(transfers), schedule)
    assert best is not None
    return best[2]


def _split_channels(schedule: Schedule, k: int) -> Schedule:
    """Every message as k parallel ones: chunk x becomes chunks x*k .. x*k+k-1, copy i on channel c*k + i."""
    transfers = [replace(t, chunks=tuple(x * k + i for x in t.chunks), channel=t.channel * k + i,
                         after=tuple(a * k + i for a in t.after))
                 for t in schedule.transfers for i in range(k)]
    col = schedule.collective
    notes = {**schedule.notes, "channels": int(schedule.notes.get("channels", 1)) * k}
    return replace(schedule, collective=col.with_chunk_factor(col.chunk_factor * k), transfers=tuple(transfers),
                   notes=notes)


def _schedule(topology: Topology, collective: Collective, transfers: Sequence[Transfer], form: str) -> Schedule:
    channels = 1 + max((t.channel for t in transfers), default=0)
    return Schedule(collective, tuple(transfers), name="oneshot", topology=topology.name,
                    notes={"algorithm": "oneshot", "form": form, "channels": channels, "pieces": 1})


# ----------------------------------------------------------------- trees
@lru_cache(maxsize=64)
def _tree_hops(topology: Topology, kind: CollectiveKind, root: int, c: int,
               spread: bool) -> tuple[tuple[Hop, ...], tuple[tuple[int, ...], ...]]:
    """Hops of the tree algorithms and the chunks of every item (cached: they do not depend on the size)."""
    n = topology.num_gpus
    loads = [0.0] * len(topology.links)
    hops: list[Hop] = []
    if kind is CollectiveKind.ALLGATHER:
        for b in range(n):
            _broadcast_hops(topology, b, b, hops, loads, spread=spread)
        return tuple(hops), tuple(tuple(range(b * c, (b + 1) * c)) for b in range(n))
    if kind is CollectiveKind.REDUCESCATTER:
        for b in range(n):
            _reduce_hops(topology, b, b, hops, loads, spread=spread)
        return tuple(hops), tuple(tuple(range(b * c, (b + 1) * c)) for b in range(n))
    if kind is CollectiveKind.BROADCAST:
        _broadcast_hops(topology, root, 0, hops, loads, spread=spread)
    else:
        _reduce_hops(topology, root, 0, hops, loads, spread=spread)
    return tuple(hops), (tuple(range(c)),)


def _broadcast_hops(topology: Topology, source: int, item: int, hops: list[Hop], loads: list[float], *,
                    needs_at_source: tuple[int, ...] = (), channel: int = 0,
                    members: Sequence[int] | None = None, spread: bool = False) -> None:
    """Copy ``item`` from ``source`` to every GPU (of ``members``) along its latency tree."""
    tree = latency_tree(topology, [source], loads=loads, members=members, spread=spread)
    delivered: dict[int, int] = {}
    for v in tree.order:
        p = tree.parent[v]
        needs = needs_at_source if p == source else (delivered[p],)
        delivered[v] = len(hops)
        hops.append(Hop(item, p, v, Op.COPY, needs, channel))


def _reduce_hops(topology: Topology, target: int, item: int, hops: list[Hop], loads: list[float], *,
                 channel: int = 0, members: Sequence[int] | None = None, spread: bool = False) -> list[int]:
    """Reduce ``item`` into ``target`` along its reverse latency tree (over ``members``); returns the hops into
    ``target``."""
    tree = latency_tree(topology, [target], reverse=True, loads=loads, members=members, spread=spread)
    into: dict[int, list[int]] = {}
    for v in reversed(tree.order):  # leaves first
        p = tree.parent[v]
        into.setdefault(p, []).append(len(hops))
        hops.append(Hop(item, v, p, Op.REDUCE, tuple(into.get(v, ())), channel))
    return into.get(target, [])


# ------------------------------------------------------------- allreduce
def _allreduce(topology: Topology, collective: Collective, size_bytes: float | None, form: str | None,
               step_overhead_us: float = 0.0) -> Schedule:
    from taccl_py.simulator import SimOptions, simulate

    if form is not None and form not in ALLREDUCE_FORMS:
        raise NotApplicable(f"unknown allreduce form {form!r} (choose one of: {', '.join(ALLREDUCE_FORMS)})",
                            where=topology.name)
    size = size_bytes if size_bytes is not None else DEFAULT_SIZE
    chunk_bytes = collective.chunk_bytes(size)
    best: tuple[float, int, Schedule] | None = None
    reasons = []
    for rank, name in enumerate(ALLREDUCE_FORMS):
        if form is not None and name != form:
            continue
        try:
            transfers = _allreduce_form(topology, collective, name, chunk_bytes)
        except NotApplicable as exc:
            reasons.append(f"{name}: {exc.detail}")
            continue
        schedule = _schedule(topology, collective, transfers, name)
        if form is not None:
            return schedule
        if topology.num_gpus <= SIMULATED_UP_TO:
            sim = simulate(topology, schedule, size, SimOptions(step_overhead_us=step_overhead_us))
            assert sim.correct and sim.time_us is not None, f"oneshot {name} allreduce: {sim.error}"
            time_us = sim.time_us
        else:
            time_us = estimate_us(topology, schedule, size, step_overhead_us)
        if best is None or (time_us, rank) < best[:2]:
            best = (time_us, rank, schedule)
    if best is None:
        raise NotApplicable("; ".join(reasons), where=topology.name)
    return best[2]


def estimate_us(topology: Topology, schedule: Schedule, size_bytes: float, step_overhead_us: float = 0.0) -> float:
    """Alpha-beta estimate of a schedule of exchanges and trees, for choosing a form on many GPUs.

    The program splits into segments: each exchange, and each run of other
    transfers between them. A segment takes the longer of its critical path
    (route latency plus bytes over the route's bandwidth, along the chunks each
    transfer reads) and its busiest link's bytes over that link's bandwidth
    after the latency (an exchange's slowest route, a tree's fastest);
    segments add up. The parts of the *rotated* form run side by side on
    their own channels: each is estimated on its own (its links loaded by
    every part of the same exchange), and so is every link with all the
    parts' bytes after its earliest route latency (the parts cross the
    network in different rounds but on the same NICs); the slowest counts.
    """
    if schedule.notes.get("form") == "rotated":
        shared: dict[int | None, list[Transfer]] = {}
        load = [0.0] * len(topology.links)
        first = [math.inf] * len(topology.links)
        chunk = schedule.collective.chunk_bytes(size_bytes)
        for t in schedule.transfers:
            shared.setdefault(t.exchange, []).append(t)
            latency = topology.route_latency(t.route)
            for li in t.route:
                load[li] += len(t.chunks) * chunk
                first[li] = min(first[li], latency)
        links = max(first[li] + step_overhead_us + load[li] / gbps_to_bytes_per_us(link.bandwidth)
                    for li, link in enumerate(topology.links) if load[li] > 0)
        channels = sorted({t.channel for t in schedule.transfers})
        return max(links, *(_estimate_segments(topology, schedule, [t for t in schedule.transfers if t.channel == c],
                                               size_bytes, step_overhead_us, shared) for c in channels))
    return _estimate_segments(topology, schedule, schedule.transfers, size_bytes, step_overhead_us, {})


def _estimate_segments(topology: Topology, schedule: Schedule, transfers: Sequence[Transfer], size_bytes: float,
                       step_overhead_us: float, shared: dict[int | None, list[Transfer]]) -> float:
    """:func:`estimate_us` of ``transfers``; an exchange's links are loaded by ``shared[exchange]`` if given."""
    chunk = schedule.collective.chunk_bytes(size_bytes)
    segments: list[list[Transfer]] = []
    previous: object = object()
    for t in transfers:
        key = ("exchange", t.exchange) if t.exchange is not None else "trees"
        if key != previous:
            segments.append([])
            previous = key
        segments[-1].append(t)
    total = 0.0
    for members in segments:
        load = [0.0] * len(topology.links)
        ready: dict[tuple[int, int], float] = {}
        finish = 0.0
        for t in shared.get(members[0].exchange, members) if members[0].exchange is not None else members:
            for li in t.route:
                load[li] += len(t.chunks) * chunk
        exchange = members[0].exchange is not None  # every member starts at once: no chunk waits for another
        for t in members:
            size = len(t.chunks) * chunk
            start = 0.0 if exchange else max((ready.get((t.src, c), 0.0) for c in t.chunks), default=0.0)
            end = start + topology.route_latency(t.route) + step_overhead_us + size / gbps_to_bytes_per_us(
                topology.route_bandwidth(t.route))
            finish = max(finish, end)
            if not exchange:
                for c in t.chunks:
                    ready[(t.dst, c)] = max(ready.get((t.dst, c), 0.0), end)
        used = {li for t in members for li in t.route}
        busiest = max(load[li] / gbps_to_bytes_per_us(topology.links[li].bandwidth) for li in used)
        latencies = [topology.route_latency(t.route) for t in members]
        # no byte moves before its transfer's latency: an exchange's bytes after its slowest route's latency
        first = max(latencies) if members[0].exchange is not None else min(latencies)
        total += max(finish, first + step_overhead_us + busiest)
    return total


def _allreduce_form(topology: Topology, collective: Collective, form: str,
                    chunk_bytes: float) -> list[Transfer]:
    everything = tuple(range(collective.num_chunks))
    if form == "reduce-broadcast":
        hops, items = _reduce_broadcast_hops(topology, collective.chunk_factor)
        return fuse(topology, hops, items, chunk_bytes)
    if form == "sliced":
        return _sliced(topology, collective, chunk_bytes)
    plan = _exchange_plan(topology, form)
    # with several dimensions, part j of the buffer takes them in the order rotated by j, so every round keeps
    # every dimension's links busy (DGX-1: half the buffer goes quads then pairs, the other half pairs then quads)
    parts = len(plan.rounds) if form in ("grid", "rotated") else 1
    if (form == "grid" and collective.num_chunks % parts) or collective.num_chunks < parts:
        raise NotApplicable(f"{collective.num_chunks} chunks do not split into {parts} parts", where=topology.name)
    bounds = [j * collective.num_chunks // parts for j in range(parts + 1)]
    out: list[Transfer] = []
    for k in range(len(plan.rounds)):
        for j in range(parts):
            chunks = everything[bounds[j]:bounds[j + 1]]
            for s, d in plan.rounds[(k + j) % len(plan.rounds)]:
                route = topology.gpu_route(s, d)
                assert route is not None
                # rotated parts cross a connection in different rounds: a channel each, so one part's message
                # does not queue behind another's on a route of a different latency
                out.append(Transfer(s, d, chunks, route, Op.REDUCE, j if form == "rotated" else 0, exchange=k))
    if plan.incomplete:
        complete = [g for g in range(topology.num_gpus) if g not in plan.incomplete]
        tree = latency_tree(topology, complete, members=range(topology.num_gpus))
        copies: list[Hop] = []
        delivered: dict[int, int] = {}
        for v in tree.order:
            p = tree.parent[v]
            delivered[v] = len(copies)
            copies.append(Hop(0, p, v, Op.COPY, (delivered[p],) if p in delivered else (), 1))
        out += fuse(topology, copies, [everything], chunk_bytes)
    return out


@lru_cache(maxsize=32)
def _reduce_broadcast_hops(topology: Topology, c: int) -> tuple[tuple[Hop, ...], tuple[tuple[int, ...], ...]]:
    """The whole buffer reduced into a centre (channel 0) and copied back from it (channel 1).

    The centre minimises the reduce depth plus the broadcast depth (latency).
    """
    n = topology.num_gpus
    dist = all_pairs_latency(topology)
    cost = np.round(dist.max(axis=0) + dist.max(axis=1), 9)  # reduce depth into g + broadcast depth from g
    centre = int(np.argmin(cost))
    loads = [0.0] * len(topology.links)
    hops: list[Hop] = []
    arrived = _reduce_hops(topology, centre, 0, hops, loads, channel=0)
    _broadcast_hops(topology, centre, 0, hops, loads, needs_at_source=tuple(arrived), channel=1)
    return tuple(hops), (tuple(range(n * c)),)


class _SlicePlan:
    """Per slice j and machine m: the GPU that ends with the slice's result (``receiver[m][j]``), the GPU of m
    that sends m's sum of the slice to each other machine (``sender[m][m2][j]``) and every GPU holding m's sum
    (``holders[m][j]``: the receiver and the senders)."""

    def __init__(self, receiver: list[list[int]], sender: list[list[list[int]]], trees: bool) -> None:
        self.receiver = receiver
        self.sender = sender
        self.trees = trees
        """One holder per slice on a machine that is not fully connected: reduce along latency trees."""
        self.holders = [[sorted({receiver[m][j], *(sender[m][m2][j] for m2 in range(len(receiver)) if m2 != m)})
                         for j in range(len(receiver[m]))] for m in range(len(receiver))]


@lru_cache(maxsize=32)
def _slice_plan(topology: Topology) -> _SlicePlan:
    machines = [sorted(m) for m in topology.machines]
    if len(machines) < 2:
        raise NotApplicable("sliced needs more than one machine", where=topology.name)
    reachable = [[g for g in m if all(any(topology.gpu_route(x, g) is not None for x in other)
                                      for other in machines if other is not m)] for m in machines]
    k = min(len(r) for r in reachable)
    if k == 0:
        m = next(i for i, r in enumerate(reachable) if not r)
        raise NotApplicable(f"sliced needs a GPU of machine {m} with a direct route from every other machine",
                            where=topology.name)
    receiver = [[r[j * len(r) // k] for j in range(k)] for r in reachable]
    load: dict[int, int] = {}
    sender: list[list[list[int]]] = []
    for m, members in enumerate(machines):
        rows = []
        for m2 in range(len(machines)):
            row = []
            for j in range(k):
                if m2 == m:
                    row.append(-1)
                    continue
                target = receiver[m2][j]
                options = [(g != receiver[m][j], topology.route_latency(route), load.get(g, 0), g)
                           for g in members if (route := topology.gpu_route(g, target)) is not None]
                g = min(options)[3]
                load[g] = load.get(g, 0) + 1
                row.append(g)
            rows.append(row)
        sender.append(rows)
    plan = _SlicePlan(receiver, sender, trees=False)
    single = all(len(h) == 1 for per_machine in plan.holders for h in per_machine)
    cliques = all(_is_clique(topology, m) for m in machines)
    if not cliques:
        if not single:
            raise NotApplicable("sliced with separate sending and receiving GPUs needs fully connected machines",
                                where=topology.name)
        plan.trees = True
    return plan


def _sliced(topology: Topology, collective: Collective, chunk_bytes: float) -> list[Transfer]:
    """Reduce slice j inside every machine into the GPUs that hold it, send each machine's slice sums to the
    slice's receivers in the other machines in one exchange, copy the result back inside every machine."""
    plan = _slice_plan(topology)
    machines = [sorted(m) for m in topology.machines]
    k = len(plan.receiver[0])
    if collective.num_chunks % k:
        raise NotApplicable(f"{collective.num_chunks} chunks do not split into {k} slices", where=topology.name)
    share = collective.num_chunks // k
    slices = [tuple(range(j * share, (j + 1) * share)) for j in range(k)]
    out: list[Transfer] = []
    if plan.trees:
        out += fuse(topology, _slice_reduce_hops(topology), slices, chunk_bytes)
    else:  # every GPU sends its own slice j to the GPUs holding slice j, in one exchange
        for m, members in enumerate(machines):
            for offset in range(1, len(members)):
                for i, g in enumerate(members):
                    h = members[(i + offset) % len(members)]
                    chunks = tuple(c for j in range(k) if h in plan.holders[m][j] for c in slices[j])
                    route = topology.gpu_route(g, h)
                    if chunks and route is not None:
                        out.append(Transfer(g, h, chunks, route, Op.REDUCE, 0, exchange=0))
    for j in range(k):
        for m in range(len(machines)):
            for m2 in range(len(machines)):
                if m2 != m:
                    a, b = plan.sender[m][m2][j], plan.receiver[m2][j]
                    route = topology.gpu_route(a, b)
                    assert route is not None
                    out.append(Transfer(a, b, slices[j], route, Op.REDUCE, 0, exchange=1))
    return out + fuse(topology, _slice_copy_hops(topology), slices, chunk_bytes)


def _per_slice_hops(topology: Topology, add_hops: Callable[..., object], channel: int) -> tuple[Hop, ...]:
    """Inside every machine, ``add_hops`` for slice j and its holder (a reduce or broadcast latency tree)."""
    plan = _slice_plan(topology)
    loads = [0.0] * len(topology.links)
    hops: list[Hop] = []
    for m, members in enumerate(sorted(x) for x in topology.machines):
        for j, holder in enumerate(plan.receiver[m]):
            add_hops(topology, holder, j, hops, loads, channel=channel, members=members)
    return tuple(hops)


@lru_cache(maxsize=32)
def _slice_reduce_hops(topology: Topology) -> tuple[Hop, ...]:
    """Inside every machine: slice j reduced along a latency tree into its one holder (channel 0)."""
    return _per_slice_hops(topology, _reduce_hops, 0)


@lru_cache(maxsize=32)
def _slice_copy_hops(topology: Topology) -> tuple[Hop, ...]:
    """Inside every machine: slice j's result copied from its receiver to every other GPU (channel 1)."""
    return _per_slice_hops(topology, _broadcast_hops, 1)


# ------------------------------------------------------ exchange plans
class _Plan:
    """Rounds of (src, dst) whole-buffer reductions, and the GPUs that still lack the result after them."""

    def __init__(self, rounds: list[list[tuple[int, int]]], incomplete: frozenset[int]) -> None:
        self.rounds = rounds
        self.incomplete = incomplete


@lru_cache(maxsize=32)
def _exchange_plan(topology: Topology, form: str) -> _Plan:
    n = topology.num_gpus
    everyone = list(range(n))
    if form == "one-shot":
        if not _is_clique(topology, everyone):
            missing = next((s, d) for s in everyone for d in everyone if s != d and topology.gpu_route(s, d) is None)
            raise NotApplicable(f"one-shot needs a direct route between every two GPUs (none from GPU {missing[0]} "
                                f"to GPU {missing[1]})", where=topology.name)
        return _Plan([_clique_pairs([everyone])], frozenset())
    if form == "grid":
        grid = _grid(topology, everyone)
        if grid is None or len(grid) < 2:
            raise NotApplicable("the GPUs do not form a product of fully connected groups", where=topology.name)
        return _Plan([_clique_pairs(groups) for groups in grid], frozenset())
    if form == "rotated":
        plan = _exchange_plan(topology, "hierarchical")
        if plan.incomplete:
            raise NotApplicable(f"GPU {min(plan.incomplete)} has no direct route from some other machine",
                                where=topology.name)
        k = len(plan.rounds)
        if k < 2 or not all(_sums_everything(n, plan.rounds[j:] + plan.rounds[:j]) for j in range(k)):
            raise NotApplicable("the exchanges inside and between machines do not form a product of groups, so "
                                "their order cannot be rotated", where=topology.name)
        return plan
    # hierarchical
    machines = [list(m) for m in topology.machines]
    if len(machines) < 2:
        raise NotApplicable("hierarchical needs more than one machine", where=topology.name)
    rounds: list[list[tuple[int, int]]] = []
    for members in machines:
        grid = _grid(topology, members)
        if grid is None:
            raise NotApplicable(f"the GPUs of machine {machines.index(members)} are neither fully connected nor a "
                                "product of fully connected groups", where=topology.name)
        for k, groups in enumerate(grid):
            if k == len(rounds):
                rounds.append([])
            rounds[k] += _clique_pairs(groups)
    owner = topology.machine_of
    sent = [0] * n
    inter: list[tuple[int, int]] = []
    incomplete: set[int] = set()
    for d in range(n):
        for m, members in enumerate(machines):
            if m == owner[d]:
                continue
            senders = [(topology.route_latency(route), sent[s], s) for s in members
                       if (route := topology.gpu_route(s, d)) is not None]
            if not senders:
                incomplete.add(d)
                continue
            s = min(senders)[2]
            sent[s] += 1
            inter.append((s, d))
    for d in sorted(incomplete):
        inter = [(s, x) for s, x in inter if x != d]  # a partial sum is no use: it gets the result later
    for m, members in enumerate(machines):
        if all(g in incomplete for g in members):
            raise NotApplicable(f"no GPU of machine {m} has a direct route from every other machine",
                                where=topology.name)
    rounds.append(sorted(inter, key=lambda p: ((p[1] - p[0]) % n, p[0])))
    return _Plan(rounds, frozenset(incomplete))


def _sums_everything(n: int, rounds: Sequence[Sequence[tuple[int, int]]]) -> bool:
    """Whether these exchange rounds, in this order, leave every GPU with every input exactly once.

    Each GPU's buffer is two bitsets over the inputs: those it holds, and those it holds more than once. An
    exchange adds the senders' buffers as they were before it; the senders into one GPU are added one layer at
    a time (the k-th sender of every receiver together), so an input arriving twice is seen.
    """
    words = (n + 63) // 64
    gpus = np.arange(n)
    held = np.zeros((n, words), dtype=np.uint64)
    held[gpus, gpus // 64] = np.left_shift(np.uint64(1), (gpus % 64).astype(np.uint64))
    twice = np.zeros_like(held)
    for pairs in rounds:
        if not pairs:
            continue
        src, dst = np.asarray(pairs, dtype=np.int64).T
        order = np.argsort(dst, kind="stable")
        src, dst = src[order], dst[order]
        first = np.searchsorted(dst, dst)  # where each receiver's senders start
        layer = np.arange(len(dst)) - first
        held_before, twice_before = held.copy(), twice.copy()
        for k in range(int(layer.max()) + 1):
            s, d = src[layer == k], dst[layer == k]
            twice[d] |= twice_before[s] | (held[d] & held_before[s])
            held[d] |= held_before[s]
    full = np.full(words, np.iinfo(np.uint64).max, dtype=np.uint64)
    if n % 64:
        full[-1] = np.uint64((1 << (n % 64)) - 1)
    return bool((held == full).all() and not twice.any())


def _clique_pairs(groups: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Every ordered pair inside each group, peers visited at offsets 1, 2, ... as the direct algorithm does."""
    pairs = []
    for group in groups:
        k = len(group)
        for offset in range(1, k):
            pairs += [(group[i], group[(i + offset) % k]) for i in range(k)]
    return pairs


def _linked(topology: Topology, u: int, v: int) -> bool:
    return topology.gpu_route(u, v) is not None and topology.gpu_route(v, u) is not None


def _is_clique(topology: Topology, members: Sequence[int]) -> bool:
    return all(_linked(topology, u, v) for u, v in itertools.combinations(members, 2))


def _grid(topology: Topology, members: Sequence[int]) -> list[list[list[int]]] | None:
    """Rounds of groups forming a product of cliques over ``members``: one round if they are a clique,
    else two (groups of size a, then groups that take one GPU from each), the lowest-latency found."""
    members = sorted(members)
    if _is_clique(topology, members):
        return [[members]]
    size = len(members)
    best: tuple[tuple[float, float], list[list[list[int]]]] | None = None
    for a in sorted((a for a in range(2, size) if size % a == 0), reverse=True):
        blocks = _clique_cover(topology, members, a)
        if blocks is None:
            continue
        transversals = _transversals(topology, blocks)
        if transversals is None:
            continue
        grid = [blocks, transversals]
        cost = _grid_cost(topology, grid)
        if best is None or cost < best[0]:
            best = (cost, grid)
    return None if best is None else best[1]


def _grid_cost(topology: Topology, grid: list[list[list[int]]]) -> tuple[float, float]:
    """(sum of the rounds' slowest route latency, sum of the rounds' slowest (group size - 1) / bandwidth)."""
    latency = data = 0.0
    for groups in grid:
        routes = [topology.gpu_route(u, v) or () for group in groups for u, v in itertools.permutations(group, 2)]
        latency += max((topology.route_latency(r) for r in routes), default=0.0)
        data += max(((len(group) - 1) / topology.route_bandwidth(topology.gpu_route(u, v) or ())
                     for group in groups for u, v in itertools.permutations(group, 2)), default=0.0)
    return round(latency, 9), data


def _clique_cover(topology: Topology, members: list[int], a: int) -> list[list[int]] | None:
    """A partition of ``members`` into cliques of ``a`` GPUs (backtracking, bounded)."""
    budget = [_SEARCH_BUDGET]

    def extend(clique: list[int], candidates: list[int]) -> Iterator[list[int]]:
        if len(clique) == a:
            yield clique
            return
        for i, v in enumerate(candidates):
            budget[0] -= 1
            if budget[0] < 0:
                return
            if len(clique) + len(candidates) - i < a:
                return
            if all(_linked(topology, u, v) for u in clique):
                yield from extend([*clique, v], candidates[i + 1:])

    def solve(left: list[int]) -> list[list[int]] | None:
        if not left:
            return []
        first, rest = left[0], left[1:]
        for clique in extend([first], rest):
            remaining = [v for v in rest if v not in clique]
            tail = solve(remaining)
            if tail is not None:
                return [clique, *tail]
            if budget[0] < 0:
                return None
        return None

    return solve(members)


def _transversals(topology: Topology, blocks: list[list[int]]) -> list[list[int]] | None:
    """Groups taking one GPU from every block, each a clique (label the blocks' GPUs by bipartite matching)."""
    labelled: list[list[int]] = [[g] for g in blocks[0]]  # label i -> the GPUs labelled i so far
    for block in blocks[1:]:
        fits = {i: [g for g in block if all(_linked(topology, g, x) for x in labelled[i])]
                for i in range(len(labelled))}
        match = _matching(fits)
        if match is None:
            return None
        for i, g in match.items():
            labelled[i].append(g)
    return labelled


def _matching(fits: dict[int, list[int]]) -> dict[int, int] | None:
    """A perfect matching of labels to GPUs (augmenting paths), or None."""
    owner: dict[int, int] = {}

    def augment(label: int, seen: set[int]) -> bool:
        for g in fits[label]:
            if g in seen:
                continue
            seen.add(g)
            if g not in owner or augment(owner[g], seen):
                owner[g] = label
                return True
        return False

    for label in sorted(fits):
        if not augment(label, set()):
            return None
    return {label: g for g, label in owner.items()}
