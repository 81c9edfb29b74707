"""NCCL-style ring algorithms: Allgather, ReduceScatter, Allreduce, Broadcast and Reduce.

Every channel runs the same algorithm on its own ring (see
:mod:`taccl_py.baselines.layout`) with an equal share of the data. Allgather
and ReduceScatter take N-1 steps of one block; Allreduce is ReduceScatter then
Allgather; Broadcast and Reduce are chains along the ring, pipelined in pieces.
Transfers are emitted step by step, so each connection sends in step order,
as NCCL's FIFOs do.

When a ring step relays through other GPUs, a relayed partial sum must not
lose the relay's own data: the relay adds its contribution the first time a
chain passes it and only forwards (copies) afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from taccl_py.baselines.common import Leg, NotApplicable, pipeline_pieces
from taccl_py.baselines.layout import RingPlan
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.symmetry import SymmetricSchedule, translation_automorphism
from taccl_py.topology import Topology

__all__ = ["ring_allgather", "ring_allreduce", "ring_broadcast", "ring_reduce", "ring_reducescatter",
           "ring_representatives", "ring_send_waits", "ring_translation", "symmetric_ring"]

_COPY, _REDUCE = Op.COPY, Op.REDUCE


def _chain_ops(legs: Iterable[Leg], first: int) -> list[Op]:
    """Ops of a reduction chain starting at GPU ``first``: reduce where a GPU first contributes, else copy."""
    done = {first}
    ops = []
    for leg in legs:
        ops.append(_COPY if leg.dst in done else _REDUCE)
        done.add(leg.dst)
    return ops


def _pieces_per_channel(chunk_factor: int | None, channels: int, default: int) -> tuple[int, int]:
    """(chunk_factor, pieces per channel); a given chunk factor must split evenly over the channels."""
    if chunk_factor is None:
        return channels * default, default
    if chunk_factor < 1 or chunk_factor % channels:
        raise NotApplicable(f"chunk_factor {chunk_factor} is not a positive multiple of the {channels} channels")
    return chunk_factor, chunk_factor // channels


def _allgather_steps(plan: RingPlan, c: int, pieces: int, out: list[Transfer]) -> None:
    """N-1 steps: at step s, ring position i forwards the block that started at position i - s."""
    n = len(plan.rings[0].order)
    append = out.append
    for s in range(n - 1):
        for k, ring in enumerate(plan.rings):
            order, legs = ring.order, ring.legs
            base = k * pieces
            if pieces == 1 and not ring.relays:
                out.extend([Transfer(leg.src, leg.dst, (order[(i - s) % n] * c + base,), leg.route, _COPY, k)
                            for i, (leg,) in enumerate(legs)])
                continue
            for i in range(n):
                origin = order[(i - s) % n] * c + base
                for leg in legs[i]:
                    src, dst, route = leg.src, leg.dst, leg.route
                    for p in range(pieces):
                        append(Transfer(src, dst, (origin + p,), route, _COPY, k))


def _reducescatter_steps(plan: RingPlan, c: int, pieces: int, out: list[Transfer]) -> None:
    """N-1 steps: the chain of the block owned by position j starts at j+1 and ends at j."""
    n = len(plan.rings[0].order)
    relay_ops: dict[int, list[list[list[Op]]]] = {}
    for k, ring in enumerate(plan.rings):
        if ring.relays:
            per_block = []
            for j in range(n):
                steps = [ring.legs[(j + 1 + s) % n] for s in range(n - 1)]
                flat = _chain_ops((leg for step in steps for leg in step), ring.order[(j + 1) % n])
                split, at = [], 0
                for step in steps:
                    split.append(flat[at:at + len(step)])
                    at += len(step)
                per_block.append(split)
            relay_ops[k] = per_block
    for s in range(n - 1):
        for k, ring in enumerate(plan.rings):
            order, legs = ring.order, ring.legs
            base = k * pieces
            ops = relay_ops.get(k)
            for i in range(n):
                j = (i - s - 1) % n
                block = order[j] * c + base
                step_ops = ops[j][s] if ops is not None else None
                for q, leg in enumerate(legs[i]):
                    op = step_ops[q] if step_ops is not None else _REDUCE
                    src, dst, route = leg.src, leg.dst, leg.route
                    for p in range(pieces):
                        out.append(Transfer(src, dst, (block + p,), route, op, k))


def _schedule(kind: CollectiveKind, plan: RingPlan, c: int, transfers: list[Transfer], topology_name: str,
              notes: dict[str, object], root: int = 0) -> Schedule:
    n = len(plan.rings[0].order)
    return Schedule(Collective(kind, n, c, root), tuple(transfers), name="ring", topology=topology_name,
                    notes={"algorithm": "ring", "channels": plan.channels, **notes})


def ring_allgather(plan: RingPlan, topology_name: str = "", *, chunk_factor: int | None = None) -> Schedule:
    """Ring Allgather: N-1 steps of one block per channel."""
    c, pieces = _pieces_per_channel(chunk_factor, plan.channels, 1)
    out: list[Transfer] = []
    _allgather_steps(plan, c, pieces, out)
    return _schedule(CollectiveKind.ALLGATHER, plan, c, out, topology_name, {"pieces": pieces})


def ring_reducescatter(plan: RingPlan, topology_name: str = "", *, chunk_factor: int | None = None) -> Schedule:
    """Ring ReduceScatter: N-1 reduce steps; rank b ends with block b."""
    c, pieces = _pieces_per_channel(chunk_factor, plan.channels, 1)
    out: list[Transfer] = []
    _reducescatter_steps(plan, c, pieces, out)
    return _schedule(CollectiveKind.REDUCESCATTER, plan, c, out, topology_name, {"pieces": pieces})


def ring_allreduce(plan: RingPlan, topology_name: str = "", *, chunk_factor: int | None = None) -> Schedule:
    """Ring Allreduce = ReduceScatter then Allgather: 2(N-1) steps."""
    c, pieces = _pieces_per_channel(chunk_factor, plan.channels, 1)
    out: list[Transfer] = []
    _reducescatter_steps(plan, c, pieces, out)
    _allgather_steps(plan, c, pieces, out)
    return _schedule(CollectiveKind.ALLREDUCE, plan, c, out, topology_name, {"pieces": pieces})


def ring_send_waits(plan: RingPlan, kind: CollectiveKind, pieces: int = 1) -> dict[tuple[int, int, int], list[bool]]:
    """Per connection ``(src, dst, channel)`` of the ring ``kind`` (Allgather, ReduceScatter or Allreduce, with
    ``pieces`` per channel), whether each of its transfers' first send surely waits for data delivered to the sender,
    in program order: what :func:`taccl_py.msccl.lowering.fewest_connections` reads from the built schedule, known
    here from the plan alone (the rings of 1,024 GPUs carry millions of transfers).

    A chain's first transfer sends data the sender holds (its own block; ReduceScatter's first partial sum) and
    every later one data delivered to it, a relay's leg included; Allreduce's Allgather half sends only delivered
    data. So each connection waits from its second step on, and in its first step wherever a leg is relayed.
    Connections with the same pattern share one list.
    """
    if kind not in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
        raise ValueError(f"no ring send pattern for {kind.value}")
    n = len(plan.rings[0].order)
    later_steps = 2 * n - 3 if kind is CollectiveKind.ALLREDUCE else n - 2
    shared: dict[tuple[tuple[bool, ...], int], list[bool]] = {}
    out: dict[tuple[int, int, int], list[bool]] = {}
    for k, ring in enumerate(plan.rings):
        first_step: dict[tuple[int, int], list[bool]] = {}
        for step in ring.legs:
            for q, leg in enumerate(step):
                first_step.setdefault((leg.src, leg.dst), []).extend([q > 0] * pieces)
        for (src, dst), first in first_step.items():
            key = (tuple(first), len(first) * later_steps)
            waits = shared.get(key)
            if waits is None:
                waits = shared[key] = first + [True] * key[1]
            out[(src, dst, k)] = waits
    return out


def chain_pieces(plan: RingPlan, size_bytes: float | None, step_overhead_us: float) -> int:
    """Pipelining depth of a ring chain (Broadcast, Reduce) for this buffer size."""
    hops = max(sum(len(step) for step in ring.legs) - len(ring.legs[-1]) for ring in plan.rings)
    per_channel = None if size_bytes is None else size_bytes / plan.channels
    return pipeline_pieces(hops, per_channel, plan.us_per_byte * plan.channels,
                           plan.step_latency_us + step_overhead_us)


def ring_broadcast(plan: RingPlan, topology_name: str = "", *, root: int = 0, chunk_factor: int | None = None,
                   size_bytes: float | None = None, step_overhead_us: float = 0.0) -> Schedule:
    """Pipelined chain from ``root`` along each channel's ring."""
    default = chain_pieces(plan, size_bytes, step_overhead_us)
    c, pieces = _pieces_per_channel(chunk_factor, plan.channels, default)
    rings = [ring.rotated(root) for ring in plan.rings]
    out: list[Transfer] = []
    for p in range(pieces):
        for k, ring in enumerate(rings):
            chunk = (k * pieces + p,)
            for step in ring.legs[:-1]:
                for leg in step:
                    out.append(Transfer(leg.src, leg.dst, chunk, leg.route, _COPY, k))
    return _schedule(CollectiveKind.BROADCAST, plan, c, out, topology_name, {"pieces": pieces}, root)


