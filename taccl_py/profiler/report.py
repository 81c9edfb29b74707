"""What ``taccl profile fit`` and ``show`` print: the fitted table, its JSON form and the plot."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from taccl_py.errors import ProfileInputError
from taccl_py.profiler.calibration import LinkFit
from taccl_py.topology import Topology
from taccl_py.topology_io import atomic_write_bytes
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["FitRow", "fit_to_json", "rows_from_fits", "rows_from_topology", "write_plot"]


@dataclass(frozen=True)
class FitRow:
    """One line of the fitted table: a link class with its alpha (us), bandwidth (GB/s) and quality."""

    label: str
    alpha_us: float
    bandwidth_gbps: float
    r_squared: float | None
    rms_residual_pct: float | None
    samples: int | None
    dropped: int | None
    links: int
    min_bytes: int | None
    max_bytes: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"class": self.label, "alpha_us": self.alpha_us, "bandwidth_GBps": self.bandwidth_gbps,
                "r_squared": self.r_squared, "rms_residual_pct": self.rms_residual_pct, "samples": self.samples, "dropped": self.dropped,
                "links": self.links, "min_bytes": self.min_bytes, "max_bytes": self.max_bytes}


def _links_with(topology: Topology | None, label: str) -> int:
    if topology is None:
        return 0
    return sum(1 for link in topology.links if link.provenance and link.provenance.get("class") == label)


def rows_from_fits(fits: Sequence[LinkFit], topology: Topology | None = None) -> list[FitRow]:
    """Table rows of freshly made fits (``links`` counts the links of ``topology`` each one set)."""
    return [FitRow(f.label, f.fit.alpha_us, f.fit.bandwidth_gbps, f.fit.r_squared, f.fit.rms_residual_pct,
                   f.fit.num_samples,
                   f.fit.num_dropped, _links_with(topology, f.label), f.fit.min_bytes, f.fit.max_bytes)
            for f in fits]


def rows_from_topology(topology: Topology, *, where: str) -> list[FitRow]:
    """Table rows from the ``provenance`` objects a fit wrote on a topology's links."""
    groups: dict[str, tuple[dict[str, Any], int]] = {}
    for link in topology.links:
        prov = link.provenance
        if not prov or prov.get("fitted_by") != "taccl profile fit":
            continue
        key = json.dumps(dict(prov), sort_keys=True)
        entry, count = groups.get(key, (dict(prov), 0))
        groups[key] = (entry, count + 1)
    if not groups:
        raise ProfileInputError("no link carries fit provenance (was it written by `taccl profile fit`?)",
                                where=where)
    rows = []
    for prov, count in groups.values():
        try:
            rows.append(FitRow(str(prov.get("class", "?")), float(prov["alpha_us"]), float(prov["bandwidth_GBps"]),
                               _opt_float(prov.get("r_squared")), _opt_float(prov.get("rms_residual_pct")),
                               _opt_int(prov.get("samples")),
                               _opt_int(prov.get("dropped")), count, _opt_int(prov.get("min_bytes")),
                               _opt_int(prov.get("max_bytes"))))
        except (KeyError, TypeError, ValueError):
            raise ProfileInputError("a link's provenance lacks a numeric alpha_us or bandwidth_GBps",
                                    where=where) from None
    return sorted(rows, key=lambda r: r.label)


def _opt_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def fit_to_json(link_fit: LinkFit) -> dict[str, Any]:
    """Everything about one fit, residuals included, for ``--json``."""
    f = link_fit.fit
    return {
        "class": link_fit.label,
        "alpha_us": f.alpha_us,
        "alpha_stderr_us": f.alpha_stderr_us,
        "bandwidth_GBps": f.bandwidth_gbps,
        "bandwidth_stderr_GBps": f.bandwidth_stderr_gbps,
        "r_squared": f.r_squared,
        "rms_residual_pct": f.rms_residual_pct,
        "max_residual_pct": f.max_residual_pct,
        "samples": f.num_samples,
        "dropped": f.num_dropped,
        "sizes": f.num_sizes,
        "min_bytes": f.min_bytes,
        "max_bytes": f.max_bytes,
        "alpha_clamped": f.alpha_clamped,
        "model": link_fit.model,
        "pairs": [list(p) for p in link_fit.pairs],
        "warnings": list(f.warnings),
        "residuals": [{"bytes": p.size_bytes, "time_us": p.time_us, "predicted_us": p.predicted_us,
                       "residual_pct": p.residual_pct, "dropped": p.dropped, "origin": p.origin}
                      for p in f.points],
    }


def write_plot(path: str | os.PathLike[str], *, title: str, fits: Sequence[LinkFit] = (),
               rows: Sequence[FitRow] = ()) -> None:
    """Time versus size, log-log: measured points with their fitted lines (``fits``), or the lines of
    ``rows`` alone (a topology keeps no points). Written atomically as PNG (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 5.0), dpi=110)
    axes = figure.add_subplot(1, 1, 1)
    colors = [f"C{k % 10}" for k in range(max(len(fits), len(rows)))]
    for color, link_fit in zip(colors, fits, strict=False):
        points = sorted(link_fit.fit.points, key=lambda p: (p.size_bytes, p.predicted_us))
        kept = [p for p in points if not p.dropped]
        axes.scatter([p.size_bytes for p in kept], [p.time_us for p in kept], s=12, color=color, alpha=0.6)
        dropped = [p for p in points if p.dropped]
        if dropped:
            axes.scatter([p.size_bytes for p in dropped], [p.time_us for p in dropped], s=30, marker="x",
                         color=color, label=f"{link_fit.label}: dropped outliers")
        axes.plot([p.size_bytes for p in points], [p.predicted_us for p in points], color=color,
                  label=f"{link_fit.label}: alpha {link_fit.fit.alpha_us:.3g} us, "
                        f"{link_fit.fit.bandwidth_gbps:.4g} GB/s, R^2 {link_fit.fit.r_squared:.4f}")
    for color, row in zip(colors, rows, strict=False):
        lo, hi = row.min_bytes or 1024, row.max_bytes or (256 << 20)
        sizes = np.geomspace(lo, hi, 64)
        axes.plot(sizes, row.alpha_us + sizes / gbps_to_bytes_per_us(row.bandwidth_gbps), color=color,
                  label=f"{row.label}: alpha {row.alpha_us:.3g} us, {row.bandwidth_gbps:.4g} GB/s")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("size (bytes)")
    axes.set_ylabel("time (us)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7, loc="upper left")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    atomic_write_bytes(path, buffer.getvalue())
