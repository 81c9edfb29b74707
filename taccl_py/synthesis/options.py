"""What every synthesis stage shares: the options, the solver settings, progress and the wall clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from solver_models._backend import SolverConfig
from taccl_py.sketch import Sketch

__all__ = ["ProgressFn", "Run", "SynthesisOptions"]

ProgressFn = Callable[[str, dict[str, Any]], None]
"""``progress(stage, info)``: called at every stage boundary (the CLI's live status line)."""


@dataclass(frozen=True)
class SynthesisOptions:
    """Solver control and search breadth. ``chunk_factors=None`` picks them from the size."""

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


@dataclass(frozen=True)
class Run:
    """One synthesis run: options, solver settings, the progress callback and when it started."""

    options: SynthesisOptions
    config: SolverConfig
    progress: ProgressFn
    started: float

    @staticmethod
    def start(options: SynthesisOptions, progress: ProgressFn | None) -> Run:
        config = SolverConfig(options.solver, options.time_limit_s, options.threads, options.seed)
        return Run(options, config, progress or _quiet, time.perf_counter())

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def remaining_s(self) -> float:
        """Wall-clock seconds left of ``time_limit_s`` (at least 1, so a late stage still gets a try)."""
        return max(1.0, self.options.time_limit_s - self.elapsed_s())

    def report(self, stage: str, **info: Any) -> None:
        self.progress(stage, {"elapsed_s": self.elapsed_s(), **info})


def _quiet(stage: str, info: dict[str, Any]) -> None:
    """The default progress callback: says nothing."""
