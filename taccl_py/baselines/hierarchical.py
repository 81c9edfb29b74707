"""Hierarchical (per-dimension) collectives, as ASTRA-sim and NCCL run them on multi-dimensional networks.

A topology with dimensions (``Topology.dimensions``: ASTRA-sim networks, tori, meshes, DGX clusters as
GPUs-in-a-machine x machines) runs a collective one dimension at a time. ReduceScatter reduces along
dimension 0, then 1, ...: after the phase on dimension d a GPU holds, summed over its group along every
dimension done so far, the blocks that agree with its own coordinates on those dimensions. Allgather
runs the other way (alone: the highest dimension first, as ASTRA-sim orders it). Allreduce is
ReduceScatter up to the last dimension, an Allreduce phase on the last, and Allgather back down.
Each dimension runs its own algorithm (:class:`~taccl_py.baselines.dimension_phases.DimAlgorithm`).

The buffer is cut into ``splits`` parts (ASTRA-sim's ``preferred-dataset-splits``) that go through the
phases one after another, so the dimensions work on different parts at once. When each phase starts is
played by the event model of :mod:`~taccl_py.baselines.dimension_pipeline` (every dimension a server
with one or more channel slots); the order in which phases start there is the program order of the
schedule, so every connection sends in it.

``hier`` is ASTRA-sim's: every split in the same dimension order, one slot per dimension, the
earliest-startable phase first. ``hier-lb`` is load-balanced (the idea of Themis, ISCA 2022, made
exact): the splits take dimension orders in the proportions of the linear program that balances the
dimensions' busy time (:func:`~taccl_py.baselines.dimension_pipeline.order_mix`), a waiting phase goes
first when its split is furthest behind that fluid plan (earliest deadline), and a dimension may run
two or three phases at once on separate channels so its latency hides behind the bytes of the phase
before; an Allreduce split reduces last, and gathers first, along the dimension its order ends with.

Parameters not given are chosen from ``size_bytes`` (without one, for a 64 MiB buffer) with the model:
per dimension the algorithm with the least estimated time, then the number of splits, and for
``hier-lb`` the channel slots per dimension and the priority rule. Chunks: ``chunk_factor = splits x
lanes`` (two lanes when a dimension runs a bidirectional ring or a double binary tree); chunk
``b*c + s*lanes + l`` is lane l of split s of block b.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from taccl_py.baselines.common import NotApplicable
from taccl_py.baselines.dimension_phases import (
    DimAlgorithm,
    GroupBlocks,
    PhaseKind,
    algorithm_problem,
    group_steps,
    parse_dim_algorithm,
)
from taccl_py.baselines.dimension_pipeline import (
    PhaseRun,
    PhaseWork,
    Pipeline,
    order_mix,
    orders_for_splits,
    run_pipeline,
)
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.msccl.ir import MAX_NODES_PER_RANK
from taccl_py.msccl.selection import size_rule
from taccl_py.schedule import Schedule, Transfer
from taccl_py.topology import Topology

__all__ = ["HIERARCHICAL_KINDS", "HierarchicalPlan", "check_hierarchical", "hierarchical_plan",
           "hierarchical_schedule"]

HIERARCHICAL_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE)
SPLIT_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)
"""Dataset splits the automatic choice considers."""
SLOT_CHOICES = (1, 2, 3)
"""Channel slots per dimension the automatic choice of ``hier-lb`` considers."""
MAX_SLOTS = 4
"""Most channel slots a dimension may be given."""
EDF_STAGGER = (0.0, 1.0)
"""Priority rules ``hier-lb`` tries: how far (in splits of its order) a later phase's deadline trails."""
REFERENCE_BYTES = float(64 << 20)
"""Without ``size_bytes`` the parameters are chosen for a buffer of this size (64 MiB)."""
MAX_TRANSFERS = 600_000
"""Split counts whose schedule would exceed this many transfers are not considered."""
MIN_SPLIT_BYTES = 4096
"""A split is never smaller than this (per GPU block), unless one split already is."""
COST_GROUPS = 16
"""The estimate looks at this many groups of a dimension at most (evenly spaced)."""
_TYPE_SIZE = 4
"""Element size the runtime-selection preference assumes (float32, nccl-tests' default)."""


