"""Multi-machine clusters: NDv2 x K, DGX-2 x K, DGX A100 / H100 x K, MI250 x K.

GPU ids are ``machine * gpus_per_machine + local``. Per-machine vertices are
named ``m<machine>.nvswitch`` and ``m<machine>.nic<k>``; global IB switches are
``ib``, ``ib0``/``ib1`` or ``rail<k>``. Link kinds: ``nvlink`` / ``xgmi`` inside
a machine, ``nic`` between a GPU and its NIC, ``ib`` on the InfiniBand side. DGX A100 / H100 clusters
default to the leaf-spine fabric of NVIDIA's DGX SuperPOD (``Fabric.LEAF_SPINE``); ForestColl's
two-switch model, on which the published comparisons were made, is the named fabric ``forestcoll``.

Units: bandwidth in GB/s (1e9 B/s) per direction, latency in us per link.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum

from taccl_py.errors import TopologyError
from taccl_py.library.builder import TopologyBuilder, check_link_budget
from taccl_py.library.machines import (
    A100_NVSWITCH_GBPS,
    DGX2_NVSWITCH_GBPS,
    H100_NVSWITCH_GBPS,
    add_dgx1_machine,
    add_mi250_machine,
    add_nvswitch_machine,
)
from taccl_py.runtime import PRESETS
from taccl_py.topology import Dimension, DimensionKind, Topology

__all__ = [
    "Fabric",
    "dgx2_cluster",
    "dgx_a100_cluster",
    "dgx_h100_cluster",
    "mi250_cluster",
    "ndv2_cluster",
    "parse_fabric",
]

IB_EDR_GBPS = 12.5
"""100 Gb/s EDR InfiniBand (NDv2, DGX-2), per direction."""
IB_HDR_GBPS = 25.0
"""200 Gb/s HDR (DGX A100, one ConnectX-6 per GPU)."""
IB_NDR_GBPS = 50.0
"""400 Gb/s NDR (DGX H100, one ConnectX-7 per GPU)."""
MI250_IB_GBPS = 16.0
"""ForestColl's MI250 model: every GCD <-> the IB switch."""
NDV2_IB_LATENCY_US = 1.3
"""TE-CCL's NDv2 IB alpha, per link."""
REMOTE_LATENCY_US = 2.6
"""TACCL's remote alpha: GPU -> GPU across machines."""
GPU_NIC_LATENCY_US = 0.5
NIC_SWITCH_LATENCY_US = 0.8
"""GPU -> NIC -> IB switch -> NIC -> GPU adds up to 0.5 + 0.8 + 0.8 + 0.5 = 2.6 us (TACCL's remote alpha)."""


class Fabric(StrEnum):
    """How the per-GPU NICs of DGX A100 / H100 clusters reach each other."""

    LEAF_SPINE = "leaf-spine"
    """The DGX SuperPOD compute fabric (the default): rail-aligned leaf switches per scalable unit, NIC b of every
    machine of the unit on leaf ``su<s>.leaf<b>``, every leaf joined to a non-blocking spine vertex ``spine``."""
    FORESTCOLL = "forestcoll"
    """Two global IB switches: NIC b with b even on ``ib0``, odd on ``ib1`` (ForestColl's model)."""
    SINGLE = "single"
    """One global IB switch ``ib`` for every NIC (a full-bisection fat tree as one vertex)."""
    RAIL = "rail"
    """Rail-optimized: NIC b of every machine on rail switch ``rail<b>``."""


SUPERPOD_UNIT_MACHINES = {"dgx-a100": 20, "dgx-h100": 32}
"""Machines per scalable unit of the DGX SuperPOD reference architectures (A100: RA-09950-001; H100:
RA-11333-001): the machines whose NIC b share one rail leaf switch."""
SPINE_LATENCY_US = NIC_SWITCH_LATENCY_US
"""Leaf <-> spine, per direction: one more switch hop, assumed to cost what NIC <-> leaf does."""


