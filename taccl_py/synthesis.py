"""The synthesizer pipeline: sketch -> symmetry -> routing -> ordering -> scheduling -> Schedule.

``synthesize`` turns a topology, a collective and a size into a correct
schedule. It derives a sketch when none is given, decomposes by symmetry,
routes representatives' chunks with the column-generation MILP
(:mod:`solver_models.routing`), orders sends with the greedy list scheduler,
refines times and message merges with CP-SAT where the instance is small enough,
tries several chunk partitionings, simulates every candidate with the
independent simulator and returns the fastest correct one, together with the
NCCL-style baselines and the lower bound. If a baseline is faster, it is
returned instead and the report says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from solver_models._backend import SolverConfig, SolveStats
from solver_models.logical import LogicalGraph, build_logical_graph
from solver_models.ordering import Task, TaskTiming, arrival_order, list_order, pipeline_order
from solver_models.routing import Column, ColumnPool, RoutingPlan, assign_pieces, path_columns, tree_columns
from solver_models.scheduling import merge_candidates, schedule_tasks
from solver_models.symmetry import Symmetry, find_symmetry, trivial_symmetry
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import InputError
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import SimResult, simulate
from taccl_py.sketch import Sketch, derive_sketch
from taccl_py.topology import Topology

__all__ = ["Candidate", "SynthesisOptions", "SynthesisResult", "synthesize"]

ProgressFn = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class SynthesisOptions:
    """Solver control and search breadth. ``chunk_factors=None`` picks them from the size."""

    sketch: Sketch | None = None
    solver: str = "cpsat"
    time_limit_s: float = 60.0
    threads: int = 2
    seed: int = 0
    chunk_factors: tuple[int, ...] | None = None
    max_cpsat_tasks: int = 1200
    channels: int = 2
    max_list_tasks: int = 3000
    max_steps_per_rank: int = 3600
    max_steps_per_threadblock: int = 56
    max_multi_order_transfers: int = 50_000
    compare_baselines: bool = True
    root: int = 0


@dataclass(frozen=True)
class Candidate:
    """One simulated candidate: how it was built and how fast it is."""

    label: str
    chunk_factor: int
    time_us: float | None
    transfers: int
    note: str = ""


@dataclass(frozen=True)
class SynthesisResult:
    """The chosen schedule with everything the report shows."""

    schedule: Schedule
    sim: SimResult
    chosen: str
    synthesized: Candidate | None
    candidates: tuple[Candidate, ...]
    baselines: dict[str, float | None]
    stats: tuple[SolveStats, ...]
    symmetry: str
    sketch: str
    synthesis_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------- helpers
def _steps_per_rank(kind: CollectiveKind, num_gpus: int, chunk_factor: int) -> int:
    """Rough count of MSCCL steps (sends + receives) a rank gets; runtimes cap the nodes per rank."""
    per_piece = {CollectiveKind.ALLREDUCE: 4 * (num_gpus - 1), CollectiveKind.ALLTOALL: 4 * (num_gpus - 1),
                 CollectiveKind.BROADCAST: 2, CollectiveKind.REDUCE: 2}.get(kind, 2 * (num_gpus - 1))
    return per_piece * chunk_factor


def _auto_chunk_factors(kind: CollectiveKind, num_gpus: int, size_bytes: float, latency_us: float,
                        bandwidth_GBps: float, max_steps_per_rank: int) -> tuple[int, ...]:
    """Chunk factors worth trying: more pieces pipeline better until latency per piece dominates
    or the runtime's per-rank step budget runs out. Largest first."""
    rooted = kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
    per_gpu = size_bytes if rooted else size_bytes / num_gpus
    factors = [1]
    for c in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64):
        piece = per_gpu / c
        # a piece should take several link latencies to send, or pipelining costs more than it saves
        if piece / (bandwidth_GBps * 1e3) < 2 * latency_us:
            break
        if _steps_per_rank(kind, num_gpus, c) > max_steps_per_rank:
            break
        factors.append(c)
    picked = [c for c in factors if c & (c - 1) == 0] if len(factors) > 4 else factors
    if factors[-1] not in picked:
        picked.append(factors[-1])
    return tuple(reversed(picked[-3:]))


