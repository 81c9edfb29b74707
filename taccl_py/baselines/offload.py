"""Baselines on multicast- and reduce-capable switches (network groups, see :mod:`taccl_py.schedule`).

* ``multicast`` (Allgather, Broadcast): every block leaves its GPU once and the
  switches replicate it to every other GPU (the network-offloaded Allgather of
  Khalilov et al. 2024; NVLS multicast). Each GPU injects M/N (Allgather)
  instead of (N-1)/N M.
* ``nvls`` (Allreduce, ReduceScatter, Allgather): NCCL's NVLS algorithm on one
  reduce-capable switch tree: block b is summed in the switches on its way to
  GPU b (reduce-scatter), then GPU b multicasts the sum (all-gather). Every GPU
  sends and receives M, not 2(N-1)/N M. The buffer is cut in pieces so the two
  phases overlap (reduce-scatter on channel 0, all-gather on channel 1).
  ReduceScatter is the first phase alone, Allgather the second (each GPU
  multicasts its own block, as ``multicast``, on switches that reduce too:
  NVLink SHARP; NCCL runs both with NVLS since 2.19).
* ``sharp`` (Allreduce across machines): NCCL's CollNet/SHARP shape.
  Inside every machine a reduce-scatter to the GPU owning each block (through
  the machine's switch when it reduces, else point to point), then the owners
  of a block (one per machine, one rail) all-reduce it in the InfiniBand
  switches (one group: every owner sends, every owner adds the others' sum),
  then each owner copies the result to its machine (multicast where the switch
  can).
* ``nvls-tree`` (Allreduce across machines): NCCL's NVLSTree. As ``sharp``
  inside the machines (the NVSwitch sums every block into the GPU owning it and
  multicasts the result back), but the owners of a block (one per machine, one
  rail) combine it over the network along a binary tree of machines (up to the
  root, summing, then back down), a rail's blocks and pieces taking in turn
  the two trees of NCCL's double binary tree (trees.cc: no machine but a root
  is an inner node of both, so no NIC carries an inner node's load twice).

Routes follow one aggregation tree per group: every GPU's lowest-latency path
up to a root switch, and a route between two GPUs goes up to their lowest
common ancestor and down, so the members' routes form the one-stream-per-link
shape the simulator requires. A topology whose switches lack the capability is
refused with the simulator's reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from taccl_py.baselines.common import NotApplicable
from taccl_py.baselines.tree import nccl_double_tree_edges
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.topology import Route, Topology, Vertex

__all__ = ["OFFLOAD_ALGORITHMS", "AggregationTree", "SwitchReach", "check_offload", "offload_schedule"]

OFFLOAD_ALGORITHMS = ("multicast", "nvls", "sharp", "nvls-tree")
_KINDS = {"multicast": (CollectiveKind.ALLGATHER, CollectiveKind.BROADCAST),
          "nvls": (CollectiveKind.ALLREDUCE, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLGATHER),
          "sharp": (CollectiveKind.ALLREDUCE,), "nvls-tree": (CollectiveKind.ALLREDUCE,)}
_MAX_PIECES = 64
_MIN_PIECE_BYTES = 1 << 20


class SwitchReach:
    """Per switch, the lowest-latency routes to it from every vertex through switches (one search on the reversed
    topology per switch, found once however many groups of GPUs ask: every machine and rail picks its root)."""

    def __init__(self, topology: Topology) -> None:
        self.reversed = topology.reversed()
        self._to: dict[Vertex, dict[int, tuple[float, int, int]]] = {}

    def to(self, switch: Vertex) -> dict[int, tuple[float, int, int]]:
        """Vertex id -> (latency, hops, the link toward ``switch``), as :meth:`Topology._dijkstra` on the reversed
        topology gives it."""
        found = self._to.get(switch)
        if found is None:
            found = self._to[switch] = self.reversed._dijkstra(switch, through_gpus=False)
        return found


class AggregationTree:
    """Every GPU of ``gpus``'s lowest-latency path up to ``root``; routes go up to a common ancestor and down.
    ``reach``: the topology's :class:`SwitchReach`, shared by the trees of one schedule (else found here)."""

    def __init__(self, topology: Topology, root: Vertex, gpus: Sequence[int], reach: SwitchReach | None = None) -> None:
        self.topology = topology
        self.root = root
        best = (reach or SwitchReach(topology)).to(root)
        vid = topology.vertex_id
        self.up: dict[Vertex, int] = {}  # vertex -> its link toward the root
        self._routes: dict[tuple[int, int], Route] = {}
        for g in gpus:
            v: Vertex = g
            while v != root:
                entry = best.get(vid[v])
                if entry is None:
                    raise NotApplicable(f"GPU {g} has no route to switch {root!r} through switches", where=topology.name)
                link = entry[2]
                self.up[v] = link
                v = topology.links[link].dst

    def chain(self, g: Vertex) -> list[Vertex]:
        out = [g]
        while out[-1] != self.root:
            out.append(self.topology.links[self.up[out[-1]]].dst)
        return out

    def route(self, src: int, dst: int) -> Route:
        """Up from ``src`` to the first vertex on ``dst``'s path, then down to ``dst`` (found once per pair: every
        piece of a block takes the same route)."""
        known = self._routes.get((src, dst))
        if known is not None:
            return known
        up, down = self.chain(src), self.chain(dst)
        common = set(up)
        meet = next(v for v in down if v in common)
        hops = [self.up[v] for v in up[:up.index(meet)]]
        index = self.topology.link_index
        for child in reversed(down[:down.index(meet)]):
            parent = self.topology.links[self.up[child]].dst
            link = index.get((parent, child))
            if link is None:
                raise NotApplicable(f"no link {parent!r} -> {child!r} back down the aggregation tree",
                                    where=self.topology.name)
            hops.append(link)
        route = self._routes[(src, dst)] = tuple(hops)
        return route


