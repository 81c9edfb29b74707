"""One dimension's share of a hierarchical collective: ring, bidirectional ring, direct, halving-doubling and
double binary tree on one group of GPUs.

A *group* is the GPUs that differ only in their coordinate along one dimension, listed by that
coordinate (``Topology.dimension_group``). In a ReduceScatter phase member j ends with the sum of
*group block* j over the group; in an Allgather phase member j's group block j reaches every member;
an Allreduce phase does both. A group block is a tuple of chunk ids per *lane*: the bidirectional ring
sends lane 0 one way round and lane 1 the other, the double binary tree reduces lane 0 on one tree and
lane 1 on the other; the other algorithms send all lanes as one message.

Each builder returns *steps*: a step is a list of *sends*, a send the legs (transfers) that carry one
message from a member to another, several when it relays through other members (a ring step on a
line without wrap-around). Relays stay inside the group, and a relayed partial sum adds the relay's
contribution the first time the chain passes it and only forwards afterwards, so no contribution is
lost or counted twice. Direct, halving-doubling and tree need a direct route between the pairs they use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from taccl_py.baselines.common import Leg, NotApplicable, legs_between
from taccl_py.schedule import Op, Transfer
from taccl_py.topology import Topology

__all__ = ["DimAlgorithm", "GroupBlocks", "PhaseKind", "Send", "Step", "algorithm_problem", "group_steps",
           "parse_dim_algorithm"]


class DimAlgorithm(StrEnum):
    """Algorithm one dimension runs (ASTRA-sim's per-dimension choice, plus NCCL's two-channel ring)."""

    RING = "ring"
    """Unidirectional ring (ASTRA-sim's Ring): n-1 steps of one group block."""
    BIRING = "biring"
    """Two rings in opposite directions, half the data each (NCCL-style channels); helps on Ring dimensions."""
    DIRECT = "direct"
    """Every member sends straight to every other in one step (ASTRA-sim's Direct)."""
    HALVING_DOUBLING = "hd"
    """Recursive halving / doubling in log2 n steps (power-of-two groups)."""
    DOUBLE_BINARY_TREE = "dbt"
    """Two complementary binary trees, pipelined reduce then broadcast (Allreduce phases only)."""

    @property
    def uses_lanes(self) -> bool:
        """Whether the two lanes of a group block travel separately (two channels)."""
        return self in (DimAlgorithm.BIRING, DimAlgorithm.DOUBLE_BINARY_TREE)


class PhaseKind(StrEnum):
    REDUCESCATTER = "reducescatter"
    ALLGATHER = "allgather"
    ALLREDUCE = "allreduce"


def parse_dim_algorithm(text: str, *, where: str = "algorithms") -> DimAlgorithm:
    """``ring``, ``biring``, ``direct``, ``hd`` (or ``halving-doubling``), ``dbt`` (or ``tree``)."""
    aliases = {"halving-doubling": "hd", "halvingdoubling": "hd", "tree": "dbt", "double-binary-tree": "dbt"}
    key = str(text).strip().lower()
    try:
        return DimAlgorithm(aliases.get(key, key))
    except ValueError:
        choices = ", ".join(a.value for a in DimAlgorithm)
        raise NotApplicable(f"unknown dimension algorithm {text!r} (choose one of: {choices})", where=where) from None


@dataclass(frozen=True)
class GroupBlocks:
    """One group of one phase: its members by coordinate and ``blocks[j][lane]``, the chunks of group block j."""

    members: tuple[int, ...]
    blocks: tuple[tuple[tuple[int, ...], ...], ...]

    def chunks(self, j: int, lane: int | None) -> tuple[int, ...]:
        """Chunks of group block j on one lane, or on every lane (sorted) when ``lane`` is None."""
        if lane is not None:
            return self.blocks[j][lane]
        return tuple(sorted(c for part in self.blocks[j] for c in part))


Send = tuple[Transfer, ...]
"""The legs of one message, in travel order."""
Step = list[Send]


# ---------------------------------------------------------------- applicability
def _is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _ring_orders(members: Sequence[int]) -> tuple[list[int], list[int]]:
    """Forward order (by coordinate) and the reverse ring starting at the same member."""
    forward = list(members)
    return forward, [forward[0], *reversed(forward[1:])]


def _ring_legs(topology: Topology, order: Sequence[int]) -> list[tuple[Leg, ...]] | str:
    """Legs joining each member to the next, or why the ring cannot run (a relay leaves the group)."""
    inside = set(order)
    legs = []
    for i, a in enumerate(order):
        b = order[(i + 1) % len(order)]
        step = legs_between(topology, a, b)
        outside = [leg.dst for leg in step[:-1] if leg.dst not in inside]
        if outside:
            return f"the ring step {a} -> {b} relays through GPU {outside[0]} outside its group"
        legs.append(step)
    return legs


def algorithm_problem(topology: Topology, groups: Sequence[Sequence[int]], algorithm: DimAlgorithm,
                      phase: PhaseKind) -> str | None:
    """Why ``algorithm`` cannot run ``phase`` on these groups, or None when it can."""
    n = len(groups[0])
    if algorithm is DimAlgorithm.DOUBLE_BINARY_TREE and phase is not PhaseKind.ALLREDUCE:
        return "a double binary tree runs Allreduce phases only (the last dimension of an Allreduce)"
    if algorithm is DimAlgorithm.BIRING and n < 3:
        return f"a bidirectional ring needs at least 3 members (got {n})"
    if algorithm is DimAlgorithm.HALVING_DOUBLING and not _is_power_of_two(n):
        return f"halving-doubling needs a power-of-two group (got {n})"
    pairs = _pairs_needed(algorithm, n)
    for members in groups:
        if algorithm in (DimAlgorithm.RING, DimAlgorithm.BIRING):
            orders = _ring_orders(members)
            for order in orders[:2 if algorithm is DimAlgorithm.BIRING else 1]:
                legs = _ring_legs(topology, order)
                if isinstance(legs, str):
                    return legs
            continue
        for i, j in pairs:
            if topology.gpu_route(members[i], members[j]) is None:
                return f"{algorithm.value} needs a direct route from GPU {members[i]} to GPU {members[j]}"
    return None


@lru_cache(maxsize=64)
def _pairs_needed(algorithm: DimAlgorithm, n: int) -> tuple[tuple[int, int], ...]:
    """The (from, to) member positions an algorithm sends between (direct, halving-doubling, tree)."""
    if algorithm is DimAlgorithm.HALVING_DOUBLING:
        return tuple((a, a ^ (1 << t)) for t in range(n.bit_length() - 1) for a in range(n))
    if algorithm is DimAlgorithm.DOUBLE_BINARY_TREE:
        return tuple(sorted({pair for parent in _tree_parents(n) for c, p in parent.items()
                             for pair in ((c, p), (p, c))}))
    return tuple((a, b) for a in range(n) for b in range(n) if a != b)


# ---------------------------------------------------------------------- builders
def group_steps(topology: Topology, algorithm: DimAlgorithm, phase: PhaseKind, group: GroupBlocks) -> list[Step]:
    """The steps of ``phase`` on one group (an Allreduce phase other than the tree is RS then AG)."""
    if algorithm is DimAlgorithm.DOUBLE_BINARY_TREE:
        return _dbt_allreduce(topology, group)
    if phase is PhaseKind.ALLREDUCE:
        return (group_steps(topology, algorithm, PhaseKind.REDUCESCATTER, group)
                + group_steps(topology, algorithm, PhaseKind.ALLGATHER, group))
    reduce = phase is PhaseKind.REDUCESCATTER
    if algorithm is DimAlgorithm.DIRECT:
        return [_direct(topology, group, reduce)]
    if algorithm is DimAlgorithm.HALVING_DOUBLING:
        return _halving_doubling(topology, group, reduce)
    forward, backward = _ring_orders(group.members)
    if algorithm is DimAlgorithm.RING:
        return _ring(topology, group, forward, None, 0, reduce)
    lanes = [_ring(topology, group, order, lane, lane, reduce) for lane, order in enumerate((forward, backward))]
    return [a + b for a, b in zip(lanes[0], lanes[1], strict=True)]


def _chain_ops(legs: Sequence[Leg], first: int) -> list[Op]:
    """Reduce where the chain first reaches a GPU, copy where it passes one that already contributed."""
    done = {first}
    ops = []
    for leg in legs:
        ops.append(Op.COPY if leg.dst in done else Op.REDUCE)
        done.add(leg.dst)
    return ops


def _ring(topology: Topology, group: GroupBlocks, order: list[int], lane: int | None, channel: int,
          reduce: bool) -> list[Step]:
    """n-1 ring steps along ``order``; ReduceScatter leaves block j on member j, Allgather spreads it."""
    n = len(order)
    legs = _ring_legs(topology, order)
    if isinstance(legs, str):
        raise NotApplicable(legs, where=topology.name)
    index = {g: k for k, g in enumerate(group.members)}
    relays = any(len(step) > 1 for step in legs)
    chain_ops: dict[int, list[list[Op]]] = {}
    if reduce and relays:
        for j in range(n):  # the block of position j: its chain runs from position j+1 round to j
            chain = [legs[(j + 1 + s) % n] for s in range(n - 1)]
            flat = _chain_ops([leg for hop in chain for leg in hop], order[(j + 1) % n])
            at, split = 0, []
            for hop in chain:
                split.append(flat[at:at + len(hop)])
                at += len(hop)
            chain_ops[j] = split
    out: list[Step] = []
    for s in range(n - 1):
        step: Step = []
        for i in range(n):
            j = (i - s - 1) % n if reduce else (i - s) % n
            chunks = group.chunks(index[order[j]], lane)
            ops = chain_ops[j][s] if j in chain_ops else [Op.REDUCE if reduce else Op.COPY] * len(legs[i])
            step.append(tuple(Transfer(leg.src, leg.dst, chunks, leg.route, op, channel)
                              for leg, op in zip(legs[i], ops, strict=True)))
        out.append(step)
    return out


def _direct_leg(topology: Topology, a: int, b: int) -> Leg:
    route = topology.gpu_route(a, b)
    if route is None:
        raise NotApplicable(f"direct needs a direct route from GPU {a} to GPU {b}", where=topology.name)
    return Leg(a, b, route)


def _direct(topology: Topology, group: GroupBlocks, reduce: bool) -> Step:
    """One step: member i sends block j to member j (ReduceScatter) or its own block to every j."""
    members = group.members
    n = len(members)
    step: Step = []
    for offset in range(1, n):
        for i in range(n):
            j = (i + offset) % n
            leg = _direct_leg(topology, members[i], members[j])
            chunks = group.chunks(j if reduce else i, None)
            step.append((Transfer(leg.src, leg.dst, chunks, leg.route, Op.REDUCE if reduce else Op.COPY, 0),))
    return step


def _halving_doubling(topology: Topology, group: GroupBlocks, reduce: bool) -> list[Step]:
    """Recursive halving with partners at distance 1, 2, 4, ... (ReduceScatter), doubling back (Allgather)."""
    members = group.members
    n = len(members)
    steps: list[Step] = []
    t_count = n.bit_length() - 1
    for t in range(t_count):
        d = 1 << t if reduce else n >> (t + 1)
        step: Step = []
        for v in range(n):
            u = v ^ d
            if reduce:  # v answers for the blocks agreeing with it below bit t; it hands over those differing at t
                blocks = sorted(v ^ (d | k * 2 * d) for k in range(n // (2 * d)))
            else:  # v holds the blocks agreeing with it on the bits below 2d
                blocks = sorted(v ^ (k * 2 * d) for k in range(n // (2 * d)))
            chunks = tuple(sorted(c for b in blocks for c in group.chunks(b, None)))
            leg = _direct_leg(topology, members[v], members[u])
            step.append((Transfer(leg.src, leg.dst, chunks, leg.route, Op.REDUCE if reduce else Op.COPY, 0),))
        steps.append(step)
    return steps


def _balanced_parents(lo: int, hi: int, parent: int | None, out: dict[int, int]) -> int:
    """In-order balanced binary tree over positions lo..hi; returns the root, fills child -> parent."""
    if lo > hi:
        return -1
    root = (lo + hi) // 2
    if parent is not None:
        out[root] = parent
    _balanced_parents(lo, root - 1, root, out)
    _balanced_parents(root + 1, hi, root, out)
    return root


@lru_cache(maxsize=64)
def _tree_parents(n: int) -> tuple[dict[int, int], dict[int, int]]:
    """Child -> parent maps of the two trees: a balanced tree, and the same tree on positions shifted by one."""
    first: dict[int, int] = {}
    _balanced_parents(0, n - 1, None, first)
    second = {(c + 1) % n: (p + 1) % n for c, p in first.items()}
    return first, second


def _depths(parent: dict[int, int], n: int) -> tuple[list[int], list[int]]:
    """Depth (root 0) and height (leaves 0) of every position."""
    depth = [0] * n
    for v in range(n):
        u = v
        while u in parent:
            u = parent[u]
            depth[v] += 1
    height = [0] * n
    for v in sorted(range(n), key=lambda x: -depth[x]):
        if v in parent:
            height[parent[v]] = max(height[parent[v]], height[v] + 1)
    return depth, height


def _dbt_allreduce(topology: Topology, group: GroupBlocks) -> list[Step]:
    """Double binary tree Allreduce: tree t reduces lane t of every group block (one pipelined unit per block)
    up to its root, then broadcasts it down. Unit p leaves a node of height h at wave p + h and is sent
    down from depth k at wave p + H + k, H the tree height."""
    members = group.members
    n = len(members)
    waves: dict[int, Step] = {}
    for lane, parent in enumerate(_tree_parents(n)):
        depth, height = _depths(parent, n)
        top = max(height)
        children: dict[int, list[int]] = {}
        for c, p in sorted(parent.items()):
            children.setdefault(p, []).append(c)
        for p in range(n):  # unit p: group block p's lane
            chunks = group.chunks(p, lane)
            for v in range(n):
                if v in parent:
                    leg = _direct_leg(topology, members[v], members[parent[v]])
                    waves.setdefault(p + height[v], []).append(
                        (Transfer(leg.src, leg.dst, chunks, leg.route, Op.REDUCE, lane),))
                for c in children.get(v, []):
                    leg = _direct_leg(topology, members[v], members[c])
                    waves.setdefault(p + top + 1 + depth[v], []).append(
                        (Transfer(leg.src, leg.dst, chunks, leg.route, Op.COPY, lane),))
    return [waves[w] for w in sorted(waves)]

