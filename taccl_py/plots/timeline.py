"""Gantt timeline of one simulated algorithm: when every transfer is in flight, on which link or rank.

One row per link that carries data (or per sending rank); a bar spans a transfer's start to its arrival
(route latency included), coloured by the chunk it carries; bars that overlap in time on the same row are
stacked in lanes (they share the link's bandwidth). The simulator's critical path, the chain of
transfers that set the finishing time, is outlined in red. Schedules (:func:`timeline_figure`) and MSCCL
programs (:func:`program_timeline_figure`, one bar per send instruction) are drawn the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.collections import PolyCollection
from matplotlib.colors import BoundaryNorm, Colormap, ListedColormap, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from taccl_py.errors import InputError
from taccl_py.plots._files import new_figure
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimResult
from taccl_py.tolerances import SAME_TIME_US
from taccl_py.topology import Route, Topology
from taccl_py.units import format_bytes

__all__ = ["MAX_TIMELINE_BARS", "TimelineRows", "TimelineTransfer", "program_timeline_figure", "timeline_figure",
           "transfers_figure"]

MAX_TIMELINE_BARS = 250_000
"""Beyond this many bars a picture is neither readable nor quick to draw."""
_MAX_LANES = 8
_AUTO_MAX_LINK_ROWS = 48


class TimelineRows(StrEnum):
    """What a row of the timeline is: a directed link, a sending rank, or chosen by size (``auto``)."""

    AUTO = "auto"
    LINK = "link"
    RANK = "rank"


@dataclass(frozen=True)
class TimelineTransfer:
    """One message as the timeline draws it: who sends, along which links, which chunk, when (us)."""

    src: int
    route: Route
    chunk: int
    start_us: float
    arrive_us: float
    critical: bool


def _rows(topology: Topology, transfers: Sequence[TimelineTransfer],
          rows: TimelineRows) -> tuple[list[str], list[tuple[int, int]]]:
    """Row labels and (row, transfer) pairs, rows in link or rank order."""
    if rows is TimelineRows.RANK:
        used_ranks = sorted({t.src for t in transfers})
        rank_row = {r: k for k, r in enumerate(used_ranks)}
        return [f"rank {r}" for r in used_ranks], [(rank_row[t.src], i) for i, t in enumerate(transfers)]
    used_links = sorted({link for t in transfers for link in t.route})
    link_row = {link: k for k, link in enumerate(used_links)}
    labels = [f"{topology.links[link].src}→{topology.links[link].dst}" for link in used_links]
    return labels, [(link_row[link], i) for i, t in enumerate(transfers) for link in t.route]


def _lanes(pairs: Sequence[tuple[int, int]], start: np.ndarray, end: np.ndarray,
           num_rows: int) -> tuple[list[int], list[int]]:
    """A lane per bar so that bars overlapping in time on one row sit side by side; lanes per row."""
    lane = [0] * len(pairs)
    lane_ends: list[list[float]] = [[] for _ in range(num_rows)]
    for k in sorted(range(len(pairs)), key=lambda k: (pairs[k][0], start[pairs[k][1]], pairs[k][1])):
        row, i = pairs[k]
        ends = lane_ends[row]
        free = next((j for j, e in enumerate(ends) if e <= start[i] + SAME_TIME_US), None)
        if free is None:
            if len(ends) < _MAX_LANES:
                free = len(ends)
                ends.append(0.0)
            else:
                free = min(range(len(ends)), key=lambda j: (ends[j], j))
        ends[free] = max(ends[free], float(end[i]))
        lane[k] = free
    return lane, [max(1, len(e)) for e in lane_ends]


def _colours(num_chunks: int) -> tuple[Colormap, Normalize]:
    if num_chunks <= 20:
        cmap: Colormap = ListedColormap(colormaps["tab20"].colors[:num_chunks])  # type: ignore[attr-defined]
        return cmap, BoundaryNorm(np.arange(-0.5, num_chunks + 0.5), cmap.N)
    return colormaps["turbo"], Normalize(vmin=0, vmax=num_chunks - 1)


def transfers_figure(topology: Topology, transfers: Sequence[TimelineTransfer], *, time_us: float,
                     num_chunks: int, title: str, rows: TimelineRows = TimelineRows.AUTO,
                     chunk_label: str = "chunk carried (first chunk of the message)") -> Figure:
    """The Gantt chart of ``transfers`` (the drawing behind both public entry points)."""
    if rows is TimelineRows.AUTO:
        links = len({link for t in transfers for link in t.route})
        rows = TimelineRows.LINK if links <= _AUTO_MAX_LINK_ROWS else TimelineRows.RANK
    labels, pairs = _rows(topology, transfers, rows)
    if len(pairs) > MAX_TIMELINE_BARS:
        raise InputError(f"{len(pairs):,} bars are too many to draw (at most {MAX_TIMELINE_BARS:,}); time a "
                         "smaller size or fewer channels, or use --timeline-rows rank", where="--timeline")
    start = np.array([t.start_us for t in transfers], dtype=float)
    end = np.array([t.arrive_us for t in transfers], dtype=float)
    lane, lanes_per_row = _lanes(pairs, start, end, len(labels))
    num_chunks = max(1, num_chunks)
    cmap, norm = _colours(num_chunks)
    boxes, colours, crit_boxes = [], [], []
    for (row, i), j in zip(pairs, lane, strict=True):
        height = 0.8 / lanes_per_row[row]
        y0 = row - 0.4 + j * height
        x0, x1 = float(start[i]), float(end[i])
        box = [(x0, y0), (x1, y0), (x1, y0 + height), (x0, y0 + height)]
        boxes.append(box)
        colours.append(cmap(norm(transfers[i].chunk)))
        if transfers[i].critical:
            crit_boxes.append(box)
    figure = new_figure(11.0, min(30.0, max(3.2, 0.24 * len(labels) + 1.8)))
    axes = figure.subplots(1, 1)
    thin_edges = {"edgecolors": "white", "linewidths": 0.3} if len(boxes) <= 5000 else {"edgecolors": "none"}
    axes.add_collection(PolyCollection(boxes, facecolors=colours, **thin_edges))
    axes.add_collection(PolyCollection(crit_boxes, facecolors="none", edgecolors="red", linewidths=1.4))
    axes.set_xlim(0, time_us * 1.01)
    axes.set_ylim(len(labels) - 0.5, -0.5)
    step = max(1, -(-len(labels) // 64))
    axes.set_yticks(range(0, len(labels), step), labels[::step], fontsize=7 if len(labels) > 24 else 8)
    axes.set_xlabel("time (us)")
    axes.set_ylabel("directed link (src→dst)" if rows is TimelineRows.LINK else "sending rank")
    axes.grid(True, axis="x", alpha=0.3)
    axes.set_title(title)
    critical = sum(1 for t in transfers if t.critical)
    axes.legend(handles=[Patch(facecolor="none", edgecolor="red", linewidth=1.4,
                               label=f"critical path ({critical} transfer{'s' if critical != 1 else ''})")],
                loc="lower right", fontsize=8)
    figure.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, pad=0.01, label=chunk_label,
                    ticks=range(num_chunks) if num_chunks <= 20 else None)
    return figure


def _check(sim: SimResult, count: int) -> float:
    if not sim.correct or sim.time_us is None:
        raise InputError(f"no timeline for an incorrect algorithm: {sim.error}", where="--timeline")
    if count != len(sim.start_us):
        raise InputError("the simulation result is not of this algorithm", where="--timeline")
    return sim.time_us


def timeline_figure(topology: Topology, schedule: Schedule, sim: SimResult,
                    rows: TimelineRows = TimelineRows.AUTO, title: str | None = None) -> Figure:
    """The Gantt chart of a correct simulation of ``schedule`` on ``topology``."""
    time_us = _check(sim, len(schedule.transfers))
    critical = set(sim.critical_path)
    transfers = [TimelineTransfer(t.src, t.route, t.chunks[0] if t.chunks else 0, float(sim.start_us[i]),
                                  float(sim.arrive_us[i]), i in critical) for i, t in enumerate(schedule.transfers)]
    kind = schedule.collective.kind.value
    return transfers_figure(topology, transfers, time_us=time_us, num_chunks=schedule.collective.num_chunks,
                            rows=rows, title=title or f"{schedule.name or 'schedule'}: {kind} on {topology.name}, "
                            f"{format_bytes(sim.size_bytes)}: {time_us:.4g} us, {len(transfers)} transfers")


def program_timeline_figure(topology: Topology, program: object, sim: SimResult,
                            rows: TimelineRows = TimelineRows.AUTO, title: str | None = None) -> Figure:
    """The Gantt chart of an MSCCL program timed by ``taccl_py.msccl.simulate_program``: a bar per send
    instruction (``send``, ``rcs``, ``rrs``... on its threadblock's connection), coloured by the offset
    of its first chunk in the source buffer."""
    from taccl_py.msccl.ir import Program
    from taccl_py.msccl.machine import build_machine

    if not isinstance(program, Program):
        raise InputError("expected an MSCCL program", where="--timeline")
    machine = build_machine(program)
    sends = [t for t in machine.nodes if t.type.sends]
    time_us = _check(sim, len(sends))
    critical = set(sim.critical_path)
    transfers = []
    for k, t in enumerate(sends):
        peer = machine.tbs[t.tb][1].send
        route = topology.gpu_route(t.rank, peer) or ()
        transfers.append(TimelineTransfer(t.rank, route, t.srcoffs[0] if t.srcoffs else 0, float(sim.start_us[k]),
                                          float(sim.arrive_us[k]), t.node in critical))
    name = program.name or "program"
    return transfers_figure(topology, transfers, time_us=time_us, num_chunks=max(
        (t.chunk for t in transfers), default=0) + 1, rows=rows, chunk_label="chunk (offset in the source buffer)",
        title=title or f"{name}: {program.coll} on {topology.name}, {format_bytes(sim.size_bytes)}: "
                       f"{time_us:.4g} us, {len(transfers)} sends")
