"""``synthesize``: the stages in order, from a topology, a collective and a size to the chosen schedule."""

from __future__ import annotations

from dataclasses import dataclass, field

from solver_models._backend import SolveStats
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import InputError
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimResult
from taccl_py.synthesis.candidates import (
    Candidate,
    Choice,
    compare_baselines,
    prefer_baseline,
    simulate_candidates,
)
from taccl_py.synthesis.chunking import chunk_factors
from taccl_py.synthesis.options import ProgressFn, Run, SynthesisOptions
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


def synthesize(topology: Topology, kind: CollectiveKind, size_bytes: float,
               options: SynthesisOptions | None = None, progress: ProgressFn | None = None) -> SynthesisResult:
    """Synthesize, verify by simulation, compare with baselines and the bound; return the fastest correct result.

    The stages: prepare (sketch, logical graph, symmetry) -> route pools (column
    generation per direction) -> chunk factors -> per factor: variants (integer
    routing, orderings, channel layouts) -> simulate candidates -> prefer a
    faster baseline.
    """
    options = options or SynthesisOptions()
    if size_bytes <= 0:
        raise InputError(f"size must be > 0 bytes (got {size_bytes})", where="--size")
    run = Run.start(options, progress)
    prepared = prepare(run, topology, kind, size_bytes)
    pools = route_pools(run, prepared)
    stats: list[SolveStats] = list(pools.stats)
    notes: list[str] = []
    candidates: list[Candidate] = []
    best: Choice | None = None
    for c in chunk_factors(options, prepared):
        if candidates and run.remaining_s() <= 1.0:
            notes.append(f"time limit reached before chunk factor {c} was tried")
            break
        schedules, variant_stats = candidate_schedules(run, pools, c, size_bytes)
        stats += variant_stats
        simulated = simulate_candidates(run, topology, Collective(kind, topology.num_gpus, c, options.root),
                                        size_bytes, schedules, any_before=bool(candidates))
        candidates += simulated.candidates
        notes += simulated.notes
        if simulated.best is not None and (best is None or simulated.best.time_us < best.time_us):
            best = simulated.best
    baselines: dict[str, float | None] = {}
    chosen = "synthesized"
    if options.compare_baselines:
        comparison = compare_baselines(topology, kind, size_bytes, options.root)
        baselines = comparison.times_us
        picked, note = prefer_baseline(best, comparison)
        if note is not None and picked is not None:
            notes.append(note)
            chosen = f"baseline {picked.candidate.label}"
        best = picked
    if best is None:
        raise InputError("synthesis produced no correct schedule and no baseline applies")
    timed = [x.time_us for x in candidates if x.time_us is not None]
    synthesized = next((x for x in candidates if x.time_us is not None and x.time_us == min(timed)), None)
    return SynthesisResult(schedule=best.schedule, sim=best.sim, chosen=chosen, synthesized=synthesized,
                           candidates=tuple(candidates), baselines=baselines, stats=tuple(stats),
                           symmetry=prepared.symmetry.describe(), sketch=prepared.sketch.describe(),
                           synthesis_s=run.elapsed_s(), notes=tuple(notes))
