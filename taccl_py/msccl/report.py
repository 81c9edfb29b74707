"""What the verifier found: rule violations and the overall verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DATA_RULES", "FATAL_RULES", "UNCHECKED_RULES", "VerifyReport", "Violation"]

UNCHECKED_RULES = frozenset({"unchecked-collective", "unchecked-races"})
"""A check that could not run: the program is not known to be correct (nor known to be wrong)."""

DATA_RULES = frozenset({"wrong-result", "data-race"}) | UNCHECKED_RULES
"""Rules about the data result; they make a program incorrect (or of unknown correctness), not invalid."""

FATAL_RULES = frozenset({
    "gpu-ids", "tb-ids", "tb-limit", "peer", "channel", "duplicate-connection", "unmatched-connection",
    "count-mismatch", "step-count-mismatch", "count", "missing-peer", "offset-range", "ra-step",
    "dangling-dependency", "algo-attribute", "chunk-count",
})
"""Rules after which executing the program means nothing (the verifier then stops before execution)."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule; ``rank``, ``tb`` (the tb id) and ``step`` (its ``s`` position) are None when global."""

    rule: str
    message: str
    rank: int | None = None
    tb: int | None = None
    step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "tb": self.tb, "step": self.step, "rule": self.rule, "message": self.message}

    def __str__(self) -> str:
        where = []
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.tb is not None:
            where.append(f"tb {self.tb}")
        if self.step is not None:
            where.append(f"step {self.step}")
        prefix = f"{', '.join(where)}: " if where else ""
        return f"[{self.rule}] {prefix}{self.message}"


@dataclass(frozen=True)
class VerifyReport:
    """``valid``: the runtimes load and run it without hanging; ``correct``: the result is the collective's.

    ``correct`` is True only when every check ran (rules, deadlock, data
    races, the result in each buffer mode) and found nothing. ``verdict`` says
    ``unknown`` instead of ``incorrect`` when the program is valid and the only
    findings are checks that could not run (:data:`UNCHECKED_RULES`).
    ``dialect`` is the one checked against; ``modes`` the buffer modes whose
    data result was checked (``inplace``/``outofplace``).
    """

    valid: bool
    correct: bool
    errors: tuple[Violation, ...]
    dialect: str
    modes: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def verdict(self) -> str:
        """``correct``, ``incorrect``, or ``unknown`` (valid, nothing found, but a check could not run)."""
        if self.correct:
            return "correct"
        if self.valid and self.errors and all(e.rule in UNCHECKED_RULES for e in self.errors):
            return "unknown"
        return "incorrect"

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "correct": self.correct, "verdict": self.verdict, "dialect": self.dialect,
                "modes_checked": list(self.modes), "errors": [e.to_dict() for e in self.errors],
                "notes": list(self.notes)}

    @property
    def rules(self) -> set[str]:
        """The distinct rules broken (handy in tests)."""
        return {e.rule for e in self.errors}
