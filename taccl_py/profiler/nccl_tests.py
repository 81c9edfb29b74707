"""Read nccl-tests (and rccl-tests) output logs and model their timings per link.

A log holds one or more *runs*; each run is a header (``# nThread 1 nGpus 1
minBytes ...``, the ``# Using devices`` list of ``#  Rank  0 Group  0 Pid ...``
lines, in newer versions ``# Collective test starting: all_gather_perf``) and a
table whose columns are named by its ``#  size  count  type  redop  root  time
algbw  busbw  #wrong  time ...`` line: the first ``time`` is out-of-place, the
second in-place (older versions lack ``redop``/``root`` or call ``#wrong``
``error``; columns are found by name). Lines that are not part of the table
(NCCL INFO, MPI warnings) are skipped; a table row cut short or holding a
non-number where a number belongs is an error naming the file and line.

Models (ring algorithms as NCCL runs them, n ranks, per-hop alpha and B)::

    sendrecv_perf        t = alpha + size / B                 (each rank sends to the next)
    all_gather_perf      t = (n-1) (alpha + size / (n B))
    reduce_scatter_perf  t = (n-1) (alpha + size / (n B))
    all_reduce_perf      t = 2 (n-1) (alpha + size / (n B))
    broadcast_perf       t = (n-1) alpha + size / B          (pipelined chain)
    reduce_perf          t = (n-1) alpha + size / B
    alltoall_perf        t = alpha + size / (n B)             (n-1 direct sends of size/n in parallel)
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from taccl_py.errors import ProfileInputError
from taccl_py.inputs import read_text_file
from taccl_py.profiler.fit import Observation

__all__ = [
    "BINARY_MODELS",
    "BinaryModel",
    "NcclTestsRank",
    "NcclTestsRow",
    "NcclTestsRun",
    "binary_from_name",
    "observations_from_run",
    "parse_nccl_tests_log",
    "parse_nccl_tests_text",
    "resolve_binary",
]


@dataclass(frozen=True)
class BinaryModel:
    """How one nccl-tests binary's time depends on per-hop alpha and bandwidth, over n ranks."""

    binary: str
    collective: str
    shape: str  # "ring": GPUs joined in a ring; "full": every pair has its own link
    formula: str

    def coefficients(self, n: int) -> tuple[float, float]:
        """(latency coefficient, bytes coefficient) for ``n`` ranks."""
        if self.binary == "sendrecv_perf":
            return 1.0, 1.0
        if self.binary in ("all_gather_perf", "reduce_scatter_perf"):
            return float(n - 1), (n - 1) / n
        if self.binary == "all_reduce_perf":
            return 2.0 * (n - 1), 2.0 * (n - 1) / n
        if self.binary in ("broadcast_perf", "reduce_perf"):
            return float(n - 1), 1.0
        if self.binary == "alltoall_perf":
            return 1.0, 1.0 / n
        raise AssertionError(self.binary)  # the table below lists every binary handled above


BINARY_MODELS: dict[str, BinaryModel] = {m.binary: m for m in (
    BinaryModel("sendrecv_perf", "sendrecv", "ring", "t = alpha + size/B"),
    BinaryModel("all_gather_perf", "allgather", "ring", "t = (n-1) (alpha + size/(n B))"),
    BinaryModel("reduce_scatter_perf", "reducescatter", "ring", "t = (n-1) (alpha + size/(n B))"),
    BinaryModel("all_reduce_perf", "allreduce", "ring", "t = 2(n-1) (alpha + size/(n B))"),
    BinaryModel("broadcast_perf", "broadcast", "ring", "t = (n-1) alpha + size/B"),
    BinaryModel("reduce_perf", "reduce", "ring", "t = (n-1) alpha + size/B"),
    BinaryModel("alltoall_perf", "alltoall", "full", "t = alpha + size/(n B)"),
)}

_ALIASES = {
    "sendrecv": "sendrecv_perf", "send_recv": "sendrecv_perf", "p2p": "sendrecv_perf",
    "allgather": "all_gather_perf", "all_gather": "all_gather_perf",
    "reducescatter": "reduce_scatter_perf", "reduce_scatter": "reduce_scatter_perf",
    "allreduce": "all_reduce_perf", "all_reduce": "all_reduce_perf",
    "broadcast": "broadcast_perf", "bcast": "broadcast_perf", "reduce": "reduce_perf",
    "alltoall": "alltoall_perf", "all_to_all": "alltoall_perf",
}
_UNSUPPORTED = ("gather_perf", "scatter_perf", "hypercube_perf")


def resolve_binary(name: str, *, where: str = "--collective") -> str:
    """``all_gather_perf``, ``all_gather`` or ``allgather`` -> ``all_gather_perf``."""
    key = name.strip().lower().replace("-", "_")
    if key in BINARY_MODELS:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    if key.removesuffix("_mpi") in BINARY_MODELS:
        return key.removesuffix("_mpi")
    known = ", ".join(sorted(BINARY_MODELS))
    raise ProfileInputError(f"no per-link model for nccl-tests binary {name!r} (known: {known})", where=where)


