"""The topology JSON file format: load with clear errors, save canonically.

::

    {"name": "...", "source": "where the numbers come from", "gpus": 8,
     "machines": [[0, 1, 2, 3, 4, 5, 6, 7]],
     "dimensions": [{"kind": "switch", "size": 8}],
     "switches": [{"name": "nvs0", "kind": "nvswitch"}],
     "links": [{"src": 0, "dst": "nvs0", "bandwidth": 300, "latency": 0.35,
                "kind": "nvlink", "bidirectional": true}]}

GPUs are ints ``0..gpus-1``; switches are declared by name (optional ``kind``,
``multicast``, ``reduce``). ``dimensions`` (optional) lists the multi-dimensional
structure, dimension 0 varying fastest in the GPU id (see :class:`~taccl_py.topology.Dimension`).
A link with ``"bidirectional": true`` stands for two
directed links with the same figures. ``save`` writes one element per line and
merges a link with its reverse when they are adjacent and identical, so
``save(load(f))`` reproduces a saved file byte for byte and ``load(save(t)) == t``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from taccl_py.errors import OutputError, TopologyError
from taccl_py.inputs import read_json_file
from taccl_py.limits import (
    MAX_BANDWIDTH_GBPS,
    MAX_GPUS,
    MAX_LATENCY_US,
    MIN_BANDWIDTH_GBPS,
    limit_text,
)
from taccl_py.topology import (
    MAX_COMM_CHANNELS,
    Dimension,
    DimensionKind,
    Endpoint,
    Link,
    Switch,
    SwitchModel,
    Topology,
    Vertex,
    check_connected,
    check_dimensions,
    check_machines,
)

__all__ = ["atomic_write_bytes", "atomic_write_text", "dumps_topology", "load_topology", "parse_switch_model", "save_topology",
           "topology_from_dict", "topology_to_dict"]

_TOP_KEYS = {"name", "source", "gpus", "machines", "dimensions", "switches", "links", "format", "endpoints", "runtime",
             "switch_model"}
_ENDPOINT_KEYS = ("gpus", "memory_bandwidth", "comm_channels", "channel_bandwidth")
_DIMENSION_KEYS = {"kind", "size"}
_LINK_KEYS = {"src", "dst", "bandwidth", "latency", "kind", "bidirectional", "provenance"}
_SWITCH_KEYS = {"name", "kind", "multicast", "reduce"}


def _new_file_mode() -> int:
    """The mode ``open()`` would give a new file (0o666 less the umask); mkstemp alone gives 0o600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary file beside ``path`` and rename it into place.

    An existing file is replaced only once the new text is complete; an OS error
    becomes :class:`OutputError` naming ``path`` (and the temporary file is removed).
    A device or a named pipe (``/dev/stdout``, ``/dev/null``) is written into, not replaced.
    """
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """:func:`atomic_write_text` for bytes (a PNG plot)."""
    target = Path(path)
    if target.exists() and not target.is_file() and not target.is_dir():
        _write_through(target, data)  # a device or a pipe (-o /dev/stdout): renaming over it would replace it
        return
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot write here: {_why(exc)}", where=str(path)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, _new_file_mode())
        os.replace(tmp, target)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write: {_why(exc)}", where=str(path)) from None
        raise


def _write_through(target: Path, data: bytes) -> None:
    try:
        with open(target, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise OutputError(f"cannot write: {_why(exc)}", where=str(target)) from None


def _why(exc: OSError) -> str:
    """The OS's reason, without the temporary file's name."""
    if isinstance(exc, IsADirectoryError) or exc.errno == errno.EISDIR:
        return "it is a directory"
    return exc.strerror or str(exc)


def load_topology(path: str | os.PathLike[str]) -> Topology:
    """Read and validate a topology file; raise :class:`TopologyError` naming file and field."""
    where = str(path)
    data = read_json_file(path, TopologyError, what="topology file")
    return topology_from_dict(data, where=where, default_name=Path(path).stem)


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(float(x))


def _require(cond: bool, message: str, where: str, field: str) -> None:
    if not cond:
        raise TopologyError(message, where=where, field=field)


def _typename(x: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(x), type(x).__name__)


def topology_from_dict(data: Any, *, where: str = "<topology>", default_name: str = "topology") -> Topology:
    """Build a validated :class:`Topology` from parsed JSON."""
    _require(isinstance(data, dict), f"top level must be a JSON object (got {_typename(data)})", where, "")
    unknown = sorted(set(data) - _TOP_KEYS)
    _require(not unknown, f"unknown field {unknown[0]!r} (expected: {', '.join(sorted(_TOP_KEYS))})"
             if unknown else "", where, "")
    _require("gpus" in data, "is missing", where, "gpus")
    num_gpus = data["gpus"]
    _require(isinstance(num_gpus, int) and not isinstance(num_gpus, bool),
             f"must be an integer (got {_typename(num_gpus)} {num_gpus!r})", where, "gpus")
    _require(num_gpus >= 1, f"must be >= 1 (got {num_gpus})", where, "gpus")
    _require(num_gpus <= MAX_GPUS, f"is {num_gpus}; {limit_text('MAX_GPUS', MAX_GPUS)}", where, "gpus")
    name = data.get("name", default_name)
    _require(isinstance(name, str), f"must be a string (got {_typename(name)})", where, "name")
    source = data.get("source", "")
    _require(isinstance(source, str), f"must be a string (got {_typename(source)})", where, "source")

    switches = _parse_switches(data.get("switches", []), where)
    names = {s.name for s in switches}
    machines_raw = data.get("machines", [])
    _require(isinstance(machines_raw, list) and all(isinstance(m, list) for m in machines_raw),
             "must be a list of lists of GPU ids", where, "machines")
    check_machines(machines_raw, num_gpus, where=where)
    machines = tuple(tuple(m) for m in machines_raw)
    dimensions = _parse_dimensions(data.get("dimensions", []), num_gpus, where)

    links_raw = data.get("links")
    _require(links_raw is not None, "is missing", where, "links")
    _require(isinstance(links_raw, list), f"must be a list (got {_typename(links_raw)})", where, "links")
    links: list[Link] = []
    first_entry: dict[tuple[Vertex, Vertex], int] = {}
    for i, entry in enumerate(links_raw):
        for link in _parse_link(entry, i, num_gpus, names, where):
            key = (link.src, link.dst)
            if key in first_entry:
                raise TopologyError(f"duplicates links[{first_entry[key]}] ({link.src!r} -> {link.dst!r})",
                                    where=where, field=f"links[{i}]")
            first_entry[key] = i
            links.append(link)
    endpoints = _parse_endpoints(data.get("endpoints", []), num_gpus, where)
    switch_model = parse_switch_model(data.get("switch_model", SwitchModel.CUT_THROUGH.value), where, "switch_model")
    runtime = None
    if "runtime" in data:  # calibrated runtime costs (taccl_py.runtime); the simulator's own model ignores them
        from taccl_py.runtime import runtime_from_dict

        runtime = runtime_from_dict(data["runtime"], where=where)
    topology = Topology(name=name, num_gpus=num_gpus, links=tuple(links), switches=switches,
                        machines=machines, source=source, dimensions=dimensions, endpoints=endpoints,
                        runtime=runtime, switch_model=switch_model)
    check_connected(topology, where=where)
    return topology


def parse_switch_model(raw: Any, where: str, field: str) -> SwitchModel:
    """A switch model's name (``cut-through`` or ``store-and-forward``), or :class:`TopologyError` naming the field."""
    choices = ", ".join(m.value for m in SwitchModel)
    _require(isinstance(raw, str), f"must be a string, one of {choices} (got {_typename(raw)})", where, field)
    try:
        return SwitchModel(raw)
    except ValueError:
        raise TopologyError(f"is {raw!r}, not a switch model ({choices})", where=where, field=field) from None


