"""ASTRA-sim multi-dimensional topologies: the generator and the network-YAML importer.

ASTRA-sim's analytical network (astra-network-analytical) describes a network
as dimensions, each a ``Ring``, ``FullyConnected`` or ``Switch`` of
``npus_count`` NPUs with its own bandwidth and latency::

    topology: [ Ring, FullyConnected, Switch ]
    npus_count: [ 2, 8, 4 ]            # 2 x 8 x 4 = 64 NPUs
    bandwidth: [ 200.0, 100.0, 50.0 ]  # GB/s, GB = 2^30 bytes
    latency: [ 50.0, 500.0, 2000.0 ]   # ns, per link (per hop)

It is built the way ASTRA-sim builds it: NPU ids are mixed radix with
dimension 0 varying fastest; along dimension d, every group of NPUs that
share all other coordinates forms one basic topology. A ``Ring`` links
neighbours in both directions, ``FullyConnected`` links every ordered pair,
a ``Switch`` adds one switch vertex linked both ways to each member. Every
link carries the dimension's bandwidth and latency, converted at the edge to
GB/s of 1e9 bytes (x 2^30 / 1e9) and microseconds (/ 1000). Routes follow
ASTRA-sim: dimension order (0 first); on a ring the shorter direction,
clockwise (increasing index) on a tie. Note that ASTRA-sim forwards through
intermediate NPUs, while in this package data rests on a GPU, so such a
route is a relay of several transfers.

One more key is taccl's own: ``switch_model: store-and-forward`` (or
``cut-through``, the default) sets the topology's switch model
(:class:`~taccl_py.topology.SwitchModel`). ASTRA-sim ignores it (it picks the
model by the backend it runs: congestion-aware forwards store-and-forward);
the exporter writes it only for store-and-forward, so the round trip is exact.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from taccl_py.errors import TopologyError
from taccl_py.inputs import json_depth, read_text_file
from taccl_py.library.builder import TopologyBuilder, check_link_budget
from taccl_py.library.grids import grid_coordinates, grid_id
from taccl_py.limits import MAX_JSON_DEPTH
from taccl_py.topology import Dimension, DimensionKind, SwitchModel, Topology, Vertex
from taccl_py.topology_io import atomic_write_text, parse_switch_model
from taccl_py.units import ns_to_us, us_to_ns

__all__ = [
    "AstraDimension",
    "AstraKind",
    "astra_dimensions_of",
    "astra_route",
    "astra_switch_name",
    "astra_topology",
    "dumps_astra_network",
    "load_astra_yaml",
    "parse_astra_dims",
    "parse_astra_network",
    "save_astra_yaml",
]

ASTRA_GB = 2**30
"""ASTRA-sim's GB (bytes); its bandwidths are GB/s of 2^30 bytes."""


class AstraKind(StrEnum):
    """ASTRA-sim's basic topologies (the spelling its YAML files use)."""

    RING = "Ring"
    FULLY_CONNECTED = "FullyConnected"
    SWITCH = "Switch"

    @property
    def short(self) -> str:
        return {"Ring": "ring", "FullyConnected": "fc", "Switch": "switch"}[self.value]

    @property
    def dimension_kind(self) -> DimensionKind:
        """The topology model's name for this kind."""
        return {"Ring": DimensionKind.RING, "FullyConnected": DimensionKind.FULLY_CONNECTED,
                "Switch": DimensionKind.SWITCH}[self.value]


_LENIENT_KINDS = {"ring": AstraKind.RING, "fullyconnected": AstraKind.FULLY_CONNECTED,
                  "fc": AstraKind.FULLY_CONNECTED, "switch": AstraKind.SWITCH}
_KIND_CHOICES = "Ring, FullyConnected or Switch"


