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
                    root: int = 0, senders: int | None = None) -> Schedule:
    """The direct algorithm for ``kind``; ``channels`` split every message into that many parallel ones.
    ``senders``: only the transfers that leave GPUs below it (the Alltoall, Allgather, ReduceScatter and
    Allreduce without relays: :func:`symmetric_direct`'s representatives), in the same order."""
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

    pairs = _pairs(n) if senders is None else [(s, d) for s, d in _pairs(n) if s < senders]
    if kind in (CollectiveKind.ALLTOALL, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
        op = Op.COPY if kind is CollectiveKind.ALLTOALL else Op.REDUCE
        for s, d in pairs:
            legs = legs_between(topology, s, d)
            for k in range(channels):
                _send(out, legs, block(_first_chunk(collective, op, s, d), k), op, k)
    if kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE):
        for s, d in pairs:
            legs = legs_between(topology, s, d)
            for k in range(channels):
                _send(out, legs, block(_first_chunk(collective, Op.COPY, s, d), k), Op.COPY, k)
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


def _first_chunk(collective: Collective, op: Op, src: int, dst: int) -> int:
    """The first chunk the pair's message carries: the Alltoall's piece for ``dst``, the reduced block ``dst``
    owns, or the copied block of ``src`` (each channel takes the next ``pieces`` of its ``chunk_factor``)."""
    n, c = collective.num_ranks, collective.chunk_factor
    if collective.kind is CollectiveKind.ALLTOALL:
        return (src * n + dst) * c
    return (dst if op is Op.REDUCE else src) * c


def _orbits_are_direct(reps: SymmetricSchedule, topology: Topology, links: list[int]) -> bool:
    """Whether every translate of every representative is the direct schedule's transfer for its pair: the
    representative carries its own pair's chunks on its channel, and each translate's route (the representative's
    moved link by link) is the one :meth:`Topology.gpu_route` gives its pair. The chunks then move with the ranks
    as the direct schedule's do (:func:`taccl_py.symmetry.translate_chunk` shifts the pair or block and keeps the
    piece), and translation keeps the operation and channel. The representatives hold every pair whose sender is
    below the shift once per channel and phase, so their orbits then are the direct schedule's transfers, without
    building them."""
    coll, shift, n = reps.collective, reps.shift, topology.num_gpus
    pieces = coll.chunk_factor // max(1, int(reps.notes.get("channels") or 1))
    for rep in reps.reps:
        first = _first_chunk(coll, rep.op, rep.src, rep.dst) + rep.channel * pieces
        if rep.chunks != tuple(range(first, first + pieces)):
            return False
        route = rep.route
        for a in range(1, reps.orbit_size):
            route = tuple(links[i] for i in route)
            if route != topology.gpu_route((rep.src + a * shift) % n, (rep.dst + a * shift) % n):
                return False
    return True


@lru_cache(maxsize=16)
def symmetric_direct(topology: Topology, kind: CollectiveKind, *, channels: int = 1) -> SymmetricSchedule | None:
    """The direct ``kind`` as representatives of its orbits under the smallest rank shift that keeps the topology
    (the senders below the shift), when their orbits are the direct schedule's transfers exactly; else None (no
    such shift, a rooted collective, a pair that needs a relay, routes that do not move with the ranks under that
    shift: larger shifts are not tried, each check compares every pair's route). Only the representatives are
    built: :func:`_orbits_are_direct` checks their translates pair by pair. Kept per (topology, kind, channels):
    a sweep asks for it at every size.

    Without relays each transfer is one pair's, and the representatives' order (the direct schedule's, senders
    below the shift) expands to an order in which every rank's sends, every rank's receives, every (rank, chunk)'s
    writers and every connection's transfers come as in the direct schedule (peer ``r + 1``, ``r + 2``, ...;
    Reduce before copies): the start and commit rules and the proxies' posts (:func:`taccl_py.runtime.proxy_posts`)
    then see the same program, and the representatives time it exactly
    (:func:`taccl_py.symmetry.simulate_symmetric`; per-transfer times in the representatives' order). A pair that
    needs a relay is refused: its legs leave from the relay GPUs, in an order the expansion does not keep."""
    from taccl_py.symmetry import SymmetricSchedule, symmetry_error, translation_automorphism

    if kind not in (CollectiveKind.ALLTOALL, CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER,
                    CollectiveKind.ALLREDUCE):
        return None
    n = topology.num_gpus
    if missing_direct_route(topology, _pairs(n)) is not None:
        return None
    for shift in range(1, n // 2 + 1):
        if n % shift:
            continue
        links = translation_automorphism(topology, shift)
        if links is None:
            continue
        reps = direct_schedule(topology, kind, channels=channels, senders=shift)
        sym = SymmetricSchedule(reps.collective, shift, reps.transfers, name=reps.name, topology=topology.name,
                                notes=dict(reps.notes))
        if symmetry_error(sym, topology) is None and _orbits_are_direct(sym, topology, links):
            return sym
        return None
    return None
