"""Symmetry decomposition: a group of topology automorphisms acting freely on the GPUs.

The synthesizer solves only for one representative GPU per orbit and maps the
result to every other GPU of the orbit with the group element that carries the
representative there. Candidate generators come from the topology's structure
(shift of identical machines, rotations and XOR masks of local GPU numbers, a
global rotation) or from a TACCL sketch's ``symmetry_offsets``; each candidate
GPU permutation is extended to the switches by a labelled graph isomorphism
(networkx VF2) and kept only if the group it generates still acts freely on the
GPUs (so every GPU gets exactly one image of each representative's route).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import networkx as nx
from networkx.algorithms.isomorphism import DiGraphMatcher

from taccl_py.topology import Topology

__all__ = ["Symmetry", "find_symmetry", "offset_permutation", "trivial_symmetry", "unusable_offset"]

_MAX_GROUP = 4096

Perm = tuple[int, ...]


@dataclass(frozen=True)
class Symmetry:
    """A permutation group on the vertices of a topology (dense vertex ids).

    ``perms[0]`` is the identity. ``image_of[gpu] = (rep, g)`` with
    ``perms[g][rep] == gpu``. Links in the same ``link_orbit`` are carried onto
    each other by the group, so they see the same load in a symmetric schedule.
    """

    perms: tuple[Perm, ...]
    link_perms: tuple[Perm, ...]
    reps: tuple[int, ...]
    image_of: tuple[tuple[int, int], ...]
    link_orbit: tuple[int, ...]
    orbit_size: tuple[int, ...]
    generators: tuple[str, ...]

    @property
    def order(self) -> int:
        return len(self.perms)

    @property
    def num_link_orbits(self) -> int:
        return len(self.orbit_size)

    def images(self, rep: int) -> list[tuple[int, int]]:
        """``(gpu, g)`` for every GPU in the orbit of ``rep``."""
        return [(gpu, g) for gpu, (r, g) in enumerate(self.image_of) if r == rep]

    def describe(self) -> str:
        if self.order == 1:
            return "none (every GPU solved on its own)"
        return f"group of order {self.order} from {', '.join(self.generators)}; {len(self.reps)} representative(s)"


def _compose(a: Perm, b: Perm) -> Perm:
    """(a o b)(x) = a[b[x]]."""
    return tuple(a[x] for x in b)


def _graph(topology: Topology) -> nx.DiGraph:
    graph = nx.DiGraph()
    vid = topology.vertex_id
    for v in topology.vertices:
        if topology.is_gpu(v):
            graph.add_node(vid[v], label=("gpu", v))
        else:
            s = topology.switch_by_name[str(v)]
            graph.add_node(vid[v], label=("switch", s.kind, s.multicast, s.reduce))
    for link in topology.links:
        graph.add_edge(vid[link.src], vid[link.dst], attrs=(link.bandwidth, link.latency, link.kind))
    return graph


def _extend(topology: Topology, graph: nx.DiGraph, gpu_perm: Sequence[int]) -> Perm | None:
    """The vertex automorphism that moves GPU v to ``gpu_perm[v]``, if one exists."""
    n = topology.num_gpus
    if sorted(gpu_perm) != list(range(n)):
        return None
    inverse = [0] * n
    for v, w in enumerate(gpu_perm):
        inverse[w] = v
    # quick reject on GPU-GPU links before running VF2
    for link in topology.links:
        if topology.is_gpu(link.src) and topology.is_gpu(link.dst):
            image = topology.link_index.get((gpu_perm[int(link.src)], gpu_perm[int(link.dst)]))
            if image is None:
                return None
            other = topology.links[image]
            if (other.bandwidth, other.latency, other.kind) != (link.bandwidth, link.latency, link.kind):
                return None
    target = graph.copy()
    for w in range(n):
        target.nodes[w]["label"] = ("gpu", inverse[w])
    matcher = DiGraphMatcher(graph, target, node_match=lambda a, b: a["label"] == b["label"],
                             edge_match=lambda a, b: a["attrs"] == b["attrs"])
    for mapping in matcher.isomorphisms_iter():
        return tuple(mapping[v] for v in range(len(topology.vertices)))
    return None


def _closure(generators: Iterable[Perm], size: int) -> list[Perm] | None:
    identity = tuple(range(size))
    group = [identity]
    seen = {identity}
    gens = list(generators)
    frontier = [identity]
    while frontier:
        nxt = []
        for p in frontier:
            for g in gens:
                q = _compose(g, p)
                if q not in seen:
                    seen.add(q)
                    group.append(q)
                    nxt.append(q)
                    if len(group) > _MAX_GROUP:
                        return None
        frontier = nxt
    return group


def _acts_freely(group: Sequence[Perm], num_gpus: int) -> bool:
    """Every non-identity element moves every GPU (so orbit size == group order)."""
    return all(all(p[v] != v for v in range(num_gpus)) for p in group[1:])


def offset_permutation(num_gpus: int, offset: int, group_size: int) -> list[int]:
    """TACCL's symmetry offset: rank r -> (r // g) * g + (r % g + offset) % g."""
    return [(r // group_size) * group_size + (r % group_size + offset) % group_size for r in range(num_gpus)]


def _structural_candidates(topology: Topology) -> list[tuple[str, list[int]]]:
    n = topology.num_gpus
    cands: list[tuple[str, list[int]]] = []
    machines = topology.machines
    if machines and len({len(m) for m in machines}) == 1 and len(machines) > 1:
        k, g = len(machines), len(machines[0])
        local = [sorted(m) for m in machines]
        where = {gpu: (mi, i) for mi, m in enumerate(local) for i, gpu in enumerate(m)}
        cands.append(("machine shift", [local[(where[r][0] + 1) % k][where[r][1]] for r in range(n)]))
        for b in (1, 2, 4, 8):
            if b < g:
                cands.append((f"local rotation by {b}",
                              [local[where[r][0]][(where[r][1] + b) % g] for r in range(n)]))
        mask = 1
        while mask < g:
            if g & (g - 1) == 0:
                cands.append((f"local xor {mask}", [local[where[r][0]][where[r][1] ^ mask] for r in range(n)]))
            mask <<= 1
    else:
        groups = machines if machines else (tuple(range(n)),)
        if len(groups) == 1:
            cands.append(("rotation by 1", [(r + 1) % n for r in range(n)]))
            for b in (2, 4, 8):
                if b < n:
                    cands.append((f"rotation by {b}", [(r + b) % n for r in range(n)]))
            mask = 1
            while mask < n:
                if n & (n - 1) == 0:
                    cands.append((f"xor {mask}", [r ^ mask for r in range(n)]))
                mask <<= 1
    return cands


def trivial_symmetry(topology: Topology) -> Symmetry:
    return _build(topology, [tuple(range(len(topology.vertices)))], ())


def find_symmetry(topology: Topology, *, offsets: Sequence[Sequence[int]] | None = None,
                  allowed: frozenset[tuple[int, int]] | None = None, fixed_gpu: int | None = None) -> Symmetry:
    """The largest freely acting group we can build from the candidate generators.

    ``offsets``: TACCL ``symmetry_offsets`` to use instead of the structural candidates.
    ``allowed``: logical GPU edges the sketch allows; generators must preserve the set.
    ``fixed_gpu``: a rank the collective distinguishes (Broadcast root): no symmetry then.
    """
    if fixed_gpu is not None or topology.num_gpus == 1:
        return trivial_symmetry(topology)
    cands = _offset_candidates(topology, offsets) if offsets else _structural_candidates(topology)
    group, names, _ = _grow_group(topology, cands, allowed)
    return _build(topology, group, tuple(names))


def _offset_candidates(topology: Topology, offsets: Sequence[Sequence[int]]) -> list[tuple[str, list[int]]]:
    return [(f"offset {o} within {g}", offset_permutation(topology.num_gpus, int(o), int(g))) for o, g in offsets]


def _grow_group(topology: Topology, cands: Sequence[tuple[str, list[int]]],
                allowed: frozenset[tuple[int, int]] | None,
                explain: bool = False) -> tuple[list[Perm], list[str], list[tuple[int, str]]]:
    """Add each candidate generator that keeps the group freely acting; also say why each other one was left out.

    Returns the group, the names of the generators taken, and ``(candidate index, reason)``
    for every candidate left out (a candidate the group already contains is not left out).
    ``explain`` tells a non-automorphism from a sketch restriction (one more graph match per rejection).
    """
    size = len(topology.vertices)
    graph = _graph(topology)
    chosen: list[Perm] = []
    names: list[str] = []
    rejected: list[tuple[int, str]] = []
    group: list[Perm] = [tuple(range(size))]
    for k, (name, gpu_perm) in enumerate(cands):
        if sorted(gpu_perm) != list(range(topology.num_gpus)):
            rejected.append((k, "does not permute the GPUs"))
            continue
        if allowed is not None and any((gpu_perm[u], gpu_perm[v]) not in allowed for u, v in allowed):
            if explain and _extend(topology, graph, gpu_perm) is None:
                rejected.append((k, f"is not a symmetry of {topology.name}: it maps some link onto a missing or "
                                    "different link"))
            else:
                rejected.append((k, "maps a connection the sketch allows onto one it does not"))
            continue
        perm = _extend(topology, graph, gpu_perm)
        if perm is None:
            rejected.append((k, f"is not a symmetry of {topology.name}: it maps some link onto a missing or "
                                "different link"))
            continue
        if perm in group:
            continue
        trial = _closure([*chosen, perm], size)
        if trial is None:
            rejected.append((k, f"would make a group of more than {_MAX_GROUP} elements"))
            continue
        if not _acts_freely(trial, topology.num_gpus):
            rejected.append((k, "together with the entries before it, leaves some GPU in place (every element of "
                                "the group must move every GPU)"))
            continue
        chosen.append(perm)
        names.append(name)
        group = trial
    return group, names, rejected


def unusable_offset(topology: Topology, offsets: Sequence[Sequence[int]],
                    allowed: frozenset[tuple[int, int]] | None = None) -> tuple[int, str] | None:
    """The first TACCL ``symmetry_offsets`` entry that :func:`find_symmetry` could not use, and why; None if all fit."""
    if topology.num_gpus == 1 or not offsets:
        return None
    _, _, rejected = _grow_group(topology, _offset_candidates(topology, offsets), allowed, explain=True)
    return rejected[0] if rejected else None


def _build(topology: Topology, group: list[Perm], names: tuple[str, ...]) -> Symmetry:
    n = topology.num_gpus
    image_of: list[tuple[int, int] | None] = [None] * n
    reps = []
    for v in range(n):
        if image_of[v] is not None:
            continue
        reps.append(v)
        for g, p in enumerate(group):
            if image_of[p[v]] is None:
                image_of[p[v]] = (v, g)
    link_perms = []
    vertices = topology.vertices
    for p in group:
        link_perms.append(tuple(topology.link_index[(vertices[p[topology.vertex_id[link.src]]],
                                                     vertices[p[topology.vertex_id[link.dst]]])]
                                for link in topology.links))
    orbit = [-1] * len(topology.links)
    sizes: list[int] = []
    for li in range(len(topology.links)):
        if orbit[li] >= 0:
            continue
        members = {lp[li] for lp in link_perms}
        for m in members:
            orbit[m] = len(sizes)
        sizes.append(len(members))
    return Symmetry(perms=tuple(group), link_perms=tuple(link_perms), reps=tuple(reps),
                    image_of=tuple(x for x in image_of if x is not None), link_orbit=tuple(orbit),
                    orbit_size=tuple(sizes), generators=names)
