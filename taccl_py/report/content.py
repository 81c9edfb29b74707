"""What ``taccl report`` computes: the jobs of a topology's report, and the report assembled from them.

The jobs are sweep jobs (:mod:`taccl_py.sweep`): per collective and size, one ``synthesize`` and one
``baselines`` job, so a report runs on local cores or Ray like a sweep and resumes from a results file.
The synthesize job of one point (the first collective, the middle size) also returns its schedule, which
is simulated again here to draw its timeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from taccl_py.errors import InputError
from taccl_py.library import describe_topology, resolve_topology
from taccl_py.library.describe import TopologyDescription
from taccl_py.plots import (
    SeriesKind,
    TimeSeries,
    algbw_figure,
    figure_bytes,
    timeline_figure,
    topology_figure,
)
from taccl_py.sweep.grid import SweepJob, SweepOptions, SweepTask, as_job
from taccl_py.sweep.runner import Job, JobRecord
from taccl_py.sweep.summary import PointSummary, summarize
from taccl_py.topology import Topology
from taccl_py.units import format_bytes

__all__ = ["CollectiveResult", "Picture", "Report", "ReportRequest", "assemble_report", "report_jobs"]


@dataclass(frozen=True)
class ReportRequest:
    """A report: one topology, its collectives and sizes, the solver settings, the command that asked."""

    topology: str
    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    options: SweepOptions
    command: str = ""

    def __post_init__(self) -> None:
        if not self.collectives or not self.sizes:
            raise InputError("a report needs at least one collective and one size", where="report")

    @property
    def timeline_point(self) -> tuple[str, int]:
        """(collective, size) whose algorithm the timeline shows: the first collective at the middle size."""
        return self.collectives[0], self.sizes[(len(self.sizes) - 1) // 2]


@dataclass(frozen=True)
class Picture:
    """An encoded figure: ``mime`` is image/png or image/svg+xml."""

    title: str
    caption: str
    mime: str
    data: bytes


@dataclass(frozen=True)
class CollectiveResult:
    """One collective over the size range: a row per size, the algbw chart."""

    collective: str
    points: tuple[PointSummary, ...]
    synthesis_s: tuple[float | None, ...]
    chart: Picture


@dataclass(frozen=True)
class Report:
    request: ReportRequest
    topology: Topology
    description: TopologyDescription
    topology_picture: Picture
    collectives: tuple[CollectiveResult, ...]
    timeline: Picture | None
    failures: tuple[str, ...]
    timeline_note: str = ""
    """Why there is no timeline, when there is none."""


def _sweep_job(request: ReportRequest, task: SweepTask, collective: str, size: int) -> SweepJob:
    keep = task is SweepTask.SYNTHESIZE and (collective, size) == request.timeline_point
    return SweepJob(task, request.topology, collective, size, request.options, keep_schedule=keep)


def report_jobs(request: ReportRequest) -> list[Job]:
    """Per collective and size: the synthesize job, then the baselines job."""
    return [as_job(_sweep_job(request, task, collective, size)) for collective in request.collectives
            for size in request.sizes for task in (SweepTask.SYNTHESIZE, SweepTask.BASELINES)]


def _chart(topology: Topology, collective: str, points: Sequence[PointSummary]) -> Picture:
    sizes = tuple(p.size_bytes for p in points)
    series = [TimeSeries("taccl synthesized", SeriesKind.SYNTHESIZED, sizes,
                         tuple(p.synthesized_time_us for p in points))]
    names = sorted({name for p in points for name in p.baselines_us})
    series += [TimeSeries(f"NCCL-style {name}", SeriesKind.BASELINE, sizes,
                          tuple(p.baselines_us.get(name) for p in points)) for name in names]
    series.append(TimeSeries("lower bound", SeriesKind.BOUND, sizes, tuple(p.bound_us for p in points)))
    title = f"{collective} on {topology.name} ({topology.num_gpus} GPUs)"
    figure = algbw_figure(title, series)
    return Picture(title, "algbw = size / time (GB/s of 1e9 bytes) of the synthesized algorithm, every applicable "
                   "NCCL-style baseline and the lower bound; below, efficiency = bound time / time.",
                   "image/svg+xml", figure_bytes(figure, "svg"))


def _timeline(topology: Topology, request: ReportRequest, records: Sequence[JobRecord]) -> tuple[Picture | None,
                                                                                                   str]:
    """The timeline picture of the request's timeline point, or None and why not."""
    from taccl_py.schedule import schedule_from_dict
    from taccl_py.simulator import simulate

    collective, size = request.timeline_point
    key = _sweep_job(request, SweepTask.SYNTHESIZE, collective, size).key
    record = next((r for r in records if r.key == key), None)
    if record is None or record.result is None or "schedule" not in record.result:
        return None, f"the synthesis of {collective} at {format_bytes(size)} did not finish"
    schedule = schedule_from_dict(record.result["schedule"], topology, where=f"schedule of {key}")
    sim = simulate(topology, schedule, size)
    try:
        figure = timeline_figure(topology, schedule, sim)
    except InputError as exc:  # too many bars to draw, or an incorrect schedule
        return None, f"{collective} at {format_bytes(size)}: {exc}"
    title = f"timeline: {record.result.get('algorithm')} {collective}, {format_bytes(size)}"
    return Picture(title, f"Every transfer of the {record.result.get('algorithm')} {collective} algorithm at "
                   f"{format_bytes(size)} ({len(schedule.transfers)} transfers, {sim.time_us:.4g} us): a bar spans "
                   "a transfer's start to its arrival, coloured by chunk; the critical path is outlined in red.",
                   "image/png", figure_bytes(figure, "png")), ""


def assemble_report(request: ReportRequest, records: Sequence[JobRecord]) -> Report:
    """Tables and pictures from the finished jobs (records of the request's jobs, in any order)."""
    topology = resolve_topology(request.topology)
    points = summarize(records)
    seconds = {r.key: r.measured.get("synthesis_s") for r in records}
    sections = []
    for collective in request.collectives:
        mine = tuple(sorted((p for p in points if p.collective == collective), key=lambda p: p.size_bytes))
        synth_s = tuple(seconds.get(_sweep_job(request, SweepTask.SYNTHESIZE, collective, p.size_bytes).key)
                        for p in mine)
        sections.append(CollectiveResult(collective, mine, synth_s, _chart(topology, collective, mine)))
    drawing = Picture(f"topology {topology.name}", "GPUs grouped by machine, switches as squares; links coloured "
                      "by kind, wider when faster, labelled with GB/s per direction where there is room.",
                      "image/png", figure_bytes(topology_figure(topology), "png"))
    failures = tuple(f"{r.key}: {r.error}" for r in records if r.error is not None)
    timeline, why_not = _timeline(topology, request, records)
    return Report(request, topology, describe_topology(topology), drawing, tuple(sections), timeline, failures,
                  why_not)