def _subtree_heights(graph: LogicalGraph, column: Column, piece_bytes: float) -> dict[int, float]:
    """Longest remaining store-and-forward time below every vertex of a tree (for priorities)."""
    children: dict[int, list[int]] = {}
    for e in column.edges:
        u, v = graph.edges[e]
        children.setdefault(u, []).append(e)
    height: dict[int, float] = {}
    for e in reversed(column.edges):
        u, v = graph.edges[e]
        h = graph.latency_us[e] + piece_bytes / (graph.bandwidth_GBps[e] * 1e3) + height.get(v, 0.0)
        height[u] = max(height.get(u, 0.0), h)
    return height


def _image_edge(graph: LogicalGraph, perm: Sequence[int], edge: int) -> int:
    u, v = graph.edges[edge]
    return graph.index[(perm[u], perm[v])]


def _tree_tasks(graph: LogicalGraph, symmetry: Symmetry, plan: RoutingPlan, piece_bytes: float,
                own_first: bool, chunk_id: Callable[[int, int], int]) -> list[Task]:
    """Every GPU's pieces, each along the image of its assigned tree."""
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
                    src, dst = graph.edges[image]
                    own = 0 if (own_first and src == gpu) else 1
                    tasks.append(Task(src=src, dst=dst, chunks=(chunk,), route=graph.routes[image],
                                      latency_us=float(graph.latency_us[image]), bytes=piece_bytes,
                                      bandwidth_GBps=float(graph.bandwidth_GBps[image]), pred=holder.get(u, -1),
                                      priority=(own, -height.get(v, 0.0), j, gpu)))
                    holder[v] = len(tasks) - 1
                j += 1
    return tasks


def _path_tasks(graph: LogicalGraph, symmetry: Symmetry, plan: RoutingPlan, collective: Collective,
                piece_bytes: float) -> list[Task]:
    """Every (source, destination) pair's pieces along the images of their assigned paths."""
    n, c = collective.num_ranks, collective.chunk_factor
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
                    image = _image_edge(graph, perm, e)
                    src_v, dst_v = graph.edges[image]
                    tasks.append(Task(src=src_v, dst=dst_v, chunks=(chunk,), route=graph.routes[image],
                                      latency_us=float(graph.latency_us[image]), bytes=piece_bytes,
                                      bandwidth_GBps=float(graph.bandwidth_GBps[image]), pred=prev,
                                      priority=(1, -remaining, j, gpu)))
                    remaining -= float(graph.latency_us[e]) + piece_bytes / (float(graph.bandwidth_GBps[e]) * 1e3)
                    prev = len(tasks) - 1
                j += 1
    return tasks


def _greedy_groups(tasks: Sequence[Task], timing: TaskTiming) -> list[int]:
    """Merge contiguous chunks on a connection into one message where latency dominates and data is ready."""
    group = list(range(len(tasks)))
    message_start: dict[int, float] = {}
    for i, j in merge_candidates(tasks, timing.order(tasks)):
        t = tasks[j]
        first = group[i]
        start = message_start.setdefault(first, timing.start_us[first])
        ready = timing.arrive_us[t.pred] if t.pred >= 0 else 0.0
        if t.latency_us > t.duration_us and ready <= start + 1e-12:
            group[j] = first
    return group


def _tasks_to_transfers(tasks: Sequence[Task], start_us: Sequence[float], group: Sequence[int]) -> list[Transfer]:
    """Messages in program order (by start time), each with the union of its tasks' chunks."""
    members: dict[int, list[int]] = {}
    for i in range(len(tasks)):
        members.setdefault(group[i], []).append(i)
    firsts = sorted(members, key=lambda g: (start_us[g], tasks[g].priority, g))
    transfers = []
    for g in firsts:
        t = tasks[g]
        chunks = tuple(sorted(c for i in members[g] for c in tasks[i].chunks))
        transfers.append(Transfer(src=t.src, dst=t.dst, chunks=chunks, route=t.route,
                                  op=Op.REDUCE if t.reduce else Op.COPY))
    return transfers


