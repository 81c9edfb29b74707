"""``taccl profile``: fit measurements into a topology, measure links live, show fits."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from taccl_py.cli.common import (
    check_host_overlap_applies,
    check_output_file,
    emit_json,
    err_console,
    host_overlap_requested,
    ideal_requested,
    json_option,
    launch_offset_requested,
    load_topology_arg,
    make_table,
    out_console,
    parse_host_overlap,
    progress_enabled,
    progress_line,
    protocols_option,
    runtime_model_for,
    topology_option,
)
from taccl_py.errors import ProfileInputError
from taccl_py.harness import OverlappedHost
from taccl_py.limits import MAX_GPUS, MAX_LOCAL_RANKS, MAX_PROFILE_REPEATS
from taccl_py.profiler.calibration import LinkFit, link_classes
from taccl_py.profiler.fitting import FitOutcome, FitRequest, fit_measurements
from taccl_py.profiler.report import FitRow, fit_to_json, rows_from_fits, rows_from_topology, write_plot
from taccl_py.profiler.tables import is_timing_table
from taccl_py.runtime import NCCL_ALGORITHM_NAMES, PROTOCOLS, Protocol
from taccl_py.topology import Topology
from taccl_py.topology_io import load_topology, save_topology
from taccl_py.units import format_bytes, parse_size_range

if TYPE_CHECKING:
    from collections.abc import Callable

    from taccl_py.fidelity import FidelityRow
    from taccl_py.profiler.runtime_fit import TimedRow

__all__ = ["profile"]

_COLUMNS = ("link class", "alpha us", "GB/s", "R^2", "rms resid %", "samples", "dropped", "links")


@click.group("profile")
@click.pass_context
def profile(ctx: click.Context) -> None:
    """Fit per-link latency and bandwidth from measurements into a topology.

    \b
    taccl profile fit sendrecv.log -o fitted.json      nccl-tests logs or CSVs -> topology
    taccl profile run --nproc 4 -o m.csv --fit t.json  live ping-pong with torch.distributed
    taccl profile show fitted.json --plot fit.png      the fitted table (and plot)
    taccl profile check my.log -t my.json              measured vs calibrated prediction per size
    """
    from taccl_py.cli.main import HELP_ASKED

    if host_overlap_requested() is not None and not ctx.meta.get(HELP_ASKED):
        sub = ctx.invoked_subcommand  # profile fit is let through: it says what it takes instead (--overlap)
        check_host_overlap_applies(sub and f"profile {sub}", ("profile check", "profile fit"))


def _warn(warnings: tuple[str, ...] | list[str]) -> None:
    for warning in warnings:
        err_console.print(f"taccl: warning: {warning}", markup=False, highlight=False)


def _fit_table(title: str, rows: list[FitRow]) -> Any:
    """The fitted table: link class, alpha, bandwidth, R^2, rms residual, samples, dropped, links."""
    return make_table(title, _COLUMNS, _table_rows(rows))


def _table_rows(rows: list[FitRow]) -> list[list[Any]]:
    return [[r.label, float(r.alpha_us), float(r.bandwidth_gbps),
             "-" if r.r_squared is None else f"{r.r_squared:.5f}",
             "-" if r.rms_residual_pct is None else f"{r.rms_residual_pct:.2f}", r.samples, r.dropped, r.links]
            for r in rows]


def _load_base(spec: str, option: str) -> Topology:
    if Path(spec).is_file():
        return load_topology(spec)
    if spec.lower().endswith(".json"):
        raise ProfileInputError("no such file", where=spec)
    return load_topology_arg(spec)


def _fit_json(outcome: FitOutcome, output: str | None) -> dict[str, Any]:
    topo = outcome.topology
    return {
        "command": "profile fit",
        "inputs": list(outcome.inputs),
        "output": output,
        "topology": {"name": topo.name, "gpus": topo.num_gpus, "links": len(topo.links), "source": topo.source},
        "fits": [fit_to_json(f) for f in outcome.fits],
        "warnings": list(outcome.warnings),
    }


def _report_fit(outcome: FitOutcome, output: str | None, as_json: bool) -> None:
    if as_json:
        emit_json(_fit_json(outcome, output))
        return
    _warn(outcome.warnings)
    for line in outcome.inputs:
        out_console.print(f"read {line}", markup=False)
    rows = rows_from_fits(outcome.fits, outcome.topology)
    out_console.print(_fit_table("fitted links (alpha-beta)", rows))
    if output is None:
        out_console.print("no output file given (-o FILE or --into TOPO): nothing written", markup=False)
    else:
        topo = outcome.topology
        out_console.print(f"wrote {output}: {topo.name!r}, {topo.num_gpus} GPUs, {len(topo.links)} links",
                          markup=False)


@profile.command("fit")
@click.argument("files", nargs=-1, metavar="FILE...")
@click.option("-o", "--output", metavar="FILE", help="Write the fitted topology here.")
@click.option("--into", "into", metavar="TOPO",
              help="Re-calibrate this topology file (overwritten unless -o is given) or shipped topology "
                   "(then -o is required).")
@click.option("--collective", metavar="NAME",
              help="nccl-tests binary when the log does not say (sendrecv, allgather, allreduce, ...). With "
                   "--runtime: the collectives to fit, several separated by commas (allreduce,allgather): a table "
                   "keeps their rows, a log the runs of those binaries.")
@click.option("--ranks", type=click.IntRange(1, MAX_GPUS),
              help="Ranks of the nccl-tests run when the log lacks Rank lines.")
@click.option("--group", type=click.Choice(["pair", "class"]),
              help="CSV: one fit per measured direction (default without --into) or per link class of the "
                   "topology (default with --into).")
@click.option("--class", "class_name", metavar="NAME",
              help="Link class of --into to re-calibrate (nvlink, pci, net; with --runtime also nvls, nvls-tree "
                   "for the share of NVLS's rate NCCL's NVLSTree reaches, and net-alltoall for the share of the "
                   "network's rate Alltoall reaches across machines).")
@click.option("--name", metavar="NAME", help="Name of a new topology (default: the first file's stem).")
@click.option("--runtime", "runtime", is_flag=True,
              help="Calibrate the runtime model of --into (launch overhead, per-step latency per protocol, "
                   "efficiency and LL128 cap of one link class) from collective logs or published timing tables, "
                   "instead of its links; --class picks the class (nvlink, pci, net), or nvls for NVLink SHARP's "
                   "own figures (latency, share, chunk cost) from Allreduce rows that ran NVLS (its Allgather and "
                   "ReduceScatter take the NVLink copy share: fit them with nvlink), nvls-tree or net-alltoall for "
                   "one share each.")
@click.option("--rows", "rows_kept", type=click.Choice(["all", "even", "odd"]), default="all", show_default=True,
              help="With --runtime: fit every row, or every other one (the rest held out to check the fit).")
@click.option("--per-rank", "per_rank", multiple=True, metavar="FILE",
              help="With --runtime: more logs or tables measured with one GPU per process (MPI, torchrun). The "
                   "launch offset is fitted on FILE... only, as their harness's extra cost, and is not written "
                   "into the model (e.g. all_reduce_perf -g 8 runs calibrated together with per-rank ones). "
                   "FILE@LO:HI keeps its rows of sizes LO to HI only.")
@click.option("--algorithm", "algorithms", multiple=True, type=click.Choice(list(NCCL_ALGORITHM_NAMES)),
              help="With --runtime: an algorithm the runs allowed (their NCCL_ALGO); repeat for several. Default: "
                   "NCCL's own choice among all. FILE#ALGO[,ALGO] (after any @LO:HI) says it for one file.")
@click.option("--protocol", "protocols", multiple=True,
              type=click.Choice([p.value for p in PROTOCOLS], case_sensitive=False), metavar="LL|LL128|Simple",
              help="With --runtime: a protocol the runs allowed (their NCCL_PROTO); repeat for several. Default: "
                   "all of NCCL's (or --into's runtime's). The other protocols' figures are left as they are, and the "
                   "fitted model keeps to these (its runtime's protocols).")
@click.option("--harness-offset", "harness_offset", type=click.FloatRange(0, 1e6), metavar="US",
              help="With --runtime: the host cost per collective of FILE...'s harness (e.g. all_reduce_perf -g 8), "
                   "known from another fit: not fitted, and not written into the model.")
@click.option("--overlap", "overlap", is_flag=True,
              help="With --runtime: FILE...'s harness (all_reduce_perf -g N) launches the next collective while the "
                   "GPUs run this one, so a row takes the longer of the GPUs' time and the host's: the figures are "
                   "fitted on the --per-rank rows only (give there the sizes where FILE...'s GPUs bind, e.g. "
                   "FILE@4MB:8GB), then the host's cost per collective and per channel on FILE...'s rows; the host's "
                   "cost is reported, not written into the model.")
@click.option("--select", "select", multiple=True, metavar="COLUMN=VALUE",
              help="With --runtime: a published table with this column keeps only the rows with this value "
                   "(a table holding several runs, e.g. machines=1).")
@json_option
def fit_cmd(files: tuple[str, ...], output: str | None, into: str | None, collective: str | None,
            ranks: int | None, group: str | None, class_name: str | None, name: str | None, runtime: bool,
            rows_kept: str, per_rank: tuple[str, ...], algorithms: tuple[str, ...], protocols: tuple[str, ...],
            harness_offset: float | None, overlap: bool, select: tuple[str, ...], as_json: bool) -> None:
    """Fit alpha (us) and bandwidth (GB/s) per link from nccl-tests logs or CSVs.

    FILE is an nccl-tests log (sendrecv_perf, all_gather_perf, all_reduce_perf,
    reduce_scatter_perf, alltoall_perf, broadcast_perf, reduce_perf) or a CSV
    ``src,dst,bytes,time_us[,repeat]``. Without --into the result is a new
    topology (a ring, fully connected or measured-pairs topology); with --into
    the fitted values replace the links of the measured pairs or link classes.

    With --runtime, FILE@LO:HI (and --per-rank FILE@LO:HI) keeps only that
    file's rows of sizes LO to HI, e.g. ``dgxc.log@64B:512KB``.
    """
    if not files and not (runtime and per_rank):
        raise ProfileInputError("give at least one FILE (or, with --runtime, --per-rank FILE)", where="FILE")
    if launch_offset_requested():
        raise ProfileInputError("taccl --launch-offset adds a harness's cost to predictions; a fit takes the known "
                                "cost of its FILE...'s harness as --harness-offset US (profile fit --runtime)",
                                where="--launch-offset")
    if host_overlap_requested() is not None:
        raise ProfileInputError("taccl --host-overlap applies a -g N host to predictions; a fit finds its FILE...'s "
                                "host with --overlap (profile fit --runtime)", where="--host-overlap")
    for flag, given in (("--rows", rows_kept != "all"), ("--per-rank", bool(per_rank)), ("--select", bool(select)),
                        ("--algorithm", bool(algorithms)), ("--protocol", bool(protocols)),
                        ("--harness-offset", harness_offset is not None), ("--overlap", overlap)):
        if given and not runtime:
            raise ProfileInputError(f"{flag} applies to --runtime fits only", where=flag)
    if runtime:
        _fit_runtime_cmd(files, output, into, collective, class_name, rows_kept, per_rank, _selection(select),
                         algorithms, harness_offset, as_json, ranks, protocols=protocols_option(protocols),
                         overlap=overlap)
        return
    base = None
    if into is not None:
        if not Path(into).is_file() and not into.lower().endswith(".json") and output is None:
            raise ProfileInputError(f"{into!r} is not a file; to re-calibrate a shipped topology give -o FILE "
                                    "for the re-calibrated copy", where="--into")
        base = _load_base(into, "--into")
    target = output or into
    if target is not None:
        check_output_file(target, "-o" if output else "--into")
    request = FitRequest(files=files, collective=collective, ranks=ranks, group=group, base=base,
                         base_where=into or "", class_name=class_name, name=name)
    outcome = fit_measurements(request)
    if target is not None:
        save_topology(outcome.topology, target)
    _report_fit(outcome, target, as_json)


_RUNTIME_COLUMNS = ("size", "measured us", "predicted us", "time error", "algorithm", "proto", "harness")


def _selection(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--select COLUMN=VALUE`` options as a mapping."""
    out: dict[str, str] = {}
    for pair in pairs:
        column, sep, value = pair.partition("=")
        if not sep or not column.strip():
            raise ProfileInputError(f"expected COLUMN=VALUE (got {pair!r})", where="--select")
        out[column.strip()] = value.strip()
    return out


