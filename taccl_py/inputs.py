"""Reading input files whole, safely: bounded size, bounded JSON nesting, one error type per format.

Every input file is read by :func:`read_file_bytes` (binary: MSCCL XML,
Chakra traces), :func:`read_text_file` (text: ASTRA-sim YAML, measurements
CSV, nccl-tests logs) or :func:`read_json_file` (topology, schedule, sketch,
TACCL profile), so a missing file, a directory, a device that never ends, a
binary file, or JSON nested ten thousand deep each gets one line naming the
file, not a traceback or a hang.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taccl_py.errors import InputError
from taccl_py.limits import MAX_FILE_BYTES, MAX_JSON_DEPTH

__all__ = ["ErrorFactory", "json_depth", "parse_json_text", "read_file_bytes", "read_json_file", "read_text_file"]

ErrorFactory = Callable[..., InputError]
"""Builds the format's error from a message and ``where=`` (an :class:`InputError` subclass, or a partial of one)."""


def read_file_bytes(path: str | os.PathLike[str], error: ErrorFactory, *, what: str = "file",
                    limit: int = MAX_FILE_BYTES, limit_name: str = "MAX_FILE_BYTES") -> bytes:
    """The bytes of ``path``; ``error`` (naming the path) when it is missing, a directory, unreadable or larger than
    ``limit`` (the limits module's ``limit_name``)."""
    where = str(path)
    target = Path(path)
    if target.is_dir():
        raise error(f"is a directory, not a {what}", where=where)
    try:
        with open(target, "rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise error("no such file", where=where) from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", where=where) from None
    if len(data) > limit:
        raise error(f"is larger than {limit >> 20} MiB ({limit_name})", where=where)
    return data


def read_text_file(path: str | os.PathLike[str], error: ErrorFactory, *, what: str = "file",
                   lenient: bool = False) -> str:
    """The UTF-8 text of ``path``; ``error`` (naming the path) when it is missing, a directory, too big or binary.

    ``lenient`` replaces bytes that are not UTF-8 instead (logs with stray binary output).
    """
    where = str(path)
    data = read_file_bytes(path, error, what=what)
    try:
        return data.decode("utf-8", errors="replace" if lenient else "strict")
    except UnicodeDecodeError as exc:
        raise error(f"cannot read: not UTF-8 text (byte {exc.start})", where=where) from None


def json_depth(data: Any) -> int:
    """Deepest nesting of lists and dicts in parsed data (a scalar is 0), without recursion.

    Each container is measured once (by identity), so YAML aliases that share one
    list many times over cannot make this exponential; data that contains itself
    (a YAML anchor inside its own alias) counts as infinitely deep (``sys.maxsize``).
    """
    height: dict[int, int] = {}
    open_now: set[int] = set()  # containers whose children are still being measured
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        value, children_done = stack.pop()
        if not isinstance(value, dict | list):
            continue
        key = id(value)
        children = [c for c in (value.values() if isinstance(value, dict) else value) if isinstance(c, dict | list)]
        if children_done:
            height[key] = 1 + max((height[id(c)] for c in children), default=0)
            open_now.discard(key)
        elif key not in height:
            if any(id(c) in open_now or c is value for c in children):
                return sys.maxsize
            open_now.add(key)
            stack.append((value, True))
            stack.extend((c, False) for c in children if id(c) not in height)
    return height.get(id(data), 0)


def parse_json_text(text: str, error: ErrorFactory, *, where: str) -> Any:
    """Parse JSON; nesting beyond :data:`MAX_JSON_DEPTH` and syntax errors become ``error``."""
    too_deep = f"nests lists/objects more than {MAX_JSON_DEPTH} levels deep (MAX_JSON_DEPTH)"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", where=where) from None
    except RecursionError:
        raise error(too_deep, where=where) from None
    except ValueError as exc:  # e.g. an integer literal with more digits than Python converts
        raise error(f"not valid JSON: {exc}", where=where) from None
    if json_depth(data) > MAX_JSON_DEPTH:
        raise error(too_deep, where=where)
    return data


def read_json_file(path: str | os.PathLike[str], error: ErrorFactory, *, what: str = "JSON file") -> Any:
    """Read and parse a JSON file with every failure as one ``error`` naming the file."""
    return parse_json_text(read_text_file(path, error, what=what), error, where=str(path))