@dataclass(frozen=True)
class HierarchicalPlan:
    """What a hierarchical schedule runs: per dimension an algorithm and channel slots, the splits, each
    split's dimension order, and the program (which phase of which split starts when, on which slot).

    ``orders[s]`` lists the dimensions (size > 1) in the order split s reduces them (Allgather alone:
    gathers them). ``estimate_us`` is the model's makespan at ``size_bytes`` (None without a size).
    """

    kind: CollectiveKind
    algorithms: tuple[DimAlgorithm, ...]
    splits: int
    orders: tuple[tuple[int, ...], ...]
    balanced: bool
    lanes: int
    size_bytes: float | None = None
    estimate_us: float | None = None
    slots: tuple[int, ...] = ()
    """Channel slots per dimension (empty: one each)."""
    program: tuple[PhaseRun, ...] = ()
    """The phases in start order (empty: recomputed with one slot per dimension, earliest first)."""
    rule: str = "fifo"
    """How waiting phases were prioritized: ``fifo`` (lowest split first) or ``edf`` (deadline of the order mix)."""

    def order_counts(self) -> list[tuple[tuple[int, ...], int]]:
        """Each distinct dimension order with the number of splits that take it."""
        return sorted((o, self.orders.count(o)) for o in set(self.orders))

    def parameters(self) -> dict[str, Any]:
        """The plan as the report and ``--json`` show it."""
        counts = self.order_counts()
        return {"algorithms": [a.value for a in self.algorithms], "splits": self.splits,
                "orders": [list(o) for o, _ in counts], "order_splits": [n for _, n in counts],
                "balanced": self.balanced, "lanes": self.lanes,
                "channels": list(self.slots or (1,) * len(self.algorithms)), "rule": self.rule,
                "estimate_us": self.estimate_us}

    def describe(self) -> str:
        """One line: ``per dimension ring, direct; 4 splits; dimension order 0,1``."""
        counts = self.order_counts()
        if len(counts) > 1:
            orders = " / ".join(f"{','.join(map(str, o))} x{n}" for o, n in counts)
            what = "dimension orders"
        else:
            orders, what = ",".join(map(str, counts[0][0])), "dimension order"
        text = (f"per dimension {', '.join(a.value for a in self.algorithms)}; {self.splits} "
                f"split{'s' if self.splits != 1 else ''}; {what} {orders}")
        if any(n > 1 for n in self.slots):
            text += f"; channels per dimension {','.join(map(str, self.slots))}"
        return text


# ----------------------------------------------------------------- the phases
@dataclass(frozen=True)
class _Phase:
    """One phase of one split: the dimension, what it does, and the dimensions already reduced or gathered."""

    dim: int
    kind: PhaseKind
    done: frozenset[int]


def _phases(kind: CollectiveKind, order: Sequence[int]) -> list[_Phase]:
    """The phases of one split whose dimension order is ``order``."""
    if kind is CollectiveKind.REDUCESCATTER:
        return [_Phase(d, PhaseKind.REDUCESCATTER, frozenset(order[:k])) for k, d in enumerate(order)]
    if kind is CollectiveKind.ALLGATHER:
        return [_Phase(d, PhaseKind.ALLGATHER, frozenset(order[:k])) for k, d in enumerate(order)]
    up = [_Phase(d, PhaseKind.REDUCESCATTER, frozenset(order[:k])) for k, d in enumerate(order[:-1])]
    top = _Phase(order[-1], PhaseKind.ALLREDUCE, frozenset(order[:-1]))
    down = [_Phase(d, PhaseKind.ALLGATHER, frozenset(order[k + 1:])) for k, d in reversed(list(
        enumerate(order[:-1])))]
    return [*up, top, *down]


def _active_dims(topology: Topology) -> tuple[int, ...]:
    return tuple(d for d, dim in enumerate(topology.dimensions) if dim.size > 1)


def _strides(topology: Topology) -> list[int]:
    return [math.prod(d.size for d in topology.dimensions[:k]) for k in range(len(topology.dimensions))]


