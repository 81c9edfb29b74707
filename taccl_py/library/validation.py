"""Argument checks shared by the generators: one message style, naming generator and field."""

from __future__ import annotations

import math

from taccl_py.errors import TopologyError

__all__ = ["require_bandwidth", "require_int", "require_latency"]


def require_int(value: object, minimum: int, *, where: str, field: str) -> int:
    """An integer >= ``minimum`` (booleans refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"must be an integer (got {value!r})", where=where, field=field)
    if value < minimum:
        raise TopologyError(f"must be >= {minimum} (got {value})", where=where, field=field)
    return value


def _require_number(value: object, *, where: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
        raise TopologyError(f"must be a finite number (got {value!r})", where=where, field=field)
    return float(value)


def require_bandwidth(value: object, *, where: str, field: str = "bandwidth") -> float:
    """A bandwidth in GB/s: finite and > 0."""
    number = _require_number(value, where=where, field=field)
    if number <= 0:
        raise TopologyError(f"must be > 0 (got {number:g})", where=where, field=field)
    return number


def require_latency(value: object, *, where: str, field: str = "latency") -> float:
    """A latency in us: finite and >= 0."""
    number = _require_number(value, where=where, field=field)
    if number < 0:
        raise TopologyError(f"must be >= 0 (got {number:g})", where=where, field=field)
    return number
