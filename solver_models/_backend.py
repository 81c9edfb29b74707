"""The one place that imports solver libraries (OR-Tools, PuLP).

Every other module reaches a solver through a function here: encodings
describe their problems with the small neutral types below, or build a model
on an object this module creates (:func:`cpsat_model`, :func:`glop_solver`),
and :func:`max_flow_min_cut` serves the analytic bounds in
``taccl_py/bounds.py``. ``tests/test_solver_models.py`` checks that no other
module imports ``ortools`` or ``pulp``. This module turns problems into GLOP
linear programs, CP-SAT models, OR-Tools max-flows or PuLP MILPs,
applies the limits, seed and thread count, and reports status, incumbent,
bound and gap in a :class:`SolveStats`. Statuses become :class:`Infeasible` or
:class:`SolverTimeout` here, nowhere else.

Limits are *deterministic* so that identical inputs give identical answers on
any machine and under any load: CP-SAT and GLOP stop on their deterministic
time (``max_deterministic_time``, an operation count scaled to about a second
of work; CP-SAT's workers are interleaved deterministically), CBC on a node
count (one thread: its parallel search is not deterministic). The wall-clock
``time_limit_s`` stays as an outer guard; when it, not the deterministic
budget, stops a solve, :attr:`SolveStats.stopped_by` says ``"time limit"``
and the answer may differ between runs.
"""

from __future__ import annotations

import inspect
import math
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from taccl_py.errors import Infeasible, InputError, SolverError, SolverTimeout
from taccl_py.tolerances import ZERO_OBJECTIVE

__all__ = ["STOPPED_BY_TIME", "STOPPED_BY_WORK", "IntegerProgram", "LinearResult", "SolveStats", "SolverConfig",
           "check_solver", "cpsat_found_solution", "cpsat_model", "cpsat_solver", "cpsat_stop_reason",
           "glop_is_optimal", "glop_solver", "max_flow_min_cut", "pulp_solver_name", "solve_cpsat_interruptibly",
           "solve_integer_program", "solve_lp"]

STOPPED_BY_WORK = "work limit"
"""A solve stopped by its deterministic budget: the same answer on every machine."""

STOPPED_BY_TIME = "time limit"
"""A solve stopped by the wall-clock guard: the answer may differ between runs and machines."""


@dataclass(frozen=True)
class SolverConfig:
    """Solver control shared by every stage: which MILP solver, limits, seed, threads.

    ``work_limit`` is the deterministic budget (CP-SAT deterministic seconds),
    ``max_nodes`` CBC's branch-and-bound node budget, ``time_limit_s`` the
    wall-clock guard (seconds). ``threads`` goes to the PuLP solvers that take it
    (Gurobi, CPLEX, HiGHS, SCIP); CP-SAT and CBC run on one thread so that
    their answers are reproducible.
    """

    solver: str = "cpsat"
    time_limit_s: float = 30.0
    threads: int = 2
    seed: int = 0
    work_limit: float = 10.0
    max_nodes: int = 20_000


@dataclass
class SolveStats:
    """What one solver call did; printed in the report's per-stage table."""

    stage: str
    solver: str
    status: str
    objective: float | None = None
    bound: float | None = None
    time_s: float = 0.0
    variables: int = 0
    constraints: int = 0
    iterations: int = 0
    note: str = ""
    stopped_by: str = ""
    """Why the solve ended before proving its answer: "" (it did not), STOPPED_BY_WORK or STOPPED_BY_TIME."""

    @property
    def gap(self) -> float | None:
        if self.objective is None or self.bound is None:
            return None
        if abs(self.objective) < ZERO_OBJECTIVE:
            return 0.0
        return max(0.0, (self.objective - self.bound) / abs(self.objective))

    def to_dict(self) -> dict[str, object]:
        return {"stage": self.stage, "solver": self.solver, "status": self.status, "objective": self.objective,
                "bound": self.bound, "gap": self.gap, "time_s": round(self.time_s, 4), "variables": self.variables,
                "constraints": self.constraints, "iterations": self.iterations, "note": self.note,
                "stopped_by": self.stopped_by}


# ---------------------------------------------------------------------------- LP
@dataclass(frozen=True)
class LinearResult:
    objective: float
    values: list[float]
    duals: list[float]


