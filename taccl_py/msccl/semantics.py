"""What each collective's buffers hold before and must hold after, in MSCCL chunk terms.

A value is the set of *contributions* it combines, as a bitmask: bit
``r * I + j`` is input chunk ``j`` of rank ``r`` (``I`` input chunks per rank).
A copy keeps the set; a reduction unions two disjoint sets (an overlap is a
contribution reduced twice). Reading memory nobody wrote gives :class:`Garbage`.

In-place calls alias the buffers as the runtimes do: Allgather's input is
output block ``rank``, ReduceScatter's output is input block ``rank``, and the
other collectives use one buffer for both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from taccl_py.collectives import CollectiveKind
from taccl_py.msccl.ir import Buffer

__all__ = ["DataSpec", "Garbage", "Value", "describe_value", "reduce_values"]



@dataclass(frozen=True, slots=True)
class Garbage:
    """Data that is not a well-defined set of contributions; ``reason`` says where it came from."""

    reason: str


Value = int | Garbage


def reduce_values(a: Value, b: Value, where: str, per_rank: int | None = None) -> Value:
    """Combine two values; overlapping contributions or garbage give garbage (with the first reason).

    ``per_rank`` (input chunks per rank, :attr:`DataSpec.input_chunks`) lets the reason name the rank and
    chunk whose contribution is reduced twice rather than its bit number.
    """
    if isinstance(a, Garbage):
        return a
    if isinstance(b, Garbage):
        return b
    if a & b:
        return Garbage(f"{where} reduces the contribution of {describe_value(a & b, per_rank)} a second time")
    return a | b


def describe_value(mask: int, per_rank: int | None = None, limit: int = 4) -> str:
    """Short text for a contribution set: ``rank 1 chunk 3, rank 2 chunk 3, ... (8 contributions)``."""
    bits: list[int] = []
    m, k = mask, 0
    while m and len(bits) <= limit:
        if m & 1:
            bits.append(k)
        m >>= 1
        k += 1
    total = mask.bit_count()
    if per_rank:
        words = [f"rank {b // per_rank} chunk {b % per_rank}" for b in bits[:limit]]
    else:
        words = [f"contribution {b}" for b in bits[:limit]]
    more = f", ... ({total} contributions)" if total > limit else ""
    return ", ".join(words) + more if words else "nothing"


@dataclass(frozen=True)
class DataSpec:
    """Pre- and post-condition of one collective for a program with ``nchunks`` chunks per loop."""

    kind: CollectiveKind
    ngpus: int
    nchunks: int
    in_place: bool
    root: int = 0
    """Broadcast/Reduce root (MSCCL XML has none; our optional ``root`` attribute, else 0)."""

    @property
    def block(self) -> int:
        """Chunks per rank block (Allgather input, ReduceScatter output, Alltoall peer block)."""
        return self.nchunks // self.ngpus

    @property
    def input_chunks(self) -> int:
        return self.block if self.kind is CollectiveKind.ALLGATHER else self.nchunks

    def problem(self) -> str | None:
        """Why this collective cannot be defined for these numbers, or None."""
        if self.ngpus < 1 or self.nchunks < 1:
            return "ngpus and nchunksperloop must be >= 1"
        if not 0 <= self.root < self.ngpus:
            return f"root {self.root} is not a rank"
        if self.kind in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLTOALL) and (
                self.nchunks % self.ngpus):
            return (f"{self.kind.value} needs nchunksperloop ({self.nchunks}) to be a multiple of ngpus "
                    f"({self.ngpus})")
        return None

    def canonical(self, rank: int, buffer: Buffer, offset: int) -> tuple[Buffer, int]:
        """The memory a buffer reference names, after in-place aliasing."""
        b, shift = self.alias(rank, buffer)
        return b, offset + shift

    def alias(self, rank: int, buffer: Buffer) -> tuple[Buffer, int]:
        """``(buffer, shift)``: offset ``k`` of ``buffer`` on ``rank`` is offset ``k + shift`` of that buffer."""
        if not self.in_place or buffer is Buffer.SCRATCH:
            return buffer, 0
        if self.kind is CollectiveKind.ALLGATHER:
            return (Buffer.OUTPUT, rank * self.block) if buffer is Buffer.INPUT else (buffer, 0)
        if self.kind is CollectiveKind.REDUCESCATTER:
            return (Buffer.INPUT, rank * self.block) if buffer is Buffer.OUTPUT else (buffer, 0)
        return Buffer.INPUT, 0

    def contribution(self, rank: int, chunk: int) -> int:
        return 1 << (rank * self.input_chunks + chunk)

    def initial(self, rank: int) -> Iterator[tuple[Buffer, int, int]]:
        """``(buffer, offset, value)`` of every input chunk ``rank`` holds at the start."""
        if self.kind is CollectiveKind.BROADCAST and rank != self.root:
            return
        for j in range(self.input_chunks):
            buffer, offset = self.canonical(rank, Buffer.INPUT, j)
            yield buffer, offset, self.contribution(rank, j)

    def expected(self, rank: int) -> Iterator[tuple[int, int]]:
        """``(output offset, value)`` that ``rank`` must hold at the end."""
        n, c, b = self.ngpus, self.nchunks, self.block
        kind = self.kind
        if kind is CollectiveKind.ALLGATHER:
            for k in range(c):
                yield k, 1 << k
        elif kind is CollectiveKind.ALLREDUCE or (kind is CollectiveKind.REDUCE and rank == self.root):
            every_rank = self._every_rank
            for k in range(c):
                yield k, every_rank << k
        elif kind is CollectiveKind.REDUCESCATTER:
            every_rank = self._every_rank
            for j in range(b):
                yield j, every_rank << (rank * b + j)
        elif kind is CollectiveKind.ALLTOALL:
            for s in range(n):
                for j in range(b):
                    yield s * b + j, self.contribution(s, rank * b + j)
        elif kind is CollectiveKind.BROADCAST:
            for k in range(c):
                yield k, self.contribution(self.root, k)

    @property
    def _every_rank(self) -> int:
        """Input chunk 0 of every rank; shifted by ``k``, input chunk ``k`` of every rank."""
        return _sum(self.contribution(s, 0) for s in range(self.ngpus))

    def describe(self, value: Value) -> str:
        if isinstance(value, Garbage):
            return f"garbage ({value.reason})"
        return describe_value(value, self.input_chunks)


def _sum(masks: Iterator[int]) -> int:
    total = 0
    for m in masks:
        total |= m
    return total