def parse_fabric(value: str | Fabric, *, where: str = "--fabric") -> Fabric:
    """``leaf-spine``, ``forestcoll``, ``single`` or ``rail`` (case-insensitive)."""
    try:
        return Fabric(str(value).strip().lower())
    except ValueError:
        choices = ", ".join(f.value for f in Fabric)
        raise TopologyError(f"unknown fabric {value!r} (choose one of: {choices})", where=where) from None


def _check_machines(family: str, machines: int, links_per_machine: int) -> None:
    """K is an integer >= 2, and K machines stay within the link budget (checked before building)."""
    if isinstance(machines, bool) or not isinstance(machines, int) or machines < 2:
        raise TopologyError(f"must be an integer >= 2 (got {machines!r}; use {family!r} for one machine)",
                            where=f"{family}xK", field="K")
    check_link_budget(f"{family}x{machines}", machines * links_per_machine)


def _machines(count: int, size: int) -> list[range]:
    return [range(m * size, (m + 1) * size) for m in range(count)]


def ndv2_cluster(machines: int) -> Topology:
    """Azure NDv2 x K (TE-CCL's model; 8 GPUs per machine, one 100 Gb/s NIC each).

    K = 2 (REFERENCE 1a): no switch, IB links ``0 -> 9`` and ``8 -> 1`` only
    (the NIC's TX is owned by local GPU 0, its RX by local GPU 1), 12.5 GB/s, 1.3 us.
    K >= 3 (REFERENCE 1b): one IB switch ``ib``; local GPU 0 of every machine -> ``ib``
    and ``ib`` -> local GPU 1, 12.5 GB/s and 1.3 us each.
    """
    _check_machines("ndv2", machines, 34)
    name = f"ndv2x{machines}"
    builder = TopologyBuilder(name, 8 * machines)
    for m in range(machines):
        add_dgx1_machine(builder, 8 * m)
    if machines == 2:
        builder.link(0, 9, IB_EDR_GBPS, NDV2_IB_LATENCY_US, "ib", both=False)
        builder.link(8, 1, IB_EDR_GBPS, NDV2_IB_LATENCY_US, "ib", both=False)
        wiring = "IB links 0->9 and 8->1 only, no switch vertex"
    else:
        builder.add_switch("ib", "ib")
        for m in range(machines):
            builder.link(8 * m, "ib", IB_EDR_GBPS, NDV2_IB_LATENCY_US, "ib", both=False)
            builder.link("ib", 8 * m + 1, IB_EDR_GBPS, NDV2_IB_LATENCY_US, "ib", both=False)
        wiring = "one IB switch: local GPU0 -> ib -> local GPU1, 1.3 us per link"
    source = (f"{machines} x Azure NDv2 as TE-CCL's NDv2 experiments: DGX-1 NVLink per machine (0.7 us); "
              f"one 100 Gb/s NIC per machine = 12.5 GB/s, TX owned by local GPU0, RX by local GPU1; "
              f"{wiring}; GPU = 8*machine + local")
    return builder.build(source=source, machines=_machines(machines, 8))


