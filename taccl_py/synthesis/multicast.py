"""Synthesis through the switches: multicast trees and in-network reductions routed by the synthesizer.

Where the topology's switches replicate (``multicast``) or combine (``reduce``)
data, this stage routes the collective's own trees through them, next to the
unicast stages and the offload baselines:

* **Trees** (Allgather, Broadcast; ReduceScatter, Reduce on the reversed
  topology, where the switches that ``reduce`` are the ones that may branch;
  Allreduce as both): column generation over route trees of the *branch graph*
  (:mod:`solver_models.multicast`), whose hops are network groups where the
  tree branches in a switch and unicast transfers elsewhere (a GPU may relay).
  The master LP minimizes the bottleneck time with a link counted once per hop,
  the capability-aware cut bound's accounting (:mod:`taccl_py.bounds`); the
  integer master splits every GPU's pieces over its trees; the unicast stages'
  orderings (greedy rules and CP-SAT) order the hops; a reduction phase is the
  tree phase run backwards, each group then an in-network reduction.
* **Latency classes**: in the fluid model a group is one flow that the nearest
  receiver starts and the farthest ends, so on a switch tree with uneven depths
  a group is ``longest - shortest`` latency late against unicast; each routed
  candidate is also simulated with its groups split by member route latency
  (the sender injects once per class).
* **One-group Allreduce** (where the switches both reduce and multicast): every
  GPU sends its buffer once into an aggregation tree and receives the others'
  sum once, one group for all blocks: one route latency and M each way per GPU,
  the in-network-reduction bound's traffic (NVLS / SHARP's one-shot shape;
  the ``nvls`` baseline takes two phases).

Every candidate is judged by the simulator, and the fastest correct one of each
form enters the ranking, so the result is never slower than the best baseline.
Network groups cannot be MSCCL XML: these choices are written as schedule JSON
(``--schedule-out``); ``-o`` writes the best unicast choice (docs/msccl.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from solver_models._backend import SolveStats
from solver_models.multicast import Hop, HopColumn, branch_graph, multicast_columns
from solver_models.ordering import Task
from solver_models.routing import ColumnPool, RoutingPlan, assign_pieces
from taccl_py.baselines.common import NotApplicable
from taccl_py.baselines.offload import AggregationTree, best_root
from taccl_py.bounds import lower_bound
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Op, Schedule, Transfer, group_error, network_groups
from taccl_py.simulator import simulate
from taccl_py.synthesis.candidates import Candidate, Choice
from taccl_py.synthesis.chunking import chunk_factors
from taccl_py.synthesis.options import Run
from taccl_py.synthesis.routes import Direction, Prepared
from taccl_py.synthesis.variants import Ordering, OrderingRule, Variant, orderings
from taccl_py.topology import Topology

__all__ = ["MAX_TRANSFERS", "SwitchStage", "one_group_allreduce", "split_by_latency", "switch_candidates"]

MAX_TRANSFERS = 250_000
"""A candidate with more transfers than this is not built (its simulation would cost more than it can gain)."""

MAX_RANK_CHUNK_OPS = 2_000_000
"""The one-group Allreduce makes every GPU add N-1 senders' sums of N chunks: at most this many (N^3) additions."""

_FEW_ORDERINGS = 20_000
"""Above this many transfers only the first ordering of a chunk factor (and its latency split) is simulated."""

_REDUCING = (CollectiveKind.REDUCESCATTER, CollectiveKind.REDUCE)
_ROOTED = (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)


@dataclass(frozen=True)
class SwitchStage:
    """What the stage found: the best correct choice of each form, every candidate simulated, notes, solver stats."""

    choices: tuple[Choice, ...]
    candidates: tuple[Candidate, ...]
    notes: tuple[str, ...]
    stats: tuple[SolveStats, ...]


@dataclass(frozen=True)
class _TreePhase:
    """One phase routed through the switches: its direction (branch graph), its pool, reversed or not."""

    direction: Direction
    columns: ColumnPool
    branching: tuple[str, ...]
    reversed: bool
    rooted: bool


def _flagged(topology: Topology, flag: str) -> tuple[str, ...]:
    return tuple(s.name for s in topology.switches if getattr(s, flag))


