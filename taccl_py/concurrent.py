"""Several collectives at once on one topology (FSDP's Allgather next to its ReduceScatter).

Each collective keeps its own schedule, its own chunks and its own connections
(a runtime runs concurrent collectives on separate communicators or streams), and
all start at time 0; their transfers share the links max-min fairly, exactly as
the transfers of one schedule do. :func:`simulate_concurrent` runs them as one
program in the simulator and judges each separately: a part's time is its last
commit, the makespan is the last commit of all; a part is correct when its own
post-condition holds. A part that is wrong alone is reported with the error of
its solo run (indices local to its schedule), so one bad schedule does not hide
whether the others are right.

The simulator and this module import no solver code.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from taccl_py.collectives import Collective
from taccl_py.errors import InputError
from taccl_py.event_kernel import Fault
from taccl_py.gc_pause import paused_gc
from taccl_py.schedule import Schedule, Transfer
from taccl_py.simulator import SimOptions, SimResult, _Run, simulate
from taccl_py.topology import Topology

__all__ = ["ConcurrentResult", "PartResult", "endpoint_bytes", "merged_transfers", "simulate_concurrent"]


@dataclass(frozen=True)
class PartResult:
    """One collective of a concurrent run: how long it took next to the others, and alone."""

    name: str
    collective: Collective
    size_bytes: float
    correct: bool
    error: str | None
    time_us: float | None
    """Its last commit in the concurrent run (None unless the whole run is correct)."""
    alone_us: float | None
    """Its time when it runs alone on the topology (None if incorrect)."""
    transfers: int

    @property
    def algbw_GBps(self) -> float | None:
        return None if not self.time_us else self.size_bytes / self.time_us / 1e3

    @property
    def busbw_GBps(self) -> float | None:
        algbw = self.algbw_GBps
        return None if algbw is None else algbw * self.collective.busbw_factor

    @property
    def slowdown(self) -> float | None:
        """Time next to the others over time alone (1.0: they did not get in its way)."""
        return None if not self.time_us or not self.alone_us else self.time_us / self.alone_us


@dataclass(frozen=True)
class ConcurrentResult:
    """Every part's verdict, the makespan (None unless every part is correct) and the links' bytes."""

    parts: tuple[PartResult, ...]
    makespan_us: float | None
    link_bytes: tuple[float, ...]
    error: str | None = None
    """Why the joint run failed when every part is correct alone (e.g. a deadlock across parts), or None."""

    @property
    def correct(self) -> bool:
        return self.makespan_us is not None


class _Union:
    """The chunks of several collectives side by side: part k's chunk c is global chunk ``offsets[k] + c``."""

    def __init__(self, collectives: Sequence[Collective]) -> None:
        self.collectives = tuple(collectives)
        self.offsets: list[int] = []
        total = 0
        for col in self.collectives:
            self.offsets.append(total)
            total += col.num_chunks
        self._num_chunks = total

    @property
    def num_chunks(self) -> int:
        return self._num_chunks

    def part_of(self, chunk: int) -> int:
        k = len(self.offsets) - 1
        while self.offsets[k] > chunk:
            k -= 1
        return k

    def initial(self) -> Iterator[tuple[int, int, int]]:
        for col, offset in zip(self.collectives, self.offsets, strict=True):
            for rank, chunk, mask in col.initial():
                yield rank, offset + chunk, mask

    def describe_chunk(self, chunk: int) -> str:
        k = self.part_of(chunk)
        col = self.collectives[k]
        return f"{col.kind.value} (collective {k + 1}) {col.describe_chunk(chunk - self.offsets[k])}"


def merged_transfers(schedules: Sequence[Schedule]) -> tuple[tuple[Transfer, ...], list[int]]:
    """One program of every schedule's transfers, each part's chunks, channels, ``after`` indices, exchange and
    group numbers moved out of the others' way; also each part's first transfer index."""
    union = _Union([s.collective for s in schedules])
    out: list[Transfer] = []
    bases: list[int] = []
    channel_base = 0
    tags = 0
    for schedule, offset in zip(schedules, union.offsets, strict=True):
        base = len(out)
        bases.append(base)
        exchange: dict[int, int] = {}
        group: dict[int, int] = {}
        for t in schedule.transfers:
            ex = None
            if t.exchange is not None:
                ex = exchange.get(t.exchange)
                if ex is None:
                    ex = exchange[t.exchange] = tags
                    tags += 1
            gr = None
            if t.group is not None:
                gr = group.get(t.group)
                if gr is None:
                    gr = group[t.group] = tags
                    tags += 1
            out.append(Transfer(t.src, t.dst, tuple(offset + c for c in t.chunks), t.route, t.op,
                                channel_base + t.channel, tuple(base + a for a in t.after), t.not_before_us, ex, gr))
        channel_base += schedule.num_channels
    return tuple(out), bases


