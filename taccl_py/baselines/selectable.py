"""Baselines written so that the MSCCL runtime actually runs them at their size.

The runtimes pick an algorithm file for a call only when the call's element
count times ``sizeMultiplier`` is a multiple of the file's ``nchunksperloop``
(:mod:`taccl_py.msccl.selection`); otherwise they silently run their own
algorithm. A baseline's ``nchunksperloop`` is its chunk count (N x chunk
factor; the chunk factor for Broadcast and Reduce), and its chunk factor
follows its channels and pipelining depth: 12 rings on a DGX-1 or 6 tree
channels give a factor of 3, which no power-of-two size is a multiple of.

:func:`selectable_baseline` keeps the default schedule when the runtime picks
it at the size; otherwise it tries power-of-two channel counts and chunk
factors near the default ones, keeps those the runtime picks, and returns the
fastest (simulated). When none can be picked (N itself has an odd factor, or
the size holds fewer elements than N), it returns the default and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.msccl.selection import DEFAULT_TYPE_SIZE, size_rule
from taccl_py.schedule import Schedule
from taccl_py.topology import Topology

__all__ = ["Placement", "nchunks_per_loop", "placement", "ring_send_waits_at", "selectable_baseline",
           "smallest_selected"]

_MAX_CHUNK_FACTOR = 256
"""Largest chunk factor tried (the lowering's offsets and step counts grow with it)."""
_MAX_TRIES = 6
"""Alternative schedules simulated at most."""


@dataclass(frozen=True)
class Placement:
    """The schedule to write and whether the runtime would pick it at ``size_bytes``."""

    schedule: Schedule
    size_bytes: int
    type_size: int
    nchunksperloop: int
    selected: bool
    count: int | None
    """The call's element count at ``size_bytes`` (per rank for Allgather/ReduceScatter), when whole."""
    reason: str
    """Why the runtime would not pick it (empty when it would)."""
    changed: str
    """What differs from the default baseline (empty when nothing)."""
    smallest_size: int | None
    """Smallest power-of-two size at which the runtime would pick it (None: none up to 2^50)."""

    def describe(self) -> str:
        head = f"nchunksperloop {self.nchunksperloop}"
        if self.changed:
            head += f" ({self.changed})"
        if self.selected:
            return (f"{head}: the runtime picks it at {self.size_bytes} bytes (count {self.count} elements of "
                    f"{self.type_size} bytes)")
        where = (f"the smallest power-of-two size it is picked at is {self.smallest_size} bytes"
                 if self.smallest_size is not None else "it is picked at no power-of-two size")
        return f"{head}: the runtime does NOT pick it at {self.size_bytes} bytes ({self.reason}); {where}"


def nchunks_per_loop(schedule: Schedule) -> int:
    """The ``nchunksperloop`` the lowering writes for ``schedule`` (one instance)."""
    col = schedule.collective
    if col.kind is CollectiveKind.ALLTOALL:
        return col.num_ranks * col.chunk_factor
    return col.num_chunks


def smallest_selected(kind: CollectiveKind, ngpus: int, nchunksperloop: int,
                      type_size: int = DEFAULT_TYPE_SIZE) -> int | None:
    """Smallest power-of-two size (bytes) at which the runtime picks a file with these attributes."""
    size = 1
    while size <= 1 << 50:
        if size_rule(kind.value, ngpus, nchunksperloop, size, type_size).selected:
            return size
        size *= 2
    return None


def placement(schedule: Schedule, size: int, type_size: int = DEFAULT_TYPE_SIZE, changed: str = "") -> Placement:
    """``schedule`` as written at ``size`` bytes: its ``nchunksperloop`` and whether the runtime picks it there."""
    return _placement(schedule, size, type_size, changed)


def _placement(schedule: Schedule, size: int, type_size: int, changed: str) -> Placement:
    col = schedule.collective
    nchunks = nchunks_per_loop(schedule)
    decision = size_rule(col.kind.value, col.num_ranks, nchunks, size, type_size)
    return Placement(schedule, size, type_size, nchunks, decision.selected, decision.count, decision.reason, changed,
                     smallest_selected(col.kind, col.num_ranks, nchunks, type_size))


def _powers_of_two_near(x: int, limit: int) -> list[int]:
    """Powers of two from the one just above ``x`` down to 1, at most ``limit``."""
    top = 1
    while top < x and top < limit:
        top *= 2
    out = []
    while top >= 1:
        out.append(top)
        top //= 2
    return out


def selectable_baseline(topology: Topology, kind: CollectiveKind, algorithm: str, size_bytes: int, *,
                        channels: int | None = None, root: int = 0, step_overhead_us: float = 0.0,
                        type_size: int = DEFAULT_TYPE_SIZE, built: Schedule | None = None) -> Placement:
    """The baseline ``algorithm`` at ``size_bytes``, adjusted so the runtime picks it there when it can.

    ``built``: the baseline as the caller timed it (the ``oneshot`` form a runtime model prefers), kept when the
    runtime picks it as it is; otherwise the baseline is built here."""
    from taccl_py.baselines import NotApplicable, baseline
    from taccl_py.simulator import SimOptions, simulate

    default = built if built is not None else baseline(topology, kind, algorithm, channels=channels, root=root,
                                                       size_bytes=size_bytes, step_overhead_us=step_overhead_us)
    first = _placement(default, size_bytes, type_size, "")
    if first.selected:
        return first
    base_channels = int(default.notes.get("channels") or 1)
    channel_options = [channels] if channels is not None else (
        [None] if algorithm == "oneshot" else sorted({c for c in _powers_of_two_near(base_channels, 64)[:2]}
                                                     | ({base_channels} if base_channels & (base_channels - 1) == 0
                                                        else set()), reverse=True))
    c0 = default.collective.chunk_factor
    options = SimOptions(step_overhead_us=step_overhead_us)
    best: tuple[float, Placement] | None = None
    tries = 0
    for ch in channel_options:
        for c in _powers_of_two_near(c0, _MAX_CHUNK_FACTOR):
            if tries >= _MAX_TRIES:
                break
            if ch is not None and c % ch:
                continue
            try:
                schedule = baseline(topology, kind, algorithm, channels=ch, chunk_factor=c, root=root,
                                    size_bytes=size_bytes, step_overhead_us=step_overhead_us)
            except NotApplicable:
                continue
            changes = []
            if ch is not None and ch != base_channels:
                changes.append(f"{ch} channels instead of {base_channels}")
            changes.append(f"chunk factor {c} instead of {c0}")
            placed = _placement(schedule, size_bytes, type_size, ", ".join(changes))
            if not placed.selected:
                continue
            tries += 1
            sim = simulate(topology, schedule, size_bytes, options)
            if sim.correct and sim.time_us is not None and (best is None or sim.time_us < best[0]):
                best = (sim.time_us, placed)
    return best[1] if best is not None else first


def ring_send_waits_at(topology: Topology, kind: CollectiveKind, size_bytes: int, *, channels: int | None = None,
                       type_size: int = DEFAULT_TYPE_SIZE) -> tuple[int, dict[tuple[int, int, int], list[bool]]] | None:
    """(channels, :func:`~taccl_py.baselines.ring.ring_send_waits`) of the ring baseline :func:`selectable_baseline`
    returns at ``size_bytes`` with ``channels``, from the ring plan alone: what the lowering's floor of connections
    (:func:`~taccl_py.msccl.lowering.fewest_connections`) counts from, without building the transfers.

    None when that is not the ring as built by default (the runtime would not pick it at the size, so another
    chunk factor is tried) or ``kind`` is not a ring Allgather, ReduceScatter or Allreduce: then only the built
    schedule can say. A caller halving the channels until the program fits skips the counts the floor already
    refuses without building them (a ring of 1,024 GPUs on 8 channels: 8.4 million transfers)."""
    from taccl_py.baselines.layout import ring_plan
    from taccl_py.baselines.ring import ring_send_waits

    if kind not in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
        return None
    plan = ring_plan(topology, channels)
    default = Collective(kind, topology.num_gpus, plan.channels)  # one piece per channel: ring_allgather's default
    if not size_rule(kind.value, default.num_ranks, default.num_chunks, size_bytes, type_size).selected:
        return None
    return plan.channels, ring_send_waits(plan, kind)
