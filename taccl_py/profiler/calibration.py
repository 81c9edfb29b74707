"""Turn alpha-beta fits into topology links: new topologies and re-calibrated ones.

A *link class* of a topology is the signature of the route between two GPUs:
the kind and bandwidth of each link on it (``"nvlink 50GB/s"``, or
``"nvlink 300GB/s > nvlink 300GB/s"`` through an NVSwitch). Re-calibrating a
route with a fit (alpha, B) sets the bottleneck links of the route to B, raises
any other link below B to B (the measured route carries B), and scales the
latencies of its links so that they add up to alpha (split evenly when they
were all 0). A link reached by two fits with different values keeps the first
(fits are applied in label order) and the conflict is reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from taccl_py.errors import ProfileInputError, TopologyError
from taccl_py.profiler.fit import FIT_METHOD, AlphaBetaFit
from taccl_py.tolerances import UNCHANGED_FIT_ABS_US, UNCHANGED_FIT_REL
from taccl_py.topology import Link, Topology, check_topology

__all__ = [
    "LinkFit",
    "link_class",
    "link_classes",
    "recalibrate",
    "round_figure",
    "topology_from_fits",
]


def round_figure(value: float) -> float:
    """Six significant digits: what a fitted figure is worth, and stable text in files."""
    return float(f"{value:.6g}") if value != 0 and math.isfinite(value) else float(value)


@dataclass(frozen=True)
class LinkFit:
    """A fit and what it describes: the GPU pairs (directions) and where its data came from."""

    label: str
    fit: AlphaBetaFit
    pairs: tuple[tuple[int, int], ...]
    files: tuple[str, ...]
    model: str

    def provenance(self) -> dict[str, Any]:
        """The ``provenance`` object written on every link this fit sets."""
        f = self.fit
        return {
            "fitted_by": "taccl profile fit",
            "class": self.label,
            "files": list(self.files),
            "model": self.model,
            "method": FIT_METHOD,
            "alpha_us": round_figure(f.alpha_us),
            "bandwidth_GBps": round_figure(f.bandwidth_gbps),
            "r_squared": round(f.r_squared, 6),
            "rms_residual_pct": round(f.rms_residual_pct, 3),
            "samples": f.num_samples,
            "dropped": f.num_dropped,
            "min_bytes": f.min_bytes,
            "max_bytes": f.max_bytes,
        }


def link_class(topology: Topology, src: int, dst: int) -> str | None:
    """Signature of the route ``src -> dst`` (None when the GPUs are not joined through switches only)."""
    route = topology.gpu_route(src, dst)
    if route is None:
        return None
    return " > ".join(f"{topology.links[i].kind} {topology.links[i].bandwidth:g}GB/s" for i in route)


def link_classes(topology: Topology) -> dict[str, tuple[tuple[int, int], ...]]:
    """Every link class of the topology with its GPU pairs, classes sorted by name."""
    classes: dict[str, list[tuple[int, int]]] = {}
    for src in topology.gpus:
        for dst in topology.gpus:
            if src != dst and (name := link_class(topology, src, dst)) is not None:
                classes.setdefault(name, []).append((src, dst))
    return {name: tuple(classes[name]) for name in sorted(classes)}


def topology_from_fits(fits: Sequence[LinkFit], *, name: str, source: str, num_gpus: int | None = None,
                       kind: str = "measured", mirror: bool = True, where: str = "measurements") -> Topology:
    """A topology with one link per fitted direction; with ``mirror`` an unmeasured reverse direction
    gets the same fit (a ping-pong measures both ways).

    Raises :class:`ProfileInputError` when the measured pairs do not connect every GPU.
    """
    measured: dict[tuple[int, int], LinkFit] = {}
    for link_fit in fits:
        for pair in link_fit.pairs:
            measured.setdefault(pair, link_fit)
    gpus = num_gpus if num_gpus is not None else 1 + max(max(p) for p in measured)
    directions = dict(measured)
    if mirror:
        for (src, dst), link_fit in measured.items():
            directions.setdefault((dst, src), link_fit)
    links = []
    for (src, dst) in sorted(directions, key=lambda p: (min(p), max(p), p[0] > p[1])):
        link_fit = directions[(src, dst)]
        links.append(Link(src, dst, bandwidth=round_figure(link_fit.fit.bandwidth_gbps),
                          latency=round_figure(link_fit.fit.alpha_us), kind=kind,
                          provenance=link_fit.provenance()))
    topology = Topology(name=name, num_gpus=gpus, links=tuple(links), source=source)
    try:
        return check_topology(topology, where=name)
    except TopologyError as exc:
        raise ProfileInputError(f"the measured pairs do not make a usable topology ({exc.detail}); measure "
                                "more pairs or re-calibrate an existing topology with --into", where=where) from None


def _route_updates(topology: Topology, pair: tuple[int, int], link_fit: LinkFit) -> dict[int, tuple[float, float]]:
    """New (bandwidth, latency) of every link on the route of ``pair``."""
    route = topology.gpu_route(*pair)
    if not route:
        return {}
    old_bw = topology.route_bandwidth(route)
    old_lat = topology.route_latency(route)
    alpha, bandwidth = link_fit.fit.alpha_us, link_fit.fit.bandwidth_gbps
    updates = {}
    for i in route:
        link = topology.links[i]
        new_bw = bandwidth if link.bandwidth == old_bw else max(link.bandwidth, bandwidth)
        new_lat = link.latency * alpha / old_lat if old_lat > 0 else alpha / len(route)
        updates[i] = (round_figure(new_bw), round_figure(new_lat))
    return updates


def recalibrate(topology: Topology, targets: Iterable[tuple[LinkFit, Sequence[tuple[int, int]]]], *,
                note: str) -> tuple[Topology, tuple[str, ...]]:
    """Apply each fit to the routes of its GPU pairs; return the new topology and warnings.

    Everything that no fit touches (other links, their provenance, switches,
    machines, the name) is kept; ``note`` is appended to ``source``.
    """
    new_values: dict[int, tuple[float, float, LinkFit]] = {}
    warnings: list[str] = []
    for link_fit, pairs in targets:
        conflicts = 0
        for pair in pairs:
            for i, (bw, lat) in _route_updates(topology, pair, link_fit).items():
                if i not in new_values:
                    new_values[i] = (bw, lat, link_fit)
                elif not (math.isclose(new_values[i][0], bw, rel_tol=UNCHANGED_FIT_REL)
                          and math.isclose(new_values[i][1], lat, rel_tol=UNCHANGED_FIT_REL, abs_tol=UNCHANGED_FIT_ABS_US)):
                    conflicts += 1
        if conflicts:
            warnings.append(f"{link_fit.label}: {conflicts} link update(s) conflict with an earlier fit on shared "
                            "links; the earlier values were kept")
    links = list(topology.links)
    for i, (bw, lat, link_fit) in sorted(new_values.items()):
        links[i] = replace(links[i], bandwidth=bw, latency=lat, provenance=link_fit.provenance())
    source = f"{topology.source}; {note}" if topology.source else note
    return check_topology(replace(topology, links=tuple(links), source=source)), tuple(warnings)


def pairs_by_class(topology: Topology, pairs: Iterable[tuple[int, int]]) -> Mapping[str | None, list[tuple[int, int]]]:
    """Group GPU pairs by their link class in ``topology`` (None: no switch-only route)."""
    grouped: dict[str | None, list[tuple[int, int]]] = {}
    for pair in pairs:
        grouped.setdefault(link_class(topology, *pair), []).append(pair)
    return grouped
