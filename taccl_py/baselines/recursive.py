"""Recursive doubling Allgather, recursive halving ReduceScatter, halving-doubling Allreduce.

For N a power of two, in log2 N steps. Ranks are renumbered along a ring
(machines contiguous), so partners at small distances share a machine. The
ReduceScatter halves the data with partners at distances 1, 2, 4, ... (the big
early messages stay inside a machine) and the Allgather doubles it with
partners at distances N/2, ..., 2, 1, the mirror image, as Rabenseifner's
Allreduce pairs them. Each channel renumbers along its own ring.
"""

from __future__ import annotations

from collections.abc import Sequence

from taccl_py.baselines.common import NotApplicable, legs_between
from taccl_py.baselines.direct import missing_direct_route
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.topology import Topology

__all__ = ["check_recursive", "recursive_schedule"]

_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE)


def _partner_pairs(order: Sequence[int]) -> list[tuple[int, int]]:
    n = len(order)
    pairs: list[tuple[int, int]] = []
    d = 1
    while d < n:
        pairs.extend((order[v], order[v ^ d]) for v in range(n))
        d <<= 1
    return pairs


def check_recursive(topology: Topology, kind: CollectiveKind, orders: Sequence[Sequence[int]]) -> None:
    """Raise :class:`NotApplicable` unless N is a power of two (and, to reduce, partners are direct)."""
    n = topology.num_gpus
    if kind not in _KINDS:
        raise NotApplicable(f"recursive doubling runs allgather, reducescatter and allreduce, not {kind.value}")
    if n < 2 or n & (n - 1):
        raise NotApplicable(f"recursive doubling needs a power-of-two GPU count (got {n})", where=topology.name)
    if kind is not CollectiveKind.ALLGATHER:
        for order in orders:
            missing = missing_direct_route(topology, _partner_pairs(order))
            if missing is not None:
                raise NotApplicable(f"recursive halving needs a direct route from GPU {missing[0]} to GPU "
                                    f"{missing[1]}", where=topology.name)


def recursive_schedule(topology: Topology, kind: CollectiveKind, orders: Sequence[Sequence[int]], *,
                       chunk_factor: int | None = None) -> Schedule:
    """The recursive algorithm for ``kind``; one channel per order in ``orders`` (virtual rank -> GPU)."""
    check_recursive(topology, kind, orders)
    n = topology.num_gpus
    channels = len(orders)
    c = chunk_factor if chunk_factor is not None else channels
    if c < 1 or c % channels:
        raise NotApplicable(f"chunk_factor {c} is not a positive multiple of the {channels} channels")
    pieces = c // channels
    out: list[Transfer] = []
    steps = n.bit_length() - 1

    def chunks(order: Sequence[int], blocks: list[int], k: int) -> tuple[int, ...]:
        return tuple(order[w] * c + k * pieces + p for w in sorted(blocks) for p in range(pieces))

    if kind is not CollectiveKind.ALLGATHER:
        for t in range(steps):
            d = 1 << t
            for k, order in enumerate(orders):
                for v in range(n):
                    u = v ^ d
                    # after t steps v answers for the blocks agreeing with it on bits < t; it passes the half
                    # that disagrees on bit t to u
                    sent = [v ^ (d | j * 2 * d) for j in range(n // (2 * d))]
                    for leg in legs_between(topology, order[v], order[u]):
                        out.append(Transfer(leg.src, leg.dst, chunks(order, sent, k), leg.route, Op.REDUCE, k))
    if kind is not CollectiveKind.REDUCESCATTER:
        for t in range(steps):
            d = n >> (t + 1)
            for k, order in enumerate(orders):
                for v in range(n):
                    u = v ^ d
                    # v holds the blocks agreeing with it on the bits below 2d
                    held = [v ^ (j * 2 * d) for j in range(n // (2 * d))]
                    for leg in legs_between(topology, order[v], order[u]):
                        out.append(Transfer(leg.src, leg.dst, chunks(order, held, k), leg.route, Op.COPY, k))
    return Schedule(Collective(kind, n, c), tuple(out), name="rd", topology=topology.name,
                    notes={"algorithm": "rd", "channels": channels, "pieces": pieces})
