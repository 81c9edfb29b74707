"""Helpers every command shares: output (tables or one JSON object), sizes, topologies."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.table import Table
from rich.text import Text

from taccl_py.collectives import CollectiveKind, parse_collective
from taccl_py.errors import InputError, OutputError
from taccl_py.harness import OverlappedHost
from taccl_py.limits import MAX_LATENCY_US, MAX_SOLVER_THREADS, limit_text
from taccl_py.runtime import PROTOCOLS, Protocol, RuntimeModel
from taccl_py.topology import SwitchModel, Topology
from taccl_py.units import parse_size_range

__all__ = ["FittedTable", "check_output_file", "check_step_overhead", "check_synthesis_args", "check_xml_root", "collective_option",
           "emit_json", "err_console", "json_option", "load_topology_arg", "make_table", "min_steps_per_rank",
           "out_console", "plural", "prepare_output_dir", "progress_enabled", "progress_line", "size_option",
           "sizes_from", "switch_model_keys", "switch_model_option", "topology_option"]

F = TypeVar("F", bound=Callable[..., Any])

out_console = Console(highlight=False, soft_wrap=True)
if not out_console.is_terminal and "COLUMNS" not in os.environ:
    out_console = Console(highlight=False, soft_wrap=True, width=160)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)  # an error stays one line


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become null, tuples become lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def emit_json(obj: Any) -> None:
    """Print exactly one JSON object on stdout (for scripts)."""
    sys.stdout.write(json.dumps(_clean(obj), sort_keys=False) + "\n")
    sys.stdout.flush()


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")(func)


def topology_option(func: F) -> F:
    return click.option("--topology", "-t", "topology_spec", required=True, metavar="NAME|FILE",
                        help="A shipped topology name (see `taccl topo list`) or a topology file.")(func)


def size_option(func: F) -> F:
    return click.option("--size", "-s", "size_spec", required=True, metavar="SIZE|LO:HI",
                        help="Buffer size as nccl-tests reports it: 4096, 256KB, 1MiB, 1GB (K/M/G binary); "
                             "LO:HI sweeps powers of two.")(func)


def collective_option(func: F) -> F:
    return click.option("--collective", "-c", "collective_name", required=True, metavar="NAME",
                        help="allgather, reducescatter, allreduce, alltoall, broadcast or reduce.")(func)


def switch_model_option(func: F) -> F:
    """``--switch-model cut-through|store-and-forward`` (docs/simulator.md, "Switch models"); see :func:`load_topology_arg`."""
    return click.option("--switch-model", "switch_model", type=click.Choice([m.value for m in SwitchModel]),
                        default=None, help="How transfers cross switches in the simulation: cut-through (the whole route "
                        "at once; the default unless the topology file says otherwise) or store-and-forward (hop by "
                        "hop, each link in turn, as ASTRA-sim's congestion-aware backend). Overrides the topology's "
                        "switch_model.")(func)


def load_topology_arg(spec: str, switch_model: str | None = None) -> Topology:
    """The topology ``spec`` names, with switches of ``switch_model`` when given (``--switch-model``)."""
    from taccl_py.library import resolve_topology

    topology = resolve_topology(spec)
    return topology if switch_model is None else topology.with_switch_model(SwitchModel(switch_model))


def switch_model_keys(topology: Topology) -> dict[str, str]:
    """``{"switch_model": ...}`` for a report's JSON when the switches are not cut-through (else nothing)."""
    return {"switch_model": topology.switch_model.value} if topology.store_and_forward else {}


def protocols_option(names: Sequence[str]) -> tuple[Protocol, ...] | None:
    """``--protocol`` values (a run's NCCL_PROTO, any case) as protocols in NCCL's order; None when none is given."""
    wanted = {n.lower() for n in names}
    return tuple(p for p in PROTOCOLS if p.value.lower() in wanted) or None


def sizes_from(spec: str) -> list[int]:
    return parse_size_range(spec, where="--size")


def collective_from(name: str) -> CollectiveKind:
    return parse_collective(name, where="--collective")


def make_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
               right_align_from: int = 1, key_columns: int = 1) -> FittedTable:
    """A table that never cuts a number; float cells get one number style per column."""
    return FittedTable(title, columns, rows, right_align_from=right_align_from, key_columns=key_columns)