def _group_blocks(topology: Topology, phase: _Phase, group: tuple[int, ...], chunk_of: Sequence[Sequence[int]],
                  active: Sequence[int]) -> GroupBlocks:
    """Group block j of this group: blocks equal to the group's coordinates on the fixed dimensions, j on the
    phase's dimension, anything on the free ones (the dimensions not yet reduced, or already gathered).

    ``chunk_of[l][b]`` is the chunk id of lane l of block b in this split.
    """
    strides = _strides(topology)
    d = phase.dim
    free = _free_dims(phase, active)
    coords = topology.coordinates(group[0])
    base = sum(coords[e] * strides[e] for e in active if e != d and e not in free)
    offsets = [0]
    for e in free:
        offsets = [o + c * strides[e] for o in offsets for c in range(topology.dimensions[e].size)]
    offsets.sort()
    blocks = []
    for j in range(topology.dimensions[d].size):
        first = base + j * strides[d]
        blocks.append(tuple(tuple(lane[first + o] for o in offsets) for lane in chunk_of))
    return GroupBlocks(group, tuple(blocks))


def _free_dims(phase: _Phase, active: Sequence[int]) -> list[int]:
    """Dimensions a group block spans: not yet reduced (or already gathered), other than the phase's own."""
    if phase.kind is PhaseKind.ALLGATHER:
        return [e for e in active if e in phase.done]
    return [e for e in active if e != phase.dim and e not in phase.done]


@lru_cache(maxsize=256)
def _groups(topology: Topology, dim: int) -> tuple[tuple[int, ...], ...]:
    """Every group along ``dim``, by their first member."""
    return tuple(sorted({topology.dimension_group(x, dim) for x in topology.gpus}))


# ------------------------------------------------------------ estimated costs
@dataclass(frozen=True)
class _StepCost:
    latency_us: float
    us_per_byte: float
    """Per byte of one group block: the busiest link's load in group blocks over its bandwidth."""
    transfers: int
    """Transfers of this step over all groups of the dimension."""
    relays: bool
    """Some message of the step relays through another GPU."""


def _step_costs(topology: Topology, dim: int, algorithm: DimAlgorithm, phase: PhaseKind, lanes: int
                ) -> tuple[_StepCost, ...]:
    """Alpha-beta cost of every step of one phase on every group at once (unit group blocks)."""
    return _cached_step_costs(topology, dim, algorithm, phase, lanes)


