"""TACCL's topology-profile JSON, turned into a topology so TACCL users bring their files unchanged.

A profile (``taccl/examples/topo/*.json``) gives per-chunk costs: ``alpha`` (us)
and ``node_betas_list`` (us per chunk of the profiled size) for the links inside
a machine, ``remote_alpha`` / ``remote_beta`` for InfiniBand, ``gpus_per_node``
and ``nics_per_node``. Files profiled at 32KB and 1KB are scaled by 10 and 100
(TACCL's INPUT_GUIDE); the scale and chunk size are read from the name suffix
(``_1MB``, ``_32KB``, ``_1KB``; KB and MB binary) or given explicitly.

The machine graph follows TACCL's code: 8 GPUs with two betas is the DGX-1 /
NDv2 hybrid cube-mesh (first beta on the double-NVLink pairs), 16 GPUs with one
beta is the DGX-2 NVSwitch. Each machine's NICs are switch vertices joined by one
IB switch; NIC k serves ``gpus_per_node / nics_per_node`` consecutive GPUs; the remote alpha is
split over the four hops GPU-NIC-IB-NIC-GPU (so no NIC path is ever faster than an NVLink).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from taccl_py.errors import SketchError
from taccl_py.inputs import read_json_file
from taccl_py.topology import Link, Switch, Topology, check_topology
from taccl_py.units import bytes_per_us_to_gbps

__all__ = ["is_taccl_profile", "load_taccl_profile", "topology_from_taccl_profile"]

_DGX1_PAIRS = ((0, 1, 2), (0, 2, 1), (0, 3, 1), (0, 4, 2), (1, 2, 1), (1, 3, 2), (1, 5, 1), (2, 3, 2),
               (2, 6, 2), (3, 7, 1), (4, 5, 2), (4, 6, 1), (4, 7, 1), (5, 6, 1), (5, 7, 2), (6, 7, 2))
_SCALE = {"1MB": (1.0, 1 << 20), "32KB": (10.0, 1 << 15), "1KB": (100.0, 1 << 10)}
_REQUIRED = ("gpus_per_node", "nics_per_node", "alpha", "node_betas_list", "remote_alpha", "remote_beta")


def is_taccl_profile(data: Any) -> bool:
    return isinstance(data, dict) and "node_betas_list" in data and "gpus_per_node" in data


def load_taccl_profile(path: str | Path) -> dict[str, Any]:
    where = str(path)
    data = read_json_file(path, SketchError, what="TACCL profile")
    if not is_taccl_profile(data):
        raise SketchError("not a TACCL topology profile (needs gpus_per_node and node_betas_list)", where=where)
    return data


def _scale_of(name: str, where: str) -> tuple[float, int]:
    match = re.search(r"_(\d+(?:KB|MB))$", name)
    if not match or match.group(1) not in _SCALE:
        raise SketchError(f"cannot tell the profiled chunk size from name {name!r} (expected a _1MB, _32KB or "
                          "_1KB suffix)", where=where, field="name")
    return _SCALE[match.group(1)]


def topology_from_taccl_profile(data: dict[str, Any], *, nnodes: int = 1, where: str = "<profile>") -> Topology:
    """Build the topology a TACCL profile describes for ``nnodes`` machines."""
    for key in _REQUIRED:
        if key not in data:
            raise SketchError("is missing", where=where, field=key)
    name = str(data.get("name", Path(where).stem))
    scale, chunk_bytes = _scale_of(name, where)
    g = data["gpus_per_node"]
    nics = data["nics_per_node"]
    betas = data["node_betas_list"]
    if not isinstance(g, int) or g < 1 or not isinstance(nics, int) or nics < 1 or g % nics:
        raise SketchError(f"gpus_per_node ({g!r}) must be a positive multiple of nics_per_node ({nics!r})",
                          where=where, field="nics_per_node")
    if not isinstance(betas, list) or not betas or not all(isinstance(b, int | float) and b > 0 for b in betas):
        raise SketchError(f"must be a non-empty list of positive numbers (got {betas!r})", where=where,
                          field="node_betas_list")
    for key in ("alpha", "remote_alpha", "remote_beta"):
        if not isinstance(data[key], int | float) or data[key] < 0 or (key == "remote_beta" and data[key] <= 0):
            raise SketchError(f"must be a {'positive' if key == 'remote_beta' else 'non-negative'} number "
                              f"(got {data[key]!r})", where=where, field=key)

    def bandwidth(beta: float) -> float:
        return bytes_per_us_to_gbps(chunk_bytes / (beta / scale))

    alpha = data["alpha"] / scale
    remote_alpha = data["remote_alpha"] / scale
    remote_bw = bandwidth(data["remote_beta"])
    links: list[Link] = []
    switches: list[Switch] = []

    def both(u: Any, v: Any, bw: float, lat: float, kind: str) -> None:
        links.extend((Link(u, v, bw, lat, kind), Link(v, u, bw, lat, kind)))

    for m in range(nnodes):
        base = m * g
        if g == 8 and len(betas) == 2:
            for a, b, count in _DGX1_PAIRS:
                both(base + a, base + b, bandwidth(betas[0] if count == 2 else betas[1]), alpha, "nvlink")
        elif len(betas) == 1:
            hub = f"m{m}.nvswitch"
            switches.append(Switch(hub, "nvswitch"))
            for i in range(g):
                both(base + i, hub, bandwidth(betas[0]), alpha / 2, "nvlink")
        else:
            raise SketchError(f"no TACCL machine graph for {g} GPUs with {len(betas)} betas (known: NDv2 8 GPUs x "
                              "2 betas, DGX-2 16 GPUs x 1 beta)", where=where, field="node_betas_list")
        if nnodes > 1:
            per_nic = g // nics
            for k in range(nics):
                nic = f"m{m}.nic{k}"
                switches.append(Switch(nic, "nic"))
                for i in range(k * per_nic, (k + 1) * per_nic):
                    both(base + i, nic, remote_bw, remote_alpha / 4, "nic")
                both(nic, "ib", remote_bw, remote_alpha / 4, "ib")
    if nnodes > 1:
        switches.append(Switch("ib", "ib"))
    machines = tuple(tuple(range(m * g, (m + 1) * g)) for m in range(nnodes))
    source = (f"TACCL profile {name} ({where}): alpha {alpha:g} us, betas {betas} us per "
              f"{chunk_bytes // 1024}KB x{scale:g}, remote alpha {remote_alpha:g} us, {nics} NIC(s) per machine")
    return check_topology(Topology(name=f"{name}x{nnodes}" if nnodes > 1 else name, num_gpus=g * nnodes,
                                   links=tuple(links), switches=tuple(switches), machines=machines, source=source),
                          where=where)
