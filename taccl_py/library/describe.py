"""What ``taccl topo show`` reports about a topology, as a frozen record (and its JSON form).

Units: bandwidth GB/s (1e9 B/s), latency us.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from taccl_py.topology import Topology

__all__ = ["GpuBandwidthGroup", "LinkKindStats", "SwitchKindStats", "TopologyDescription", "describe_topology",
           "format_gpu_ranges"]


@dataclass(frozen=True)
class SwitchKindStats:
    kind: str
    count: int
    multicast: int
    reduce: int


@dataclass(frozen=True)
class LinkKindStats:
    """Directed links of one kind with their bandwidth (GB/s) and latency (us) ranges."""

    kind: str
    count: int
    min_bandwidth: float
    max_bandwidth: float
    min_latency: float
    max_latency: float


@dataclass(frozen=True)
class GpuBandwidthGroup:
    """GPUs with the same total outgoing and incoming link bandwidth (GB/s)."""

    gpus: tuple[int, ...]
    out_GBps: float
    in_GBps: float


@dataclass(frozen=True)
class TopologyDescription:
    name: str
    gpus: int
    switches: tuple[SwitchKindStats, ...]
    links: int
    link_kinds: tuple[LinkKindStats, ...]
    gpu_bandwidth: tuple[GpuBandwidthGroup, ...]
    out_GBps: tuple[float, ...]
    in_GBps: tuple[float, ...]
    machines: tuple[tuple[int, ...], ...]
    source: str
    dimensions: tuple[tuple[str, int], ...] = ()
    """``(kind, size)`` per dimension, dimension 0 first (empty without dimensions)."""
    switch_model: str = "cut-through"
    """How transfers cross switches in the simulator (:class:`taccl_py.topology.SwitchModel`)."""

    def dimensions_line(self) -> str:
        """``ring 4 x switch 4`` (or ``-``)."""
        return " x ".join(f"{kind} {size}" for kind, size in self.dimensions) or "-"

    def to_json(self) -> dict[str, Any]:
        """The object ``taccl topo show --json`` prints."""
        return {
            "name": self.name,
            "gpus": self.gpus,
            "switches": sum(s.count for s in self.switches),
            "switch_kinds": {s.kind: {"count": s.count, "multicast": s.multicast, "reduce": s.reduce}
                             for s in self.switches},
            "links": self.links,
            "link_kinds": {k.kind: {"count": k.count, "min_bandwidth_GBps": k.min_bandwidth,
                                    "max_bandwidth_GBps": k.max_bandwidth, "min_latency_us": k.min_latency,
                                    "max_latency_us": k.max_latency} for k in self.link_kinds},
            "gpu_bandwidth": [{"gpus": format_gpu_ranges(g.gpus), "count": len(g.gpus), "out_GBps": g.out_GBps,
                               "in_GBps": g.in_GBps} for g in self.gpu_bandwidth],
            "out_GBps": list(self.out_GBps),
            "in_GBps": list(self.in_GBps),
            "machines": [list(m) for m in self.machines],
            "dimensions": [{"kind": kind, "size": size} for kind, size in self.dimensions],
            "switch_model": self.switch_model,
            "source": self.source,
        }


def format_gpu_ranges(gpus: tuple[int, ...] | list[int]) -> str:
    """``0-7,16-23`` for a sorted list of GPU ids."""
    parts: list[str] = []
    ordered = sorted(gpus)
    k = 0
    while k < len(ordered):
        start = end = ordered[k]
        while k + 1 < len(ordered) and ordered[k + 1] == end + 1:
            k += 1
            end = ordered[k]
        parts.append(str(start) if start == end else f"{start}-{end}")
        k += 1
    return ",".join(parts)


def describe_topology(topology: Topology) -> TopologyDescription:
    """Counts by kind, per-GPU bandwidths grouped, machines and source."""
    kinds = Counter(s.kind for s in topology.switches)
    switches = tuple(SwitchKindStats(kind, kinds[kind],
                                     sum(1 for s in topology.switches if s.kind == kind and s.multicast),
                                     sum(1 for s in topology.switches if s.kind == kind and s.reduce))
                     for kind in sorted(kinds))
    by_kind: dict[str, list[int]] = {}
    for i, link in enumerate(topology.links):
        by_kind.setdefault(link.kind, []).append(i)
    link_kinds = []
    for kind in sorted(by_kind):
        members = [topology.links[i] for i in by_kind[kind]]
        link_kinds.append(LinkKindStats(kind, len(members), min(x.bandwidth for x in members),
                                        max(x.bandwidth for x in members), min(x.latency for x in members),
                                        max(x.latency for x in members)))
    out_bw = tuple(topology.injection_bandwidth(g) for g in topology.gpus)
    in_bw = tuple(topology.ejection_bandwidth(g) for g in topology.gpus)
    groups: dict[tuple[float, float], list[int]] = {}
    for g in topology.gpus:
        groups.setdefault((out_bw[g], in_bw[g]), []).append(g)
    gpu_bandwidth = tuple(GpuBandwidthGroup(tuple(members), key[0], key[1])
                          for key, members in sorted(groups.items(), key=lambda item: item[1][0]))
    return TopologyDescription(name=topology.name, gpus=topology.num_gpus, switches=switches,
                               links=len(topology.links), link_kinds=tuple(link_kinds),
                               gpu_bandwidth=gpu_bandwidth, out_GBps=out_bw, in_GBps=in_bw,
                               machines=topology.machines, source=topology.source,
                               dimensions=tuple((d.kind.value, d.size) for d in topology.dimensions),
                               switch_model=topology.switch_model.value)
