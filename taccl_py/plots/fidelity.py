"""Published against predicted busbw: one panel per run, as nccl-tests users compare curves.

Each panel draws the measured busbw (dots), the calibrated prediction (line), the target band
around the measurement (10 % from 1 MB, 25 % below: :mod:`taccl_py.fidelity`), a cross on
every row the prediction misses and, for a log, the same run's in-place busbw (hollow rings) where it
lies outside that band: the run's own spread, beside the model's.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from taccl_py.fidelity import FidelityRow
from taccl_py.plots._files import panel_grid
from taccl_py.plots.curves import size_axis

__all__ = ["fidelity_figure"]

_IN_PLACE = "in place (off the band)"


def fidelity_figure(panels: Sequence[tuple[str, Sequence[FidelityRow]]], *, measured: str = "published",
                    panel_width_in: float = 3.4, panel_height_in: float = 2.6) -> Figure:
    """Small multiples: per (title, rows), published busbw against size, the prediction and the target band.

    ``measured``: the legend's name of the dots (``published``, or ``measured`` for a user's own logs)."""
    figure, axes_list = panel_grid(len(panels), panel_width_in, panel_height_in)
    ringed = False
    for ax, (title, unsorted) in zip(axes_list, panels, strict=True):
        rows = sorted(unsorted, key=lambda r: r.size_bytes)
        sizes = [r.size_bytes for r in rows]
        published = [r.published_busbw for r in rows]
        ax.fill_between(sizes, [p * (1 - r.target) for p, r in zip(published, rows, strict=True)],
                        [p * (1 + r.target) for p, r in zip(published, rows, strict=True)], color="C0", alpha=0.15,
                        linewidth=0)
        ax.plot(sizes, published, "o", color="C0", markersize=3, label=measured)
        predicted = [(r.size_bytes, r.predicted_busbw) for r in rows if r.predicted_busbw]
        if predicted:
            ax.plot(*zip(*predicted, strict=True), color="C3", linewidth=1.4, label="predicted")
        spread = [(r.size_bytes, r.in_place_busbw) for r in rows if r.off_band]
        if spread:
            ax.plot(*zip(*spread, strict=True), "o", markerfacecolor="none", color="C0", markersize=5,
                    label=_IN_PLACE)
            ringed = True
        missed = [(r.size_bytes, r.published_busbw) for r in rows if not r.met]
        if missed:
            ax.plot(*zip(*missed, strict=True), "x", color="C3", markersize=6, label="missed")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=7)
        ax.grid(True, alpha=0.3)
        if sizes:
            size_axis(ax, sizes)
        ax.tick_params(labelsize=6)
    if axes_list:
        first = axes_list[0]
        first.set_ylabel("busbw GB/s")
        if ringed and _IN_PLACE not in {line.get_label() for line in first.get_lines()}:
            first.plot([], [], "o", markerfacecolor="none", color="C0", markersize=5, label=_IN_PLACE)  # legend only
        first.legend(fontsize=6, loc="lower right")
    return figure