def _reverse_to_reduction(transfers: Sequence[Transfer]) -> list[Transfer]:
    """An Allgather-style schedule on the reversed topology, run backwards as reductions."""
    assert not any(t.after for t in transfers), "explicit orders are added after the reversal"
    return [Transfer(src=t.dst, dst=t.src, chunks=t.chunks, route=tuple(reversed(t.route)), op=Op.REDUCE,
                     channel=t.channel) for t in reversed(transfers)]


def _stagger_channels(transfers: Sequence[Transfer]) -> list[Transfer]:
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
    return result


def _alternate_channels(transfers: Sequence[Transfer], channels: int) -> list[Transfer]:
    """Spread each connection's messages round-robin over ``channels`` channels.

    A connection sends one message after another and each pays the route
    latency; with two channels one message moves its bytes while the next waits
    out its latency, so synchronized senders do not leave a link idle.
    """
    if channels <= 1:
        return list(transfers)
    count: dict[tuple[int, int], int] = {}
    result = []
    for t in transfers:
        k = count.get((t.src, t.dst), 0)
        count[(t.src, t.dst)] = k + 1
        result.append(replace(t, channel=k % channels))
    return result


# ----------------------------------------------------------------------- core
@dataclass
class _Context:
    topology: Topology
    collective_kind: CollectiveKind
    size_bytes: float
    options: SynthesisOptions
    config: SolverConfig
    progress: ProgressFn
    started: float
    stats: list[SolveStats] = field(default_factory=list)
    before: Any = None

    def remaining_s(self) -> float:
        return max(1.0, self.options.time_limit_s - (time.perf_counter() - self.started))

    def report(self, stage: str, **info: Any) -> None:
        self.progress(stage, {"elapsed_s": time.perf_counter() - self.started, **info})


Ordering = tuple[str, list[float], list[int]]
"""(rule, start times giving the program order, message group of every task)."""


def _orderings(ctx: _Context, tasks: list[Task], num_links: int) -> list[Ordering]:
    """Candidate orders of the tasks; each will be simulated and the fastest kept."""
    latency_bound = any(t.latency_us > t.duration_us for t in tasks)
    found: list[Ordering] = []
    timing = arrival_order(tasks, num_links)
    found.append(("arrival order", timing.start_us,
                  _greedy_groups(tasks, timing) if latency_bound else list(range(len(tasks)))))
    ctx.stats.append(SolveStats(stage="ordering (greedy, arrival rule)", solver="greedy", status="done",
                                objective=timing.makespan_us, variables=len(tasks),
                                note="makespan estimate with one message per link at a time, us"))
    if len(tasks) <= ctx.options.max_list_tasks:
        timing_list = list_order(tasks, num_links)
        found.append(("list schedule", timing_list.start_us,
                      _greedy_groups(tasks, timing_list) if latency_bound else list(range(len(tasks)))))
        ctx.stats.append(SolveStats(stage="ordering (greedy, most-work-first rule)", solver="greedy",
                                    status="done", objective=timing_list.makespan_us, variables=len(tasks),
                                    note="makespan estimate, us"))
        if timing_list.makespan_us < timing.makespan_us:
            timing = timing_list
    if not latency_bound and len(tasks) <= ctx.options.max_multi_order_transfers:
        found.append(("pipelined trees", pipeline_order(tasks).start_us, list(range(len(tasks)))))
    ctx.report("ordering", incumbent_us=timing.makespan_us, tasks=len(tasks))
    if len(tasks) <= ctx.options.max_cpsat_tasks:
        budget = min(ctx.remaining_s() / 3, max(2.0, ctx.options.time_limit_s / 6))
        solved, stats = schedule_tasks(tasks, num_links, timing, replace(ctx.config, time_limit_s=budget),
                                       allow_merge=latency_bound)
        ctx.stats.append(stats)
        ctx.report("scheduling", incumbent_us=stats.objective, bound_us=stats.bound, gap=stats.gap)
        found.insert(0, ("CP-SAT schedule", solved.start_us, solved.group))
    else:
        ctx.stats.append(SolveStats(stage="scheduling + contiguity", solver="CP-SAT", status="skipped",
                                    note=f"{len(tasks)} tasks > {ctx.options.max_cpsat_tasks}: greedy orders kept, "
                                         "greedy message merging"))
    return found


