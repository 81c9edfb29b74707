"""The topology library: shipped machines and clusters, regular generators, ASTRA-sim networks.

``resolve_topology(spec)`` is the one entry point the rest of the package uses:
a shipped name (``dgx-a100x4``, case-insensitive), a topology JSON file, or an
ASTRA-sim network YAML. Units: bandwidth GB/s (1e9 B/s) per direction,
latency us per link.
"""

from __future__ import annotations

from taccl_py.library.astra import (
    AstraDimension,
    AstraKind,
    astra_route,
    astra_topology,
    load_astra_yaml,
    parse_astra_dims,
    parse_astra_network,
)
from taccl_py.library.describe import TopologyDescription, describe_topology
from taccl_py.library.fabrics import (
    Fabric,
    dgx2_cluster,
    dgx_a100_cluster,
    dgx_h100_cluster,
    mi250_cluster,
    ndv2_cluster,
)
from taccl_py.library.grids import fully_connected, hypercube, mesh, ring, ring8, switch_star, torus
from taccl_py.library.machines import dgx1, dgx2, dgx_a100, dgx_h100, gb200_nvl72, mi250, ndv2
from taccl_py.library.registry import (
    SHIPPED_NAMES,
    TopologyFamily,
    TopologyInfo,
    list_families,
    list_topologies,
    load_topology_file,
    resolve_topology,
    topology_by_name,
)

__all__ = [
    "SHIPPED_NAMES",
    "AstraDimension",
    "AstraKind",
    "Fabric",
    "TopologyDescription",
    "TopologyFamily",
    "TopologyInfo",
    "astra_route",
    "astra_topology",
    "describe_topology",
    "dgx1",
    "dgx2",
    "dgx2_cluster",
    "dgx_a100",
    "dgx_a100_cluster",
    "dgx_h100",
    "dgx_h100_cluster",
    "fully_connected",
    "gb200_nvl72",
    "hypercube",
    "list_families",
    "list_topologies",
    "load_astra_yaml",
    "load_topology_file",
    "mesh",
    "mi250",
    "mi250_cluster",
    "ndv2",
    "ndv2_cluster",
    "parse_astra_dims",
    "parse_astra_network",
    "resolve_topology",
    "ring",
    "ring8",
    "switch_star",
    "topology_by_name",
    "torus",
]
