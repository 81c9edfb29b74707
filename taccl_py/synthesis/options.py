"""What every synthesis stage shares: the options, the work budgets, progress and the wall clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from solver_models._backend import SolverConfig
from solver_models.routing import ColumnBudget
from taccl_py.endpoint import EndpointMode
from taccl_py.msccl.selection import DEFAULT_TYPE_SIZE
from taccl_py.simulator import SimOptions
from taccl_py.sketch import Sketch
from taccl_py.topology import Topology

__all__ = ["STAGES", "ProgressFn", "Run", "SynthesisOptions", "WorkBudget"]

ProgressFn = Callable[[str, dict[str, Any]], None]
"""``progress(stage, info)``: called at every stage boundary (the CLI's live status line)."""

STAGES = ("prepare", "routing", "ordering", "scheduling", "simulate", "baselines")
"""The stages whose wall time :class:`Run` measures, in pipeline order."""

SCHEDULING_WORK_PER_WALL_S = 0.035
"""CP-SAT deterministic seconds per wall second of the one-worker scheduling search, measured on a
2-core AMD EPYC under load (about 0.3 in 10 s); it turns the former wall-clock shares into work."""

MASTER_WORK_PER_WALL_S = 0.13
"""The same for the routing integer master, whose search counts work faster (about 2 deterministic
seconds in 6.5 s on mi250x2 with 32 pieces, where more work found nothing better)."""


@dataclass(frozen=True)
class WorkBudget:
    """Deterministic budgets of the solver stages: the same work, hence the same answer, on any machine.

    ``column_rounds`` and ``column_work`` (estimated seconds of pricing) stop the
    routing column generation of each direction; ``master_work`` (CP-SAT
    deterministic seconds) or ``master_nodes`` (CBC) the routing integer master of
    each chunk factor; ``scheduling_work`` (CP-SAT deterministic seconds) each
    scheduling solve.
    """

    column_rounds: int = 200
    column_work: float = 15.0
    master_work: float = 1.95
    master_nodes: int = 20_000
    scheduling_work: float = 0.35

    @staticmethod
    def for_time_limit(time_limit_s: float) -> WorkBudget:
        """The shares of ``time_limit_s`` the stages used to get on the wall clock, as work.

        Column generation: a quarter of it (at least 2 s); the integer master
        a quarter (at most 30 s); each scheduling solve a sixth (at least 2 s),
        converted with :data:`MASTER_WORK_PER_WALL_S` and
        :data:`SCHEDULING_WORK_PER_WALL_S`. At the default 60 s: 15 estimated
        seconds, 1.95 and 0.35 deterministic seconds.
        """
        return WorkBudget(column_work=max(2.0, time_limit_s / 4),
                          master_work=round(min(30.0, time_limit_s / 4) * MASTER_WORK_PER_WALL_S, 6),
                          scheduling_work=round(max(2.0, time_limit_s / 6) * SCHEDULING_WORK_PER_WALL_S, 6))


@dataclass(frozen=True)
class SynthesisOptions:
    """Solver control and search breadth. ``chunk_factors=None`` picks them from the size.

    ``time_limit_s`` is the wall-clock guard of the whole synthesis; ``budget``
    the deterministic work of each solver stage (None: derived from
    ``time_limit_s`` by :meth:`WorkBudget.for_time_limit`).
    """

    sketch: Sketch | None = None
    solver: str = "cpsat"
    time_limit_s: float = 60.0
    threads: int = 2
    seed: int = 0
    chunk_factors: tuple[int, ...] | None = None
    max_cpsat_tasks: int = 1200
    channels: int = 2
    max_list_tasks: int = 3000
    max_steps_per_rank: int = 3600
    max_steps_per_threadblock: int = 56
    max_multi_order_transfers: int = 50_000
    compare_baselines: bool = True
    root: int = 0
    budget: WorkBudget | None = None
    element_bytes: int = DEFAULT_TYPE_SIZE
    """Bytes per element of the calls the XML will serve (nccl-tests' float: 4); chunk factors are chosen so
    the runtime selects the file at the synthesized size."""
    instances: int = 1
    """The XML will replicate the schedule over this many channels (``--instances``): it multiplies
    ``nchunksperloop`` and the steps per rank."""
    multidim_shortcut: bool = True
    """On a topology with dimensions, skip the solver stages when ``hier-lb`` is modelled near the bound
    (:mod:`taccl_py.synthesis.multidim`)."""
    endpoint: EndpointMode = EndpointMode.GPU
    """Who drives the collective at the GPUs (``--endpoint``): where the topology declares endpoint limits
    (memory, channels), routing and ordering count them in this mode and every candidate and baseline is
    simulated with them (:mod:`taccl_py.synthesis.endpoint`). Without limits the mode changes nothing."""
    endpoint_aware: bool = True
    """Route, order, pipeline and spread over channels counting the endpoint limits; False: only simulate with
    them (the synthesizer before it knew the endpoint, for comparison)."""

    @property
    def work(self) -> WorkBudget:
        return self.budget or WorkBudget.for_time_limit(self.time_limit_s)


@dataclass(frozen=True)
class Run:
    """One synthesis run: options, the progress callback, when it started and the wall time of each stage.

    ``stages_s`` is filled as stages run (the only mutable part).
    """

    options: SynthesisOptions
    progress: ProgressFn
    started: float
    stages_s: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def start(options: SynthesisOptions, progress: ProgressFn | None) -> Run:
        return Run(options, progress or _quiet, time.perf_counter())

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def remaining_s(self) -> float:
        """Wall-clock seconds left of ``time_limit_s`` (may be negative)."""
        return self.options.time_limit_s - self.elapsed_s()

    def out_of_time(self) -> bool:
        """Less than a second is left: the guard stops further candidates."""
        return self.remaining_s() <= 1.0

    def solver_config(self, work_limit: float) -> SolverConfig:
        """Solver settings for one solve: its deterministic budget, the time left as the wall-clock guard."""
        o = self.options
        return SolverConfig(o.solver, max(1.0, self.remaining_s()), o.threads, o.seed, work_limit=work_limit,
                            max_nodes=o.work.master_nodes)

    def knows_endpoint(self, topology: Topology) -> bool:
        """Do the synthesis stages count ``topology``'s endpoint limits (it declares some, and the options ask)?"""
        return self.options.endpoint_aware and topology.has_endpoint_limits

    @property
    def sim_options(self) -> SimOptions:
        """How candidates and baselines are simulated: with the endpoint mode of the options."""
        return SimOptions(endpoint=self.options.endpoint)

    def column_budget(self) -> ColumnBudget:
        work = self.options.work
        return ColumnBudget(max_rounds=work.column_rounds, work_limit=work.column_work,
                            time_limit_s=max(1.0, self.remaining_s()))

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the wall time of the block to stage ``name``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.stages_s[name] = self.stages_s.get(name, 0.0) + time.perf_counter() - started

    def report(self, stage: str, **info: Any) -> None:
        self.progress(stage, {"elapsed_s": self.elapsed_s(), **info})


def _quiet(stage: str, info: dict[str, Any]) -> None:
    """The default progress callback: says nothing."""