def _tree_schedules(ctx: _Context, topology: Topology, graph: LogicalGraph, symmetry: Symmetry, pool: ColumnPool,
                    collective: Collective, reverse: bool) -> list[tuple[str, list[Transfer]]]:
    c = collective.chunk_factor
    n = collective.num_ranks
    rooted = collective.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
    piece_bytes = (ctx.size_bytes if rooted else ctx.size_bytes / n) / c
    plan = _assign(ctx, pool, c, piece_bytes)
    own_first = bool(ctx.options.sketch and ctx.options.sketch.enforce_ordering)

    def chunk_id(gpu: int, j: int) -> int:
        return j if rooted else gpu * c + j

    tasks = _tree_tasks(graph, symmetry, plan, piece_bytes, own_first, chunk_id)
    result = []
    for label, transfers in _channel_variants(ctx, tasks, _orderings(ctx, tasks, len(topology.links))):
        result.append((label, _reverse_to_reduction(transfers) if reverse else transfers))
    return result


def _paths_schedules(ctx: _Context, topology: Topology, graph: LogicalGraph, symmetry: Symmetry, pool: ColumnPool,
                     collective: Collective) -> list[tuple[str, list[Transfer]]]:
    piece_bytes = collective.chunk_bytes(ctx.size_bytes)
    plan = _assign(ctx, pool, collective.chunk_factor, piece_bytes)
    tasks = _path_tasks(graph, symmetry, plan, collective, piece_bytes)
    return _channel_variants(ctx, tasks, _orderings(ctx, tasks, len(topology.links)))


def _channel_variants(ctx: _Context, tasks: Sequence[Task], orderings: list[Ordering]) -> list[tuple[str,
                                                                                                   list[Transfer]]]:
    """Each ordering on one channel per connection, and also spread over more channels (all of them on
    instances small enough, the first one otherwise)."""
    variants = []
    for k, (label, starts, group) in enumerate(orderings):
        transfers = _tasks_to_transfers(tasks, starts, group)
        variants.append((label, transfers))
        if ctx.options.channels > 1 and (k == 0 or len(tasks) <= ctx.options.max_multi_order_transfers):
            spread = _alternate_channels(transfers, ctx.options.channels)
            variants.append((f"{label}, {ctx.options.channels} channels", spread))
            if k == 0:
                # staggered once the whole schedule is assembled (see synthesize)
                variants.append((f"{label}, {ctx.options.channels} staggered channels", spread))
    return variants


def _assign(ctx: _Context, pool: ColumnPool, pieces: int, piece_bytes: float) -> RoutingPlan:
    plan = assign_pieces(pool, pieces, piece_bytes, replace(ctx.config, time_limit_s=min(ctx.remaining_s() / 4,
                                                                                          30.0)))
    ctx.stats.append(plan.stats[1])
    ctx.report("routing", incumbent_us=plan.stats[1].objective, bound_us=plan.stats[1].bound,
               gap=plan.stats[1].gap, chunk_factor=pieces)
    return plan


def _prepare(ctx: _Context, topology: Topology, sketch: Sketch, fixed_root: int | None) -> tuple[LogicalGraph,
                                                                                                  Symmetry]:
    graph = build_logical_graph(topology, sketch)
    allowed = frozenset(graph.edges)
    if fixed_root is not None:
        symmetry = trivial_symmetry(topology)
    else:
        symmetry = find_symmetry(topology, offsets=sketch.symmetry_offsets or None, allowed=allowed)
    ctx.report("symmetry", detail=symmetry.describe())
    return graph, symmetry


