"""A compiled reader for MSCCL XML in the runtimes' plain form, straight into :class:`ProgramArrays`.

:func:`load_arrays` reads a file of millions of steps in seconds. Its kernel accepts exactly
the plain form every writer we know produces (ours, msccl-tools', RCCL's): ASCII; elements
``<algo>`` > ``<gpu>`` > ``<tb>`` > ``<step>`` and nothing else; each tag on one line, its
attributes ``name="value"`` after single spaces, values without ``<``, ``>`` or ``&``; only
spaces and newlines between tags; comments. Every gpu, tb and step attribute must be one
the loader reads, once, with a valid value. Such a file is one on which the runtimes'
tokenizer and :func:`taccl_py.msccl.loader.parse_program` find nothing to report
(no ``source_issues``), so the result is the same program. Anything else (a tab, a
declaration, an unknown step type, a missing attribute...) is read by
:func:`~taccl_py.msccl.loader.parse_program` instead, which gives its own exact errors.
"""

from __future__ import annotations

import os
import re
from functools import partial
from typing import Any

import numpy as np
from numba import njit

from taccl_py.errors import XmlLoadError
from taccl_py.inputs import read_file_bytes
from taccl_py.limits import MAX_FILE_BYTES, MAX_XML_FILE_BYTES
from taccl_py.msccl.arrays import BUFFER_CODE, TYPE_CODE, ProgramArrays, header_of, program_arrays
from taccl_py.msccl.ir import MAX_ATTRIBUTES, Buffer, Gpu, Program, StepType
from taccl_py.msccl.loader import FAST_MIN_BYTES, _build_program, _Node, parse_program

__all__ = ["FAST_MIN_BYTES", "arrays_from_bytes", "load_arrays", "read_program"]


def _pack(name: bytes) -> int:
    """A name of up to 8 bytes as one integer (little endian), as the kernel packs it."""
    return int.from_bytes(name, "little")


# element names
_ALGO, _GPU, _TB, _STEP = _pack(b"algo"), _pack(b"gpu"), _pack(b"tb"), _pack(b"step")
# attributes: gpu (id, i_chunks, o_chunks, s_chunks), tb (id, send, recv, chan), step (s .. hasdep)
_A_ID, _A_I, _A_O, _A_S = _pack(b"id"), _pack(b"i_chunks"), _pack(b"o_chunks"), _pack(b"s_chunks")
_A_SEND, _A_RECV, _A_CHAN = _pack(b"send"), _pack(b"recv"), _pack(b"chan")
_A_STEP, _A_TYPE, _A_SRCBUF, _A_SRCOFF = _pack(b"s"), _pack(b"type"), _pack(b"srcbuf"), _pack(b"srcoff")
_A_DSTBUF, _A_DSTOFF, _A_CNT = _pack(b"dstbuf"), _pack(b"dstoff"), _pack(b"cnt")
_A_DEPID, _A_DEPS, _A_HASDEP = _pack(b"depid"), _pack(b"deps"), _pack(b"hasdep")
# step types and buffers: their codes in ProgramArrays
_T_S, _T_R, _T_RCS, _T_RRS = _pack(b"s"), _pack(b"r"), _pack(b"rcs"), _pack(b"rrs")
_T_RRC, _T_RRCS, _T_CPY, _T_RE = _pack(b"rrc"), _pack(b"rrcs"), _pack(b"cpy"), _pack(b"re")
_T_NOP, _T_RA = _pack(b"nop"), _pack(b"ra")
_C_S, _C_R, _C_RCS, _C_RRS = (TYPE_CODE[StepType.SEND], TYPE_CODE[StepType.RECV], TYPE_CODE[StepType.RECV_COPY_SEND],
                              TYPE_CODE[StepType.RECV_REDUCE_SEND])
_C_RRC, _C_RRCS = TYPE_CODE[StepType.RECV_REDUCE_COPY], TYPE_CODE[StepType.RECV_REDUCE_COPY_SEND]
_C_CPY, _C_RE, _C_NOP, _C_RA = (TYPE_CODE[StepType.COPY], TYPE_CODE[StepType.REDUCE], TYPE_CODE[StepType.NOP],
                                TYPE_CODE[StepType.RECV_REDUCE_ALIAS])