def column_decimals(values: Sequence[float]) -> int:
    """Decimals that show a column's smallest non-zero magnitude with 4 significant digits,
    at most 2 (3 when it is below 1), as nccl-tests prints times and bandwidths."""
    magnitudes = [abs(v) for v in values if v and math.isfinite(v)]
    if not magnitudes:
        return 2
    smallest = min(magnitudes)
    return max(0, min(2 if smallest >= 1 else 3, 3 - math.floor(math.log10(smallest))))


def _cells(rows: Sequence[Sequence[Any]], num_columns: int) -> list[list[str]]:
    """Rows as text: floats of a column share one fixed-point style (grouped thousands), None is '-'."""
    decimals = []
    for k in range(num_columns):
        floats = [v for row in rows if k < len(row) for v in [row[k]] if isinstance(v, float)]
        decimals.append(column_decimals(floats))
    text = []
    for row in rows:
        cells = []
        for k, v in enumerate(row):
            if v is None or (isinstance(v, float) and not math.isfinite(v)):
                cells.append("-")
            elif isinstance(v, float):
                cells.append(f"{v:,.{decimals[k]}f}")
            else:
                cells.append(str(v))
        text.append(cells)
    return text


_NUMBER_RE = re.compile(r"^[-+]?(\d[\d,]*)?\.?\d+(e[-+]?\d+)?[%x]?$", re.IGNORECASE)


def _is_number_cell(text: str) -> bool:
    return text in ("-", "") or bool(_NUMBER_RE.match(text))


class FittedTable:
    """A rich table that fits the console without cutting a number.

    A column of numbers is exactly as wide as its widest number (its header
    wraps at spaces); text columns may wrap. When the columns do not fit the
    console's width they are split over several tables, each repeating the
    first ``key_columns`` (the size), with a line saying so. A column too wide
    even beside the key alone folds its digits onto a second line rather than
    losing them.
    """

    def __init__(self, title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
                 right_align_from: int = 1, key_columns: int = 1) -> None:
        self.title = title
        self.columns = list(columns)
        self.rows = _cells(rows, len(self.columns))
        self.right_align_from = right_align_from
        self.key_columns = min(key_columns, len(self.columns))
        self.numeric = [all(_is_number_cell(row[k]) for row in self.rows if k < len(row))
                        for k in range(len(self.columns))]
        # per column: narrowest width (widest number, or longest word of text; the header may wrap at spaces)
        # and the width that also keeps the header on one line
        self.narrow: list[int] = []
        self.wide: list[int] = []
        for k, header in enumerate(self.columns):
            header_word = max((cell_len(w) for w in header.split()), default=0)
            cells = [cell_len(row[k]) for row in self.rows if k < len(row)]
            if self.numeric[k]:
                self.narrow.append(max([header_word, *cells], default=1))
            else:
                words = [cell_len(w) for row in self.rows if k < len(row) for w in row[k].split()]
                self.narrow.append(max([header_word, *words], default=1))
            self.wide.append(max([cell_len(header), *cells], default=1))

    def width_of(self, indices: Sequence[int], *, wide: bool = False) -> int:
        """Width of the table of these columns: borders, padding and the columns' narrow (or wide) widths."""
        widths = self.wide if wide else self.narrow
        return 1 + sum(widths[k] + 3 for k in indices)

    def _table(self, indices: Sequence[int], title: str | None, width: int) -> Table:
        table = Table(title=title, show_lines=False, header_style="bold")
        widths = self.wide if self.width_of(indices, wide=True) <= width else self.narrow
        for k in indices:
            table.add_column(self.columns[k], justify="right" if k >= self.right_align_from else "left",
                             overflow="fold", width=widths[k] if self.numeric[k] else None)
        for row in self.rows:
            table.add_row(*(row[k] if k < len(row) else "" for k in indices))
        return table

    def parts(self, width: int) -> list[list[int]]:
        """Column indices of each printed table at ``width``: every column if they fit, else groups."""
        every = list(range(len(self.columns)))
        if self.width_of(every) <= width:
            return [every]
        keys = every[:self.key_columns]
        parts: list[list[int]] = []
        current = list(keys)
        for k in every[self.key_columns:]:
            if len(current) > len(keys) and self.width_of([*current, k]) > width:
                parts.append(current)
                current = list(keys)
            current.append(k)
        parts.append(current)
        return parts

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        parts = self.parts(options.max_width)
        for n, indices in enumerate(parts):
            title = self.title if n == 0 else f"(continued, {n + 1}/{len(parts)})"
            yield self._table(indices, title, options.max_width)
        if len(parts) > 1:
            yield Text(f"(split into {len(parts)} tables to fit {options.max_width} columns; --json gives one)",
                       style="dim")


