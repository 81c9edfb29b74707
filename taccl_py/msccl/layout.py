"""Where each (rank, chunk) of a schedule lives in the MSCCL buffers.

The simulator tracks one slot per (rank, chunk), numbered as in
:mod:`taccl_py.collectives`. A rank keeps its copy of a chunk in one *working*
location: the place the collective's result must be (``o``, or ``i`` in place)
when the rank must end with the chunk, else where its input sits when it never
overwrites it, else a scratch slot. When the input is elsewhere than the
working location, an initial ``cpy`` moves it there.

============== =========================== ===================================
collective     start                       end
============== =========================== ===================================
Allgather      own block: o[k] in place    every rank: o[k]
               (i_chunks=0), i[j] else
Alltoall       (s, d, j) on s: i[d*c+j]    on d: o[s*c+j]
ReduceScatter  i[k] on every rank          rank r: i[r*c+j] in place
                                           (o_chunks=0), o[j] else
Allreduce      i[k]                        i[k] in place (o_chunks=0), o[k]
Broadcast      root: o[k] in place, i[k]   every rank: o[k]
Reduce         i[k]                        root: i[k] in place, o[k]
============== =========================== ===================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.msccl.ir import Buffer
from taccl_py.schedule import Schedule

__all__ = ["BufferLayout", "Location", "contiguous_runs", "is_contiguous", "plan_layout"]

Location = tuple[Buffer, int]


@dataclass(frozen=True)
class BufferLayout:
    """Working locations, initial copies and buffer sizes of every rank (read-only once planned)."""

    collective: Collective
    in_place: bool
    working: dict[tuple[int, int], Location]
    initial_copies: dict[int, list[tuple[int, Location, Location]]]
    """rank -> [(chunk, from, to)] copies that run before anything else."""
    i_chunks: int
    o_chunks: int
    scratch: tuple[int, ...]
    """Scratch chunks per rank for working locations (the lowering appends staging areas after them)."""

    def where(self, rank: int, chunk: int) -> Location:
        return self.working[(rank, chunk)]


def _initial(col: Collective, rank: int, chunk: int, in_place: bool) -> Location | None:
    n, c, kind = col.num_ranks, col.chunk_factor, col.kind
    if kind is CollectiveKind.ALLGATHER:
        if chunk // c != rank:
            return None
        return (Buffer.OUTPUT, chunk) if in_place else (Buffer.INPUT, chunk - rank * c)
    if kind is CollectiveKind.ALLTOALL:
        return (Buffer.INPUT, chunk % (n * c)) if chunk // (n * c) == rank else None
    if kind is CollectiveKind.BROADCAST:
        if rank != col.root:
            return None
        return (Buffer.OUTPUT, chunk) if in_place else (Buffer.INPUT, chunk)
    return Buffer.INPUT, chunk


def _final(col: Collective, rank: int, chunk: int, in_place: bool) -> Location | None:
    n, c, kind = col.num_ranks, col.chunk_factor, col.kind
    if kind in (CollectiveKind.ALLGATHER, CollectiveKind.BROADCAST):
        return Buffer.OUTPUT, chunk
    if kind is CollectiveKind.ALLTOALL:
        if (chunk // c) % n != rank:
            return None
        return Buffer.OUTPUT, (chunk // (n * c)) * c + chunk % c
    if kind is CollectiveKind.REDUCESCATTER:
        if chunk // c != rank:
            return None
        return (Buffer.INPUT, chunk) if in_place else (Buffer.OUTPUT, chunk - rank * c)
    if kind is CollectiveKind.REDUCE and rank != col.root:
        return None
    return (Buffer.INPUT, chunk) if in_place else (Buffer.OUTPUT, chunk)


def buffer_sizes(col: Collective, in_place: bool) -> tuple[int, int]:
    """(i_chunks, o_chunks) every rank declares."""
    n, c, kind = col.num_ranks, col.chunk_factor, col.kind
    total = col.num_chunks if kind is not CollectiveKind.ALLTOALL else n * c
    if kind is CollectiveKind.ALLGATHER:
        return (0, total) if in_place else (c, total)
    if kind is CollectiveKind.REDUCESCATTER:
        return (total, 0) if in_place else (total, c)
    if kind is CollectiveKind.BROADCAST:
        return (0, total) if in_place else (total, total)
    if kind in (CollectiveKind.ALLREDUCE, CollectiveKind.REDUCE):
        return (total, 0) if in_place else (total, total)
    return total, total


def plan_layout(schedule: Schedule, in_place: bool, unstored: frozenset[int] = frozenset()) -> BufferLayout:
    """Working location of every (rank, chunk) the schedule touches or the collective defines.

    ``unstored``: transfers whose result is never stored (lowered to ``rrs``),
    so they do not force their chunks out of the input buffer.
    """
    col = schedule.collective
    n = col.num_ranks
    chunks = col.num_chunks
    touched = bytearray(n * chunks)  # rank * chunks + chunk, so a scan visits them sorted by (rank, chunk)
    written = bytearray(n * chunks)
    for i, t in enumerate(schedule.transfers):
        src, dst = t.src * chunks, t.dst * chunks
        stored = i not in unstored
        for k in t.chunks:
            touched[src + k] = 1
            touched[dst + k] = 1
            if stored:
                written[dst + k] = 1
    for rank, chunk, _ in col.initial():
        touched[rank * chunks + chunk] = 1
    for rank, chunk in col.required():
        touched[rank * chunks + chunk] = 1
    working: dict[tuple[int, int], Location] = {}
    needs_scratch: list[tuple[int, int]] = []
    copies: dict[int, list[tuple[int, Location, Location]]] = {}
    for index in (i for i, flag in enumerate(touched) if flag):
        rank, chunk = divmod(index, chunks)
        start = _initial(col, rank, chunk, in_place)
        end = _final(col, rank, chunk, in_place)
        if end is not None:
            working[(rank, chunk)] = end
            if start is not None and start != end:
                copies.setdefault(rank, []).append((chunk, start, end))
        elif start is not None and not written[index]:
            working[(rank, chunk)] = start
        else:
            needs_scratch.append((rank, chunk))
    scratch = [0] * n
    for rank, chunk in needs_scratch:  # sorted by (rank, chunk): consecutive chunks stay contiguous
        working[(rank, chunk)] = (Buffer.SCRATCH, scratch[rank])
        scratch[rank] += 1
        start = _initial(col, rank, chunk, in_place)
        if start is not None:
            copies.setdefault(rank, []).append((chunk, start, working[(rank, chunk)]))
    i_chunks, o_chunks = buffer_sizes(col, in_place)
    return BufferLayout(col, in_place, working, copies, i_chunks, o_chunks, tuple(scratch))


def contiguous_runs(pairs: Sequence[tuple[Location, Location]]) -> list[tuple[Location, Location, int]]:
    """Group (from, to) chunk moves into runs where both sides advance by one: (from, to, count)."""
    runs: list[tuple[Location, Location, int]] = []
    for src, dst in pairs:
        if runs:
            (sb, so), (db, do), cnt = runs[-1]
            if src == (sb, so + cnt) and dst == (db, do + cnt):
                runs[-1] = ((sb, so), (db, do), cnt + 1)
                continue
        runs.append((src, dst, 1))
    return runs


def is_contiguous(locs: Sequence[Location]) -> bool:
    """The locations are consecutive chunks of one buffer, in order."""
    if len(locs) == 1:
        return True
    buffer, offset = locs[0]
    return all(loc[0] == buffer and loc[1] == offset + i for i, loc in enumerate(locs))