def _parse_endpoints(raw: Any, num_gpus: int, where: str) -> tuple[Endpoint, ...]:
    """``endpoints``: a list of ``{"gpus": "all" or [ids], "memory_bandwidth", "comm_channels", "channel_bandwidth"}``."""
    _require(isinstance(raw, list), f"must be a list (got {_typename(raw)})", where, "endpoints")
    if not raw:
        return ()
    per_gpu: list[Endpoint | None] = [None] * num_gpus
    owner: dict[int, int] = {}
    for k, entry in enumerate(raw):
        field = f"endpoints[{k}]"
        _require(isinstance(entry, dict), f"must be an object (got {_typename(entry)})", where, field)
        unknown = sorted(set(entry) - set(_ENDPOINT_KEYS))
        _require(not unknown, f"unknown field {unknown[0]!r} (expected: {', '.join(_ENDPOINT_KEYS)})"
                 if unknown else "", where, field)
        gpus = entry.get("gpus", "all")
        if gpus == "all":
            members = list(range(num_gpus))
        else:
            _require(isinstance(gpus, list) and bool(gpus) and all(
                isinstance(g, int) and not isinstance(g, bool) and 0 <= g < num_gpus for g in gpus),
                f"must be \"all\" or a non-empty list of GPU ids 0..{num_gpus - 1} (got {gpus!r})", where,
                f"{field}.gpus")
            members = gpus
        for name in ("memory_bandwidth", "channel_bandwidth"):
            value = entry.get(name)
            _require(value is None or (_is_number(value) and MIN_BANDWIDTH_GBPS <= value <= MAX_BANDWIDTH_GBPS),
                     f"must be a bandwidth in {MIN_BANDWIDTH_GBPS:g}..{MAX_BANDWIDTH_GBPS:g} GB/s (got {value!r})",
                     where, f"{field}.{name}")
        channels = entry.get("comm_channels")
        _require(channels is None or (isinstance(channels, int) and not isinstance(channels, bool)
                                      and 1 <= channels <= MAX_COMM_CHANNELS),
                 f"must be an integer in 1..{MAX_COMM_CHANNELS} (got {channels!r})", where, f"{field}.comm_channels")
        _require((channels is None) == (entry.get("channel_bandwidth") is None),
                 "comm_channels and channel_bandwidth go together (give both or neither)", where, field)
        endpoint = Endpoint(memory_bandwidth=entry.get("memory_bandwidth"), comm_channels=channels,
                            channel_bandwidth=entry.get("channel_bandwidth"))
        for g in members:
            _require(g not in owner, f"declares GPU {g} again (first in endpoints[{owner.get(g)}])", where,
                     f"{field}.gpus")
            owner[g] = k
            per_gpu[g] = endpoint
    return tuple(e or Endpoint() for e in per_gpu)


