"""Synthesis time and efficiency versus GPU count: how the synthesizer scales (drawn from benchmark rows)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, ScalarFormatter

from taccl_py.errors import InputError
from taccl_py.plots._files import new_figure

__all__ = ["ScalingPoint", "scaling_figure"]


@dataclass(frozen=True)
class ScalingPoint:
    """One synthesized instance: its series (e.g. ``dgx-a100 allgather 1GB``), GPU count, seconds, bound/time."""

    series: str
    gpus: int
    synthesis_s: float
    efficiency: float


def scaling_figure(points: Sequence[ScalingPoint], title: str) -> Figure:
    """Two panels over the GPU count (log2): synthesis wall time (log) and efficiency (%)."""
    if not points:
        raise InputError("nothing to plot: no points", where="plot")
    by_series: dict[str, list[ScalingPoint]] = defaultdict(list)
    for p in points:
        by_series[p.series].append(p)
    figure = new_figure(10.5, 4.4)
    left, right = figure.subplots(1, 2)
    markers = ("o", "s", "^", "D", "v", "P")
    for n, name in enumerate(sorted(by_series)):
        series = sorted(by_series[name], key=lambda p: p.gpus)
        style = {"color": f"C{n % 10}", "marker": markers[n % len(markers)], "linewidth": 1.6, "markersize": 5}
        left.plot([p.gpus for p in series], [p.synthesis_s for p in series], label=name, **style)
        right.plot([p.gpus for p in series], [100 * p.efficiency for p in series], label=name, **style)
    gpus = sorted({p.gpus for p in points})
    for axes in (left, right):
        axes.set_xscale("log", base=2)
        axes.xaxis.set_major_locator(FixedLocator(gpus))
        axes.xaxis.set_minor_locator(NullLocator())
        axes.xaxis.set_major_formatter(ScalarFormatter())
        axes.set_xlabel("GPUs")
        axes.grid(True, which="both", alpha=0.3)
    left.set_yscale("log")
    plain = FuncFormatter(lambda value, _pos: f"{value:g}")
    left.yaxis.set_major_formatter(plain)
    left.yaxis.set_minor_formatter(plain)
    left.set_ylabel("synthesis wall time (s)")
    left.set_title("synthesis time")
    right.axhline(100, color="black", linestyle="--", linewidth=1.0, label="lower bound")
    right.set_ylim(min(50.0, min(100 * p.efficiency for p in points) - 5), 102)
    right.set_ylabel("efficiency (bound / time, %)")
    right.set_title("quality")
    right.legend(fontsize=7, loc="lower left")
    figure.suptitle(title)
    return figure