def dgx2_cluster(machines: int) -> Topology:
    """NVIDIA DGX-2 x K: 16 V100 per machine around an NVSwitch (125 GB/s, 0.35 us).

    K = 2 (REFERENCE 1c, TE-CCL): local GPU 2k+1 of one machine -> local GPU 2k of the
    other, 12.5 GB/s, 2.6 us (k = 0..7); no NIC vertex. K >= 3: NIC k of every machine
    (``m<m>.nic<k>``) is shared by local GPUs 2k and 2k+1 as in TACCL's DGX-2 sketch
    (TX from 2k+1, RX into 2k), 12.5 GB/s each way, GPU <-> NIC 0.5 us; NIC k sits on
    rail switch ``rail<k>`` (12.5 GB/s, 0.8 us), so GPU -> GPU across machines is 2.6 us.
    """
    _check_machines("dgx2", machines, 64)
    name = f"dgx2x{machines}"
    builder = TopologyBuilder(name, 16 * machines)
    if machines == 2:
        for m in range(2):
            add_nvswitch_machine(builder, f"m{m}.nvswitch", 16 * m, 16, DGX2_NVSWITCH_GBPS)
        for m in range(2):
            other = 1 - m
            for k in range(8):
                builder.link(16 * m + 2 * k + 1, 16 * other + 2 * k, IB_EDR_GBPS, REMOTE_LATENCY_US, "ib",
                             both=False)
        wiring = "local GPU 2k+1 -> local GPU 2k of the other machine, 12.5 GB/s, 2.6 us (k = 0..7)"
    else:
        for m in range(machines):
            add_nvswitch_machine(builder, f"m{m}.nvswitch", 16 * m, 16, DGX2_NVSWITCH_GBPS)
            for k in range(8):
                nic = builder.add_switch(f"m{m}.nic{k}", "nic")
                builder.link(16 * m + 2 * k + 1, nic, IB_EDR_GBPS, GPU_NIC_LATENCY_US, "nic", both=False)
                builder.link(nic, 16 * m + 2 * k, IB_EDR_GBPS, GPU_NIC_LATENCY_US, "nic", both=False)
                builder.link(nic, f"rail{k}", IB_EDR_GBPS, NIC_SWITCH_LATENCY_US, "ib")
        for k in range(8):
            builder.add_switch(f"rail{k}", "ib")
        wiring = ("NIC k shared by local GPUs 2k (RX) and 2k+1 (TX), 12.5 GB/s, GPU <-> NIC 0.5 us; "
                  "rail-optimized IB: NIC k on switch rail<k>, 0.8 us")
    source = (f"{machines} x NVIDIA DGX-2 as TACCL/TE-CCL: GPU <-> NVSwitch 125 GB/s, 0.35 us; 8 x 100 Gb/s "
              f"NICs per machine (12.5 GB/s); {wiring}; GPU = 16*machine + local")
    return builder.build(source=source, machines=_machines(machines, 16))


def _ib_switch(fabric: Fabric, machine: int, nic: int, unit_machines: int) -> str:
    """The IB switch NIC ``nic`` of ``machine`` plugs into."""
    if fabric is Fabric.LEAF_SPINE:
        return f"su{machine // unit_machines}.leaf{nic}"
    if fabric is Fabric.FORESTCOLL:
        return f"ib{nic % 2}"
    if fabric is Fabric.SINGLE:
        return "ib"
    return f"rail{nic}"