@lru_cache(maxsize=256)
def _cached_step_costs(topology: Topology, dim: int, algorithm: DimAlgorithm, phase: PhaseKind, lanes: int
                       ) -> tuple[_StepCost, ...]:
    n = topology.dimensions[dim].size
    unit = GroupBlocks((), tuple(tuple((j * lanes + lane,) for lane in range(lanes)) for j in range(n)))
    all_groups = _groups(topology, dim)
    groups = all_groups
    if len(groups) > COST_GROUPS:  # evenly spaced sample; links shared between groups may be undercounted
        groups = tuple(groups[k * len(groups) // COST_GROUPS] for k in range(COST_GROUPS))
    per_group = [group_steps(topology, algorithm, phase, GroupBlocks(members, unit.blocks)) for members in groups]
    latency_of = [link.latency for link in topology.links]
    us_per_byte_of = [1.0 / (link.bandwidth * 1e3) for link in topology.links]
    costs = []
    for k in range(len(per_group[0])):
        load: dict[int, float] = {}
        for steps in per_group:
            for send in steps[k]:
                for t in send:
                    units = len(t.chunks) / lanes
                    for li in t.route:
                        load[li] = load.get(li, 0.0) + units
        latency = per_byte = 0.0
        for steps in per_group:  # a relayed send stores and forwards: its legs add up
            for send in steps[k]:
                latency = max(latency, sum(latency_of[li] for t in send for li in t.route))
                per_byte = max(per_byte, sum(max(load[li] * us_per_byte_of[li] for li in t.route) for t in send))
        sample = sum(len(send) for send in per_group[0][k])
        relays = any(len(send) > 1 for steps in per_group for send in steps[k])
        costs.append(_StepCost(latency, per_byte, sample * len(all_groups), relays))
    return tuple(costs)


def _group_block_bytes(topology: Topology, phase: _Phase, block_bytes: float, active: Sequence[int]) -> float:
    return block_bytes * math.prod(topology.dimensions[e].size for e in _free_dims(phase, active))


def _phase_work(topology: Topology, algorithms: Sequence[DimAlgorithm], phase: _Phase, lanes: int,
                block_bytes: float, active: Sequence[int]) -> PhaseWork:
    """One phase of one split whose blocks carry ``block_bytes`` each, as the pipeline model sees it."""
    group_block = _group_block_bytes(topology, phase, block_bytes, active)
    steps = _step_costs(topology, phase.dim, algorithms[phase.dim], phase.kind, lanes)
    return PhaseWork(phase.dim, tuple((c.latency_us, group_block * c.us_per_byte) for c in steps))


def _phase_us(topology: Topology, algorithms: Sequence[DimAlgorithm], phase: _Phase, lanes: int,
              block_bytes: float, active: Sequence[int]) -> float:
    """Estimated time of one phase of one split alone on its dimension."""
    return sum(lat + data for lat, data in _phase_work(topology, algorithms, phase, lanes, block_bytes,
                                                       active).steps)


# ------------------------------------------------------------------- planning
def _lanes(algorithms: Sequence[DimAlgorithm]) -> int:
    return 2 if any(a.uses_lanes for a in algorithms) else 1


def check_hierarchical(topology: Topology, kind: CollectiveKind) -> None:
    """Raise :class:`NotApplicable` unless a hierarchical ``kind`` can run on ``topology``."""
    if kind not in HIERARCHICAL_KINDS:
        raise NotApplicable(f"hierarchical baselines run allgather, reducescatter and allreduce, not {kind.value}",
                            where=topology.name)
    if not topology.dimensions:
        raise NotApplicable("the topology has no dimensions (import an ASTRA-sim network, generate a torus or "
                            "mesh, or use a DGX A100/H100 cluster)", where=topology.name)
    if not _active_dims(topology):
        raise NotApplicable("every dimension has size 1", where=topology.name)
    for d in _active_dims(topology):
        if not _candidates(topology, kind, d):
            problem = algorithm_problem(topology, _groups(topology, d), DimAlgorithm.RING, PhaseKind.ALLGATHER)
            raise NotApplicable(f"no algorithm runs along dimension {d}: {problem}", where=topology.name)


def _candidates(topology: Topology, kind: CollectiveKind, dim: int) -> list[DimAlgorithm]:
    """Algorithms that can run every phase ``dim`` may get (an Allreduce phase only where it can come last)."""
    return list(_cached_candidates(topology, kind, dim))


@lru_cache(maxsize=256)
def _cached_candidates(topology: Topology, kind: CollectiveKind, dim: int) -> tuple[DimAlgorithm, ...]:
    groups = _groups(topology, dim)
    phases = [PhaseKind.ALLGATHER] if kind is CollectiveKind.ALLGATHER else [PhaseKind.REDUCESCATTER]
    if kind is CollectiveKind.ALLREDUCE:
        phases.append(PhaseKind.ALLGATHER)
    found = []
    for algorithm in DimAlgorithm:
        if algorithm is DimAlgorithm.DOUBLE_BINARY_TREE:
            continue  # chosen for the last dimension of a plain Allreduce only (see _plain_algorithms)
        if all(algorithm_problem(topology, groups, algorithm, p) is None for p in phases):
            found.append(algorithm)
    return tuple(found)


def _default_order(topology: Topology, kind: CollectiveKind) -> tuple[int, ...]:
    active = _active_dims(topology)
    return tuple(reversed(active)) if kind is CollectiveKind.ALLGATHER else active


def _block_bytes(topology: Topology, size_bytes: float, splits: int) -> float:
    return size_bytes / topology.num_gpus / splits


def _work(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm],
          orders: Sequence[Sequence[int]], size_bytes: float) -> list[list[PhaseWork]]:
    lanes = _lanes(algorithms)
    active = _active_dims(topology)
    block = _block_bytes(topology, size_bytes, len(orders))
    per_order = {o: [_phase_work(topology, algorithms, p, lanes, block, active) for p in _phases(kind, o)]
                 for o in set(orders)}
    return [per_order[tuple(o)] for o in orders]


def _fifo(split: int, phase: int) -> tuple[float, ...]:
    return ()


def _deadlines(orders: Sequence[tuple[int, ...]], stagger: float) -> Callable[[int, int], tuple[float, ...]]:
    """Earliest deadline first: the j-th of the n splits taking an order is due, in its phase k, at
    (j + 1 + k x stagger) / n of the collective (the fluid plan runs every order at a constant rate)."""
    count: dict[tuple[int, ...], int] = {}
    index = []
    for o in orders:
        index.append(count.get(o, 0))
        count[o] = index[-1] + 1
    due = [(j + 1) / count[o] for j, o in zip(index, orders, strict=True)]
    step = [stagger / count[o] for o in orders]

    def priority(split: int, phase: int) -> tuple[float, ...]:
        return (due[split] + phase * step[split],)
    return priority


def _play(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm],
          orders: Sequence[tuple[int, ...]], slots: Sequence[int], rule: str, stagger: float,
          size_bytes: float) -> Pipeline:
    priority = _fifo if rule == "fifo" else _deadlines(orders, stagger)
    return run_pipeline(_work(topology, kind, algorithms, orders, size_bytes), dict(enumerate(slots)), priority)