def _fit_runtime_cmd(files: tuple[str, ...], output: str | None, into: str | None, collective: str | None,
                     class_name: str | None, rows_kept: str, per_rank: tuple[str, ...], select: dict[str, str],
                     algorithms: tuple[str, ...], harness_offset: float | None, as_json: bool,
                     ranks: int | None = None, *, protocols: tuple[Protocol, ...] | None = None,
                     overlap: bool = False) -> None:
    """``profile fit --runtime``: fit the runtime figures of --into to the files and write them into it (with
    ``overlap``, the figures on the per-rank rows, then FILE...'s harness's overlapped host cost)."""
    from dataclasses import replace

    from taccl_py.profiler.runtime_fit import (
        fit_alltoall_net,
        fit_nvls,
        fit_nvls_tree,
        fit_overlapped_host,
        fit_runtime,
        read_timed_files,
    )

    if into is None:
        raise ProfileInputError("--runtime calibrates the runtime model of a topology: give --into TOPO", where="--runtime")
    if not Path(into).is_file() and not into.lower().endswith(".json") and output is None:
        raise ProfileInputError(f"{into!r} is not a file; to re-calibrate a shipped topology give -o FILE "
                                "for the re-calibrated copy", where="--into")
    base = _load_base(into, "--into")
    target = output or into
    check_output_file(target, "-o" if output else "--into")
    if harness_offset is not None and not files:
        raise ProfileInputError("the harness offset is that of FILE...'s rows: give FILE", where="--harness-offset")
    if overlap and harness_offset is not None:
        raise ProfileInputError("--overlap fits a host cost that overlaps the GPUs' work; --harness-offset gives one "
                                "added to it: not both", where="--overlap")
    if overlap and (not files or not per_rank):
        raise ProfileInputError("--overlap fits the figures on --per-rank FILE... and the host cost of FILE...'s "
                                "harness after them: give both", where="--overlap")
    per_file, inputs, warnings = read_timed_files(files, base, collective=collective, rows_kept=rows_kept,
                                                  per_rank=per_rank, select=select, ranks=ranks)
    rows = [row for _, file_rows in per_file for row in file_rows]
    warnings += _disturbed_fit_rows(rows)
    host_rows = [r for r in rows if r.offset] if overlap else []
    if overlap:
        rows = [r for r in rows if not r.offset]
        single = [spec for spec, file_rows in per_file[:len(files)]
                  if _single_gpu_rows(file_rows, table=is_timing_table(_file_of(spec)))]
        if single:
            warnings.append(f"--overlap: {', '.join(single)} has runs that do not say they launched several GPUs "
                            "from one thread (nccl-tests -g N): the host cost fitted on them is not that of a -g N "
                            "harness")
    if protocols is not None and class_name in ("nvls", "nvls-tree", "net-alltoall"):
        raise ProfileInputError(f"--class {class_name} fits rows whose protocol NCCL fixes (NVLS runs Simple, Alltoall "
                                "picks by size): --protocol applies to the nvlink, pci and net classes",
                                where="--protocol")
    start = base.runtime
    if class_name in ("nvls", "nvls-tree") and start is not None and start.protocols is not None \
            and Protocol.SIMPLE not in start.protocols:
        raise ProfileInputError(f"--class {class_name} fits NVLS, which runs Simple, and --into's runtime allows "
                                f"{', '.join(p.value for p in start.protocols)} only (NCCL_PROTO)", where="--into")
    if class_name in ("nvls", "nvls-tree"):
        if set(algorithms) - {class_name}:
            raise ProfileInputError(f"--class {class_name} fits rows that ran {class_name}: --algorithm can only be "
                                    f"{class_name}", where="--algorithm")
        fitter = fit_nvls if class_name == "nvls" else fit_nvls_tree
        fit = fitter(base, rows, harness_offset_us=harness_offset)
    elif class_name == "net-alltoall":
        if set(algorithms) - {"direct"}:
            raise ProfileInputError("--class net-alltoall fits NCCL's Alltoall (its point-to-point sends): --algorithm "
                                    "can only be direct", where="--algorithm")
        fit = fit_alltoall_net(base, rows, harness_offset_us=harness_offset)
    else:
        fit = fit_runtime(base, rows, link_class=class_name, algorithms=algorithms or None,
                          harness_offset_us=harness_offset, protocols=protocols)
    host = None
    if overlap:
        host = fit_overlapped_host(replace(base, runtime=fit.model), fit.model, host_rows,
                                   algorithms=algorithms or None, protocols=protocols or fit.model.protocols)
    record: dict[str, object] = {**fit.as_dict(), "files": list(files), "rows_kept": rows_kept}
    if per_rank:
        record["per_rank_files"] = list(per_rank)
    if host is not None:
        record["harness_host"] = host.as_dict()
    elif (per_rank or harness_offset is not None) and files:
        record["harness_launch_offset_us"] = round(fit.figures["launch"], 6)
    if harness_offset is not None:
        record["harness_offset_given"] = True
    if select:
        record["select"] = dict(select)
    if algorithms:
        record["algorithms"] = list(algorithms)
    used = fit.model.protocols
    if used is not None:
        record["protocols"] = [p.value for p in used]
        if protocols is None:
            warnings.append(f"fitted with --into's own protocols, {', '.join(p.value for p in used)} (its "
                            "runtime.protocols: the NCCL_PROTO of the runs it was fitted on)")
        elif used != protocols:
            warnings.append(f"--protocol {', '.join(p.value for p in protocols)}: --into's runtime allows "
                            f"{', '.join(p.value for p in used)} only; fitted with those")
    label = ", ".join(Path(f).name for f in (*files, *per_rank))
    kept = tuple(s for s in fit.model.sources if not s.startswith((f"{fit.link_class}:", f"{fit.link_class} (")))
    model = replace(fit.model, name=f"{fit.model.name.removesuffix('+fit')}+fit", fitted=record,
                    sources=(*kept, f"{fit.link_class}: fitted by taccl profile fit --runtime from {label}"))
    save_topology(replace(base, runtime=model), target)
    all_warnings = [*warnings, *fit.warnings, *(() if host is None else host.warnings)]
    if as_json:
        emit_json({"command": "profile fit", "mode": "runtime", "inputs": inputs, "output": target,
                   "fit": record, "warnings": all_warnings,
                   "rows": [{"size_bytes": r.row.size_bytes, "measured_us": r.row.time_us,
                             "predicted_us": r.predicted_us, "error": r.error, "algorithm": r.algorithm,
                             "proto": r.protocol, "per_rank": not r.row.offset} for r in fit.rows]
                   + ([] if host is None else
                      [{"size_bytes": r.row.size_bytes, "measured_us": r.row.time_us, "predicted_us": r.predicted_us,
                        "error": r.error, "algorithm": r.algorithm, "proto": r.protocol, "per_rank": False,
                        "host_bound": bound} for r, bound in zip(host.rows, host.host_bound, strict=True)])})
        return
    _warn(all_warnings)
    for line in inputs:
        out_console.print(f"read {line}", markup=False)
    figures = ", ".join(f"{k} {v:.4g}" for k, v in fit.figures.items() if not (host is not None and k == "launch"))
    out_console.print(f"fitted {fit.link_class}: {figures} (fitted: {', '.join(fit.fitted)})", markup=False)
    if host is not None:
        out_console.print(f"host cost of {', '.join(files)}'s harness, overlapping the GPUs' work: "
                          f"{host.host.host_us:.4g} us + {host.host.per_channel_us:.4g} us per channel (fitted after "
                          f"the figures, on its {len(host.rows)} rows: rms error {host.rms_error:.1%}, worst "
                          f"{host.max_error:.1%}; the host's time is the longer in {sum(host.host_bound)}); it is not "
                          "written into the model", markup=False)
    elif (per_rank or harness_offset is not None) and files:
        how = "given" if harness_offset is not None else "fitted"
        out_console.print(f"launch {fit.figures['launch']:.4g} us ({how}) is the harness's of {', '.join(files)} "
                          "(over one GPU per process); it is not written into the model", markup=False)
    out_console.print(make_table(f"rows: rms error {fit.rms_error:.1%}, worst {fit.max_error:.1%}",
                                 _RUNTIME_COLUMNS,
                                 [[format_bytes(r.row.size_bytes), float(r.row.time_us), float(r.predicted_us),
                                   f"{r.error:+.1%}", r.algorithm, r.protocol,
                                   "offset" if r.row.offset else "per-rank"] for r in fit.rows]
                                 + ([] if host is None else
                                    [[format_bytes(r.row.size_bytes), float(r.row.time_us), float(r.predicted_us),
                                      f"{r.error:+.1%}", r.algorithm, r.protocol,
                                      "host" if bound else "GPU"]
                                     for r, bound in zip(host.rows, host.host_bound, strict=True)])))
    out_console.print(f"wrote {target}: runtime model {model.name!r}", markup=False)


