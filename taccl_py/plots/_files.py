"""Writing figures: PNG or SVG chosen by the file name, byte-identical on every run, written atomically.

Figures are built on matplotlib's object API (``Figure`` + the Agg canvas), never through pyplot, so no
global backend or figure registry is touched. Determinism: PNG without the ``Software`` text chunk, SVG
without its date and with a fixed ``svg.hashsalt`` (the ids of clip paths and glyphs are derived from it).
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from taccl_py.errors import InputError

__all__ = ["FIGURE_FORMATS", "check_figure_path", "figure_bytes", "new_figure", "panel_grid", "save_figure"]

FIGURE_FORMATS = {".png": "png", ".svg": "svg"}
"""File suffix -> matplotlib format."""

_METADATA: dict[str, dict[str, str | None]] = {"png": {"Software": None}, "svg": {"Date": None}}
_RC: Any = {"svg.hashsalt": "taccl_py", "svg.fonttype": "path"}
_DPI = 110


def new_figure(width_in: float, height_in: float) -> Figure:
    """A figure on the Agg canvas (no pyplot, no global state)."""
    figure = Figure(figsize=(width_in, height_in), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def panel_grid(count: int, panel_width_in: float, panel_height_in: float, *, cols: int = 4,
               sharey: bool = False) -> tuple[Figure, list[Any]]:
    """A figure of ``count`` panels, at most ``cols`` a row, read row by row; the grid's spare cells hidden."""
    cols = max(1, min(cols, count))
    rows = -(-count // cols)
    figure = new_figure(panel_width_in * cols, panel_height_in * rows)
    grid = figure.subplots(rows, cols, squeeze=False, sharey=sharey)
    cells = [grid[k // cols][k % cols] for k in range(rows * cols)]
    for spare in cells[count:]:
        spare.set_visible(False)
    return figure, cells[:count]


def check_figure_path(path: str | os.PathLike[str], *, where: str) -> str:
    """The format of ``path`` (png or svg); fails before any work if it cannot be written there."""
    target = Path(path)
    fmt = FIGURE_FORMATS.get(target.suffix.lower())
    if fmt is None:
        raise InputError(f"must end in .png or .svg (got {str(target)!r})", where=where)
    if target.is_dir():
        raise InputError(f"{str(target)!r} is a directory, not a file", where=where)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"directory {str(parent)!r} does not exist", where=where)
    return fmt


def figure_bytes(figure: Figure, fmt: str) -> bytes:
    """The figure encoded as ``png`` or ``svg``; identical bytes for an identical figure."""
    if fmt not in _METADATA:
        raise InputError(f"unknown figure format {fmt!r} (png or svg)", where="format")
    buffer = io.BytesIO()
    with matplotlib.rc_context(_RC):
        figure.savefig(buffer, format=fmt, metadata=_METADATA[fmt], dpi=_DPI)
    return buffer.getvalue()


def save_figure(figure: Figure, path: str | os.PathLike[str], *, where: str = "--plot") -> Path:
    """Write ``figure`` to ``path`` (format from the suffix) through a temporary file and a rename."""
    fmt = check_figure_path(path, where=where)
    data = figure_bytes(figure, fmt)
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent if str(target.parent)
                               else ".")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