def _endpoint_entries(topology: Topology) -> list[dict[str, Any]]:
    """``endpoints`` as written: one entry per distinct endpoint, ``"all"`` when every GPU has the same."""
    by_endpoint: dict[Endpoint, list[int]] = {}
    for g, e in enumerate(topology.endpoints):
        if e.limited:
            by_endpoint.setdefault(e, []).append(g)
    entries = []
    for e, gpus in by_endpoint.items():
        entry: dict[str, Any] = {"gpus": "all" if len(gpus) == topology.num_gpus else gpus}
        if e.memory_bandwidth is not None:
            entry["memory_bandwidth"] = _num(e.memory_bandwidth)
        if e.comm_channels is not None and e.channel_bandwidth is not None:
            entry["comm_channels"] = e.comm_channels
            entry["channel_bandwidth"] = _num(e.channel_bandwidth)
        entries.append(entry)
    return entries


def _parse_dimensions(raw: Any, num_gpus: int, where: str) -> tuple[Dimension, ...]:
    _require(isinstance(raw, list), f"must be a list (got {_typename(raw)})", where, "dimensions")
    kinds = ", ".join(k.value for k in DimensionKind)
    result = []
    for k, entry in enumerate(raw):
        field = f"dimensions[{k}]"
        _require(isinstance(entry, dict), f"must be an object with kind and size (got {_typename(entry)})", where,
                 field)
        unknown = sorted(set(entry) - _DIMENSION_KEYS)
        _require(not unknown, f"has unknown field {unknown[0]!r}" if unknown else "", where, field)
        for key in ("kind", "size"):
            _require(key in entry, "is missing", where, f"{field}.{key}")
        kind = entry["kind"]
        _require(isinstance(kind, str) and kind in {d.value for d in DimensionKind},
                 f"must be one of {kinds} (got {kind!r})", where, f"{field}.kind")
        size = entry["size"]
        _require(isinstance(size, int) and not isinstance(size, bool) and size >= 1,
                 f"must be an integer >= 1 (got {size!r})", where, f"{field}.size")
        result.append(Dimension(DimensionKind(kind), size))
    check_dimensions(result, num_gpus, where=where)
    return tuple(result)


