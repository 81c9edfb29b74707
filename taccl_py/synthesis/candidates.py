"""Stages 5 and 6: simulate the candidates, keep the best of each chunk factor, rank them with the baselines.

The ranking puts first what a runtime would run: a schedule whose file the
runtime selects at the synthesized size before one it would skip, then the
fastest (a baseline only when strictly faster than the synthesized algorithm).
The later entries are fallbacks for when the first cannot be written as XML.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.fast_sim import simulate_large
from taccl_py.msccl.ir import MAX_NODES_PER_RANK
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimOptions, SimResult
from taccl_py.synthesis.chunking import chunks_per_loop, min_nodes_per_rank, selectable_at
from taccl_py.synthesis.options import Run
from taccl_py.synthesis.variants import CandidateSchedule, Variant
from taccl_py.topology import Topology

__all__ = ["BaselineComparison", "Candidate", "Choice", "Deployable", "Ranking", "Simulated", "compare_baselines",
           "deployable_baselines", "rank_choices", "simulate_candidates"]

_BASELINE_MARGIN = 1e-9
"""A baseline must be faster by this fraction to be preferred: ties go to the synthesized algorithm."""


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
    tuned: bool = False
    """A switch-offload schedule whose pipeline depth the synthesizer searched (:mod:`taccl_py.synthesis.offload`)."""
    switch: bool = False
    """Routed by the synthesizer through multicast or reduce switches (:mod:`taccl_py.synthesis.multicast`)."""
    rail: bool = False
    """A rail-stream schedule of the synthesizer's (:mod:`taccl_py.synthesis.railstream`)."""


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

    @property
    def is_baseline(self) -> bool:
        return self.candidate.variant is None and not self.candidate.rail

    @property
    def label(self) -> str:
        """How the report names it: ``synthesized``, ``baseline <name>`` or ``tuned <offload schedule>``."""
        if self.candidate.tuned:
            return f"tuned {self.candidate.label}"
        if self.candidate.switch or self.candidate.rail:
            return f"synthesized {self.candidate.label}"
        return f"baseline {self.candidate.label}" if self.is_baseline else "synthesized"


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

    A candidate that needs more XML nodes per rank than the runtimes accept is
    not simulated. ``any_before``: candidates of earlier factors exist, so the
    wall-clock limit may stop this one.
    """
    candidates: list[Candidate] = []
    notes: list[str] = []
    best: Choice | None = None
    seen: set[tuple[object, ...]] = set()
    stopped = False
    for cand_schedule in schedules:
        how = cand_schedule.variant.describe()
        c = cand_schedule.chunk_factor or collective.chunk_factor
        transfers = cand_schedule.transfers
        if transfers in seen:
            continue
        seen.add(transfers)
        nodes = min_nodes_per_rank(transfers, collective.num_ranks, run.options.instances)
        if nodes > MAX_NODES_PER_RANK:
            notes.append(f"chunk factor {c}, {how}: needs at least {nodes} XML nodes on a rank (the runtimes "
                         f"accept {MAX_NODES_PER_RANK}): not simulated")
            continue
        if (any_before or candidates) and run.out_of_time():
            notes.append(f"time limit reached: ordering {how!r} of chunk factor {c} not simulated")
            stopped = True
            break
        schedule = Schedule(replace(collective, chunk_factor=c), transfers, name=f"taccl-{collective.kind.value}-c{c}",
                            topology=topology.name,
                            notes={"generator": "taccl_py synthesize", "chunk_factor": c, "ordering": how})
        run.report("simulating", chunk_factor=c, ordering=how, transfers=len(transfers))
        with run.stage("simulate"):
            sim = simulate_large(topology, schedule, size_bytes, run.sim_options)
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
    """Every applicable baseline's simulated time (None: incorrect or never writable), the correct ones
    fastest first, and notes."""

    times_us: dict[str, float | None]
    correct: tuple[Choice, ...]
    notes: tuple[str, ...] = ()


def compare_baselines(topology: Topology, kind: CollectiveKind, size_bytes: float, root: int,
                      instances: int = 1, names: Sequence[str] | None = None, sim_options: SimOptions | None = None,
                      channel_limit: int | None = None) -> BaselineComparison:
    """Simulate every NCCL-style baseline that applies to this topology and collective (only ``names``, if given).

    A baseline that needs more XML nodes per rank than the runtimes accept is not simulated. ``sim_options``:
    how they are simulated (the synthesizer's endpoint mode). ``channel_limit``: the communication channels
    the GPUs give; a baseline that uses more is rebuilt with fewer (:func:`_within_channels`).
    """
    from taccl_py.baselines import applicable_baselines, baseline

    times: dict[str, float | None] = {}
    correct: list[Choice] = []
    notes: list[str] = []
    for name in applicable_baselines(topology, kind, only=names):
        schedule = baseline(topology, kind, name, root=root, size_bytes=size_bytes)
        if channel_limit is not None and schedule.num_channels > channel_limit:
            schedule, note = _within_channels(topology, kind, name, root, size_bytes, schedule, channel_limit)
            notes.append(note)
        nodes = min_nodes_per_rank(schedule.transfers, topology.num_gpus, instances)
        if nodes > MAX_NODES_PER_RANK:
            times[name] = None
            notes.append(f"the {name} baseline needs at least {nodes} XML nodes on a rank (the runtimes accept "
                         f"{MAX_NODES_PER_RANK}): not simulated")
            continue
        sim = simulate_large(topology, schedule, size_bytes, sim_options)  # the same times; compiled when large
        times[name] = sim.time_us
        if sim.time_us is not None:
            correct.append(Choice(schedule, sim, Candidate(name, schedule.collective.chunk_factor, sim.time_us,
                                                           len(schedule.transfers))))
    correct.sort(key=lambda choice: choice.time_us)  # stable: the first listed wins ties
    return BaselineComparison(times, tuple(correct), tuple(notes))


def _within_channels(topology: Topology, kind: CollectiveKind, name: str, root: int, size_bytes: float,
                     schedule: Schedule, limit: int) -> tuple[Schedule, str]:
    """The baseline rebuilt with the most channels (rings, trees, copies) that fit ``limit``, and a note."""
    from taccl_py.baselines import baseline
    from taccl_py.errors import InputError

    for channels in range(limit, 0, -1):
        try:
            fewer = baseline(topology, kind, name, channels=channels, root=root, size_bytes=size_bytes)
        except InputError:
            continue
        if fewer.num_channels <= limit:
            return fewer, (f"the {name} baseline uses {schedule.num_channels} channels, more than the GPUs give "
                           f"communication ({limit}): compared with {fewer.num_channels}")
    return schedule, (f"the {name} baseline uses {schedule.num_channels} channels, more than the GPUs give "
                      f"communication ({limit}), and cannot be built with fewer: compared as it is")


def _selected(choice: Choice, size_bytes: float, element_bytes: int, instances: int) -> bool:
    """Would the runtime run ``choice``'s file at the size? A schedule using the switches is never an XML file,
    so the runtime's file selection does not apply to it."""
    return choice.schedule.uses_switch_offload or selectable_at(choice.schedule.collective, size_bytes,
                                                                element_bytes, instances)


@dataclass(frozen=True)
class Deployable:
    """The baselines as the runtime would run them at the size (see :func:`deployable_baselines`)."""

    comparison: BaselineComparison
    """The comparison with the rebuilt baselines among its correct choices."""
    unselected: tuple[str, ...]
    """Baselines whose own file the runtime would not select at the size."""
    rebuilt_us: dict[str, float]
    """The time of each baseline rebuilt with counts the runtime selects."""
    notes: tuple[str, ...]


def deployable_baselines(topology: Topology, kind: CollectiveKind, size_bytes: float, root: int,
                         comparison: BaselineComparison, synthesized: Sequence[Choice], element_bytes: int,
                         instances: int, sim_options: SimOptions | None = None,
                         channel_limit: int | None = None) -> Deployable:
    """Rebuild the baselines that beat every selectable choice but whose file the runtime would skip at the size.

    Such a baseline (a tree with 10 channels: ``nchunksperloop`` 320) is rebuilt with power-of-two channel and
    chunk counts the runtime selects (:func:`~taccl_py.baselines.selectable.selectable_baseline`, what ``taccl
    baseline -o`` writes), simulated, and ranked with the rest; otherwise the synthesizer would return a slower
    schedule when a deployable form of the faster baseline exists.
    """
    from taccl_py.baselines import NotApplicable
    from taccl_py.baselines.selectable import selectable_baseline
    from taccl_py.errors import InputError

    def selected(choice: Choice) -> bool:
        return _selected(choice, size_bytes, element_bytes, instances)

    baselines = [c for c in comparison.correct if c.is_baseline and not c.candidate.tuned]
    unselected = tuple(c.candidate.label for c in baselines if not selected(c))
    best_selected = min((c.time_us for c in [*synthesized, *comparison.correct] if selected(c)), default=float("inf"))
    added: list[Choice] = []
    rebuilt: dict[str, float] = {}
    notes: list[str] = []
    size = int(size_bytes)
    for choice in baselines if size == size_bytes else []:
        name = choice.candidate.label
        if selected(choice) or choice.time_us >= best_selected:
            continue
        try:
            placed = selectable_baseline(topology, kind, name, size, root=root, type_size=element_bytes)
        except (NotApplicable, InputError):
            continue
        schedule = placed.schedule
        if (not placed.selected or not selectable_at(schedule.collective, size_bytes, element_bytes, instances)
                or (channel_limit is not None and schedule.num_channels > channel_limit)
                or min_nodes_per_rank(schedule.transfers, topology.num_gpus, instances) > MAX_NODES_PER_RANK):
            continue
        sim = simulate_large(topology, schedule, size_bytes, sim_options)
        if sim.time_us is None:
            continue
        added.append(Choice(schedule, sim, Candidate(f"{name}, rebuilt", schedule.collective.chunk_factor,
                                                     sim.time_us, len(schedule.transfers))))
        rebuilt[name] = sim.time_us
        notes.append(f"the {name} baseline's own file would not be selected by the runtime at {size} bytes; rebuilt "
                     f"with {placed.changed} (nchunksperloop {placed.nchunksperloop}) it is: {sim.time_us:.4g} us")
    if not added:
        return Deployable(comparison, unselected, {}, ())
    correct = tuple(sorted([*comparison.correct, *added], key=lambda c: c.time_us))
    return Deployable(BaselineComparison(comparison.times_us, correct, comparison.notes), unselected, rebuilt,
                      tuple(notes))


@dataclass(frozen=True)
class Ranking:
    """Stage 6's output: correct choices in order of preference (the first is returned) and why."""

    ranked: tuple[Choice, ...]
    notes: tuple[str, ...]


def rank_choices(synthesized: Sequence[Choice], baselines: BaselineComparison, size_bytes: float,
                 element_bytes: int, instances: int) -> Ranking:
    """Order the best synthesized schedule of each chunk factor and the correct baselines.

    First those whose file the runtime selects at ``size_bytes`` (if any), then
    by time; a baseline goes before a synthesized schedule only when faster by
    more than :data:`_BASELINE_MARGIN`.
    """
    def selectable(choice: Choice) -> bool:
        return _selected(choice, size_bytes, element_bytes, instances)

    def key(choice: Choice) -> tuple[bool, float]:
        return (not selectable(choice), choice.time_us * (1 + _BASELINE_MARGIN) if choice.is_baseline
                else choice.time_us)

    ranked = tuple(sorted([*sorted(synthesized, key=lambda c: c.time_us), *baselines.correct], key=key))
    notes: list[str] = []
    if not ranked:
        return Ranking(ranked, ())
    first = ranked[0]
    best_synth = min(synthesized, key=lambda c: c.time_us, default=None)
    if first.is_baseline:
        if best_synth is None:
            notes.append(f"no synthesized candidate was correct: returning the {first.candidate.label} baseline")
        elif first.time_us < best_synth.time_us:
            what = f"the {first.label}" if first.candidate.tuned else f"the {first.candidate.label} baseline"
            notes.append(f"{what} ({first.time_us:.4g} us) is faster than the "
                         f"synthesized algorithm ({best_synth.time_us:.4g} us): returning the baseline")
    fastest = min(ranked, key=lambda c: c.time_us)
    if fastest is not first and not selectable(fastest) and selectable(first):
        name = f"the {fastest.candidate.label} baseline" if fastest.is_baseline else \
            f"the synthesized schedule with chunk factor {fastest.candidate.chunk_factor}"
        notes.append(f"{name} is faster ({fastest.time_us:.4g} us) but the runtime would never select its file at "
                     f"{int(size_bytes)} bytes (nchunksperloop {chunks_per_loop(fastest.schedule.collective, instances)}"
                     f" does not divide the {int(size_bytes) // element_bytes} elements): returning "
                     f"{first.label} ({first.time_us:.4g} us)")
    return Ranking(ranked, tuple(notes))
