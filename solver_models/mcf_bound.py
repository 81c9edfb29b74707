"""The exact fluid optimum of Alltoall: a max-concurrent multi-commodity flow LP (OR-Tools GLOP).

Every GPU s must send ``demand`` bytes to every other GPU. Commodities are
aggregated by source (a single-source flow to many sinks decomposes into
paths, so nothing is lost), flows may relay through GPUs and switches, and
every link carries at most ``bandwidth x T``. The optimum T is a lower bound
on any Alltoall schedule in the fluid model, and the tightest one that
ignores latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MAX_LP_VARIABLES", "McfResult", "alltoall_mcf"]

MAX_LP_VARIABLES = 250_000
"""Beyond sources x links this size the LP is skipped (the cut bounds remain)."""


@dataclass(frozen=True)
class McfResult:
    """``us_per_pair_byte``: the optimal makespan when every GPU pair exchanges one byte."""

    us_per_pair_byte: float
    variables: int


def alltoall_mcf(num_gpus: int, num_vertices: int, links: Sequence[tuple[int, int, float]],
                 *, work_limit: float = 60.0) -> McfResult | None:
    """Solve the Alltoall flow LP; ``links`` are (src id, dst id, bytes per us), GPUs are ids 0..N-1.

    GLOP stops after ``work_limit`` deterministic seconds, so whether the bound
    is found does not depend on the machine or its load. Returns None when the
    LP is too large (see :data:`MAX_LP_VARIABLES`) or GLOP does not reach optimality.
    """
    from solver_models._backend import glop_is_optimal, glop_solver

    variables = num_gpus * len(links)
    if num_gpus < 2 or variables > MAX_LP_VARIABLES:
        return None
    solver = glop_solver(work_limit)
    inf = solver.infinity()
    makespan = solver.NumVar(0.0, inf, "T")
    flow = [[solver.NumVar(0.0, inf, f"f[s{s},l{i}]") for i in range(len(links))] for s in range(num_gpus)]
    for i, (_, _, bandwidth) in enumerate(links):
        capacity = solver.Constraint(-inf, 0.0, f"cap[l{i}]")
        for s in range(num_gpus):
            capacity.SetCoefficient(flow[s][i], 1.0)
        capacity.SetCoefficient(makespan, -bandwidth)
    for s in range(num_gpus):
        balance = []
        for v in range(num_vertices):
            demand = -(num_gpus - 1.0) if v == s else (1.0 if v < num_gpus else 0.0)
            balance.append(solver.Constraint(demand, demand, f"flow[s{s},v{v}]"))
        for i, (src, dst, _) in enumerate(links):
            balance[dst].SetCoefficient(flow[s][i], 1.0)
            balance[src].SetCoefficient(flow[s][i], -1.0)
    solver.Minimize(makespan)
    status = solver.Solve()
    if not glop_is_optimal(status):
        return None
    return McfResult(makespan.solution_value(), variables)
