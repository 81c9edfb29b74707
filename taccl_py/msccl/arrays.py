"""An MSCCL program as arrays: millions of steps without one Python object each.

:class:`ProgramArrays` holds what :class:`~taccl_py.msccl.ir.Program` holds, column by
column: the ``<algo>`` attributes in ``header`` (a :class:`Program` whose GPUs carry no
threadblocks), then one row per ``<gpu>``, per ``<tb>`` and per ``<step>`` in file order,
threadblocks and steps grouped by CSR pointers (``gpu_tb[g]:gpu_tb[g + 1]`` are GPU
``g``'s threadblocks, ``tb_step[t]:tb_step[t + 1]`` threadblock ``t``'s steps). Step
types and buffers are small integer codes (their position in :class:`StepType` and
:class:`Buffer`). Values are kept as written, as the IR keeps them; a program whose
values do not fit 32 bits has no array form (:func:`program_arrays` returns None).

The fast verifier and timing (:mod:`taccl_py.msccl.fast_verify`) and the compiled
reader and writer (:mod:`taccl_py.msccl.xml_scan`, :mod:`taccl_py.msccl.fast_writer`)
work on this form; :meth:`ProgramArrays.program` builds the objects back (cached).
A 1,024-GPU ring Allgather of two million steps takes about 100 MB in this form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from taccl_py.collectives import CollectiveKind
from taccl_py.msccl.ir import Buffer, Gpu, Program, Step, StepType, Threadblock

__all__ = ["BUFFERS", "STEP_TYPES", "ProgramArrays", "program_arrays"]

STEP_TYPES: tuple[StepType, ...] = tuple(StepType)
"""Step type of each code (``ProgramArrays.steps[S_TYPE]``)."""
BUFFERS: tuple[Buffer, ...] = tuple(Buffer)
"""Buffer of each code (``i``, ``o``, ``s``)."""
TYPE_CODE = {t: k for k, t in enumerate(STEP_TYPES)}
BUFFER_CODE = {b: k for k, b in enumerate(BUFFERS)}

# rows of the 2-D int32 columns
G_ID, G_I, G_O, G_S, G_LINE = range(5)
T_ID, T_SEND, T_RECV, T_CHAN, T_LINE = range(5)
S_INDEX, S_TYPE, S_SRCBUF, S_SRCOFF, S_DSTBUF, S_DSTOFF, S_CNT, S_DEPID, S_DEPS, S_HASDEP, S_LINE = range(11)

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


@dataclass(frozen=True, eq=False)
class ProgramArrays:
    """A program as columns (see the module). ``gpus`` (5 x G), ``tbs`` (5 x T), ``steps`` (11 x S): int32."""

    header: Program
    gpus: np.ndarray
    gpu_tb: np.ndarray
    tbs: np.ndarray
    tb_step: np.ndarray
    steps: np.ndarray
    built: Program | None = field(default=None, repr=False)
    """The program these arrays were made from, if any (returned by :meth:`program`)."""
    cache: dict[str, Any] = field(default_factory=dict, repr=False)
    """What checks computed once for these arrays (the compiled timing keeps the verifier's report here)."""

    @property
    def coll(self) -> str:
        return self.header.coll

    @property
    def ngpus(self) -> int:
        return self.header.ngpus

    @property
    def nchunksperloop(self) -> int:
        return self.header.nchunksperloop

    @property
    def nchannels(self) -> int:
        return self.header.nchannels

    @property
    def proto(self) -> str:
        return self.header.proto

    @property
    def kind(self) -> CollectiveKind | None:
        return self.header.kind

    @property
    def source(self) -> str:
        return self.header.source

    @property
    def min_bytes(self) -> int | None:
        return self.header.min_bytes

    @property
    def max_bytes(self) -> int | None:
        return self.header.max_bytes

    @property
    def num_threadblocks(self) -> int:
        return int(self.tbs.shape[1])

    @property
    def num_steps(self) -> int:
        return int(self.steps.shape[1])

    @property
    def tb_gpu(self) -> np.ndarray:
        """The GPU row of every threadblock."""
        return np.repeat(np.arange(self.gpus.shape[1], dtype=np.int64), np.diff(self.gpu_tb))

    def program(self) -> Program:
        """The same program as frozen dataclasses (made once; a Python object per step)."""
        return self.built if self.built is not None else self._objects

    @cached_property
    def _objects(self) -> Program:
        steps = self.steps
        types = [STEP_TYPES[k] for k in steps[S_TYPE].tolist()]
        srcbufs = [BUFFERS[k] for k in steps[S_SRCBUF].tolist()]
        dstbufs = [BUFFERS[k] for k in steps[S_DSTBUF].tolist()]
        made = list(map(Step, steps[S_INDEX].tolist(), types, srcbufs, steps[S_SRCOFF].tolist(), dstbufs,
                        steps[S_DSTOFF].tolist(), steps[S_CNT].tolist(), steps[S_DEPID].tolist(),
                        steps[S_DEPS].tolist(), steps[S_HASDEP].tolist(), steps[S_LINE].tolist()))
        del types, srcbufs, dstbufs
        tbs, tb_step = self.tbs.tolist(), self.tb_step.tolist()
        blocks = [Threadblock(tbs[T_ID][t], tbs[T_SEND][t], tbs[T_RECV][t], tbs[T_CHAN][t],
                              tuple(made[tb_step[t]:tb_step[t + 1]]), tbs[T_LINE][t]) for t in range(len(tb_step) - 1)]
        gpu_tb = self.gpu_tb.tolist()
        gpus = tuple(Gpu(g.id, g.i_chunks, g.o_chunks, g.s_chunks, tuple(blocks[gpu_tb[k]:gpu_tb[k + 1]]), g.line)
                     for k, g in enumerate(self.header.gpus))
        h = self.header
        return Program(name=h.name, coll=h.coll, ngpus=h.ngpus, nchunksperloop=h.nchunksperloop,
                       nchannels=h.nchannels, proto=h.proto, inplace=h.inplace, gpus=gpus, outofplace=h.outofplace,
                       min_bytes=h.min_bytes, max_bytes=h.max_bytes, nthreads=h.nthreads, root=h.root,
                       attributes=h.attributes, source=h.source, source_issues=h.source_issues, line=h.line)


def header_of(program: Program, gpus: tuple[Gpu, ...]) -> Program:
    """``program``'s ``<algo>`` with ``gpus`` (GPUs without threadblocks)."""
    return Program(name=program.name, coll=program.coll, ngpus=program.ngpus, nchunksperloop=program.nchunksperloop,
                   nchannels=program.nchannels, proto=program.proto, inplace=program.inplace, gpus=gpus,
                   outofplace=program.outofplace, min_bytes=program.min_bytes, max_bytes=program.max_bytes,
                   nthreads=program.nthreads, root=program.root, attributes=program.attributes,
                   source=program.source, source_issues=program.source_issues, line=program.line)


def _fits(values: np.ndarray) -> bool:
    return not len(values) or (int(values.min()) >= _INT32_MIN and int(values.max()) <= _INT32_MAX)


def program_arrays(program: Program) -> ProgramArrays | None:
    """``program`` as arrays, or None when a value does not fit 32 bits (such a program keeps its objects)."""
    gpu_rows = [(g.id, g.i_chunks, g.o_chunks, g.s_chunks, g.line) for g in program.gpus]
    tb_rows = [(tb.id, tb.send, tb.recv, tb.chan, tb.line) for g in program.gpus for tb in g.threadblocks]
    gpu_tb = np.zeros(len(program.gpus) + 1, np.int64)
    gpu_tb[1:] = np.cumsum([len(g.threadblocks) for g in program.gpus])
    blocks = [tb for g in program.gpus for tb in g.threadblocks]
    tb_step = np.zeros(len(blocks) + 1, np.int64)
    tb_step[1:] = np.cumsum([len(tb.steps) for tb in blocks])
    type_code, buffer_code = TYPE_CODE, BUFFER_CODE
    step_rows = [(s.index, type_code[s.type], buffer_code[s.srcbuf], s.srcoff, buffer_code[s.dstbuf], s.dstoff, s.cnt,
                  s.depid, s.deps, s.hasdep, s.line) for tb in blocks for s in tb.steps]
    try:
        gpus = np.array(gpu_rows, np.int64).reshape(-1, 5).T
        tbs = np.array(tb_rows, np.int64).reshape(-1, 5).T
        steps = np.array(step_rows, np.int64).reshape(-1, 11).T
    except OverflowError:  # beyond 64 bits
        return None
    del step_rows
    if not (_fits(gpus) and _fits(tbs) and _fits(steps)):
        return None
    shell = header_of(program, tuple(Gpu(g.id, g.i_chunks, g.o_chunks, g.s_chunks, (), g.line)
                                     for g in program.gpus))
    return ProgramArrays(shell, np.ascontiguousarray(gpus, np.int32), gpu_tb, np.ascontiguousarray(tbs, np.int32),
                         tb_step, np.ascontiguousarray(steps, np.int32), built=program)