_B_I, _B_O, _B_S = BUFFER_CODE[Buffer.INPUT], BUFFER_CODE[Buffer.OUTPUT], BUFFER_CODE[Buffer.SCRATCH]
_MAX_VALUE = 254
"""Longest name or value the runtime tokenizer keeps (MAX_STRING - 1)."""
_MAX_ATTRS = MAX_ATTRIBUTES
_BEFORE, _IN_ALGO, _IN_GPU, _IN_TB, _IN_STEP, _AFTER = range(6)
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


@njit(cache=True, inline="always")
def _name_char(b: int, first: bool) -> bool:
    letter = (65 <= b <= 90) or (97 <= b <= 122) or b == 95
    return letter if first else (letter or (48 <= b <= 57) or b == 46 or b == 45)


@njit(cache=True)
def _packed(buf: Any, start: int, end: int) -> int:
    """Bytes start..end as an integer (0 when longer than 8: no name we know is)."""
    if end - start > 8:
        return 0
    key = 0
    for k in range(end - 1, start - 1, -1):
        key = key * 256 + buf[k]
    return key


@njit(cache=True)
def _integer(buf: Any, start: int, end: int) -> tuple[bool, int]:
    """``^[+-]?[0-9]+$`` within 32 bits, as the loader reads it (no surrounding spaces)."""
    k = start
    negative = False
    if k < end and (buf[k] == 43 or buf[k] == 45):
        negative = buf[k] == 45
        k += 1
    if k == end:
        return False, 0
    value = 0
    digits = 0
    for p in range(k, end):
        b = buf[p]
        if b < 48 or b > 57:
            return False, 0
        if digits or b != 48:
            digits += 1
            if digits > 10:
                return False, 0
            value = value * 10 + (b - 48)
    if negative:
        value = -value
    if value < _INT32_MIN or value > _INT32_MAX:
        return False, 0
    return True, value


@njit(cache=True)
def _step_type(key: int) -> int:
    if key == _T_S:
        return _C_S
    if key == _T_R:
        return _C_R
    if key == _T_RCS:
        return _C_RCS
    if key == _T_RRS:
        return _C_RRS
    if key == _T_RRC:
        return _C_RRC
    if key == _T_RRCS:
        return _C_RRCS
    if key == _T_CPY:
        return _C_CPY
    if key == _T_RE:
        return _C_RE
    if key == _T_NOP:
        return _C_NOP
    if key == _T_RA:
        return _C_RA
    return -1


@njit(cache=True)
def _buffer(buf: Any, start: int, end: int) -> int:
    if end - start != 1:
        return -1
    b = buf[start]
    return _B_I if b == 105 else _B_O if b == 111 else _B_S if b == 115 else -1


@njit(cache=True)
def _attribute(element: int, key: int, buf: Any, v0: int, v1: int, row: Any) -> int:
    """Store one attribute of a gpu/tb/step in ``row`` (the element's fields); its bit, or -1 if not accepted."""
    if element == _STEP:
        if key == _A_TYPE:
            code = _step_type(_packed(buf, v0, v1))
            if code < 0:
                return -1
            row[1] = code
            return 1
        if key in (_A_SRCBUF, _A_DSTBUF):
            code = _buffer(buf, v0, v1)
            if code < 0:
                return -1
            slot = 2 if key == _A_SRCBUF else 4
            row[slot] = code
            return slot
        if key == _A_STEP:
            slot = 0
        elif key == _A_SRCOFF:
            slot = 3
        elif key == _A_DSTOFF:
            slot = 5
        elif key == _A_CNT:
            slot = 6
        elif key == _A_DEPID:
            slot = 7
        elif key == _A_DEPS:
            slot = 8
        elif key == _A_HASDEP:
            slot = 9
        else:
            return -1
    elif element == _TB:
        if key == _A_ID:
            slot = 0
        elif key == _A_SEND:
            slot = 1
        elif key == _A_RECV:
            slot = 2
        elif key == _A_CHAN:
            slot = 3
        else:
            return -1
    else:
        if key == _A_ID:
            slot = 0
        elif key == _A_I:
            slot = 1
        elif key == _A_O:
            slot = 2
        elif key == _A_S:
            slot = 3
        else:
            return -1
    ok, value = _integer(buf, v0, v1)
    if not ok:
        return -1
    row[slot] = value
    return slot


