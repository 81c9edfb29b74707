"""Would the runtime pick this program for a call of a given size?

The MSCCL runtimes only run an algorithm file for a call whose size fits it;
any other call silently runs NCCL's (or RCCL's) own algorithm. The v2 rule
(msccl-executor-nccl and RCCL, ``mscclInternalSchedulerSelectAlgo``): the
call's element ``count`` is > 0, ``count x sizeMultiplier`` is a multiple of
``nchunksperloop``, and ``minBytes <= count x typeSize x sizeMultiplier <=
maxBytes`` (``maxBytes`` 0: no upper limit), where ``sizeMultiplier`` is
``ngpus`` for Allgather, ReduceScatter and Alltoall and 1 otherwise, and
``count`` is the per-rank count for Allgather and ReduceScatter. The v1 fork
uses ``minBytes <= bytes < maxBytes`` (``maxBytes`` absent: 128 MiB) and the
same divisibility of the element count.

``count x typeSize x sizeMultiplier`` is the nccl-tests size in every case
(the Allgather output, the ReduceScatter input, the Allreduce buffer, the
Alltoall per-rank buffer), so the rule reads: the call's total element count
``size / typeSize`` is a multiple of ``nchunksperloop`` and the size lies in
the band. The data type matters: nccl-tests use ``float`` (4 bytes) by
default, training uses 2-byte types; :data:`DEFAULT_TYPE_SIZE` is 4.
"""

from __future__ import annotations

from dataclasses import dataclass

from taccl_py.collectives import CollectiveKind
from taccl_py.msccl.ir import Program

__all__ = ["DEFAULT_TYPE_SIZE", "Selection", "band_sizes", "falls_back", "kind_multiplier", "runtime_selection",
           "size_multiplier", "size_rule", "smallest_selected_size"]

DEFAULT_TYPE_SIZE = 4
"""Bytes per element of the call (nccl-tests' default ``float``)."""

V1_DEFAULT_MAX_BYTES = 128 << 20
"""The v1 fork's upper size when a file has no ``maxBytes``."""

_MULTIPLIED = frozenset({"allgather", "reducescatter", "reduce_scatter", "alltoall"})


@dataclass(frozen=True)
class Selection:
    """The runtime's decision for one call: ``selected``, the call's ``count`` and, if not, ``reason``."""

    selected: bool
    size_bytes: int
    type_size: int
    count: int | None
    reason: str = ""

    def describe(self) -> str:
        if self.selected:
            return (f"selected at {self.size_bytes} bytes: count={self.count} elements of {self.type_size} bytes "
                    "per call")
        return f"not selected at {self.size_bytes} bytes: {self.reason}"


def size_multiplier(coll: str, ngpus: int) -> int:
    """``ngpus`` for Allgather, ReduceScatter and Alltoall, else 1 (the runtimes' sizeMultiplier)."""
    return ngpus if coll in _MULTIPLIED else 1


def runtime_selection(program: Program, size_bytes: int, type_size: int = DEFAULT_TYPE_SIZE,
                      dialect: str | None = None) -> Selection:
    """Whether the runtime would run ``program`` for a call of nccl-tests ``size_bytes`` elements of ``type_size``.

    Only the size rule is checked here (the caller matches ngpus, the collective and the buffer mode).
    """
    dialect = dialect or program.detected_dialect
    return size_rule(program.coll, program.ngpus, program.nchunksperloop, size_bytes, type_size,
                     min_bytes=program.min_bytes, max_bytes=program.max_bytes, dialect=dialect)


def size_rule(coll: str, ngpus: int, nchunksperloop: int, size_bytes: int, type_size: int = DEFAULT_TYPE_SIZE, *,
              min_bytes: int | None = 0, max_bytes: int | None = 0, dialect: str = "v2") -> Selection:
    """:func:`runtime_selection` from the attributes alone (for a file not written yet)."""
    multiplier = size_multiplier(coll, ngpus)
    per_call = type_size * multiplier
    if size_bytes <= 0 or size_bytes % per_call:
        return Selection(False, size_bytes, type_size, None,
                         f"{size_bytes} bytes is not a whole count of {type_size}-byte elements"
                         + (f" on each of {multiplier} ranks" if multiplier > 1 else ""))
    count = size_bytes // per_call
    lo = min_bytes or 0
    if dialect == "v1":
        hi = max_bytes if max_bytes is not None else V1_DEFAULT_MAX_BYTES
        if not lo <= size_bytes < hi:
            return Selection(False, size_bytes, type_size, count,
                             f"outside the size range minBytes={lo} <= size < maxBytes={hi}")
    else:
        hi = max_bytes or 0
        if size_bytes < lo or (hi and size_bytes > hi):
            return Selection(False, size_bytes, type_size, count,
                             f"outside the size range minBytes={lo} <= size <= maxBytes={hi or 'unlimited'}")
    if (count * multiplier) % nchunksperloop:
        return Selection(False, size_bytes, type_size, count,
                         f"count x sizeMultiplier = {count} x {multiplier} = {count * multiplier} elements is not a "
                         f"multiple of nchunksperloop={nchunksperloop}; the runtime runs its own algorithm")
    return Selection(True, size_bytes, type_size, count)


def smallest_selected_size(program: Program, type_size: int = DEFAULT_TYPE_SIZE,
                           dialect: str | None = None) -> int | None:
    """The smallest power-of-two size at which the runtime picks ``program`` (None: none up to 2^50 bytes)."""
    size = 1
    while size <= 1 << 50:
        if runtime_selection(program, size, type_size, dialect).selected:
            return size
        size *= 2
    return None


def falls_back(program: Program, sizes: list[int], type_size: int = DEFAULT_TYPE_SIZE,
               dialect: str | None = None) -> list[Selection]:
    """The decisions for those of ``sizes`` at which the runtime would not pick ``program``."""
    return [s for s in (runtime_selection(program, size, type_size, dialect) for size in sizes) if not s.selected]


def band_sizes(program: Program, dialect: str | None = None) -> list[int]:
    """Power-of-two sizes inside the program's band (capped at 4 GiB above an unlimited band)."""
    dialect = dialect or program.detected_dialect
    lo = max(program.min_bytes or 0, 1)
    hi = program.max_bytes or 0
    if dialect == "v1" and program.max_bytes is None:
        hi = V1_DEFAULT_MAX_BYTES
    top = hi if hi else max(4 << 30, lo)
    sizes = []
    size = 1
    while size <= top:
        if size >= lo and (not hi or size < hi or (dialect != "v1" and size == hi)):
            sizes.append(size)
        size *= 2
    return sizes


def kind_multiplier(kind: CollectiveKind, ngpus: int) -> int:
    """:func:`size_multiplier` for a collective kind."""
    return ngpus if kind in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLTOALL) else 1
