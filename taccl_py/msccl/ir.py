"""The MSCCL program IR: frozen dataclasses mirroring the XML elements one to one.

``Program`` (``<algo>``) holds one ``Gpu`` per rank, each with its
``Threadblock``s, each with its ``Step``s in order. Field values are kept as
written (integers stay integers even when out of range) so the verifier can
name every broken rule; the loader only rejects what cannot be represented.
Dialect facts (limits, collective names) live here too, so the writer, the
lowering and the verifier agree on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from taccl_py.collectives import CollectiveKind

__all__ = [
    "DIALECTS",
    "Buffer",
    "Dialect",
    "Gpu",
    "Program",
    "SourceIssue",
    "Step",
    "StepType",
    "Threadblock",
    "collective_kind",
    "dialect_coll_name",
]


class StepType(StrEnum):
    """Step types of both runtimes (``ra`` is accepted by v1 only and exits the threadblock)."""

    SEND = "s"
    RECV = "r"
    RECV_COPY_SEND = "rcs"
    RECV_REDUCE_SEND = "rrs"
    RECV_REDUCE_COPY = "rrc"
    RECV_REDUCE_COPY_SEND = "rrcs"
    COPY = "cpy"
    REDUCE = "re"
    NOP = "nop"
    RECV_REDUCE_ALIAS = "ra"

    @property
    def sends(self) -> bool:
        """The step sends to the threadblock's send peer."""
        return self in _SENDING

    @property
    def receives(self) -> bool:
        """The step receives from the threadblock's recv peer."""
        return self in _RECEIVING

    @property
    def reduces(self) -> bool:
        return self in _REDUCING

    @property
    def reads_src(self) -> bool:
        """The step reads ``srcbuf[srcoff..]`` (the runtime range-checks srcoff only for these)."""
        return self in _READS_SRC

    @property
    def writes_dst(self) -> bool:
        """The step writes ``dstbuf[dstoff..]``."""
        return self in _WRITES_DST


_SENDING = frozenset({StepType.SEND, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_SEND,
                      StepType.RECV_REDUCE_COPY_SEND})
_RECEIVING = frozenset({StepType.RECV, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_SEND,
                        StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_COPY_SEND, StepType.RECV_REDUCE_ALIAS})
_REDUCING = frozenset({StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_COPY_SEND,
                       StepType.REDUCE})
_READS_SRC = frozenset({StepType.SEND, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY,
                        StepType.RECV_REDUCE_COPY_SEND, StepType.COPY, StepType.REDUCE})
_WRITES_DST = frozenset({StepType.RECV, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_COPY,
                         StepType.RECV_REDUCE_COPY_SEND, StepType.COPY, StepType.REDUCE})


class Buffer(StrEnum):
    INPUT = "i"
    OUTPUT = "o"
    SCRATCH = "s"


@dataclass(frozen=True, slots=True)
class Step:
    """One ``<step>``: ``index`` is the XML ``s`` attribute; offsets and ``cnt`` count chunks."""

    index: int
    type: StepType
    srcbuf: Buffer
    srcoff: int
    dstbuf: Buffer
    dstoff: int
    cnt: int
    depid: int = -1
    deps: int = -1
    hasdep: int = 0
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Threadblock:
    """One ``<tb>``: a sequential process with at most one send peer and one recv peer (-1: none)."""

    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Gpu:
    """One ``<gpu>``: a rank and the chunk counts of its input, output and scratch buffers."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    threadblocks: tuple[Threadblock, ...]
    line: int = field(default=0, compare=False)

    def chunks(self, buffer: Buffer) -> int:
        if buffer is Buffer.INPUT:
            return self.i_chunks
        if buffer is Buffer.OUTPUT:
            return self.o_chunks
        return self.s_chunks


@dataclass(frozen=True, slots=True)
class SourceIssue:
    """Something in the file text the runtimes' tokenizer rejects (found while loading)."""

    rule: str
    line: int
    message: str


