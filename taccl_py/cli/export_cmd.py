"""``taccl export chakra``: a schedule or an MSCCL XML file as Chakra execution traces, one file per rank.

The files are ``DIR/PREFIX.RANK.et`` (protobuf, Chakra's length-delimited framing), what ASTRA-sim 2.0
reads with ``--workload-configuration=DIR/PREFIX``. Message sizes need the buffer size (``--size``, the
nccl-tests size); a schedule JSON needs its topology (``--topology``) to read its routes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from taccl_py.cli.common import emit_json, json_option, load_topology_arg, out_console, sizes_from
from taccl_py.errors import InputError

__all__ = ["export", "write_chakra"]


def write_chakra(source: Any, size: int, directory: str, prefix: str, element_bytes: int = 4) -> dict[str, Any]:
    """Write the traces of a ``Schedule`` or an MSCCL ``Program``; returns what the report shows."""
    from taccl_py.chakra import program_traces, schedule_traces, write_traces
    from taccl_py.schedule import Schedule

    if isinstance(source, Schedule):
        traces = schedule_traces(source, size, element_bytes=element_bytes)
    else:
        traces = program_traces(source, size, element_bytes=element_bytes)
    paths = write_traces(traces, directory, prefix)
    return {"directory": directory, "prefix": prefix, "ranks": len(paths), "size_bytes": size,
            "nodes": sum(len(t.nodes) for t in traces), "files": [str(p) for p in paths],
            "workload_configuration": str(Path(directory) / prefix)}


@click.group("export")
def export() -> None:
    """Write algorithms in other tools' formats (Chakra execution traces for ASTRA-sim)."""


@export.command("chakra")
@click.argument("schedule_path", metavar="SCHEDULE")
@click.option("-o", "--output", "directory", required=True, metavar="DIR", help="Directory for the per-rank files.")
@click.option("--size", "-s", "size_spec", required=True, metavar="SIZE",
              help="Buffer size as nccl-tests reports it (sets each message's comm_size).")
@click.option("--topology", "-t", "topology_spec", default=None, metavar="NAME|FILE",
              help="The topology of a schedule JSON (needed to read its routes; not for XML).")
@click.option("--prefix", default=None, metavar="NAME", help="File name prefix (default: the input's stem).")
@click.option("--element-bytes", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Bytes per element, for the num_ops of reduction compute nodes.")
@json_option
def chakra_command(schedule_path: str, directory: str, size_spec: str, topology_spec: str | None, prefix: str | None,
                   element_bytes: int, as_json: bool) -> None:
    """Write SCHEDULE (a schedule JSON from `synthesize --schedule-out`, or an MSCCL XML file) as one Chakra
    execution trace per rank: DIR/PREFIX.RANK.et."""
    sizes = sizes_from(size_spec)
    if len(sizes) != 1:
        raise InputError("needs a single size (each message's comm_size depends on it)", where="--size")
    source: Any
    if schedule_path.lower().endswith(".json"):
        if topology_spec is None:
            raise InputError("is needed to read a schedule JSON (its routes name the topology's vertices)",
                             where="--topology")
        from taccl_py.schedule import load_schedule

        source = load_schedule(schedule_path, load_topology_arg(topology_spec))
    else:
        from taccl_py.msccl import load_program

        source = load_program(schedule_path)
    written = write_chakra(source, sizes[0], directory, prefix or Path(schedule_path).stem, element_bytes)
    if as_json:
        emit_json({"input": schedule_path, **written})
    else:
        out_console.print(f"wrote {written['ranks']} Chakra traces ({written['nodes']} nodes) to "
                          f"{written['workload_configuration']}.<rank>.et", markup=False)