_CHECK_COLUMNS = ("size", "measured us", "predicted us", "measured busbw", "predicted busbw", "busbw error", "target",
                  "algorithm", "proto")


@profile.command("check")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@topology_option
@click.option("--collective", metavar="NAME",
              help="nccl-tests binary when a log does not say; a published table keeps its rows of this collective "
                   "(several separated by commas).")
@click.option("--rows", "rows_kept", type=click.Choice(["all", "even", "odd"]), default="all", show_default=True,
              help="Check every row, or every other one (the rows a `profile fit --runtime --rows` did not fit).")
@click.option("--algorithm", "algorithms", multiple=True, type=click.Choice(list(NCCL_ALGORITHM_NAMES)),
              help="An algorithm the runs allowed (their NCCL_ALGO); repeat for several. Default: NCCL's choice "
                   "among all, predicted. FILE#ALGO[,ALGO] says it for one file.")
@click.option("--protocol", "protocols", multiple=True,
              type=click.Choice([p.value for p in PROTOCOLS], case_sensitive=False), metavar="LL|LL128|Simple",
              help="A protocol the runs allowed (their NCCL_PROTO); repeat for several. Default: all of NCCL's (or "
                   "the topology's runtime's).")
@click.option("--select", "select", multiple=True, metavar="COLUMN=VALUE",
              help="A published table keeps only the rows with this value in this column (a table holding "
                   "several runs, e.g. machines=1).")