@dataclass(frozen=True)
class Program:
    """One ``<algo>``. ``coll`` is kept as written (``reduce_scatter`` in v1, ``reducescatter`` in v2).

    ``outofplace``, ``min_bytes`` and ``max_bytes`` are ``None`` when the file
    does not have them (the v1 dialect); ``attributes`` lists every attribute
    name the ``<algo>`` element carried, for the dialect checks.
    """

    name: str | None
    coll: str
    ngpus: int
    nchunksperloop: int
    nchannels: int
    proto: str
    inplace: int
    gpus: tuple[Gpu, ...]
    outofplace: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    nthreads: int | None = None
    root: int = 0
    """Broadcast/Reduce root. The runtimes ignore it (an extra ``root`` attribute we write when not 0)."""
    attributes: tuple[str, ...] = field(default=(), compare=False)
    source: str = field(default="", compare=False)
    source_issues: tuple[SourceIssue, ...] = field(default=(), compare=False)
    line: int = field(default=0, compare=False)

    @property
    def kind(self) -> CollectiveKind | None:
        """The collective, or None for ``custom``, ``send``, ``gather`` and others we cannot check."""
        return collective_kind(self.coll)

    @property
    def detected_dialect(self) -> str:
        """``v2`` when the file carries all of outofplace/minBytes/maxBytes, else ``v1``."""
        return "v2" if None not in (self.outofplace, self.min_bytes, self.max_bytes) else "v1"

    @property
    def num_threadblocks(self) -> int:
        return sum(len(g.threadblocks) for g in self.gpus)

    @property
    def num_steps(self) -> int:
        return sum(len(tb.steps) for g in self.gpus for tb in g.threadblocks)

    def gpu(self, rank: int) -> Gpu:
        """The ``<gpu>`` whose id is ``rank`` (first one if duplicated)."""
        for g in self.gpus:
            if g.id == rank:
                return g
        raise KeyError(rank)


@dataclass(frozen=True)
class Dialect:
    """What one runtime's parser accepts."""

    name: str
    coll_names: frozenset[str]
    required_algo_attributes: tuple[str, ...]
    max_steps: int
    max_threadblocks: int
    peers_below_ngpus: bool
    chunk_count_check: bool


MAX_CHANNELS = 32
MAX_TBS_PER_CHANNEL = 32
MAX_COUNT = 72
"""``cnt`` must be < 72 in both runtimes (MSCCL_MAX_COUNT)."""
MAX_REDUCE_FUSION = 16
MAX_ATTRIBUTES = 16
MAX_CHILDREN = 1024
MAX_NODES_PER_RANK = 4096
MAX_STRING = 255
INT16_MAX = 32767
INT8_MAX = 127
PROTOCOLS = ("Simple", "LL", "LL128")

DIALECTS: dict[str, Dialect] = {
    "v1": Dialect(
        name="v1",
        coll_names=frozenset({"allreduce", "allgather", "reduce", "broadcast", "alltoall", "reduce_scatter",
                              "custom"}),
        required_algo_attributes=("name", "ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace"),
        max_steps=256,
        max_threadblocks=216,
        peers_below_ngpus=True,
        chunk_count_check=True,
    ),
    "v2": Dialect(
        name="v2",
        coll_names=frozenset({"reduce", "broadcast", "allreduce", "reducescatter", "allgather", "send", "recv",
                              "gather", "scatter", "alltoall", "alltoallv"}),
        required_algo_attributes=("ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace",
                                  "outofplace", "minBytes", "maxBytes"),
        max_steps=64,
        max_threadblocks=1024,
        peers_below_ngpus=False,
        chunk_count_check=False,
    ),
}

_KIND_BY_COLL = {
    "allgather": CollectiveKind.ALLGATHER,
    "allreduce": CollectiveKind.ALLREDUCE,
    "reducescatter": CollectiveKind.REDUCESCATTER,
    "reduce_scatter": CollectiveKind.REDUCESCATTER,
    "alltoall": CollectiveKind.ALLTOALL,
    "broadcast": CollectiveKind.BROADCAST,
    "reduce": CollectiveKind.REDUCE,
}


def collective_kind(coll: str) -> CollectiveKind | None:
    """Map a ``coll`` attribute of either dialect to a collective (None if not one we define)."""
    return _KIND_BY_COLL.get(coll)


def dialect_coll_name(kind: CollectiveKind, dialect: str) -> str:
    """The ``coll`` spelling a dialect expects for a collective."""
    if kind is CollectiveKind.REDUCESCATTER:
        return "reduce_scatter" if dialect == "v1" else "reducescatter"
    return kind.value