def ring_reduce(plan: RingPlan, topology_name: str = "", *, root: int = 0, chunk_factor: int | None = None,
                size_bytes: float | None = None, step_overhead_us: float = 0.0) -> Schedule:
    """Pipelined reduction chain along each ring, starting after ``root`` and ending at it."""
    default = chain_pieces(plan, size_bytes, step_overhead_us)
    c, pieces = _pieces_per_channel(chunk_factor, plan.channels, default)
    chains = []
    for ring in plan.rings:
        n = len(ring.order)
        start = ring.order[(ring.order.index(root) + 1) % n]
        rotated = ring.rotated(start)
        legs = [leg for step in rotated.legs[:-1] for leg in step]
        chains.append((legs, _chain_ops(legs, start)))
    out: list[Transfer] = []
    for p in range(pieces):
        for k, (legs, ops) in enumerate(chains):
            chunk = (k * pieces + p,)
            for leg, op in zip(legs, ops, strict=True):
                out.append(Transfer(leg.src, leg.dst, chunk, leg.route, op, k))
    return _schedule(CollectiveKind.REDUCE, plan, c, out, topology_name, {"pieces": pieces}, root)


def ring_translation(plan: RingPlan, links: Sequence[int], shift: int) -> bool:
    """Whether moving every GPU by ``shift`` (links as ``links`` maps them) maps every ring onto itself."""
    for ring in plan.rings:
        order, legs = ring.order, ring.legs
        n = len(order)
        position = {g: i for i, g in enumerate(order)}
        p = position[(order[0] + shift) % n]
        for i in range(n):
            j = (i + p) % n
            if order[j] != (order[i] + shift) % n or len(legs[j]) != len(legs[i]):
                return False
            for a, b in zip(legs[i], legs[j], strict=True):
                if tuple(links[x] for x in a.route) != b.route:
                    return False
    return True