def _balanced_orders(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm], splits: int,
                     size_bytes: float) -> tuple[tuple[int, ...], ...]:
    """Themis-style greedy: each split takes the dimension order that keeps the busiest dimension least busy."""
    lanes = _lanes(algorithms)
    active = _active_dims(topology)
    block = _block_bytes(topology, size_bytes, splits)
    loads = dict.fromkeys(active, 0.0)
    costs: dict[tuple[int, ...], dict[int, float]] = {}
    for order in _orders(topology, kind, algorithms):
        per_dim = dict.fromkeys(active, 0.0)
        for p in _phases(kind, order):
            per_dim[p.dim] += _phase_us(topology, algorithms, p, lanes, block, active)
        costs[order] = per_dim
    default = _default_order(topology, kind)
    chosen = []
    for _ in range(splits):
        def score(order: tuple[int, ...]) -> tuple[float, float, bool, tuple[int, ...]]:
            after = [loads[d] + costs[order][d] for d in active]
            return max(after), sum(after), order != default, order
        best = min(costs, key=score)
        for d in active:
            loads[d] += costs[best][d]
        chosen.append(best)
    return tuple(chosen)


def _orders(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm]) -> list[tuple[int, ...]]:
    """Every dimension order a split may take (a tree must end the order of an Allreduce)."""
    return [o for o in itertools.permutations(_active_dims(topology))
            if kind is not CollectiveKind.ALLREDUCE or _allreduce_top_ok(algorithms, o)]


@lru_cache(maxsize=64)
def _mix(topology: Topology, kind: CollectiveKind, algorithms: tuple[DimAlgorithm, ...]
         ) -> tuple[dict[tuple[int, ...], float], dict[tuple[int, ...], dict[int, float]]]:
    """The order mix that balances the dimensions' bytes time (latency ignored), and the loads of each order."""
    lanes = _lanes(algorithms)
    active = _active_dims(topology)
    block = _block_bytes(topology, REFERENCE_BYTES, 1)
    loads: dict[tuple[int, ...], dict[int, float]] = {}
    for order in _orders(topology, kind, algorithms):
        per_dim = dict.fromkeys(active, 0.0)
        for p in _phases(kind, order):
            per_dim[p.dim] += sum(data for _, data in _phase_work(topology, algorithms, p, lanes, block,
                                                                    active).steps)
        loads[order] = per_dim
    return order_mix(loads), loads


def _allreduce_top_ok(algorithms: Sequence[DimAlgorithm], order: Sequence[int]) -> bool:
    """A tree can only run the Allreduce phase; it must sit on the dimension the order ends with."""
    return all(algorithms[d] is not DimAlgorithm.DOUBLE_BINARY_TREE for d in order[:-1])


def _transfer_count(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm],
                    splits: int) -> int:
    """Transfers of a plan, from the per-dimension step shapes (the same in every dimension order)."""
    lanes = _lanes(algorithms)
    total = sum(c.transfers for p in _phases(kind, _default_order(topology, kind))
                for c in _step_costs(topology, p.dim, algorithms[p.dim], p.kind, lanes))
    return total * splits


def _split_fits(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm], count: int,
                reference: float) -> bool:
    """At least 4 KB per GPU block, within the transfer and XML-node budgets (one split always fits)."""
    if count == 1:
        return True
    if reference / topology.num_gpus / count < MIN_SPLIT_BYTES:
        return False
    transfers = _transfer_count(topology, kind, algorithms, count)
    per_rank = math.ceil(transfers / topology.num_gpus)
    return transfers <= MAX_TRANSFERS and 2 + topology.num_gpus + per_rank <= MAX_NODES_PER_RANK


def _selected(topology: Topology, kind: CollectiveKind, chunk_factor: int, size_bytes: float | None) -> bool:
    """Would the MSCCL runtime pick a file with this chunk factor at ``size_bytes`` (4-byte elements)?"""
    if size_bytes is None or size_bytes != int(size_bytes):
        return True
    n = topology.num_gpus
    return size_rule(kind.value, n, n * chunk_factor, int(size_bytes), _TYPE_SIZE).selected