@njit(cache=True)
def _scan(buf: Any) -> Any:
    """Parse the plain form; (status, algo tag start, end, line, gpus, gpu_tb, tbs, tb_step, steps).

    ``status`` 0: read; otherwise the file is not in the plain form (the caller reads it the slow way).
    """
    n = len(buf)
    counts = np.zeros(3, np.int64)
    for i in range(n - 1):
        if buf[i] == 60:
            nxt = buf[i + 1]
            if nxt == 103:
                counts[0] += 1
            elif nxt == 116:
                counts[1] += 1
            elif nxt == 115:
                counts[2] += 1
    gpus = np.empty((5, counts[0]), np.int32)
    gpu_tb = np.zeros(counts[0] + 1, np.int64)
    tbs = np.empty((5, counts[1]), np.int32)
    tb_step = np.zeros(counts[1] + 1, np.int64)
    steps = np.empty((11, counts[2]), np.int32)
    row = np.zeros(10, np.int64)
    need = np.array([0, (1 << 4) - 1, (1 << 4) - 1, (1 << 10) - 1], np.int64)  # required attribute bits per level
    ng = nt = ns = 0
    algo_start = algo_end = algo_line = 0
    state = _BEFORE
    line = 1
    i = 0
    while i < n:
        c = buf[i]
        if c == 10:
            line += 1
            i += 1
            continue
        if c == 32:
            i += 1
            continue
        if c != 60 or i + 1 >= n:
            return 1, i, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
        c1 = buf[i + 1]
        if c1 == 33:  # '<!': only a comment, without '--' inside
            if not (i + 3 < n and buf[i + 2] == 45 and buf[i + 3] == 45):
                return 2, i, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
            j = i + 4
            end = -1
            while j + 2 < n:
                b = buf[j]
                if b == 45 and buf[j + 1] == 45:
                    if buf[j + 2] != 62:
                        return 3, j, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
                    end = j
                    break
                if b == 10:
                    line += 1
                elif b < 32 or b > 126:
                    return 4, j, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
                j += 1
            if end < 0:
                return 5, i, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
            i = end + 3
            continue
        if c1 == 47:  # '</name>'
            j = i + 2
            if j >= n or not _name_char(buf[j], True):
                return 6, i, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
            while j < n and _name_char(buf[j], False):
                j += 1
            if j >= n or buf[j] != 62:
                return 7, i, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
            key = _packed(buf, i + 2, j)
            if state == _IN_STEP and key == _STEP:
                state = _IN_TB
            elif state == _IN_TB and key == _TB:
                state = _IN_GPU
            elif state == _IN_GPU and key == _GPU:
                state = _IN_ALGO
            elif state == _IN_ALGO and key == _ALGO:
                state = _AFTER
            else:
                return 8, i, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
            i = j + 1
            continue
        # a start tag: its element must be the one expected at this level
        j = i + 1
        if not _name_char(buf[j], True):
            return 9, i, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
        while j < n and _name_char(buf[j], False):
            j += 1
        element = _packed(buf, i + 1, j)
        if state == _BEFORE and element == _ALGO:
            level = 0
        elif state == _IN_ALGO and element == _GPU:
            level = 1
        elif state == _IN_GPU and element == _TB:
            level = 2
        elif state == _IN_TB and element == _STEP:
            level = 3
        else:
            return 10, i, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
        seen = 0
        attrs = 0
        closed = False
        while True:
            if j >= n:
                return 11, i, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
            b = buf[j]
            if b == 62:
                j += 1
                break
            if b == 47:
                if j + 1 < n and buf[j + 1] == 62:
                    closed = True
                    j += 2
                    break
                return 12, j, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
            if b != 32 or j + 1 >= n or not _name_char(buf[j + 1], True):
                return 13, j, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
            k = j + 1
            e = k
            while e < n and _name_char(buf[e], False):
                e += 1
            if e + 1 >= n or buf[e] != 61 or buf[e + 1] != 34 or e - k > _MAX_VALUE:
                return 14, j, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
            v0 = e + 2
            v1 = v0
            while v1 < n and buf[v1] != 34:
                b = buf[v1]
                if b < 32 or b > 126 or b == 60 or b == 62 or b == 38:
                    return 15, v1, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
                v1 += 1
            if v1 >= n or v1 - v0 > _MAX_VALUE:
                return 16, j, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
            attrs += 1
            if level > 0:
                bit = _attribute(element, _packed(buf, k, e), buf, v0, v1, row)
                if bit < 0 or seen & (1 << bit):
                    return 17, k, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
                seen |= 1 << bit
            j = v1 + 1
        if attrs > _MAX_ATTRS or seen != need[level]:
            return 18, i, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
        if level == 0:
            algo_start, algo_end, algo_line = i, j, line
            state = _AFTER if closed else _IN_ALGO
        elif level == 1:
            for f in range(4):
                gpus[f, ng] = row[f]
            gpus[4, ng] = line
            gpu_tb[ng] = nt
            ng += 1
            state = _IN_ALGO if closed else _IN_GPU
        elif level == 2:
            for f in range(4):
                tbs[f, nt] = row[f]
            tbs[4, nt] = line
            tb_step[nt] = ns
            nt += 1
            state = _IN_GPU if closed else _IN_TB
        else:
            for f in range(10):
                steps[f, ns] = row[f]
            steps[10, ns] = line
            ns += 1
            state = _IN_TB if closed else _IN_STEP
        i = j
    if state != _AFTER:
        return 19, n, 0, 0, gpus, gpu_tb, tbs, tb_step, steps
    gpu_tb[ng] = nt
    tb_step[nt] = ns
    return (0, algo_start, algo_end, algo_line, gpus[:, :ng].copy(), gpu_tb[:ng + 1].copy(), tbs[:, :nt].copy(),
            tb_step[:nt + 1].copy(), steps[:, :ns].copy())