def endpoint_bytes(topology: Topology, link_bytes: Sequence[float]) -> tuple[float, float]:
    """Bytes on GPU -> network links (injected) and network -> GPU links (ejected), summed over the GPUs."""
    out = sum(b for b, link in zip(link_bytes, topology.links, strict=True) if topology.is_gpu(link.src))
    into = sum(b for b, link in zip(link_bytes, topology.links, strict=True) if topology.is_gpu(link.dst))
    return out, into


def simulate_concurrent(topology: Topology, parts: Sequence[tuple[Schedule, float]],
                        options: SimOptions | None = None) -> ConcurrentResult:
    """Run every ``(schedule, size_bytes)`` at once on ``topology`` from time 0; judge each and time the whole.

    Every part is also simulated alone (its ``alone_us``, and its error when it is wrong).
    """
    if not parts:
        raise InputError("needs at least one collective", where="simulate_concurrent")
    options = options or SimOptions()
    alone: list[SimResult] = [simulate(topology, schedule, size, options) for schedule, size in parts]
    schedules = [schedule for schedule, _ in parts]
    union = _Union([s.collective for s in schedules])
    transfers, bases = merged_transfers(schedules)
    ends = [*bases[1:], len(transfers)]
    transfer_bytes: list[float] = []
    for (schedule, size), base, end in zip(parts, bases, ends, strict=True):
        chunk = schedule.collective.chunk_bytes(size)
        transfer_bytes += [len(t.chunks) * chunk for t in transfers[base:end]]

    def verdicts(times: list[float | None]) -> tuple[PartResult, ...]:
        return tuple(PartResult(schedule.name or schedule.collective.kind.value, schedule.collective, size,
                                solo.correct, solo.error, time, solo.time_us, len(schedule))
                     for (schedule, size), solo, time in zip(parts, alone, times, strict=True))

    nothing = (0.0,) * len(topology.links)
    if not all(solo.correct for solo in alone):
        return ConcurrentResult(verdicts([None] * len(parts)), None, nothing)
    merged = Schedule(schedules[0].collective, transfers, name="+".join(s.name for s in schedules),
                      topology=topology.name)
    with paused_gc():
        run = _Run(topology, merged, max(size for _, size in parts), options, space=union,
                   transfer_bytes=transfer_bytes)
        try:
            run.run()
        except Fault as fault:  # every part is right alone: the mix is what failed
            return ConcurrentResult(verdicts([None] * len(parts)), None, tuple(run.net.bytes_carried[:len(nothing)]),
                                    error=str(fault))
    link_bytes = tuple(run.net.bytes_carried[:len(nothing)])
    commit_at = run.commit_at
    if run.committed < len(transfers):
        stuck = [i for i, t in enumerate(commit_at) if math.isnan(t)]
        return ConcurrentResult(verdicts([None] * len(parts)), None, link_bytes,
                                error=f"deadlock: {len(stuck)} transfer(s) never commit when the collectives run "
                                      "together")
    problem = _post_condition(run.state, union)
    if problem:
        return ConcurrentResult(verdicts([None] * len(parts)), None, link_bytes, error=problem)
    times: list[float | None] = [max(commit_at[base:end], default=0.0) for base, end in zip(bases, ends, strict=True)]
    return ConcurrentResult(verdicts(times), max(t for t in times if t is not None), link_bytes)


def _post_condition(state: dict[int, int], union: _Union) -> str | None:
    """The first part whose post-condition fails in the joint run (each held alone), or None."""
    num_chunks = union.num_chunks
    for k, (col, offset) in enumerate(zip(union.collectives, union.offsets, strict=True)):
        for rank, chunk in col.required():
            if state.get(rank * num_chunks + offset + chunk, 0) != col.complete_mask(chunk):
                return (f"collective {k + 1} ({col.kind.value}): rank {rank} ends without the complete "
                        f"{col.describe_chunk(chunk)} when the collectives run together")
    return None