def _phases(run: Run, prepared: Prepared) -> tuple[list[_TreePhase], list[SolveStats]]:
    """The tree phases of the collective (reduction first), each routed on its branch graph."""
    kind, topology = prepared.kind, prepared.topology
    roots = (prepared.root,) if prepared.root is not None else None
    rooted = kind in _ROOTED
    plan: list[tuple[Direction | None, tuple[str, ...], bool]] = []
    if kind in (*_REDUCING, CollectiveKind.ALLREDUCE):
        plan.append((prepared.reverse, _flagged(topology, "reduce"), True))
    if kind in (CollectiveKind.ALLGATHER, CollectiveKind.BROADCAST, CollectiveKind.ALLREDUCE):
        plan.append((prepared.forward, _flagged(topology, "multicast"), False))
    phases, stats = [], []
    for direction, branching, reversed_ in plan:
        assert direction is not None
        graph = branch_graph(direction.topology, direction.graph, branching)
        with run.stage("routing"):
            pool = multicast_columns(direction.topology, graph, direction.symmetry, roots=roots,
                                     budget=run.column_budget())
        stats.append(pool.stats)
        phases.append(_TreePhase(Direction(direction.topology, graph, direction.symmetry), pool, branching,
                                 reversed_, rooted))
    return phases, stats


# ------------------------------------------------------------------------ tasks
def _heights(hops: Sequence[Hop], piece_bytes: float) -> list[float]:
    """Longest remaining time below each hop's receivers (the hop's own time included), for priorities."""
    below: dict[int, float] = {}
    heights = [0.0] * len(hops)
    for k in range(len(hops) - 1, -1, -1):
        hop = hops[k]
        heights[k] = hop.time_us(piece_bytes) + max((below.get(r, 0.0) for r in hop.receivers), default=0.0)
        below[hop.sender] = max(below.get(hop.sender, 0.0), heights[k])
    return heights


def hop_tasks(direction: Direction, plan: RoutingPlan, piece_bytes: float,
              chunk_id: Callable[[int, int], int]) -> tuple[list[Task], list[Hop]]:
    """One task per hop per piece (a group's links once), and the hop each task sends."""
    symmetry = direction.symmetry
    tasks: list[Task] = []
    hops: list[Hop] = []
    for (gpu, _), choice in sorted(plan.assignment.items()):
        j = 0
        for a in choice:
            column = a.column
            assert isinstance(column, HopColumn)
            moved = [hop.image(symmetry, a.perm) for hop in column.sends]
            heights = _heights(moved, piece_bytes)
            for _ in range(a.count):
                chunk = chunk_id(gpu, j)
                holder: dict[int, int] = {}
                for hop, height in zip(moved, heights, strict=True):
                    own = 0 if hop.sender == gpu else 1
                    tasks.append(Task(src=hop.sender, dst=hop.receivers[0], chunks=(chunk,), route=hop.links,
                                      latency_us=max(hop.latency_us), bytes=piece_bytes,
                                      bandwidth_GBps=hop.bandwidth_GBps, pred=holder.get(hop.sender, -1),
                                      priority=(own, -height, j, gpu)))
                    hops.append(hop)
                    for r in hop.receivers:
                        holder[r] = len(tasks) - 1
                j += 1
    return tasks, hops


def _emit(tasks: Sequence[Task], hops: Sequence[Hop], ordering: Ordering) -> list[Transfer]:
    """Messages in program order; a hop that branches in a switch is one network group of its members."""
    members: dict[int, list[int]] = {}
    for i in range(len(tasks)):
        members.setdefault(ordering.group[i], []).append(i)
    firsts = sorted(members, key=lambda g: (ordering.start_us[g], tasks[g].priority, g))
    out: list[Transfer] = []
    for tag, g in enumerate(firsts):
        chunks = tuple(sorted(c for i in members[g] for c in tasks[i].chunks))
        hop = hops[g]
        if hop.is_group:
            out += [Transfer(hop.sender, r, chunks, route, group=tag) for r, route in hop.members]
        else:
            receiver, route = hop.members[0]
            out.append(Transfer(hop.sender, receiver, chunks, route))
    return out


def _reverse(transfers: Sequence[Transfer]) -> list[Transfer]:
    """A tree phase on the reversed topology, run backwards: copies become reductions, a multicast group an
    in-network reduction (its receivers now send, their sums combine in the switches)."""
    return [Transfer(t.dst, t.src, t.chunks, tuple(reversed(t.route)), Op.REDUCE, t.channel, group=t.group)
            for t in reversed(transfers)]


