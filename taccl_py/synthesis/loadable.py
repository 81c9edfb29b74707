"""A hierarchical schedule the MSCCL runtime can load: fewer splits when ``hier-lb``'s file exceeds its limits.

Near the bound at 1 GB the load-balanced hierarchical baseline pipelines 32 to 128 dataset splits. Lowered
to MSCCL XML, every split takes channels and steps of its own, and such programs need more channels
between two ranks than MSCCL's 32 or more XML nodes per rank than its 4,096. The best file the runtime
can load is then the same baseline with fewer splits: :func:`fewer_splits` plans it with the largest split
count that lowers. A failed attempt's :class:`~taccl_py.errors.LoweringError` says how far over a count
limit it was (``over``: needed / allowed; channels and nodes grow about in proportion to the splits), so the
next attempt takes the largest power-of-two split count at most ``splits / over`` (half when the error does
not say), and at most :data:`MAX_ATTEMPTS` are lowered. The capped schedule is simulated, so the choice
among it and the other fallbacks is by simulated time, as every other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from taccl_py.collectives import CollectiveKind
from taccl_py.errors import LoweringError
from taccl_py.fast_sim import simulate_large
from taccl_py.msccl.ir import Program
from taccl_py.schedule import Schedule
from taccl_py.synthesis.candidates import Candidate, Choice
from taccl_py.topology import Topology

__all__ = ["MAX_ATTEMPTS", "Capped", "fewer_splits", "hierarchical_splits", "next_splits", "split_choice",
           "with_splits"]

MAX_ATTEMPTS = 4
"""Split counts lowered at most after the first failure."""


@dataclass(frozen=True)
class Capped:
    """The hierarchical schedule with fewer splits, its lowered program, and why larger counts did not fit."""

    schedule: Schedule
    program: Program
    name: str
    """``hier`` or ``hier-lb``."""
    splits: int
    refused: tuple[str, ...]
    """``"64 splits: <the lowering's reason>"`` for every count tried before it, the first one's included."""

    def choice(self, topology: Topology, size_bytes: float) -> Choice | None:
        """As a ranked choice of the synthesizer, simulated (None if the simulator rejects it)."""
        return split_choice(topology, self.schedule, size_bytes)


def split_choice(topology: Topology, schedule: Schedule, size_bytes: float) -> Choice | None:
    """A hierarchical baseline planned with fewer splits as a ranked choice, labelled ``hier-lb (16 splits)``,
    simulated (None if the simulator rejects it, or the schedule is not hierarchical)."""
    found = hierarchical_splits(schedule)
    if found is None:
        return None
    sim = simulate_large(topology, schedule, size_bytes)  # the same times; compiled when large
    if sim.time_us is None:
        return None
    return Choice(schedule, sim, Candidate(f"{found[0]} ({found[1]} splits)", schedule.collective.chunk_factor,
                                           sim.time_us, len(schedule.transfers)))


def hierarchical_splits(schedule: Schedule) -> tuple[str, int] | None:
    """(``hier`` or ``hier-lb``, splits) of a hierarchical baseline schedule; None for any other."""
    name = schedule.notes.get("algorithm")
    parameters = schedule.notes.get("parameters")
    if name not in ("hier", "hier-lb") or not isinstance(parameters, dict):
        return None
    splits = parameters.get("splits")
    return (str(name), splits) if isinstance(splits, int) else None


def next_splits(splits: int, failure: LoweringError) -> int | None:
    """The split count to try after ``splits`` failed to lower with ``failure``: the largest power of two at most
    ``splits / over`` (half when the error does not say how far over), None when there is none."""
    from taccl_py.baselines.hierarchical import SPLIT_CHOICES

    over = failure.over
    target = splits / over if over is not None and over > 1 else splits / 2
    smaller = [c for c in SPLIT_CHOICES if c < splits and c <= target]
    return max(smaller) if smaller else None


def with_splits(topology: Topology, kind: CollectiveKind, name: str, splits: int, size_bytes: float) -> Schedule:
    """The hierarchical baseline ``name`` (``hier`` or ``hier-lb``) planned with ``splits`` splits."""
    from taccl_py.baselines.hierarchical import hierarchical_plan, hierarchical_schedule

    plan = hierarchical_plan(topology, kind, balanced=name == "hier-lb", splits=splits, size_bytes=size_bytes)
    return hierarchical_schedule(topology, kind, plan=plan)


def fewer_splits(topology: Topology, kind: CollectiveKind, schedule: Schedule, size_bytes: float,
                 failure: LoweringError, lower: Callable[[Schedule], Program]) -> Capped | None:
    """``schedule`` (a hierarchical baseline whose lowering failed with ``failure``) planned again with the most
    splits that ``lower`` accepts; None when it is not hierarchical or no smaller count lowers."""
    found = hierarchical_splits(schedule)
    if found is None:
        return None
    name, splits = found
    refused: list[str] = [f"{splits} splits: {failure}"]
    for _ in range(MAX_ATTEMPTS):
        smaller = next_splits(splits, failure)
        if smaller is None:
            return None
        splits = smaller
        capped = with_splits(topology, kind, name, splits, size_bytes)
        try:
            program = lower(capped)
        except LoweringError as exc:
            refused.append(f"{splits} splits: {exc}")
            failure = exc
            continue
        return Capped(capped, program, name, splits, tuple(refused))
    return None
