"""The results file of a sweep: JSON lines, one finished job per line, appended as jobs finish.

Each line is ``{"error", "job", "key", "measured", "result"}`` with sorted keys and no spaces. A line cut
short by a kill (no final newline) is dropped on load and the file is truncated back to its last
complete line before anything is appended; any other unreadable line is an input error naming the line.
:meth:`ResultsFile.finalize` rewrites the file (to a temporary file, then a rename) in a fixed order.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from taccl_py.errors import InputError
from taccl_py.sweep.runner import JobRecord
from taccl_py.topology_io import atomic_write_text

__all__ = ["ResultsFile", "dumps_record"]


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def dumps_record(record: JobRecord) -> str:
    """One canonical JSON line (sorted keys, no NaN), without the newline."""
    return json.dumps(_json_safe(record.to_json()), sort_keys=True, separators=(",", ":"), allow_nan=False)


class ResultsFile:
    """A JSON-lines results file at ``path`` (created on the first append)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise InputError("is a directory; give a .jsonl file", where=str(self.path))
        parent = self.path.parent if str(self.path.parent) else Path(".")
        if not parent.is_dir():
            raise InputError(f"directory {str(parent)!r} does not exist", where=str(self.path))

    def load(self) -> dict[str, JobRecord]:
        """Every complete record in the file (a later line of the same key wins); repairs a cut last line."""
        if not self.path.exists():
            return {}
        data = self.path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):  # the last line was being written when the run was killed
            with self.path.open("r+b") as handle:
                handle.truncate(len(complete))
        records: dict[str, JobRecord] = {}
        for number, line in enumerate(complete.decode("utf-8", errors="replace").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{self.path}:{number}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"not a JSON line ({exc.msg}); is this a taccl sweep results file?",
                                 where=where) from None
            record = JobRecord.from_json(raw, where=where)
            records[record.key] = record
        return records

    def append(self, record: JobRecord) -> None:
        """Add one finished record durably (written, flushed and fsynced before the next job is reported)."""
        line = dumps_record(record) + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def finalize(self, order: Sequence[str]) -> None:
        """Rewrite the file: records of ``order`` first, in that order, then any others by key."""
        records = self.load()
        position = {key: k for k, key in enumerate(order)}
        keys = sorted(records, key=lambda key: (0, position[key], "") if key in position else (1, 0, key))
        atomic_write_text(self.path, "".join(dumps_record(records[key]) + "\n" for key in keys))
