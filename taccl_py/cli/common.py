"""Helpers every command shares: output (tables or one JSON object), sizes, topologies."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from taccl_py.collectives import CollectiveKind, parse_collective
from taccl_py.errors import InputError
from taccl_py.topology import Topology
from taccl_py.units import parse_size_range

__all__ = ["collective_option", "emit_json", "err_console", "json_option", "load_topology_arg",
           "make_table", "out_console", "size_option", "sizes_from", "topology_option"]

F = TypeVar("F", bound=Callable[..., Any])

out_console = Console(highlight=False, soft_wrap=True)
if not out_console.is_terminal:
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


def load_topology_arg(spec: str) -> Topology:
    from taccl_py.library import resolve_topology

    return resolve_topology(spec)


def sizes_from(spec: str) -> list[int]:
    return parse_size_range(spec, where="--size")


def collective_from(name: str) -> CollectiveKind:
    return parse_collective(name, where="--collective")


def make_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
               right_align_from: int = 1) -> Table:
    table = Table(title=title, show_lines=False, header_style="bold")
    for k, column in enumerate(columns):
        table.add_column(column, justify="right" if k >= right_align_from else "left")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    return table


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