def ring_representatives(kind: CollectiveKind, plan: RingPlan, shift: int, topology_name: str = "",
                         pieces: int = 1) -> SymmetricSchedule:
    """A ring Allgather, ReduceScatter or Allreduce (``pieces`` per channel) as representatives of rank-``shift``
    orbits.

    The caller has checked :func:`ring_translation`; the full schedule
    (:func:`taccl_py.symmetry.expand`) has the transfers of :func:`ring_allgather`
    (:func:`ring_reducescatter`, :func:`ring_allreduce`) with ``chunk_factor = channels x pieces``, each step's
    transfers of a channel in orbit order rather than ring order.
    """
    if plan.relays:
        raise NotApplicable("rings that relay through GPUs have no representative form")
    if pieces < 1:
        raise NotApplicable(f"pieces {pieces} is not positive")
    c = plan.channels * pieces
    n = len(plan.rings[0].order)
    out: list[Transfer] = []
    firsts = [[i for i, g in enumerate(ring.order) if g < shift] for ring in plan.rings]

    def steps(block_at: int, op: Op) -> None:
        """N-1 steps; at step s position i sends the block of position i - s - ``block_at``, piece by piece."""
        for s in range(n - 1):
            for k, ring in enumerate(plan.rings):
                order, legs = ring.order, ring.legs
                for i in firsts[k]:
                    (leg,) = legs[i]
                    first = order[(i - s - block_at) % n] * c + k * pieces
                    out.extend(Transfer(leg.src, leg.dst, (first + p,), leg.route, op, k) for p in range(pieces))

    if kind in (CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
        steps(1, _REDUCE)
    if kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE):
        steps(0, _COPY)
    return SymmetricSchedule(Collective(kind, n, c), shift, tuple(out), name="ring", topology=topology_name,
                             notes={"algorithm": "ring", "channels": plan.channels, "pieces": pieces})


def symmetric_ring(topology: Topology, plan: RingPlan, kind: CollectiveKind,
                   pieces: int = 1) -> SymmetricSchedule | None:
    """The ring ``kind`` (``pieces`` per channel) in representative form under the smallest rank shift that keeps
    topology and rings.

    None when the collective is not Allgather, ReduceScatter or Allreduce, the rings relay, or no shift
    below N keeps them: simulate the full schedule then. :func:`taccl_py.symmetry.simulate_symmetric`
    checks the rest (and refuses what it cannot simulate exactly).
    """
    n = topology.num_gpus
    if plan.relays or kind not in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
        return None
    for shift in range(1, n // 2 + 1):
        if n % shift:
            continue
        links = translation_automorphism(topology, shift)
        if links is not None and ring_translation(plan, links, shift):
            return ring_representatives(kind, plan, shift, topology.name, pieces)
    return None