def best_root(topology: Topology, gpus: Sequence[int], reach: SwitchReach | None = None) -> Vertex:
    """The switch every GPU of ``gpus`` reaches with the least worst latency (ties: fewer hops, then name).
    ``reach``: the topology's :class:`SwitchReach`, to share its searches between calls."""
    reach = reach or SwitchReach(topology)
    vid = topology.vertex_id
    best: tuple[float, int, str] | None = None
    for switch in topology.switches:
        to = reach.to(switch.name)
        if any(vid[g] not in to for g in gpus):
            continue
        key = (max(to[vid[g]][0] for g in gpus), max(to[vid[g]][1] for g in gpus), switch.name)
        if best is None or key < best:
            best = key
    if best is None:
        raise NotApplicable(f"no switch joins GPUs {list(gpus)[:8]}", where=topology.name)
    return best[2]


def _pieces(size_bytes: float | None, blocks: int, chunk_factor: int | None) -> int:
    if chunk_factor is not None:
        return chunk_factor
    if size_bytes is None:
        return 1
    return max(1, min(_MAX_PIECES, math.floor(size_bytes / blocks / _MIN_PIECE_BYTES)))


def _group(members: list[Transfer], tag: int) -> list[Transfer]:
    return [Transfer(t.src, t.dst, t.chunks, t.route, t.op, t.channel, group=tag) for t in members]


def _multicast(topology: Topology, kind: CollectiveKind, root: int, c: int, name: str = "multicast") -> Schedule:
    n = topology.num_gpus
    reach = SwitchReach(topology)
    tree = AggregationTree(topology, best_root(topology, range(n), reach), range(n), reach)
    out: list[Transfer] = []
    sources = range(n) if kind is CollectiveKind.ALLGATHER else [root]
    for j in range(c):
        for b in sources:
            chunk = b * c + j if kind is CollectiveKind.ALLGATHER else j
            out += _group([Transfer(b, d, (chunk,), tree.route(b, d)) for d in range(n) if d != b], len(out))
    return Schedule(Collective(kind, n, c, root), tuple(out), name=name, topology=topology.name,
                    notes={"algorithm": name, "pieces": c})