def _plain_algorithms(topology: Topology, kind: CollectiveKind, block_bytes: float) -> tuple[DimAlgorithm, ...]:
    """Per dimension the candidate with the least estimated time over its phases in the default order."""
    active = _active_dims(topology)
    order = _default_order(topology, kind)
    chosen: list[DimAlgorithm] = [DimAlgorithm.RING] * len(topology.dimensions)
    phases = _phases(kind, order)
    for d in active:
        options = _candidates(topology, kind, d)
        if kind is CollectiveKind.ALLREDUCE and d == order[-1]:
            groups = _groups(topology, d)
            if algorithm_problem(topology, groups, DimAlgorithm.DOUBLE_BINARY_TREE, PhaseKind.ALLREDUCE) is None:
                options = [*options, DimAlgorithm.DOUBLE_BINARY_TREE]

        costs = {a: _dimension_us(topology, chosen, d, a, phases, block_bytes) for a in options}
        chosen[d] = min(options, key=lambda a: (costs[a], list(DimAlgorithm).index(a)))
    return tuple(chosen)


def _dimension_us(topology: Topology, algorithms: Sequence[DimAlgorithm], dim: int, algorithm: DimAlgorithm,
                  phases: Sequence[_Phase], block_bytes: float) -> float:
    """Estimated busy time of dimension ``dim`` over ``phases`` if it ran ``algorithm``."""
    trial = list(algorithms)
    trial[dim] = algorithm
    lanes = 2 if algorithm.uses_lanes else 1
    active = _active_dims(topology)
    return sum(_phase_us(topology, trial, p, lanes, block_bytes, active) for p in phases if p.dim == dim)


def _resolve_algorithms(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm | str],
                        balanced: bool) -> tuple[DimAlgorithm, ...]:
    dims = topology.dimensions
    if len(algorithms) == 1 and len(dims) > 1:
        algorithms = list(algorithms) * len(dims)
    if len(algorithms) != len(dims):
        raise NotApplicable(f"give one algorithm per dimension ({len(dims)}), got {len(algorithms)}",
                            where="algorithms")
    parsed = tuple(a if isinstance(a, DimAlgorithm) else parse_dim_algorithm(a) for a in algorithms)
    if balanced and DimAlgorithm.DOUBLE_BINARY_TREE in parsed:
        raise NotApplicable("the load-balanced variant changes which dimension comes last; it cannot run a double "
                            "binary tree", where="algorithms")
    order = _default_order(topology, kind)
    for d in _active_dims(topology):
        algorithm = parsed[d]
        last = kind is CollectiveKind.ALLREDUCE and d == order[-1] and not balanced
        phases = ([PhaseKind.ALLREDUCE] if last and algorithm is DimAlgorithm.DOUBLE_BINARY_TREE
                  else [PhaseKind.ALLGATHER] if kind is CollectiveKind.ALLGATHER
                  else [PhaseKind.REDUCESCATTER] if kind is CollectiveKind.REDUCESCATTER
                  else [PhaseKind.REDUCESCATTER, PhaseKind.ALLGATHER])
        for p in phases:
            problem = algorithm_problem(topology, _groups(topology, d), algorithm, p)
            if problem is not None:
                raise NotApplicable(f"dimension {d}: {problem}", where=topology.name)
    return parsed


def _resolve_slots(topology: Topology, channels: int | Sequence[int]) -> tuple[int, ...]:
    dims = len(topology.dimensions)
    given = [channels] * dims if isinstance(channels, int) else list(channels)
    if len(given) != dims:
        raise NotApplicable(f"give one channel count per dimension ({dims}), got {len(given)}", where="channels")
    for value in given:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SLOTS:
            raise NotApplicable(f"must be integers in 1..{MAX_SLOTS} (got {value!r})", where="channels")
    return tuple(given)


def _slot_options(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm], dim: int
                  ) -> tuple[int, ...]:
    """Channel slots the model can judge exactly: several only where every step keeps to the same connections
    (ring, bidirectional ring, direct) and nothing relays."""
    if algorithms[dim] not in (DimAlgorithm.RING, DimAlgorithm.BIRING, DimAlgorithm.DIRECT):
        return (1,)
    phase = PhaseKind.ALLGATHER if kind is CollectiveKind.ALLGATHER else PhaseKind.REDUCESCATTER
    if any(c.relays for c in _step_costs(topology, dim, algorithms[dim], phase, _lanes(algorithms))):
        return (1,)
    return SLOT_CHOICES


