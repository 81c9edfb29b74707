"""Program -> MSCCL XML text, within the runtime tokenizers' limits.

The runtimes read XML with a tiny hand-written tokenizer, so the text is kept
to what it understands: no ``<?xml`` declaration, no tabs, every tag with all
its attributes on one line, double quotes, no entities and no text content.
Attribute order follows msccl-tools. The same program always gives the same
bytes.
"""

from __future__ import annotations

import os
import re

from taccl_py.errors import LoweringError
from taccl_py.msccl.ir import DIALECTS, MAX_STRING, Program, collective_kind, dialect_coll_name
from taccl_py.topology_io import atomic_write_text

__all__ = ["save_xml", "write_xml"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.,:;+\-()\[\]/= ]")


def _safe_name(name: str) -> str:
    """A name the tokenizer reads back unchanged: no quotes, brackets, ampersands, tabs or newlines."""
    cleaned = " ".join(_UNSAFE.sub("_", name).split()) or "taccl"
    return cleaned[:MAX_STRING]


def _coll_for(program: Program, dialect: str) -> str:
    kind = collective_kind(program.coll)
    coll = dialect_coll_name(kind, dialect) if kind is not None else program.coll
    if coll not in DIALECTS[dialect].coll_names:
        choices = ", ".join(sorted(DIALECTS[dialect].coll_names))
        raise LoweringError(f"collective {program.coll!r} does not exist in the {dialect} dialect (it has: {choices})")
    return coll


FAST_MIN_STEPS = 50_000
"""From this many steps the ``<gpu>`` elements are written by :mod:`taccl_py.msccl.fast_writer`."""


def write_xml(program: Program, dialect: str = "v2") -> str:
    """The XML text of ``program`` in ``dialect`` (``v2``: msccl-executor and RCCL; ``v1``: MSCCL fork).

    Raises :class:`LoweringError` when the program's collective has no name in
    that dialect. Limits (steps, threadblocks) are not checked here; use
    :func:`taccl_py.msccl.verify_program`.
    """
    if dialect not in DIALECTS:
        raise LoweringError(f"unknown dialect {dialect!r} (choose v1 or v2)")
    coll = _coll_for(program, dialect)
    name = _safe_name(program.name or f"taccl_{coll}")
    attrs = [("name", name), ("proto", program.proto), ("nchannels", str(program.nchannels)),
             ("nchunksperloop", str(program.nchunksperloop)), ("ngpus", str(program.ngpus)), ("coll", coll),
             ("inplace", str(program.inplace))]
    if dialect == "v2":
        outofplace = program.outofplace if program.outofplace is not None else (0 if program.inplace else 1)
        attrs += [("outofplace", str(outofplace)), ("minBytes", str(program.min_bytes or 0)),
                  ("maxBytes", str(program.max_bytes or 0))]
    else:
        if program.min_bytes or program.max_bytes:
            attrs += [("minBytes", str(program.min_bytes or 0)), ("maxBytes", str(program.max_bytes or 0))]
        if program.nthreads is not None:
            attrs.append(("nthreads", str(program.nthreads)))
    if program.root:
        attrs.append(("root", str(program.root)))
    head = _tag("algo", attrs, close=False)
    if program.num_steps >= FAST_MIN_STEPS:  # every other line by a compiled loop (the same bytes)
        from taccl_py.msccl.arrays import program_arrays
        from taccl_py.msccl.fast_writer import render_body

        arrays = program_arrays(program)
        if arrays is not None:
            return f"{head}\n{render_body(arrays)}</algo>\n"
    lines = [head]
    for gpu in program.gpus:
        lines.append("  " + _tag("gpu", [("id", str(gpu.id)), ("i_chunks", str(gpu.i_chunks)),
                                         ("o_chunks", str(gpu.o_chunks)), ("s_chunks", str(gpu.s_chunks))],
                                 close=False))
        for tb in gpu.threadblocks:
            lines.append("    " + _tag("tb", [("id", str(tb.id)), ("send", str(tb.send)), ("recv", str(tb.recv)),
                                              ("chan", str(tb.chan))], close=False))
            for st in tb.steps:
                lines.append("      " + _tag("step", [
                    ("s", str(st.index)), ("type", st.type.value), ("srcbuf", st.srcbuf.value),
                    ("srcoff", str(st.srcoff)), ("dstbuf", st.dstbuf.value), ("dstoff", str(st.dstoff)),
                    ("cnt", str(st.cnt)), ("depid", str(st.depid)), ("deps", str(st.deps)),
                    ("hasdep", str(st.hasdep))], close=True))
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def _tag(name: str, attrs: list[tuple[str, str]], *, close: bool) -> str:
    body = " ".join(f'{key}="{value}"' for key, value in attrs)
    return f"<{name} {body}/>" if close else f"<{name} {body}>"


def save_xml(program: Program, path: str | os.PathLike[str], dialect: str = "v2") -> None:
    """Write ``program`` to ``path`` atomically (a reader never sees half a file)."""
    atomic_write_text(path, write_xml(program, dialect))