def _nvls(topology: Topology, kind: CollectiveKind, c: int) -> Schedule:
    n = topology.num_gpus
    reach = SwitchReach(topology)
    tree = AggregationTree(topology, best_root(topology, range(n), reach), range(n), reach)
    out: list[Transfer] = []
    for j in range(c):
        for b in range(n):
            out += _group([Transfer(s, b, (b * c + j,), tree.route(s, b), Op.REDUCE) for s in range(n) if s != b],
                          len(out))
        if kind is CollectiveKind.ALLREDUCE:
            for b in range(n):
                out += _group([Transfer(b, d, (b * c + j,), tree.route(b, d), channel=1) for d in range(n) if d != b],
                              len(out))
    return Schedule(Collective(kind, n, c), tuple(out), name="nvls", topology=topology.name,
                    notes={"algorithm": "nvls", "pieces": c})


def _equal_machines(topology: Topology, what: str) -> list[tuple[int, ...]]:
    """The machines, when there are two or more of equal size (else :class:`NotApplicable` for ``what``)."""
    machines = [tuple(m) for m in topology.machines]
    if len(machines) < 2 or len({len(m) for m in machines}) != 1:
        raise NotApplicable(f"{what} needs two or more machines of equal size", where=topology.name)
    return machines


def _root_can(topology: Topology, tree: AggregationTree, flag: str) -> bool:
    """Whether the switch at the root of ``tree`` has ``flag`` (``reduce`` or ``multicast``)."""
    root = topology.switch_by_name.get(str(tree.root))
    return bool(root is not None and getattr(root, flag))


def _into_owner(topology: Topology, tree: AggregationTree, members: Sequence[int], owner: int, chunk: int,
                in_switch: bool, tag: int) -> list[Transfer]:
    """Every other member's ``chunk`` summed into ``owner``: in the switch (one group), else point to point."""
    legs = [Transfer(s, owner, (chunk,), tree.route(s, owner) if in_switch else _direct(topology, s, owner),
                     Op.REDUCE) for s in members if s != owner]
    return _group(legs, tag) if in_switch else legs


def _out_of_owner(topology: Topology, tree: AggregationTree, members: Sequence[int], owner: int, chunk: int,
                  in_switch: bool, channel: int, tag: int) -> list[Transfer]:
    """``owner``'s ``chunk`` copied to every other member: multicast by the switch (one group), else one by one."""
    legs = [Transfer(owner, d, (chunk,), tree.route(owner, d) if in_switch else _direct(topology, owner, d),
                     channel=channel) for d in members if d != owner]
    return _group(legs, tag) if in_switch else legs


def _sharp(topology: Topology, c: int) -> Schedule:
    n = topology.num_gpus
    machines = _equal_machines(topology, "the SHARP Allreduce")
    size = len(machines[0])
    reach = SwitchReach(topology)
    inside = [AggregationTree(topology, best_root(topology, m, reach), m, reach) for m in machines]
    rails = [[m[r] for m in machines] for r in range(size)]
    across = [AggregationTree(topology, best_root(topology, rail, reach), rail, reach) for rail in rails]
    for t in across:  # on two machines the owners' exchange needs no switch to add; SHARP's still does it there
        if not _root_can(topology, t, "reduce"):
            raise NotApplicable(f"the SHARP Allreduce needs the switch joining a rail across machines to reduce "
                                f"({t.root!r} does not)", where=topology.name)
    local_reduce = [_root_can(topology, t, "reduce") for t in inside]
    local_multicast = [_root_can(topology, t, "multicast") for t in inside]
    out: list[Transfer] = []
    for j in range(c):
        for b in range(n):
            chunk, r = b * c + j, b % size
            for m, members in enumerate(machines):
                out += _into_owner(topology, inside[m], members, members[r], chunk, local_reduce[m], len(out))
            owners = rails[r]
            out += _group([Transfer(s, d, (chunk,), across[r].route(s, d), Op.REDUCE, 1)
                           for s in owners for d in owners if s != d], len(out))
            for m, members in enumerate(machines):
                out += _out_of_owner(topology, inside[m], members, members[r], chunk, local_multicast[m], 2, len(out))
    return Schedule(Collective(CollectiveKind.ALLREDUCE, n, c), tuple(out), name="sharp", topology=topology.name,
                    notes={"algorithm": "sharp", "pieces": c})