def _balanced_trials(topology: Topology, kind: CollectiveKind, algorithms: tuple[DimAlgorithm, ...], count: int,
                     slots: tuple[int, ...] | None, warm: tuple[int, ...], reference: float,
                     size_bytes: float | None) -> list[tuple[float, HierarchicalPlan]]:
    """``hier-lb`` candidates with ``count`` splits and their modelled makespans: the order mix under
    earliest-deadline priorities, channel slots searched by coordinate descent from the best of one slot
    everywhere, the most everywhere and ``warm`` (unless ``slots`` are given); and the Themis greedy under
    the plain rule with one slot per dimension (the earlier ``hier-lb``, kept as a candidate)."""
    lanes = _lanes(algorithms)
    mix, loads = _mix(topology, kind, algorithms)
    mixed = orders_for_splits(mix, count, loads)
    active = _active_dims(topology)
    options = {d: _slot_options(topology, kind, algorithms, d) if d in active else (1,)
               for d in range(len(topology.dimensions))}
    out = []
    for stagger in EDF_STAGGER:
        def play(trial: tuple[int, ...], stagger: float = stagger) -> Pipeline:
            return _play(topology, kind, algorithms, mixed, trial, "edf", stagger, reference)
        if slots is not None:
            chosen, best = slots, play(slots)
        else:
            starts = dict.fromkeys([tuple(1 for _ in options), tuple(max(options[d]) for d in options), warm])
            chosen, best = min(((s, play(s)) for s in starts), key=lambda sp: sp[1].makespan_us)
            for _ in range(2):
                improved = False
                for d in active:
                    for n in options[d]:
                        if n == chosen[d]:
                            continue
                        trial = (*chosen[:d], n, *chosen[d + 1:])
                        result = play(trial)
                        if result.makespan_us < best.makespan_us * (1 - 1e-9):
                            best, chosen, improved = result, trial, True
                if not improved:
                    break
        out.append((best.makespan_us, HierarchicalPlan(
            kind, algorithms, count, mixed, True, lanes, size_bytes,
            best.makespan_us if size_bytes is not None else None, chosen, best.program, "edf")))
    themis = _balanced_orders(topology, kind, algorithms, count, reference)
    ones = slots if slots is not None else tuple(1 for _ in topology.dimensions)
    played = _play(topology, kind, algorithms, themis, ones, "fifo", 0.0, reference)
    out.append((played.makespan_us, HierarchicalPlan(
        kind, algorithms, count, themis, True, lanes, size_bytes,
        played.makespan_us if size_bytes is not None else None, ones, played.program, "fifo")))
    return out


def hierarchical_plan(topology: Topology, kind: CollectiveKind, *, balanced: bool = False,
                      algorithms: Sequence[DimAlgorithm | str] | None = None, splits: int | None = None,
                      size_bytes: float | None = None, channels: int | Sequence[int] | None = None
                      ) -> HierarchicalPlan:
    """Choose (or check) the algorithms, splits, dimension orders and channel slots; see the module doc.

    ``channels``: slots per dimension (one int for all); by default one each for ``hier`` and chosen by
    the model for ``hier-lb``. Among the candidates the one with the least modelled makespan wins, a
    chunk count the MSCCL runtime would pick at ``size_bytes`` first.
    """
    check_hierarchical(topology, kind)
    if splits is not None and (isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= 1024):
        raise NotApplicable(f"must be an integer in 1..1024 (got {splits!r})", where="splits")
    if size_bytes is not None and not size_bytes > 0:
        raise NotApplicable(f"must be > 0 bytes (got {size_bytes!r})", where="size")
    if algorithms is None and splits is None and channels is None:
        return _automatic_plan(topology, kind, balanced, size_bytes)
    return _plan(topology, kind, balanced, algorithms, splits, size_bytes, channels)


@lru_cache(maxsize=32)
def _automatic_plan(topology: Topology, kind: CollectiveKind, balanced: bool, size_bytes: float | None
                    ) -> HierarchicalPlan:
    """The plan with every parameter chosen (cached: the synthesizer's shortcut and its baseline comparison
    both ask for it)."""
    return _plan(topology, kind, balanced, None, None, size_bytes, None)


