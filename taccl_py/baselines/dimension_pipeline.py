"""When the phases of a hierarchical collective run: an event model of the dimensions, and the order mix.

Every split of a hierarchical collective goes through its phases in order, one dimension per phase
(:mod:`taccl_py.baselines.hierarchical`). Along one dimension all groups run the same phase at once,
so the dimension behaves like one server: a phase's steps each wait their latency, then move their
bytes. A dimension has ``channels`` *slots* (MSCCL channels, each a FIFO connection between the same
GPUs): a phase occupies one slot from its start until its last step arrives, and the phases whose
bytes are moving at the same moment share the dimension's links equally (max-min fair sharing gives
every flow of every phase the same rate when the phases have the same shape). With one slot a
dimension runs one phase at a time; with two, the next phase waits its latency while the current one
still moves bytes, so a high-latency dimension stays busy.

:func:`run_pipeline` plays that model: whenever a slot is free it starts the waiting phase of highest
priority, and it returns the program (the order in which phases start, with their slots) and the
makespan. With symmetric groups, no relays and per-dimension algorithms whose steps keep to the same
connections (ring, bidirectional ring, direct), the simulator gives exactly this makespan for the
schedule emitted in this program order (tested).

:func:`order_mix` is the fluid limit: the fractions of the data that should take each dimension order so
that the busiest dimension moves the least (a linear program; latency ignored). On the networks of
issue 10 it meets the lower bound exactly (docs/simulator.md).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from taccl_py.errors import SolverError

__all__ = ["PhaseRun", "PhaseWork", "Pipeline", "order_mix", "orders_for_splits", "run_pipeline"]

_DONE = 1e-9
"""A step whose bytes left are below this fraction of its bytes has arrived (float noise of the rates)."""


@dataclass(frozen=True)
class PhaseWork:
    """One phase of one split as the model sees it: its dimension and per step (latency us, bytes us at the
    dimension's full rate)."""

    dim: int
    steps: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class PhaseRun:
    """One entry of the program: phase ``phase`` of split ``split`` starts on slot ``slot`` at ``start_us``."""

    split: int
    phase: int
    slot: int
    start_us: float


@dataclass(frozen=True)
class Pipeline:
    """The program in start order and the estimated makespan."""

    program: tuple[PhaseRun, ...]
    makespan_us: float
    busy_us: Mapping[int, float] = field(default_factory=dict)
    """Per dimension, the time during which some phase moved bytes on it."""


class _Job:
    """A phase being played: its split, its slot, its steps and the step it is in."""

    __slots__ = ("slot", "split", "step", "steps")

    def __init__(self, split: int, slot: int, steps: tuple[tuple[float, float], ...]) -> None:
        self.split, self.slot, self.steps, self.step = split, slot, steps, 0

    def step_work(self) -> float:
        return self.steps[self.step][1]


class _Dimension:
    """One dimension as a processor-sharing server (the moving phases share its rate equally).

    Work is kept in *virtual* time: ``virtual`` grows at rate 1/m while m phases move bytes, so a step
    of w us of bytes that starts moving at virtual time v ends when ``virtual`` reaches v + w.
    """

    def __init__(self, slots: int) -> None:
        self.free = list(range(max(1, slots)))
        self.waiting: list[tuple[tuple[float, ...], int]] = []
        self.latent: list[tuple[float, int, _Job]] = []
        self.moving: list[tuple[float, int, _Job]] = []
        self.virtual = 0.0
        self.last = 0.0
        self.busy = 0.0

    def next_event(self) -> float:
        upcoming = self.latent[0][0] if self.latent else math.inf
        if self.moving:
            upcoming = min(upcoming, self.last + max(self.moving[0][0] - self.virtual, 0.0) * len(self.moving))
        return upcoming

    def advance(self, now: float) -> None:
        if self.moving:
            self.virtual += (now - self.last) / len(self.moving)
            self.busy += now - self.last
        self.last = now


def run_pipeline(work: Sequence[Sequence[PhaseWork]], channels: Mapping[int, int],
                 priority: Callable[[int, int], tuple[float, ...]]) -> Pipeline:
    """Play the phases of every split through the dimensions; see the module doc.

    ``work[s]`` lists split s's phases in order; ``channels[d]`` is the number of slots of dimension d
    (default 1); ``priority(s, k)`` orders the waiting phases (lowest first; ties go to the lower split).
    """
    dims = {d: _Dimension(channels.get(d, 1)) for d in sorted({p.dim for phases in work for p in phases})}
    next_phase = [0] * len(work)
    for s, phases in enumerate(work):
        if phases:
            heapq.heappush(dims[phases[0].dim].waiting, (priority(s, 0), s))
    left_to_run = sum(len(p) for p in work)
    program: list[PhaseRun] = []
    sequence = itertools.count()
    now = 0.0
    while True:
        for dim in dims.values():
            while dim.free and dim.waiting:
                _, s = heapq.heappop(dim.waiting)
                slot = dim.free.pop(0)
                steps = work[s][next_phase[s]].steps
                heapq.heappush(dim.latent, (now + steps[0][0], next(sequence), _Job(s, slot, steps)))
                program.append(PhaseRun(s, next_phase[s], slot, now))
        upcoming = min(dim.next_event() for dim in dims.values())
        if upcoming == math.inf:
            break
        now = upcoming
        for dim in dims.values():
            dim.advance(now)
        for dim in dims.values():
            while dim.latent and dim.latent[0][0] <= now:
                _, order, job = heapq.heappop(dim.latent)
                heapq.heappush(dim.moving, (dim.virtual + job.step_work(), order, job))
            while dim.moving and dim.moving[0][0] - dim.virtual <= _DONE * dim.moving[0][2].step_work():
                _, order, job = heapq.heappop(dim.moving)
                job.step += 1
                if job.step < len(job.steps):
                    heapq.heappush(dim.latent, (now + job.steps[job.step][0], order, job))
                    continue
                s = job.split
                dim.free.append(job.slot)
                dim.free.sort()
                left_to_run -= 1
                k = next_phase[s] = next_phase[s] + 1
                if k < len(work[s]):
                    heapq.heappush(dims[work[s][k].dim].waiting, (priority(s, k), s))
    if left_to_run:  # pragma: no cover - every phase is eventually started and every step ends
        raise SolverError(f"pipeline model stopped with {left_to_run} phases never run")
    return Pipeline(tuple(program), now, {d: dim.busy for d, dim in dims.items()})


# ------------------------------------------------------------------ the mix
Order = tuple[int, ...]


def order_mix(loads: Mapping[Order, Mapping[int, float]]) -> dict[Order, float]:
    """Fractions of the data per dimension order that minimize the busiest dimension's bytes time.

    ``loads[o][d]`` is the time dimension d spends moving bytes when all the data takes order o. A linear
    program (OR-Tools' GLOP): minimize L subject to ``sum_o x_o loads[o][d] <= L`` for every d,
    ``sum_o x_o = 1``, ``x >= 0``. Orders with a share below 1e-9 are left out; the result is
    deterministic for the same loads.
    """
    from ortools.linear_solver import pywraplp

    orders = sorted(loads)
    dims = sorted({d for o in orders for d in loads[o]})
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:  # pragma: no cover - GLOP ships with every ortools wheel
        raise SolverError("OR-Tools GLOP is not available")
    share = [solver.NumVar(0.0, 1.0, f"x{i}") for i in range(len(orders))]
    busiest = solver.NumVar(0.0, solver.infinity(), "busiest")
    solver.Add(solver.Sum(share) == 1.0)
    scale = max((v for o in orders for v in loads[o].values()), default=1.0) or 1.0
    for d in dims:
        solver.Add(solver.Sum([loads[o].get(d, 0.0) / scale * x for o, x in zip(orders, share, strict=True)])
                   <= busiest)
    solver.Minimize(busiest)
    if solver.Solve() != pywraplp.Solver.OPTIMAL:  # pragma: no cover - always feasible and bounded
        raise SolverError("the order-mix linear program was not solved to optimality")
    values = [max(0.0, x.solution_value()) for x in share]
    total = sum(values)
    return {o: v / total for o, v in zip(orders, values, strict=True) if v / total > 1e-9}


def orders_for_splits(mix: Mapping[Order, float], splits: int, loads: Mapping[Order, Mapping[int, float]]
                      ) -> tuple[Order, ...]:
    """``splits`` orders in the proportions of ``mix``, interleaved so that every prefix of the splits keeps
    the proportions as well as whole splits can.

    Each order gets the floor or the ceiling of its share (whole splits); of those roundings that add up to
    ``splits``, the one whose busiest dimension (by ``loads``) moves least is taken, then the one closest
    to the mix. At a few splits this matters: half a split of an order that is cheap in the mix can be a
    whole split that overloads a dimension.
    """
    orders = sorted(mix)
    floor = {o: int(mix[o] * splits) for o in orders}
    dims = sorted({d for o in orders for d in loads[o]})
    best: tuple[tuple[float, float], dict[Order, int]] | None = None
    for extra in itertools.product((0, 1), repeat=len(orders)):
        counts = {o: floor[o] + e for o, e in zip(orders, extra, strict=True)}
        if sum(counts.values()) != splits:
            continue
        busiest = max(sum(counts[o] * loads[o].get(d, 0.0) for o in orders) for d in dims)
        distance = sum(abs(counts[o] - mix[o] * splits) for o in orders)
        key = (busiest, distance)
        if best is None or key < best[0]:
            best = (key, counts)
    if best is None:  # the shares do not add up to one: fill the largest remainders
        counts = dict(floor)
        for o in sorted(orders, key=lambda o: (-(mix[o] * splits - floor[o]), o))[:splits - sum(floor.values())]:
            counts[o] += 1
    else:
        counts = best[1]
    taken = dict.fromkeys(orders, 0)
    out: list[Order] = []
    for s in range(splits):  # the order furthest behind its share of the first s+1 splits goes next
        o = max((o for o in orders if taken[o] < counts[o]),
                key=lambda o: (counts[o] * (s + 1) / splits - taken[o], o))
        taken[o] += 1
        out.append(o)
    return tuple(out)
