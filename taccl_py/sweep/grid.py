"""A sweep grid (topologies x collectives x sizes x tasks) as jobs, and the job function that runs one.

Tasks: ``synthesize`` (the synthesizer's algorithm, as ``taccl synthesize`` makes it, with the bound) and
``baselines`` (every applicable NCCL-style baseline, as ``taccl baseline`` times it, with the bound). A
job's result holds only what the same inputs reproduce; wall-clock seconds go to ``measured``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from taccl_py.errors import InputError
from taccl_py.sweep.runner import Job
from taccl_py.units import algbw_gbps

__all__ = ["SweepJob", "SweepOptions", "SweepTask", "as_job", "grid_jobs", "run_sweep_job", "thin_sizes"]


class SweepTask(StrEnum):
    SYNTHESIZE = "synthesize"
    BASELINES = "baselines"


@dataclass(frozen=True)
class SweepOptions:
    """Solver settings shared by the synthesize jobs (part of every job's key: change one, new jobs)."""

    time_limit_s: float = 60.0
    threads: int = 1
    seed: int = 0
    solver: str = "cpsat"


@dataclass(frozen=True)
class SweepJob:
    """One point of the grid; ``keep_schedule`` also returns the schedule (JSON form) in the result."""

    task: SweepTask
    topology: str
    collective: str
    size_bytes: int
    options: SweepOptions
    keep_schedule: bool = False

    @property
    def key(self) -> str:
        o = self.options
        tail = f"tl={o.time_limit_s:g},threads={o.threads},seed={o.seed},solver={o.solver}" \
            if self.task is SweepTask.SYNTHESIZE else "-"
        keep = "|schedule" if self.keep_schedule else ""
        return f"{self.task.value}|{self.topology}|{self.collective}|{self.size_bytes}|{tail}{keep}"

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"task": self.task.value, "topology": self.topology, "collective": self.collective,
                               "size_bytes": self.size_bytes}
        if self.task is SweepTask.SYNTHESIZE:
            out["options"] = asdict(self.options)
        return out


def thin_sizes(sizes: Sequence[int], step: int) -> list[int]:
    """Every size at least ``step`` times the previous one kept (the first and last always kept)."""
    if step < 1 or step & (step - 1):
        raise InputError(f"must be a power of two: 1, 2, 4, 8... (got {step})", where="--size-step")
    if step == 1 or len(sizes) <= 2:
        return list(sizes)
    kept = [sizes[0]]
    for size in sizes[1:-1]:
        if size >= kept[-1] * step:
            kept.append(size)
    return [*kept, sizes[-1]]


def as_job(job: SweepJob) -> Job:
    """The runner's job for one grid point (a synthesize job occupies its solver threads)."""
    return Job(job.key, job, job.describe(), cpus=job.options.threads if job.task is SweepTask.SYNTHESIZE else 1)


def grid_jobs(topologies: Sequence[str], collectives: Sequence[str], sizes: Sequence[int],
              tasks: Sequence[SweepTask], options: SweepOptions) -> list[Job]:
    """The jobs of a grid, in grid order (topology, collective, size, task)."""
    return [as_job(SweepJob(task, topology, collective, size, options))
            for topology in topologies for collective in collectives for size in sizes for task in tasks]


def _bound(topology: Any, kind: Any, size: int) -> float:
    from taccl_py.bounds import lower_bound

    return lower_bound(topology, kind, size).bound_us


def _algbw(size: int, time_us: float | None) -> float | None:
    return None if not time_us else algbw_gbps(size, time_us)


def _synthesize(job: SweepJob) -> tuple[dict[str, Any], dict[str, Any]]:
    from taccl_py.collectives import parse_collective
    from taccl_py.library import resolve_topology
    from taccl_py.synthesis import SynthesisOptions, synthesize

    topology = resolve_topology(job.topology)
    kind = parse_collective(job.collective)
    o = job.options
    result = synthesize(topology, kind, job.size_bytes, SynthesisOptions(
        solver=o.solver, time_limit_s=o.time_limit_s, threads=o.threads, seed=o.seed))
    bound = _bound(topology, kind, job.size_bytes)
    time_us = result.sim.time_us
    synthesized = result.synthesized.time_us if result.synthesized else None
    out: dict[str, Any] = {
        "gpus": topology.num_gpus, "correct": result.sim.correct, "algorithm": result.chosen,
        "time_us": time_us, "algbw_GBps": result.sim.algbw_GBps, "busbw_GBps": result.sim.busbw_GBps,
        "synthesized_time_us": synthesized, "bound_us": bound,
        "efficiency": bound / time_us if time_us else None,
        "chunk_factor": result.schedule.collective.chunk_factor, "transfers": len(result.schedule.transfers),
        "baselines_us": dict(sorted(result.baselines.items())), "notes": list(result.notes)}
    if job.keep_schedule:
        from taccl_py.schedule import schedule_to_dict

        out["schedule"] = schedule_to_dict(result.schedule, topology)
    return out, {"synthesis_s": round(result.synthesis_s, 3)}


def _baselines(job: SweepJob) -> tuple[dict[str, Any], dict[str, Any]]:
    from taccl_py.baselines import applicable_baselines, baseline
    from taccl_py.collectives import parse_collective
    from taccl_py.library import resolve_topology
    from taccl_py.simulator import simulate

    topology = resolve_topology(job.topology)
    kind = parse_collective(job.collective)
    times: dict[str, float | None] = {}
    for name in applicable_baselines(topology, kind):
        schedule = baseline(topology, kind, name, size_bytes=job.size_bytes)
        times[name] = simulate(topology, schedule, job.size_bytes).time_us
    timed = {name: t for name, t in times.items() if t is not None}
    best = min(timed, key=lambda name: (timed[name], name)) if timed else None
    return {"gpus": topology.num_gpus, "bound_us": _bound(topology, kind, job.size_bytes), "baselines_us": times,
            "best": best, "best_time_us": timed.get(best) if best else None,
            "best_algbw_GBps": _algbw(job.size_bytes, timed.get(best) if best else None)}, {}


def run_sweep_job(job: SweepJob) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job function of a sweep (module level: workers import it by name)."""
    if job.task is SweepTask.SYNTHESIZE:
        return _synthesize(job)
    return _baselines(job)
