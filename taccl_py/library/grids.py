"""Regular topologies: ring, fully connected, switch (star), torus, mesh and hypercube.

Every link has the same bandwidth (GB/s, 1e9 B/s, per direction) and latency
(us); all links are bidirectional. Multi-dimensional GPU ids are mixed radix
with dimension 0 varying fastest (as ASTRA-sim numbers NPUs), and the link
kind of a torus, mesh or hypercube link is ``dim<k>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from taccl_py.errors import TopologyError
from taccl_py.library.builder import TopologyBuilder, check_link_budget
from taccl_py.library.validation import require_bandwidth, require_int, require_latency
from taccl_py.topology import Dimension, DimensionKind, Topology

__all__ = [
    "DEFAULT_BANDWIDTH_GBPS",
    "DEFAULT_LATENCY_US",
    "GOLDEN_RING_GBPS",
    "fat_tree",
    "fully_connected",
    "grid_coordinates",
    "grid_id",
    "hypercube",
    "mesh",
    "ring",
    "ring8",
    "switch_star",
    "switch_tree",
    "torus",
]

DEFAULT_BANDWIDTH_GBPS = 50.0
DEFAULT_LATENCY_US = 0.5
GOLDEN_RING_GBPS = 50 * 2**30 / 1e9
"""ASTRA-sim's "50 GB/s" (GB = 2^30 bytes) in GB/s of 1e9 bytes: 53.6870912."""


def _common(where: str, bandwidth: float, latency: float) -> tuple[float, float]:
    return require_bandwidth(bandwidth, where=where), require_latency(latency, where=where)


def ring(num_gpus: int, bandwidth: float = DEFAULT_BANDWIDTH_GBPS, latency: float = DEFAULT_LATENCY_US, *,
         name: str | None = None, source: str | None = None) -> Topology:
    """Bidirectional ring ``0 - 1 - ... - (N-1) - 0`` (N = 2: one link each way)."""
    where = name or "ring"
    n = require_int(num_gpus, 2, where=where, field="gpus")
    bandwidth, latency = _common(where, bandwidth, latency)
    check_link_budget(where, 2 * n)
    builder = TopologyBuilder(name or f"ring{n}", n)
    for g in range(n if n > 2 else 1):
        builder.link(g, (g + 1) % n, bandwidth, latency, "link")
    return builder.build(source=source or f"bidirectional ring of {n} GPUs, {bandwidth:g} GB/s and "
                                          f"{latency:g} us per link")


def ring8() -> Topology:
    """The golden-value ring of BRIEF.md: 8 GPUs, 50 x 2^30 B/s and 0.5 us per link."""
    return ring(8, GOLDEN_RING_GBPS, 0.5, name="ring8",
                source="golden-value instance of ASTRA-sim and SimGrid: bidirectional ring of 8 NPUs, "
                       "50 GB/s of 2^30 bytes (= 53.6870912 GB/s) and 500 ns per link")


def fully_connected(num_gpus: int, bandwidth: float = DEFAULT_BANDWIDTH_GBPS,
                    latency: float = DEFAULT_LATENCY_US, *, name: str | None = None) -> Topology:
    """A direct link each way between every pair of GPUs."""
    where = name or "fully-connected"
    n = require_int(num_gpus, 2, where=where, field="gpus")
    bandwidth, latency = _common(where, bandwidth, latency)
    check_link_budget(where, n * (n - 1))
    builder = TopologyBuilder(name or f"fully-connected{n}", n)
    for a in range(n):
        for b in range(a + 1, n):
            builder.link(a, b, bandwidth, latency, "link")
    return builder.build(source=f"fully connected {n} GPUs, {bandwidth:g} GB/s and {latency:g} us per link")


def switch_star(num_gpus: int, bandwidth: float = DEFAULT_BANDWIDTH_GBPS,
                latency: float = DEFAULT_LATENCY_US, *, name: str | None = None, multicast: bool = False,
                reduce: bool = False) -> Topology:
    """Every GPU <-> one switch vertex ``switch`` (GPU -> GPU is two links); the switch's capability flags."""
    where = name or "switch"
    n = require_int(num_gpus, 2, where=where, field="gpus")
    bandwidth, latency = _common(where, bandwidth, latency)
    check_link_budget(where, 2 * n)
    builder = TopologyBuilder(name or f"switch{n}", n)
    builder.add_switch("switch", "switch", multicast=multicast, reduce=reduce)
    for g in range(n):
        builder.link(g, "switch", bandwidth, latency, "link")
    return builder.build(source=f"{n} GPUs on one switch, {bandwidth:g} GB/s and {latency:g} us per "
                                f"GPU <-> switch link")


