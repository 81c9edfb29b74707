"""Published collective timings as a table (CSV), for figures published as tables rather than as logs.

Vendors and papers often publish nccl-tests results as a table of sizes and busbw (or latency)
instead of the plain log. Such a table is kept as a CSV whose ``#`` lines say where it comes from
and whose header names the columns::

    collective,size_bytes,placement,time_us,busbw_GBps[,label][,machines][,...]
    allreduce,1048576,in-place,,36.22,1M

``placement`` is ``in-place`` or ``out-of-place`` (which nccl-tests column was published); each row
gives ``time_us`` or ``busbw_GBps`` (or both). Extra columns (``label``: the size as the source
wrote it; ``machines``: which run of a multi-run table) are kept as text for filtering.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass, field

from taccl_py.collectives import Collective, CollectiveKind, parse_collective
from taccl_py.errors import InputError, ProfileInputError
from taccl_py.inputs import read_text_file
from taccl_py.units import algbw_gbps

__all__ = ["TableRow", "is_timing_table", "read_timing_table"]

_REQUIRED = ("collective", "size_bytes", "placement", "time_us", "busbw_GBps")
PLACEMENTS = ("in-place", "out-of-place")


@dataclass(frozen=True)
class TableRow:
    """One published row: the collective, its size, the published time and/or busbw, and extra columns."""

    kind: CollectiveKind
    size_bytes: int
    placement: str
    time_us: float | None
    busbw_GBps: float | None
    origin: str
    extra: dict[str, str] = field(default_factory=dict)

    def busbw(self, ranks: int) -> float:
        """The published busbw, or the one nccl-tests would print for the published time."""
        if self.busbw_GBps is not None:
            return self.busbw_GBps
        assert self.time_us is not None
        return algbw_gbps(self.size_bytes, self.time_us) * Collective(self.kind, ranks).busbw_factor

    def time(self, ranks: int) -> float:
        """The published time, or the time the published busbw stands for (us)."""
        if self.time_us is not None:
            return self.time_us
        assert self.busbw_GBps is not None
        algbw = self.busbw_GBps / Collective(self.kind, ranks).busbw_factor
        return self.size_bytes / (algbw * 1e3)


def is_timing_table(path: str | os.PathLike[str]) -> bool:
    """True when the file's first non-comment line is a header naming this format's columns."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = handle.read(1 << 16)
    except OSError:
        return False
    for line in head.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            names = [c.strip() for c in stripped.split(",")]
            return all(c in names for c in _REQUIRED)
    return False


def read_timing_table(path: str | os.PathLike[str]) -> list[TableRow]:
    """Every row of a published-timings CSV; a bad cell is one error naming the file, line and column."""
    where = str(path)
    text = read_text_file(path, ProfileInputError, what="timing table")
    numbered = [(k, line) for k, line in enumerate(text.splitlines(), start=1)
                if line.strip() and not line.lstrip().startswith("#")]
    if not numbered:
        raise ProfileInputError("no header and no rows", where=where)
    header_line, header = numbered[0]
    names = [c.strip() for c in header.split(",")]
    missing = [c for c in _REQUIRED if c not in names]
    if missing:
        raise ProfileInputError(f"the header lacks column(s) {', '.join(missing)}", where=f"{where}: line {header_line}")
    rows: list[TableRow] = []
    for number, line in numbered[1:]:
        at = f"{where}: line {number}"
        cells = next(csv.reader(io.StringIO(line)))
        if len(cells) != len(names):
            raise ProfileInputError(f"{len(cells)} cells but the header names {len(names)}", where=at)
        rec = {n: c.strip() for n, c in zip(names, cells, strict=True)}
        try:
            kind = parse_collective(rec["collective"])
        except InputError:
            raise ProfileInputError(f"column 'collective': unknown collective {rec['collective']!r}", where=at) from None
        try:
            size = int(rec["size_bytes"])
        except ValueError:
            raise ProfileInputError(f"column 'size_bytes' is not an integer (got {rec['size_bytes']!r})",
                                    where=at) from None
        if size <= 0:
            raise ProfileInputError(f"column 'size_bytes' must be > 0 (got {size})", where=at)
        if rec["placement"] not in PLACEMENTS:
            raise ProfileInputError(f"column 'placement' must be in-place or out-of-place (got {rec['placement']!r})",
                                    where=at)
        time_us = _positive(rec["time_us"], "time_us", at)
        busbw = _positive(rec["busbw_GBps"], "busbw_GBps", at)
        if time_us is None and busbw is None:
            raise ProfileInputError("the row gives neither time_us nor busbw_GBps", where=at)
        extra = {n: v for n, v in rec.items() if n not in _REQUIRED}
        rows.append(TableRow(kind, size, rec["placement"], time_us, busbw, at, extra))
    if not rows:
        raise ProfileInputError("the table has a header but no rows", where=where)
    return rows


def _positive(text: str, column: str, at: str) -> float | None:
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ProfileInputError(f"column {column!r} is not a number (got {text!r})", where=at) from None
    if not (math.isfinite(value) and value > 0):
        raise ProfileInputError(f"column {column!r} must be > 0 (got {text!r})", where=at)
    return value
