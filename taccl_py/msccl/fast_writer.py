"""The XML of every ``<gpu>``, ``<tb>`` and ``<step>`` of :class:`ProgramArrays`, written by a compiled loop.

:func:`render_body` gives, byte for byte, the lines :func:`taccl_py.msccl.writer.write_xml`
writes between ``<algo ...>`` and ``</algo>`` (the writer still writes those two itself).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from taccl_py.msccl.arrays import BUFFERS, STEP_TYPES, ProgramArrays

__all__ = ["render_body"]


def _table(words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(w) for w in words)
    table = np.zeros((len(words), width), np.uint8)
    for k, w in enumerate(words):
        table[k, :len(w)] = np.frombuffer(w.encode("ascii"), np.uint8)
    return table, np.array([len(w) for w in words], np.int64)


_TYPES, _TYPE_LENGTHS = _table([t.value for t in STEP_TYPES])
_BUFFER_NAMES, _BUFFER_LENGTHS = _table([b.value for b in BUFFERS])
_TEXT = [b'  <gpu id="', b'" i_chunks="', b'" o_chunks="', b'" s_chunks="', b'">\n',
         b'    <tb id="', b'" send="', b'" recv="', b'" chan="',
         b'      <step s="', b'" type="', b'" srcbuf="', b'" srcoff="', b'" dstbuf="', b'" dstoff="', b'" cnt="',
         b'" depid="', b'" deps="', b'" hasdep="', b'"/>\n', b'    </tb>\n', b'  </gpu>\n']
_PIECES, _PIECE_LENGTHS = _table([t.decode("ascii") for t in _TEXT])
(_GPU, _I, _O, _S, _OPEN_END, _TB, _SEND, _RECV, _CHAN, _STEP, _TYPE, _SRCBUF, _SRCOFF, _DSTBUF, _DSTOFF, _CNT,
 _DEPID, _DEPS, _HASDEP, _STEP_END, _TB_END, _GPU_END) = range(len(_TEXT))


@njit(cache=True, inline="always")
def _put(out: Any, at: int, table: Any, lengths: Any, k: int) -> int:
    for i in range(lengths[k]):
        out[at + i] = table[k, i]
    return at + lengths[k]


@njit(cache=True)
def _number(out: Any, at: int, value: int) -> int:
    """``str(value)`` of an integer."""
    v = np.int64(value)
    if v < 0:
        out[at] = 45
        at += 1
        v = -v
    digits = 1
    rest = v // 10
    while rest:
        digits += 1
        rest //= 10
    for k in range(digits - 1, -1, -1):
        out[at + k] = 48 + v % 10
        v //= 10
    return at + digits


@njit(cache=True)
def _render(gpus: Any, gpu_tb: Any, tbs: Any, tb_step: Any, steps: Any, pieces: Any, piece_lengths: Any,
            types: Any, type_lengths: Any, buffers: Any, buffer_lengths: Any) -> Any:
    out = np.empty(120 * gpus.shape[1] + 120 * tbs.shape[1] + 250 * steps.shape[1] + 16, np.uint8)
    at = 0
    for g in range(gpus.shape[1]):
        at = _put(out, at, pieces, piece_lengths, _GPU)
        at = _number(out, at, gpus[0, g])
        for f, piece in ((1, _I), (2, _O), (3, _S)):
            at = _put(out, at, pieces, piece_lengths, piece)
            at = _number(out, at, gpus[f, g])
        at = _put(out, at, pieces, piece_lengths, _OPEN_END)
        for t in range(gpu_tb[g], gpu_tb[g + 1]):
            at = _put(out, at, pieces, piece_lengths, _TB)
            at = _number(out, at, tbs[0, t])
            for f, piece in ((1, _SEND), (2, _RECV), (3, _CHAN)):
                at = _put(out, at, pieces, piece_lengths, piece)
                at = _number(out, at, tbs[f, t])
            at = _put(out, at, pieces, piece_lengths, _OPEN_END)
            for s in range(tb_step[t], tb_step[t + 1]):
                at = _put(out, at, pieces, piece_lengths, _STEP)
                at = _number(out, at, steps[0, s])
                at = _put(out, at, pieces, piece_lengths, _TYPE)
                at = _put(out, at, types, type_lengths, steps[1, s])
                at = _put(out, at, pieces, piece_lengths, _SRCBUF)
                at = _put(out, at, buffers, buffer_lengths, steps[2, s])
                at = _put(out, at, pieces, piece_lengths, _SRCOFF)
                at = _number(out, at, steps[3, s])
                at = _put(out, at, pieces, piece_lengths, _DSTBUF)
                at = _put(out, at, buffers, buffer_lengths, steps[4, s])
                for f, piece in ((5, _DSTOFF), (6, _CNT), (7, _DEPID), (8, _DEPS), (9, _HASDEP)):
                    at = _put(out, at, pieces, piece_lengths, piece)
                    at = _number(out, at, steps[f, s])
                at = _put(out, at, pieces, piece_lengths, _STEP_END)
            at = _put(out, at, pieces, piece_lengths, _TB_END)
        at = _put(out, at, pieces, piece_lengths, _GPU_END)
    return out[:at]


def render_body(arrays: ProgramArrays) -> str:
    """The ``<gpu>`` elements of the program, each line ending in a newline, as ``write_xml`` writes them."""
    body = _render(arrays.gpus, arrays.gpu_tb, arrays.tbs, arrays.tb_step, arrays.steps, _PIECES, _PIECE_LENGTHS,
                   _TYPES, _TYPE_LENGTHS, _BUFFER_NAMES, _BUFFER_LENGTHS)
    return body.tobytes().decode("ascii")