def synthesize(topology: Topology, kind: CollectiveKind, size_bytes: float,
               options: SynthesisOptions | None = None, progress: ProgressFn | None = None) -> SynthesisResult:
    """Synthesize, verify by simulation, compare with baselines and the bound; return the fastest correct result."""
    options = options or SynthesisOptions()
    if size_bytes <= 0:
        raise InputError(f"size must be > 0 bytes (got {size_bytes})", where="--size")
    ctx = _Context(topology, kind, size_bytes, options, SolverConfig(options.solver, options.time_limit_s,
                                                                     options.threads, options.seed),
                   progress or (lambda stage, info: None), time.perf_counter())
    sketch = options.sketch or derive_sketch()
    n = topology.num_gpus
    fixed_root = options.root if kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE) else None
    notes: list[str] = []
    candidates: list[Candidate] = []
    best: tuple[float, Schedule, SimResult, Candidate] | None = None

    reverse_needed = kind in (CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE, CollectiveKind.REDUCE)
    forward_needed = kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE, CollectiveKind.BROADCAST)
    lp_budget = max(2.0, options.time_limit_s / 4)
    graph, symmetry = _prepare(ctx, topology, sketch, fixed_root)
    roots = (options.root,) if fixed_root is not None else None
    pool = rev_pool = None
    rev_topology = topology.reversed()
    rev_graph = rev_symmetry = None
    if kind is CollectiveKind.ALLTOALL:
        pool = path_columns(topology, graph, symmetry, lp_budget_s=lp_budget)
        ctx.stats.append(pool.stats)
    else:
        if forward_needed:
            pool = tree_columns(topology, graph, symmetry, roots=roots, lp_budget_s=lp_budget)
            ctx.stats.append(pool.stats)
        if reverse_needed:
            rev_graph, rev_symmetry = _prepare(ctx, rev_topology, sketch, fixed_root)
            rev_pool = tree_columns(rev_topology, rev_graph, rev_symmetry, roots=roots, lp_budget_s=lp_budget)
            ctx.stats.append(rev_pool.stats)
    ctx.report("routing LP", bound_us=(pool or rev_pool).lp_time_per_byte_us * size_bytes / n  # type: ignore[union-attr]
               if pool or rev_pool else None)

    min_latency = min(link.latency for link in topology.links)
    mean_bw = sum(link.bandwidth for link in topology.links) / len(topology.links)
    if options.chunk_factors:
        factors = options.chunk_factors
    elif sketch.chunk_factor:
        factors = (sketch.chunk_factor,)
    else:
        factors = _auto_chunk_factors(kind, n, size_bytes, max(min_latency, 1e-3), mean_bw,
                                      options.max_steps_per_rank)
    for c in factors:
        if candidates and ctx.remaining_s() <= 1.0:
            notes.append(f"time limit reached before chunk factor {c} was tried")
            break
        collective = Collective(kind, n, c, options.root)
        variants: list[tuple[str, list[Transfer]]]
        if kind is CollectiveKind.ALLTOALL:
            assert pool is not None
            variants = _paths_schedules(ctx, topology, graph, symmetry, pool, collective)
        else:
            parts: list[list[tuple[str, list[Transfer]]]] = []
            if reverse_needed:
                assert rev_pool is not None and rev_graph is not None and rev_symmetry is not None
                rev_col = Collective(CollectiveKind.ALLGATHER if kind is not CollectiveKind.REDUCE else
                                     CollectiveKind.BROADCAST, n, c, options.root)
                parts.append(_tree_schedules(ctx, rev_topology, rev_graph, rev_symmetry, rev_pool, rev_col,
                                             reverse=True))
            if forward_needed:
                assert pool is not None
                fwd_col = Collective(CollectiveKind.ALLGATHER if kind is not CollectiveKind.BROADCAST else
                                     CollectiveKind.BROADCAST, n, c, options.root)
                parts.append(_tree_schedules(ctx, topology, graph, symmetry, pool, fwd_col, reverse=False))
            # the same ordering rule for both phases of an Allreduce
            labels = [label for label, _ in parts[0]]
            variants = [(label, [t for part in parts for lab, ts in part if lab == label for t in ts])
                        for label in labels if all(any(lab == label for lab, _ in part) for part in parts)]
        seen_orders: set[tuple[Transfer, ...]] = set()
        for how, transfers in variants:
            if "staggered" in how:
                transfers = _stagger_channels(transfers)
            if tuple(transfers) in seen_orders:
                continue
            seen_orders.add(tuple(transfers))
            if candidates and ctx.remaining_s() <= 1.0:
                notes.append(f"time limit reached: ordering {how!r} of chunk factor {c} not simulated")
                break
            schedule = Schedule(collective, tuple(transfers), name=f"taccl-{kind.value}-c{c}",
                                topology=topology.name,
                                notes={"generator": "taccl_py synthesize", "chunk_factor": c, "ordering": how})
            ctx.report("simulating", chunk_factor=c, ordering=how, transfers=len(transfers))
            sim = simulate(topology, schedule, size_bytes)
            cand = Candidate(label=f"chunk factor {c}, {how}", chunk_factor=c, time_us=sim.time_us,
                             transfers=len(transfers), note=sim.error or "")
            candidates.append(cand)
            ctx.report("candidate", chunk_factor=c, ordering=how, time_us=sim.time_us, correct=sim.correct)
            if not sim.correct:
                notes.append(f"chunk factor {c}, {how}: the simulator rejected the schedule: {sim.error}")
                continue
            assert sim.time_us is not None
            if best is None or sim.time_us < best[0]:
                best = (sim.time_us, schedule, sim, cand)

    baselines: dict[str, float | None] = {}
    chosen = "synthesized"
    if options.compare_baselines:
        best_baseline = _best_baseline(topology, kind, size_bytes, options.root, baselines)
        if best_baseline is not None and (best is None or best_baseline[0] < best[0] * (1 - 1e-9)):
            name, sched, sim = best_baseline[1], best_baseline[2], best_baseline[3]
            if best is not None:
                notes.append(f"the {name} baseline ({best_baseline[0]:.4g} us) is faster than the synthesized "
                             f"algorithm ({best[0]:.4g} us): returning the baseline")
            else:
                notes.append(f"no synthesized candidate was correct: returning the {name} baseline")
            best = (best_baseline[0], sched, sim, Candidate(name, sched.collective.chunk_factor, best_baseline[0],
                                                            len(sched.transfers)))
            chosen = f"baseline {name}"
    if best is None:
        raise InputError("synthesis produced no correct schedule and no baseline applies")
    synthesized = next((c for c in candidates if c.time_us is not None and c.time_us == min(
        (x.time_us for x in candidates if x.time_us is not None), default=math.inf)), None)
    return SynthesisResult(schedule=best[1], sim=best[2], chosen=chosen, synthesized=synthesized,
                           candidates=tuple(candidates), baselines=baselines, stats=tuple(ctx.stats),
                           symmetry=symmetry.describe(), sketch=sketch.describe(),
                           synthesis_s=time.perf_counter() - ctx.started, notes=tuple(notes))


def _best_baseline(topology: Topology, kind: CollectiveKind, size_bytes: float, root: int,
                   times: dict[str, float | None]) -> tuple[float, str, Schedule, SimResult] | None:
    from taccl_py.baselines import applicable_baselines, baseline

    best: tuple[float, str, Schedule, SimResult] | None = None
    for name in applicable_baselines(topology, kind):
        schedule = baseline(topology, kind, name, root=root)
        sim = simulate(topology, schedule, size_bytes)
        times[name] = sim.time_us
        if sim.time_us is not None and (best is None or sim.time_us < best[0]):
            best = (sim.time_us, name, schedule, sim)
    return best