def _parse_switches(raw: Any, where: str) -> tuple[Switch, ...]:
    _require(isinstance(raw, list), f"must be a list (got {_typename(raw)})", where, "switches")
    result = []
    seen: set[str] = set()
    for k, entry in enumerate(raw):
        field = f"switches[{k}]"
        _require(isinstance(entry, dict), f"must be an object (got {_typename(entry)})", where, field)
        unknown = sorted(set(entry) - _SWITCH_KEYS)
        _require(not unknown, f"has unknown field {unknown[0]!r}" if unknown else "", where, field)
        name = entry.get("name")
        _require(isinstance(name, str) and name != "", f"must be a non-empty string (got {name!r})", where,
                 f"{field}.name")
        _require(name not in seen, f"duplicates switch name {name!r}", where, f"{field}.name")
        seen.add(name)
        kind = entry.get("kind", "switch")
        _require(isinstance(kind, str), f"must be a string (got {_typename(kind)})", where, f"{field}.kind")
        flags = {}
        for flag in ("multicast", "reduce"):
            value = entry.get(flag, False)
            _require(isinstance(value, bool), f"must be true or false (got {value!r})", where, f"{field}.{flag}")
            flags[flag] = value
        result.append(Switch(name=name, kind=kind, **flags))
    return tuple(result)


def _parse_vertex(value: Any, num_gpus: int, names: set[str], where: str, field: str) -> Vertex:
    if isinstance(value, int) and not isinstance(value, bool):
        _require(0 <= value < num_gpus, f"is GPU {value} but GPU ids are 0..{num_gpus - 1}", where, field)
        return value
    if isinstance(value, str):
        _require(value in names, f"names unknown vertex {value!r} (declare it under \"switches\")", where, field)
        return value
    raise TopologyError(f"must be a GPU id or a switch name (got {_typename(value)} {value!r})",
                        where=where, field=field)


def _parse_link(entry: Any, i: int, num_gpus: int, names: set[str], where: str) -> list[Link]:
    field = f"links[{i}]"
    _require(isinstance(entry, dict), f"must be an object (got {_typename(entry)})", where, field)
    unknown = sorted(set(entry) - _LINK_KEYS)
    _require(not unknown, f"has unknown field {unknown[0]!r}" if unknown else "", where, field)
    for key in ("src", "dst", "bandwidth"):
        _require(key in entry, "is missing", where, f"{field}.{key}")
    src = _parse_vertex(entry["src"], num_gpus, names, where, f"{field}.src")
    dst = _parse_vertex(entry["dst"], num_gpus, names, where, f"{field}.dst")
    _require(src != dst, f"is a self-loop on {src!r}", where, field)
    bandwidth = entry["bandwidth"]
    _require(_is_number(bandwidth), f"must be a number (got {_typename(bandwidth)} {bandwidth!r})", where,
             f"{field}.bandwidth")
    _require(bandwidth > 0, f"must be > 0 (got {bandwidth:g})", where, f"{field}.bandwidth")
    _require(MIN_BANDWIDTH_GBPS <= bandwidth <= MAX_BANDWIDTH_GBPS,
             f"is {bandwidth:g} GB/s, outside {MIN_BANDWIDTH_GBPS:g}..{MAX_BANDWIDTH_GBPS:g} GB/s "
             "(MIN_BANDWIDTH_GBPS..MAX_BANDWIDTH_GBPS)", where, f"{field}.bandwidth")
    latency = entry.get("latency", 0.0)
    _require(_is_number(latency), f"must be a number (got {_typename(latency)} {latency!r})", where,
             f"{field}.latency")
    _require(latency >= 0, f"must be >= 0 (got {latency:g})", where, f"{field}.latency")
    _require(latency <= MAX_LATENCY_US, f"is {latency:g} us; {limit_text('MAX_LATENCY_US', MAX_LATENCY_US, 'us')}",
             where, f"{field}.latency")
    kind = entry.get("kind", "nvlink")
    _require(isinstance(kind, str), f"must be a string (got {_typename(kind)})", where, f"{field}.kind")
    bidirectional = entry.get("bidirectional", False)
    _require(isinstance(bidirectional, bool), f"must be true or false (got {bidirectional!r})", where,
             f"{field}.bidirectional")
    provenance = entry.get("provenance")
    _require(provenance is None or isinstance(provenance, dict), "must be an object", where,
             f"{field}.provenance")
    link = Link(src=src, dst=dst, bandwidth=float(bandwidth), latency=float(latency), kind=kind,
                provenance=provenance)
    if bidirectional:
        return [link, Link(src=dst, dst=src, bandwidth=float(bandwidth), latency=float(latency), kind=kind,
                           provenance=provenance)]
    return [link]


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() and abs(x) < 1e15 else float(x)


