"""Bandwidth versus size, as users draw nccl-tests output: algbw of every algorithm and the bound.

Top panel: algbw (size / time, GB/s of 1e9 bytes) against the buffer size on log axes; bottom panel
(when a bound series is given): efficiency = bound time / algorithm time, so 100% is optimal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from taccl_py.errors import InputError
from taccl_py.plots._files import new_figure
from taccl_py.units import algbw_gbps, format_bytes

__all__ = ["SeriesKind", "TimeSeries", "algbw_figure", "size_axis"]


class SeriesKind(StrEnum):
    """How a series is drawn: ours bold, baselines thin, the bound dashed black."""

    SYNTHESIZED = "synthesized"
    BASELINE = "baseline"
    BOUND = "bound"


@dataclass(frozen=True)
class TimeSeries:
    """Times (us) of one algorithm at several sizes (bytes); None where it did not run or was not correct."""

    label: str
    kind: SeriesKind
    sizes_bytes: tuple[int, ...]
    times_us: tuple[float | None, ...]

    def __post_init__(self) -> None:
        if len(self.sizes_bytes) != len(self.times_us):
            raise InputError(f"{len(self.sizes_bytes)} sizes but {len(self.times_us)} times",
                             where=f"series {self.label!r}")

    def points(self) -> list[tuple[int, float]]:
        """(size, time) where the time is known and positive."""
        return [(s, t) for s, t in zip(self.sizes_bytes, self.times_us, strict=True) if t is not None and t > 0]


_MARKERS = ("s", "^", "v", "D", "P", "X")


def size_axis(axes: Axes, sizes: Sequence[int]) -> None:
    """Log2 size axis labelled 1KB, 64MB, ... at the sizes drawn (thinned to at most 12 labels)."""
    ticks = sorted(set(sizes))
    step = max(1, -(-len(ticks) // 12))
    axes.set_xscale("log", base=2)
    axes.xaxis.set_major_locator(FixedLocator(ticks[::step]))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: format_bytes(value)))


def _style(series: TimeSeries, baseline_index: int) -> dict[str, object]:
    if series.kind is SeriesKind.BOUND:
        return {"color": "black", "linestyle": "--", "linewidth": 1.4, "marker": None}
    if series.kind is SeriesKind.SYNTHESIZED:
        return {"color": "C0", "linestyle": "-", "linewidth": 2.4, "marker": "o", "markersize": 5}
    return {"color": f"C{1 + baseline_index % 9}", "linestyle": "-", "linewidth": 1.3,
            "marker": _MARKERS[baseline_index % len(_MARKERS)], "markersize": 4}


def algbw_figure(title: str, series: Sequence[TimeSeries]) -> Figure:
    """algbw (and efficiency against the bound) versus size for every series, on one chart."""
    if not series:
        raise InputError("nothing to plot: no series", where="plot")
    bound = next((s for s in series if s.kind is SeriesKind.BOUND), None)
    figure = new_figure(8.0, 6.6 if bound else 4.6)
    if bound:
        top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    else:
        top, bottom = figure.subplots(1, 1), None
    bound_at = dict(bound.points()) if bound else {}
    all_sizes: list[int] = []
    baseline_index = 0
    for s in series:
        style = _style(s, baseline_index)
        if s.kind is SeriesKind.BASELINE:
            baseline_index += 1
        points = s.points()
        all_sizes += [size for size, _ in points]
        if not points:
            continue
        label = s.label if s.kind is not SeriesKind.BOUND else f"{s.label} (no algorithm is faster)"
        top.plot([p[0] for p in points], [algbw_gbps(p[0], p[1]) for p in points], label=label,
                 **style)
        if bottom is not None and s.kind is not SeriesKind.BOUND:
            eff = [(size, 100 * bound_at[size] / t) for size, t in points if size in bound_at]
            if eff:
                bottom.plot([e[0] for e in eff], [e[1] for e in eff], label=s.label, **style)
    top.set_yscale("log")
    top.set_ylabel("algbw (GB/s, 1 GB = 1e9 B)")
    top.set_title(title)
    top.grid(True, which="both", alpha=0.3)
    top.legend(fontsize=8, loc="upper left")
    axis = bottom if bottom is not None else top
    size_axis(axis, all_sizes or [1])
    axis.set_xlabel("size (bytes, as nccl-tests counts it; K/M/G = 2^10/2^20/2^30)")
    if bottom is not None:
        bottom.axhline(100, color="black", linestyle="--", linewidth=1.0)
        bottom.set_ylabel("efficiency (bound / time, %)")
        bottom.set_ylim(0, 105)
        bottom.grid(True, which="both", alpha=0.3)
        for tick in top.get_xticklabels():
            tick.set_visible(False)
    return figure