def fmt(value: float | None, digits: int = 4) -> str:
    """Compact number for tables."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    magnitude = abs(value)
    if magnitude >= 1e4:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    return f"{value:.{digits}g}"


def fail_input(message: str, *, where: str = "") -> InputError:
    return InputError(message, where=where)


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """``1 machine``, ``2 machines``, ``0 machines``."""
    return f"{count} {noun if count == 1 else plural_noun or noun + 's'}"


# ------------------------------------------------------------------ outputs
def check_output_file(path: str | None, option: str) -> None:
    """Fail before any work when ``path`` cannot be written (an unwritable -o found after the work is lost work).

    Checks that the directory exists and takes a new file (by creating and removing
    a probe file, which also catches read-only and immutable directories), that the
    target is not a directory and, when it exists, that it can be replaced. The
    write itself still goes through a temporary file and a rename.
    """
    if path is None:
        return
    target = Path(path)
    where = f"{option} {path}"
    if path == "-":
        raise OutputError("standard output is not an option here; give a file name (e.g. ./out)", where=where)
    if target.is_dir():
        raise OutputError("is a directory; give a file name", where=where)
    if target.exists() and not target.is_file():
        return  # a device or a pipe (-o /dev/stdout): written into, not replaced (atomic_write_text)
    parent = target.parent
    if not parent.exists():
        raise OutputError(f"directory {str(parent)!r} does not exist", where=where)
    if not parent.is_dir():
        raise OutputError(f"{str(parent)!r} is not a directory", where=where)
    _probe_directory(parent, where)
    if target.is_file():
        try:
            with open(target, "ab"):
                pass
        except OSError as exc:
            raise OutputError(f"cannot replace the existing file: {exc.strerror or exc}", where=where) from None


def prepare_output_dir(path: str, option: str) -> Path:
    """Create (if needed) the directory ``path`` for a sweep's files and check that it takes new files."""
    target = Path(path)
    where = f"{option} {path}"
    if target.exists() and not target.is_dir():
        raise OutputError("must be a directory when --size is a range", where=where)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the directory: {exc.strerror or exc}", where=where) from None
    _probe_directory(target, where)
    return target


def _probe_directory(directory: Path, where: str) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=".taccl-probe-", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot create files in {str(directory)!r}: {exc.strerror or exc}", where=where) from None
    os.close(fd)
    os.unlink(probe)


# ------------------------------------------------------------------ up-front argument checks
def check_step_overhead(value: float, option: str = "--step-overhead") -> None:
    """A per-step software latency: finite, >= 0 and at most :data:`MAX_LATENCY_US`."""
    if not 0 <= value <= MAX_LATENCY_US:  # also refuses NaN
        raise InputError(f"must be in 0..{MAX_LATENCY_US:g} us (got {value}); "
                         f"{limit_text('MAX_LATENCY_US', MAX_LATENCY_US, 'us')}", where=option)


def check_xml_root(kind: CollectiveKind, root: int, dialect: str) -> None:
    """v1 MSCCL XML has no root attribute: a Broadcast/Reduce rooted elsewhere than rank 0 cannot be written."""
    if dialect == "v1" and root and kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
        raise InputError(f"{kind.value} with --root {root} cannot be written as v1 MSCCL XML, which has no root "
                         "attribute (use --dialect v2 or --root 0)", where="--dialect")


def min_steps_per_rank(kind: CollectiveKind, num_gpus: int, chunk_factor: int) -> int:
    """The fewest MSCCL steps the busiest rank runs when every transfer carries one chunk (as synthesized ones do).

    Each chunk delivery is a receive step on one rank and a send step on another,
    so the busiest rank runs at least 2 x deliveries / N steps. Allgather,
    ReduceScatter and Alltoall deliver at least N(N-1)C chunks, Allreduce twice
    that (reduce, then spread every chunk); for Broadcast and Reduce the root
    alone sends (or receives) every one of the C chunks.
    """
    n, c = num_gpus, chunk_factor
    if kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
        return c
    if kind is CollectiveKind.ALLREDUCE:
        return 4 * (n - 1) * c
    return 2 * (n - 1) * c


def check_solver_option(solver: str) -> None:
    """``--solver`` names CP-SAT or a MILP solver PuLP finds here; anything else is bad input (exit 2)."""
    from solver_models._backend import check_solver

    try:
        check_solver(solver)
    except InputError as exc:
        raise InputError(exc.detail, where="--solver") from None