def _nic_cluster(family: str, machines: int, fabric: Fabric | str, nvswitch_gbps: float, nic_gbps: float,
                 *, nvls: bool, hardware: str, sharp: bool = False) -> Topology:
    _check_machines(family, machines, 50)
    fabric = parse_fabric(fabric)
    suffix = "" if fabric is Fabric.LEAF_SPINE else f"-{fabric.value}"
    name = f"{family}x{machines}{suffix}" + ("-nvls" if nvls else "") + ("-sharp" if sharp else "")
    unit = SUPERPOD_UNIT_MACHINES[family]
    builder = TopologyBuilder(name, 8 * machines)
    ib_names: list[str] = []
    for m in range(machines):
        add_nvswitch_machine(builder, f"m{m}.nvswitch", 8 * m, 8, nvswitch_gbps, nvls=nvls)
        for b in range(8):
            nic = builder.add_switch(f"m{m}.nic{b}", "nic")
            builder.link(8 * m + b, nic, nic_gbps, GPU_NIC_LATENCY_US, "nic")
            ib = _ib_switch(fabric, m, b, unit)
            if ib not in ib_names:
                ib_names.append(ib)
            builder.link(nic, ib, nic_gbps, NIC_SWITCH_LATENCY_US, "ib")
    for ib in sorted(ib_names, key=lambda x: (len(x), x)):
        builder.add_switch(ib, "ib", multicast=sharp, reduce=sharp)
    if fabric is Fabric.LEAF_SPINE:
        builder.add_switch("spine", "ib", multicast=sharp, reduce=sharp)
        for ib in sorted(ib_names, key=lambda x: (len(x), x)):
            in_unit = min(unit, machines - int(ib[2:ib.index(".")]) * unit)
            builder.link(ib, "spine", in_unit * nic_gbps, SPINE_LATENCY_US, "ib")
    wiring = {
        Fabric.LEAF_SPINE: (f"DGX SuperPOD leaf-spine: NIC b of the machines of a {unit}-machine scalable unit on "
                            f"rail leaf su<s>.leaf<b>, every leaf <-> one non-blocking spine vertex (uplink = the "
                            f"leaf's downlinks, {SPINE_LATENCY_US:g} us); across rails 4.2 us"),
        Fabric.FORESTCOLL: "two IB switches, NIC b even -> ib0, odd -> ib1 (ForestColl)",
        Fabric.SINGLE: "one IB switch for all NICs",
        Fabric.RAIL: "rail-optimized: NIC b of every machine on switch rail<b>",
    }[fabric]
    source = (f"{machines} x {hardware}, machines as ForestColl's A100 model: GPU <-> NVSwitch {nvswitch_gbps:g} GB/s, "
              f"0.35 us; one NIC per GPU, GPU <-> NIC {nic_gbps:g} GB/s, 0.5 us; NIC <-> IB switch "
              f"{nic_gbps:g} GB/s, 0.8 us (GPU -> GPU across machines 2.6 us, TACCL's remote alpha); "
              f"{wiring}" + ("; NVSwitch flagged multicast + reduce (NVLS)" if nvls else "")
              + ("; InfiniBand switches flagged multicast + reduce (SHARP)" if sharp else "")
              + "; GPU = 8*machine + local; dimensions: 8 GPUs in a machine x machines")
    return builder.build(source=source, machines=_machines(machines, 8),
                         dimensions=[Dimension(DimensionKind.SWITCH, 8), Dimension(DimensionKind.SWITCH, machines)])


def dgx_a100_cluster(machines: int, fabric: Fabric | str = Fabric.LEAF_SPINE) -> Topology:
    """DGX A100 x K: NVSwitch 300 GB/s, one 200 Gb/s NIC per GPU (25 GB/s), IB as ``fabric``."""
    return replace(_nic_cluster("dgx-a100", machines, fabric, A100_NVSWITCH_GBPS, IB_HDR_GBPS, nvls=False,
                                hardware="NVIDIA DGX A100"), runtime=PRESETS["dgx-a100"])


def dgx_h100_cluster(machines: int, fabric: Fabric | str = Fabric.LEAF_SPINE, *, nvls: bool = False,
                     sharp: bool = False) -> Topology:
    """DGX H100 x K: NVSwitch 450 GB/s, one 400 Gb/s NIC per GPU (50 GB/s), IB as ``fabric``.

    ``nvls`` flags the NVSwitches, ``sharp`` the InfiniBand switches, multicast + reduce (a SuperPOD with SHARP).
    """
    return replace(_nic_cluster("dgx-h100", machines, fabric, H100_NVSWITCH_GBPS, IB_NDR_GBPS, nvls=nvls,
                                sharp=sharp, hardware="NVIDIA DGX H100"), runtime=PRESETS["dgx-h100"])


def mi250_cluster(machines: int) -> Topology:
    """MI250 x K (ForestColl's model): xGMI inside a node, every GCD <-> one IB switch at 16 GB/s, 1.3 us."""
    _check_machines("mi250", machines, 88)
    builder = TopologyBuilder(f"mi250x{machines}", 16 * machines)
    for m in range(machines):
        add_mi250_machine(builder, 16 * m)
        for local in range(16):
            builder.link(16 * m + local, "ib", MI250_IB_GBPS, NDV2_IB_LATENCY_US, "ib")
    builder.add_switch("ib", "ib")
    source = (f"{machines} x AMD MI250 as ForestColl's mi250 model: xGMI count x 50 GB/s, 0.7 us inside a "
              f"node; every GCD <-> one global IB switch at 16 GB/s, 1.3 us per direction (no NIC vertex); "
              f"GCD = 16*machine + local")
    return builder.build(source=source, machines=_machines(machines, 16))
