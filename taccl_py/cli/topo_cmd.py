"""``taccl topo``: list, show, validate and generate topologies.

Units: bandwidth GB/s (1e9 B/s) per direction, latency us per link; ASTRA-sim
dimensions are given in its own units (GB/s of 2^30 bytes, ns).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

import click
from rich.table import Table

from taccl_py.cli.common import (
    check_output_file,
    emit_json,
    json_option,
    make_table,
    out_console,
    plural,
    switch_model_keys,
)
from taccl_py.errors import InputError, TacclError
from taccl_py.library import (
    describe_topology,
    dgx1,
    dgx2,
    dgx2_cluster,
    dgx_a100,
    dgx_a100_cluster,
    dgx_h100,
    dgx_h100_cluster,
    fully_connected,
    gb200_nvl72,
    hypercube,
    list_families,
    list_topologies,
    load_topology_file,
    mesh,
    mi250,
    mi250_cluster,
    ndv2,
    ndv2_cluster,
    resolve_topology,
    ring,
    ring8,
    switch_star,
    torus,
)
from taccl_py.library.astra import astra_topology, load_astra_yaml, parse_astra_dims
from taccl_py.library.describe import format_gpu_ranges
from taccl_py.library.fabrics import Fabric, parse_fabric
from taccl_py.library.grids import DEFAULT_BANDWIDTH_GBPS, DEFAULT_LATENCY_US
from taccl_py.topology import Topology
from taccl_py.topology_io import atomic_write_text, dumps_topology

__all__ = ["GENERATE_KINDS", "GenerateOptions", "generate_topology", "topo"]


@click.group("topo")
def topo() -> None:
    """List, inspect, validate and generate topologies (GB/s of 1e9 bytes, us)."""


# --------------------------------------------------------------------------- list
@topo.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """The shipped topologies and the parametric families."""
    infos = list_topologies()
    families = list_families()
    if as_json:
        emit_json({
            "topologies": [{"name": i.name, "gpus": i.gpus, "machines": i.machines, "switches": i.switches,
                            "links": i.links, "description": i.description, "source": i.source} for i in infos],
            "families": [{"pattern": f.pattern, "gpus_per_machine": f.gpus_per_machine,
                          "min_machines": f.min_machines, "description": f.description} for f in families],
        })
        return
    shipped = Table(title="Shipped topologies (topologies/<name>.json)", header_style="bold")
    for column, justify in (("name", "left"), ("GPUs", "right"), ("machines", "right"), ("description", "left")):
        shipped.add_column(column, justify=justify)  # type: ignore[arg-type]
    for i in infos:
        shipped.add_row(i.name, str(i.gpus), str(i.machines), i.description)
    out_console.print(shipped)
    family_table = Table(title="Families (any K >= 2 machines, e.g. dgx-a100x16)", header_style="bold")
    for column, justify in (("pattern", "left"), ("GPUs/machine", "right"), ("description", "left")):
        family_table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for f in families:
        family_table.add_row(f.pattern, str(f.gpus_per_machine), f.description)
    out_console.print(family_table)


# --------------------------------------------------------------------------- show
def _span(low: float, high: float) -> str:
    return f"{low:.6g}" if low == high else f"{low:.6g}-{high:.6g}"


def _machines_line(machines: tuple[tuple[int, ...], ...]) -> str:
    if not machines:
        return "none declared"
    sizes = sorted({len(m) for m in machines})
    size_text = f"{len(machines)} x {plural(sizes[0], 'GPU')}" if len(sizes) == 1 else plural(len(machines), 'machine')
    members = "; ".join(f"m{k}: {format_gpu_ranges(list(m))}" for k, m in enumerate(machines))
    return f"{size_text} ({members})"


@topo.command("show")
@click.argument("spec", metavar="NAME|FILE")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png|FILE.svg",
              help="Also draw it: GPUs grouped by machine, switches, links with their bandwidth.")
@json_option
def show_cmd(spec: str, plot_path: str | None, as_json: bool) -> None:
    """GPUs, switches and links by kind, per-GPU bandwidth, machines and source."""
    topology = resolve_topology(spec)
    description = describe_topology(topology)
    if plot_path is not None:
        from taccl_py.plots import check_figure_path, save_figure, topology_figure

        check_figure_path(plot_path, where="--plot")
        save_figure(topology_figure(topology), plot_path)
    if as_json:
        emit_json(description.to_json() | ({"plot": plot_path} if plot_path else {}))
        return
    switches = sum(s.count for s in description.switches)
    out_console.print(f"[bold]{description.name}[/bold]: {plural(description.gpus, 'GPU')}, "
                      f"{plural(switches, 'switch vertex', 'switch vertices')}, "
                      f"{plural(description.links, 'directed link')}")
    out_console.print(f"machines: {_machines_line(description.machines)}")
    out_console.print(f"dimensions: {description.dimensions_line()}", markup=False)
    if description.switch_model != "cut-through":
        out_console.print(f"switch model: {description.switch_model}", markup=False)
    out_console.print(f"source: {description.source or '-'}")
    if description.switches:
        out_console.print(make_table("Switch vertices", ["kind", "count", "multicast", "reduce"],
                                     [(s.kind, s.count, s.multicast, s.reduce) for s in description.switches]))
    out_console.print(make_table("Directed links", ["kind", "count", "bandwidth GB/s", "latency us"],
                                 [(k.kind, k.count, _span(k.min_bandwidth, k.max_bandwidth),
                                   _span(k.min_latency, k.max_latency)) for k in description.link_kinds]))
    out_console.print(make_table("Per-GPU link bandwidth", ["GPUs", "count", "out GB/s", "in GB/s"],
                                 [(format_gpu_ranges(g.gpus), len(g.gpus), f"{g.out_GBps:.6g}",
                                   f"{g.in_GBps:.6g}") for g in description.gpu_bandwidth]))
    if plot_path is not None:
        out_console.print(f"wrote {plot_path}", markup=False)


# ----------------------------------------------------------------------- validate
@topo.command("validate")
@click.argument("path", metavar="FILE")
@json_option
def validate_cmd(path: str, as_json: bool) -> None:
    """Check a topology JSON (or ASTRA-sim YAML) file: exit 0 and "valid", or one error line and exit 2."""
    try:
        topology = load_topology_file(path)
    except TacclError as exc:
        if as_json:
            emit_json({"file": path, "valid": False, "error": str(exc)})
        raise
    summary = (f"{plural(topology.num_gpus, 'GPU')}, "
               f"{plural(len(topology.machines), 'machine') if topology.machines else 'no machines'}, "
               f"{plural(len(topology.switches), 'switch vertex', 'switch vertices')}, "
               f"{plural(len(topology.links), 'directed link')}")
    if as_json:
        emit_json({"file": path, "valid": True, "name": topology.name, "gpus": topology.num_gpus,
                   "machines": len(topology.machines), "switches": len(topology.switches),
                   "links": len(topology.links)})
    else:
        out_console.print(f"{path}: valid ({summary})")


# ----------------------------------------------------------------------- generate
@dataclass(frozen=True)
class GenerateOptions:
    """The options of ``taccl topo generate`` (``None``: not given)."""

    gpus: int | None = None
    machines: int | None = None
    fabric: str | None = None
    dims: str | None = None
    bandwidth: float | None = None
    latency: float | None = None
    nvls: bool = False
    name: str | None = None


def _parse_shape(text: str | None, *, required: str) -> list[int]:
    if text is None:
        raise InputError(f"is required for {required} (e.g. --dims 4x4 or --dims 4,4,2)", where="--dims")
    parts = [p.strip() for p in text.replace(",", "x").lower().split("x")]
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise InputError(f"cannot read {text!r}; give sizes like 4x4 or 4,4,2", where="--dims") from None


def _refuse(options: GenerateOptions, kind: str, allowed: set[str]) -> None:
    """Reject options that do not apply to ``kind`` (rather than silently ignoring them)."""
    given = {"--gpus": options.gpus is not None, "--machines": options.machines is not None,
             "--fabric": options.fabric is not None, "--dims": options.dims is not None,
             "--bandwidth": options.bandwidth is not None, "--latency": options.latency is not None,
             "--nvls": options.nvls}
    for flag, present in given.items():
        if present and flag not in allowed:
            accepted = ", ".join(sorted(allowed)) or "no options"
            raise InputError(f"does not apply to {kind} (it takes {accepted})", where=flag)


def _bw_lat(options: GenerateOptions) -> tuple[float, float]:
    bandwidth = DEFAULT_BANDWIDTH_GBPS if options.bandwidth is None else options.bandwidth
    latency = DEFAULT_LATENCY_US if options.latency is None else options.latency
    return bandwidth, latency


def _gpus(options: GenerateOptions, kind: str) -> int:
    if options.gpus is None:
        raise InputError(f"is required for {kind}", where="--gpus")
    return options.gpus


_GRID_FLAGS = {"--bandwidth", "--latency"}


def _gen_ring(o: GenerateOptions) -> Topology:
    _refuse(o, "ring", {"--gpus"} | _GRID_FLAGS)
    return ring(_gpus(o, "ring"), *_bw_lat(o), name=o.name)


def _gen_fully_connected(o: GenerateOptions) -> Topology:
    _refuse(o, "fully-connected", {"--gpus"} | _GRID_FLAGS)
    return fully_connected(_gpus(o, "fully-connected"), *_bw_lat(o), name=o.name)


def _gen_switch(o: GenerateOptions) -> Topology:
    _refuse(o, "switch", {"--gpus"} | _GRID_FLAGS)
    return switch_star(_gpus(o, "switch"), *_bw_lat(o), name=o.name)


def _gen_torus(o: GenerateOptions) -> Topology:
    _refuse(o, "torus", {"--dims"} | _GRID_FLAGS)
    return torus(_parse_shape(o.dims, required="torus"), *_bw_lat(o), name=o.name)


def _gen_mesh(o: GenerateOptions) -> Topology:
    _refuse(o, "mesh", {"--dims"} | _GRID_FLAGS)
    return mesh(_parse_shape(o.dims, required="mesh"), *_bw_lat(o), name=o.name)


def _gen_hypercube(o: GenerateOptions) -> Topology:
    _refuse(o, "hypercube", {"--dims", "--gpus"} | _GRID_FLAGS)
    if o.dims is not None and o.gpus is not None:
        raise InputError("give either --dims D (the dimension) or --gpus 2^D, not both", where="--dims")
    if o.dims is not None:
        try:
            dimension = int(o.dims)
        except ValueError:
            raise InputError(f"must be the hypercube dimension, an integer (got {o.dims!r})",
                             where="--dims") from None
    else:
        gpus = _gpus(o, "hypercube (or --dims D)")
        dimension = int(math.log2(gpus)) if gpus >= 2 else 0
        if gpus < 2 or 1 << dimension != gpus:
            raise InputError(f"must be a power of two >= 2 for a hypercube (got {gpus})", where="--gpus")
    return hypercube(dimension, *_bw_lat(o), name=o.name)


def _gen_astra(o: GenerateOptions) -> Topology:
    _refuse(o, "astra", {"--dims"})
    if o.dims is None:
        raise InputError("is required for astra: KIND:NPUS:GBPS:NS per dimension (GB of 2^30 bytes, ns), "
                         "e.g. Ring:2:200:50,FullyConnected:8:100:500, or an ASTRA-sim network .yml",
                         where="--dims")
    if o.dims.strip().lower().endswith((".yml", ".yaml")):
        topology = load_astra_yaml(o.dims.strip())
        return topology if o.name is None else _renamed(topology, o.name)
    return astra_topology(parse_astra_dims(o.dims), name=o.name)


def _renamed(topology: Topology, name: str) -> Topology:
    return replace(topology, name=name)


def _machine_family(kind: str, single: Callable[[], Topology], cluster: Callable[[int], Topology],
                    *, extra: frozenset[str] = frozenset()) -> Callable[[GenerateOptions], Topology]:
    def build(o: GenerateOptions) -> Topology:
        _refuse(o, kind, {"--machines"} | set(extra))
        count = 1 if o.machines is None else o.machines
        if count < 1:
            raise InputError(f"must be >= 1 (got {count})", where="--machines")
        topology = single() if count == 1 else cluster(count)
        return topology if o.name is None else _renamed(topology, o.name)

    return build


def _single_machine(kind: str, single: Callable[[], Topology]) -> Callable[[GenerateOptions], Topology]:
    def build(o: GenerateOptions) -> Topology:
        _refuse(o, kind, set())
        topology = single()
        return topology if o.name is None else _renamed(topology, o.name)

    return build


def _fabric(o: GenerateOptions) -> Fabric:
    return parse_fabric(o.fabric) if o.fabric is not None else Fabric.LEAF_SPINE


def _gen_dgx_a100(o: GenerateOptions) -> Topology:
    if o.fabric is not None and (o.machines or 1) < 2:
        raise InputError("applies to two or more machines (--machines K)", where="--fabric")
    return _machine_family("dgx-a100", dgx_a100, lambda k: dgx_a100_cluster(k, _fabric(o)),
                           extra=frozenset({"--fabric"}))(o)


def _gen_dgx_h100(o: GenerateOptions) -> Topology:
    if o.fabric is not None and (o.machines or 1) < 2:
        raise InputError("applies to two or more machines (--machines K)", where="--fabric")
    return _machine_family("dgx-h100", lambda: dgx_h100(nvls=o.nvls),
                           lambda k: dgx_h100_cluster(k, _fabric(o), nvls=o.nvls),
                           extra=frozenset({"--fabric", "--nvls"}))(o)


def _gen_nvl72(o: GenerateOptions) -> Topology:
    _refuse(o, "gb200-nvl72", {"--nvls"})
    topology = gb200_nvl72(nvls=o.nvls)
    return topology if o.name is None else _renamed(topology, o.name)


GENERATE_KINDS: dict[str, Callable[[GenerateOptions], Topology]] = {
    "ring": _gen_ring,
    "fully-connected": _gen_fully_connected,
    "switch": _gen_switch,
    "torus": _gen_torus,
    "mesh": _gen_mesh,
    "hypercube": _gen_hypercube,
    "astra": _gen_astra,
    "dgx1": _single_machine("dgx1", dgx1),
    "ndv2": _machine_family("ndv2", ndv2, ndv2_cluster),
    "dgx2": _machine_family("dgx2", dgx2, dgx2_cluster),
    "dgx-a100": _gen_dgx_a100,
    "dgx-h100": _gen_dgx_h100,
    "mi250": _machine_family("mi250", mi250, mi250_cluster),
    "gb200-nvl72": _gen_nvl72,
    "ring8": _single_machine("ring8", ring8),
}
"""Generator kinds of ``taccl topo generate``; each builds a Topology from the options."""

_KIND_ALIASES = {"fc": "fully-connected", "fullyconnected": "fully-connected", "star": "switch",
                 "nvl72": "gb200-nvl72", "torus2d": "torus", "torus3d": "torus"}


def generate_topology(kind: str, options: GenerateOptions) -> Topology:
    """Build the topology ``taccl topo generate KIND`` writes; raises InputError on bad options."""
    key = kind.strip().lower().replace("_", "-")
    key = _KIND_ALIASES.get(key, key)
    if key not in GENERATE_KINDS:
        raise InputError(f"unknown kind {kind!r} (choose one of: {', '.join(GENERATE_KINDS)})", where="KIND")
    if options.name is not None and not options.name.strip():
        raise InputError("must not be empty", where="--name")
    return GENERATE_KINDS[key](options)


@topo.command("generate")
@click.argument("kind", metavar="KIND")
@click.option("--gpus", "-n", type=int, default=None, help="GPUs (ring, fully-connected, switch, hypercube).")
@click.option("--machines", "-k", type=int, default=None,
              help="Machines K for ndv2, dgx2, dgx-a100, dgx-h100, mi250 (default 1).")
@click.option("--fabric", default=None, metavar="leaf-spine|forestcoll|single|rail",
              help="IB fabric of dgx-a100 / dgx-h100 clusters (default leaf-spine).")
@click.option("--dims", default=None, metavar="SPEC",
              help="torus/mesh: 4x4 or 4x4x2; hypercube: the dimension D; astra: "
                   "Ring:2:200:50,FullyConnected:8:100:500 (GB/s of 2^30 bytes, ns) or a network .yml.")
@click.option("--bandwidth", type=float, default=None, metavar="GBPS",
              help=f"Per-link bandwidth, GB/s of 1e9 bytes (grids; default {DEFAULT_BANDWIDTH_GBPS:g}).")
@click.option("--latency", type=float, default=None, metavar="US",
              help=f"Per-link latency in us (grids; default {DEFAULT_LATENCY_US:g}).")
@click.option("--nvls", is_flag=True, help="Flag the NVSwitch multicast + reduce (dgx-h100, gb200-nvl72).")
@click.option("--name", default=None, help="Topology name (default: derived from the kind).")
@click.option("--output", "-o", required=True, metavar="FILE", help="Where to write the JSON; - prints it.")
@json_option
def generate_cmd(kind: str, gpus: int | None, machines: int | None, fabric: str | None, dims: str | None,
                 bandwidth: float | None, latency: float | None, nvls: bool, name: str | None, output: str,
                 as_json: bool) -> None:
    """Write a generated topology as JSON.

    KIND: ring, fully-connected, switch, torus, mesh, hypercube, astra, or a machine
    (dgx1, ndv2, dgx2, dgx-a100, dgx-h100, mi250, gb200-nvl72, ring8; with --machines K).
    """
    if output != "-":
        check_output_file(output, "-o")
    options = GenerateOptions(gpus=gpus, machines=machines, fabric=fabric, dims=dims, bandwidth=bandwidth,
                              latency=latency, nvls=nvls, name=name)
    topology = generate_topology(kind, options)
    text = dumps_topology(topology)
    if output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    atomic_write_text(output, text)
    if as_json:
        emit_json({"written": output, "name": topology.name, "gpus": topology.num_gpus,
                   "switches": len(topology.switches), "links": len(topology.links)})
    else:
        out_console.print(f"wrote {output}: {topology.name}, {plural(topology.num_gpus, 'GPU')}, "
                          f"{plural(len(topology.switches), 'switch vertex', 'switch vertices')}, "
                          f"{plural(len(topology.links), 'directed link')}")


@topo.command("export-astra")
@click.argument("spec", metavar="TOPOLOGY")
@click.option("--output", "-o", required=True, metavar="FILE.yml", help="Where to write the network; - prints it.")
@json_option
def export_astra_cmd(spec: str, output: str, as_json: bool) -> None:
    """Write a multi-dimensional topology as an ASTRA-sim network YAML (YAML -> topology -> YAML is exact)."""
    from taccl_py.library import resolve_topology
    from taccl_py.library.astra import astra_dimensions_of, dumps_astra_network, save_astra_yaml

    topology = resolve_topology(spec)
    if output == "-":
        sys.stdout.write(dumps_astra_network(astra_dimensions_of(topology), switch_model=topology.switch_model))
        return
    dims = save_astra_yaml(topology, output)
    if as_json:
        emit_json({"written": output, "name": topology.name, "npus": topology.num_gpus,
                   "topology": [d.kind.value for d in dims], "npus_count": [d.npus for d in dims],
                   "bandwidth": [d.bandwidth_gibps for d in dims], "latency": [d.latency_ns for d in dims],
                   **switch_model_keys(topology)})
    else:
        out_console.print(f"wrote {output}: {' x '.join(d.describe() for d in dims)}", markup=False)
