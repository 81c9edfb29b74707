"""``synthesize``: the stages in order, from a topology, a collective and a size to the chosen schedule."""

from __future__ import annotations

from dataclasses import dataclass, field

from solver_models._backend import STOPPED_BY_TIME, SolveStats
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import Infeasible, InputError
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimResult
from taccl_py.synthesis.candidates import (
    BaselineComparison,
    Candidate,
    Choice,
    compare_baselines,
    deployable_baselines,
    rank_choices,
    simulate_candidates,
)
from taccl_py.synthesis.chunking import chunk_factors
from taccl_py.synthesis.multicast import switch_candidates
from taccl_py.synthesis.multidim import Shortcut, hierarchical_shortcut
from taccl_py.synthesis.offload import tuned_offload
from taccl_py.synthesis.options import STAGES, ProgressFn, Run, SynthesisOptions
from taccl_py.synthesis.routes import prepare, route_pools
from taccl_py.synthesis.variants import candidate_schedules
from taccl_py.topology import Topology

__all__ = ["SynthesisResult", "synthesize"]


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
    stages_s: dict[str, float] = field(default_factory=dict)
    """Wall seconds per stage (see :data:`~taccl_py.synthesis.options.STAGES`)."""
    time_limit_hit: bool = False
    """The wall-clock guard, not the deterministic budgets, ended some stage: the result may vary between runs."""
    ranked: tuple[Choice, ...] = ()
    """Every kept choice in order of preference, ``schedule`` first: fallbacks for when it cannot be written."""
    shortcut: bool = False
    """The multi-dimensional shortcut skipped the solver stages (:mod:`taccl_py.synthesis.multidim`)."""
    unselected_baselines: tuple[str, ...] = ()
    """Baselines whose own file the runtime would not select at the size."""
    rebuilt_baselines_us: dict[str, float] = field(default_factory=dict)
    """Those of them rebuilt with counts the runtime selects, and their times."""
    comparison: BaselineComparison | None = field(default=None, compare=False, repr=False)
    """Every applicable baseline as simulated (None if not all were): a later run with the same topology,
    collective, size and options passes it back (``synthesize(..., baselines=)``) instead of simulating them
    again."""


