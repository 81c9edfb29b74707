"""The picture options of simulate, baseline and synthesize (``--plot``, ``--timeline``): parsing and writing.

The commands call these after their own work, so their code only gains a few lines; the pictures
themselves are :mod:`taccl_py.plots`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from taccl_py.schedule import Schedule

if TYPE_CHECKING:
    from taccl_py.msccl.ir import Program
    from taccl_py.simulator import SimResult
    from taccl_py.topology import Topology

__all__ = ["check_picture_path", "plot_option", "timeline_options", "write_algbw_plot", "write_timeline"]

F = TypeVar("F", bound=Callable[..., Any])


def plot_option(func: F) -> F:
    return click.option("--plot", "plot_path", default=None, metavar="FILE.png|FILE.svg",
                        help="Also draw algbw versus size (log scale) for every algorithm and the bound.")(func)


def timeline_options(func: F) -> F:
    func = click.option("--timeline-rows", type=click.Choice(["auto", "link", "rank"]), default="auto",
                        show_default=True, help="Timeline rows: directed links, sending ranks, or links when at "
                                                "most 48 carry data.")(func)
    return click.option("--timeline", "timeline_path", default=None, metavar="FILE.png|FILE.svg",
                        help="Also draw the Gantt timeline of the algorithm (one size).")(func)


def check_picture_path(path: str | None, option: str) -> None:
    """Fail before any work when a picture cannot be written there (suffix .png or .svg, directory exists)."""
    if path is not None:
        from taccl_py.cli.common import check_output_file
        from taccl_py.plots import check_figure_path

        check_figure_path(path, where=option)
        check_output_file(path, option)


def write_algbw_plot(path: str, title: str, sizes: Sequence[int], times: Mapping[str, Sequence[float | None]],
                     bound_us: Sequence[float | None], synthesized: str | None = None) -> None:
    """algbw versus size: one series per entry of ``times`` (``synthesized`` names ours), and the bound."""
    from taccl_py.plots import SeriesKind, TimeSeries, algbw_figure, save_figure

    series = [TimeSeries(label, SeriesKind.SYNTHESIZED if label == synthesized else SeriesKind.BASELINE,
                         tuple(sizes), tuple(values)) for label, values in times.items()]
    series.append(TimeSeries("lower bound", SeriesKind.BOUND, tuple(sizes), tuple(bound_us)))
    save_figure(algbw_figure(title, series), path, where="--plot")


def write_timeline(path: str, topology: Topology, algorithm: Schedule | Program, sim: SimResult, rows: str) -> None:
    """The Gantt chart of a schedule (baseline, JSON file) or of an MSCCL program (XML file)."""
    from taccl_py.plots import TimelineRows, save_figure, timeline_figure
    from taccl_py.plots.timeline import program_timeline_figure

    figure = timeline_figure(topology, algorithm, sim, TimelineRows(rows)) if isinstance(algorithm, Schedule) else \
        program_timeline_figure(topology, algorithm, sim, TimelineRows(rows))
    save_figure(figure, path, where="--timeline")
