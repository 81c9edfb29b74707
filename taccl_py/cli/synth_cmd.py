"""``taccl synthesize``: topology + collective + size -> verified MSCCL XML and a report."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import click
from rich.live import Live
from rich.text import Text

from taccl_py.bounds import Bound
from taccl_py.cli.common import (
    check_synthesis_args,
    collective_from,
    collective_option,
    emit_json,
    err_console,
    fmt,
    json_option,
    load_topology_arg,
    make_table,
    out_console,
    size_option,
    sizes_from,
    topology_option,
)
from taccl_py.collectives import CollectiveKind
from taccl_py.errors import InputError
from taccl_py.sketch import load_sketch
from taccl_py.synthesis import SynthesisOptions, SynthesisResult, synthesize
from taccl_py.topology import Topology
from taccl_py.units import format_bytes

__all__ = ["synthesize_command"]

_NCCL_DEFAULT = {CollectiveKind.ALLTOALL: "direct"}


class _Progress:
    """Live one-line status on stderr (stage, elapsed, incumbent, bound, gap) when it is a terminal."""

    def __init__(self, enabled: bool, label: str = "") -> None:
        self.label = label  # which size of a sweep, e.g. "size 3/12 4MB"
        self.live: Live | None = None
        if enabled and err_console.is_terminal:
            self.live = Live(Text(""), console=err_console, transient=True, refresh_per_second=8)

    def __enter__(self) -> _Progress:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.__exit__(None, None, None)

    def __call__(self, stage: str, info: dict[str, Any]) -> None:
        if not self.live:
            return
        parts = [*([self.label] if self.label else []), f"[bold]{stage}[/bold]", f"{info.get('elapsed_s', 0.0):6.1f}s"]
        for key, label in (("chunk_factor", "chunks/GPU"), ("ordering", "order"), ("incumbent_us", "incumbent"),
                           ("bound_us", "bound"), ("gap", "gap"), ("time_us", "simulated"), ("detail", "")):
            value = info.get(key)
            if value is None:
                continue
            if key == "gap":
                parts.append(f"gap {100 * value:.2f}%")
            elif key.endswith("_us"):
                parts.append(f"{label} {value:.4g} us")
            else:
                parts.append(f"{label} {value}".strip())
        self.live.update(Text.from_markup("  ".join(parts)))


def _reference_times(topology: Topology, kind: CollectiveKind, size: int, result: SynthesisResult,
                     root: int) -> tuple[str | None, float | None, Bound]:
    """(NCCL-default algorithm name, its time, the lower bound)."""
    from taccl_py.bounds import lower_bound

    name: str | None = _NCCL_DEFAULT.get(kind, "ring")
    assert name is not None
    ring_time = result.baselines.get(name)
    if ring_time is None and name not in result.baselines:
        from taccl_py.baselines import applicable_baselines, baseline
        from taccl_py.simulator import simulate

        if name in applicable_baselines(topology, kind):
            ring_time = simulate(topology, baseline(topology, kind, name, root=root), size).time_us
        else:
            name = None
    return name, ring_time, lower_bound(topology, kind, size, root=root)


def _resolve_topology(spec: str, sketch_nodes: int | None) -> Topology:
    """A shipped name, a topology file, or a TACCL topology profile (machines from the sketch's nnodes)."""
    path = Path(spec)
    if path.suffix == ".json" and path.is_file():
        import json

        from taccl_py.taccl_profile import is_taccl_profile, topology_from_taccl_profile

        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            data = None
        if is_taccl_profile(data):
            return topology_from_taccl_profile(data, nnodes=sketch_nodes or 1, where=spec)
    return load_topology_arg(spec)


def _write_xml(result: SynthesisResult, topology: Topology, path: Path, *, dialect: str, instances: int, proto: str,
               min_bytes: int, max_bytes: int) -> None:
    from taccl_py.msccl import write_schedule_xml

    write_schedule_xml(result.schedule, topology, path, dialect=dialect, instances=instances, proto=proto,
                       min_bytes=min_bytes, max_bytes=max_bytes)


def _row(topology: Topology, kind: CollectiveKind, size: int, result: SynthesisResult, root: int,
         xml: str | None) -> dict[str, Any]:
    ring_name, ring_time, bound = _reference_times(topology, kind, size, result, root)
    time_us = result.sim.time_us
    return {
        "size_bytes": size,
        "correct": result.sim.correct,
        "time_us": time_us,
        "algbw_GBps": result.sim.algbw_GBps,
        "busbw_GBps": result.sim.busbw_GBps,
        "ring_time_us": ring_time,
        "ring_algorithm": ring_name,
        "bound_us": bound.bound_us,
        "efficiency": bound.efficiency(time_us),
        "speedup_vs_ring": (ring_time / time_us) if ring_time and time_us else None,
        "synthesis_s": round(result.synthesis_s, 3),
        "xml": xml,
        "algorithm": result.chosen,
        "chunk_factor": result.schedule.collective.chunk_factor,
        "transfers": len(result.schedule.transfers),
        "symmetry": result.symmetry,
        "sketch": result.sketch,
        "baselines_us": result.baselines,
        "candidates": [{"label": c.label, "time_us": c.time_us, "transfers": c.transfers} for c in result.candidates],
        "solver_stages": [s.to_dict() for s in result.stats],
        "notes": list(result.notes),
    }


def _print_report(topology: Topology, kind: CollectiveKind, row: dict[str, Any]) -> None:
    title = (f"{kind.value} on {topology.name} ({topology.num_gpus} GPUs), size {format_bytes(row['size_bytes'])}: "
             f"{row['algorithm']}")
    table = make_table(title, ["", "time us", "algbw GB/s", "busbw GB/s"], [
        ["synthesized" if row["algorithm"] == "synthesized" else row["algorithm"], row["time_us"],
         row["algbw_GBps"], row["busbw_GBps"]],
        [f"NCCL-style {row['ring_algorithm'] or '-'}", row["ring_time_us"],
         row["size_bytes"] / row["ring_time_us"] / 1e3 if row["ring_time_us"] else None, None],
        ["lower bound", row["bound_us"], row["size_bytes"] / row["bound_us"] / 1e3 if row["bound_us"] else None,
         None],
    ])
    out_console.print(table)
    out_console.print(f"correct: {'yes' if row['correct'] else 'NO'}   efficiency (bound/time): "
                      f"{fmt(row['efficiency'], 3)}   speedup vs {row['ring_algorithm'] or 'ring'}: "
                      f"{fmt(row['speedup_vs_ring'], 3)}x   synthesis: {row['synthesis_s']:.2f} s")
    out_console.print(f"symmetry: {row['symmetry']}\nsketch: {row['sketch']}")
    stages = make_table("solver statistics per stage", ["stage", "solver", "status", "objective", "bound", "gap",
                                                        "time s", "vars"],
                        [[s["stage"], s["solver"], s["status"], s["objective"], s["bound"],
                          "-" if s["gap"] is None else f"{100 * s['gap']:.2f}%", f"{s['time_s']:.2f}",
                          s["variables"] or "-"] for s in row["solver_stages"]])
    out_console.print(stages)
    out_console.print(make_table("candidates (simulated)", ["candidate", "time us", "transfers"],
                                 [[c["label"], c["time_us"], c["transfers"]] for c in row["candidates"]]))
    for note in row["notes"]:
        out_console.print(f"note: {note}")
    if row["xml"]:
        out_console.print(f"wrote {row['xml']}")


def _band_name(kind: CollectiveKind, topology: Topology, lo: int) -> str:
    return f"{kind.value}-{topology.name}-{format_bytes(lo)}.xml".replace("/", "_")


@click.command("synthesize")
@topology_option
@collective_option
@size_option
@click.option("--sketch", "sketch_path", type=click.Path(dir_okay=False), default=None,
              help="A communication sketch (TACCL's JSON format). Without one, it is derived from the topology.")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Write the MSCCL XML here (a directory when --size is a range).")
@click.option("--time-limit", type=click.FloatRange(min=1.0), default=60.0, show_default=True,
              help="Overall solver budget in seconds; at the limit the best incumbent is used.")
@click.option("--solver", default="cpsat", show_default=True,
              help="Routing MILP solver: cpsat (OR-Tools CP-SAT) or a PuLP solver name (cbc, gurobi, cplex...).")
@click.option("--threads", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--chunk-factor", "chunk_factors", type=click.IntRange(min=1), multiple=True,
              help="Chunks per GPU block to try (repeatable); default: chosen from the size.")
@click.option("--root", type=click.IntRange(min=0), default=0, show_default=True, help="Broadcast/Reduce root.")
@click.option("--dialect", type=click.Choice(["v2", "v1"]), default="v2", show_default=True)
@click.option("--instances", type=click.IntRange(min=1), default=1, show_default=True,
              help="Replicate the algorithm over this many channels in the XML.")
@click.option("--proto", type=click.Choice(["Simple", "LL", "LL128"]), default="Simple", show_default=True)
@click.option("--no-baselines", is_flag=True, help="Do not compare with (or fall back to) NCCL-style baselines.")
@click.option("--schedule-out", type=click.Path(dir_okay=False), default=None,
              help="Also write the schedule IR as JSON (single size only).")
@json_option
def synthesize_command(topology_spec: str, collective_name: str, size_spec: str, sketch_path: str | None,
                       output: str | None, time_limit: float, solver: str, threads: int, seed: int,
                       chunk_factors: tuple[int, ...], root: int, dialect: str, instances: int, proto: str,
                       no_baselines: bool, schedule_out: str | None, as_json: bool) -> None:
    """Synthesize a collective algorithm, verify it by simulation and write MSCCL XML.

    Example: taccl synthesize --topology ndv2x2 --collective allgather --size 1GB -o ag.xml
    """
    kind = collective_from(collective_name)
    sizes = sizes_from(size_spec)
    sketch = load_sketch(sketch_path) if sketch_path else None
    topology = _resolve_topology(topology_spec, sketch.num_machines if sketch else None)
    if root >= topology.num_gpus:
        raise InputError(f"root must be a GPU id in 0..{topology.num_gpus - 1} (got {root})", where="--root")
    if len(sizes) > 1 and schedule_out:
        raise InputError("--schedule-out needs a single size", where="--schedule-out")
    check_synthesis_args(topology, kind, output=output, schedule_out=schedule_out, ranged=len(sizes) > 1,
                         dialect=dialect, instances=instances, root=root, chunk_factors=chunk_factors, solver=solver,
                         seed=seed, time_limit=time_limit, threads=threads)
    options = SynthesisOptions(sketch=sketch, solver=solver, time_limit_s=time_limit, threads=threads, seed=seed,
                               chunk_factors=chunk_factors or None, compare_baselines=not no_baselines, root=root)
    rows = []
    out_dir = Path(output) if output and len(sizes) > 1 else None
    if out_dir is not None:
        if out_dir.exists() and not out_dir.is_dir():
            raise InputError("must be a directory when --size is a range", where=str(out_dir))
        out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for k, size in enumerate(sizes):
        with _Progress(not as_json, f"size {k + 1}/{len(sizes)} {format_bytes(size)}" if len(sizes) > 1 else "") \
                as progress:
            result = synthesize(topology, kind, size, options, progress)
        xml_path: Path | None = None
        if output:
            if out_dir is not None:
                lo = 0 if k == 0 else size
                hi = 0 if k == len(sizes) - 1 else sizes[k + 1] - 1
                xml_path = out_dir / _band_name(kind, topology, size)
                _write_xml(result, topology, xml_path, dialect=dialect, instances=instances, proto=proto,
                           min_bytes=lo, max_bytes=hi)
            else:
                xml_path = Path(output)
                _write_xml(result, topology, xml_path, dialect=dialect, instances=instances, proto=proto,
                           min_bytes=0, max_bytes=0)
        if schedule_out:
            from taccl_py.schedule import save_schedule

            save_schedule(result.schedule, topology, schedule_out)
        row = _row(topology, kind, size, result, root, str(xml_path) if xml_path else None)
        rows.append(row)
        if not as_json and len(sizes) == 1:
            _print_report(topology, kind, row)
    if len(sizes) > 1:
        if as_json:
            emit_json({"topology": topology.name, "collective": kind.value, "rows": rows,
                       "total_s": round(time.perf_counter() - started, 3),
                       "directory": str(out_dir) if out_dir else None})
        else:
            out_console.print(make_table(
                f"{kind.value} on {topology.name}: synthesized per size band",
                ["size", "time us", "algbw", "busbw", "ring us", "bound us", "efficiency", "speedup", "algorithm",
                 "xml"],
                [[format_bytes(r["size_bytes"]), r["time_us"], r["algbw_GBps"], r["busbw_GBps"], r["ring_time_us"],
                  r["bound_us"], r["efficiency"], r["speedup_vs_ring"], r["algorithm"],
                  os.path.basename(r["xml"]) if r["xml"] else "-"] for r in rows]))
    elif as_json:
        emit_json(rows[0])
    if not all(r["correct"] for r in rows):  # pragma: no cover - synthesize only returns correct schedules
        raise click.exceptions.Exit(1)