def switch_tree(leaves: int, gpus_per_leaf: int, bandwidth: float = DEFAULT_BANDWIDTH_GBPS,
                latency: float = DEFAULT_LATENCY_US, *, uplink_bandwidth: float | None = None,
                uplink_latency: float | None = None, name: str | None = None, multicast: bool = False,
                reduce: bool = False) -> Topology:
    """A two-level switch tree: ``gpus_per_leaf`` GPUs <-> each leaf switch ``leafK``, every leaf <-> ``spine``.

    GPU g sits under leaf ``g // gpus_per_leaf``; the leaf-spine links default
    to the GPU links' bandwidth and latency. Every switch gets the capability flags.
    """
    where = name or "switch-tree"
    k = require_int(leaves, 2, where=where, field="leaves")
    per = require_int(gpus_per_leaf, 1, where=where, field="gpus_per_leaf")
    bandwidth, latency = _common(where, bandwidth, latency)
    up_bw, up_lat = _common(where, bandwidth if uplink_bandwidth is None else uplink_bandwidth,
                            latency if uplink_latency is None else uplink_latency)
    check_link_budget(where, 2 * (k * per + k))
    builder = TopologyBuilder(name or f"tree{k}x{per}", k * per)
    spine = builder.add_switch("spine", "switch", multicast=multicast, reduce=reduce)
    for leaf in range(k):
        leaf_name = builder.add_switch(f"leaf{leaf}", "switch", multicast=multicast, reduce=reduce)
        for g in range(leaf * per, (leaf + 1) * per):
            builder.link(g, leaf_name, bandwidth, latency, "link")
        builder.link(leaf_name, spine, up_bw, up_lat, "uplink")
    flags = " ".join(f for f, on in (("multicast", multicast), ("reduce", reduce)) if on)
    return builder.build(source=f"{k} leaf switches of {per} GPUs under one spine; {bandwidth:g} GB/s and "
                                f"{latency:g} us per GPU link, {up_bw:g} GB/s and {up_lat:g} us per uplink"
                                + (f"; switches flagged {flags}" if flags else ""),
                         machines=[range(leaf * per, (leaf + 1) * per) for leaf in range(k)])


FAT_TREE_SOURCE = ("two-level non-blocking fat tree of single-GPU nodes, modelled on the 188-node InfiniBand testbed "
                   "of Khalilov et al. 2024 (network-offloaded multicast Allgather): one 100 Gb/s (12.5 GB/s) NIC "
                   "per node, 36-port leaf switches with 18 nodes each, every leaf <-> one non-blocking spine "
                   "vertex (uplink = the leaf's downlinks); 1 us per hop (assumed)")


