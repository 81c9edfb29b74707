"""NCCL-style ring Allgather, ReduceScatter and Allreduce built directly as arrays (:class:`CompactSchedule`).

The same transfers, in the same program order, as :func:`~taccl_py.baselines.ring.ring_allgather`,
:func:`~taccl_py.baselines.ring.ring_reducescatter` and :func:`~taccl_py.baselines.ring.ring_allreduce`
with one piece per channel and rings that do not relay (the default plans of DGX clusters), without a
``Transfer`` object per transfer: a 1,024-GPU ring with 8 channels is 8.4 million transfers.
"""

from __future__ import annotations

import numpy as np

from taccl_py.baselines.common import NotApplicable
from taccl_py.baselines.layout import RingPlan, ring_plan
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.compact import CompactSchedule
from taccl_py.errors import InputError
from taccl_py.topology import Topology

__all__ = ["large_ring_arrays", "ring_compact"]


_RING_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE)


def ring_compact(kind: CollectiveKind, plan: RingPlan, topology_name: str = "", pieces: int = 1) -> CompactSchedule:
    """The ring ``kind`` (Allgather, ReduceScatter, Allreduce) as arrays, ``pieces`` per channel.

    Step s of channel k, position i (in that order, as the ring builders emit them): ring
    position i sends to position i + 1 the block of position i - s (Allgather, copy) or
    i - s - 1 (ReduceScatter, reduce), as ``pieces`` transfers of one chunk each (the
    builders' ``chunk_factor = channels x pieces``); Allreduce is ReduceScatter then Allgather.
    Raises :class:`NotApplicable` for rings that relay through GPUs.
    """
    if kind not in _RING_KINDS:
        raise NotApplicable(f"no compact ring {kind.value}")
    if plan.relays:
        raise NotApplicable("rings that relay through GPUs have no compact form here")
    channels = plan.channels
    c = channels * pieces
    n = len(plan.rings[0].order)
    routes: dict[tuple[int, ...], int] = {}
    order = np.empty((channels, n), np.int64)
    src = np.empty((channels, n), np.int32)
    dst = np.empty((channels, n), np.int32)
    route = np.empty((channels, n), np.int32)
    for k, ring in enumerate(plan.rings):
        order[k] = ring.order
        for i, (leg,) in enumerate(ring.legs):
            src[k, i], dst[k, i] = leg.src, leg.dst
            route[k, i] = routes.setdefault(leg.route, len(routes))
    steps = np.arange(n - 1)
    positions = np.arange(n)
    phases = []
    if kind in (CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
        phases.append((1, True))
    if kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE):
        phases.append((0, False))
    first = (np.arange(channels) * pieces)[:, None, None, None] + np.arange(pieces)  # (channel, 1, 1, piece)
    chunk_parts = []
    for back, _ in phases:
        origin = (positions[None, :] - steps[:, None] - back) % n  # (step, position)
        blocks = order[:, origin][..., None] * c + first  # (channel, step, position, piece)
        chunk_parts.append(blocks.transpose(1, 0, 2, 3).ravel())
    per_phase = (n - 1) * channels * n * pieces
    count = per_phase * len(phases)
    chunks = np.concatenate(chunk_parts).astype(np.int32)
    reduce = np.concatenate([np.full(per_phase, is_reduce) for _, is_reduce in phases])
    tile = len(phases) * (n - 1)

    def per_transfer(values: np.ndarray) -> np.ndarray:
        """A (channel, position) table repeated over the pieces, then over every step of every phase."""
        return np.tile(np.repeat(values.ravel(), pieces), tile)

    return CompactSchedule(
        Collective(kind, n, c), per_transfer(src), per_transfer(dst),
        per_transfer(np.repeat(np.arange(channels, dtype=np.int32), n)), reduce,
        np.arange(count + 1, dtype=np.int64), chunks, per_transfer(route), tuple(routes), name="ring",
        topology=topology_name, notes={"algorithm": "ring", "channels": channels, "pieces": pieces})


def large_ring_arrays(topology: Topology, kind: CollectiveKind, algorithm: str, channels: int | None,
                      pieces: int = 1) -> CompactSchedule | None:
    """The ring baseline ``algorithm`` (``pieces`` per channel) as arrays when it is a ring Allgather,
    ReduceScatter or Allreduce of at least :data:`~taccl_py.fast_sim.FAST_MIN_TRANSFERS` transfers that does
    not relay; None otherwise. Raises :class:`InputError` when simulating it in full cannot fit in the memory
    available (:func:`~taccl_py.fast_sim.full_simulation_error`), rather than let the system kill the process."""
    from taccl_py.fast_sim import FAST_MIN_TRANSFERS, full_simulation_error

    n = topology.num_gpus
    if algorithm != "ring" or kind not in _RING_KINDS or n * (n - 1) < FAST_MIN_TRANSFERS:
        return None
    try:
        plan = ring_plan(topology, channels)
    except NotApplicable:
        return None
    if plan.relays:  # no compact form (ring_compact refuses it)
        return None
    phases = 2 if kind is CollectiveKind.ALLREDUCE else 1
    problem = full_simulation_error(n * (n - 1) * plan.channels * pieces * phases)
    if problem is not None:
        in_pieces = f" in {pieces} pieces per channel" if pieces > 1 else ""
        raise InputError(f"the ring {kind.value} on {plan.channels} channels{in_pieces}: {problem}; try fewer "
                         "channels (--channels)", where=topology.name)
    return ring_compact(kind, plan, topology.name, pieces)