@click.option("--plot", "plot_path", metavar="FILE.png|FILE.svg",
              help="Also draw measured and predicted busbw against size, one panel per FILE, with the target band.")
@click.option("--ranks", type=click.IntRange(1, MAX_GPUS),
              help="Ranks of every nccl-tests run read (for logs without Rank lines; else their distinct Rank "
                   "lines, or nThread x nGpus).")
@click.option("--host-overlap", "host_overlap", metavar="US[,US]",
              help="The host cost of the -g N runs checked (nccl-tests launching several GPUs from one thread) and "
                   "of published tables (which do not say how they were launched), overlapping the GPUs' work: US "
                   "per collective and, after a comma, US per channel NCCL runs it on; such a row takes the longer "
                   "of the GPUs' time and the host's (profile fit --runtime --overlap fits them; the Together "
                   "host's: 35.51,0.2174). Not with taccl --launch-offset.")
@click.option("--strict", is_flag=True, help="Exit with status 1 when a row misses its target.")
@json_option
def check_cmd(files: tuple[str, ...], topology_spec: str, collective: str | None, rows_kept: str,
              algorithms: tuple[str, ...], protocols: tuple[str, ...], select: tuple[str, ...], plot_path: str | None,
              ranks: int | None, host_overlap: str | None, strict: bool, as_json: bool) -> None:
    """Compare nccl-tests logs (or published tables) with the calibrated prediction, size by size.

    For every row, NCCL's choice of algorithm and protocol is simulated under the topology's runtime
    model and its busbw compared with the measured one: within 10 % from 1 MB and 25 % below is the
    target (issue 17's, as benchmarks/RESULTS.md's fidelity table). Use it on the rows a `profile fit
    --runtime` held out (--rows odd after --rows even), or before fitting to see how far the shipped
    figures are from your machines. Every run of a log is read; FILE@LO:HI keeps that file's rows of sizes
    LO to HI, FILE#ALGO[,ALGO] says which algorithms its runs allowed. Runs of
    all_reduce_perf -g 8 (one process launching every GPU) carry a host cost per collective: give it
    with ``taccl --launch-offset US`` (a hint gives the one that fits such a log best), or as a host whose
    launches overlap the GPUs' work with --host-overlap. Notes name the sizes whose in-place time tells the
    run's own spread from the model's error.
    """
    from taccl_py.fidelity import LARGE_TARGET, SMALL_TARGET, measured_busbw, predict_row
    from taccl_py.profiler.runtime_fit import read_timed_files

    if plot_path is not None:
        from taccl_py.plots import check_figure_path

        check_figure_path(plot_path, where="--plot")
    topology = load_topology_arg(topology_spec)
    if ideal_requested():
        raise ProfileInputError("profile check compares the calibrated runtime model's predictions with "
                                "measurements; drop --ideal", where="--ideal")
    model = runtime_model_for(topology, host_overlap=True)
    if model is None:
        raise ProfileInputError(f"topology {topology.name!r} has no calibrated runtime model to predict with: "
                                "calibrate one with taccl profile fit --runtime --into", where=topology_spec)
    allowed = protocols_option(protocols)
    if allowed is not None and model.protocols is not None and not set(allowed) & set(model.protocols):
        raise ProfileInputError(f"the runtime model of {topology.name!r} allows "
                                f"{', '.join(p.value for p in model.protocols)} only (its runs' NCCL_PROTO: "
                                "runtime.protocols)", where="--protocol")
    host = _overlapped_host(host_overlap)
    per_file, inputs, warnings = read_timed_files(files, topology, collective=collective, rows_kept=rows_kept,
                                                  select=_selection(select), ranks=ranks)
    for spec, rows in per_file:
        if not rows:
            raise ProfileInputError("no row to check (every row is marked wrong, or has fewer elements than ranks)",
                                    where=spec)
    total = sum(len(rows) for _, rows in per_file)
    checked: list[tuple[str, list[tuple[TimedRow, FidelityRow]]]] = []
    hints: list[str] = []
    done = 0
    with progress_line(progress_enabled(as_json)) as say:
        for spec, rows in per_file:
            out: list[tuple[TimedRow, FidelityRow]] = []
            table = host is not None and is_timing_table(_file_of(spec))
            single = 0 if host is None else _single_gpu_rows(rows, table=table)
            if single:
                warnings.append(f"--host-overlap: {single} row(s) of {spec} are of runs that do not say they launched "
                                "several GPUs from one thread (nccl-tests -g N): the host cost is not applied to them")
            for row in rows:
                done += 1
                say(f"predicting {Path(spec).name}: row {done}/{total} ({format_bytes(row.size_bytes)})")
                published = measured_busbw(row.kind, topology.num_gpus, row.size_bytes, row.time_us)
                in_place = (None if row.in_place_us is None
                            else measured_busbw(row.kind, topology.num_gpus, row.size_bytes, row.in_place_us))
                out.append((row, predict_row(topology, model, row.kind, row.size_bytes, published,
                                             algorithms=row.algorithms or algorithms or None,
                                             protocols=allowed, in_place_busbw=in_place,
                                             host=host if table or row.gpus_per_thread > 1 else None)))
            if all(f.predicted_busbw is None for _, f in out):
                named = out[0][0].algorithms or algorithms
                ran = ", ".join(sorted({r.kind.value for r, _ in out}))
                kept = [p.value for p in (allowed or PROTOCOLS) if model.protocols is None or p in model.protocols]
                under = "" if len(kept) == len(PROTOCOLS) else f" with {', '.join(kept)} (the protocols allowed)"
                who = f"{', '.join(named)} cannot" if named else "no NCCL algorithm can"
                raise ProfileInputError(f"nothing could be predicted for its rows: {who} run {ran} on "
                                        f"{topology.name!r}{under}", where=spec)
            unpredicted = [f for _, f in out if f.predicted_busbw is None]
            if unpredicted:
                warnings.append(f"{spec}: {len(unpredicted)} row(s) have no prediction (no allowed algorithm runs "
                                "them on this topology); they count as missed")
            if not algorithms:
                hints += _other_algorithm_hints(spec, out, topology, model, say, protocols=allowed,
                                                host=host, table=table)
            checked.append((spec, out))
    if host is None:
        hints += _harness_hints(checked)
    every = [f for _, out in checked for _, f in out]
    met = sum(f.met for f in every)
    errors = [f.error for f in every if f.error is not None]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else None
    if plot_path is not None:
        from taccl_py.plots import save_figure
        from taccl_py.plots.fidelity import fidelity_figure

        panels = [(Path(spec).name, [f for _, f in out]) for spec, out in checked]
        save_figure(fidelity_figure(panels, measured="measured"), plot_path)
    summary = (f"{met} of {len(every)} rows within target ({LARGE_TARGET:.0%} from 1 MB, {SMALL_TARGET:.0%} below)"
               + ("" if rms is None else f"; rms busbw error {rms:.1%}"))
    notes = [note for spec, out in checked for note in _in_place_notes(spec, out)]
    if as_json:
        emit_json({"command": "profile check", "topology": topology.name, "model": model.name,
                   "inputs": inputs, "warnings": warnings, "hints": hints, "notes": notes, "rows_within_target": met,
                   "rows_checked": len(every),
                   "rms_busbw_error": rms, "plot": plot_path,
                   "files": [{"file": spec, "rows": [_check_json(row, f) for row, f in out]} for spec, out in checked]})
    else:
        _warn(warnings)
        for line in inputs:
            out_console.print(f"read {line}", markup=False)
        for spec, out in checked:
            kinds = sorted({row.kind.value for row, _ in out})
            several = len(kinds) > 1  # a log of several binaries, or a table of several collectives
            out_console.print(make_table(
                f"{spec} ({', '.join(kinds)}): measured against predicted on {topology.name!r} ({model.name})",
                ("collective", *_CHECK_COLUMNS) if several else _CHECK_COLUMNS,
                [[*([row.kind.value] if several else []), format_bytes(row.size_bytes), float(row.time_us),
                  "-" if f.predicted_us is None else float(f.predicted_us), float(f.published_busbw),
                  "-" if f.predicted_busbw is None else float(f.predicted_busbw),
                  "-" if f.error is None else f"{f.error:+.1%}", f"{f.target:.0%} " + ("met" if f.met else "MISSED"),
                  f.algorithm or "-", f.proto or "-"] for row, f in out]))
        out_console.print(summary, markup=False)
        for note in notes:
            out_console.print(f"note: {note}", markup=False)
        for hint in hints:
            out_console.print(f"hint: {hint}", markup=False)
        if plot_path is not None:
            out_console.print(f"wrote {plot_path}", markup=False)
    if strict and met < len(every):
        raise SystemExit(1)