def glop_solver(work_limit: float) -> Any:
    """A GLOP solver stopped by ``work_limit`` deterministic seconds (GLOP is single-threaded and deterministic)."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:  # pragma: no cover - GLOP ships with every ortools wheel
        raise SolverError("OR-Tools GLOP is not available")
    solver.SetSolverSpecificParametersAsString(f"max_deterministic_time: {work_limit!r}")
    return solver


def glop_is_optimal(status: int) -> bool:
    """True when a GLOP ``Solve()`` status says the LP was solved to optimality."""
    from ortools.linear_solver import pywraplp

    return bool(status == pywraplp.Solver.OPTIMAL)


def max_flow_min_cut(tails: Any, heads: Any, capacities: Any, source: int, sink: int,
                     *, what: str = "max-flow") -> tuple[int, list[int]]:
    """Maximum ``source -> sink`` flow over integer-capacity arcs, and the source side of a minimum cut.

    Arcs are given as parallel integer arrays (OR-Tools' ``SimpleMaxFlow``, push-relabel). Returns the
    flow value and the vertices on the source side. A solver failure is a :class:`SolverError` naming
    ``what`` (it cannot happen on valid input: capacities are non-negative and below 2**62).
    """
    from ortools.graph.python import max_flow

    flow = max_flow.SimpleMaxFlow()
    flow.add_arcs_with_capacity(tails, heads, capacities)
    status = flow.solve(source, sink)
    if status != flow.OPTIMAL:
        raise SolverError(f"{what}: OR-Tools max-flow stopped with status {status}")
    return int(flow.optimal_flow()), [int(v) for v in flow.get_source_side_min_cut()]


def solve_lp(objective: Sequence[float], rows: Sequence[tuple[Sequence[tuple[int, float]], str, float]],
             lower: Sequence[float], upper: Sequence[float], *, work_limit: float = 60.0) -> LinearResult:
    """Minimize ``objective . x`` subject to rows ``(terms, sense, rhs)`` with sense in ``<=, =, >=``.

    Solved with GLOP (OR-Tools' primal/dual simplex) within ``work_limit``
    deterministic seconds (:class:`SolverTimeout` beyond). Duals follow the textbook
    sign for a minimization: >= rows have non-negative duals, <= rows non-positive.
    """
    from ortools.linear_solver import pywraplp

    solver = glop_solver(work_limit)
    xs = [solver.NumVar(lo, up if math.isfinite(up) else solver.infinity(), f"x{i}")
          for i, (lo, up) in enumerate(zip(lower, upper, strict=True))]
    cons = []
    for terms, sense, rhs in rows:
        lo, up = {"<=": (-solver.infinity(), rhs), "=": (rhs, rhs), ">=": (rhs, solver.infinity())}[sense]
        ct = solver.Constraint(lo, up)
        for i, coef in terms:
            ct.SetCoefficient(xs[i], coef)
        cons.append(ct)
    obj = solver.Objective()
    for x, coef in zip(xs, objective, strict=True):
        obj.SetCoefficient(x, coef)
    obj.SetMinimization()
    status = solver.Solve()
    if status == pywraplp.Solver.INFEASIBLE:
        raise Infeasible("the routing linear program is infeasible")
    if status != pywraplp.Solver.OPTIMAL:
        raise SolverTimeout(f"GLOP did not reach the LP optimum within {work_limit:g} deterministic seconds "
                            f"(status {status})")
    return LinearResult(objective=obj.Value(), values=[x.solution_value() for x in xs],
                        duals=[ct.dual_value() for ct in cons])


# ------------------------------------------------------------------ integer master
@dataclass
class IntegerProgram:
    """min c.x, rows (terms, sense, rhs), integer bounds per variable; ``is_int[i]`` marks integers."""

    names: list[str] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    is_int: list[bool] = field(default_factory=list)
    objective: list[float] = field(default_factory=list)
    rows: list[tuple[list[tuple[int, float]], str, float, str]] = field(default_factory=list)
    hint: dict[int, float] = field(default_factory=dict)

    def var(self, name: str, lower: float, upper: float, *, integer: bool, cost: float = 0.0) -> int:
        self.names.append(name)
        self.lower.append(lower)
        self.upper.append(upper)
        self.is_int.append(integer)
        self.objective.append(cost)
        return len(self.names) - 1

    def add(self, terms: list[tuple[int, float]], sense: str, rhs: float, name: str) -> None:
        self.rows.append((terms, sense, rhs, name))


def solve_integer_program(program: IntegerProgram, config: SolverConfig, stage: str,
                          scale: float = 1e3) -> tuple[list[float], SolveStats]:
    """Solve with CP-SAT (``cpsat``) or any PuLP solver by name (``cbc``, ``gurobi``, ``cplex``...).

    CP-SAT needs integer data: continuous variables and coefficients are scaled by
    ``scale`` and rounded (the stats note the resolution). Returns the values and stats.
    """
    started = time.perf_counter()
    if config.solver.strip().lower() in _CPSAT_NAMES:
        values, stats = _solve_cpsat(program, config, stage, scale)
    else:
        values, stats = _solve_pulp(program, config, stage)
    stats.time_s = time.perf_counter() - started
    stats.variables = len(program.names)
    stats.constraints = len(program.rows)
    return values, stats


def solve_cpsat_interruptibly(solver: Any, model: Any) -> Any:
    """``solver.solve(model)`` that Ctrl-C stops at once with :class:`KeyboardInterrupt`.

    CP-SAT's own SIGINT handling would end the search quietly (the caller would
    carry on with the incumbent) and then leave SIGINT at its default, killing
    the process on the next Ctrl-C without a word. Instead the solve runs in a
    worker thread (CP-SAT releases the GIL) while the main thread waits; a
    Ctrl-C there stops the search and propagates.
    """
    solver.parameters.catch_sigint_signal = False
    outcome: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(solver.solve(model))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=run, name="cp-sat", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        solver.stop_search()
        worker.join()
        raise
    if failure:
        raise failure[0]
    return outcome[0]


_COEFFICIENT_SCALE = 1e3
"""CP-SAT takes integer coefficients: rows and objective are multiplied by this (and the row's ``scale``)
before rounding, so three more decimal digits survive. A scale factor, not a unit conversion."""


def _solve_cpsat(program: IntegerProgram, config: SolverConfig, stage: str,
                 scale: float) -> tuple[list[float], SolveStats]:
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    factor = [1.0 if integer else scale for integer in program.is_int]
    xs = []
    for i, name in enumerate(program.names):
        lo = math.floor(program.lower[i] * factor[i])
        up = math.ceil(program.upper[i] * factor[i]) if math.isfinite(program.upper[i]) else 2**40
        xs.append(model.new_int_var(lo, up, name))
    for terms, sense, rhs, _ in program.rows:
        # row: sum coef * x_real (x_real = x_int / factor) sense rhs; multiply through by `scale`
        expr = sum(round(coef * scale / factor[i] * _COEFFICIENT_SCALE) * xs[i] for i, coef in terms)
        bound = round(rhs * scale * _COEFFICIENT_SCALE)
        if sense == "<=":
            model.add(expr <= bound)
        elif sense == ">=":
            model.add(expr >= bound)
        else:
            model.add(expr == bound)
    model.minimize(sum(round(c * _COEFFICIENT_SCALE / factor[i] * scale) * xs[i] for i, c in enumerate(program.objective) if c))
    for i, value in program.hint.items():
        model.add_hint(xs[i], round(value * factor[i]))
    solver = cpsat_solver(config)
    status = solve_cpsat_interruptibly(solver, model)
    name = solver.status_name(status)
    if status == cp_model.INFEASIBLE:
        raise Infeasible(f"{stage}: no integer solution exists (CP-SAT proved it)")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SolverTimeout(f"{stage}: CP-SAT found no solution within its budget ({config.work_limit:g} "
                            f"deterministic s, {config.time_limit_s:g} s wall)")
    norm = scale * _COEFFICIENT_SCALE
    stats = SolveStats(stage=stage, solver="CP-SAT", status=name.lower(), objective=solver.objective_value / norm,
                       bound=solver.best_objective_bound / norm, stopped_by=cpsat_stop_reason(solver, status, config),
                       note=f"continuous values at resolution 1/{scale:g}")
    return [solver.value(x) / factor[i] for i, x in enumerate(xs)], stats


def cpsat_model() -> Any:
    """An empty CP-SAT model, for encodings that build their constraints directly (scheduling)."""
    from ortools.sat.python import cp_model

    return cp_model.CpModel()


def cpsat_found_solution(status: int) -> bool:
    """True when a CP-SAT status carries a solution (optimal or feasible)."""
    from ortools.sat.python import cp_model

    return status in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def cpsat_solver(config: SolverConfig) -> Any:
    """A CP-SAT solver with the deterministic budget, the wall-clock guard and the seed, on one worker.

    One worker: CP-SAT's parallel portfolio shares solutions at moments that
    depend on thread timing, so it is not reproducible; its interleaved mode is,
    but on the scheduling model it reached worse makespans in the same wall time
    (measured on dgx-a100x2 Allgather 4 MB: 30.0 us after 17 s against 21.6 us after 20 s for one worker).
    """
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = config.work_limit
    solver.parameters.max_time_in_seconds = config.time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = config.seed
    return solver


def cpsat_stop_reason(solver: Any, status: int, config: SolverConfig) -> str:
    """"" when CP-SAT proved its answer, else which limit stopped it (the deterministic one or the wall clock)."""
    from ortools.sat.python import cp_model

    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        return ""
    if solver.wall_time >= config.time_limit_s * 0.999 and solver.deterministic_time < config.work_limit * 0.999:
        return STOPPED_BY_TIME
    return STOPPED_BY_WORK


_CPSAT_NAMES = ("cpsat", "cp-sat", "ortools")


def pulp_solver_name(name: str) -> str:
    """PuLP's name of the MILP solver ``name`` (``cbc``, ``gurobi``, ``cplex``...), if it is installed here.

    Raises :class:`InputError` (bad input, exit status 2) listing the available ones otherwise; the CLI
    calls it before any work so a misspelt ``--solver`` fails at once.
    """
    import pulp

    wanted = name.strip().lower()
    if wanted in ("cbc", "pulp_cbc", "pulp_cbc_cmd"):
        return "PULP_CBC_CMD"
    available = {s.upper(): s for s in pulp.listSolvers(onlyAvailable=True)}
    key = next((v for k, v in available.items() if wanted and wanted.upper() in k), None)
    if key is None:
        raise InputError(f"solver {name!r} is not available to PuLP here (available: "
                         f"{', '.join(sorted(available.values()))}, or cpsat)")
    return key


def check_solver(name: str) -> None:
    """Raise :class:`InputError` unless ``name`` is CP-SAT or a PuLP solver installed here."""
    if name.strip().lower() not in _CPSAT_NAMES:
        pulp_solver_name(name)


def _solve_pulp(program: IntegerProgram, config: SolverConfig, stage: str) -> tuple[list[float], SolveStats]:
    import pulp

    prob = pulp.LpProblem(stage.replace(" ", "_"), pulp.LpMinimize)
    xs = []
    for i, name in enumerate(program.names):
        up = program.upper[i] if math.isfinite(program.upper[i]) else None
        xs.append(prob.add_variable(name, program.lower[i], up,
                                    cat=pulp.LpInteger if program.is_int[i] else pulp.LpContinuous))
    prob += pulp.lpSum(c * xs[i] for i, c in enumerate(program.objective) if c)
    for terms, sense, rhs, rname in program.rows:
        expr = pulp.lpSum(coef * xs[i] for i, coef in terms)
        prob += (expr <= rhs if sense == "<=" else expr >= rhs if sense == ">=" else expr == rhs), rname
    for i, value in program.hint.items():
        xs[i].setInitialValue(value)
    kwargs = {"msg": False, "timeLimit": config.time_limit_s}
    key = pulp_solver_name(config.solver)
    cbc = key == "PULP_CBC_CMD"
    started = time.perf_counter()
    if cbc:
        with warnings.catch_warnings():  # PuLP 3 deprecates its bundled CBC in favour of a separate install
            warnings.simplefilter("ignore", DeprecationWarning)
            # one thread: CBC's parallel tree search is not deterministic; the node budget is
            solver = pulp.PULP_CBC_CMD(threads=1, maxNodes=config.max_nodes,
                                       options=[f"randomSeed {config.seed}", f"randomCbcSeed {config.seed}"],
                                       **kwargs)
    else:
        solver_class = getattr(pulp, key, None)
        takes_threads = solver_class is not None and "threads" in inspect.signature(solver_class.__init__).parameters
        solver = pulp.getSolver(key, **kwargs, **({"threads": config.threads} if takes_threads else {}))
    status = prob.solve(solver)
    elapsed = time.perf_counter() - started
    status_name = pulp.LpStatus.get(status, str(status)).lower()
    if status == pulp.LpStatusInfeasible:
        raise Infeasible(f"{stage}: no integer solution exists ({config.solver} proved it)")
    if any(x.varValue is None for x in xs):
        raise SolverTimeout(f"{stage}: {config.solver} found no solution within {config.time_limit_s:g} s")
    objective = pulp.value(prob.objective)
    bound = getattr(prob, "bestBound", None)
    # CBC's node budget is deterministic; any other solver here has only the wall clock
    if elapsed >= config.time_limit_s * 0.999:
        stopped_by = STOPPED_BY_TIME
    elif status_name == "optimal":
        stopped_by = ""
    else:
        stopped_by = STOPPED_BY_WORK if cbc else STOPPED_BY_TIME
    stats = SolveStats(stage=stage, solver=config.solver.upper(), status=status_name,
                       objective=float(objective) if objective is not None else None,
                       bound=float(bound) if bound is not None else (float(objective) if status_name == "optimal"
                                                                      and objective is not None else None),
                       stopped_by=stopped_by)
    return [float(x.varValue) for x in xs], stats