def synthesize(topology: Topology, kind: CollectiveKind, size_bytes: float,
               options: SynthesisOptions | None = None, progress: ProgressFn | None = None, *,
               baselines: BaselineComparison | None = None) -> SynthesisResult:
    """Synthesize, verify by simulation, compare with baselines and the bound; return the fastest correct result.

    The stages: prepare (sketch, logical graph, symmetry) -> route pools (column
    generation per direction) -> chunk factors -> per factor: variants (integer
    routing, orderings, channel layouts) -> simulate candidates -> rank the best
    of each factor with the baselines (a faster baseline is returned instead).

    ``baselines``: the comparison of an earlier run on the same inputs (its
    :attr:`SynthesisResult.comparison`), used instead of simulating every
    baseline again; its choices (the same objects) rank with the candidates.
    """
    options = options or SynthesisOptions()
    if size_bytes <= 0:
        raise InputError(f"size must be > 0 bytes (got {size_bytes})", where="--size")
    run = Run.start(options, progress)
    shortcut = hierarchical_shortcut(topology, kind, size_bytes, options)
    if shortcut is not None:
        return _baselines_only(run, topology, kind, size_bytes, shortcut)
    prepared = prepare(run, topology, kind, size_bytes)
    notes: list[str] = []
    candidates: list[Candidate] = []
    best_per_factor: list[Choice] = []
    stopped = False
    # in-switch reduction first (where the switches reduce it is usually the winner), within half the time limit
    tuned, tuned_notes = tuned_offload(run, topology, kind, size_bytes, options.root) if options.compare_baselines \
        else ([], [])
    notes += tuned_notes
    # trees of the synthesizer's own through multicast / reduce switches, within the same half
    switched = switch_candidates(run, prepared, size_bytes)
    notes += switched.notes
    candidates += switched.candidates
    best_per_factor += switched.choices
    pools = route_pools(run, prepared)
    stats: list[SolveStats] = [*switched.stats, *pools.stats]
    for k, c in enumerate(chunk_factors(options, prepared)):
        if candidates and run.out_of_time():
            notes.append(f"time limit reached before chunk factor {c} was tried")
            stopped = True
            break
        schedules, variant_stats = candidate_schedules(run, topology, kind, pools, c, size_bytes, first_factor=k == 0)
        stats += variant_stats
        simulated = simulate_candidates(run, topology, Collective(kind, topology.num_gpus, c, options.root),
                                        size_bytes, schedules, any_before=bool(candidates))
        candidates += simulated.candidates
        notes += simulated.notes
        stopped |= simulated.stopped
        if simulated.best is not None:
            best_per_factor.append(simulated.best)
    comparison = BaselineComparison({}, ())
    if options.compare_baselines:
        if baselines is not None:
            comparison = baselines
        else:
            with run.stage("baselines"):
                comparison = compare_baselines(topology, kind, size_bytes, options.root, options.instances,
                                               sim_options=run.sim_options,
                                               channel_limit=_channel_limit(run, topology))
        notes += comparison.notes
    simulated_baselines = comparison if options.compare_baselines else None  # before the tuned ones join
    if tuned:  # switch-offload schedules with a searched pipeline depth rank with the baselines
        candidates += [choice.candidate for choice in tuned]
        comparison = BaselineComparison(comparison.times_us, tuple(sorted(
            [*comparison.correct, *tuned], key=lambda choice: choice.time_us)), comparison.notes)
    with run.stage("baselines"):
        deployable = deployable_baselines(topology, kind, size_bytes, options.root, comparison, best_per_factor,
                                          options.element_bytes, options.instances, run.sim_options,
                                          _channel_limit(run, topology))
    comparison = deployable.comparison
    notes += deployable.notes
    ranking = rank_choices(best_per_factor, comparison, size_bytes, options.element_bytes, options.instances)
    notes += ranking.notes
    if not ranking.ranked:
        raise Infeasible("synthesis produced no correct schedule and no baseline applies")
    best = ranking.ranked[0]
    guarded = [s.stage for s in stats if s.stopped_by == STOPPED_BY_TIME]
    if guarded or stopped:
        what = ", ".join(dict.fromkeys(guarded)) or "the candidates"
        notes.append(f"the wall-clock time limit stopped {what} before the deterministic work budget (after "
                     f"{options.time_limit_s:.3g} s of solving): another run may give a different result; raise "
                     "--time-limit")
    own = [x for x in candidates if not x.tuned]  # the synthesized unicast schedules
    timed = [x.time_us for x in own if x.time_us is not None]
    synthesized = next((x for x in own if x.time_us is not None and x.time_us == min(timed)), None)
    return SynthesisResult(schedule=best.schedule, sim=best.sim, chosen=best.label, synthesized=synthesized,
                           candidates=tuple(candidates), baselines=comparison.times_us, stats=tuple(stats),
                           symmetry=prepared.symmetry.describe(), sketch=prepared.sketch.describe(),
                           synthesis_s=run.elapsed_s(), notes=tuple(notes),
                           stages_s={name: run.stages_s.get(name, 0.0) for name in STAGES},
                           time_limit_hit=bool(guarded or stopped), ranked=ranking.ranked,
                           unselected_baselines=deployable.unselected, rebuilt_baselines_us=deployable.rebuilt_us,
                           comparison=simulated_baselines)