@dataclass(frozen=True)
class AstraDimension:
    """One dimension in ASTRA-sim's own units: bandwidth GB/s of 2^30 bytes, latency ns."""

    kind: AstraKind
    npus: int
    bandwidth_gibps: float
    latency_ns: float

    @property
    def bandwidth_GBps(self) -> float:
        """Bandwidth in GB/s of 1e9 bytes (this package's unit)."""
        return self.bandwidth_gibps * ASTRA_GB / 1e9

    @property
    def latency_us(self) -> float:
        return ns_to_us(self.latency_ns)

    def describe(self) -> str:
        return f"{self.kind.value}({self.npus}, {self.bandwidth_gibps:g} GB/s, {self.latency_ns:g} ns)"


def _sizes(dims: Sequence[AstraDimension]) -> tuple[int, ...]:
    return tuple(d.npus for d in dims)


def astra_switch_name(dims: Sequence[AstraDimension], dim: int, npu: int) -> str:
    """Name of the switch vertex of dimension ``dim`` serving ``npu`` (``dim<d>.switch<j>``).

    ``j`` counts the basic topologies of that dimension in ASTRA-sim's construction order.
    """
    stride = math.prod(_sizes(dims)[:dim])
    block = stride * dims[dim].npus
    return f"dim{dim}.switch{(npu // block) * stride + npu % stride}"


def _validate_dims(dims: Sequence[AstraDimension], where: str) -> tuple[AstraDimension, ...]:
    if isinstance(dims, str | bytes) or not isinstance(dims, Sequence) or not dims:
        raise TopologyError("must list at least one dimension", where=where, field="dims")
    for k, d in enumerate(dims):
        if not isinstance(d, AstraDimension):
            raise TopologyError(f"must be an AstraDimension (got {d!r})", where=where, field=f"dims[{k}]")
        _check_values(d.npus, d.bandwidth_gibps, d.latency_ns, where,
                      (f"dims[{k}].npus", f"dims[{k}].bandwidth_gibps", f"dims[{k}].latency_ns"))
    return tuple(dims)


