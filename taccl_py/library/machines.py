"""Single machines: DGX-1 / NDv2, DGX-2, DGX A100, DGX H100, MI250 and GB200 NVL72.

Each ``add_*_machine`` function adds one server's GPUs and intra-node links to
a :class:`TopologyBuilder` at a GPU offset, so the multi-machine fabrics in
:mod:`taccl_py.library.fabrics` reuse them; the public functions return a
one-machine :class:`~taccl_py.topology.Topology`.

Units: bandwidth in GB/s (1e9 B/s) per direction, latency in us per link.
"""

from __future__ import annotations

from dataclasses import replace

from taccl_py.library.builder import TopologyBuilder
from taccl_py.runtime import PRESETS
from taccl_py.topology import Topology

__all__ = [
    "A100_NVSWITCH_GBPS",
    "DGX1_NVLINK_PAIRS",
    "DGX2_NVSWITCH_GBPS",
    "H100_NVSWITCH_GBPS",
    "MI250_XGMI_LINKS",
    "NVL72_NVSWITCH_GBPS",
    "NVLINK_LATENCY_US",
    "NVLINK_V2_GBPS",
    "NVSWITCH_LATENCY_US",
    "add_dgx1_machine",
    "add_mi250_machine",
    "add_nvswitch_machine",
    "dgx1",
    "dgx2",
    "dgx_a100",
    "dgx_h100",
    "gb200_nvl72",
    "mi250",
    "ndv2",
]

NVLINK_V2_GBPS = 25.0
"""One NVLink2 (V100) per direction."""
NVLINK_LATENCY_US = 0.7
"""Direct NVLink / xGMI hop, as TE-CCL's NDv2 model."""
NVSWITCH_LATENCY_US = 0.35
"""GPU -> NVSwitch (and back), so GPU -> switch -> GPU is 0.7 us (TACCL/TE-CCL DGX-2 model)."""
DGX2_NVSWITCH_GBPS = 125.0
A100_NVSWITCH_GBPS = 300.0
H100_NVSWITCH_GBPS = 450.0
NVL72_NVSWITCH_GBPS = 900.0
MI250_XGMI_GBPS = 50.0

DGX1_NVLINK_PAIRS: tuple[tuple[int, int, int], ...] = (
    # (gpu, gpu, NVLinks) of the hybrid cube-mesh, MSCCL/TACCL/TE-CCL numbering
    (0, 1, 2), (0, 2, 1), (0, 3, 1), (0, 4, 2), (1, 2, 1), (1, 3, 2), (1, 5, 1), (2, 3, 2),
    (2, 6, 2), (3, 7, 1), (4, 5, 2), (4, 6, 1), (4, 7, 1), (5, 6, 1), (5, 7, 2), (6, 7, 2),
)

MI250_XGMI_LINKS: tuple[tuple[int, int, int], ...] = (
    # (gcd, gcd, xGMI links) of one MI250 node (ForestColl's mi250_topology)
    (0, 1, 4), (0, 4, 2), (0, 8, 1), (1, 5, 1), (1, 9, 1), (1, 10, 1), (2, 3, 4), (2, 6, 1),
    (2, 9, 1), (2, 10, 1), (3, 7, 2), (3, 11, 1), (4, 5, 4), (4, 6, 1), (5, 6, 1), (5, 7, 1),
    (6, 7, 4), (8, 9, 4), (8, 12, 2), (9, 13, 1), (10, 11, 4), (10, 14, 1), (11, 15, 2),
    (12, 13, 4), (12, 14, 1), (13, 14, 1), (13, 15, 1), (14, 15, 4),
)

DGX1_SOURCE = ("NVIDIA DGX-1 V100 hybrid cube-mesh: 6 NVLink2 per GPU, 25 GB/s per link per direction; "
               "pair list as MSCCL dgx1(), TACCL and TE-CCL NDv2 (2 NVLinks = 50 GB/s); "
               "latency 0.7 us per hop as TE-CCL")
NDV2_SOURCE = ("Azure NDv2 (8 V100, DGX-1 hybrid cube-mesh NVLink as TACCL/TE-CCL); its one 100 Gb/s NIC "
               "only matters across machines (see ndv2xK)")
DGX2_SOURCE = ("NVIDIA DGX-2: 16 V100, each GPU <-> one NVSwitch vertex at 125 GB/s and 0.35 us per "
               "direction (TACCL dgx2 profile, TE-CCL DGX-2 model)")
A100_SOURCE = ("NVIDIA DGX A100: 8 A100, 12 NVLink3 x 25 GB/s = 300 GB/s per direction into the "
               "NVSwitches (ForestColl a100 model); NVSwitch hop 0.35 us per direction")
H100_SOURCE = ("NVIDIA DGX H100: 8 H100, 18 NVLink4 x 25 GB/s = 450 GB/s per direction into the "
               "NVSwitches (DGX BasePOD docs); NVSwitch hop 0.35 us per direction")
MI250_SOURCE = ("AMD MI250 node: 16 GCDs with direct xGMI links, count x 50 GB/s per direction "
                "(ForestColl mi250 model); latency 0.7 us per hop (assumed, as NVLink)")
