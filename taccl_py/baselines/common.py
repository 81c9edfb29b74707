"""Pieces every baseline shares: the not-applicable error, legs, pipelining depth.

A *leg* is one GPU -> GPU transfer along a route through switches only. When
two GPUs have no such route, :func:`legs_between` relays through other GPUs
(the shortest-latency path, cut at every GPU it passes), which is how a ring
step or a direct send works on, say, a 3x3 mesh.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from taccl_py.errors import NotApplicable
from taccl_py.tolerances import is_better
from taccl_py.topology import Route, Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["Leg", "NotApplicable", "bytes_per_us", "channel_us_per_byte", "choose_channel_count", "legs_between",
           "pipeline_pieces", "route_cost"]

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
    path = topology.relay_route(src, dst)
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


def channel_us_per_byte(topology: Topology, loads: Sequence[float], channels: int) -> float:
    """Microseconds per byte of the busiest link when ``channels`` channels split the buffer evenly.

    ``loads[li]`` counts how many channel-uses cross link ``li``; each carries ``1 / channels`` of the buffer.
    """
    return max((load / gbps_to_bytes_per_us(channels * link.bandwidth)
                for load, link in zip(loads, topology.links, strict=True)), default=0.0)


def choose_channel_count(topology: Topology, loads: Sequence[float], add_channel: Callable[[int], None], *,
                         channels: int | None, limit: int, step: int = 1) -> int:
    """Build channels one at a time and return how many to keep (rings and trees, as NCCL spreads them).

    ``add_channel(k)`` builds channel ``k`` and adds its link uses to ``loads``. With ``channels`` given,
    exactly that many are built. Otherwise channels are added while the busiest link's time per byte
    (:func:`channel_us_per_byte`, scored every ``step`` channels) keeps improving, and the search stops once
    it has gone twice as far as the best count without improving; at most ``limit`` are built.
    """
    if channels is not None:
        for k in range(channels):
            add_channel(k)
        return channels
    best_score, best_count = math.inf, 0
    for k in range(limit):
        add_channel(k)
        if (k + 1) % step == 0:
            score = channel_us_per_byte(topology, loads, k + 1)
            if is_better(score, best_score):
                best_score, best_count = score, k + 1
            elif k + 1 >= 2 * best_count + 2:
                break
    return best_count


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
