"""Hierarchical (per-dimension) collectives, as ASTRA-sim and NCCL run them on multi-dimensional networks.

A topology with dimensions (``Topology.dimensions``: ASTRA-sim networks, tori, meshes, DGX clusters as
GPUs-in-a-machine x machines) runs a collective one dimension at a time. ReduceScatter reduces along
dimension 0, then 1, ...: after the phase on dimension d a GPU holds, summed over its group along every
dimension done so far, the blocks that agree with its own coordinates on those dimensions. Allgather
runs the other way (alone: the highest dimension first, as ASTRA-sim orders it). Allreduce is
ReduceScatter up to the last dimension, an Allreduce phase on the last, and Allgather back down.
Each dimension runs its own algorithm (:class:`~taccl_py.baselines.dimension_phases.DimAlgorithm`).

The buffer is cut into ``splits`` parts (ASTRA-sim's ``preferred-dataset-splits``) that go through the
phases one after another, so the dimensions work on different parts at once. Each dimension runs one
phase at a time; phases are put in program order by a list schedule on their alpha-beta estimates,
which is also the order every connection sends in. The *load-balanced* variant (``hier-lb``, the idea
of Themis, ISCA 2022) gives every part its own dimension order, chosen greedily so the estimated busy
time of the most loaded dimension grows least; an Allreduce part then reduces last, and gathers first,
along the dimension its order ends with.

Parameters not given are chosen from ``size_bytes`` (without one, for a 64 MiB buffer) with the estimate: per
dimension the algorithm with the least estimated time, then the number of splits. Chunks: ``chunk_factor = splits x lanes`` (two
lanes when a dimension runs a bidirectional ring or a double binary tree); chunk ``b*c + s*lanes + l``
is lane l of split s of block b.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
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
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Schedule, Transfer
from taccl_py.tolerances import is_better
from taccl_py.topology import Topology
from taccl_py.units import us_per_byte

__all__ = ["HIERARCHICAL_KINDS", "HierarchicalPlan", "check_hierarchical", "hierarchical_plan",
           "hierarchical_schedule"]

HIERARCHICAL_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE)
SPLIT_CHOICES = (1, 2, 4, 8, 16, 32, 64)
"""Dataset splits the automatic choice considers."""
REFERENCE_BYTES = float(64 << 20)
"""Without ``size_bytes`` the parameters are chosen for a buffer of this size (64 MiB)."""
MAX_TRANSFERS = 400_000
"""Split counts whose schedule would exceed this many transfers are not considered."""
MIN_SPLIT_BYTES = 4096
"""A split is never smaller than this (per GPU block), unless one split already is."""
COST_GROUPS = 16
"""The estimate looks at this many groups of a dimension at most (evenly spaced)."""


@dataclass(frozen=True)
class HierarchicalPlan:
    """What a hierarchical schedule runs: per dimension an algorithm, the splits, each split's dimension order.

    ``orders[s]`` lists the dimensions (size > 1) in the order split s reduces them (Allgather alone: gathers
    them). ``estimate_us`` is the alpha-beta list-schedule estimate at ``size_bytes`` (None without a size).
    """

    kind: CollectiveKind
    algorithms: tuple[DimAlgorithm, ...]
    splits: int
    orders: tuple[tuple[int, ...], ...]
    balanced: bool
    lanes: int
    size_bytes: float | None = None
    estimate_us: float | None = None

    def parameters(self) -> dict[str, Any]:
        """The plan as the report and ``--json`` show it."""
        distinct = sorted(set(self.orders))
        return {"algorithms": [a.value for a in self.algorithms], "splits": self.splits,
                "orders": [list(o) for o in distinct], "balanced": self.balanced, "lanes": self.lanes,
                "estimate_us": self.estimate_us}

    def describe(self) -> str:
        """One line: ``per dimension ring, direct; 4 splits; dimension order 0,1``."""
        distinct = sorted(set(self.orders))
        orders = " / ".join(",".join(map(str, o)) for o in distinct)
        what = "dimension orders" if len(distinct) > 1 else "dimension order"
        return (f"per dimension {', '.join(a.value for a in self.algorithms)}; {self.splits} "
                f"split{'s' if self.splits != 1 else ''}; {what} {orders}")


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
    if phase.kind is PhaseKind.ALLGATHER:
        free = [e for e in active if e in phase.done]
    else:
        free = [e for e in active if e != d and e not in phase.done]
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


def _step_costs(topology: Topology, dim: int, algorithm: DimAlgorithm, phase: PhaseKind, lanes: int
                ) -> tuple[_StepCost, ...]:
    """Alpha-beta cost of every step of one phase on every group at once (unit group blocks)."""
    return _cached_step_costs(topology, dim, algorithm, phase, lanes)


@lru_cache(maxsize=256)
def _cached_step_costs(topology: Topology, dim: int, algorithm: DimAlgorithm, phase: PhaseKind, lanes: int
                       ) -> tuple[_StepCost, ...]:
    n = topology.dimensions[dim].size
    unit = GroupBlocks((), tuple(tuple((j * lanes + lane,) for lane in range(lanes)) for j in range(n)))
    groups = _groups(topology, dim)
    if len(groups) > COST_GROUPS:  # evenly spaced sample; links shared between groups may be undercounted
        groups = tuple(groups[k * len(groups) // COST_GROUPS] for k in range(COST_GROUPS))
    per_group = [group_steps(topology, algorithm, phase, GroupBlocks(members, unit.blocks)) for members in groups]
    latency_of = [link.latency for link in topology.links]
    us_per_byte_of = [us_per_byte(link.bandwidth) for link in topology.links]
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
        costs.append(_StepCost(latency, per_byte))
    return tuple(costs)


def _phase_us(topology: Topology, plan_algorithms: Sequence[DimAlgorithm], phase: _Phase, lanes: int,
              block_bytes: float, active: Sequence[int]) -> float:
    """Estimated time of one phase of one split whose blocks carry ``block_bytes`` each."""
    d = phase.dim
    free = [e for e in active if (e in phase.done) == (phase.kind is PhaseKind.ALLGATHER) and e != d]
    group_block = block_bytes * math.prod(topology.dimensions[e].size for e in free)
    return sum(c.latency_us + group_block * c.us_per_byte
               for c in _step_costs(topology, d, plan_algorithms[d], phase.kind, lanes))


def _list_schedule(durations: Sequence[Sequence[tuple[int, float]]]) -> tuple[list[list[float]], float]:
    """Start time of every (split, phase): a dimension runs one phase at a time, the earliest startable first."""
    splits = len(durations)
    starts = [[0.0] * len(p) for p in durations]
    next_phase = [0] * splits
    ready = [0.0] * splits
    free: dict[int, float] = {}
    remaining = sum(len(p) for p in durations)
    makespan = 0.0
    while remaining:
        best: tuple[float, int] | None = None
        for s in range(splits):
            k = next_phase[s]
            if k < len(durations[s]):
                start = max(ready[s], free.get(durations[s][k][0], 0.0))
                if best is None or (start, s) < best:
                    best = (start, s)
        assert best is not None
        start, s = best
        k = next_phase[s]
        dim, length = durations[s][k]
        starts[s][k] = start
        ready[s] = free[dim] = start + length
        makespan = max(makespan, start + length)
        next_phase[s] += 1
        remaining -= 1
    return starts, makespan


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


def _block_bytes(topology: Topology, kind: CollectiveKind, size_bytes: float, splits: int) -> float:
    return size_bytes / topology.num_gpus / splits


def _estimate(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm],
              orders: Sequence[Sequence[int]], size_bytes: float) -> float:
    lanes = _lanes(algorithms)
    active = _active_dims(topology)
    block = _block_bytes(topology, kind, size_bytes, len(orders))
    durations = [[(p.dim, _phase_us(topology, algorithms, p, lanes, block, active)) for p in _phases(kind, order)]
                 for order in orders]
    return _list_schedule(durations)[1]


def _balanced_orders(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm], splits: int,
                     size_bytes: float) -> tuple[tuple[int, ...], ...]:
    """Themis-style greedy: each split takes the dimension order that keeps the busiest dimension least busy."""
    lanes = _lanes(algorithms)
    active = _active_dims(topology)
    block = _block_bytes(topology, kind, size_bytes, splits)
    loads = dict.fromkeys(active, 0.0)
    costs: dict[tuple[int, ...], dict[int, float]] = {}
    for order in itertools.permutations(active):
        if kind is CollectiveKind.ALLREDUCE and not _allreduce_top_ok(algorithms, order):
            continue
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


def _allreduce_top_ok(algorithms: Sequence[DimAlgorithm], order: Sequence[int]) -> bool:
    """A tree can only run the Allreduce phase; it must sit on the dimension the order ends with."""
    return all(algorithms[d] is not DimAlgorithm.DOUBLE_BINARY_TREE for d in order[:-1])


def _transfer_count(topology: Topology, kind: CollectiveKind, algorithms: Sequence[DimAlgorithm],
                    splits: int) -> int:
    """Transfers of a plan, from the per-dimension step shapes (counted on the unit phases)."""
    total = 0
    for p in _phases(kind, _default_order(topology, kind)):
        steps = _step_costs(topology, p.dim, algorithms[p.dim], p.kind, _lanes(algorithms))
        groups = topology.num_gpus // topology.dimensions[p.dim].size
        n = topology.dimensions[p.dim].size
        total += len(steps) * groups * n * _lanes(algorithms)
    return total * splits


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


def hierarchical_plan(topology: Topology, kind: CollectiveKind, *, balanced: bool = False,
                      algorithms: Sequence[DimAlgorithm | str] | None = None, splits: int | None = None,
                      size_bytes: float | None = None) -> HierarchicalPlan:
    """Choose (or check) the algorithms, splits and dimension orders; see the module doc."""
    check_hierarchical(topology, kind)
    if splits is not None and (isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= 1024):
        raise NotApplicable(f"must be an integer in 1..1024 (got {splits!r})", where="splits")
    if size_bytes is not None and not size_bytes > 0:
        raise NotApplicable(f"must be > 0 bytes (got {size_bytes!r})", where="size")
    reference = size_bytes if size_bytes is not None else REFERENCE_BYTES
    split_options = [splits] if splits is not None else list(SPLIT_CHOICES)
    best: HierarchicalPlan | None = None
    best_estimate = math.inf
    for count in split_options:
        if count > 1 and splits is None and reference / topology.num_gpus / count < MIN_SPLIT_BYTES:
            continue
        if algorithms is not None:
            chosen = _resolve_algorithms(topology, kind, algorithms, balanced)
        else:
            chosen = _plain_algorithms(topology, kind, _block_bytes(topology, kind, reference, count))
        if balanced:
            chosen = tuple(DimAlgorithm.RING if a is DimAlgorithm.DOUBLE_BINARY_TREE else a for a in chosen)
        if splits is None and count > 1 and _transfer_count(topology, kind, chosen, count) > MAX_TRANSFERS:
            continue
        if balanced:
            orders = _balanced_orders(topology, kind, chosen, count, reference)
        else:
            orders = (_default_order(topology, kind),) * count
        estimate = _estimate(topology, kind, chosen, orders, reference)
        if best is None or is_better(estimate, best_estimate):
            best = HierarchicalPlan(kind, chosen, count, orders, balanced, _lanes(chosen), size_bytes,
                                    estimate if size_bytes is not None else None)
            best_estimate = estimate
    if best is None:
        raise NotApplicable("no split count fits the transfer budget", where=topology.name)
    return best


# ------------------------------------------------------------------- emission
def hierarchical_schedule(topology: Topology, kind: CollectiveKind, *, balanced: bool = False,
                          algorithms: Sequence[DimAlgorithm | str] | None = None, splits: int | None = None,
                          size_bytes: float | None = None, plan: HierarchicalPlan | None = None) -> Schedule:
    """The hierarchical schedule of ``kind`` (``balanced``: the Themis-style variant); see the module doc."""
    if plan is None:
        plan = hierarchical_plan(topology, kind, balanced=balanced, algorithms=algorithms, splits=splits,
                                 size_bytes=size_bytes)
    n = topology.num_gpus
    lanes, count = plan.lanes, plan.splits
    c = count * lanes
    active = _active_dims(topology)
    reference = size_bytes if size_bytes is not None else REFERENCE_BYTES
    block = _block_bytes(topology, kind, reference, count)
    phases = [_phases(kind, order) for order in plan.orders]
    durations = [[(p.dim, _phase_us(topology, plan.algorithms, p, lanes, block, active)) for p in split]
                 for split in phases]
    starts, _ = _list_schedule(durations)
    sequence = sorted((starts[s][k], s, k) for s in range(count) for k in range(len(phases[s])))
    transfers: list[Transfer] = []
    for _, s, k in sequence:
        phase = phases[s][k]
        chunk_of = [[b * c + s * lanes + lane for b in range(n)] for lane in range(lanes)]
        steps_per_group = [group_steps(topology, plan.algorithms[phase.dim], phase.kind,
                                       _group_blocks(topology, phase, members, chunk_of, active))
                           for members in _groups(topology, phase.dim)]
        for step_index in range(len(steps_per_group[0])):
            for steps in steps_per_group:
                for send in steps[step_index]:
                    transfers.extend(send)
    name = "hier-lb" if plan.balanced else "hier"
    return Schedule(Collective(kind, n, c), tuple(transfers), name=name, topology=topology.name,
                    notes={"algorithm": name, "channels": lanes, "pieces": count,
                           "parameters": plan.parameters(), "description": plan.describe()})
