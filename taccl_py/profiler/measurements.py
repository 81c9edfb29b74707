"""Point-to-point measurements as a CSV file: ``src,dst,bytes,time_us[,repeat]``.

The header line is required (columns in any order); lines starting with ``#``
and blank lines are ignored. One row is one timed transfer of ``bytes`` from
GPU rank ``src`` to GPU rank ``dst`` taking ``time_us`` microseconds (a ping-pong
records half its round trip). ``repeat`` numbers the repetitions of one size.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from taccl_py.errors import ProfileInputError
from taccl_py.inputs import read_text_file
from taccl_py.limits import MAX_GPUS, MAX_SIZE_BYTES, limit_text
from taccl_py.topology_io import atomic_write_text

__all__ = ["CSV_COLUMNS", "Sample", "dumps_measurements_csv", "read_measurements_csv", "write_measurements_csv"]

CSV_COLUMNS = ("src", "dst", "bytes", "time_us", "repeat")
_REQUIRED = ("src", "dst", "bytes", "time_us")


@dataclass(frozen=True)
class Sample:
    """One timed point-to-point transfer ``src -> dst`` of ``size_bytes`` in ``time_us``."""

    src: int
    dst: int
    size_bytes: int
    time_us: float
    repeat: int = 0
    origin: str = ""


def read_measurements_csv(path: str | os.PathLike[str]) -> tuple[Sample, ...]:
    """Read and validate a measurements CSV; errors name the file, line and column."""
    where = str(path)
    return parse_measurements_csv(read_text_file(path, ProfileInputError, what="CSV file"), where=where)


def _data_lines(text: str) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(text.splitlines(), start=1)
            if line.strip() and not line.lstrip().startswith("#")]


def parse_measurements_csv(text: str, *, where: str = "<csv>") -> tuple[Sample, ...]:
    """Parse the CSV text (see the module docstring)."""
    lines = _data_lines(text)
    if not lines:
        raise ProfileInputError("file is empty (expected a header line: src,dst,bytes,time_us[,repeat])",
                                where=where)
    header_no, header_line = lines[0]
    header = [h.strip().lower() for h in next(csv.reader([header_line]))]
    at = f"{where}: line {header_no}"
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        if all(_is_number(h) for h in header):
            raise ProfileInputError("the header line is missing (expected src,dst,bytes,time_us[,repeat])",
                                    where=at)
        raise ProfileInputError(f"header lacks column {missing[0]!r} (got {','.join(header)}; expected "
                                "src,dst,bytes,time_us[,repeat])", where=at)
    unknown = [h for h in header if h not in CSV_COLUMNS]
    if unknown:
        raise ProfileInputError(f"unknown column {unknown[0]!r} (expected src,dst,bytes,time_us[,repeat])",
                                where=at)
    if len(set(header)) != len(header):
        raise ProfileInputError("header repeats a column", where=at)
    column = {name: k for k, name in enumerate(header)}
    samples: list[Sample] = []
    for line_no, line in lines[1:]:
        at = f"{where}: line {line_no}"
        fields = [f.strip() for f in next(csv.reader([line]))]
        if len(fields) != len(header):
            raise ProfileInputError(f"has {len(fields)} fields, the header has {len(header)}", where=at)
        ranks = f"rank ids stop at {MAX_GPUS - 1:,} (MAX_GPUS = {MAX_GPUS:,} ranks)"
        src = _int_field(fields[column["src"]], "src", at, minimum=0, maximum=MAX_GPUS - 1, limit=ranks)
        dst = _int_field(fields[column["dst"]], "dst", at, minimum=0, maximum=MAX_GPUS - 1, limit=ranks)
        if src == dst:
            raise ProfileInputError(f"src and dst are both {src} (a link joins two different ranks)", where=at)
        size = _int_field(fields[column["bytes"]], "bytes", at, minimum=1, maximum=MAX_SIZE_BYTES,
                          limit=limit_text("MAX_SIZE_BYTES", MAX_SIZE_BYTES))
        time_us = _float_field(fields[column["time_us"]], "time_us", at)
        repeat = _int_field(fields[column["repeat"]], "repeat", at, minimum=0) if "repeat" in column else 0
        samples.append(Sample(src, dst, size, time_us, repeat, origin=at))
    if not samples:
        raise ProfileInputError("has a header but no measurement rows", where=where)
    return tuple(samples)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _int_field(text: str, name: str, at: str, *, minimum: int, maximum: int | None = None, limit: str = "") -> int:
    """An integer field in ``minimum..maximum`` (``limit`` says which limit ``maximum`` is)."""
    try:
        value = int(text)
    except ValueError:
        raise ProfileInputError(f"{name} must be an integer (got {text[:40]!r})", where=at) from None
    if value < minimum:
        raise ProfileInputError(f"{name} must be >= {minimum} (got {value})", where=at)
    if maximum is not None and value > maximum:
        raise ProfileInputError(f"{name} is {value}; {limit}", where=at)
    return value


def _float_field(text: str, name: str, at: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ProfileInputError(f"{name} must be a number (got {text!r})", where=at) from None
    if not (math.isfinite(value) and value > 0):
        raise ProfileInputError(f"{name} must be a positive number (got {text!r})", where=at)
    return value


def dumps_measurements_csv(samples: Iterable[Sample], *, comments: Sequence[str] = ()) -> str:
    """The CSV text: optional ``#`` comment lines, the header, one row per sample."""
    out = io.StringIO()
    for comment in comments:
        out.write(f"# {comment}\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for s in samples:
        writer.writerow([s.src, s.dst, s.size_bytes, f"{s.time_us:.4f}", s.repeat])
    return out.getvalue()


def write_measurements_csv(path: str | os.PathLike[str], samples: Iterable[Sample], *,
                           comments: Sequence[str] = ()) -> None:
    """Write the CSV atomically."""
    atomic_write_text(path, dumps_measurements_csv(samples, comments=comments))