def check_synthesis_args(topology: Topology, kind: CollectiveKind, *, output: str | None, schedule_out: str | None,
                         ranged: bool, dialect: str, instances: int, root: int, chunk_factors: Sequence[int],
                         solver: str, seed: int = 0, time_limit: float = 60.0, threads: int = 1) -> None:
    """Everything ``taccl synthesize`` can check before the solvers start, each failing with exit status 2."""
    from taccl_py.msccl.ir import MAX_CHANNELS, MAX_NODES_PER_RANK

    if not -(2**31) <= seed < 2**31:
        raise InputError(f"must be in {-(2**31)}..{2**31 - 1} (got {seed}): the solvers take a 32-bit seed",
                         where="--seed")
    if not 1 <= threads <= MAX_SOLVER_THREADS:
        raise InputError(f"must be in 1..{MAX_SOLVER_THREADS} (got {threads}); "
                         f"{limit_text('MAX_SOLVER_THREADS', MAX_SOLVER_THREADS)}", where="--threads")
    if math.isnan(time_limit):
        raise InputError("must be a number of seconds (got nan)", where="--time-limit")
    if topology.num_gpus < 2:
        raise InputError("has 1 GPU: a collective on one GPU moves no data, so there is nothing to synthesize",
                         where=topology.name)
    if not 1 <= instances <= MAX_CHANNELS:
        raise InputError(f"must be in 1..{MAX_CHANNELS} (got {instances}): each instance takes an MSCCL channel "
                         f"and a rank has {MAX_CHANNELS}", where="--instances")
    if output:
        check_xml_root(kind, root, dialect)
    for factor in chunk_factors:
        steps = min_steps_per_rank(kind, topology.num_gpus, factor) * instances
        if steps > MAX_NODES_PER_RANK:
            raise InputError(f"{factor} needs at least {steps:,} MSCCL steps per rank for {kind.value} on "
                             f"{topology.num_gpus} GPUs{f' x {instances} instances' if instances > 1 else ''} "
                             f"(one chunk per step); MSCCL runs at most {MAX_NODES_PER_RANK} per rank "
                             "(MAX_NODES_PER_RANK)", where="--chunk-factor")
    check_solver_option(solver)
    if ranged and output:
        prepare_output_dir(output, "-o")
    else:
        check_output_file(output, "-o")
    check_output_file(schedule_out, "--schedule-out")


# ------------------------------------------------------------------ progress
PROGRESS_DELAY_S = 2.0
"""A live progress line appears only once a command has run this long."""


class _DelayedLine:
    """Renders nothing for :data:`PROGRESS_DELAY_S`, then the current text and the elapsed time."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.text = ""

    def update(self, text: str) -> None:
        self.text = text

    def __rich__(self) -> Group | Text:
        elapsed = time.perf_counter() - self.started
        if elapsed < PROGRESS_DELAY_S:
            return Group()
        return Text.from_markup(f"{self.text}  [dim]{elapsed:.0f} s[/dim]")


def progress_enabled(as_json: bool) -> bool:
    """Live progress only for a person watching: not with --json, and only when stdout and stderr are terminals."""
    return not as_json and out_console.is_terminal and err_console.is_terminal


@contextmanager
def progress_line(enabled: bool) -> Iterator[Callable[[str], None]]:
    """A transient status line on stderr, shown once the work takes longer than :data:`PROGRESS_DELAY_S`.

    Yields ``update(text)``: say what is being done now (``simulating ring: size 3/12 (4MB)``).
    """
    if not enabled:
        yield lambda text: None
        return
    line = _DelayedLine()
    with Live(line, console=err_console, transient=True, refresh_per_second=4):
        yield line.update


def ideal_requested() -> bool:
    """True when ``taccl --ideal`` was given (the raw-link model, no calibrated runtime costs)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().params.get("ideal"))


def launch_offset_requested() -> float:
    """The ``taccl --launch-offset`` (us), 0 when not given."""
    ctx = click.get_current_context(silent=True)
    return float(ctx.find_root().params.get("launch_offset") or 0.0) if ctx is not None else 0.0


