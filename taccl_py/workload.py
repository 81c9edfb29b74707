"""Training-step workloads: a graph of compute kernels and collectives (the file format of ``taccl workload``).

A workload is one training step as ASTRA-sim 2.0's graph-based training loop
sees it: nodes that each run on every GPU of the topology, and dependencies
between them. A *compute* node is a kernel with a duration (what it takes
alone) and the memory bandwidth it draws while it runs; a *collective* node is
a collective of a given kind and size run with a named algorithm. Nodes on one
*stream* run one at a time in file order (compute nodes default to stream
``compute``, collectives to ``comm``), as kernels on a CUDA stream do; ``after``
adds any other dependency. The format is documented in docs/workloads.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from taccl_py.collectives import CollectiveKind, parse_collective
from taccl_py.errors import InputError
from taccl_py.inputs import read_json_file
from taccl_py.limits import MAX_BANDWIDTH_GBPS
from taccl_py.units import parse_size

__all__ = ["FORMAT", "CollectiveNode", "ComputeNode", "Workload", "load_workload", "workload_from_dict"]

FORMAT = "taccl_py-workload/1"
MAX_NODES = 100_000
"""At most this many nodes in one workload."""
MAX_DURATION_US = 1e9
"""A compute kernel takes at most 1e9 us (about 17 minutes)."""

_TOP_KEYS = ("format", "name", "source", "nodes")
_COMPUTE_KEYS = ("id", "type", "duration_us", "memory_bandwidth", "stream", "after", "note")
_COLLECTIVE_KEYS = ("id", "type", "kind", "size", "group", "algorithm", "channels", "stream", "after", "note")
_ALGORITHMS = ("ring", "tree", "direct", "rd", "oneshot", "hier", "hier-lb", "synthesized")


@dataclass(frozen=True)
class ComputeNode:
    """A kernel on every GPU: ``duration_us`` alone, drawing ``memory_bandwidth`` GB/s of its GPU's memory."""

    id: str
    duration_us: float
    memory_bandwidth: float
    stream: str
    after: tuple[int, ...]
    """Indices of the nodes it waits for (its ``after`` plus the previous node on its stream)."""


@dataclass(frozen=True)
class CollectiveNode:
    """A collective over every GPU: ``kind``, nccl-tests ``size_bytes``, and ``algorithm``.

    ``algorithm``: a baseline name (``ring``, ``tree``, ...), ``synthesized`` (run
    the synthesizer for this kind and size) or a schedule JSON file (path relative
    to the workload file).
    """

    id: str
    kind: CollectiveKind
    size_bytes: int
    algorithm: str
    channels: int | None
    stream: str
    after: tuple[int, ...]


Node = ComputeNode | CollectiveNode


@dataclass(frozen=True)
class Workload:
    """The nodes in file order (each one's ``after`` holds indices into ``nodes``)."""

    name: str
    source: str
    nodes: tuple[Node, ...]
    path: str = ""


def load_workload(path: str | os.PathLike[str]) -> Workload:
    """Read and check a workload file; every problem is one :class:`InputError` naming the file and the field."""
    data = read_json_file(path, InputError, what="workload file")
    workload = workload_from_dict(data, where=str(path))
    base = os.path.dirname(os.path.abspath(path))
    nodes = tuple(n if not isinstance(n, CollectiveNode) or not n.algorithm.lower().endswith((".json", ".xml"))
                  else CollectiveNode(n.id, n.kind, n.size_bytes, os.path.join(base, n.algorithm), n.channels,
                                      n.stream, n.after) for n in workload.nodes)
    return Workload(workload.name, workload.source, nodes, str(path))