def _renumber(transfers: Sequence[Transfer]) -> tuple[Transfer, ...]:
    """Group numbers 0, 1, ... in program order (the phases' numbers may clash)."""
    out = []
    tags: dict[tuple[int, int], int] = {}
    for first, end in network_groups(transfers):
        tags[(first, end)] = len(tags)
    index = {i: tag for (first, end), tag in tags.items() for i in range(first, end)}
    for i, t in enumerate(transfers):
        out.append(t if t.group is None else Transfer(t.src, t.dst, t.chunks, t.route, t.op, t.channel, t.after,
                                                      t.not_before_us, t.exchange, index[i]))
    return tuple(out)


def split_by_latency(topology: Topology, transfers: Sequence[Transfer]) -> tuple[Transfer, ...] | None:
    """Every network group cut into one group per member route latency (nearest first); None if none splits.

    The data flow is unchanged (each member keeps its route, and each receiver
    still adds each sender once); the bytes cross the links the classes share
    once per class. A class that could not be a group alone keeps the group whole.
    """
    out: list[Transfer] = []
    changed = False
    tag = 0
    position = 0
    exchange = 1 + max((t.exchange for t in transfers if t.exchange is not None), default=-1)
    for first, end in [*network_groups(transfers), (len(transfers), len(transfers))]:
        for t in transfers[position:first]:
            out.append(t)
        position = end
        if first == end:
            break
        members = transfers[first:end]
        classes: dict[float, list[Transfer]] = {}
        for t in members:
            classes.setdefault(round(topology.route_latency(t.route), 9), []).append(t)
        parts = [classes[k] for k in sorted(classes)]
        ex = members[0].exchange
        if len(parts) > 1 and all(len(p) == 1 or group_error(topology, p, 0, len(p)) is None for p in parts):
            changed = True
            if ex is None and {t.src for t in members} & {t.dst for t in members}:
                # GPUs that send and receive (a one-group Allreduce): the parts stay one exchange, so every part
                # reads the buffers as they were before any part adds into them
                ex, exchange = exchange, exchange + 1
        else:
            parts = [list(members)]
        for part in parts:
            if len(part) == 1:
                t = part[0]
                out.append(Transfer(t.src, t.dst, t.chunks, t.route, t.op, t.channel, t.after, t.not_before_us, ex))
            else:
                out += [Transfer(t.src, t.dst, t.chunks, t.route, t.op, t.channel, t.after, t.not_before_us, ex,
                                 tag) for t in part]
                tag += 1
    return _renumber(out) if changed else None


# --------------------------------------------------------------- one-group AR
def one_group_allreduce(topology: Topology) -> Schedule | None:
    """Every GPU sends its whole buffer into one aggregation tree and adds the others' sum: one network group.

    None when no switch tree joins every GPU through switches that both reduce
    and multicast, or the group would be too large to simulate
    (:data:`MAX_RANK_CHUNK_OPS`).
    """
    n = topology.num_gpus
    if n ** 3 > MAX_RANK_CHUNK_OPS or not any(s.reduce and s.multicast for s in topology.switches):
        return None
    try:
        tree = AggregationTree(topology, best_root(topology, range(n)), range(n))
        chunks = tuple(range(n))
        members = [Transfer(s, d, chunks, tree.route(s, d), Op.REDUCE, group=0)
                   for d in range(n) for s in range(n) if s != d]
    except NotApplicable:
        return None
    schedule = Schedule(Collective(CollectiveKind.ALLREDUCE, n, 1), tuple(members), name="taccl-allreduce-one-group",
                        topology=topology.name, notes={"generator": "taccl_py synthesize", "root": str(tree.root)})
    return None if schedule.structural_error(topology) else schedule


# ------------------------------------------------------------------ the stage
def _factors(run: Run, prepared: Prepared, per_piece: int) -> list[int]:
    """Chunk factors to route: the options' if given, else 1 and the unicast stages' choices, within the
    transfer budget (``per_piece`` transfers per piece of every block)."""
    options = run.options
    if options.chunk_factors:
        return [c for c in options.chunk_factors if c * per_piece <= MAX_TRANSFERS]
    # one piece (a tree of switches alone needs no pipelining) and the two largest the unicast stages would try
    larger = sorted(c for c in chunk_factors(options, prepared) if c > 1 and c * per_piece <= MAX_TRANSFERS)
    return [1, *larger[-2:]]


