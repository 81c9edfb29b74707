"""Communication sketches: the optional input that narrows the synthesizer's search.

A sketch says which logical connections the algorithm may use inside a machine
(direct links only, or any pair behind a switch, with TACCL's ``uc-max`` /
``uc-min`` hyperedge policy), which GPU of a machine may send to which GPU of
another (``internode_conn``), whose chunks a sender forwards
(``gpus_to_sender_rev_map``), whether a sender's own chunks go first, the
symmetry to exploit and the chunk partitioning. TACCL's sketch JSON is accepted
as it ships; without a sketch one is derived from the topology (every physical
connection allowed, symmetry found automatically).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taccl_py.errors import SketchError
from taccl_py.inputs import read_json_file
from taccl_py.topology import Topology

__all__ = ["Sketch", "check_sketch", "derive_sketch", "load_sketch", "sketch_from_dict"]

_POLICIES = ("uc-max", "uc-min")


@dataclass(frozen=True)
class Sketch:
    """Normalized sketch. Local GPU ids are positions inside a machine (0..g-1).

    ``intranode``: ``"direct"`` (only direct GPU-GPU links; TACCL's ``none``) or
    ``"switch"`` (GPUs of a ``switch_groups`` entry reach each other through the switch).
    ``internode_conn``: local sender -> local receivers on other machines (None: any physical route).
    ``sender_feeds``: local sender -> local GPUs whose own chunks it may carry to other machines.
    """

    intranode: str = "switch"
    switch_groups: tuple[tuple[int, ...], ...] = ()
    hyperedge_policy: tuple[str, ...] = ()
    internode_conn: Mapping[int, tuple[int, ...]] | None = None
    direct_map: bool = False
    sender_feeds: Mapping[int, tuple[int, ...]] | None = None
    enforce_ordering: bool = False
    symmetry_offsets: tuple[tuple[int, int], ...] = ()
    chunk_factor: int | None = None
    num_machines: int | None = None
    origin: str = "derived from the topology"
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)
    path: str = field(default="", compare=False)
    """The file the sketch was read from (named in errors), or empty."""

    def describe(self) -> str:
        parts = [f"intranode={self.intranode}"]
        if self.switch_groups:
            parts.append(f"switch groups={len(self.switch_groups)} ({'/'.join(self.hyperedge_policy)})")
        parts.append("internode=" + ("local GPU i to local GPU i" if self.direct_map else
                                     "any physical route" if self.internode_conn is None else
                                     ", ".join(f"{s}->{list(r)}" for s, r in sorted(self.internode_conn.items()))))
        if self.sender_feeds is not None:
            parts.append("senders forward " + ", ".join(f"{s}:{list(g)}" for s, g in sorted(self.sender_feeds.items())))
        if self.symmetry_offsets:
            parts.append(f"symmetry offsets={[list(o) for o in self.symmetry_offsets]}")
        if self.chunk_factor:
            parts.append(f"chunkup={self.chunk_factor}")
        return f"{self.origin}: " + "; ".join(parts)


def derive_sketch() -> Sketch:
    """The sketch used when the user gives none: every physical connection, symmetry found automatically."""
    return Sketch()


def load_sketch(path: str | os.PathLike[str]) -> Sketch:
    data = read_json_file(path, SketchError, what="sketch file")
    return sketch_from_dict(data, where=str(path))


def _int_list(value: Any, where: str, field_name: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise SketchError(f"must be a list of GPU ids (got {value!r})", where=where, field=field_name)
    return tuple(value)


def _local_map(value: Any, where: str, field_name: str) -> dict[int, tuple[int, ...]]:
    if not isinstance(value, dict):
        raise SketchError(f"must be an object mapping a GPU id to a list of GPU ids (got {value!r})",
                          where=where, field=field_name)
    result: dict[int, tuple[int, ...]] = {}
    for key, targets in value.items():
        try:
            sender = int(key)
        except ValueError:
            raise SketchError(f"key {key!r} is not a GPU id", where=where, field=field_name) from None
        result[sender] = _int_list(targets, where, f"{field_name}.{key}")
    return result


def sketch_from_dict(data: Any, *, where: str = "<sketch>") -> Sketch:
    """Read TACCL's sketch JSON (``nnodes``, ``intranode_sketch``, ``internode_sketch``, ...)."""
    if not isinstance(data, dict):
        raise SketchError("top level must be a JSON object", where=where)
    known = {"nnodes", "intranode_sketch", "internode_sketch", "symmetry_offsets", "hyperparameters"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SketchError(f"unknown field {unknown[0]!r} (a TACCL sketch has: {', '.join(sorted(known))})",
                          where=where)
    nnodes = data.get("nnodes")
    if nnodes is not None and (not isinstance(nnodes, int) or isinstance(nnodes, bool) or nnodes < 1):
        raise SketchError(f"must be a positive integer (got {nnodes!r})", where=where, field="nnodes")

    intra = data.get("intranode_sketch", {"strategy": "switch"})
    if not isinstance(intra, dict):
        raise SketchError("must be an object", where=where, field="intranode_sketch")
    strategy = intra.get("strategy", "switch")
    groups: tuple[tuple[int, ...], ...] = ()
    policies: tuple[str, ...] = ()
    if strategy == "none":
        intranode = "direct"
    elif strategy == "switch":
        intranode = "switch"
        raw_groups = intra.get("switches", [])
        if not isinstance(raw_groups, list):
            raise SketchError("must be a list of GPU lists", where=where, field="intranode_sketch.switches")
        groups = tuple(_int_list(g, where, f"intranode_sketch.switches[{k}]") for k, g in enumerate(raw_groups))
        raw_policies = intra.get("switch_hyperedge_strategy", ["uc-max"] * len(groups))
        if not isinstance(raw_policies, list) or any(p not in _POLICIES for p in raw_policies):
            raise SketchError(f"must be a list of {' or '.join(_POLICIES)} (got {raw_policies!r}); TACCL's "
                              "'minmax'/'maxmin' are not supported", where=where,
                              field="intranode_sketch.switch_hyperedge_strategy")
        if groups and len(raw_policies) not in (1, len(groups)):
            raise SketchError(f"has {len(raw_policies)} entries for {len(groups)} switches", where=where,
                              field="intranode_sketch.switch_hyperedge_strategy")
        policies = tuple(raw_policies) * (len(groups) if len(raw_policies) == 1 and groups else 1)
    else:
        raise SketchError(f"must be 'none' or 'switch' (got {strategy!r})", where=where,
                          field="intranode_sketch.strategy")

    inter = data.get("internode_sketch")
    conn: dict[int, tuple[int, ...]] | None = None
    feeds: dict[int, tuple[int, ...]] | None = None
    enforce = False
    direct_map = False
    if inter is not None:
        if not isinstance(inter, dict):
            raise SketchError("must be an object", where=where, field="internode_sketch")
        istrategy = inter.get("strategy", "relay")
        if istrategy != "relay":
            raise SketchError(f"must be 'relay' (got {istrategy!r})", where=where, field="internode_sketch.strategy")
        raw_conn = inter.get("internode_conn", "fully-connected")
        if raw_conn == "fully-connected":
            conn = None
        elif raw_conn == "direct-map":
            direct_map = True
        else:
            conn = _local_map(raw_conn, where, "internode_sketch.internode_conn")
        if "gpus_to_sender_rev_map" in inter:
            feeds = _local_map(inter["gpus_to_sender_rev_map"], where, "internode_sketch.gpus_to_sender_rev_map")
        enforce = bool(inter.get("enforce_ordering", False))

    offsets_raw = data.get("symmetry_offsets", [])
    if not isinstance(offsets_raw, list) or not all(
            isinstance(o, list) and len(o) == 2 and all(isinstance(x, int) and x > 0 for x in o) for o in offsets_raw):
        raise SketchError(f"must be a list of [offset, group size] pairs (got {offsets_raw!r})", where=where,
                          field="symmetry_offsets")
    hyper = data.get("hyperparameters", {})
    if not isinstance(hyper, dict):
        raise SketchError("must be an object", where=where, field="hyperparameters")
    chunkup = hyper.get("input_chunkup")
    if chunkup is not None and (not isinstance(chunkup, int) or isinstance(chunkup, bool) or chunkup < 1):
        raise SketchError(f"must be a positive integer (got {chunkup!r})", where=where,
                          field="hyperparameters.input_chunkup")
    return Sketch(intranode=intranode, switch_groups=groups, hyperedge_policy=policies, internode_conn=conn,
                  direct_map=direct_map, sender_feeds=feeds, enforce_ordering=enforce,
                  symmetry_offsets=tuple((int(o), int(g)) for o, g in offsets_raw), chunk_factor=chunkup,
                  num_machines=nnodes, origin=f"sketch {Path(where).name}", raw=data, path=where)


def check_sketch(sketch: Sketch, topology: Topology) -> None:
    """Every GPU the sketch names is a local GPU of the topology's machines, and every symmetry offset
    permutes its GPUs; raise :class:`SketchError` naming the file and field otherwise.

    (Whether an offset is a symmetry of the topology needs its graph; the synthesizer checks that.)
    """
    where = sketch.path or sketch.origin
    n = topology.num_gpus
    local = len(topology.machines[0]) if topology.machines else n
    span = (f"a machine of {topology.name} has local GPUs 0..{local - 1}" if topology.machines else
            f"{topology.name} has GPUs 0..{local - 1}")

    def check_ids(ids: Sequence[int], field_name: str) -> None:
        for g in ids:
            if not 0 <= g < local:
                raise SketchError(f"names GPU {g}, but {span}", where=where, field=field_name)

    for k, group in enumerate(sketch.switch_groups):
        check_ids(group, f"intranode_sketch.switches[{k}]")
    for name, mapping in (("internode_conn", sketch.internode_conn), ("gpus_to_sender_rev_map", sketch.sender_feeds)):
        for sender, targets in (mapping or {}).items():
            check_ids((sender, *targets), f"internode_sketch.{name}.{sender}")
    for k, (offset, group_size) in enumerate(sketch.symmetry_offsets):
        field_name = f"symmetry_offsets[{k}]"
        if n % group_size:
            raise SketchError(f"[{offset}, {group_size}]: groups of {group_size} GPUs do not divide the {n} GPUs of "
                              f"{topology.name}", where=where, field=field_name)
        if offset % group_size == 0:
            raise SketchError(f"[{offset}, {group_size}]: an offset of {offset} within groups of {group_size} moves no "
                              "GPU (use 0 < offset < group size)", where=where, field=field_name)