def _channel_limit(run: Run, topology: Topology) -> int | None:
    """The channels a schedule may use: the GPUs' communication channels over the XML's instances, when the
    synthesizer counts them (:mod:`taccl_py.synthesis.endpoint`)."""
    from taccl_py.synthesis.endpoint import channel_limit

    limit = channel_limit(topology, run.options.endpoint) if run.knows_endpoint(topology) else None
    return None if limit is None else max(1, limit // run.options.instances)


def _baselines_only(run: Run, topology: Topology, kind: CollectiveKind, size_bytes: float,
                    shortcut: Shortcut) -> SynthesisResult:
    """The result when the multi-dimensional shortcut skips the solver stages: the best baseline (and, on large
    clusters of machines, the rail-stream schedules)."""
    options = run.options
    run.report("shortcut", estimate_us=shortcut.estimate_us, bound_us=shortcut.bound_us)
    rail: list[Choice] = []
    rail_candidates: list[Candidate] = []
    names = shortcut.baselines
    if shortcut.rail:
        with run.stage("simulate"):
            rail_candidates, rail = _rail_streams(run, topology, kind, size_bytes)
        if rail and shortcut.estimate_us >= rail[0].time_us:
            names = ()  # the hierarchical baseline's model is slower than a schedule simulated: not simulated
    with run.stage("baselines"):
        comparison = compare_baselines(topology, kind, size_bytes, options.root, options.instances,
                                       names, sim_options=run.sim_options,
                                       channel_limit=_channel_limit(run, topology))
    raw = comparison
    with run.stage("baselines"):
        deployable = deployable_baselines(topology, kind, size_bytes, options.root, comparison, rail,
                                          options.element_bytes, options.instances, run.sim_options,
                                          _channel_limit(run, topology))
    comparison = deployable.comparison
    ranking = rank_choices(rail, comparison, size_bytes, options.element_bytes, options.instances)
    if not ranking.ranked:
        raise Infeasible("no baseline applies and the solver stages were skipped")
    best = ranking.ranked[0]
    notes = (shortcut.note(topology.num_gpus, names != ()), *comparison.notes, *deployable.notes,
             *(n for n in ranking.notes if not n.startswith("no synthesized candidate")))
    skipped = "not computed (multi-dimensional shortcut)"
    synthesized = min(rail_candidates, key=lambda c: c.time_us if c.time_us is not None else float("inf"),
                      default=None)
    return SynthesisResult(schedule=best.schedule, sim=best.sim, chosen=best.label, synthesized=synthesized,
                           candidates=tuple(rail_candidates), baselines=comparison.times_us, stats=(),
                           symmetry=skipped, sketch=skipped, synthesis_s=run.elapsed_s(), notes=notes,
                           stages_s={name: run.stages_s.get(name, 0.0) for name in STAGES}, ranked=ranking.ranked,
                           shortcut=True, unselected_baselines=deployable.unselected,
                           rebuilt_baselines_us=deployable.rebuilt_us, comparison=raw if names is None else None)


def _rail_streams(run: Run, topology: Topology, kind: CollectiveKind,
                  size_bytes: float) -> tuple[list[Candidate], list[Choice]]:
    """The rail-stream schedules of :func:`~taccl_py.synthesis.railstream.rail_variants`, simulated (through the
    compiled kernel when large); the correct ones as choices, fastest first. Only the fastest keeps its
    schedule (the others' are dropped: at 1,024 GPUs each holds millions of transfers)."""
    from taccl_py.fast_sim import simulate_large
    from taccl_py.synthesis.railstream import rail_stream_schedule, rail_variants

    candidates: list[Candidate] = []
    best: Choice | None = None
    for streams, groups in rail_variants(topology.dimensions[1].size):
        label = f"rail streams ({streams} per GPU" + (f", {groups} far groups)" if groups > 1 else ")")
        run.report("simulate", detail=label)
        schedule = rail_stream_schedule(topology, kind, streams, groups)
        sim = simulate_large(topology, schedule, size_bytes, run.sim_options)
        candidate = Candidate(label, schedule.collective.chunk_factor, sim.time_us, len(schedule.transfers),
                              rail=True)
        candidates.append(candidate)
        if sim.time_us is not None and (best is None or sim.time_us < best.time_us):  # ties: the earlier
            best = Choice(schedule, sim, candidate)
        del schedule, sim
    return candidates, [best] if best is not None else []