def _overlapped_host(text: str | None) -> OverlappedHost | None:
    """``--host-overlap US[,US]`` of profile check, or else ``taccl --host-overlap``: the host's cost per collective
    and per channel (None when neither is given)."""
    given = host_overlap_requested()
    if text is None:
        return given
    if given is not None:
        raise ProfileInputError("give the host once: taccl --host-overlap or profile check --host-overlap",
                                where="--host-overlap")
    if launch_offset_requested():
        raise ProfileInputError("give the -g N host's cost one way: added (taccl --launch-offset) or overlapping "
                                "the GPUs' work (--host-overlap), not both", where="--host-overlap")
    return parse_host_overlap(text)


def _harness_hints(checked: list[tuple[str, list[tuple[TimedRow, FidelityRow]]]]) -> list[str]:
    """For logs whose runs launched several GPUs from one thread (nccl-tests ``-g N``): the launch offset that fits
    their rows by least squares on relative time residuals (from the offset given), when it puts more of the rows
    checked within target. Such a host adds a cost per collective the model leaves out; ``taccl --launch-offset``
    adds it to every file checked, so the count is over them all, and an offset shifts every predicted time alike
    (no row is simulated again)."""
    from taccl_py.fidelity import target_for
    from taccl_py.profiler.runtime_fit import least_squares_offset

    every = [(spec, row, float(f.predicted_us), target_for(row.size_bytes)) for spec, out in checked
             for row, f in out if f.predicted_us is not None]
    launched = [(row.time_us, p) for _, row, p, _ in every if row.gpus_per_thread > 1]
    if not launched:
        return []
    given = launch_offset_requested()
    shift = least_squares_offset([p for _, p in launched], [m for m, _ in launched], lower=-given)

    def within(delta: float) -> int:
        return sum(abs(row.time_us / (p + delta) - 1.0) <= t for _, row, p, t in every)

    now, then = within(0.0), within(shift)
    if then <= now:
        return []
    files = sorted({spec for spec, row, _, _ in every if row.gpus_per_thread > 1})
    gpus = sorted({row.gpus_per_thread for _, row, _, _ in every if row.gpus_per_thread > 1})
    others = sorted({spec for spec, row, _, _ in every if row.gpus_per_thread == 1})
    return [f"{', '.join(files)}: one thread launched {' or '.join(map(str, gpus))} GPUs (nccl-tests -g), whose host "
            "adds a cost per collective the model leaves out: with taccl --launch-offset "
            f"{given + shift:.4g} (least squares over those rows) {then} of the {len(every)} rows checked are within "
            f"target ({now} now)" + (f"; it shifts {', '.join(others)} too: check those without it" if others else "")]


