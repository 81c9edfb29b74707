"""Stage 4: for one chunk factor, the candidate schedules (an ordering rule x a channel layout).

For every phase the routing plan's pieces become *tasks* (one piece over one
logical edge), ordered by each greedy rule and, where the instance is small
enough, by the CP-SAT scheduling model. Every ordering is also spread over
several channels per connection, and the first one over staggered channels.
The phases of a collective (ReduceScatter then Allgather for Allreduce) are
joined under the same variant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from solver_models._backend import SolveStats
from solver_models.logical import LogicalGraph
from solver_models.ordering import EndpointUse, Task, TaskTiming, arrival_order, list_order, pipeline_order
from solver_models.routing import Column, RoutingPlan, assign_pieces
from solver_models.scheduling import merge_candidates, schedule_tasks
from solver_models.symmetry import Symmetry
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Op, Transfer
from taccl_py.synthesis.chunking import selectable_at
from taccl_py.synthesis.endpoint import channel_limit, endpoint_use
from taccl_py.synthesis.options import Run
from taccl_py.synthesis.routes import Phase, RoutePools
from taccl_py.synthesis.streams import StreamLayout, stream_layouts, stream_transfers
from taccl_py.tolerances import SAME_TIME_US
from taccl_py.topology import Topology
from taccl_py.units import gbps_to_bytes_per_us, transfer_time_us

__all__ = [
    "CandidateSchedule",
    "Ordering",
    "OrderingRule",
    "PhaseVariants",
    "Variant",
    "candidate_schedules",
    "phase_variants",
    "streamed_variants",
]


class OrderingRule(Enum):
    """How the sends on every link are ordered (the value is the report's wording)."""

    CPSAT = "CP-SAT schedule"
    ARRIVAL = "arrival order"
    LIST = "list schedule"
    PIPELINE = "pipelined trees"


@dataclass(frozen=True)
class Ordering:
    """A program order of the tasks (by ``start_us``) and the message each task travels in.

    ``group[i]`` is the first task of task i's message (contiguous chunks merged into one send).
    """

    rule: OrderingRule
    start_us: tuple[float, ...]
    group: tuple[int, ...]


@dataclass(frozen=True)
class Variant:
    """An ordering rule on ``channels`` channels per connection, optionally ``staggered`` or ``streamed``.

    Staggered: a connection's channel k starts only once its channel k-1's first message has arrived.
    Streamed: the cross-machine sends rewritten by :func:`~taccl_py.synthesis.streams.stream_transfers`.
    Relay: a GPU's own pieces on channel 0, the pieces it forwards on channel 1 (:func:`_relay_channels`).
    """

    rule: OrderingRule
    channels: int = 1
    staggered: bool = False
    stream: StreamLayout | None = None
    relay: bool = False

    def describe(self) -> str:
        if self.stream is not None:
            return f"{self.rule.value}, {self.stream.describe()}"
        if self.relay:
            return f"{self.rule.value}, own and forwarded pieces on 2 channels"
        if self.channels == 1:
            return self.rule.value
        return f"{self.rule.value}, {self.channels} {'staggered ' if self.staggered else ''}channels"


@dataclass(frozen=True)
class PhaseVariants:
    """One phase's candidate transfer lists (in variant order) and the solver statistics that made them."""

    variants: tuple[tuple[Variant, tuple[Transfer, ...]], ...]
    stats: tuple[SolveStats, ...]


@dataclass(frozen=True)
class CandidateSchedule:
    """The whole collective's transfers under one variant, ready to simulate.

    ``chunk_factor``: the schedule's chunks per GPU block (0: the factor the variants were made for; a
    streamed variant cuts pieces further).
    """

    variant: Variant
    transfers: tuple[Transfer, ...]
    chunk_factor: int = 0


# ------------------------------------------------------------------------- tasks
def _subtree_heights(graph: LogicalGraph, column: Column, piece_bytes: float) -> dict[int, float]:
    """Longest remaining store-and-forward time below every vertex of a tree (for priorities)."""
    height: dict[int, float] = {}
    for e in reversed(column.edges):
        u, v = graph.edges[e]
        h = transfer_time_us(piece_bytes, graph.bandwidth_GBps[e], graph.latency_us[e]) + height.get(v, 0.0)
        height[u] = max(height.get(u, 0.0), h)
    return height


def _image_edge(graph: LogicalGraph, perm: Sequence[int], edge: int) -> int:
    u, v = graph.edges[edge]
    return graph.index[(perm[u], perm[v])]


def _task(graph: LogicalGraph, edge: int, chunk: int, piece_bytes: float, pred: int,
          priority: tuple[float, ...]) -> Task:
    src, dst = graph.edges[edge]
    return Task(src=src, dst=dst, chunks=(chunk,), route=graph.routes[edge], latency_us=float(graph.latency_us[edge]),
                bytes=piece_bytes, bandwidth_GBps=float(graph.bandwidth_GBps[edge]), pred=pred, priority=priority)


def tree_tasks(graph: LogicalGraph, symmetry: Symmetry, plan: RoutingPlan, piece_bytes: float, own_first: bool,
               chunk_id: Callable[[int, int], int]) -> list[Task]:
    """Every GPU's pieces, each along the image of its assigned tree.

    Priority: the sender's own pieces first (if ``own_first``), then the deepest subtree, piece, GPU.
    """
    tasks: list[Task] = []
    heights: dict[int, dict[int, float]] = {}
    for (gpu, _), choice in sorted(plan.assignment.items()):
        j = 0
        for a in choice:
            col, perm = a.column, symmetry.perms[a.perm]
            height = heights.setdefault(id(col), _subtree_heights(graph, col, piece_bytes))
            for _ in range(a.count):
                chunk = chunk_id(gpu, j)
                holder: dict[int, int] = {}
                for e in col.edges:
                    u, v = graph.edges[e]
                    image = _image_edge(graph, perm, e)
                    own = 0 if (own_first and graph.edges[image][0] == gpu) else 1
                    tasks.append(_task(graph, image, chunk, piece_bytes, holder.get(u, -1),
                                       (own, -height.get(v, 0.0), j, gpu)))
                    holder[v] = len(tasks) - 1
                j += 1
    return tasks


def path_tasks(graph: LogicalGraph, symmetry: Symmetry, plan: RoutingPlan, num_ranks: int, chunk_factor: int,
               piece_bytes: float) -> list[Task]:
    """Every (source, destination) pair's pieces along the images of their assigned paths."""
    n, c = num_ranks, chunk_factor
    tasks: list[Task] = []
    for (gpu, dst), choice in sorted(plan.assignment.items()):
        j = 0
        for a in choice:
            col, perm = a.column, symmetry.perms[a.perm]
            for _ in range(a.count):
                chunk = (gpu * n + dst) * c + j
                prev = -1
                remaining = col.path_time_us(graph, piece_bytes)
                for e in col.edges:
                    tasks.append(_task(graph, _image_edge(graph, perm, e), chunk, piece_bytes, prev,
                                       (1, -remaining, j, gpu)))
                    remaining -= transfer_time_us(piece_bytes, float(graph.bandwidth_GBps[e]),
                                                  float(graph.latency_us[e]))
                    prev = len(tasks) - 1
                j += 1
    return tasks


# ---------------------------------------------------------------------- orderings
def _greedy_groups(tasks: Sequence[Task], timing: TaskTiming) -> tuple[int, ...]:
    """Merge contiguous chunks on a connection into one message where latency dominates and data is ready."""
    group = list(range(len(tasks)))
    message_start: dict[int, float] = {}
    for i, j in merge_candidates(tasks, timing.order(tasks)):
        t = tasks[j]
        first = group[i]
        start = message_start.setdefault(first, timing.start_us[first])
        ready = timing.arrive_us[t.pred] if t.pred >= 0 else 0.0
        if t.latency_us > t.duration_us and ready <= start + SAME_TIME_US:
            group[j] = first
    return tuple(group)


def _greedy(rule: OrderingRule, tasks: Sequence[Task], timing: TaskTiming, merge: bool) -> Ordering:
    group = _greedy_groups(tasks, timing) if merge else tuple(range(len(tasks)))
    return Ordering(rule, tuple(timing.start_us), group)


def orderings(run: Run, tasks: list[Task], num_links: int,
              endpoint: EndpointUse | None = None) -> tuple[list[Ordering], list[SolveStats]]:
    """Candidate orders of the tasks, the CP-SAT schedule first when it ran; each will be simulated.

    ``endpoint``: the tasks' use of GPU memory and channels, which the greedy estimates then count.
    """
    options = run.options
    latency_bound = any(t.latency_us > t.duration_us for t in tasks)
    with run.stage("ordering"):
        found, stats, timing = _greedy_orderings(options.max_list_tasks, options.max_multi_order_transfers,
                                                 tasks, num_links, latency_bound, endpoint)
    run.report("ordering", incumbent_us=timing.makespan_us, tasks=len(tasks))
    if len(tasks) <= options.max_cpsat_tasks:
        with run.stage("scheduling"):
            solved, schedule_stats = schedule_tasks(tasks, num_links, timing,
                                                    run.solver_config(options.work.scheduling_work),
                                                    allow_merge=latency_bound)
        stats.append(schedule_stats)
        run.report("scheduling", incumbent_us=schedule_stats.objective, bound_us=schedule_stats.bound,
                   gap=schedule_stats.gap)
        found.insert(0, Ordering(OrderingRule.CPSAT, tuple(solved.start_us), tuple(solved.group)))
    else:
        stats.append(SolveStats(stage="scheduling + contiguity", solver="CP-SAT", status="skipped",
                                note=f"{len(tasks)} tasks > {options.max_cpsat_tasks}: greedy orders kept, "
                                     "greedy message merging"))
    return found, stats


def _greedy_orderings(max_list_tasks: int, max_multi_order_transfers: int, tasks: list[Task], num_links: int,
                      latency_bound: bool, endpoint: EndpointUse | None = None,
                      ) -> tuple[list[Ordering], list[SolveStats], TaskTiming]:
    """The greedy rules' orders, their statistics and the best estimate (CP-SAT's hint)."""
    found: list[Ordering] = []
    stats: list[SolveStats] = []
    timing = arrival_order(tasks, num_links, endpoint)
    found.append(_greedy(OrderingRule.ARRIVAL, tasks, timing, latency_bound))
    stats.append(SolveStats(stage="ordering (greedy, arrival rule)", solver="greedy", status="done",
                            objective=timing.makespan_us, variables=len(tasks),
                            note="makespan estimate with one message per link at a time, us"))
    if len(tasks) <= max_list_tasks:
        timing_list = list_order(tasks, num_links, endpoint=endpoint)
        found.append(_greedy(OrderingRule.LIST, tasks, timing_list, latency_bound))
        stats.append(SolveStats(stage="ordering (greedy, most-work-first rule)", solver="greedy", status="done",
                                objective=timing_list.makespan_us, variables=len(tasks), note="makespan estimate, us"))
        if timing_list.makespan_us < timing.makespan_us:
            timing = timing_list
    if not latency_bound and len(tasks) <= max_multi_order_transfers:
        found.append(Ordering(OrderingRule.PIPELINE, tuple(pipeline_order(tasks).start_us),
                              tuple(range(len(tasks)))))
    return found, stats, timing


# ------------------------------------------------------------------- transfers
def _tasks_to_transfers(tasks: Sequence[Task], ordering: Ordering, *, relay: bool = False) -> tuple[Transfer, ...]:
    """Messages in program order (by start time), each with the union of its tasks' chunks.

    ``relay``: a message that starts a piece's tree (the sender's own piece) on channel 0, one that
    forwards a piece on channel 1 (see :func:`_channel_variants`).
    """
    start_us, group = ordering.start_us, ordering.group
    members: dict[int, list[int]] = {}
    for i in range(len(tasks)):
        members.setdefault(group[i], []).append(i)
    firsts = sorted(members, key=lambda g: (start_us[g], tasks[g].priority, g))
    transfers = []
    for g in firsts:
        t = tasks[g]
        chunks = tuple(sorted(c for i in members[g] for c in tasks[i].chunks))
        transfers.append(Transfer(src=t.src, dst=t.dst, chunks=chunks, route=t.route,
                                  op=Op.REDUCE if t.reduce else Op.COPY, channel=int(relay and t.pred >= 0)))
    return tuple(transfers)


def _reverse_to_reduction(transfers: Sequence[Transfer]) -> tuple[Transfer, ...]:
    """An Allgather-style schedule on the reversed topology, run backwards as reductions."""
    assert not any(t.after for t in transfers), "explicit orders are added after the reversal"
    return tuple(Transfer(src=t.dst, dst=t.src, chunks=t.chunks, route=tuple(reversed(t.route)), op=Op.REDUCE,
                          channel=t.channel) for t in reversed(transfers))


def _stagger_channels(transfers: Sequence[Transfer]) -> tuple[Transfer, ...]:
    """Start a connection's channel k only once its channel k-1's first message has arrived.

    Otherwise every channel starts at once and the channels run in lockstep, all
    waiting out their latency at the same moments; staggered, one channel moves
    bytes while the other waits. The dependency is on the same sender, so MSCCL
    can express it.
    """
    first: dict[tuple[int, int, int], int] = {}
    result = list(transfers)
    for i, t in enumerate(transfers):
        key = (t.src, t.dst, t.channel)
        if key in first:
            continue
        first[key] = i
        prev = first.get((t.src, t.dst, t.channel - 1))
        if t.channel > 0 and prev is not None and prev not in t.after:
            result[i] = replace(t, after=(*t.after, prev))
    return tuple(result)


def _alternate_channels(transfers: Sequence[Transfer], channels: int) -> tuple[Transfer, ...]:
    """Spread each connection's messages round-robin over ``channels`` channels.

    A connection sends one message after another and each pays the route
    latency; with two channels one message moves its bytes while the next waits
    out its latency, so synchronized senders do not leave a link idle.
    """
    if channels <= 1:
        return tuple(transfers)
    count: dict[tuple[int, int], int] = {}
    result = []
    for t in transfers:
        k = count.get((t.src, t.dst), 0)
        count[(t.src, t.dst)] = k + 1
        result.append(replace(t, channel=k % channels))
    return tuple(result)


def _channel_variants(run: Run, tasks: Sequence[Task], found: Sequence[Ordering],
                      limit: int | None = None) -> list[tuple[Variant, tuple[Transfer, ...]]]:
    """Each ordering on one channel per connection, and also spread over more channels (all of them on
    instances small enough, the first one otherwise); the first one also staggered, and with its own and
    forwarded pieces apart. ``limit``: the communication channels the GPUs give (no more are used).

    Apart: a connection carries the sender's own pieces on channel 0 and the pieces it forwards on channel 1,
    two FIFOs. On one, a forwarded piece queues behind the own pieces ordered before it (all ready at once)
    and the forwarding waits for them; apart, it moves as soon as it has arrived, sharing the links with the
    own pieces, which keep the links busy to the end. (2xDGX-2 Allgather 1 GB: the pieces that crossed
    machines were relayed only after every local piece had gone, 8,445 us; apart, 8,344 us.)
    """
    channels = run.options.channels if limit is None else min(run.options.channels, limit)
    variants = []
    relays = any(t.pred >= 0 for t in tasks) and any(t.pred < 0 for t in tasks)
    for k, ordering in enumerate(found):
        transfers = _tasks_to_transfers(tasks, ordering)
        variants.append((Variant(ordering.rule), transfers))
        if channels > 1 and (k == 0 or len(tasks) <= run.options.max_multi_order_transfers):
            spread = _alternate_channels(transfers, channels)
            variants.append((Variant(ordering.rule, channels), spread))
            if k == 0:
                # the channel dependencies are added once the whole schedule is joined (candidate_schedules)
                variants.append((Variant(ordering.rule, channels, staggered=True), spread))
                if relays:
                    variants.append((Variant(ordering.rule, 2, relay=True),
                                     _tasks_to_transfers(tasks, ordering, relay=True)))
    return variants


# ------------------------------------------------------------------------ phases
def _assign(run: Run, phase: Phase, pieces: int, piece_bytes: float) -> RoutingPlan:
    with run.stage("routing"):
        plan = assign_pieces(phase.pool, pieces, piece_bytes, run.solver_config(run.options.work.master_work))
    master = plan.stats[1]
    run.report("routing", incumbent_us=master.objective, bound_us=master.bound, gap=master.gap, chunk_factor=pieces)
    return plan


def phase_variants(run: Run, phase: Phase, chunk_factor: int, size_bytes: float, *,
                   after_reduction: bool = False) -> PhaseVariants:
    """Route one phase's pieces (integer master), order them every way, spread them over channels.

    ``after_reduction``: the Allgather half of an Allreduce (for the engine's memory estimate).
    """
    d = phase.direction
    n, c = d.topology.num_gpus, chunk_factor
    rooted = phase.rooted
    if phase.kind is CollectiveKind.ALLTOALL:
        piece_bytes = size_bytes / (n * c)
    else:
        piece_bytes = (size_bytes if rooted else size_bytes / n) / c
    plan = _assign(run, phase, c, piece_bytes)
    with run.stage("ordering"):
        if phase.kind is CollectiveKind.ALLTOALL:
            tasks = path_tasks(d.graph, d.symmetry, plan, n, c, piece_bytes)
        else:
            sketch = run.options.sketch
            own_first = bool(sketch and sketch.enforce_ordering)
            tasks = tree_tasks(d.graph, d.symmetry, plan, piece_bytes, own_first,
                               lambda gpu, j: j if rooted else gpu * c + j)
    aware = run.knows_endpoint(d.topology)
    use = endpoint_use(d.topology, run.options.endpoint, tasks, reduction=phase.reversed,
                       after_reduction=after_reduction, paths=phase.kind is CollectiveKind.ALLTOALL) if aware else None
    found, order_stats = orderings(run, tasks, len(d.topology.links), use)
    with run.stage("ordering"):
        limit = channel_limit(d.topology, run.options.endpoint) if aware else None
        # the XML repeats the schedule's channels once per instance
        variants = _channel_variants(run, tasks, found,
                                     None if limit is None else max(1, limit // run.options.instances))
        if phase.reversed:
            variants = [(v, _reverse_to_reduction(ts)) for v, ts in variants]
    return PhaseVariants(tuple(variants), (plan.stats[1], *order_stats))


def candidate_schedules(run: Run, topology: Topology, kind: CollectiveKind, pools: RoutePools, chunk_factor: int,
                        size_bytes: float, *, first_factor: bool = True) -> tuple[list[CandidateSchedule],
                                                                                  list[SolveStats]]:
    """Every variant that all phases produced, the phases joined in order, staggered where asked; then the
    first ordering with its machine links streamed, where that applies (:func:`streamed_variants`: every
    layout for the first chunk factor tried, the first layout for the others)."""
    parts = [phase_variants(run, phase, chunk_factor, size_bytes,
                            after_reduction=kind is CollectiveKind.ALLREDUCE and not phase.reversed)
             for phase in pools.phases]
    stats = [s for part in parts for s in part.stats]
    # the same variant in every phase of an Allreduce
    by_variant = [dict(part.variants) for part in parts]
    joined = []
    with run.stage("ordering"):
        for variant, _ in parts[0].variants:
            if all(variant in found for found in by_variant):
                transfers = tuple(t for found in by_variant for t in found[variant])
                joined.append(CandidateSchedule(variant,
                                                _stagger_channels(transfers) if variant.staggered else transfers,
                                                chunk_factor))
        if joined:
            joined += streamed_variants(run, topology, Collective(kind, topology.num_gpus, chunk_factor),
                                        joined[0], size_bytes, every_layout=first_factor)
    return joined, stats


def _machine_links_bind(topology: Topology, transfers: Sequence[Transfer], cross: Sequence[Transfer]) -> bool:
    """Is a link that only cross-machine transfers use (a NIC, an IB link) as busy as the busiest link, within 2%?

    Streams pace the machine links; where those have slack (the binding cut is inside the machines, as on
    MI250 or DGX-2) they cannot help, and building and simulating them would only cost time.
    """
    busy = [0.0] * len(topology.links)
    for t in transfers:
        for li in t.route:
            busy[li] += len(t.chunks) / topology.links[li].bandwidth
    cross_links = {li for t in cross for li in t.route}
    machine = topology.machine_of
    inside = {li for t in transfers if machine[t.src] == machine[t.dst] for li in t.route}
    crossing = (cross_links - inside) or cross_links
    return max(busy[li] for li in crossing) >= 0.98 * max(busy)


def streamed_variants(run: Run, topology: Topology, collective: Collective, base: CandidateSchedule,
                      size_bytes: float, *, every_layout: bool = True) -> list[CandidateSchedule]:
    """``base`` with its cross-machine sends streamed, in every layout of :func:`stream_layouts` (or only the
    first, which measured best or within 0.1% of the best everywhere) that pays.

    Tried when the chunk factor was chosen here (not given by ``--chunk-factor`` or the sketch: a
    streamed file has more chunks per block), when the file the runtime would run is still selected at
    the size, and when even the smallest part takes longer to send than a machine link's latency (below
    that the streams' waits cost more than they save).
    """
    options = run.options
    if options.chunk_factors or (options.sketch is not None and options.sketch.chunk_factor):
        return []
    limit = channel_limit(topology, options.endpoint) if run.knows_endpoint(topology) else None
    if limit is not None and limit // options.instances < 2:  # a streamed layout takes two channels per instance
        return []
    machine = topology.machine_of
    cross = [t for t in base.transfers if machine[t.src] != machine[t.dst]]
    if not cross or base.variant.channels != 1 or not _machine_links_bind(topology, base.transfers, cross):
        return []
    chunk_bytes = collective.chunk_bytes(size_bytes)
    worst = max(cross, key=lambda t: (topology.route_latency(t.route) * topology.route_bandwidth(t.route), t.route))
    out = []
    for layout in stream_layouts() if every_layout else stream_layouts()[:1]:
        part_us = chunk_bytes / layout.parts / gbps_to_bytes_per_us(topology.route_bandwidth(worst.route))
        cut = replace(collective, chunk_factor=collective.chunk_factor * layout.parts)
        if part_us <= topology.route_latency(worst.route) or not (
                selectable_at(cut, size_bytes, options.element_bytes, options.instances)
                or not selectable_at(collective, size_bytes, options.element_bytes, options.instances)):
            continue
        streamed = stream_transfers(topology, collective, base.transfers, size_bytes, layout)
        if streamed is not None:
            out.append(CandidateSchedule(replace(base.variant, channels=2, stream=layout), streamed[1],
                                         streamed[0].chunk_factor))
    return out
