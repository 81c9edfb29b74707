"""Stages 5 and 6: simulate the candidates, keep the fastest correct one, prefer a faster baseline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimResult, simulate
from taccl_py.synthesis.options import Run
from taccl_py.synthesis.variants import CandidateSchedule, Variant
from taccl_py.topology import Topology

__all__ = ["BaselineComparison", "Candidate", "Choice", "Simulated", "compare_baselines", "prefer_baseline",
           "simulate_candidates"]


@dataclass(frozen=True)
class Candidate:
    """One simulated candidate: how it was built and how fast it is (``time_us`` None: incorrect)."""

    label: str
    chunk_factor: int
    time_us: float | None
    transfers: int
    note: str = ""
    variant: Variant | None = None
    """The synthesized variant; None for a baseline."""


@dataclass(frozen=True)
class Choice:
    """A correct schedule, its simulation and the candidate record it came from."""

    schedule: Schedule
    sim: SimResult
    candidate: Candidate

    @property
    def time_us(self) -> float:
        assert self.sim.time_us is not None
        return self.sim.time_us


@dataclass(frozen=True)
class Simulated:
    """Stage 5's output for one chunk factor: every candidate simulated, the best correct one, notes."""

    candidates: tuple[Candidate, ...]
    best: Choice | None
    notes: tuple[str, ...]
    stopped: bool
    """The wall-clock limit stopped the simulation of this factor's candidates."""


def simulate_candidates(run: Run, topology: Topology, collective: Collective, size_bytes: float,
                        schedules: Sequence[CandidateSchedule], *, any_before: bool) -> Simulated:
    """Simulate each distinct candidate schedule; the fastest correct one is ``best`` (first wins ties).

    ``any_before``: candidates of earlier factors exist, so the wall-clock limit may stop this one.
    """
    c = collective.chunk_factor
    candidates: list[Candidate] = []
    notes: list[str] = []
    best: Choice | None = None
    seen: set[tuple[object, ...]] = set()
    stopped = False
    for cand_schedule in schedules:
        how = cand_schedule.variant.describe()
        transfers = cand_schedule.transfers
        if transfers in seen:
            continue
        seen.add(transfers)
        if (any_before or candidates) and run.remaining_s() <= 1.0:
            notes.append(f"time limit reached: ordering {how!r} of chunk factor {c} not simulated")
            stopped = True
            break
        schedule = Schedule(collective, transfers, name=f"taccl-{collective.kind.value}-c{c}",
                            topology=topology.name,
                            notes={"generator": "taccl_py synthesize", "chunk_factor": c, "ordering": how})
        run.report("simulating", chunk_factor=c, ordering=how, transfers=len(transfers))
        sim = simulate(topology, schedule, size_bytes)
        cand = Candidate(label=f"chunk factor {c}, {how}", chunk_factor=c, time_us=sim.time_us,
                         transfers=len(transfers), note=sim.error or "", variant=cand_schedule.variant)
        candidates.append(cand)
        run.report("candidate", chunk_factor=c, ordering=how, time_us=sim.time_us, correct=sim.correct)
        if not sim.correct:
            notes.append(f"chunk factor {c}, {how}: the simulator rejected the schedule: {sim.error}")
            continue
        assert sim.time_us is not None
        if best is None or sim.time_us < best.time_us:
            best = Choice(schedule, sim, cand)
    return Simulated(tuple(candidates), best, tuple(notes), stopped)


@dataclass(frozen=True)
class BaselineComparison:
    """Every applicable baseline's simulated time (None: incorrect) and the fastest correct one."""

    times_us: dict[str, float | None]
    best: Choice | None


def compare_baselines(topology: Topology, kind: CollectiveKind, size_bytes: float, root: int) -> BaselineComparison:
    """Simulate every NCCL-style baseline that applies to this topology and collective."""
    from taccl_py.baselines import applicable_baselines, baseline

    times: dict[str, float | None] = {}
    best: Choice | None = None
    for name in applicable_baselines(topology, kind):
        schedule = baseline(topology, kind, name, root=root)
        sim = simulate(topology, schedule, size_bytes)
        times[name] = sim.time_us
        if sim.time_us is not None and (best is None or sim.time_us < best.time_us):
            best = Choice(schedule, sim, Candidate(name, schedule.collective.chunk_factor, sim.time_us,
                                                   len(schedule.transfers)))
    return BaselineComparison(times, best)


def prefer_baseline(synthesized: Choice | None, baselines: BaselineComparison) -> tuple[Choice | None, str | None]:
    """The baseline if it is faster than the synthesized choice (or nothing synthesized is correct).

    Returns the choice and, when a baseline wins, the note saying so.
    """
    base = baselines.best
    if base is None or (synthesized is not None and not base.time_us < synthesized.time_us * (1 - 1e-9)):
        return synthesized, None
    name = base.candidate.label
    if synthesized is None:
        return base, f"no synthesized candidate was correct: returning the {name} baseline"
    return base, (f"the {name} baseline ({base.time_us:.4g} us) is faster than the synthesized algorithm "
                  f"({synthesized.time_us:.4g} us): returning the baseline")
