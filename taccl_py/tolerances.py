"""Every floating-point tolerance the package compares with, named in one place.

Times are sums of latencies and ``bytes / bandwidth`` quotients, so two
computations of the same instant can differ in the last bits; a comparison
that must not flip on that noise uses one of these instead of a literal.
Relative tolerances (``*_REL``) scale with the compared value; absolute ones
carry their unit in the name. Changing one changes results: each is part of
the deterministic contract (same inputs, same XML and reports).
"""

from __future__ import annotations

__all__ = [
    "BETTER_REL",
    "CEIL_SLACK",
    "EDGE_COST_FLOOR",
    "PATH_IMPROVEMENT",
    "PRICING_TIE_REL",
    "REDUCED_COST_REL",
    "SAME_INSTANT_REL",
    "SAME_TIME_US",
    "SEARCH_IMPROVEMENT_REL",
    "UNCHANGED_FIT_ABS_US",
    "UNCHANGED_FIT_REL",
    "ZERO_OBJECTIVE",
    "is_better",
]

BETTER_REL = 1e-9
"""A time, estimate or speedup counts as better only if below ``other * (1 - BETTER_REL)`` (or above
``* (1 + BETTER_REL)``): ties within rounding keep the earlier, simpler choice, and a result checked against
a bound may sit on it."""

SEARCH_IMPROVEMENT_REL = 1e-12
"""The lower bound's cut and ratio searches accept a new cut only if it improves by more than this
(relative): the Dinkelbach iteration stops instead of cycling on rounding."""

SAME_INSTANT_REL = 1e-9
"""Events closer than ``1e-9 * max(1, |now|)`` us are simultaneous: the event kernel's batch
(``taccl_py/event_kernel.py::batch_end``) and the fused baselines' timing."""

SAME_TIME_US = 1e-12
"""Two times (us) closer than this are the same instant in the list schedulers and the timeline drawing."""

PATH_IMPROVEMENT = 1e-15
"""Dijkstra relaxes an edge only if the path shortens by more than this (the pricing's ties stay put)."""

EDGE_COST_FLOOR = 1e-12
"""Added to every edge cost of the path pricing so a free edge still costs a hop (shortest paths stay short)."""

PRICING_TIE_REL = 1e-9
"""Weight of the latency tie-breaker in the routing's pricing, relative to the largest link price."""

REDUCED_COST_REL = 1e-9
"""Column generation adds a route only if its reduced cost is below ``-REDUCED_COST_REL * max(1, |dual|)``."""

CEIL_SLACK = 1e-9
"""Subtracted before ``math.ceil`` of a computed float (bytes, us) so ``3.0000000001`` stays 3."""

UNCHANGED_FIT_REL = 1e-6
"""Calibration treats a refitted bandwidth/latency within this (relative) of the old one as unchanged."""

UNCHANGED_FIT_ABS_US = 1e-9
"""... and a refitted latency (us) within this (absolute) of the old one."""

ZERO_OBJECTIVE = 1e-12
"""An objective below this in absolute value is zero (no gap is reported against it)."""


def is_better(candidate: float, incumbent: float) -> bool:
    """True when ``candidate`` (a time or cost, lower is better) beats ``incumbent`` beyond rounding."""
    return candidate < incumbent * (1 - BETTER_REL)
