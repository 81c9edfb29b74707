"""Names of the shipped topologies and ``resolve_topology``: a name, a JSON file or an ASTRA-sim YAML.

Names are case-insensitive (``_`` reads as ``-``). Fixed names: ``dgx1``,
``ndv2``, ``dgx2``, ``dgx-a100``, ``dgx-h100``, ``mi250``, ``gb200-nvl72``
(alias ``nvl72``), ``ring8``. Families with K >= 2 machines: ``ndv2xK``,
``dgx2xK``, ``dgx-a100xK`` and ``dgx-h100xK`` (the DGX SuperPOD leaf-spine fabric; ``-forestcoll``,
``-single`` or ``-rail`` name the other fabrics), ``mi250xK``. A ``-nvls`` suffix on ``dgx-h100``,
``dgx-h100xK`` and ``gb200-nvl72`` flags the NVSwitch multicast + reduce.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from taccl_py.errors import TopologyError
from taccl_py.library import fabrics, grids, machines
from taccl_py.library.astra import load_astra_yaml
from taccl_py.topology import Topology
from taccl_py.topology_io import load_topology

__all__ = [
    "SHIPPED_NAMES",
    "TopologyFamily",
    "TopologyInfo",
    "list_families",
    "list_topologies",
    "load_topology_file",
    "resolve_topology",
    "topology_by_name",
]


@dataclass(frozen=True)
class TopologyInfo:
    """One shipped topology as ``taccl topo list`` shows it."""

    name: str
    gpus: int
    machines: int
    switches: int
    links: int
    description: str
    source: str


@dataclass(frozen=True)
class TopologyFamily:
    """A parametric name: ``pattern`` with K machines (K >= ``min_machines``)."""

    pattern: str
    gpus_per_machine: int
    min_machines: int
    description: str


_FIXED: dict[str, tuple[Callable[[], Topology], str]] = {
    "dgx1": (machines.dgx1, "NVIDIA DGX-1, 8 V100, NVLink hybrid cube-mesh (150 GB/s per GPU)"),
    "ndv2": (machines.ndv2, "Azure NDv2, 8 V100, the DGX-1 NVLink graph"),
    "dgx2": (machines.dgx2, "NVIDIA DGX-2, 16 V100 on one NVSwitch (125 GB/s per GPU)"),
    "dgx-a100": (machines.dgx_a100, "NVIDIA DGX A100, 8 A100 on an NVSwitch (300 GB/s per GPU)"),
    "dgx-h100": (machines.dgx_h100, "NVIDIA DGX H100, 8 H100 on an NVSwitch (450 GB/s per GPU)"),
    "mi250": (machines.mi250, "AMD MI250 node, 16 GCDs with direct xGMI links (350 GB/s per GCD)"),
    "gb200-nvl72": (machines.gb200_nvl72, "NVIDIA GB200 NVL72, 72 GPUs in one NVLink domain (900 GB/s)"),
    "ring8": (grids.ring8, "golden-value ring: 8 GPUs, 50 GiB/s (53.687 GB/s) and 0.5 us per link"),
}
_NVLS: dict[str, Callable[[], Topology]] = {
    "dgx-h100": lambda: machines.dgx_h100(nvls=True),
    "gb200-nvl72": lambda: machines.gb200_nvl72(nvls=True),
}
_ALIASES = {"nvl72": "gb200-nvl72", "gb200": "gb200-nvl72", "dgx-1": "dgx1", "dgx-2": "dgx2",
            "dgxa100": "dgx-a100", "dgxh100": "dgx-h100", "dgx-v100": "dgx1"}
_FAMILY_RE = re.compile(r"^(ndv2|dgx-?2|dgx-?a100|dgx-?h100|mi250)x(\d+)(?:-(leaf-spine|forestcoll|single|rail))?(-nvls)?(-sharp)?$")
_FAT_TREE_RE = re.compile(r"^fat-?tree(\d+)(-sharp)?$")

_FAMILIES = (
    TopologyFamily("ndv2xK", 8, 2, "K x Azure NDv2 (K = 2: IB links 0->9, 8->1; K >= 3: one IB switch), "
                                   "12.5 GB/s per machine"),
    TopologyFamily("dgx2xK", 16, 2, "K x DGX-2, 8 x 12.5 GB/s NICs per machine (K = 2: direct; K >= 3: rails)"),
    TopologyFamily("dgx-a100xK[-forestcoll|-single|-rail]", 8, 2,
                   "K x DGX A100, one 25 GB/s NIC per GPU, IB fabric as named (default leaf-spine)"),
    TopologyFamily("dgx-h100xK[-forestcoll|-single|-rail][-nvls][-sharp]", 8, 2,
                   "K x DGX H100, one 50 GB/s NIC per GPU, IB fabric as named (default leaf-spine); -sharp flags "
                   "the IB switches multicast + reduce"),
    TopologyFamily("mi250xK", 16, 2, "K x MI250, every GCD <-> one IB switch at 16 GB/s"),
    TopologyFamily("fat-treeK[-sharp]", 1, 2, "K single-GPU nodes on a two-level fat tree with multicast switches "
                                           "(fat-tree188: the multicast Allgather paper's testbed); -sharp adds reduce"),
)

SHIPPED_NAMES: tuple[str, ...] = (
    "dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mi250", "gb200-nvl72", "ring8",
    "ndv2x2", "ndv2x4", "dgx2x2", "dgx2x4",
    "dgx-a100x2", "dgx-a100x4", "dgx-a100x8", "dgx-h100x2", "dgx-h100x4", "dgx-h100x8",
    "dgx-a100x2-forestcoll", "dgx-a100x4-forestcoll", "dgx-a100x8-forestcoll",
    "dgx-h100x2-forestcoll", "dgx-h100x4-forestcoll", "dgx-h100x8-forestcoll",
    "mi250x2", "mi250x4", "mi250x8",
)
"""Every name written to ``topologies/<name>.json`` by ``python -m taccl_py.library.export``."""

_FAMILY_DESCRIPTIONS = {
    "ndv2": "Azure NDv2 machines, one 100 Gb/s NIC each",
    "dgx2": "DGX-2 machines, 8 x 100 Gb/s NICs each",
    "dgx-a100": "DGX A100 machines, one 200 Gb/s NIC per GPU, leaf-spine IB",
    "dgx-h100": "DGX H100 machines, one 400 Gb/s NIC per GPU, leaf-spine IB",
    "mi250": "MI250 nodes, every GCD on one IB switch",
}


def _normalize(name: str) -> str:
    key = name.strip().lower().replace("_", "-")
    return _ALIASES.get(key, key)


def _family_topology(match: re.Match[str], spec: str) -> Topology:
    family, count_text, fabric, nvls, sharp = match.groups()
    family = {"dgx-2": "dgx2", "dgxa100": "dgx-a100", "dgxh100": "dgx-h100"}.get(family, family)
    count = int(count_text)
    if fabric and family not in ("dgx-a100", "dgx-h100"):
        raise TopologyError(f"a fabric suffix (-{fabric}) applies only to dgx-a100xK and dgx-h100xK", where=spec)
    if nvls and family != "dgx-h100":
        raise TopologyError("the -nvls suffix applies only to dgx-h100, dgx-h100xK and gb200-nvl72", where=spec)
    if sharp and family != "dgx-h100":
        raise TopologyError("the -sharp suffix applies only to dgx-h100xK and fat-treeN", where=spec)
    if family == "ndv2":
        return fabrics.ndv2_cluster(count)
    if family == "dgx2":
        return fabrics.dgx2_cluster(count)
    if family == "mi250":
        return fabrics.mi250_cluster(count)
    if family == "dgx-a100":
        return fabrics.dgx_a100_cluster(count, fabric or fabrics.Fabric.LEAF_SPINE)
    return fabrics.dgx_h100_cluster(count, fabric or fabrics.Fabric.LEAF_SPINE, nvls=bool(nvls), sharp=bool(sharp))


def topology_by_name(name: str) -> Topology | None:
    """The shipped topology called ``name`` (case-insensitive), or ``None`` if no name matches.

    Raises :class:`TopologyError` for a family name with a bad parameter (``ndv2x1``).
    """
    key = _normalize(name)
    if key in _FIXED:
        return _FIXED[key][0]()
    if key.endswith("-nvls") and _normalize(key[: -len("-nvls")]) in _NVLS:
        return _NVLS[_normalize(key[: -len("-nvls")])]()
    match = _FAMILY_RE.match(key)
    if match:
        return _family_topology(match, name)
    tree = _FAT_TREE_RE.match(key)
    if tree:
        return grids.fat_tree(int(tree.group(1)), reduce=bool(tree.group(2)))
    return None


def load_topology_file(path: str | os.PathLike[str]) -> Topology:
    """A topology JSON file, or an ASTRA-sim network YAML (``.yml`` / ``.yaml``)."""
    if Path(path).suffix.lower() in (".yml", ".yaml"):
        return load_astra_yaml(path)
    return load_topology(path)


def _looks_like_path(spec: str) -> bool:
    return ("/" in spec or os.sep in spec or Path(spec).suffix.lower() in (".json", ".yml", ".yaml"))


def _close_names(text: str) -> list[str]:
    """Canonical names close to ``text`` (an alias that matches suggests its canonical name)."""
    candidates = {name: name for name in (*_FIXED, *SHIPPED_NAMES, "dgx-h100-nvls", "gb200-nvl72-nvls")}
    candidates.update(_ALIASES)
    close = difflib.get_close_matches(_normalize(text), sorted(candidates), n=8, cutoff=0.6)
    return list(dict.fromkeys(candidates[c] for c in close))[:4]


def resolve_topology(spec: str) -> Topology:
    """A shipped name (case-insensitive), a topology JSON file, or an ASTRA-sim network YAML.

    Raises :class:`TopologyError` for an unknown name (listing close names) or a bad file.
    """
    text = str(spec).strip()
    if not text:
        raise TopologyError("is empty; give a shipped name (see `taccl topo list`) or a file",
                            where="topology")
    if _looks_like_path(text):
        return load_topology_file(text)
    topology = topology_by_name(text)
    if topology is not None:
        return topology
    if Path(text).is_file():
        return load_topology_file(text)
    close = _close_names(text)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise TopologyError(f"is not a shipped topology or a file ({hint}`taccl topo list` shows the names; "
                        f"families take K machines, e.g. dgx-a100x4)", where=text)


def list_topologies() -> list[TopologyInfo]:
    """Every shipped topology (the files under ``topologies/``), in catalogue order."""
    result = []
    for name in SHIPPED_NAMES:
        topology = topology_by_name(name)
        assert topology is not None  # every shipped name resolves (tested)
        if name in _FIXED:
            description = _FIXED[name][1]
        else:
            match = _FAMILY_RE.match(name)
            assert match is not None
            description = f"{match.group(2)} x {_FAMILY_DESCRIPTIONS[match.group(1)]}"
            if match.group(3) == "forestcoll":
                description = description.replace("leaf-spine IB", "ForestColl's two IB switches")
        result.append(TopologyInfo(name=name, gpus=topology.num_gpus, machines=max(1, len(topology.machines)),
                                   switches=len(topology.switches), links=len(topology.links),
                                   description=description, source=topology.source))
    return result


def list_families() -> list[TopologyFamily]:
    """The parametric names (any K >= 2 machines)."""
    return list(_FAMILIES)
