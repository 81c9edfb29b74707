"""Collectives as chunk pre- and post-conditions.

The buffer of a collective is cut into chunks (``chunk_factor`` chunks per
rank-sized block). Every chunk carries a *contribution set*: the ranks whose
input it combines, as a bitmask. A rank initially holds its own contributions;
at the end every required (rank, chunk) must hold exactly the complete set, so a
lost or doubly reduced contribution is visible.

Chunk numbering (N ranks, c = chunk_factor):

* Allgather: chunk ``r*c + j`` is piece j of rank r's input.
* Alltoall: chunk ``(s*N + d)*c + j`` is piece j of what rank s sends to rank d.
* ReduceScatter / Allreduce: chunk ``b*c + j`` is piece j of block b (rank b's
  result block in ReduceScatter).
* Broadcast / Reduce: chunk ``j`` of the root's buffer.

Sizes follow nccl-tests: ``size`` is the Allgather output, the ReduceScatter
input, the Allreduce/Broadcast/Reduce buffer and the per-rank Alltoall buffer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from taccl_py.errors import InputError

__all__ = ["Collective", "CollectiveKind", "parse_collective"]


class CollectiveKind(StrEnum):
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    ALLREDUCE = "allreduce"
    ALLTOALL = "alltoall"
    BROADCAST = "broadcast"
    REDUCE = "reduce"


_ALIASES = {
    "allgather": CollectiveKind.ALLGATHER, "all_gather": CollectiveKind.ALLGATHER,
    "all-gather": CollectiveKind.ALLGATHER, "ag": CollectiveKind.ALLGATHER,
    "reducescatter": CollectiveKind.REDUCESCATTER, "reduce_scatter": CollectiveKind.REDUCESCATTER,
    "reduce-scatter": CollectiveKind.REDUCESCATTER, "rs": CollectiveKind.REDUCESCATTER,
    "allreduce": CollectiveKind.ALLREDUCE, "all_reduce": CollectiveKind.ALLREDUCE,
    "all-reduce": CollectiveKind.ALLREDUCE, "ar": CollectiveKind.ALLREDUCE,
    "alltoall": CollectiveKind.ALLTOALL, "all_to_all": CollectiveKind.ALLTOALL,
    "all-to-all": CollectiveKind.ALLTOALL, "a2a": CollectiveKind.ALLTOALL,
    "broadcast": CollectiveKind.BROADCAST, "bcast": CollectiveKind.BROADCAST,
    "reduce": CollectiveKind.REDUCE,
}


def parse_collective(name: str, *, where: str = "--collective") -> CollectiveKind:
    """Accept the usual spellings (``allgather``, ``all_gather``, ``reduce_scatter``, ``a2a``...)."""
    kind = _ALIASES.get(str(name).strip().lower())
    if kind is None:
        choices = ", ".join(k.value for k in CollectiveKind)
        raise InputError(f"unknown collective {name!r} (choose one of: {choices})", where=where)
    return kind


_REDUCTIONS = {CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE, CollectiveKind.REDUCE}


@dataclass(frozen=True)
class Collective:
    """A collective on ``num_ranks`` ranks, cut into ``chunk_factor`` chunks per block."""

    kind: CollectiveKind
    num_ranks: int
    chunk_factor: int = 1
    root: int = 0

    def __post_init__(self) -> None:
        if self.num_ranks < 1:
            raise InputError(f"num_ranks must be >= 1 (got {self.num_ranks})")
        if self.chunk_factor < 1:
            raise InputError(f"chunk_factor must be >= 1 (got {self.chunk_factor})")
        if not 0 <= self.root < self.num_ranks:
            raise InputError(f"root must be a rank in 0..{self.num_ranks - 1} (got {self.root})")

    # ------------------------------------------------------------------ shape
    @property
    def is_reduction(self) -> bool:
        return self.kind in _REDUCTIONS

    @property
    def num_chunks(self) -> int:
        n, c = self.num_ranks, self.chunk_factor
        if self.kind is CollectiveKind.ALLTOALL:
            return n * n * c
        if self.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
            return c
        return n * c

    def chunk_bytes(self, size_bytes: float) -> float:
        """Bytes in one chunk for an nccl-tests ``size``."""
        n, c = self.num_ranks, self.chunk_factor
        if self.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
            return size_bytes / c
        return size_bytes / (n * c)

    @property
    def busbw_factor(self) -> float:
        """nccl-tests busbw = algbw x this factor."""
        n = self.num_ranks
        if self.kind is CollectiveKind.ALLREDUCE:
            return 2 * (n - 1) / n
        if self.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
            return 1.0
        return (n - 1) / n

    @property
    def full_mask(self) -> int:
        return (1 << self.num_ranks) - 1

    def with_chunk_factor(self, chunk_factor: int) -> Collective:
        return Collective(self.kind, self.num_ranks, chunk_factor, self.root)

    # ------------------------------------------------------------- semantics
    def source_of(self, chunk: int) -> int:
        """The rank whose input a non-reduction chunk comes from."""
        n, c = self.num_ranks, self.chunk_factor
        if self.kind is CollectiveKind.ALLGATHER:
            return chunk // c
        if self.kind is CollectiveKind.ALLTOALL:
            return chunk // (n * c)
        if self.kind is CollectiveKind.BROADCAST:
            return self.root
        raise ValueError(f"{self.kind} chunks combine every rank's contribution")

    def destination_of(self, chunk: int) -> int:
        """Alltoall / ReduceScatter: the single rank that must end with the chunk."""
        n, c = self.num_ranks, self.chunk_factor
        if self.kind is CollectiveKind.ALLTOALL:
            return (chunk // c) % n
        if self.kind is CollectiveKind.REDUCESCATTER:
            return chunk // c
        if self.kind is CollectiveKind.REDUCE:
            return self.root
        raise ValueError(f"{self.kind} chunks go to every rank")

    def block_of(self, chunk: int) -> int:
        """Rank-sized block of a ReduceScatter/Allreduce/Allgather chunk."""
        return chunk // self.chunk_factor if self.kind is not CollectiveKind.ALLTOALL else chunk // (
            self.num_ranks * self.chunk_factor)

    def complete_mask(self, chunk: int) -> int:
        """The contribution set a finished copy of ``chunk`` carries."""
        if self.is_reduction:
            return self.full_mask
        return 1 << self.source_of(chunk)

    def initial(self) -> Iterator[tuple[int, int, int]]:
        """Pre-condition: ``(rank, chunk, contribution mask)`` for every held chunk."""
        n, c = self.num_ranks, self.chunk_factor
        if self.kind is CollectiveKind.ALLGATHER:
            for r in range(n):
                for j in range(c):
                    yield r, r * c + j, 1 << r
        elif self.kind is CollectiveKind.ALLTOALL:
            for s in range(n):
                for k in range(n * c):
                    yield s, s * n * c + k, 1 << s
        elif self.kind is CollectiveKind.BROADCAST:
            for j in range(c):
                yield self.root, j, 1 << self.root
        else:
            for r in range(n):
                for chunk in range(self.num_chunks):
                    yield r, chunk, 1 << r

    def required(self) -> Iterator[tuple[int, int]]:
        """Post-condition: every ``(rank, chunk)`` that must hold the complete contribution set."""
        n = self.num_ranks
        if self.kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE, CollectiveKind.BROADCAST):
            for r in range(n):
                for chunk in range(self.num_chunks):
                    yield r, chunk
        else:
            for chunk in range(self.num_chunks):
                yield self.destination_of(chunk), chunk

    def describe_chunk(self, chunk: int) -> str:
        """Human name of a chunk for error messages."""
        n, c = self.num_ranks, self.chunk_factor
        piece = f" piece {chunk % c}" if c > 1 else ""
        if self.kind is CollectiveKind.ALLGATHER:
            return f"chunk {chunk} (rank {chunk // c}'s block{piece})"
        if self.kind is CollectiveKind.ALLTOALL:
            return f"chunk {chunk} (rank {chunk // (n * c)} -> rank {(chunk // c) % n}{piece})"
        if self.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
            return f"chunk {chunk}"
        return f"chunk {chunk} (block {chunk // c}{piece})"