def _plan(topology: Topology, kind: CollectiveKind, balanced: bool, algorithms: Sequence[DimAlgorithm | str] | None,
          splits: int | None, size_bytes: float | None, channels: int | Sequence[int] | None) -> HierarchicalPlan:
    slots = _resolve_slots(topology, channels) if channels is not None else None
    fixed = _resolve_algorithms(topology, kind, algorithms, balanced) if algorithms is not None else None
    reference = size_bytes if size_bytes is not None else REFERENCE_BYTES
    best: tuple[tuple[bool, float], HierarchicalPlan] | None = None
    warm = tuple(1 for _ in topology.dimensions)
    for count in [splits] if splits is not None else SPLIT_CHOICES:
        chosen = fixed or _plain_algorithms(topology, kind, _block_bytes(topology, reference, count))
        if balanced:
            chosen = tuple(DimAlgorithm.RING if a is DimAlgorithm.DOUBLE_BINARY_TREE else a for a in chosen)
        if splits is None and not _split_fits(topology, kind, chosen, count, reference):
            continue
        if balanced:
            candidates = _balanced_trials(topology, kind, chosen, count, slots, warm, reference, size_bytes)
            warm = min(candidates, key=lambda c: c[0])[1].slots
        else:
            orders = (_default_order(topology, kind),) * count
            plain_slots = slots or tuple(1 for _ in topology.dimensions)
            played = _play(topology, kind, chosen, orders, plain_slots, "fifo", 0.0, reference)
            candidates = [(played.makespan_us, HierarchicalPlan(
                kind, chosen, count, orders, False, _lanes(chosen), size_bytes,
                played.makespan_us if size_bytes is not None else None, plain_slots, played.program, "fifo"))]
        for estimate, plan in candidates:
            picked = _selected(topology, kind, count * plan.lanes, size_bytes)
            if best is None or (not picked, estimate) < (best[0][0], best[0][1] * (1 - 1e-9)):
                best = ((not picked, estimate), plan)
    if best is None:
        raise NotApplicable("no split count fits the transfer budget", where=topology.name)
    return best[1]


# ------------------------------------------------------------------- emission
def hierarchical_schedule(topology: Topology, kind: CollectiveKind, *, balanced: bool = False,
                          algorithms: Sequence[DimAlgorithm | str] | None = None, splits: int | None = None,
                          size_bytes: float | None = None, channels: int | Sequence[int] | None = None,
                          plan: HierarchicalPlan | None = None) -> Schedule:
    """The hierarchical schedule of ``kind`` (``balanced``: the load-balanced variant); see the module doc."""
    if plan is None:
        plan = hierarchical_plan(topology, kind, balanced=balanced, algorithms=algorithms, splits=splits,
                                 size_bytes=size_bytes, channels=channels)
    n = topology.num_gpus
    lanes, count = plan.lanes, plan.splits
    c = count * lanes
    active = _active_dims(topology)
    slots = plan.slots or (1,) * len(topology.dimensions)
    program = plan.program
    if not program:
        reference = size_bytes if size_bytes is not None else REFERENCE_BYTES
        program = _play(topology, kind, plan.algorithms, plan.orders, slots, "fifo", 0.0, reference).program
    phases = [_phases(kind, order) for order in plan.orders]
    transfers: list[Transfer] = []
    for run in program:
        phase = phases[run.split][run.phase]
        chunk_of = [[b * c + run.split * lanes + lane for b in range(n)] for lane in range(lanes)]
        steps_per_group = [group_steps(topology, plan.algorithms[phase.dim], phase.kind,
                                       _group_blocks(topology, phase, members, chunk_of, active))
                           for members in _groups(topology, phase.dim)]
        shift = run.slot * lanes
        for step_index in range(len(steps_per_group[0])):
            for steps in steps_per_group:
                for send in steps[step_index]:
                    transfers.extend(t if not shift else Transfer(t.src, t.dst, t.chunks, t.route, t.op,
                                                                  t.channel + shift) for t in send)
    name = "hier-lb" if plan.balanced else "hier"
    return Schedule(Collective(kind, n, c), tuple(transfers), name=name, topology=topology.name,
                    notes={"algorithm": name, "channels": 1 + max((t.channel for t in transfers), default=0),
                           "pieces": count,
                           "parameters": plan.parameters(), "description": plan.describe()})
