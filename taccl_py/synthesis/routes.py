"""Stages 1 and 2: prepare the network views a collective needs, then generate their route pools.

A collective is synthesized as one or two *phases* on a direction of the
network: Allgather and Broadcast forward; ReduceScatter and Reduce as an
Allgather (Broadcast) on the reversed topology, run backwards; Allreduce as
both (TACCL's "combine"); Alltoall as paths forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from solver_models._backend import SolveStats
from solver_models.logical import LogicalGraph, build_logical_graph
from solver_models.routing import ColumnPool, path_columns, tree_columns
from solver_models.symmetry import Symmetry, find_symmetry, trivial_symmetry
from taccl_py.collectives import CollectiveKind
from taccl_py.sketch import Sketch, derive_sketch
from taccl_py.synthesis.endpoint import gpu_resources
from taccl_py.synthesis.options import Run
from taccl_py.topology import Topology

__all__ = ["Direction", "Phase", "Prepared", "RoutePools", "prepare", "route_pools"]

_ROOTED = (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
_NEEDS_REVERSE = (CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE, CollectiveKind.REDUCE)
_NEEDS_FORWARD = (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE, CollectiveKind.BROADCAST,
                  CollectiveKind.ALLTOALL)


@dataclass(frozen=True)
class Direction:
    """The topology one way round, the connections the sketch allows on it and its symmetry group."""

    topology: Topology
    graph: LogicalGraph
    symmetry: Symmetry


@dataclass(frozen=True)
class Prepared:
    """Stage 1's output: the sketch in force and the direction(s) the collective needs."""

    topology: Topology
    kind: CollectiveKind
    size_bytes: float
    sketch: Sketch
    root: int | None
    """The fixed root of a Broadcast/Reduce (no symmetry then); None for the others."""
    forward: Direction | None
    reverse: Direction | None

    @property
    def num_gpus(self) -> int:
        return self.topology.num_gpus

    @property
    def symmetry(self) -> Symmetry:
        """The symmetry group used (the forward one when both directions are needed)."""
        direction = self.forward or self.reverse
        assert direction is not None
        return direction.symmetry


def _direction(run: Run, topology: Topology, sketch: Sketch, root: int | None) -> Direction:
    graph = build_logical_graph(topology, sketch)
    if root is not None:
        symmetry = trivial_symmetry(topology)
    else:
        symmetry = find_symmetry(topology, offsets=sketch.symmetry_offsets or None, allowed=frozenset(graph.edges))
    run.report("symmetry", detail=symmetry.describe())
    return Direction(topology, graph, symmetry)


def prepare(run: Run, topology: Topology, kind: CollectiveKind, size_bytes: float) -> Prepared:
    """The sketch (given or derived), the logical graph and the symmetry of each direction needed."""
    with run.stage("prepare"):
        sketch = run.options.sketch or derive_sketch()
        root = run.options.root if kind in _ROOTED else None
        forward = _direction(run, topology, sketch, root) if kind in _NEEDS_FORWARD else None
        reverse = _direction(run, topology.reversed(), sketch, root) if kind in _NEEDS_REVERSE else None
    return Prepared(topology, kind, size_bytes, sketch, root, forward, reverse)


@dataclass(frozen=True)
class Phase:
    """One phase of a collective: routes on a direction, as this kind of spread, maybe run backwards.

    ``kind`` is what the routes carry: ALLGATHER or BROADCAST over trees, ALLTOALL over paths.
    ``reversed``: the phase runs on the reversed topology and is played backwards as reductions.
    """

    direction: Direction
    pool: ColumnPool
    kind: CollectiveKind
    reversed: bool

    @property
    def rooted(self) -> bool:
        return self.kind is CollectiveKind.BROADCAST


@dataclass(frozen=True)
class RoutePools:
    """Stage 2's output: the phases in the order they run (reduction first), with the routing LP statistics."""

    phases: tuple[Phase, ...]
    stats: tuple[SolveStats, ...]

    def lp_bound_us(self, size_bytes: float, num_gpus: int) -> float:
        """The routing LP's fractional bandwidth optimum of the last phase, in us."""
        return self.phases[-1].pool.lp_time_per_byte_us * size_bytes / num_gpus


def route_pools(run: Run, prepared: Prepared) -> RoutePools:
    """Column generation on each direction: route trees (or Alltoall paths) and their LP optimum."""
    with run.stage("routing"):
        forward = _phase(run, prepared, prepared.forward, reversed_=False)
        reverse = _phase(run, prepared, prepared.reverse, reversed_=True)
    stats = tuple(p.pool.stats for p in (forward, reverse) if p is not None)
    pools = RoutePools(tuple(p for p in (reverse, forward) if p is not None), stats)
    run.report("routing LP", bound_us=pools.lp_bound_us(prepared.size_bytes, prepared.num_gpus))
    return pools


def _phase(run: Run, prepared: Prepared, d: Direction | None, *, reversed_: bool) -> Phase | None:
    """The phase on direction ``d`` (None if the collective does not use it)."""
    if d is None:
        return None
    kind = prepared.kind
    # GPU memory and channels as capacity rows beside the links (:mod:`taccl_py.synthesis.endpoint`)
    resources = gpu_resources(d.topology, run.options.endpoint, reduction=reversed_) \
        if run.knows_endpoint(d.topology) else ()
    if kind is CollectiveKind.ALLTOALL:
        return Phase(d, path_columns(d.topology, d.graph, d.symmetry, budget=run.column_budget(),
                                     resources=resources), CollectiveKind.ALLTOALL, reversed=False)
    roots = (prepared.root,) if prepared.root is not None else None
    spread = CollectiveKind.BROADCAST if kind in _ROOTED else CollectiveKind.ALLGATHER
    pool = tree_columns(d.topology, d.graph, d.symmetry, roots=roots, budget=run.column_budget(),
                        resources=resources)
    return Phase(d, pool, spread, reversed=reversed_)