def parse_host_overlap(text: str, where: str = "--host-overlap") -> OverlappedHost:
    """``US[,US]``: a ``-g N`` host's cost per collective and per channel, overlapping the GPUs' work."""
    try:
        values = [float(p) for p in text.split(",")]
        if not 1 <= len(values) <= 2:
            raise ValueError
        return OverlappedHost(*values)
    except (TypeError, ValueError):
        raise InputError(f"expected US or US,US (per collective, per channel; numbers of us in 0..1e6), got "
                         f"{text!r}", where=where) from None


def host_overlap_requested() -> OverlappedHost | None:
    """The ``taccl --host-overlap US[,US]`` (None when not given); refused with ``--launch-offset`` or ``--ideal``."""
    ctx = click.get_current_context(silent=True)
    text = ctx.find_root().params.get("host_overlap") if ctx is not None else None
    if text is None:
        return None
    if launch_offset_requested():
        raise InputError("give the -g N host's cost one way: added (--launch-offset) or overlapping the GPUs' work "
                         "(--host-overlap), not both", where="--host-overlap")
    if ideal_requested():
        raise InputError("a host overlapping the GPUs' work applies to the calibrated runtime model, not to the "
                         "raw-link model of --ideal", where="--host-overlap")
    return parse_host_overlap(str(text))


HOST_OVERLAP_COMMANDS = "simulate, baseline and profile check"
"""The commands ``taccl --host-overlap`` applies to (what an nccl-tests ``-g N`` table is held next to)."""


def check_host_overlap_applies(command: str | None, applies: tuple[str, ...]) -> None:
    """Refuse ``taccl --host-overlap`` before ``command`` runs unless it is one of ``applies`` (a group's
    subcommand: ``taccl profile check``, not ``profile show``)."""
    if command is not None and command not in applies:
        raise InputError(f"a -g N host overlapping the GPUs' work applies to {HOST_OVERLAP_COMMANDS} (NCCL's "
                         f"collectives timed next to an nccl-tests table), not to {command}", where="--host-overlap")


def runtime_model_for(topology: Topology, *, host_overlap: bool = False) -> RuntimeModel | None:
    """The topology's calibrated runtime model, unless ``--ideal`` (then None: the raw-link model).

    ``taccl --launch-offset`` is added to its launch overheads (a harness's host cost). ``taccl --host-overlap``
    is applied by the commands that pass ``host_overlap`` (:func:`host_overlap_requested`; the others refuse it).
    Store-and-forward switches are a raw-link model of their own: with a runtime model too, one line asks for
    ``--ideal`` (the calibrated costs are per step of a cut-through route).
    """
    from taccl_py.runtime import with_launch_offset

    host = host_overlap_requested()
    if host is not None and not host_overlap:
        raise InputError(f"a -g N host overlapping the GPUs' work applies to {HOST_OVERLAP_COMMANDS} of one "
                         "collective at a time (NCCL's collectives timed next to an nccl-tests table); drop it here",
                         where="--host-overlap")
    if host is not None and topology.runtime is None:
        raise InputError(f"topology {topology.name!r} has no calibrated runtime model for a host to overlap",
                         where="--host-overlap")
    offset = launch_offset_requested()
    if offset and ideal_requested():
        raise InputError("a launch offset applies to the calibrated runtime model, not to the raw-link model of "
                         "--ideal", where="--launch-offset")
    if offset and topology.runtime is None:
        raise InputError(f"topology {topology.name!r} has no calibrated runtime model to add a launch offset to",
                         where="--launch-offset")
    model = None if ideal_requested() else topology.runtime
    if model is not None and offset:
        model = with_launch_offset(model, offset)
    if model is not None and topology.store_and_forward:
        raise InputError(f"store-and-forward switches are simulated on the raw-link model only, and topology "
                         f"{topology.name!r} has the calibrated runtime model {model.name!r}: add taccl --ideal",
                         where="--switch-model")
    return model


def model_note(model: RuntimeModel | None, host: OverlappedHost | None = None) -> str:
    """One line saying which model the times are on (bounds always on the raw-link model), and the host a
    ``-g N`` harness overlaps with the GPUs' work, when given."""
    if model is None:
        return "times on the raw-link model (ideal); bounds on the raw-link model"
    overlapped = "" if host is None else (
        f"; each time the longer of the GPUs' and a -g N host's {host.host_us:g} us + {host.per_channel_us:g} us per "
        "channel (--host-overlap)")
    return (f"times on the calibrated runtime model {model.name!r} (protocol per size, per-step and launch overheads; "
            f"taccl --ideal for the raw-link model){overlapped}; bounds on the raw-link model")