def _other_algorithm_hints(spec: str, out: list[tuple[TimedRow, FidelityRow]], topology: Topology,
                           model: Any, say: Callable[[str], None], *,
                           protocols: tuple[Protocol, ...] | None = None,
                           host: OverlappedHost | None = None, table: bool = False) -> list[str]:
    """Where the model's choice misses rows that another of NCCL's algorithms would meet: NCCL's own tuning may
    have run that one there (it does not always run the model's fastest), which ``FILE@LO:HI#ALGO`` can say.
    Rows whose file names its algorithms are left alone; a hint needs two missed rows or more, most of them met."""
    from taccl_py.fidelity import predict_row
    from taccl_py.predict import nccl_algorithms

    missed = [(row, f) for row, f in out if not f.met and f.predicted_busbw is not None and not row.algorithms]
    hints: list[str] = []
    if len(missed) < 2:
        return hints
    for kind in sorted({row.kind for row, _ in missed}, key=lambda k: k.value):
        rows = [(row, f) for row, f in missed if row.kind is kind]
        for name in nccl_algorithms(topology, kind):
            if all(f.algorithm == name for _, f in rows):
                continue
            say(f"trying {name} on the missed rows of {Path(_file_of(spec)).name}")
            met = [row for row, f in rows if f.algorithm != name and predict_row(
                topology, model, kind, row.size_bytes, f.published_busbw, algorithms=(name,), protocols=protocols,
                host=host if table or row.gpus_per_thread > 1 else None).met]
            if len(met) >= 2 and 2 * len(met) > len(rows):
                lo, hi = format_bytes(min(r.size_bytes for r in met)), format_bytes(max(r.size_bytes for r in met))
                hints.append(f"{spec}: {len(met)} of the {len(rows)} missed {kind.value} rows ({lo}..{hi}) are within "
                             f"target as {name}, not the model's choice: if the run used {name} there, say so with "
                             f"{_file_of(spec)}@{lo}:{hi}#{name}")
    return hints