def _check_values(npus: object, bandwidth: object, latency: object, where: str,
                  fields: tuple[str, str, str]) -> None:
    """NPU count an integer > 1 (as ASTRA-sim requires), bandwidth > 0, latency >= 0."""
    if isinstance(npus, bool) or not isinstance(npus, int):
        raise TopologyError(f"must be an integer (got {npus!r})", where=where, field=fields[0])
    if npus < 2:
        raise TopologyError(f"must be > 1 (got {npus})", where=where, field=fields[0])
    for value, field, positive in ((bandwidth, fields[1], True), (latency, fields[2], False)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise TopologyError(f"must be a finite number (got {value!r})", where=where, field=field)
        if positive and value <= 0:
            raise TopologyError(f"must be > 0 (got {value:g})", where=where, field=field)
        if not positive and value < 0:
            raise TopologyError(f"must be >= 0 (got {value:g})", where=where, field=field)


def _link_count(dims: Sequence[AstraDimension]) -> int:
    total = math.prod(_sizes(dims))
    count = 0
    for d in dims:
        groups = total // d.npus
        if d.kind is AstraKind.RING:
            count += groups * (2 if d.npus == 2 else 2 * d.npus)
        elif d.kind is AstraKind.FULLY_CONNECTED:
            count += groups * d.npus * (d.npus - 1)
        else:
            count += groups * 2 * d.npus
    return count


def astra_topology(dims: Sequence[AstraDimension], *, name: str | None = None, source: str | None = None,
                   where: str | None = None) -> Topology:
    """Build an ASTRA-sim multi-dimensional network as a :class:`Topology` (see the module doc).

    ``where`` names the origin (a file) in error messages; it defaults to the name.
    """
    where = where or name or "astra"
    dims = _validate_dims(dims, where)
    sizes = _sizes(dims)
    total = math.prod(sizes)
    check_link_budget(where, _link_count(dims))
    name = name or "astra-" + "-".join(f"{d.kind.short}{d.npus}" for d in dims)
    builder = TopologyBuilder(name, total)
    stride = 1
    for k, d in enumerate(dims):
        block = stride * d.npus
        kind = f"dim{k}-{d.kind.value.lower()}"
        bandwidth, latency = d.bandwidth_GBps, d.latency_us
        for group in range(total // block):
            for offset in range(stride):
                base = group * block + offset
                members = [base + i * stride for i in range(d.npus)]
                if d.kind is AstraKind.RING:
                    for i in range(d.npus if d.npus > 2 else 1):
                        builder.link(members[i], members[(i + 1) % d.npus], bandwidth, latency, kind)
                elif d.kind is AstraKind.FULLY_CONNECTED:
                    for i, a in enumerate(members):
                        for b in members[i + 1:]:
                            builder.link(a, b, bandwidth, latency, kind)
                else:
                    switch = builder.add_switch(f"dim{k}.switch{group * stride + offset}", "switch")
                    for npu in members:
                        builder.link(npu, switch, bandwidth, latency, kind)
        stride = block
    shape = " x ".join(d.describe() for d in dims)
    return builder.build(source=source or (
        f"ASTRA-sim analytical network {shape} = {total} NPUs; bandwidth GB/s of 2^30 bytes converted to "
        f"GB/s of 1e9, latency ns to us, per link; NPU id mixed radix, dimension 0 fastest"),
        dimensions=[Dimension(d.kind.dimension_kind, d.npus) for d in dims])


def astra_route(dims: Sequence[AstraDimension], src: int, dst: int) -> tuple[Vertex, ...]:
    """The vertices ASTRA-sim routes ``src -> dst`` through (dimension order, shorter ring side).

    Use :meth:`Topology.route_from_vertices` on the result to get link indices.
    """
    dims = _validate_dims(dims, "astra")
    sizes = _sizes(dims)
    total = math.prod(sizes)
    for label, npu in (("src", src), ("dst", dst)):
        if isinstance(npu, bool) or not isinstance(npu, int) or not 0 <= npu < total:
            raise TopologyError(f"must be an NPU id in 0..{total - 1} (got {npu!r})", where="astra_route",
                                field=label)
    current = list(grid_coordinates(src, sizes))
    target = grid_coordinates(dst, sizes)
    route: list[Vertex] = [src]
    for k, d in enumerate(dims):
        if current[k] == target[k]:
            continue
        if d.kind is AstraKind.SWITCH:
            route.append(astra_switch_name(dims, k, grid_id(current, sizes)))
            current[k] = target[k]
            route.append(grid_id(current, sizes))
        elif d.kind is AstraKind.FULLY_CONNECTED:
            current[k] = target[k]
            route.append(grid_id(current, sizes))
        else:
            clockwise = (target[k] - current[k]) % d.npus
            step = -1 if d.npus - clockwise < clockwise else 1
            while current[k] != target[k]:
                current[k] = (current[k] + step) % d.npus
                route.append(grid_id(current, sizes))
    return tuple(route)


def _kind_from_text(text: object, where: str, field: str, *, strict: bool) -> AstraKind:
    if isinstance(text, str):
        try:
            return AstraKind(text)
        except ValueError:
            lenient = _LENIENT_KINDS.get(text.replace("-", "").replace("_", "").lower())
            if lenient is not None and not strict:
                return lenient
            if lenient is not None:
                raise TopologyError(f"unknown topology kind {text!r} (ASTRA-sim spells it {lenient.value!r}; "
                                    f"expected {_KIND_CHOICES})", where=where, field=field) from None
    raise TopologyError(f"unknown topology kind {text!r} (expected {_KIND_CHOICES})", where=where, field=field)


def parse_astra_network(data: Any, *, where: str = "<network>") -> tuple[AstraDimension, ...]:
    """The dimensions of a parsed ASTRA-sim network YAML; raise :class:`TopologyError` naming the field.

    Keys other than ``topology``, ``npus_count``, ``bandwidth`` and ``latency`` are
    ignored, as ASTRA-sim's analytical backend ignores them (:func:`load_astra_yaml`
    also reads taccl's ``switch_model``).
    """
    if not isinstance(data, dict):
        raise TopologyError("top level must be a mapping with topology, npus_count, bandwidth and latency "
                            f"(got {type(data).__name__})", where=where)
    lists: dict[str, list[Any]] = {}
    for key in ("topology", "npus_count", "bandwidth", "latency"):
        if key not in data:
            raise TopologyError("is missing", where=where, field=key)
        value = data[key]
        if not isinstance(value, list) or not value:
            raise TopologyError(f"must be a non-empty list, one entry per dimension (got {value!r})",
                                where=where, field=key)
        lists[key] = value
    dims_count = len(lists["topology"])
    for key in ("npus_count", "bandwidth", "latency"):
        if len(lists[key]) != dims_count:
            raise TopologyError(f"has {len(lists[key])} entries but topology has {dims_count} "
                                f"(one per dimension)", where=where, field=key)
    dims = []
    for k in range(dims_count):
        kind = _kind_from_text(lists["topology"][k], where, f"topology[{k}]", strict=True)
        npus, bandwidth, latency = lists["npus_count"][k], lists["bandwidth"][k], lists["latency"][k]
        _check_values(npus, bandwidth, latency, where, (f"npus_count[{k}]", f"bandwidth[{k}]", f"latency[{k}]"))
        dims.append(AstraDimension(kind, npus, float(bandwidth), float(latency)))
    return tuple(dims)


def load_astra_yaml(path: str | os.PathLike[str]) -> Topology:
    """Import an ASTRA-sim network YAML file as a :class:`Topology` named after the file."""
    where = str(path)
    text = read_text_file(path, TopologyError, what="network file")
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise TopologyError(f"nests lists/mappings more than {MAX_JSON_DEPTH} levels deep (MAX_JSON_DEPTH)",
                            where=where) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise TopologyError(f"not valid YAML: {problem}{at}", where=where) from None
    if json_depth(data) > MAX_JSON_DEPTH:
        raise TopologyError(f"nests lists/mappings more than {MAX_JSON_DEPTH} levels deep (MAX_JSON_DEPTH)",
                            where=where)
    dims = parse_astra_network(data, where=where)
    switch_model = parse_switch_model(data.get("switch_model", SwitchModel.CUT_THROUGH.value), where, "switch_model")
    shape = " x ".join(d.describe() for d in dims)
    return astra_topology(dims, name=Path(path).stem, where=where, source=(
        f"ASTRA-sim network file {Path(path).name}: {shape}; bandwidth GB/s of 2^30 bytes converted to GB/s "
        f"of 1e9, latency ns to us, per link; NPU id mixed radix, dimension 0 fastest")).with_switch_model(switch_model)


def parse_astra_dims(text: str, *, where: str = "--dims") -> tuple[AstraDimension, ...]:
    """Parse ``Ring:2:200:50,FullyConnected:8:100:500`` (kind:npus:GB/s of 2^30:ns per dimension)."""
    dims = []
    parts = [p.strip() for p in str(text).split(",")]
    for k, part in enumerate(parts):
        fields = part.split(":")
        if len(fields) != 4:
            raise TopologyError(f"dimension {k} {part!r} must be KIND:NPUS:BANDWIDTH:LATENCY, e.g. Ring:8:50:500 "
                                f"(bandwidth GB/s of 2^30 bytes, latency ns)", where=where)
        kind = _kind_from_text(fields[0], where, f"dimension {k}", strict=False)
        try:
            npus = int(fields[1])
            bandwidth, latency = float(fields[2]), float(fields[3])
        except ValueError:
            raise TopologyError(f"dimension {k} {part!r}: NPUS must be an integer and BANDWIDTH, LATENCY numbers",
                                where=where) from None
        _check_values(npus, bandwidth, latency, where,
                      (f"dimension {k} npus", f"dimension {k} bandwidth", f"dimension {k} latency"))
        dims.append(AstraDimension(kind, npus, bandwidth, latency))
    return tuple(dims)



# ------------------------------------------------------------------- export
def _bandwidth_to_ours(gibps: float) -> float:
    """The importer's conversion (as :attr:`AstraDimension.bandwidth_GBps`)."""
    return gibps * ASTRA_GB / 1e9


def _latency_to_ours(ns: float) -> float:
    """The importer's conversion (as :attr:`AstraDimension.latency_us`)."""
    return ns_to_us(ns)


def _astra_number(value: float, naive: float, convert: Any, where: str, field: str) -> float:
    """The shortest decimal that ``convert`` (the importer's conversion) maps exactly to ``value``.

    A number an ASTRA-sim file wrote comes back as it was written; ``naive`` is the plain inverse.
    """
    for digits in range(1, 18):
        candidate = float(f"{naive:.{digits}g}")
        if convert(candidate) == value:
            return candidate
    low = high = naive
    for _ in range(64):  # the plain inverse can be a few ulps off
        low, high = math.nextafter(low, -math.inf), math.nextafter(high, math.inf)
        for candidate in (low, high):
            if convert(candidate) == value:
                return candidate
    raise TopologyError(f"{value!r} has no exact ASTRA-sim counterpart", where=where, field=field)


def _canonical_links(topology: Topology) -> Counter[tuple[Any, Any, float, float]]:
    """Links with each switch named by the GPUs it touches (switch names differ between generators)."""
    touching: dict[str, set[int]] = {s.name: set() for s in topology.switches}
    for link in topology.links:
        for a, b in ((link.src, link.dst), (link.dst, link.src)):
            if isinstance(a, str) and topology.is_gpu(b):
                assert isinstance(b, int)
                touching[a].add(b)

    def key(v: Vertex) -> Any:
        return v if topology.is_gpu(v) else ("switch", frozenset(touching[str(v)]))

    return Counter((key(lk.src), key(lk.dst), lk.bandwidth, lk.latency) for lk in topology.links)


def _dimension_figures(topology: Topology, dim: int) -> tuple[float, float]:
    """(bandwidth GB/s, latency us) of the links of one dimension, read on its first group."""
    group = topology.dimension_group(0, dim)
    kind = topology.dimensions[dim].kind
    where, field = topology.name, f"dimensions[{dim}]"
    if kind is DimensionKind.SWITCH:
        for li in topology.links_from(group[0]):
            link = topology.links[li]
            if isinstance(link.dst, str):
                peers = {topology.links[k].dst for k in topology.links_from(link.dst)}
                if peers == set(group):
                    return link.bandwidth, link.latency
        raise TopologyError(f"cannot be an ASTRA-sim Switch dimension: no single switch joins GPU {group[0]}'s "
                            f"group {list(group)}", where=where, field=field)
    index = topology.link_index.get((group[0], group[1]))
    if index is None:
        raise TopologyError(f"has no link GPU {group[0]} -> GPU {group[1]}", where=where, field=field)
    return topology.links[index].bandwidth, topology.links[index].latency


def astra_dimensions_of(topology: Topology) -> tuple[AstraDimension, ...]:
    """The ASTRA-sim dimensions a topology is built from; :class:`TopologyError` when it is not such a network.

    Dimensions of size 1 are left out (they change no NPU id). The topology must be exactly what
    :func:`astra_topology` builds from the result (switch names aside), so nothing is lost.
    """
    where = topology.name
    if not topology.dimensions:
        raise TopologyError("has no dimensions: only a multi-dimensional network (an imported ASTRA-sim file, "
                            "`topo generate astra` or `torus`) can be written as an ASTRA-sim network",
                            where=where, field="dimensions")
    kinds = {DimensionKind.RING: AstraKind.RING, DimensionKind.FULLY_CONNECTED: AstraKind.FULLY_CONNECTED,
             DimensionKind.SWITCH: AstraKind.SWITCH}
    dims = []
    for k, dim in enumerate(topology.dimensions):
        if dim.kind not in kinds:
            raise TopologyError(f"is a {dim.kind.value} dimension; ASTRA-sim has Ring, FullyConnected and Switch "
                                "only", where=where, field=f"dimensions[{k}]")
        if dim.size < 2:
            continue
        bandwidth, latency = _dimension_figures(topology, k)
        field = f"dimensions[{k}]"
        gibps = _astra_number(bandwidth, bandwidth * 1e9 / ASTRA_GB, _bandwidth_to_ours, where, f"{field}.bandwidth")
        ns = _astra_number(latency, us_to_ns(latency), _latency_to_ours, where, f"{field}.latency")
        dims.append(AstraDimension(kinds[dim.kind], dim.size, gibps, ns))
    if not dims:
        raise TopologyError("every dimension has size 1", where=where, field="dimensions")
    rebuilt = astra_topology(dims, name=topology.name)
    if rebuilt.num_gpus != topology.num_gpus or _canonical_links(rebuilt) != _canonical_links(topology):
        missing = _canonical_links(rebuilt) - _canonical_links(topology)
        extra = _canonical_links(topology) - _canonical_links(rebuilt)
        what = (f"lacks the link {_show(next(iter(missing)))}" if missing else
                f"has the link {_show(next(iter(extra)))} that the network does not" if extra else
                "differs in its switches")
        raise TopologyError(f"is not the ASTRA-sim network {' x '.join(d.describe() for d in dims)}: it {what}",
                            where=where)
    return tuple(dims)


def _show(entry: tuple[Any, Any, float, float]) -> str:
    def name(v: Any) -> str:
        return f"GPU {v}" if isinstance(v, int) else f"switch of GPUs {sorted(v[1])}"

    return f"{name(entry[0])} -> {name(entry[1])} ({entry[2]:g} GB/s, {entry[3]:g} us)"


def _yaml_float(value: float) -> str:
    """A float YAML 1.1 (PyYAML) reads back as the same float: always a dot before any exponent."""
    text = repr(float(value))
    if "e" in text:
        mantissa, exponent = text.split("e")
        if "." not in mantissa:
            mantissa += ".0"
        text = f"{mantissa}e{exponent}"
    return text


def dumps_astra_network(dims: Sequence[AstraDimension], *, comment: str = "",
                        switch_model: SwitchModel = SwitchModel.CUT_THROUGH) -> str:
    """An ASTRA-sim network YAML in the style of its own example files (GB/s of 2^30 bytes, ns).

    A ``switch_model`` other than cut-through adds taccl's own ``switch_model`` key (ASTRA-sim ignores it).
    """
    dims = _validate_dims(dims, "astra")
    lines = [f"# {line}" for line in comment.splitlines() if line.strip()]
    lines += [f"topology: [ {', '.join(d.kind.value for d in dims)} ]",
              f"npus_count: [ {', '.join(str(d.npus) for d in dims)} ]",
              f"bandwidth: [ {', '.join(_yaml_float(d.bandwidth_gibps) for d in dims)} ]",
              f"latency: [ {', '.join(_yaml_float(d.latency_ns) for d in dims)} ]"]
    if switch_model is not SwitchModel.CUT_THROUGH:
        lines.append(f"switch_model: {switch_model.value}  # taccl_py's; ASTRA-sim ignores it")
    return "\n".join(lines) + "\n"


def save_astra_yaml(topology: Topology, path: str | os.PathLike[str]) -> tuple[AstraDimension, ...]:
    """Write ``topology`` as an ASTRA-sim network YAML (atomically); returns its dimensions."""
    dims = astra_dimensions_of(topology)
    text = dumps_astra_network(dims, comment=f"ASTRA-sim network written by taccl_py from {topology.name} "
                                             f"({topology.num_gpus} NPUs)", switch_model=topology.switch_model)
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise TopologyError(f"cannot write: {exc.strerror or exc}", where=str(path)) from None
    return dims