def binary_from_name(text: str) -> str | None:
    """The binary a file name suggests (``node3_allgather.log`` -> ``all_gather_perf``), if any."""
    lowered = text.lower().replace("-", "_")
    for alias in sorted([*BINARY_MODELS, *_ALIASES], key=len, reverse=True):
        if alias in lowered:
            return BINARY_MODELS[alias].binary if alias in BINARY_MODELS else _ALIASES[alias]
    return None


@dataclass(frozen=True)
class NcclTestsRank:
    """One ``#  Rank  r Group  g Pid p on host device d [bus] name`` line."""

    rank: int
    host: str
    device: int
    bus_id: str
    device_name: str


@dataclass(frozen=True)
class NcclTestsRow:
    """One table row: size and the out-of-place and in-place times (us) and bus bandwidths (GB/s)."""

    line: int
    size_bytes: int
    count: int
    dtype: str
    time_us_out: float
    busbw_out: float
    time_us_in: float | None
    """None when the table has one time column (a log that timed each size once)."""
    busbw_in: float | None
    wrong: bool


@dataclass(frozen=True)
class NcclTestsRun:
    """One run of an nccl-tests binary as found in a log."""

    file: str
    first_line: int
    binary: str | None
    version: str
    nthreads: int
    ngpus: int
    min_bytes: int
    max_bytes: int
    ranks: tuple[NcclTestsRank, ...]
    rows: tuple[NcclTestsRow, ...]
    complete: bool
    avg_busbw: float | None

    @property
    def nranks(self) -> int:
        """Ranks in the run: the distinct ``Rank`` lines, else nThread x nGpus (one process)."""
        distinct = {r.rank for r in self.ranks}
        return len(distinct) if distinct else max(self.nthreads * self.ngpus, 1)

    @property
    def hosts(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for r in self.ranks:
            seen.setdefault(r.host, None)
        return tuple(seen)

    @property
    def repeated_ranks(self) -> bool:
        """True when several processes printed the same rank (nccl-tests built without MPI)."""
        return len({r.rank for r in self.ranks}) < len(self.ranks)


_NTHREAD_RE = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_RANK_RE = re.compile(r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                      r"\[([^\]]*)\]\s*(.*)$")
_STARTING_RE = re.compile(r"Collective test starting:\s*(\S+)")
_VERSION_RE = re.compile(r"(?:nccl|rccl)-tests(?::)?\s+version\s+(\S+)", re.IGNORECASE)
_AVG_RE = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_BINARY_IN_TEXT_RE = re.compile(r"\b([a-z_]+_perf)(?:_mpi)?\b")


@dataclass
class _RunBuilder:
    first_line: int
    binary: str | None = None
    version: str = ""
    nthreads: int = 1
    ngpus: int = 1
    min_bytes: int = 0
    max_bytes: int = 0
    has_nthread: bool = False
    ranks: list[NcclTestsRank] = field(default_factory=list)
    columns: list[str] | None = None
    columns_line: int = 0
    rows: list[NcclTestsRow] = field(default_factory=list)
    complete: bool = False
    avg_busbw: float | None = None

    def started(self) -> bool:
        return self.has_nthread or self.columns is not None or bool(self.ranks) or self.binary is not None

    def build(self, file: str) -> NcclTestsRun:
        return NcclTestsRun(file, self.first_line, self.binary, self.version, self.nthreads, self.ngpus,
                            self.min_bytes, self.max_bytes, tuple(self.ranks), tuple(self.rows), self.complete,
                            self.avg_busbw)


def parse_nccl_tests_log(path: str | os.PathLike[str]) -> tuple[NcclTestsRun, ...]:
    """Read an nccl-tests log; see :func:`parse_nccl_tests_text`."""
    text = read_text_file(path, ProfileInputError, what="nccl-tests log", lenient=True)
    return parse_nccl_tests_text(text, where=str(path))


def parse_nccl_tests_text(text: str, *, where: str = "<log>") -> tuple[NcclTestsRun, ...]:
    """Every run with a result table in the log text, in order.

    Raises
    ------
    ProfileInputError
        Empty file, no result table, a table without rows, or a row that is
        cut short or has a non-number in a numeric column.
    """
    if not text.strip():
        raise ProfileInputError("file is empty (expected nccl-tests output)", where=where)
    runs: list[NcclTestsRun] = []
    current = _RunBuilder(first_line=1)
    binary_hint: str | None = None
    lines = text.splitlines()

    def finish(next_line: int) -> None:
        nonlocal current
        if current.columns is not None and not current.rows:
            raise ProfileInputError("the result table has no rows (log truncated?)",
                                    where=f"{where}: line {current.columns_line}")
        if current.rows:
            if current.binary is None:
                current.binary = binary_hint
            runs.append(current.build(where))
        current = _RunBuilder(first_line=next_line)

    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            if current.columns is None:
                match = _BINARY_IN_TEXT_RE.search(line)
                if match and match.group(1) in BINARY_MODELS:
                    binary_hint = match.group(1)
                continue
            if current.complete or (not line.split()[0].isdigit() and not _damaged_row(line, current.columns)):
                continue  # NCCL INFO lines ("host:pid:tid [d] NCCL INFO ..."), MPI chatter, output after the footer
            current.rows.append(_parse_row(line, current.columns, f"{where}: line {number}", number))
            continue
        body = line.lstrip("#").strip()
        if match := _STARTING_RE.search(body):
            if current.rows or current.has_nthread:
                finish(number)
            current.binary = match.group(1).removesuffix("_mpi")
        elif match := _VERSION_RE.search(body):
            if current.rows:
                finish(number)
            current.version = match.group(1)
        elif match := _NTHREAD_RE.search(body):
            if current.rows or current.has_nthread:
                finish(number)
            current.has_nthread = True
            current.nthreads, current.ngpus = int(match.group(1)), int(match.group(2))
            current.min_bytes, current.max_bytes = int(match.group(3)), int(match.group(4))
        elif match := _RANK_RE.search(body):
            current.ranks.append(NcclTestsRank(int(match.group(1)), match.group(2), int(match.group(3)),
                                               match.group(4), match.group(5).strip()))
        elif _is_column_header(body):
            if current.rows:
                finish(number)
            current.columns = body.split()
            current.columns_line = number
        elif match := _AVG_RE.search(body):
            current.complete = True
            try:
                current.avg_busbw = float(match.group(1))
            except ValueError:
                current.avg_busbw = None
    finish(len(lines) + 1)
    if not runs:
        raise ProfileInputError("no nccl-tests result table found (expected a '#  size  count  type ... time "
                                "algbw busbw' header followed by rows)", where=where)
    return tuple(runs)


def _damaged_row(line: str, columns: Sequence[str]) -> bool:
    """A table row whose size is not a number (``1O24``) but whose count is: parsed, so that it is an error, where a
    line of other output between rows is skipped."""
    tokens = line.split()
    expected = [c for c in columns if c != "timestamp"]
    at = expected.index("count") if "count" in expected else 1
    return tokens[0][0].isdigit() and len(tokens) >= len(expected) and tokens[at].isdigit()


def _is_column_header(body: str) -> bool:
    tokens = body.split()
    return len(tokens) >= 4 and tokens[0] == "size" and "count" in tokens and (
        "time" in tokens or "cputime" in tokens)


def _parse_row(line: str, columns: Sequence[str], at: str, number: int) -> NcclTestsRow:
    expected = [c for c in columns if c != "timestamp"]
    tokens = line.split()
    if len(tokens) < len(expected):
        raise ProfileInputError(f"table row has {len(tokens)} of {len(expected)} fields (table cut mid-row?)",
                                where=at)
    time_cols = [k for k, c in enumerate(expected) if c in ("time", "cputime")]
    bus_cols = [k for k, c in enumerate(expected) if c == "busbw"]
    wrong_cols = [k for k, c in enumerate(expected) if c in ("#wrong", "error")]

    def number_at(k: int, name: str) -> float:
        try:
            return float(tokens[k])
        except ValueError:
            raise ProfileInputError(f"column {name!r} is not a number (got {tokens[k]!r})", where=at) from None

    try:
        size = int(tokens[0])
    except ValueError:
        raise ProfileInputError(f"column 'size' is not an integer (got {tokens[0]!r})", where=at) from None
    count_col = expected.index("count")
    try:
        count = int(tokens[count_col])
    except ValueError:
        raise ProfileInputError(f"column 'count' is not an integer (got {tokens[count_col]!r})",
                                where=at) from None
    dtype = tokens[expected.index("type")] if "type" in expected else ""
    times = [number_at(k, "time") for k in time_cols]
    busbw = [number_at(k, "busbw") for k in bus_cols]
    if not times:
        raise ProfileInputError("the table has no time column", where=at)
    for t in times:
        if size > 0 and not t > 0:
            raise ProfileInputError(f"time must be > 0 us (got {t:g})", where=at)
    wrong = any(_nonzero_wrong(tokens[k]) for k in wrong_cols)
    time_in = times[1] if len(times) > 1 else None
    bus_out = busbw[0] if busbw else 0.0
    bus_in = busbw[1] if len(busbw) > 1 else None
    return NcclTestsRow(number, size, count, dtype, times[0], bus_out, time_in, bus_in, wrong)


def _nonzero_wrong(token: str) -> bool:
    if token.upper() == "N/A":
        return False
    try:
        return float(token) != 0.0
    except ValueError:
        return False


def observations_from_run(run: NcclTestsRun, binary: str, nranks: int) -> list[Observation]:
    """Out-of-place and in-place times of every row (rows with wrong results skipped; in place when timed) as
    observations."""
    model = BINARY_MODELS[binary]
    lat, byt = model.coefficients(nranks)
    out: list[Observation] = []
    for row in run.rows:
        if row.wrong or row.size_bytes == 0:
            continue
        origin = f"{run.file}: line {row.line}"
        out.append(Observation(row.size_bytes, row.time_us_out, lat, byt, origin))
        if row.time_us_in is not None:
            out.append(Observation(row.size_bytes, row.time_us_in, lat, byt, origin))
    return out