def _disturbed_fit_rows(rows: list[TimedRow]) -> list[str]:
    """A warning per file for the rows to fit whose out-of-place and in-place times are too far apart for any
    prediction to be within the fidelity target of both: the fit would follow the run's disturbance there."""
    from taccl_py.fidelity import target_for, too_far_apart

    by_file: dict[str, list[str]] = {}
    for r in rows:
        if r.in_place_us is not None and too_far_apart(r.time_us, r.in_place_us, target_for(r.size_bytes)):
            path, _, line = r.origin.rpartition(": ")
            by_file.setdefault(path or r.origin, []).append(f"{line} ({_two_times(r)})")
    return [f"{path}: {', '.join(lines)}: the run's two times are too far apart for any prediction to be within the "
            "target of both; the fit follows the out-of-place one: leave those sizes out (FILE@LO:HI, the file given "
            "once per range to keep) or rerun them"
            for path, lines in by_file.items()]


def _two_times(row: TimedRow, named: bool = False) -> str:
    return (f"{row.kind.value + ' ' if named else ''}{format_bytes(row.size_bytes)}: {row.time_us:g} us out-of-place, "
            f"{row.in_place_us:g} us in place")


def _in_place_notes(spec: str, out: list[tuple[TimedRow, FidelityRow]]) -> list[str]:
    """What a log's in-place times say about its rows: sizes whose two times are too far apart for any prediction
    to be within the target of both (the log disagrees with itself: a warm-up, a disturbed iteration), each with
    whether the prediction meets the in-place time; and missed sizes whose in-place time, off the out-of-place
    one's band, the prediction meets (the run's spread is part of the miss)."""
    named = len({row.kind for row, _ in out}) > 1  # a log of several binaries: say which run a size is from

    def meets(f: FidelityRow) -> str:
        error = f.in_place_error
        return ("predicted within target of the in-place time" if error is not None and abs(error) <= f.target
                else "missed against both")

    apart = [(row, f) for row, f in out if f.run_disagrees]
    near = [row for row, f in out if f.met_in_place_only]
    notes = []
    if apart:
        notes.append(f"{spec}: at {'; '.join(f'{_two_times(r, named)} ({meets(f)})' for r, f in apart)}, the log's "
                     "two times are too far apart for any prediction to be within the target of both: the log "
                     "disagrees with itself there (the out-of-place time is the one checked); rerun those sizes (more "
                     "iterations, -n) to tell the model's error from the run's")
    if near:
        notes.append(f"{spec}: at {'; '.join(_two_times(r, named) for r in near)}, the prediction misses the "
                     "out-of-place time but is within the target of the in-place one, which lies off the out-of-place "
                     "one's band: the run's own spread is part of the miss")
    return notes


def _single_gpu_rows(rows: list[TimedRow], *, table: bool) -> int:
    """How many of a file's rows are of log runs that do not say they launched several GPUs from one thread (a
    published ``table`` does not say how its runs were launched: none of its rows counts)."""
    return 0 if table else sum(row.gpus_per_thread == 1 for row in rows)


def _file_of(spec: str) -> str:
    """The file of a ``FILE[@LO:HI][#ALGO]`` argument, as ``profile fit --runtime`` reads it."""
    from taccl_py.profiler.runtime_fit import split_algorithm_qualifier, split_size_qualifier

    return split_size_qualifier(split_algorithm_qualifier(spec)[0])[0]


def _check_json(row: TimedRow, checked: FidelityRow) -> dict[str, Any]:
    """One checked row as ``profile check --json`` gives it (the measurement named as measured, not published)."""
    data = checked.as_dict()
    data["measured_busbw_GBps"] = data.pop("published_busbw_GBps")
    data["measured_in_place_busbw_GBps"] = data.pop("in_place_busbw_GBps")
    return {"collective": row.kind.value, "measured_us": row.time_us, "measured_in_place_us": row.in_place_us,
            "origin": row.origin, **data}


@profile.command("run")
@click.option("--nproc", type=click.IntRange(2, MAX_GPUS), help="Ranks to spawn locally (default: the topology's "
              f"GPUs, else 2; at most {MAX_LOCAL_RANKS}). Ignored under torchrun, which sets the world size.")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), help="Default: nccl with GPUs, gloo without.")
@click.option("--sizes", "sizes_spec", default="1KB:256MB", show_default=True, metavar="LO:HI",
              help="Powers of two from LO to HI (K/M/G binary).")
@click.option("--repeats", type=click.IntRange(1, MAX_PROFILE_REPEATS), default=20, show_default=True)
@click.option("--warmup", type=click.IntRange(0, MAX_PROFILE_REPEATS), default=3, show_default=True)
@click.option("--pairs", "pairs_mode", type=click.Choice(["all", "per-class"]), default="all", show_default=True,
              help="Every pair of ranks, or one pair per link class of --topology.")