def _label(phases: Sequence[_TreePhase]) -> str:
    """``multicast trees``, ``reduction trees`` or ``reduction + multicast trees`` (a phase without such
    switches routes unicast trees)."""
    uses = [("reduction" if p.reversed else "multicast") if p.branching else "unicast" for p in phases]
    return " + ".join(uses) + " trees"


def switch_candidates(run: Run, prepared: Prepared, size_bytes: float) -> SwitchStage:
    """Route the collective's trees through the capable switches, simulate every candidate, keep the best of each
    form (trees; the one-group Allreduce)."""
    topology, kind = prepared.topology, prepared.kind
    capable = {CollectiveKind.ALLGATHER: ("multicast",), CollectiveKind.BROADCAST: ("multicast",),
               CollectiveKind.REDUCESCATTER: ("reduce",), CollectiveKind.REDUCE: ("reduce",),
               CollectiveKind.ALLREDUCE: ("multicast", "reduce")}.get(kind, ())
    if not any(_flagged(topology, flag) for flag in capable):
        return SwitchStage((), (), (), ())
    if run.options.sketch is not None:
        return SwitchStage((), (), ("switch trees: not routed under a user sketch (its connections are unicast)",), ())
    n = topology.num_gpus
    notes: list[str] = []
    phases, stats = _phases(run, prepared)
    bound = lower_bound(topology, kind, size_bytes, root=prepared.root or 0)
    per_gpu = size_bytes if prepared.root is not None else size_bytes / n
    lp = " + ".join(f"{p.columns.lp_time_per_byte_us * per_gpu:.6g}" for p in phases)
    notes.append(f"switch trees: routing LP {lp} us of bandwidth"
                 f"{' (the phases one after the other)' if len(phases) > 1 else ''} against the bound's "
                 f"{bound.bandwidth_us:.6g} ({bound.assumes})")
    per_piece = (n - 1) * (1 if prepared.root is not None else n) * len(phases)  # transfers per piece of each block
    factors = _factors(run, prepared, per_piece)
    if len(phases) == 1 and not run.options.chunk_factors and not _relays(phases[0]):
        # every tree sends from its root only: a piece reaches every GPU in one group, so more pieces only queue
        # behind each other on the same connections
        factors = [1]
    forms: Iterator[tuple[str, Variant, Schedule]] = iter(())
    if kind is CollectiveKind.ALLREDUCE:  # first: one schedule, cheap to build and simulate, often the best
        single = one_group_allreduce(topology)
        forms = iter([] if single is None else
                     [("one-group in-network allreduce", Variant(OrderingRule.ARRIVAL), single)])
    forms = itertools.chain(forms, _tree_schedules(run, prepared, phases, size_bytes, factors, stats, notes))
    candidates: list[Candidate] = []
    found: dict[str, Choice] = {}
    seen: set[tuple[Transfer, ...]] = set()
    for form, variant, whole in forms:
        cut = split_by_latency(topology, whole.transfers)
        for name, schedule in ((form, whole), (f"{form}, split by latency", None if cut is None else
                                               whole.with_transfers(cut))):
            if schedule is None or schedule.transfers in seen or len(schedule) > MAX_TRANSFERS:
                continue
            if candidates and _out_of_time(run):
                notes.append(f"switch trees: time limit reached before {name} was simulated")
                return _stage(found, candidates, notes, stats)
            seen.add(schedule.transfers)
            run.report("simulating", chunk_factor=schedule.collective.chunk_factor, ordering=name,
                       transfers=len(schedule))
            with run.stage("simulate"):
                sim = simulate(topology, schedule, size_bytes, run.sim_options)
            cand = Candidate(label=name, chunk_factor=schedule.collective.chunk_factor, time_us=sim.time_us,
                             transfers=len(schedule), note=sim.error or "", variant=variant, switch=True)
            candidates.append(cand)
            if sim.time_us is None:
                notes.append(f"{name}: the simulator rejected the schedule: {sim.error}")
                continue
            key = name.split(",")[0]
            if key not in found or sim.time_us < found[key].time_us:
                found[key] = Choice(schedule, sim, cand)
    return _stage(found, candidates, notes, stats)


