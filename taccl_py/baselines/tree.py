"""NCCL-style trees: double-binary-tree Allreduce, tree Broadcast and tree Reduce.

Machines form a binary tree; inside a machine the GPUs form a chain (a
Hamiltonian path over direct routes). Each machine talks to the network
through an *in* GPU (where data from other machines arrives) and an *out* GPU
(which sends to other machines); they are the same GPU when one NIC serves
both directions (DGX A100) and differ when a NIC's send and receive sides
belong to different GPUs (NDv2, DGX-2). The reduce phase runs up the tree
(each chain reduces towards *out*, children's partial sums enter at *in*), the
broadcast phase down it. Allreduce uses NCCL's double binary tree over the
machines, built as trees.cc builds it (:func:`nccl_double_tree_edges`: machine
0 the root of the first tree with one child, odd machines its leaves; the
second tree the first mirrored for an even count of machines, shifted by one
for an odd count), so no machine but a root is an inner node of both trees.
The two trees alternate channel by channel, so each carries half the data;
every channel is pipelined in pieces. Broadcast and Reduce use binary heaps
over the machines from the root's machine (in machine order on even channels,
in reverse on odd ones), not the double tree (NCCL runs them on rings).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from taccl_py.baselines.common import (
    Leg,
    NotApplicable,
    channel_us_per_byte,
    choose_channel_count,
    pipeline_pieces,
    route_cost,
)
from taccl_py.baselines.layout import MAX_CHANNELS, SearchSpace, groups_of, hamiltonian_path
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import InputError
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.topology import Topology

__all__ = ["TreeChannel", "TreePlan", "tree_allreduce", "tree_broadcast", "tree_plan", "tree_reduce"]


@dataclass(frozen=True)
class TreeChannel:
    """The legs of one channel in program order: reductions up the tree, then copies down it."""

    reduce_legs: tuple[Leg, ...]
    bcast_legs: tuple[Leg, ...]
    depth: int
    """Legs on the longest dependency chain (both phases)."""


@dataclass(frozen=True)
class TreePlan:
    """Tree channels and how evenly they load the links."""

    channels: tuple[TreeChannel, ...]
    us_per_byte: float
    """Max over links of (legs crossing it) / (channels x bytes per us)."""
    leg_latency_us: float

    @property
    def depth(self) -> int:
        return max(ch.depth for ch in self.channels)


@dataclass(frozen=True)
class _MachineTree:
    root: int
    children: tuple[tuple[int, ...], ...]

    @property
    def edges(self) -> list[tuple[int, int]]:
        """(parent, child) pairs."""
        return [(p, c) for p, kids in enumerate(self.children) for c in kids]


def _btree_parent(count: int, rank: int) -> int | None:
    """Parent of ``rank`` in NCCL's binary tree over ``count`` ranks (trees.cc): rank 0 is the root, with one child
    (the largest power of two below ``count``); an odd rank is a leaf; a rank's parent clears its lowest set bit
    and sets the next one (or only clears it, past the end)."""
    if rank == 0:
        return None
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return up if up < count else rank ^ bit


def _double_tree_parent(count: int, which: int, rank: int) -> int | None:
    """Parent of ``rank`` in tree ``which`` (0 or 1) of NCCL's double binary tree over ``count`` ranks; None at the
    root. The second tree is the first mirrored when ``count`` is even, shifted by one when odd (trees.cc)."""
    if which == 0:
        return _btree_parent(count, rank)
    if count % 2:
        up = _btree_parent(count, (rank - 1) % count)
        return None if up is None else (up + 1) % count
    up = _btree_parent(count, count - 1 - rank)
    return None if up is None else count - 1 - up


def _nccl_tree(count: int, which: int) -> _MachineTree:
    """Tree ``which`` of NCCL's double binary tree over ``count`` machines, each machine's children in rank order."""
    children: list[list[int]] = [[] for _ in range(count)]
    root = 0
    for rank in range(count):
        up = _double_tree_parent(count, which, rank)
        if up is None:
            root = rank
        else:
            children[up].append(rank)
    return _MachineTree(root, tuple(tuple(c) for c in children))


def nccl_double_tree_edges(count: int, which: int) -> list[tuple[int, int]]:
    """(child, parent) pairs of NCCL's double binary tree over ``count`` machines, tree ``which`` (0 or 1; trees.cc:
    the second is the first mirrored when ``count`` is even, shifted by one when odd, so no machine but a root is an
    inner node of both), children's subtrees first: summing up the list in order is a valid reduction, reading it
    backwards a valid broadcast."""
    tree = _nccl_tree(count, which)
    out: list[tuple[int, int]] = []

    def visit(m: int) -> None:
        for c in tree.children[m]:
            visit(c)
            out.append((c, m))

    visit(tree.root)
    return out


def _heap_tree(count: int, root: int, step: int) -> _MachineTree:
    """Binary heap over machines root, root+step, root+2*step, ... (mod count)."""
    children: list[list[int]] = [[] for _ in range(count)]
    for q in range(1, count):
        parent = (root + step * ((q - 1) // 2)) % count
        children[parent].append((root + step * q) % count)
    return _MachineTree(root, tuple(tuple(c) for c in children))


def _legs_along(topology: Topology, path: Sequence[int]) -> list[Leg]:
    legs = []
    for a, b in pairwise(path):
        route = topology.gpu_route(a, b)
        assert route is not None  # paths come from searches over direct routes
        legs.append(Leg(a, b, route))
    return legs


class _ChannelBuilder:
    """Builds one tree channel against the current link loads."""

    def __init__(self, topology: Topology, groups: Sequence[Sequence[int]], loads: list[float], *,
                 reduce_phase: bool, bcast_phase: bool) -> None:
        self.topology = topology
        self.groups = groups
        self.loads = loads
        self.space = SearchSpace(topology, loads)
        self.reduce_phase = reduce_phase
        self.bcast_phase = bcast_phase

    def ports(self, tree: _MachineTree) -> list[tuple[int, int]] | None:
        """(in, out) GPU of every machine: one local-index template for all, least-loaded network routes."""
        sizes = {len(g) for g in self.groups}
        if len(sizes) != 1:
            return None
        size = sizes.pop()
        best: tuple[float, float, int, int] | None = None
        for a in range(size):
            for b in range(size):
                score = self._template_score(tree, a, b)
                if score is not None and (best is None or (*score, a, b) < best):
                    best = (*score, a, b)
        if best is None:
            return None
        a, b = best[2], best[3]
        return [(g[a], g[b]) for g in self.groups]

    def _template_score(self, tree: _MachineTree, a: int, b: int) -> tuple[float, float] | None:
        worst, total = 0.0, 0.0
        groups = self.groups
        for parent, child in tree.edges:
            pairs = []
            if self.reduce_phase:
                pairs.append((groups[child][b], groups[parent][a]))
            if self.bcast_phase:
                pairs.append((groups[parent][b], groups[child][a]))
            for src, dst in pairs:
                route = self.topology.gpu_route(src, dst)
                if route is None:
                    return None
                cost = route_cost(self.topology, route, self.loads)
                worst, total = max(worst, cost), total + cost
        return worst, total

    def chain_to(self, members: Sequence[int], end: int) -> list[int]:
        path = hamiltonian_path(members, end, self.space, reverse=True)
        if path is None:
            raise NotApplicable(f"no chain over GPUs {list(members)} ending at GPU {end}",
                                where=self.topology.name)
        return path[::-1]

    def chain_from(self, members: Sequence[int], start: int) -> list[int]:
        path = hamiltonian_path(members, start, self.space)
        if path is None:
            raise NotApplicable(f"no chain over GPUs {list(members)} starting at GPU {start}",
                                where=self.topology.name)
        return path

    def build(self, tree: _MachineTree, ports: Sequence[tuple[int, int]], top: int) -> TreeChannel:
        """Legs of the channel; the reduction ends and the broadcast starts at GPU ``top`` of the root machine."""
        topology, groups = self.topology, self.groups
        reduce_chain = []
        if self.reduce_phase:
            reduce_chain = [self.chain_to(g, top if m == tree.root else ports[m][1]) for m, g in enumerate(groups)]
        bcast_chain = []
        if self.bcast_phase:
            for m, g in enumerate(groups):
                start = top if m == tree.root else ports[m][0]
                bcast_chain.append(self.chain_from(g, start))
        reduce_legs: list[Leg] = []
        bcast_legs: list[Leg] = []
        depth_up = [0] * len(groups)

        def up(m: int) -> None:
            arrive = 0
            for c in tree.children[m]:
                up(c)
                route = topology.gpu_route(ports[c][1], ports[m][0])
                assert route is not None
                reduce_legs.append(Leg(ports[c][1], ports[m][0], route))
                arrive = max(arrive, depth_up[c] + 1)
            chain = reduce_chain[m]
            reduce_legs.extend(_legs_along(topology, chain))
            depth_up[m] = max(len(chain) - 1, arrive + len(chain) - 1 - chain.index(ports[m][0]))

        depth_down = [0]

        def down(m: int, reached: int) -> None:
            chain = bcast_chain[m]
            bcast_legs.extend(_legs_along(topology, chain))
            out_at = reached + chain.index(ports[m][1]) if tree.children[m] else reached
            depth_down[0] = max(depth_down[0], reached + len(chain) - 1)
            for c in tree.children[m]:
                route = topology.gpu_route(ports[m][1], ports[c][0])
                assert route is not None
                bcast_legs.append(Leg(ports[m][1], ports[c][0], route))
                down(c, out_at + 1)

        if self.reduce_phase:
            up(tree.root)
        if self.bcast_phase:
            down(tree.root, 0)
        depth = (depth_up[tree.root] if self.reduce_phase else 0) + depth_down[0]
        channel = TreeChannel(tuple(reduce_legs), tuple(bcast_legs), depth)
        for leg in (*reduce_legs, *bcast_legs):
            for li in leg.route:
                self.loads[li] += 1.0
        return channel


def _channel(topology: Topology, groups: Sequence[Sequence[int]], loads: list[float], k: int, kind: CollectiveKind,
             root: int) -> TreeChannel:
    reduce_phase = kind is not CollectiveKind.BROADCAST
    bcast_phase = kind is not CollectiveKind.REDUCE
    builder = _ChannelBuilder(topology, groups, loads, reduce_phase=reduce_phase, bcast_phase=bcast_phase)
    count = len(groups)
    if kind is CollectiveKind.ALLREDUCE:
        tree = _nccl_tree(count, k % 2)
    else:
        root_machine = next(m for m, g in enumerate(groups) if root in g)
        tree = _heap_tree(count, root_machine, 1 if k % 2 == 0 else -1)
    if count == 1:
        members = groups[0]
        head = members[k % len(members)] if kind is CollectiveKind.ALLREDUCE else root
        ports = [(head, head)]
    else:
        found = builder.ports(tree)
        if found is None:
            raise NotApplicable("machines differ in size or lack direct routes between their NIC GPUs",
                                where=topology.name)
        ports = found
    top = ports[tree.root][1] if kind is CollectiveKind.ALLREDUCE else root
    return builder.build(tree, ports, top)


@lru_cache(maxsize=32)
def tree_plan(topology: Topology, kind: CollectiveKind, root: int = 0, channels: int | None = None) -> TreePlan:
    """Tree channels for ``kind`` (allreduce, broadcast or reduce), as many as spread the load best.

    Raises :class:`NotApplicable` when no chain or machine link fits.
    """
    if kind not in (CollectiveKind.ALLREDUCE, CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
        raise NotApplicable(f"trees run allreduce, broadcast and reduce, not {kind.value}")
    if topology.num_gpus < 2:
        raise NotApplicable("a tree needs at least 2 GPUs", where=topology.name)
    if channels is not None and not 1 <= channels <= 64:
        raise NotApplicable(f"channels must be in 1..64 (got {channels})", where=topology.name)
    groups = groups_of(topology)
    step = 2 if kind is CollectiveKind.ALLREDUCE and len(groups) > 1 and channels is None else 1
    loads = [0.0] * len(topology.links)
    built: list[TreeChannel] = []
    count = choose_channel_count(topology, loads, lambda k: built.append(_channel(topology, groups, loads, k, kind,
                                                                                  root)),
                                 channels=channels, limit=MAX_CHANNELS, step=step)
    kept = built[:count]
    final = [0.0] * len(topology.links)
    latency = 0.0
    for channel in kept:
        for leg in (*channel.reduce_legs, *channel.bcast_legs):
            latency = max(latency, topology.route_latency(leg.route))
            for li in leg.route:
                final[li] += 1.0
    return TreePlan(tuple(kept), channel_us_per_byte(topology, final, count), latency)


def _pieces(plan: TreePlan, num_chunks: int, chunk_factor_given: bool, size_bytes: float | None,
            step_overhead_us: float) -> int:
    """Pieces per channel: the alpha-beta optimum, lowered until channels x pieces divides the chunks."""
    k = len(plan.channels)
    per_channel = None if size_bytes is None else size_bytes / k
    pieces = pipeline_pieces(plan.depth, per_channel, plan.us_per_byte * k, plan.leg_latency_us + step_overhead_us)
    if not chunk_factor_given:
        return pieces
    while pieces > 1 and num_chunks % (k * pieces):
        pieces -= 1
    if num_chunks % (k * pieces):
        raise NotApplicable(f"{num_chunks} chunks do not split over {k} tree channels")
    return pieces


def _emit(plan: TreePlan, kind: CollectiveKind, n: int, root: int, chunk_factor: int | None,
          size_bytes: float | None, step_overhead_us: float, topology_name: str, name: str,
          pieces: int | None = None) -> Schedule:
    k = len(plan.channels)
    per_block = n if kind is CollectiveKind.ALLREDUCE else 1
    if pieces is not None:
        if chunk_factor is not None or pieces < 1:
            raise InputError(f"pieces must be >= 1 and exclude chunk_factor (got {pieces})", where="pieces")
        groups = k * pieces
        c = groups // math.gcd(per_block, groups)
    elif chunk_factor is None:
        pieces = _pieces(plan, 0, False, size_bytes, step_overhead_us)
        groups = k * pieces
        c = groups // math.gcd(per_block, groups)
    else:
        c = chunk_factor
        pieces = _pieces(plan, per_block * c, True, size_bytes, step_overhead_us)
        groups = k * pieces
    collective = Collective(kind, n, c, root)
    size = collective.num_chunks // groups
    # the two phases of one channel use separate connections (NCCL's tree up and down), so the next
    # piece's reduction does not queue behind this piece's broadcast
    up_channel, down_channel = (2, 1) if kind is CollectiveKind.ALLREDUCE else (1, 0)
    out: list[Transfer] = []
    for p in range(pieces):
        for ch, channel in enumerate(plan.channels):
            first = (ch * pieces + p) * size
            chunks = tuple(range(first, first + size))
            for leg in channel.reduce_legs:
                out.append(Transfer(leg.src, leg.dst, chunks, leg.route, Op.REDUCE, up_channel * ch))
            for leg in channel.bcast_legs:
                out.append(Transfer(leg.src, leg.dst, chunks, leg.route, Op.COPY, down_channel + up_channel * ch))
    return Schedule(collective, tuple(out), name=name, topology=topology_name,
                    notes={"algorithm": name, "channels": k, "pieces": pieces})


def tree_allreduce(plan: TreePlan, num_gpus: int, topology_name: str = "", *, chunk_factor: int | None = None,
                   size_bytes: float | None = None, step_overhead_us: float = 0.0,
                   pieces: int | None = None) -> Schedule:
    """Double-binary-tree Allreduce (NCCL's two trees of machines, taken channel by channel): reduce up, broadcast
    down, pipelined per channel (in ``pieces`` per channel when given, else the alpha-beta optimum)."""
    return _emit(plan, CollectiveKind.ALLREDUCE, num_gpus, 0, chunk_factor, size_bytes, step_overhead_us,
                 topology_name, "tree", pieces)


def tree_broadcast(plan: TreePlan, num_gpus: int, topology_name: str = "", *, root: int = 0,
                   chunk_factor: int | None = None, size_bytes: float | None = None,
                   step_overhead_us: float = 0.0, pieces: int | None = None) -> Schedule:
    """Pipelined tree Broadcast from ``root`` (the plan must be built for this root)."""
    return _emit(plan, CollectiveKind.BROADCAST, num_gpus, root, chunk_factor, size_bytes, step_overhead_us,
                 topology_name, "tree", pieces)


def tree_reduce(plan: TreePlan, num_gpus: int, topology_name: str = "", *, root: int = 0,
                chunk_factor: int | None = None, size_bytes: float | None = None,
                step_overhead_us: float = 0.0, pieces: int | None = None) -> Schedule:
    """Pipelined tree Reduce to ``root`` (the plan must be built for this root)."""
    return _emit(plan, CollectiveKind.REDUCE, num_gpus, root, chunk_factor, size_bytes, step_overhead_us,
                 topology_name, "tree", pieces)