@click.option("--topology", "-t", "topology_spec", metavar="NAME|FILE",
              help="Topology whose link classes to measure and re-calibrate.")
@click.option("-o", "--output", required=True, metavar="CSV", help="Measurements CSV to write.")
@click.option("--fit", "fit_output", metavar="FILE", help="Also fit the measurements and write this topology.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1, 86_400), default=600.0, show_default=True,
              help="Seconds a rank waits for its peers (at most a day).")
@json_option
def run_cmd(nproc: int | None, backend: str | None, sizes_spec: str, repeats: int, warmup: int, pairs_mode: str,
            topology_spec: str | None, output: str, fit_output: str | None, timeout_s: float, as_json: bool) -> None:
    """Measure every pair of ranks with torch.distributed ping-pongs and write a CSV.

    Launch with ``torchrun --nproc-per-node N -m taccl_py.profile ...`` on a
    cluster, or let this command spawn --nproc local processes.
    """
    from taccl_py.profiler import live

    sizes = tuple(parse_size_range(sizes_spec, where="--sizes"))
    if len(sizes) < 2:
        raise ProfileInputError("give a range LO:HI with at least two sizes (alpha and bandwidth need both)",
                                where="--sizes")
    for path, option in ((output, "-o"), (fit_output, "--fit")):
        if path is not None:
            check_output_file(path, option)
    topology = _load_base(topology_spec, "--topology") if topology_spec else None
    under_torchrun = live.launched_by_torchrun()
    world = int(os.environ["WORLD_SIZE"]) if under_torchrun else (
        nproc or (topology.num_gpus if topology is not None else 2))
    if topology is not None and world > topology.num_gpus:
        raise ProfileInputError(f"{world} ranks but the topology has {topology.num_gpus} GPUs", where="--nproc")
    if not under_torchrun:
        live.check_local_ranks(world)
    if pairs_mode == "per-class":
        if topology is None:
            raise ProfileInputError("--pairs per-class needs --topology", where="--pairs")
        pairs = _one_pair_per_class(topology, world)
    else:
        pairs = live.all_pairs(world)
    config = live.PingPongConfig(sizes=sizes, pairs=pairs, repeats=repeats, warmup=warmup,
                                 backend=live.resolve_backend(backend), timeout_s=timeout_s)
    if under_torchrun:
        _, rank = live.run_torchrun(config, output)
        if rank != 0:
            return
    else:
        live.run_local(config, world, output)
    outcome = None
    if fit_output is not None:
        request = FitRequest(files=(output,), base=topology, base_where=topology_spec or "",
                             group="class" if topology is not None else "pair")
        outcome = fit_measurements(request)
        save_topology(outcome.topology, fit_output)
    if as_json:
        emit_json({"command": "profile run", "measurements": output, "backend": config.backend, "ranks": world,
                   "pairs": [list(p) for p in pairs], "sizes": list(sizes), "repeats": repeats,
                   "fit": _fit_json(outcome, fit_output) if outcome is not None else None})
        return
    out_console.print(f"wrote {output}: {len(pairs)} pairs x {len(sizes)} sizes "
                      f"({format_bytes(sizes[0])}..{format_bytes(sizes[-1])}) x {repeats} repeats, "
                      f"backend {config.backend}, {world} ranks", markup=False)
    if outcome is not None:
        _report_fit(outcome, fit_output, as_json=False)


def _one_pair_per_class(topology: Topology, world: int) -> tuple[tuple[int, int], ...]:
    """The lowest (src, dst) pair of every link class whose ranks both take part (< ``world``)."""
    chosen = set()
    for members in link_classes(topology).values():
        usable = [pair for pair in members if max(pair) < world]
        if usable:
            chosen.add(min(usable))
    return tuple(sorted(chosen))


def _is_topology_file(path: str) -> bool:
    if not path.lower().endswith(".json"):
        return False
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return True  # let load_topology report it
    return isinstance(data, dict) and "links" in data


@profile.command("show")
@click.argument("file", metavar="FILE")
@click.option("--plot", "plot_path", metavar="PNG", help="Also plot time versus size with the fitted lines.")
@click.option("--collective", metavar="NAME", help="nccl-tests binary when a log does not say.")
@click.option("--ranks", type=click.IntRange(1, MAX_GPUS), help="Ranks of an nccl-tests run without Rank lines.")
@json_option
def show_cmd(file: str, plot_path: str | None, collective: str | None, ranks: int | None, as_json: bool) -> None:
    """The fitted table of a fitted topology (its links' provenance), a CSV or an nccl-tests log."""
    if plot_path is not None:
        check_output_file(plot_path, "--plot")
    fits: tuple[LinkFit, ...] = ()
    warnings: tuple[str, ...] = ()
    if _is_topology_file(file):
        topology = load_topology(file)
        rows = rows_from_topology(topology, where=file)
        kind = "topology"
    else:
        outcome = fit_measurements(FitRequest(files=(file,), collective=collective, ranks=ranks))
        fits, warnings = outcome.fits, outcome.warnings
        rows = rows_from_fits(fits, outcome.topology)
        kind = "measurements"
    if plot_path is not None:
        write_plot(plot_path, title=f"{Path(file).name}: time vs size (alpha-beta fit)", fits=fits,
                   rows=rows if not fits else ())
    if as_json:
        emit_json({"command": "profile show", "file": file, "kind": kind, "rows": [r.as_dict() for r in rows],
                   "fits": [fit_to_json(f) for f in fits], "plot": plot_path, "warnings": list(warnings)})
        return
    _warn(warnings)
    out_console.print(_fit_table(f"{file}: fitted links", rows))
    if plot_path is not None:
        out_console.print(f"wrote {plot_path}", markup=False)