_ALGO_ATTRIBUTE = re.compile(r' ([A-Za-z_][\w.\-]*)="([^"]*)"')



def arrays_from_bytes(data: bytes, *, where: str = "<string>") -> ProgramArrays:
    """:func:`~taccl_py.msccl.loader.parse_program` as arrays (the same program, the same errors)."""
    status, start, end, line, gpus, gpu_tb, tbs, tb_step, steps = _scan(np.frombuffer(data, np.uint8))
    if status == 0:
        tag = data[start:end].decode("ascii")
        pairs = _ALGO_ATTRIBUTE.findall(tag)
        attrs = dict(pairs)
        if len(attrs) == len(pairs):  # a repeated attribute is an expat error: the slow way says so
            try:
                header = _build_program(_Node("algo", attrs, line), where, ())
            except XmlLoadError:
                header = None
            if header is not None:
                rows = gpus.tolist()
                shells = tuple(Gpu(rows[0][g], rows[1][g], rows[2][g], rows[3][g], (), rows[4][g])
                               for g in range(len(rows[0])))
                return ProgramArrays(header_of(header, shells), gpus, gpu_tb, tbs, tb_step, steps)
    if len(data) > MAX_FILE_BYTES:  # the object loader is for files of ordinary size
        raise XmlLoadError(f"is larger than {MAX_FILE_BYTES >> 20} MiB (MAX_FILE_BYTES) and not in the plain form "
                           "the compiled reader takes (up to MAX_XML_FILE_BYTES)", where=where, rule="file")
    program = parse_program(data, where=where)
    made = program_arrays(program)
    assert made is not None, "a loaded program's values fit 32 bits"
    return made


def load_arrays(path: str | os.PathLike[str]) -> ProgramArrays:
    """Read an MSCCL XML file into :class:`ProgramArrays` (errors as :func:`~taccl_py.msccl.load_program`)."""
    data = read_file_bytes(path, partial(XmlLoadError, rule="file"), what="file", limit=MAX_XML_FILE_BYTES,
                           limit_name="MAX_XML_FILE_BYTES")
    return arrays_from_bytes(data, where=str(path))


def read_program(path: str | os.PathLike[str]) -> Program | ProgramArrays:
    """A file's program: as arrays from :data:`FAST_MIN_BYTES` (for the compiled checks), else as objects.

    Errors as :func:`~taccl_py.msccl.load_program`.
    """
    data = read_file_bytes(path, partial(XmlLoadError, rule="file"), what="file", limit=MAX_XML_FILE_BYTES,
                           limit_name="MAX_XML_FILE_BYTES")
    if len(data) >= FAST_MIN_BYTES:
        return arrays_from_bytes(data, where=str(path))
    return parse_program(data, where=str(path))
