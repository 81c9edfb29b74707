"""One exception hierarchy for the whole package.

Every error a user can cause derives from :class:`TacclError` and renders as a
single line; the CLI alone turns them into ``taccl: error: ...`` and an exit
status (2 for bad input, 1 for a result that is wrong or not found).
"""

from __future__ import annotations

__all__ = [
    "Infeasible",
    "InputError",
    "LoweringError",
    "NotApplicable",
    "OutputError",
    "ProfileInputError",
    "ScheduleError",
    "SketchError",
    "SolverError",
    "SolverTimeout",
    "TacclError",
    "TopologyError",
    "XmlError",
    "XmlLoadError",
]


class TacclError(Exception):
    """Base of every error this package raises on purpose."""

    exit_status = 1


class InputError(TacclError, ValueError):
    """Bad user input: a file, a field or an argument. Exit status 2.

    ``where`` names the file (or argument) and ``field`` the offending field,
    so the message reads ``mytopo.json: links[3].bandwidth must be > 0 (got -5)``.
    """

    exit_status = 2

    def __init__(self, message: str, *, where: str = "", field: str = "") -> None:
        self.where = where
        self.field = field
        self.detail = message
        text = f"{field} {message}" if field else message
        super().__init__(f"{where}: {text}" if where else text)


class TopologyError(InputError):
    """A topology file or object is malformed or inconsistent."""


class ScheduleError(InputError):
    """A schedule file is malformed or references things that do not exist."""


class XmlError(InputError):
    """An MSCCL XML file cannot be parsed into a program."""


class XmlLoadError(XmlError):
    """An XML file that cannot be turned into a program; ``rule`` classifies why, ``line`` says where."""

    def __init__(self, message: str, *, where: str, line: int | None = None, rule: str = "xml-parse") -> None:
        self.rule = rule
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message, where=where)


class NotApplicable(InputError):
    """A baseline cannot run this collective on this topology (the message says why)."""


class SketchError(InputError):
    """A communication sketch or TACCL profile is malformed or does not fit the topology."""


class ProfileInputError(InputError):
    """A measurement file (nccl-tests log, CSV) cannot be fitted."""

    @classmethod
    def not_a_file(cls, path: str) -> ProfileInputError:
        """A measurement file argument that names no file: a directory, or nothing."""
        from pathlib import Path

        return cls("is a directory, not a file" if Path(path).is_dir() else "no such file", where=path)


class OutputError(InputError):
    """An output (``-o``, ``--schedule-out``...) cannot be written where asked. Exit status 2."""


class LoweringError(TacclError):
    """A schedule cannot be expressed in the chosen MSCCL dialect; says which limit is hit.

    ``over``: when a count limit is hit (channels between two ranks, XML nodes of a rank), the
    count needed over the count allowed (> 1), so a caller can shrink the schedule in proportion.
    """

    def __init__(self, message: str, *, over: float | None = None) -> None:
        super().__init__(message)
        self.over = over


class SolverError(TacclError):
    """A solver failed for a reason other than infeasibility or time."""


class Infeasible(SolverError):
    """The encoding has no solution; the message names the constraint that cannot hold."""


class SolverTimeout(SolverError):
    """The time limit passed before any solution was found."""