def _link_entry(link: Link, bidirectional: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"src": link.src, "dst": link.dst, "bandwidth": _num(link.bandwidth),
                             "latency": _num(link.latency), "kind": link.kind}
    if bidirectional:
        entry["bidirectional"] = True
    if link.provenance is not None:
        entry["provenance"] = dict(link.provenance)
    return entry


def _is_reverse(a: Link, b: Link) -> bool:
    return (a.src == b.dst and a.dst == b.src and a.bandwidth == b.bandwidth and a.latency == b.latency
            and a.kind == b.kind and a.provenance == b.provenance)


def topology_to_dict(topology: Topology) -> dict[str, Any]:
    """The JSON object ``save_topology`` writes (adjacent reverse pairs merged)."""
    links: list[dict[str, Any]] = []
    i = 0
    items = topology.links
    while i < len(items):
        if i + 1 < len(items) and _is_reverse(items[i], items[i + 1]):
            links.append(_link_entry(items[i], True))
            i += 2
        else:
            links.append(_link_entry(items[i], False))
            i += 1
    switches = []
    for s in topology.switches:
        entry: dict[str, Any] = {"name": s.name}
        if s.kind != "switch":
            entry["kind"] = s.kind
        if s.multicast:
            entry["multicast"] = True
        if s.reduce:
            entry["reduce"] = True
        switches.append(entry)
    data: dict[str, Any] = {"name": topology.name, "source": topology.source, "gpus": topology.num_gpus}
    if topology.machines:
        data["machines"] = [list(m) for m in topology.machines]
    if topology.dimensions:
        data["dimensions"] = [{"kind": d.kind.value, "size": d.size} for d in topology.dimensions]
    data["switches"] = switches
    if topology.has_endpoint_limits:
        data["endpoints"] = _endpoint_entries(topology)
    if topology.switch_model is not SwitchModel.CUT_THROUGH:
        data["switch_model"] = topology.switch_model.value
    if topology.runtime is not None:
        from taccl_py.runtime import runtime_to_dict

        data["runtime"] = runtime_to_dict(topology.runtime)
    data["links"] = links
    return data


def dumps_topology(topology: Topology) -> str:
    """Canonical text: top-level keys on their own lines, one machine/switch/link per line."""
    data = topology_to_dict(topology)
    lines = ["{"]
    keys = list(data)
    for n, key in enumerate(keys):
        value = data[key]
        comma = "," if n < len(keys) - 1 else ""
        if isinstance(value, list) and value:
            lines.append(f"  {json.dumps(key)}: [")
            for k, item in enumerate(value):
                item_comma = "," if k < len(value) - 1 else ""
                lines.append(f"    {json.dumps(item, separators=(', ', ': '))}{item_comma}")
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def save_topology(topology: Topology, path: str | os.PathLike[str]) -> None:
    """Write the canonical JSON atomically (temporary file, then rename)."""
    atomic_write_text(path, dumps_topology(topology))