def _fail(where: str, field: str, message: str) -> InputError:
    return InputError(message, where=where, field=field)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def workload_from_dict(data: object, *, where: str = "<workload>") -> Workload:
    """Build and check a :class:`Workload` from parsed JSON (unknown fields, references and cycles rejected)."""
    if not isinstance(data, dict):
        raise _fail(where, "", "top level must be a JSON object")
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise _fail(where, unknown[0], f"unknown field (expected: {', '.join(_TOP_KEYS)})")
    if data.get("format", FORMAT) != FORMAT:
        raise _fail(where, "format", f"is {data.get('format')!r}, not {FORMAT!r}")
    name, source = data.get("name", "workload"), data.get("source", "")
    if not isinstance(name, str) or not isinstance(source, str):
        raise _fail(where, "name" if not isinstance(name, str) else "source", "must be a string")
    raw = data.get("nodes")
    if not isinstance(raw, list) or not raw:
        raise _fail(where, "nodes", "must be a non-empty list")
    if len(raw) > MAX_NODES:
        raise _fail(where, "nodes", f"has {len(raw)} nodes; at most {MAX_NODES} (MAX_NODES)")
    index: dict[str, int] = {}
    for k, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise _fail(where, f"nodes[{k}]", "must be an object")
        node_id = entry.get("id")
        if not isinstance(node_id, str) or not node_id:
            raise _fail(where, f"nodes[{k}].id", f"must be a non-empty string (got {node_id!r})")
        if node_id in index:
            raise _fail(where, f"nodes[{k}].id", f"duplicates nodes[{index[node_id]}] ({node_id!r})")
        index[node_id] = k
    last_on_stream: dict[str, int] = {}
    nodes: list[Node] = []
    for k, entry in enumerate(raw):
        field = f"nodes[{k}]"
        kind = entry.get("type")
        keys = _COMPUTE_KEYS if kind == "compute" else _COLLECTIVE_KEYS if kind == "collective" else None
        if keys is None:
            raise _fail(where, f"{field}.type", f"must be \"compute\" or \"collective\" (got {kind!r})")
        unknown = sorted(set(entry) - set(keys))
        if unknown:
            raise _fail(where, f"{field}.{unknown[0]}", f"unknown field for a {kind} node (expected: {', '.join(keys)})")
        stream = entry.get("stream", "compute" if kind == "compute" else "comm")
        if not isinstance(stream, str) or not stream:
            raise _fail(where, f"{field}.stream", "must be a non-empty string")
        after_raw = entry.get("after", [])
        if not isinstance(after_raw, list) or not all(isinstance(a, str) for a in after_raw):
            raise _fail(where, f"{field}.after", "must be a list of node ids")
        after: list[int] = []
        for a in after_raw:
            if a not in index:
                raise _fail(where, f"{field}.after", f"names unknown node {a!r}")
            if index[a] == k:
                raise _fail(where, f"{field}.after", f"names the node itself ({a!r})")
            after.append(index[a])
        previous = last_on_stream.get(stream)
        if previous is not None:
            after.append(previous)
        last_on_stream[stream] = k
        deps = tuple(sorted(set(after)))
        node_id = entry["id"]
        if kind == "compute":
            duration = entry.get("duration_us")
            if not _number(duration) or not 0 < duration <= MAX_DURATION_US:
                raise _fail(where, f"{field}.duration_us", f"must be a number in (0, {MAX_DURATION_US:g}] us "
                            f"(got {duration!r})")
            memory = entry.get("memory_bandwidth", 0)
            if not _number(memory) or not 0 <= memory <= MAX_BANDWIDTH_GBPS:
                raise _fail(where, f"{field}.memory_bandwidth", f"must be a number of GB/s in 0..{MAX_BANDWIDTH_GBPS:g}"
                            f" (got {memory!r})")
            nodes.append(ComputeNode(node_id, float(duration), float(memory), stream, deps))
        else:
            nodes.append(_collective(entry, field, where, node_id, stream, deps))
    _check_acyclic(nodes, where)
    return Workload(name, source, tuple(nodes))


def _collective(entry: dict[str, object], field: str, where: str, node_id: str, stream: str,
                deps: tuple[int, ...]) -> CollectiveNode:
    kind_raw = entry.get("kind")
    if not isinstance(kind_raw, str):
        raise _fail(where, f"{field}.kind", f"must be a collective name (got {kind_raw!r})")
    kind = parse_collective(kind_raw, where=f"{where}: {field}.kind")
    size_raw = entry.get("size")
    if not isinstance(size_raw, str | int) or isinstance(size_raw, bool):
        raise _fail(where, f"{field}.size", f"must be a size such as 25MB or 26214400 (got {size_raw!r})")
    size = parse_size(size_raw, where=f"{where}: {field}.size")
    if size <= 0:
        raise _fail(where, f"{field}.size", "must be > 0 bytes")
    group = entry.get("group", "all")
    if group != "all":
        raise _fail(where, f"{field}.group", f"is {group!r}; only \"all\" (every GPU of the topology) is supported")
    algorithm = entry.get("algorithm", "ring")
    if not isinstance(algorithm, str) or not (algorithm in _ALGORITHMS or algorithm.lower().endswith(".json")):
        if isinstance(algorithm, str) and algorithm.lower().endswith(".xml"):
            raise _fail(where, f"{field}.algorithm", "MSCCL XML files are not supported in workloads yet (GPU memory "
                        "is not modelled for XML programs); give the schedule JSON (synthesize --schedule-out)")
        raise _fail(where, f"{field}.algorithm", f"must be one of {', '.join(_ALGORITHMS)} or a schedule .json "
                    f"file (got {algorithm!r})")
    channels = entry.get("channels")
    if channels is not None and not (isinstance(channels, int) and not isinstance(channels, bool)
                                     and 1 <= channels <= 64):
        raise _fail(where, f"{field}.channels", f"must be an integer in 1..64 (got {channels!r})")
    return CollectiveNode(node_id, kind, size, algorithm, channels, stream, deps)


def _check_acyclic(nodes: list[Node], where: str) -> None:
    """Kahn's algorithm; a cycle is reported with the ids along it."""
    waiting = [len(n.after) for n in nodes]
    dependents: list[list[int]] = [[] for _ in nodes]
    for k, n in enumerate(nodes):
        for a in n.after:
            dependents[a].append(k)
    ready = [k for k, w in enumerate(waiting) if not w]
    done = 0
    while ready:
        k = ready.pop()
        done += 1
        for j in dependents[k]:
            waiting[j] -= 1
            if not waiting[j]:
                ready.append(j)
    if done == len(nodes):
        return
    start = next(k for k, w in enumerate(waiting) if w)  # follow unfinished dependencies until one repeats
    path: list[int] = []
    seen: dict[int, int] = {}
    k = start
    while k not in seen:
        seen[k] = len(path)
        path.append(k)
        k = next(a for a in nodes[k].after if waiting[a])
    cycle = [*path[seen[k]:], k]
    names = " -> ".join(repr(nodes[i].id) for i in reversed(cycle))
    raise _fail(where, "nodes", f"dependency cycle: {names}")