def _relays(phase: _TreePhase) -> bool:
    """Does some tree of the phase forward data through a GPU (where pieces would pipeline)?"""
    return any(hop.sender != column.rep for columns in phase.columns.columns.values() for column in columns
               if isinstance(column, HopColumn) for hop in column.sends)


def _stage(found: dict[str, Choice], candidates: list[Candidate], notes: list[str],
           stats: list[SolveStats]) -> SwitchStage:
    return SwitchStage(tuple(sorted(found.values(), key=lambda c: c.time_us)), tuple(candidates), tuple(notes),
                       tuple(stats))


def _out_of_time(run: Run) -> bool:
    return run.out_of_time() or run.elapsed_s() > run.options.time_limit_s / 2


def _piece_numbering(rooted: bool, backwards: bool, c: int) -> Callable[[int, int], int]:
    """Chunk id of GPU ``gpu``'s piece ``j`` (rooted collectives: piece ``j`` of the buffer)."""
    if rooted:
        return (lambda gpu, j: c - 1 - j) if backwards else (lambda gpu, j: j)
    return (lambda gpu, j: gpu * c + c - 1 - j) if backwards else (lambda gpu, j: gpu * c + j)


def _tree_schedules(run: Run, prepared: Prepared, phases: Sequence[_TreePhase], size_bytes: float,
                    factors: Sequence[int], stats: list[SolveStats],
                    notes: list[str]) -> Iterator[tuple[str, Variant, Schedule]]:
    """Per chunk factor (made when asked for): the integer routing of every phase, its orderings, the phases
    joined (same rule)."""
    topology, kind = prepared.topology, prepared.kind
    n = topology.num_gpus
    label = _label(phases)
    greedy = replace(run, options=replace(run.options, max_cpsat_tasks=0))  # shares run's clock and stage times
    for k, c in enumerate(factors):
        if k and _out_of_time(run):
            notes.append(f"switch trees: time limit reached before chunk factor {c} was routed")
            break
        per_phase: list[dict[OrderingRule, list[Transfer]]] = []
        for phase in phases:
            piece_bytes = (size_bytes if phase.rooted else size_bytes / n) / c
            with run.stage("routing"):
                plan = assign_pieces(phase.columns, c, piece_bytes, run.solver_config(run.options.work.master_work))
            stats.append(plan.stats[1])
            # a reduction phase is played backwards: its last pieces finish first, so number them in reverse, and
            # an Allreduce's all-gather can start on piece 0 while the later pieces are still being reduced
            chunk_id = _piece_numbering(phase.rooted, phase.reversed, c)
            with run.stage("ordering"):
                tasks, hops = hop_tasks(phase.direction, plan, piece_bytes, chunk_id)
            # the greedy orderings only: CP-SAT's model (one message per link at a time) does not describe groups,
            # which share their links at fluid rates, and its solves cost seconds each on a loaded machine
            found, order_stats = orderings(greedy, tasks, len(topology.links))
            stats += [s for s in order_stats if s.status != "skipped"]
            if len(tasks) and sum(len(h.members) for h in hops) > _FEW_ORDERINGS:
                found = found[:1]
            emitted = {}
            for ordering in found:
                transfers = _emit(tasks, hops, ordering)
                emitted[ordering.rule] = _reverse(transfers) if phase.reversed else transfers
            per_phase.append(emitted)
        for rule in per_phase[0]:
            if all(rule in emitted for emitted in per_phase):
                joined: list[Transfer] = []
                for channel, emitted in enumerate(per_phase):  # each phase's groups numbered after the last's
                    base = 1 + max((t.group for t in joined if t.group is not None), default=-1)
                    # each phase on its own channel, so the all-gather of a piece does not queue behind the
                    # reduce-scatter of later pieces on the same connections
                    joined += [replace(t, channel=channel, group=None if t.group is None else base + t.group)
                               for t in emitted[rule]]
                collective = Collective(kind, n, c, prepared.root or 0)
                schedule = Schedule(collective, _renumber(joined), name=f"taccl-{kind.value}-switch-c{c}",
                                    topology=topology.name, notes={"generator": "taccl_py synthesize",
                                                                   "chunk_factor": c, "ordering": rule.value})
                yield f"{label}, chunk factor {c}, {rule.value}", Variant(rule), schedule
