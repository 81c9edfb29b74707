"""Direct (pairwise) algorithms: every rank sends straight to every rank that needs its data.

Alltoall sends each rank's piece for every peer at once (as NCCL's grouped
point-to-point calls do); Allgather sends every block to every rank;
ReduceScatter sends every contribution to the block's owner; Allreduce is
ReduceScatter then Allgather; Broadcast and Reduce are a star around the root.
Peers are visited in the order rank+1, rank+2, ... as NCCL does. Copies may
relay through GPUs where two GPUs have no direct route; reductions need
direct routes (a relayed partial sum would overwrite the relay's own data).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import TYPE_CHECKING

from taccl_py.baselines.common import Leg, NotApplicable, legs_between
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.topology import Topology

if TYPE_CHECKING:
    from taccl_py.symmetry import SymmetricSchedule

__all__ = ["direct_schedule", "missing_direct_route", "symmetric_direct"]


def missing_direct_route(topology: Topology, pairs: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The first (src, dst) pair without a route through switches only, or None."""
    for src, dst in pairs:
        if topology.gpu_route(src, dst) is None:
            return src, dst
    return None


def _pairs(n: int) -> list[tuple[int, int]]:
    return [(s, (s + offset) % n) for offset in range(1, n) for s in range(n)]


def _require_direct(topology: Topology, pairs: list[tuple[int, int]], kind: CollectiveKind) -> None:
    missing = missing_direct_route(topology, pairs)
    if missing is not None:
        raise NotApplicable(f"direct {kind.value} needs a direct route from GPU {missing[0]} to GPU {missing[1]} "
                            "(a relay would overwrite the relay's own data)", where=topology.name)


def _send(out: list[Transfer], legs: tuple[Leg, ...], chunks: tuple[int, ...], op: Op, channel: int) -> None:
    for leg in legs:
        out.append(Transfer(leg.src, leg.dst, chunks, leg.route, op, channel))


def check_direct(topology: Topology, kind: CollectiveKind, root: int = 0) -> None:
    """Raise :class:`NotApplicable` when the direct algorithm cannot run ``kind`` here."""
    n = topology.num_gpus
    if n < 2:
        raise NotApplicable("a direct algorithm needs at least 2 GPUs", where=topology.name)
    if kind in (CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
        _require_direct(topology, _pairs(n), kind)
    elif kind is CollectiveKind.REDUCE:
        _require_direct(topology, [(s, root) for s in range(n) if s != root], kind)


def direct_schedule(topology: Topology, kind: CollectiveKind, *, channels: int = 1, chunk_factor: int | None = None,
                    root: int = 0) -> Schedule:
    """The direct algorithm for ``kind``; ``channels`` split every message into that many parallel ones."""
    check_direct(topology, kind, root)
    n = topology.num_gpus
    c = chunk_factor if chunk_factor is not None else channels
    if c < 1 or c % channels:
        raise NotApplicable(f"chunk_factor {c} is not a positive multiple of the {channels} channels")
    pieces = c // channels
    collective = Collective(kind, n, c, root)
    out: list[Transfer] = []

    def block(first: int, k: int) -> tuple[int, ...]:
        return tuple(range(first + k * pieces, first + (k + 1) * pieces))

    pairs = _pairs(n)
    if kind is CollectiveKind.ALLTOALL:
        for s, d in pairs:
            legs = legs_between(topology, s, d)
            for k in range(channels):
                _send(out, legs, block((s * n + d) * c, k), Op.COPY, k)
    elif kind in (CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
        for s, d in pairs:
            legs = legs_between(topology, s, d)
            for k in range(channels):
                _send(out, legs, block(d * c, k), Op.REDUCE, k)
    if kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE):
        for s, d in pairs:
            legs = legs_between(topology, s, d)
            for k in range(channels):
                _send(out, legs, block(s * c, k), Op.COPY, k)
    elif kind is CollectiveKind.BROADCAST:
        for d in range(n):
            if d != root:
                legs = legs_between(topology, root, d)
                for k in range(channels):
                    _send(out, legs, block(0, k), Op.COPY, k)
    elif kind is CollectiveKind.REDUCE:
        for s in range(n):
            if s != root:
                legs = legs_between(topology, s, root)
                for k in range(channels):
                    _send(out, legs, block(0, k), Op.REDUCE, k)
    return Schedule(collective, tuple(out), name="direct", topology=topology.name,
                    notes={"algorithm": "direct", "channels": channels, "pieces": pieces})


@lru_cache(maxsize=16)
def symmetric_direct(topology: Topology, kind: CollectiveKind, *, channels: int = 1) -> SymmetricSchedule | None:
    """The direct ``kind`` as representatives of its orbits under the smallest rank shift that keeps the topology
    (the senders below the shift), when their orbits are the direct schedule's transfers exactly; else None (no
    such shift, a rooted collective, a pair that needs a relay, routes that do not move with the ranks under that
    shift: larger shifts are not tried, each check costs the whole schedule). Kept per (topology, kind, channels):
    a sweep asks for it at every size.

    Without relays each transfer is one pair's, and the representatives' order (the direct schedule's, senders
    below the shift) expands to an order in which every rank's sends, every rank's receives, every (rank, chunk)'s
    writers and every connection's transfers come as in the direct schedule (peer ``r + 1``, ``r + 2``, ...;
    Reduce before copies): the start and commit rules and the proxies' posts (:func:`taccl_py.runtime.proxy_posts`)
    then see the same program, and the representatives time it exactly
    (:func:`taccl_py.symmetry.simulate_symmetric`; per-transfer times in the representatives' order). A pair that
    needs a relay is refused: its legs leave from the relay GPUs, in an order the expansion does not keep."""
    from taccl_py.symmetry import SymmetricSchedule, expand, symmetry_error, translation_automorphism

    if kind not in (CollectiveKind.ALLTOALL, CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER,
                    CollectiveKind.ALLREDUCE):
        return None
    n = topology.num_gpus
    if missing_direct_route(topology, _pairs(n)) is not None:
        return None
    full = direct_schedule(topology, kind, channels=channels)
    for shift in range(1, n // 2 + 1):
        if n % shift or translation_automorphism(topology, shift) is None:
            continue
        sym = SymmetricSchedule(full.collective, shift, tuple(t for t in full.transfers if t.src < shift),
                                name=full.name, topology=topology.name, notes=dict(full.notes))
        if symmetry_error(sym, topology) is None and \
                Counter(expand(sym, topology).transfers) == Counter(full.transfers):
            return sym
        return None
    return None
