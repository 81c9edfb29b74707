"""Pieces every baseline shares: the not-applicable error, legs, pipelining depth.

A *leg* is one GPU -> GPU transfer along a route through switches only. When
two GPUs have no such route, :func:`legs_between` relays through other GPUs
(the shortest-latency path, cut at every GPU it passes), which is how a ring
step or a direct send works on, say, a 3x3 mesh.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from taccl_py.errors import NotApplicable
from taccl_py.topology import Route, Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["Leg", "NotApplicable", "bytes_per_us", "legs_between", "pipeline_pieces", "route_cost"]

MAX_PIECES = 32
"""Deepest pipelining a baseline uses per channel (NCCL's loop over chunks, bounded)."""
MIN_PIECE_BYTES = 512
"""A pipelined piece is never cut below this size."""
DEFAULT_PIECES = 8
"""Pipeline depth of a chain when the buffer size is not known."""


@dataclass(frozen=True, slots=True)
class Leg:
    """One GPU -> GPU hop: a single transfer along ``route``."""

    src: int
    dst: int
    route: Route


def legs_between(topology: Topology, src: int, dst: int) -> tuple[Leg, ...]:
    """The direct leg ``src -> dst``, or the legs of the lowest-latency relay through GPUs."""
    route = topology.gpu_route(src, dst)
    if route is not None:
        return (Leg(src, dst, route),)
    path = topology.shortest_path(src, dst, through_gpus=True)
    if path is None:  # check_topology guarantees GPUs reach each other
        raise NotApplicable(f"GPU {src} cannot reach GPU {dst}", where=topology.name)
    legs: list[Leg] = []
    start, current = src, 0
    for k, li in enumerate(path):
        head = topology.links[li].dst
        if topology.is_gpu(head):
            assert isinstance(head, int)
            legs.append(Leg(start, head, tuple(path[current:k + 1])))
            start, current = head, k + 1
    return tuple(legs)


def bytes_per_us(topology: Topology, link: int) -> float:
    """Bandwidth of a link in bytes per microsecond."""
    return gbps_to_bytes_per_us(topology.links[link].bandwidth)


def route_cost(topology: Topology, route: Sequence[int], loads: Sequence[float]) -> float:
    """How loaded a route would be with one more use: max over its links of (uses + 1) / bandwidth."""
    return max((loads[li] + 1.0) / topology.links[li].bandwidth for li in route) if route else 0.0


def pipeline_pieces(hops: int, channel_bytes: float | None, us_per_byte: float, latency_us: float) -> int:
    """Pieces per channel minimising the alpha-beta time of a pipelined chain.

    A chain of ``hops`` legs moving ``channel_bytes`` in P pieces takes about
    ``(hops + P - 1) * (latency + channel_bytes / P * us_per_byte)``; the
    optimum is ``P = sqrt((hops - 1) * channel_bytes * us_per_byte / latency)``,
    bounded by :data:`MAX_PIECES` and by pieces of at least :data:`MIN_PIECE_BYTES`.
    """
    if channel_bytes is None:
        return DEFAULT_PIECES if hops > 1 else 1
    cap = max(1, min(MAX_PIECES, int(channel_bytes // MIN_PIECE_BYTES)))
    if hops <= 1:
        return 1
    if latency_us <= 0:
        return cap
    ratio = (hops - 1) * channel_bytes * us_per_byte / latency_us
    if not ratio < cap * cap:  # the optimum is at or past the cap (also when a tiny latency overflows to inf)
        return cap
    best = math.sqrt(ratio)
    candidates = {max(1, min(cap, math.floor(best))), max(1, min(cap, math.ceil(best)))}

    def cost(p: int) -> float:
        return (hops + p - 1) * (latency_us + channel_bytes / p * us_per_byte)

    return min(sorted(candidates), key=cost)