def _nvls_tree(topology: Topology, c: int) -> Schedule:
    n = topology.num_gpus
    machines = _equal_machines(topology, "NVLSTree")
    reach = SwitchReach(topology)
    inside = [AggregationTree(topology, best_root(topology, m, reach), m, reach) for m in machines]
    for t in inside:
        if not (_root_can(topology, t, "reduce") and _root_can(topology, t, "multicast")):
            raise NotApplicable(f"NVLSTree needs every machine's switch to reduce and multicast ({t.root!r} does not)",
                                where=topology.name)
    size = len(machines[0])
    trees = [nccl_double_tree_edges(len(machines), which) for which in (0, 1)]
    out: list[Transfer] = []
    for j in range(c):
        for b in range(n):
            chunk, r = b * c + j, b % size
            up = trees[(j + b // size) % 2]  # a rail's blocks and pieces take the two trees in turn
            for m, members in enumerate(machines):
                out += _into_owner(topology, inside[m], members, members[r], chunk, True, len(out))
            owner_of = [members[r] for members in machines]
            out += [Transfer(owner_of[child], owner_of[parent], (chunk,),
                             _direct(topology, owner_of[child], owner_of[parent]), Op.REDUCE, 1)
                    for child, parent in up]
            out += [Transfer(owner_of[parent], owner_of[child], (chunk,),
                             _direct(topology, owner_of[parent], owner_of[child]), channel=2)
                    for child, parent in reversed(up)]
            for m, members in enumerate(machines):
                out += _out_of_owner(topology, inside[m], members, members[r], chunk, True, 3, len(out))
    return Schedule(Collective(CollectiveKind.ALLREDUCE, n, c), tuple(out), name="nvls-tree", topology=topology.name,
                    notes={"algorithm": "nvls-tree", "pieces": c})


def _direct(topology: Topology, s: int, d: int) -> Route:
    route = topology.gpu_route(s, d)
    if route is None:
        raise NotApplicable(f"no direct route from GPU {s} to GPU {d}", where=topology.name)
    return route


def check_offload(topology: Topology, kind: CollectiveKind, algorithm: str, root: int = 0) -> None:
    """Raise :class:`NotApplicable` unless ``algorithm`` runs ``kind`` on ``topology`` (the switches can do it)."""
    offload_schedule(topology, kind, algorithm, root=root, chunk_factor=1)


def offload_schedule(topology: Topology, kind: CollectiveKind, algorithm: str, *, root: int = 0,
                     chunk_factor: int | None = None, size_bytes: float | None = None) -> Schedule:
    """The ``multicast``, ``nvls``, ``sharp`` or ``nvls-tree`` baseline; pieces per block from ``size_bytes`` unless given."""
    if kind not in _KINDS[algorithm]:
        raise NotApplicable(f"there is no {algorithm} {kind.value} baseline (it runs "
                            f"{', '.join(k.value for k in _KINDS[algorithm])})", where=topology.name)
    # NVLS needs NVLink SHARP (switches that reduce) for every collective; its Allgather multicasts too
    flags = ("multicast",) if algorithm == "multicast" else \
        ("reduce", "multicast") if algorithm == "nvls" and kind is CollectiveKind.ALLGATHER else ("reduce",)
    for flag in flags:
        if not any(getattr(s, flag) for s in topology.switches):
            raise NotApplicable(f"the {algorithm} baseline needs switches with the '{flag}' flag (none here)",
                                where=topology.name)
    n = topology.num_gpus
    if algorithm == "multicast":
        schedule = _multicast(topology, kind, root, chunk_factor or 1)  # one stream per block: nothing to overlap
    elif algorithm == "nvls" and kind is CollectiveKind.ALLGATHER:  # NVLS's Allgather is the multicast
        schedule = _multicast(topology, kind, 0, chunk_factor or 1, name="nvls")
    elif algorithm == "nvls":
        schedule = _nvls(topology, kind, _pieces(size_bytes, n, chunk_factor))
    elif algorithm == "nvls-tree":
        schedule = _nvls_tree(topology, _pieces(size_bytes, n, chunk_factor))
    else:
        schedule = _sharp(topology, _pieces(size_bytes, n, chunk_factor))
    problem = schedule.structural_error(topology)
    if problem:
        raise NotApplicable(f"the {algorithm} baseline cannot run here: {problem}", where=topology.name)
    return schedule
