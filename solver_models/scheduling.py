"""Scheduling and contiguity: exact send times for fixed routes, as a CP-SAT model in integer ticks.

Each task's bytes occupy every link of its route for ``bytes / bandwidth``
(no-overlap per link); it may start once the task that brings its chunk has
arrived, plus the route latency, and a connection sends one message after
another in the greedy order (the simulator's FIFO rule). Consecutive tasks of one connection whose
chunks are contiguous may be *merged* into one message (alpha + k * beta): the
second then rides the first's latency, its bytes follow immediately, and both
arrive when the message ends; its chunk must be at the sender when the message
starts. The greedy order is the hint; the objective is the makespan. The solve
stops on ``config.work_limit`` deterministic seconds (the same answer on every
machine), with ``config.time_limit_s`` as the wall-clock guard.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from solver_models._backend import (
    SolverConfig,
    SolveStats,
    cpsat_found_solution,
    cpsat_model,
    cpsat_solver,
    cpsat_stop_reason,
    solve_cpsat_interruptibly,
)
from solver_models.ordering import Task, TaskTiming

__all__ = ["ScheduledTasks", "merge_candidates", "schedule_tasks"]


@dataclass(frozen=True)
class ScheduledTasks:
    """Start times and the message each task belongs to (``group[i]`` = first task of its message)."""

    start_us: list[float]
    group: list[int]
    makespan_us: float


def merge_candidates(tasks: Sequence[Task], order: Sequence[int]) -> list[tuple[int, int]]:
    """Pairs (i, j): j directly follows i on the same connection and their chunks are contiguous."""
    last: dict[tuple[int, int], int] = {}
    pairs = []
    for i in order:
        t = tasks[i]
        key = (t.src, t.dst)
        prev = last.get(key)
        if prev is not None:
            p = tasks[prev]
            if (p.reduce == t.reduce and p.route == t.route and max(p.chunks) + 1 == min(t.chunks)
                    and len(p.chunks) == max(p.chunks) - min(p.chunks) + 1):
                pairs.append((prev, i))
        last[key] = i
    return pairs


def schedule_tasks(tasks: Sequence[Task], num_links: int, hint: TaskTiming, config: SolverConfig,
                   *, allow_merge: bool, resolution: int = 20000) -> tuple[ScheduledTasks, SolveStats]:
    """Solve the timing model; fall back to the hint's times if CP-SAT finds nothing better."""
    started = time.perf_counter()
    n = len(tasks)
    horizon_us = max(hint.makespan_us, 1e-9)
    tick = horizon_us / resolution
    dur = [max(1, math.ceil(t.duration_us / tick)) for t in tasks]
    lat = [round(t.latency_us / tick) for t in tasks]
    horizon = int(sum(dur) + sum(lat) + resolution * 2)
    model = cpsat_model()
    begin = [model.new_int_var(0, horizon, f"bytes_start_{i}") for i in range(n)]
    send = [model.new_int_var(0, horizon, f"send_{i}") for i in range(n)]
    arrive = [model.new_int_var(0, horizon, f"arrive_{i}") for i in range(n)]
    intervals = [model.new_interval_var(begin[i], dur[i], begin[i] + dur[i], f"bytes_{i}") for i in range(n)]
    per_link: list[list[int]] = [[] for _ in range(num_links)]
    for i, t in enumerate(tasks):
        for link in t.route:
            per_link[link].append(i)
        model.add(arrive[i] >= begin[i] + dur[i])
        if t.pred >= 0:
            model.add(send[i] >= arrive[t.pred])
    for members in per_link:
        if len(members) > 1:
            model.add_no_overlap([intervals[i] for i in members])
    merged_with: dict[int, Any] = {}  # CP-SAT boolean variables
    # ties in start time go by chunk id, so chunks that could travel together are adjacent
    order = sorted(range(n), key=lambda i: (round(hint.start_us[i], 9), min(tasks[i].chunks), i))
    pairs = merge_candidates(tasks, order) if allow_merge else []
    mergeable = set(pairs)
    # a connection sends one message after another (the simulator's FIFO rule), in the hint's order
    last: dict[tuple[int, int], int] = {}
    fifo: list[tuple[int, int]] = []
    for j in order:
        key = (tasks[j].src, tasks[j].dst)
        if key in last:
            fifo.append((last[key], j))
        last[key] = j
    for i, j in pairs:
        m = model.new_bool_var(f"merge_{i}_{j}")
        merged_with[j] = m
        model.add(send[j] == send[i]).only_enforce_if(m)
        model.add(begin[j] == begin[i] + dur[i]).only_enforce_if(m)
        model.add(arrive[i] >= arrive[j]).only_enforce_if(m)
        model.add(begin[j] >= send[j] + lat[j]).only_enforce_if(m.negated())
    for i in range(n):
        if i not in merged_with:
            model.add(begin[i] >= send[i] + lat[i])
    for i, j in fifo:
        if (i, j) in mergeable:
            model.add(send[j] >= arrive[i]).only_enforce_if(merged_with[j].negated())
        else:
            model.add(send[j] >= arrive[i])
    makespan = model.new_int_var(0, horizon, "makespan")
    model.add_max_equality(makespan, arrive)
    model.minimize(makespan)
    for i in range(n):
        s = round(hint.start_us[i] / tick)
        model.add_hint(send[i], s)
    for m in merged_with.values():
        model.add_hint(m, 0)
    solver = cpsat_solver(config)
    status = solve_cpsat_interruptibly(solver, model)
    stats = SolveStats(stage="scheduling + contiguity", solver="CP-SAT", status=solver.status_name(status).lower(),
                       time_s=time.perf_counter() - started, variables=3 * n + len(merged_with),
                       constraints=len(pairs) + n, stopped_by=cpsat_stop_reason(solver, status, config),
                       note=f"tick {tick:.4g} us; {len(pairs)} merge candidates")
    if not cpsat_found_solution(status):
        return ScheduledTasks(list(hint.start_us), list(range(n)), hint.makespan_us), stats
    stats.objective = solver.objective_value * tick
    stats.bound = solver.best_objective_bound * tick
    group = list(range(n))
    for i, j in pairs:
        if solver.value(merged_with[j]):
            group[j] = group[i]
    starts = [solver.value(send[i]) * tick for i in range(n)]
    return ScheduledTasks(starts, group, solver.value(makespan) * tick), stats
