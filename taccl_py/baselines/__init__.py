"""NCCL-style baselines, emitted as schedules so they are judged exactly like synthesized ones.

``baseline(topology, kind, "ring" | "tree" | "direct" | "rd" | "oneshot" | "hier" | "hier-lb")`` builds one
(``oneshot``: the latency-optimal small collectives of :mod:`taccl_py.baselines.oneshot`);
``applicable_baselines(topology, kind)`` lists those that can run. ``multicast``, ``nvls`` and
``sharp`` use switch multicast and in-network reduction (:mod:`taccl_py.baselines.offload`) and run
only where the topology's switches carry those flags. On topologies with dimensions,
``hier`` and ``hier-lb`` run per-dimension phases (:mod:`taccl_py.baselines.hierarchical`). Rings and
trees pick their channel count to spread the load over the links (one ring per
NIC rail on DGX A100 clusters, several disjoint rings on DGX-1); the pipelined
ones (Broadcast, Reduce, trees) pick their depth from ``size_bytes`` when given.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from taccl_py.baselines.common import Leg, NotApplicable
from taccl_py.baselines.direct import check_direct, direct_schedule
from taccl_py.baselines.hierarchical import check_hierarchical, hierarchical_schedule
from taccl_py.baselines.layout import Ring, RingPlan, ring_plan
from taccl_py.baselines.offload import OFFLOAD_ALGORITHMS, check_offload, offload_schedule
from taccl_py.baselines.oneshot import check_oneshot, oneshot_schedule
from taccl_py.baselines.recursive import check_recursive, recursive_schedule
from taccl_py.baselines.ring import (
    ring_allgather,
    ring_allreduce,
    ring_broadcast,
    ring_reduce,
    ring_reducescatter,
)
from taccl_py.baselines.tree import TreePlan, tree_allreduce, tree_broadcast, tree_plan, tree_reduce
from taccl_py.collectives import CollectiveKind, parse_collective
from taccl_py.errors import InputError
from taccl_py.schedule import Schedule
from taccl_py.topology import Topology

__all__ = ["ALGORITHMS", "BUILT_WITHOUT_STEP_OVERHEAD", "MEMO_TRANSFERS", "Leg", "NotApplicable", "Ring", "RingPlan", "TreePlan",
           "applicable_baselines", "baseline", "forget_built", "ring_plan", "tree_plan"]

ALGORITHMS = ("ring", "tree", "direct", "rd", "oneshot", "hier", "hier-lb", *OFFLOAD_ALGORITHMS)
"""Baseline names, in the order tables list them (the last ones need multicast or reduce switches)."""
BUILT_WITHOUT_STEP_OVERHEAD = frozenset({"direct", "rd", "hier", "hier-lb", *OFFLOAD_ALGORITHMS})
"""Baselines whose build takes no ``step_overhead_us``: one schedule serves every overhead (and so every protocol a
runtime model times it with)."""

_RING_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE,
               CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
_TREE_KINDS = (CollectiveKind.ALLREDUCE, CollectiveKind.BROADCAST, CollectiveKind.REDUCE)


def _kind(kind: CollectiveKind | str) -> CollectiveKind:
    return kind if isinstance(kind, CollectiveKind) else parse_collective(kind)


def _check_args(topology: Topology, algorithm: str, channels: int | None, chunk_factor: int | None,
                root: int) -> None:
    if algorithm not in ALGORITHMS:
        raise InputError(f"unknown baseline {algorithm!r} (choose one of: {', '.join(ALGORITHMS)})",
                         where="--algorithm")
    if channels is not None and (isinstance(channels, bool) or not 1 <= channels <= 64):
        raise InputError(f"must be in 1..64 (got {channels!r})", where="--channels")
    if chunk_factor is not None and chunk_factor < 1:
        raise InputError(f"must be >= 1 (got {chunk_factor!r})", where="chunk_factor")
    if not 0 <= root < topology.num_gpus:
        raise InputError(f"must be a rank in 0..{topology.num_gpus - 1} (got {root})", where="--root")


def _orders(topology: Topology, channels: int | None) -> list[tuple[int, ...]]:
    """Virtual-rank orders for recursive algorithms: along the rings, machines contiguous."""
    plan = ring_plan(topology, channels)
    count = channels or 1
    orders = []
    for k in range(count):
        orders.append(_machine_aligned(plan.rings[k % plan.channels], plan))
    return orders


def _machine_aligned(ring: Ring, plan: RingPlan) -> tuple[int, ...]:
    """Rotate a ring so it starts where it enters the first machine (machines then sit contiguously)."""
    if len(plan.groups) == 1:
        return ring.order
    members = set(plan.groups[0])
    n = len(ring.order)
    for i, g in enumerate(ring.order):
        if g in members and ring.order[(i - 1) % n] not in members:
            return ring.rotated(g).order
    return ring.order


MEMO_TRANSFERS = 200_000
""":func:`baseline` keeps the baselines it built last, up to this many transfers in all (each of at most a quarter of
it): a runtime fit or a fidelity check builds the same few once per row and per iteration (an NVLS fit: 580 builds
of 5 schedules). Schedules are immutable, so the one kept is the one returned."""

_built: OrderedDict[tuple[object, ...], Schedule] = OrderedDict()
_built_transfers = [0]
_built_lock = threading.Lock()


def baseline(topology: Topology, kind: CollectiveKind | str, algorithm: str, *, channels: int | None = None,
             chunk_factor: int | None = None, root: int = 0, size_bytes: float | None = None,
             step_overhead_us: float = 0.0, form: str | None = None, pieces: int | None = None) -> Schedule:
    """The NCCL-style ``algorithm`` (ring, tree, direct, rd, oneshot) for ``kind`` on ``topology``.

    ``channels``: rings / trees / parallel copies (chosen to spread the load when None).
    ``chunk_factor``: chunks per block of the collective (a multiple of the channels).
    ``size_bytes`` and ``step_overhead_us`` only tune the pipelining depth.
    ``pieces``: the tree's chunk steps per channel, given (NCCL's own count: the calibrated prediction's), not
    tuned; trees only, and not with ``chunk_factor``.
    ``form``: the ``oneshot`` Allreduce's form (:data:`~taccl_py.baselines.oneshot.ALLREDUCE_FORMS`; None: the
    fastest on the raw links).
    Raises :class:`NotApplicable` (an :class:`InputError`) when it cannot run here.
    """
    kind = _kind(kind)
    _check_args(topology, algorithm, channels, chunk_factor, root)
    if algorithm in BUILT_WITHOUT_STEP_OVERHEAD:
        step_overhead_us = 0.0  # one memo entry for every overhead
    key = (topology, kind, algorithm, channels, chunk_factor, root, size_bytes, step_overhead_us, form, pieces)
    with _built_lock:
        kept = _built.get(key)
        if kept is not None:
            _built.move_to_end(key)
            return kept
    schedule = _build(topology, kind, algorithm, channels, chunk_factor, root, size_bytes, step_overhead_us, form,
                      pieces)
    count = len(schedule.transfers)
    if count <= MEMO_TRANSFERS // 4:
        with _built_lock:
            if key not in _built:
                _built[key] = schedule
                _built_transfers[0] += count
                while _built_transfers[0] > MEMO_TRANSFERS:
                    _, dropped = _built.popitem(last=False)
                    _built_transfers[0] -= len(dropped.transfers)
    return schedule


def forget_built() -> None:
    """Drop the baselines :func:`baseline` keeps, so that the next call builds again (a benchmark timing builds)."""
    with _built_lock:
        _built.clear()
        _built_transfers[0] = 0


def _build(topology: Topology, kind: CollectiveKind, algorithm: str, channels: int | None, chunk_factor: int | None,
           root: int, size_bytes: float | None, step_overhead_us: float, form: str | None,
           pieces: int | None) -> Schedule:
    """:func:`baseline`, built."""
    if form is not None and algorithm != "oneshot":
        raise InputError(f"only the oneshot baseline has forms (got {algorithm!r})", where="form")
    if pieces is not None and algorithm != "tree":
        raise InputError(f"only the tree baseline takes pieces (got {algorithm!r})", where="pieces")
    name = topology.name
    if algorithm == "ring":
        if kind not in _RING_KINDS:
            raise NotApplicable(f"there is no ring {kind.value} baseline (try direct)", where=name)
        plan = ring_plan(topology, channels)
        if kind is CollectiveKind.ALLGATHER:
            return ring_allgather(plan, name, chunk_factor=chunk_factor)
        if kind is CollectiveKind.REDUCESCATTER:
            return ring_reducescatter(plan, name, chunk_factor=chunk_factor)
        if kind is CollectiveKind.ALLREDUCE:
            return ring_allreduce(plan, name, chunk_factor=chunk_factor)
        if kind is CollectiveKind.BROADCAST:
            return ring_broadcast(plan, name, root=root, chunk_factor=chunk_factor, size_bytes=size_bytes,
                                  step_overhead_us=step_overhead_us)
        return ring_reduce(plan, name, root=root, chunk_factor=chunk_factor, size_bytes=size_bytes,
                           step_overhead_us=step_overhead_us)
    if algorithm == "tree":
        if kind not in _TREE_KINDS:
            raise NotApplicable(f"there is no tree {kind.value} baseline (trees run allreduce, broadcast, reduce)",
                                where=name)
        tplan = tree_plan(topology, kind, root if kind is not CollectiveKind.ALLREDUCE else 0, channels)
        n = topology.num_gpus
        if kind is CollectiveKind.ALLREDUCE:
            return tree_allreduce(tplan, n, name, chunk_factor=chunk_factor, size_bytes=size_bytes,
                                  step_overhead_us=step_overhead_us, pieces=pieces)
        if kind is CollectiveKind.BROADCAST:
            return tree_broadcast(tplan, n, name, root=root, chunk_factor=chunk_factor, size_bytes=size_bytes,
                                  step_overhead_us=step_overhead_us, pieces=pieces)
        return tree_reduce(tplan, n, name, root=root, chunk_factor=chunk_factor, size_bytes=size_bytes,
                           step_overhead_us=step_overhead_us, pieces=pieces)
    if algorithm == "direct":
        return direct_schedule(topology, kind, channels=channels or 1, chunk_factor=chunk_factor, root=root)
    if algorithm in ("hier", "hier-lb"):  # per-dimension phases; channels come from the dimension algorithms
        return hierarchical_schedule(topology, kind, balanced=algorithm == "hier-lb", size_bytes=size_bytes)
    if algorithm in OFFLOAD_ALGORITHMS:
        return offload_schedule(topology, kind, algorithm, root=root, chunk_factor=chunk_factor, size_bytes=size_bytes)
    if algorithm == "oneshot":
        return oneshot_schedule(topology, kind, root=root, chunk_factor=chunk_factor, channels=channels,
                                size_bytes=size_bytes, step_overhead_us=step_overhead_us, form=form)
    return recursive_schedule(topology, kind, _orders(topology, channels), chunk_factor=chunk_factor)


def applicable_baselines(topology: Topology, kind: CollectiveKind | str, *, root: int = 0,
                         only: Sequence[str] | None = None) -> list[str]:
    """Names of the baselines that can run ``kind`` on ``topology`` (in :data:`ALGORITHMS` order); with ``only``,
    of those names alone (the others are not checked: a ring plan on 1,024 GPUs takes minutes)."""
    kind = _kind(kind)
    names = []
    for algorithm in ALGORITHMS:
        if only is not None and algorithm not in only:
            continue
        try:
            if algorithm == "ring":
                if kind not in _RING_KINDS:
                    continue
                ring_plan(topology, None)  # the arguments baseline() passes: one lru_cache entry, not two
            elif algorithm == "tree":
                if kind not in _TREE_KINDS:
                    continue
                tree_plan(topology, kind, root if kind is not CollectiveKind.ALLREDUCE else 0, None)
            elif algorithm == "direct":
                check_direct(topology, kind, root)
            elif algorithm in ("hier", "hier-lb"):
                check_hierarchical(topology, kind)
            elif algorithm == "oneshot":
                check_oneshot(topology, kind)
            elif algorithm in OFFLOAD_ALGORITHMS:
                check_offload(topology, kind, algorithm, root)
            else:
                check_recursive(topology, kind, _orders(topology, None))
        except NotApplicable:
            continue
        names.append(algorithm)
    return names