def fat_tree(nodes: int, *, per_leaf: int = 18, bandwidth: float = 12.5, latency: float = 1.0,
             multicast: bool = True, reduce: bool = False, name: str | None = None) -> Topology:
    """``nodes`` single-GPU nodes, ``per_leaf`` per leaf switch (the last leaf may hold fewer), leaves <-> ``spine``.

    Every switch gets the capability flags (InfiniBand multicast by default; ``reduce`` for SHARP).
    """
    where = name or "fat-tree"
    n = require_int(nodes, 2, where=where, field="nodes")
    per = require_int(per_leaf, 1, where=where, field="per_leaf")
    bandwidth, latency = _common(where, bandwidth, latency)
    leaves = -(-n // per)
    check_link_budget(where, 2 * (n + leaves))
    builder = TopologyBuilder(name or f"fat-tree{n}" + ("-sharp" if reduce else ""), n)
    builder.add_switch("spine", "ib", multicast=multicast, reduce=reduce)
    for leaf in range(leaves):
        members = range(leaf * per, min(n, (leaf + 1) * per))
        leaf_name = builder.add_switch(f"leaf{leaf}", "ib", multicast=multicast, reduce=reduce)
        for g in members:
            builder.link(g, leaf_name, bandwidth, latency, "nic")
        builder.link(leaf_name, "spine", bandwidth * len(members), latency, "ib")
    flags = " + ".join(f for f, on in (("multicast", multicast), ("reduce", reduce)) if on)
    return builder.build(source=f"{n} nodes; {FAT_TREE_SOURCE}" + (f"; switches flagged {flags}" if flags else ""))


def grid_coordinates(gpu: int, dims: Sequence[int]) -> tuple[int, ...]:
    """Mixed-radix coordinates of ``gpu``, dimension 0 varying fastest."""
    coords = []
    for size in dims:
        coords.append(gpu % size)
        gpu //= size
    return tuple(coords)


def grid_id(coords: Sequence[int], dims: Sequence[int]) -> int:
    """Inverse of :func:`grid_coordinates`."""
    gpu, stride = 0, 1
    for c, size in zip(coords, dims, strict=True):
        gpu += c * stride
        stride *= size
    return gpu


def _check_dims(dims: Sequence[int], where: str) -> tuple[int, ...]:
    if isinstance(dims, str | bytes) or not isinstance(dims, Sequence) or not dims:
        raise TopologyError(f"must be a non-empty list of sizes (got {dims!r})", where=where, field="dims")
    sizes = tuple(require_int(d, 1, where=where, field=f"dims[{k}]") for k, d in enumerate(dims))
    total = math.prod(sizes)
    if total < 2:
        raise TopologyError(f"must give at least 2 GPUs in all (got {'x'.join(map(str, sizes))})",
                            where=where, field="dims")
    check_link_budget(where, 2 * len(sizes) * total)
    return sizes


def _grid(kind: str, dims: Sequence[int], bandwidth: float, latency: float, name: str | None,
          wrap: bool) -> Topology:
    sizes = _check_dims(dims, name or kind)
    bandwidth, latency = _common(name or kind, bandwidth, latency)
    shape = "x".join(map(str, sizes))
    n = math.prod(sizes)
    builder = TopologyBuilder(name or f"{kind}{shape}", n)
    for g in range(n):
        coords = grid_coordinates(g, sizes)
        for k, size in enumerate(sizes):
            if coords[k] + 1 < size:
                nxt = coords[k] + 1
            elif wrap and size > 2:
                nxt = 0
            else:
                continue
            other = grid_id((*coords[:k], nxt, *coords[k + 1:]), sizes)
            builder.link(g, other, bandwidth, latency, f"dim{k}")
    what = "torus (each dimension a bidirectional ring)" if wrap else "mesh (no wrap-around)"
    kind = DimensionKind.RING if wrap else DimensionKind.LINE
    return builder.build(source=f"{shape} {what}, {bandwidth:g} GB/s and {latency:g} us per link; "
                                f"GPU id mixed radix, dimension 0 fastest",
                         dimensions=[Dimension(kind, size) for size in sizes])


def torus(dims: Sequence[int], bandwidth: float = DEFAULT_BANDWIDTH_GBPS, latency: float = DEFAULT_LATENCY_US,
          *, name: str | None = None) -> Topology:
    """A 2D/3D/nD torus: each dimension a ring (size 2: one link each way; size 1: none)."""
    return _grid("torus", dims, bandwidth, latency, name, wrap=True)


def mesh(dims: Sequence[int], bandwidth: float = DEFAULT_BANDWIDTH_GBPS, latency: float = DEFAULT_LATENCY_US,
         *, name: str | None = None) -> Topology:
    """A 2D/3D/nD mesh: neighbours along each dimension, no wrap-around."""
    return _grid("mesh", dims, bandwidth, latency, name, wrap=False)


def hypercube(dimension: int, bandwidth: float = DEFAULT_BANDWIDTH_GBPS, latency: float = DEFAULT_LATENCY_US,
              *, name: str | None = None) -> Topology:
    """2^d GPUs; GPU i <-> GPU i xor 2^k for every k < d (link kind ``dim<k>``)."""
    where = name or "hypercube"
    d = require_int(dimension, 1, where=where, field="dimension")
    bandwidth, latency = _common(where, bandwidth, latency)
    n = 1 << d
    check_link_budget(where, n * d)
    builder = TopologyBuilder(name or f"hypercube{d}", n)
    for g in range(n):
        for k in range(d):
            other = g ^ (1 << k)
            if other > g:
                builder.link(g, other, bandwidth, latency, f"dim{k}")
    return builder.build(source=f"{d}-dimensional hypercube of {n} GPUs, {bandwidth:g} GB/s and {latency:g} us "
                                f"per link", dimensions=[Dimension(DimensionKind.RING, 2)] * d)