NVL72_SOURCE = ("NVIDIA GB200 NVL72: 72 GPUs in one NVLink domain, 18 NVLink5 x 50 GB/s = 900 GB/s per "
                "direction into the NVLink switches (public spec sheets); switch hop 0.35 us per "
                "direction (assumed equal to the NVSwitch figure)")


def add_dgx1_machine(builder: TopologyBuilder, offset: int = 0) -> None:
    """The DGX-1 hybrid cube-mesh on GPUs ``offset .. offset+7``: 25 GB/s per NVLink, 0.7 us."""
    for a, b, count in DGX1_NVLINK_PAIRS:
        builder.link(offset + a, offset + b, count * NVLINK_V2_GBPS, NVLINK_LATENCY_US, "nvlink")


def add_nvswitch_machine(builder: TopologyBuilder, switch_name: str, offset: int, num_gpus: int,
                         bandwidth: float, *, latency: float = NVSWITCH_LATENCY_US,
                         nvls: bool = False) -> str:
    """GPUs ``offset ..`` each <-> one NVSwitch vertex; ``nvls`` marks multicast + in-switch reduce."""
    builder.add_switch(switch_name, "nvswitch", multicast=nvls, reduce=nvls)
    for local in range(num_gpus):
        builder.link(offset + local, switch_name, bandwidth, latency, "nvlink")
    return switch_name


def add_mi250_machine(builder: TopologyBuilder, offset: int = 0) -> None:
    """One MI250 node on GCDs ``offset .. offset+15``: direct xGMI, count x 50 GB/s, 0.7 us."""
    for a, b, count in MI250_XGMI_LINKS:
        builder.link(offset + a, offset + b, count * MI250_XGMI_GBPS, NVLINK_LATENCY_US, "xgmi")


def _one_machine(num_gpus: int) -> tuple[tuple[int, ...], ...]:
    return (tuple(range(num_gpus)),)


def dgx1() -> Topology:
    """NVIDIA DGX-1 (8 V100): every GPU has 6 NVLinks = 150 GB/s out and in."""
    builder = TopologyBuilder("dgx1", 8)
    add_dgx1_machine(builder)
    return builder.build(source=DGX1_SOURCE, machines=_one_machine(8))


def ndv2() -> Topology:
    """Azure NDv2: the DGX-1 GPU graph (its single NIC appears only in ``ndv2xK``)."""
    builder = TopologyBuilder("ndv2", 8)
    add_dgx1_machine(builder)
    return builder.build(source=NDV2_SOURCE, machines=_one_machine(8))


def dgx2() -> Topology:
    """NVIDIA DGX-2: 16 V100 around one NVSwitch vertex, 125 GB/s, 0.35 us per direction."""
    builder = TopologyBuilder("dgx2", 16)
    add_nvswitch_machine(builder, "nvswitch", 0, 16, DGX2_NVSWITCH_GBPS)
    return builder.build(source=DGX2_SOURCE, machines=_one_machine(16))


def dgx_a100() -> Topology:
    """NVIDIA DGX A100: 8 A100 <-> NVSwitch at 300 GB/s, 0.35 us."""
    builder = TopologyBuilder("dgx-a100", 8)
    add_nvswitch_machine(builder, "nvswitch", 0, 8, A100_NVSWITCH_GBPS)
    return replace(builder.build(source=A100_SOURCE, machines=_one_machine(8)), runtime=PRESETS["dgx-a100"])


def dgx_h100(*, nvls: bool = False) -> Topology:
    """NVIDIA DGX H100: 8 H100 <-> NVSwitch at 450 GB/s, 0.35 us.

    ``nvls=True`` flags the NVSwitch as multicast- and reduce-capable (NVLink SHARP).
    """
    name = "dgx-h100-nvls" if nvls else "dgx-h100"
    builder = TopologyBuilder(name, 8)
    add_nvswitch_machine(builder, "nvswitch", 0, 8, H100_NVSWITCH_GBPS, nvls=nvls)
    source = H100_SOURCE + ("; NVSwitch flagged multicast + reduce (NVLS)" if nvls else "")
    return replace(builder.build(source=source, machines=_one_machine(8)), runtime=PRESETS["dgx-h100"])


def mi250() -> Topology:
    """AMD MI250 node: 16 GCDs, direct xGMI links (7 per GCD = 350 GB/s)."""
    builder = TopologyBuilder("mi250", 16)
    add_mi250_machine(builder)
    return builder.build(source=MI250_SOURCE, machines=_one_machine(16))


def gb200_nvl72(*, nvls: bool = False) -> Topology:
    """GB200 NVL72: 72 GPUs <-> one NVLink-switch vertex at 900 GB/s (one NVLink domain)."""
    name = "gb200-nvl72-nvls" if nvls else "gb200-nvl72"
    builder = TopologyBuilder(name, 72)
    add_nvswitch_machine(builder, "nvswitch", 0, 72, NVL72_NVSWITCH_GBPS, nvls=nvls)
    source = NVL72_SOURCE + ("; switch flagged multicast + reduce (NVLS)" if nvls else "")
    return builder.build(source=source, machines=_one_machine(72))
