"""``taccl simulate``, ``taccl baseline`` and ``taccl bound``: time algorithms against the physical limit.

Every command takes one size or a power-of-two sweep (``--size 1KB:1GB``) and
prints an nccl-tests-like table, or with ``--json`` exactly one JSON object.
The keys are a contract other tools read: per size ``correct``, ``time_us``,
``algbw_GBps``, ``busbw_GBps``, ``bound_us``, ``efficiency`` (= bound / time).
A sweep puts one object per size under ``rows``. An incorrect result prints
its error and exits with status 1.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import click

from taccl_py.baselines.ring_compact import large_ring_arrays
from taccl_py.bounds import Bound, crossing_bound, lower_bound, pair_bound
from taccl_py.cli.common import (
    check_output_file,
    check_step_overhead,
    check_xml_root,
    collective_from,
    emit_json,
    err_console,
    host_overlap_requested,
    json_option,
    load_topology_arg,
    make_table,
    model_note,
    out_console,
    progress_enabled,
    progress_line,
    protocols_option,
    runtime_model_for,
    size_option,
    sizes_from,
    switch_model_keys,
    switch_model_option,
    topology_option,
)
from taccl_py.cli.plot_hooks import (
    check_picture_path,
    plot_option,
    timeline_options,
    write_algbw_plot,
    write_timeline,
)
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.compact import CompactSchedule
from taccl_py.endpoint import EndpointMode, memory_traffic
from taccl_py.errors import Infeasible, InputError
from taccl_py.harness import OverlappedHost
from taccl_py.limits import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
from taccl_py.runtime import PROTOCOLS, Protocol
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimOptions, SimResult, simulate
from taccl_py.symmetry import SYMMETRIC_MIN_GPUS, SymmetricSchedule
from taccl_py.topology import MAX_COMM_CHANNELS, Endpoint, Topology
from taccl_py.units import algbw_gbps, format_bytes

if TYPE_CHECKING:
    from taccl_py.baselines.selectable import Placement
    from taccl_py.predict import Prediction

__all__ = ["COMMANDS", "baseline_command", "bound_command", "simulate_command"]


# ------------------------------------------------------------------- helpers
def _options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--step-overhead", "step_overhead_us", type=float, default=0.0, show_default=True,
                        metavar="US", help="Software latency per transfer, us (NCCL's per-step cost).")(func)
    func = click.option("--root", type=int, default=0, show_default=True,
                        help="Root rank of broadcast / reduce.")(func)
    return func


def endpoint_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--endpoint``, ``--memory-bandwidth``, ``--comm-channels``, ``--channel-bandwidth`` (docs/simulator.md)."""
    func = click.option("--channel-bandwidth", type=float, default=None, metavar="GBPS",
                        help="GB/s one communication channel moves (with --comm-channels).")(func)
    func = click.option("--comm-channels", type=click.IntRange(1, MAX_COMM_CHANNELS), default=None, metavar="N",
                        help="Channels (SMs) a GPU-driven runtime gives to communication, on every GPU.")(func)
    func = click.option("--memory-bandwidth", type=float, default=None, metavar="GBPS",
                        help="Every GPU's memory bandwidth, GB/s (overrides the topology file's endpoints).")(func)
    func = click.option("--endpoint", "endpoint_mode", type=click.Choice([m.value for m in EndpointMode]),
                        default=EndpointMode.GPU.value, show_default=True,
                        help="Who drives the collective: gpu (SMs, every step through memory) or engine "
                             "(ACE offload engine: each chunk touches memory once).")(func)
    return func


def apply_endpoint_options(topology: Topology, memory_bandwidth: float | None, comm_channels: int | None,
                           channel_bandwidth: float | None) -> Topology:
    """The topology with the command line's endpoint figures on every GPU (unchanged without them)."""
    if memory_bandwidth is None and comm_channels is None and channel_bandwidth is None:
        return topology
    for value, option in ((memory_bandwidth, "--memory-bandwidth"), (channel_bandwidth, "--channel-bandwidth")):
        if value is not None and not MIN_BANDWIDTH_GBPS <= value <= MAX_BANDWIDTH_GBPS:
            raise InputError(f"is {value:g}, not a bandwidth in {MIN_BANDWIDTH_GBPS:g}..{MAX_BANDWIDTH_GBPS:g} GB/s",
                             where=option)
    if (comm_channels is None) != (channel_bandwidth is None):
        raise InputError("goes with --channel-bandwidth (give both or neither)",
                         where="--comm-channels")
    return topology.with_endpoints(Endpoint(memory_bandwidth, comm_channels, channel_bandwidth))


def _memory_keys(schedule: Schedule, size: int) -> dict[str, Any]:
    """Memory bytes per network byte in both endpoint modes (the report's ACE comparison)."""
    return {"memory_bytes_per_network_byte": {m.value: memory_traffic(schedule, size, m).per_network_byte
                                              for m in EndpointMode}}


def _check_overhead(step_overhead_us: float) -> None:
    check_step_overhead(step_overhead_us)


def _row(size: int, sim: SimResult, bound: Bound, overlapped_us: float | None = None) -> dict[str, Any]:
    """The per-size keys of the JSON contract. ``overlapped_us``: the time with a ``-g N`` host overlapping the
    GPUs' work (``taccl --host-overlap``), which the row then gives, the GPUs' own as ``gpu_time_us``."""
    time_us = sim.time_us if overlapped_us is None else overlapped_us
    algbw = algbw_gbps(size, time_us) if time_us else None
    row: dict[str, Any] = {"size_bytes": size, "correct": sim.correct, "time_us": time_us, "algbw_GBps": algbw,
                           "busbw_GBps": None if algbw is None else algbw * sim.collective.busbw_factor,
                           "bound_us": bound.bound_us, "efficiency": bound.efficiency(time_us)}
    if overlapped_us is not None:
        row["gpu_time_us"] = sim.time_us
    if not sim.correct:
        row["error"] = sim.error
    return row


def _with_host(host: OverlappedHost, pred: Prediction, algorithm: str, kind: CollectiveKind, size: int,
               topology: Topology, model: Any) -> tuple[int, float | None]:
    """A baseline's prediction under a ``-g N`` host overlapping the GPUs' work: the channels the host is charged on
    (:func:`taccl_py.predict.host_channels`, the schedule's own for a baseline NCCL does not run) and the time."""
    from taccl_py.predict import host_channels

    own = pred.schedule.notes.get("channels") if pred.schedule is not None else None
    charged = host_channels(algorithm, kind, pred.protocol, size, topology, model, own)
    return charged, None if pred.sim.time_us is None else host.time_us(pred.sim.time_us, charged)


def _fastest(entry: dict[str, Any]) -> tuple[float, float]:
    """A table entry's rank among the baselines: its time, then (times a ``-g N`` host binds tie) the GPUs'."""
    return entry["time_us"], entry.get("gpu_time_us", 0.0)


def _host_keys(host: OverlappedHost | None) -> dict[str, Any]:
    """The JSON keys of ``taccl --host-overlap`` (none without it)."""
    return {} if host is None else {"host_overlap": {"host_us": host.host_us, "per_channel_us": host.per_channel_us}}


def _switch_note(topology: Topology) -> str:
    """`` (store-and-forward switches)`` for a table title when the switches are not cut-through."""
    return f" ({topology.switch_model.value} switches)" if topology.store_and_forward else ""


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _step_text(label: str, k: int, sizes: list[int]) -> str:
    """``simulating ring: size 3/12 (4MB)``: what the live line says."""
    return f"{label}: size {k + 1}/{len(sizes)} ({format_bytes(sizes[k])})" if len(sizes) > 1 else \
        f"{label} ({format_bytes(sizes[k])})"


def _is_json(algorithm: str) -> bool:
    return algorithm.lower().endswith(".json")


def _is_xml(algorithm: str) -> bool:
    if os.path.isdir(algorithm):
        raise InputError(f"{algorithm!r} is a directory; give an MSCCL XML file, a schedule JSON file or a baseline "
                         "name (ring, tree, direct, rd, ...)", where="--algorithm")
    return not _is_json(algorithm) and (algorithm.lower().endswith(".xml") or os.sep in algorithm
                                        or os.path.isfile(algorithm))


def _collective_for(kind: CollectiveKind, topology: Topology) -> Collective:
    return Collective(kind, topology.num_gpus)


def _fail_if_incorrect(rows: list[dict[str, Any]]) -> None:
    bad = [r for r in rows if not r["correct"]]
    if bad:
        raise click.exceptions.Exit(1)


def _report_errors(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        return
    for r in rows:
        if not r["correct"]:
            err_console.print(f"taccl: error: {format_bytes(r['size_bytes'])}: {r.get('error')}", markup=False)


# ------------------------------------------------------------------- simulate
def _simulate_file(path: str, topology: Topology, kind: CollectiveKind | None, sizes: list[int],
                   options: SimOptions, show: bool, schedules: list[Schedule]
                   ) -> tuple[CollectiveKind, list[tuple[int, SimResult]]]:
    """An MSCCL XML program, or a schedule in taccl_py's JSON form (``synthesize --schedule-out``), at every size.

    A schedule file's schedule is appended to ``schedules``.
    """
    time_at: Callable[[int], SimResult]
    if _is_json(path):
        from taccl_py.fast_sim import simulate_large
        from taccl_py.schedule import load_schedule

        schedule = load_schedule(path, topology)
        file_kind, what = schedule.collective.kind, "schedule"
        schedules.append(schedule)
        time_at = partial(simulate_large, topology, schedule, options=options)
    else:
        from taccl_py.msccl import simulate_program
        from taccl_py.msccl.ir import Program
        from taccl_py.msccl.xml_scan import read_program

        if topology.has_endpoint_limits:
            raise InputError("GPU memory and channel limits are modelled for baselines and schedule files "
                             "(synthesize --schedule-out), not yet for MSCCL XML programs", where=path)
        program = read_program(path)  # a large file as arrays, for the compiled checks and timing
        if program.kind is None:
            raise InputError(f"coll={program.coll!r} is not a collective taccl can time", where=path)
        file_kind, what = program.kind, "program"
        if isinstance(program, Program):
            time_at = partial(simulate_program, program, topology, options=options)
        else:
            from taccl_py.msccl.fast_timing import simulate_arrays

            time_at = partial(simulate_arrays, program, topology, options=options)
    if kind is not None and kind is not file_kind:
        raise InputError(f"the {what} is for {file_kind.value}, not {kind.value}", where="--collective")
    results = []
    with progress_line(show) as say:
        for k, size in enumerate(sizes):
            say(_step_text(f"simulating {os.path.basename(path)}", k, sizes))
            results.append((size, time_at(size)))
    return file_kind, results


@click.command("simulate")
@topology_option
@click.option("--collective", "-c", "collective_name", default=None, metavar="NAME[+NAME...]",
              help="allgather, reducescatter, allreduce, alltoall, broadcast or reduce (read from a file); several "
                   "joined by '+' run at once (allgather+reducescatter).")
@size_option
@click.option("--algorithm", "-a", default=None, metavar="BASELINE|FILE.xml|FILE.json",
              help="An NCCL-style baseline (ring, tree, direct, rd, oneshot, hier, hier-lb; on multicast / reduce "
                   "switches multicast, nvls, sharp, nvls-tree), an MSCCL XML file or a schedule JSON file "
                   "(synthesize --schedule-out); "
                   "with several collectives, one per collective joined by '+' (best: the fastest baseline alone, "
                   "the default).")
@click.option("--channels", type=click.IntRange(1, 64), default=None, help="Rings / trees / parallel copies.")
@_options
@switch_model_option
@endpoint_options
@plot_option
@timeline_options
@json_option
def simulate_command(topology_spec: str, collective_name: str | None, size_spec: str, algorithm: str | None,
                     channels: int | None, root: int, step_overhead_us: float, switch_model: str | None,
                     endpoint_mode: str, memory_bandwidth: float | None, comm_channels: int | None,
                     channel_bandwidth: float | None, plot_path: str | None, timeline_path: str | None,
                     timeline_rows: str, as_json: bool) -> None:
    """Simulate one algorithm (or several collectives at once): correct? how long? how close to the bound."""
    from taccl_py.baselines import baseline
    from taccl_py.cli.concurrent_cmd import is_concurrent, report_concurrent, simulate_concurrent_rows

    _check_overhead(step_overhead_us)
    topology = apply_endpoint_options(load_topology_arg(topology_spec, switch_model), memory_bandwidth, comm_channels,
                                      channel_bandwidth)
    runtime_model_for(topology, host_overlap=not is_concurrent(collective_name))  # refused before any work: a
    # store-and-forward topology with a calibrated runtime model, a -g N host for collectives run at once
    sizes = sizes_from(size_spec)
    check_picture_path(plot_path, "--plot")
    check_picture_path(timeline_path, "--timeline")
    if timeline_path and len(sizes) > 1:
        raise InputError("draws one size at a time", where="--timeline")
    mode = EndpointMode(endpoint_mode)
    options = SimOptions(step_overhead_us=step_overhead_us, endpoint=mode)
    if is_concurrent(collective_name):
        assert collective_name is not None
        for path, where in ((plot_path, "--plot"), (timeline_path, "--timeline")):
            if path:
                raise InputError("draws one collective at a time", where=where)
        rows = simulate_concurrent_rows(topology, collective_name, algorithm, sizes, channels, root, options,
                                        progress_enabled(as_json))
        report_concurrent(topology, collective_name, rows, as_json)
        if not all(r["correct"] for r in rows):
            raise click.exceptions.Exit(1)
        return
    if algorithm is None:
        raise InputError("is required (a baseline name, an XML or a schedule JSON file)", where="--algorithm")
    kind = collective_from(collective_name) if collective_name else None
    schedules: list[Schedule] = []  # per size (or the one of a schedule file), for the memory report
    ran: list[Schedule] = []  # what a calibrated baseline ran at the first size (NCCL's ring in pieces)
    model = runtime_model_for(topology, host_overlap=True)
    host = host_overlap_requested()
    if host is not None and timeline_path:
        raise InputError("draws the GPUs' work, which a -g N host's time is not part of: not with taccl "
                         "--host-overlap", where="--timeline")
    if model is not None and (topology.has_endpoint_limits or mode is not EndpointMode.GPU):
        raise InputError("GPU memory / channel limits are simulated on the raw-link model only; add taccl --ideal",
                         where="--endpoint")
    protos: list[str] = []
    overlapped: list[float | None] = []
    if model is not None:
        if channels is not None and (_is_json(algorithm) or _is_xml(algorithm)):
            raise InputError("applies to baselines only, not to a file", where="--channels")
        kind, results, protos, overlapped = _simulate_calibrated(algorithm, topology, kind, sizes, channels, root,
                                                                 step_overhead_us, model, progress_enabled(as_json),
                                                                 ran if timeline_path else None, host)
    elif _is_json(algorithm) or _is_xml(algorithm):
        if channels is not None:
            raise InputError("applies to baselines only, not to a file", where="--channels")
        kind, results = _simulate_file(algorithm, topology, kind, sizes, options, progress_enabled(as_json),
                                       schedules)
    else:
        if kind is None:
            raise InputError("is required unless --algorithm is an XML or JSON file", where="--collective")
        results = []
        with progress_line(progress_enabled(as_json)) as say:
            for k, size in enumerate(sizes):
                say(_step_text(f"simulating {algorithm}", k, sizes))
                if topology.has_endpoint_limits or mode is not EndpointMode.GPU:  # the memory report needs the schedule
                    schedule = baseline(topology, kind, algorithm, channels=channels, root=root, size_bytes=size,
                                        step_overhead_us=step_overhead_us)
                    schedules.append(schedule)
                    results.append((size, simulate(topology, schedule, size, options)))
                else:
                    results.append((size, _simulate_baseline(topology, kind, algorithm, channels, root, size, options,
                                                             representatives=timeline_path is None)))
    rows = [_row(size, sim, lower_bound(topology, kind, size, root=root, step_overhead_us=step_overhead_us,
                                        endpoint=mode), overlapped[k] if overlapped else None)
            for k, (size, sim) in enumerate(results)]
    for row, proto in zip(rows, protos, strict=False):
        row["proto"] = proto
    endpoint_report = topology.has_endpoint_limits or mode is not EndpointMode.GPU
    if endpoint_report and schedules:
        for k, row in enumerate(rows):
            row["endpoint"] = mode.value
            row.update(_memory_keys(schedules[min(k, len(schedules) - 1)], row["size_bytes"]))
    head = {"topology": topology.name, "collective": kind.value, "algorithm": algorithm,
            "model": "ideal" if model is None else model.name, **_host_keys(host), **switch_model_keys(topology)}
    if as_json:
        emit_json({**head, **rows[0]} if len(rows) == 1 else {**head, "correct": all(r["correct"] for r in rows),
                                                                 "rows": rows})
    else:
        title = f"{algorithm} {kind.value} on {topology.name}{_switch_note(topology)}"
        columns = ["size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "bound (us)", "efficiency"]
        cells = [[r["size_bytes"], _num(r["time_us"]), _num(r["algbw_GBps"]), _num(r["busbw_GBps"]),
                  _num(r["bound_us"]), _num(r["efficiency"], 3)] for r in rows]
        if protos:
            columns.append("proto")
            for c, r in zip(cells, rows, strict=True):
                c.append(r.get("proto", "-"))
        out_console.print(make_table(title, columns, cells))
        out_console.print(model_note(model, host), markup=False)
        if endpoint_report and schedules:
            ratio = rows[0]["memory_bytes_per_network_byte"]
            out_console.print(f"endpoint {mode.value}; memory bytes per network byte: gpu-driven {ratio['gpu']:.3f}, "
                              f"engine {ratio['engine']:.3f}", markup=False)
    if plot_path:
        write_algbw_plot(plot_path, f"{algorithm} {kind.value} on {topology.name} ({topology.num_gpus} GPUs)",
                         sizes, {algorithm: [r["time_us"] for r in rows]}, [r["bound_us"] for r in rows])
    if timeline_path and rows[0]["correct"]:
        from taccl_py.msccl import load_program
        from taccl_py.schedule import load_schedule

        drawn = load_schedule(algorithm, topology) if _is_json(algorithm) else load_program(algorithm) if _is_xml(
            algorithm) else ran[0] if ran else baseline(topology, kind, algorithm, channels=channels, root=root,
                                                        size_bytes=sizes[0], step_overhead_us=step_overhead_us)
        write_timeline(timeline_path, topology, drawn, results[0][1], timeline_rows)
    _report_errors(rows, as_json)
    _fail_if_incorrect(rows)


def _simulate_calibrated(algorithm: str, topology: Topology, kind: CollectiveKind | None, sizes: list[int],
                         channels: int | None, root: int, step_overhead_us: float, model: Any, show: bool,
                         ran: list[Schedule] | None = None, host: OverlappedHost | None = None
                         ) -> tuple[CollectiveKind, list[tuple[int, SimResult]], list[str], list[float | None]]:
    """Every size under the runtime model: an XML file with its own ``proto``, anything else with the fastest.

    ``ran``, when given, receives the schedule a baseline ran at the first size, in the order of its result's
    per-transfer arrays (NCCL's ring in its pieces; a timeline draws it), simulated in full as the ideal path
    does for a timeline (no representatives: the critical path is drawn too). ``host``: a ``-g N`` host
    overlapping the GPUs' work; the last list gives each size's time with it (empty without one), over the
    channels :func:`taccl_py.predict.host_channels` gives a baseline, an XML file's ``nchannels``, a schedule
    file's channels."""
    from taccl_py.predict import predict_baseline, predict_program, predict_schedule

    results: list[tuple[int, SimResult]] = []
    protos: list[str] = []
    overlapped: list[float | None] = []
    if _is_json(algorithm) or _is_xml(algorithm):
        if _is_json(algorithm):
            from taccl_py.schedule import load_schedule

            schedule = load_schedule(algorithm, topology)
            file_kind, what = schedule.collective.kind, "schedule"
            file_channels = int(schedule.notes.get("channels") or 1)
            run = partial(predict_schedule, topology, schedule, model=model, step_overhead_us=step_overhead_us)
            _warn_nvls_steps(algorithm, schedule, topology, sizes)
        else:
            from taccl_py.msccl.xml_scan import read_program

            program = read_program(algorithm)  # a large file as arrays (predict_program times either)
            if program.kind is None:
                raise InputError(f"coll={program.coll!r} is not a collective taccl can time", where=algorithm)
            file_kind, what = program.kind, "program"
            file_channels = program.nchannels
            _warn_excluded_proto(algorithm, program.proto, model)
            run = partial(predict_program, program, topology, model=model)
        if kind is not None and kind is not file_kind:
            raise InputError(f"the {what} is for {file_kind.value}, not {kind.value}", where="--collective")
        kind = file_kind
        with progress_line(show) as say:
            for k, size in enumerate(sizes):
                say(_step_text(f"simulating {os.path.basename(algorithm)}", k, sizes))
                pred = run(size_bytes=size)
                results.append((size, pred.sim))
                protos.append(pred.protocol.value if what == "schedule" else program.proto)  # as the XML names it
                if host is not None:
                    overlapped.append(None if pred.sim.time_us is None
                                      else host.time_us(pred.sim.time_us, file_channels))
        return kind, results, protos, overlapped
    if kind is None:
        raise InputError("is required unless --algorithm is an XML or JSON file", where="--collective")
    with progress_line(show) as say:
        for k, size in enumerate(sizes):
            say(_step_text(f"simulating {algorithm}", k, sizes))
            pred = predict_baseline(topology, kind, algorithm, size, model, channels=channels, root=root,
                                    step_overhead_us=step_overhead_us, representatives=ran is None)
            results.append((size, pred.sim))
            protos.append(pred.protocol.value)
            if host is not None:
                overlapped.append(_with_host(host, pred, algorithm, kind, size, topology, model)[1])
            if ran is not None and k == 0:  # in full (no representatives): as arrays or as a schedule
                if isinstance(pred.schedule, CompactSchedule):
                    ran.append(pred.schedule.to_schedule())
                elif isinstance(pred.schedule, Schedule):
                    ran.append(pred.schedule)
    return kind, results, protos, overlapped


def _warn_excluded_proto(path: str, proto: str, model: Any) -> None:
    """Warn when an XML file names a protocol the runtime model's runs did not allow (its ``protocols``, their
    NCCL_PROTO): the file is timed with it as written, on figures no run of that protocol was fitted on."""
    if model.protocols is None or proto in {p.value for p in model.protocols}:
        return
    err_console.print(f"taccl: warning: {path}: proto={proto!r}, where the runtime model's runs allow "
                      f"{', '.join(p.value for p in model.protocols)} only (runtime.protocols): timed as written, "
                      f"with {proto} figures no run of it was fitted on", markup=False, highlight=False)


def _warn_nvls_steps(path: str, schedule: Schedule, topology: Topology, sizes: list[int]) -> None:
    """Warn when a schedule file of NCCL's NVLS (``baseline --schedule-out``) is timed at a size where NCCL would
    move each block in other chunk steps than the file's: the file is timed as written, not as NCCL runs NVLS."""
    from taccl_py.predict import nvls_chunk_steps
    from taccl_py.runtime import NVLS_ALGORITHMS

    name, pieces = schedule.notes.get("algorithm"), schedule.notes.get("pieces")
    if name not in NVLS_ALGORITHMS or not isinstance(pieces, int):
        return
    other = [(size, steps) for size in sizes
             if (steps := nvls_chunk_steps(topology, schedule.collective.kind, size)) != pieces]
    if other:
        size, steps = other[0]
        more = f" (and {len(other) - 1} more size(s))" if len(other) > 1 else ""
        err_console.print(f"taccl: warning: {path}: {name} in {pieces} chunk step(s) per block, where NCCL takes "
                          f"{steps} at {format_bytes(size)}{more}: timed as written; `taccl baseline -t "
                          f"{topology.name} -c {schedule.collective.kind.value} -a {name} -s {format_bytes(size)}` "
                          "times NCCL's own", markup=False, highlight=False)


def _by_representatives(topology: Topology, kind: CollectiveKind, algorithm: str, channels: int | None,
                        size: float, options: SimOptions) -> tuple[SimResult, SymmetricSchedule] | None:
    """A large symmetric ring or direct baseline simulated through its representatives (one time per
    representative); None when it has no such form."""
    if algorithm not in ("ring", "direct") or topology.num_gpus < SYMMETRIC_MIN_GPUS:
        return None
    from taccl_py.baselines.direct import symmetric_direct
    from taccl_py.predict import symmetric_ring_baseline
    from taccl_py.symmetry import simulate_symmetric

    sym = symmetric_ring_baseline(topology, kind, channels) if algorithm == "ring" else symmetric_direct(
        topology, kind, channels=channels or 1)  # its rows read the makespan: times per representative
    return None if sym is None else (simulate_symmetric(topology, sym, size, options, expand_times=False), sym)


def _simulate_baseline(topology: Topology, kind: CollectiveKind, algorithm: str, channels: int | None, root: int,
                       size: float, options: SimOptions, *, representatives: bool = True) -> SimResult:
    """Simulate a baseline; large symmetric rings and direct baselines through their representatives (the same
    times, exactly).

    ``representatives`` False: always the full schedule (a timeline draws its transfers in their order).
    """
    from taccl_py.baselines import baseline
    from taccl_py.fast_sim import simulate_compact, simulate_large

    fast = _by_representatives(topology, kind, algorithm, channels, size, options) if representatives else None
    if fast is not None:
        return fast[0]
    arrays = large_ring_arrays(topology, kind, algorithm, channels)
    if arrays is not None:
        return simulate_compact(topology, arrays, size, options)
    schedule = baseline(topology, kind, algorithm, channels=channels, root=root, size_bytes=size,
                        step_overhead_us=options.step_overhead_us)
    return simulate_large(topology, schedule, size, options)


# ------------------------------------------------------------------- baseline
def _baseline_rows(topology: Topology, kind: CollectiveKind, sizes: list[int], names: list[str],
                   channels: int | None, root: int, step_overhead_us: float, show: bool,
                   protocols: tuple[Protocol, ...] | None = None) -> list[dict[str, Any]]:
    from taccl_py.baselines import baseline
    from taccl_py.baselines.offload import OFFLOAD_ALGORITHMS
    from taccl_py.fast_sim import simulate_compact, simulate_large

    model = runtime_model_for(topology, host_overlap=True)
    host = host_overlap_requested()
    options = SimOptions(step_overhead_us=step_overhead_us)
    out = []
    with progress_line(show) as say:
        for k, size in enumerate(sizes):
            say(_step_text("bound", k, sizes))
            bound = lower_bound(topology, kind, size, root=root, step_overhead_us=step_overhead_us)
            entries = []
            for name in names:
                say(_step_text(f"simulating {name}", k, sizes))
                if model is not None:  # calibrated: the protocol the runtime model finds fastest at this size
                    entries.append(_calibrated_entry(topology, kind, name, size, model, channels, root,
                                                     step_overhead_us, bound, protocols, host))
                    continue
                fast = _by_representatives(topology, kind, name, channels, size, options)
                if fast is not None:  # a large symmetric ring or direct: the same figures from its representatives
                    sim, sym = fast
                    entry = {"algorithm": name, **_row(size, sim, bound)}
                    del entry["size_bytes"]
                    entry["channels"], entry["transfers"] = sym.notes.get("channels"), sym.num_transfers
                    entries.append(entry)
                    continue
                arrays = large_ring_arrays(topology, kind, name, channels)
                if arrays is not None:  # a large ring: built as arrays, simulated by the compiled kernel
                    sim = simulate_compact(topology, arrays, size, options)
                    entry = {"algorithm": name, **_row(size, sim, bound)}
                    del entry["size_bytes"]
                    entry["channels"], entry["transfers"] = arrays.notes["channels"], len(arrays)
                    entries.append(entry)
                    continue
                schedule = baseline(topology, kind, name, channels=channels, root=root, size_bytes=size,
                                    step_overhead_us=step_overhead_us)
                sim = simulate_large(topology, schedule, size, options)
                entry = {"algorithm": name, **_row(size, sim, bound)}
                del entry["size_bytes"]
                entry["channels"] = schedule.notes.get("channels")
                entry["transfers"] = len(schedule)
                if "parameters" in schedule.notes:  # hierarchical baselines: algorithm per dimension, splits, orders
                    entry["parameters"] = schedule.notes["parameters"]
                    entry["description"] = schedule.notes.get("description")
                entries.append(entry)
            timed = [e for e in entries if e["time_us"] is not None]
            # with a -g N host, times it binds tie: the GPUs' fastest among them
            best = min(timed, key=_fastest)["algorithm"] if timed else None
            unicast = [e for e in timed if e["algorithm"] not in OFFLOAD_ALGORITHMS]
            row = {"size_bytes": size, "bound_us": bound.bound_us, "bound_algbw_GBps": bound.algbw_GBps,
                   "best": best, "baselines": entries}
            if model is not None:
                row["nccl"] = _nccl_choice(topology, kind, size, entries, model, channels, root, step_overhead_us,
                                           protocols, host)
            if len(unicast) < len(timed):  # switch offload on this topology: say what the bound assumed
                row["best_unicast"] = min(unicast, key=_fastest)["algorithm"] if unicast else None
                row["bound_assumes"] = bound.assumes
            out.append(row)
    return out


def _nccl_choice(topology: Topology, kind: CollectiveKind, size: int, entries: list[dict[str, Any]], model: Any,
                 channels: int | None, root: int, step_overhead_us: float,
                 allowed: tuple[Protocol, ...] | None = None, host: OverlappedHost | None = None
                 ) -> dict[str, Any] | None:
    """What NCCL itself runs at ``size`` under the runtime model, as ``profile check`` predicts it (with the table's
    ``--channels`` and ``--step-overhead``): the fastest of NCCL's algorithms, each with the protocols NCCL runs it
    with (Simple for NVLS, Alltoall's by its point-to-point threshold). The table's entries are reused; an NCCL
    algorithm ``-a`` left out, or a protocol NCCL is held to that the table skipped as slower, is timed here.
    ``allowed``: the protocols the run allows (``--protocol``, its NCCL_PROTO); None: all. ``host``: a ``-g N``
    host overlapping the GPUs' work, applied to the choice (NCCL chooses on the GPUs' times). None when no NCCL
    algorithm applies or completes."""
    from taccl_py.errors import NotApplicable
    from taccl_py.predict import allowed_protocols, host_channels, nccl_algorithms, predict_baseline

    timed = {e["algorithm"]: e for e in entries}
    best: tuple[float, str, str] | None = None
    for name in nccl_algorithms(topology, kind):
        protocols = allowed_protocols(kind, name, size, topology.num_gpus, allowed)
        if not protocols:
            continue
        entry = timed.get(name)
        if entry is not None and set(protocols) == set(_table_protocols(name, kind, allowed)):
            # NCCL may run what the table timed: the table's pick is its
            times = {entry["proto"]: entry.get("gpu_time_us", entry["time_us"])} if entry.get("proto") else {}
        elif entry is not None and all(p.value in (entry.get("proto_times_us") or {}) for p in protocols):
            times = entry["proto_times_us"]
        else:
            try:
                times = predict_baseline(topology, kind, name, size, model, channels=channels, root=root,
                                         step_overhead_us=step_overhead_us, protocols=protocols).times_us
            except NotApplicable:
                continue
        for p in protocols:
            t = times.get(p.value)
            if t is not None and t > 0 and (best is None or t < best[0]):
                best = (t, name, p.value)
    if best is None:
        return None
    gpu_us, name, proto = best
    charged = None if host is None else host_channels(name, kind, proto, size, topology, model)
    time_us = gpu_us if host is None or charged is None else host.time_us(gpu_us, charged)
    algbw = algbw_gbps(size, time_us)
    choice = {"algorithm": name, "proto": proto, "time_us": time_us, "algbw_GBps": algbw,
              "busbw_GBps": algbw * _collective_for(kind, topology).busbw_factor}
    return choice if charged is None else {**choice, "gpu_time_us": gpu_us, "host_channels": charged}


def _proto_note(kind: CollectiveKind, protocols: tuple[Protocol, ...] | None) -> str:
    """What the table's title says of the protocols allowed (NCCL_PROTO; Alltoall's sends pick their own)."""
    if protocols is None:
        return ""
    if kind is CollectiveKind.ALLTOALL:
        return " (Alltoall's point-to-point sends: LL or Simple by size, whatever NCCL_PROTO says)"
    return f" (NCCL_PROTO={','.join(p.value for p in protocols)})"


def _table_protocols(name: str, kind: CollectiveKind, allowed: tuple[Protocol, ...] | None) -> tuple[Protocol, ...]:
    """The protocols a baseline of the table is timed with: every protocol (NVLS and NVLSTree: Simple only, as NCCL
    runs them), within ``allowed`` (``--protocol``, NCCL_PROTO) when given; Alltoall keeps LL and Simple (NCCL's
    point-to-point sends pick one by their threshold, whatever NCCL_PROTO says)."""
    from taccl_py.predict import kept_protocols
    from taccl_py.runtime import NVLS_ALGORITHMS

    return kept_protocols(kind, (Protocol.SIMPLE,) if name in NVLS_ALGORITHMS else PROTOCOLS, allowed)


def _calibrated_entry(topology: Topology, kind: CollectiveKind, name: str, size: int, model: Any,
                      channels: int | None, root: int, step_overhead_us: float, bound: Bound,
                      allowed: tuple[Protocol, ...] | None = None, host: OverlappedHost | None = None
                      ) -> dict[str, Any]:
    """One baseline's table entry under the runtime model: its fastest protocol (within ``allowed``, None: all) and
    the time with it; with ``host`` (a ``-g N`` host overlapping the GPUs' work) the entry's time is the longer of
    the two, ``proto_times_us`` the GPUs' (what the protocol is chosen on)."""
    from taccl_py.predict import predict_baseline

    pred = predict_baseline(topology, kind, name, size, model, channels=channels, root=root,
                            step_overhead_us=step_overhead_us, protocols=_table_protocols(name, kind, allowed))
    charged, overlapped = (None, None) if host is None else _with_host(host, pred, name, kind, size, topology, model)
    entry = {"algorithm": name, **_row(size, pred.sim, bound, overlapped)}
    if charged is not None:
        entry["host_channels"] = charged
    del entry["size_bytes"]
    schedule = pred.schedule
    entry["proto"] = pred.protocol.value
    entry["proto_times_us"] = pred.times_us
    entry["channels"] = schedule.notes.get("channels") if schedule is not None else None
    entry["transfers"] = len(schedule) if schedule is not None else None
    if schedule is not None and "parameters" in schedule.notes:
        entry["parameters"] = schedule.notes["parameters"]
        entry["description"] = schedule.notes.get("description")
    return entry


def _timed_baseline(topology: Topology, kind: CollectiveKind, name: str, size: int, channels: int | None, root: int,
                    step_overhead_us: float, allowed: tuple[Protocol, ...] | None = None) -> Schedule:
    """The baseline's schedule for ``--schedule-out``: under a runtime model, NVLS, NVLSTree and the tree in the
    chunk steps NCCL takes at ``size`` (the tree with the protocol its row chose) and the ``oneshot`` form fastest
    there, as their rows ran them (``taccl simulate -a FILE.json`` then gives the row's time); every other
    baseline as built. A file is timed as a schedule of its own: where a row uses NCCL's own costs of an
    algorithm (a tree's shares and step latencies, a ring's chunk loops and step latencies across machines), its
    file's time may differ."""
    from taccl_py.baselines import baseline
    from taccl_py.runtime import NVLS_ALGORITHMS

    model = runtime_model_for(topology, host_overlap=True)
    if model is None or (name not in NVLS_ALGORITHMS and name not in ("oneshot", "tree")):
        return baseline(topology, kind, name, channels=channels, root=root, size_bytes=size,
                        step_overhead_us=step_overhead_us)
    from taccl_py.predict import predict_baseline

    timed = predict_baseline(topology, kind, name, size, model, channels=channels, root=root,
                             step_overhead_us=step_overhead_us,
                             protocols=_table_protocols(name, kind, allowed)).schedule
    assert isinstance(timed, Schedule)
    return timed


def _write_xml(topology: Topology, kind: CollectiveKind, size: int, name: str, channels: int | None, root: int,
               step_overhead_us: float, path: str, dialect: str, proto: str = "Simple",
               allowed: tuple[Protocol, ...] | None = None) -> dict[str, Any]:
    """Write the baseline as XML, with chunk and channel counts the runtime picks at ``size`` where it can.

    When the default channel count gives a program beyond the runtime's limits (more connections between two
    ranks than it has channels, too many steps), fewer channels are tried, halving down to one; an explicit
    ``--channels`` is written as asked or not at all. A hierarchical baseline is planned again with fewer
    splits instead (:func:`taccl_py.synthesis.loadable.fewer_splits`).
    """
    from taccl_py.baselines.selectable import placement, ring_send_waits_at, selectable_baseline
    from taccl_py.errors import LoweringError
    from taccl_py.msccl import lower_schedule, lowering, write_schedule_xml
    from taccl_py.msccl.lowering import write_program_xml
    from taccl_py.synthesis.loadable import fewer_splits, hierarchical_splits

    timed = _timed_baseline(topology, kind, name, size, channels, root, step_overhead_us, allowed) \
        if name == "oneshot" \
        else None  # the form the row timed (a runtime model may prefer another than the raw links)
    refused: list[str] = []

    def unrefused(asked: int | None) -> int | None:
        """``asked`` channels, or fewer: a ring's counts whose floor of connections, known from its plan, is
        already above the runtime's channels are refused unbuilt (a ring of 1,024 GPUs on 8 channels: 8.4
        million transfers), halving, or failing, as a refusal after lowering would."""
        while name == "ring":
            planned = ring_send_waits_at(topology, kind, size, channels=asked)
            if planned is None:
                break
            have, waits = planned
            try:
                lowering.check_connection_floor(waits, dialect)
                break
            except LoweringError as exc:
                if channels is not None or have <= 1:
                    raise _refusal(exc, refused) from None
                refused.append(f"{have} channels")
                asked = have // 2
        return asked

    placed = selectable_baseline(topology, kind, name, size, channels=unrefused(channels), root=root,
                                 step_overhead_us=step_overhead_us, built=timed)
    while True:
        try:
            write_schedule_xml(placed.schedule, topology, path, dialect=dialect, proto=proto)
            break
        except LoweringError as exc:
            if hierarchical_splits(placed.schedule) is not None:  # fewer splits, not fewer channels
                capped = fewer_splits(topology, kind, placed.schedule, size, exc,
                                      lambda schedule: lower_schedule(schedule, topology, dialect=dialect, proto=proto))
                if capped is None:
                    raise
                write_program_xml(capped.program, path, dialect=dialect)
                refused += [why.split(":")[0] for why in capped.refused]
                changed = f"{capped.splits} splits: with {', '.join(refused)} the program exceeds the runtime's " \
                    f"limits ({capped.refused[0].split(': ', 1)[1]})"
                keys = _placement_keys(placement(capped.schedule, size, placed.type_size), changed, refused)
                time_us = _file_time(topology, capped.schedule, size, step_overhead_us, proto)
                keys["time_us"] = time_us  # the file's own time: the table's is the schedule with more splits
                keys["selection"] += f"; the file takes {time_us:.6g} us" if time_us is not None else ""
                return keys
            have = int(placed.schedule.notes.get("channels") or 1)
            if channels is not None or have <= 1:
                raise _refusal(exc, refused) from None
            refused.append(f"{have} channels")
            placed = selectable_baseline(topology, kind, name, size, channels=unrefused(have // 2), root=root,
                                         step_overhead_us=step_overhead_us)
    changed = placed.changed
    if refused:
        fewer = f"{placed.schedule.notes.get('channels')} channels: with {', '.join(refused)} the program exceeds " \
                "the runtime's limits"
        changed = f"{changed}; {fewer}" if changed else fewer
    return _placement_keys(placed, changed, refused)


def _refusal(exc: Exception, refused: list[str]) -> Exception:
    """The error of the last channel count tried, naming those refused before it."""
    from taccl_py.errors import LoweringError

    return LoweringError(f"{exc} (also with {', '.join(refused)})") if refused else exc


def _file_time(topology: Topology, schedule: Schedule, size: int, step_overhead_us: float, proto: str
               ) -> float | None:
    """The written schedule's time on the model the table uses (the runtime model with the file's protocol)."""
    model = runtime_model_for(topology, host_overlap=True)
    if model is None:
        return simulate(topology, schedule, size, SimOptions(step_overhead_us=step_overhead_us)).time_us
    from taccl_py.predict import predict_schedule
    from taccl_py.runtime import Protocol

    time_us = predict_schedule(topology, schedule, size, model, protocols=(Protocol(proto),),
                               step_overhead_us=step_overhead_us).sim.time_us
    host = host_overlap_requested()
    if host is None or time_us is None:
        return time_us
    return host.time_us(time_us, int(schedule.notes.get("channels") or 1))


def _placement_keys(placed: Placement, changed: str, refused: list[str]) -> dict[str, Any]:
    """The ``xml`` keys of ``baseline -o``'s JSON for the schedule written."""
    return {"nchunksperloop": placed.nchunksperloop, "selected": placed.selected, "count": placed.count,
            "type_size": placed.type_size, "smallest_selected_bytes": placed.smallest_size,
            "changed": changed or None, "selection": placed.describe() if not refused else
            f"{placed.describe()} ({changed})"}


@click.command("baseline")
@topology_option
@click.option("--collective", "-c", "collective_name", required=True, metavar="NAME",
              help="allgather, reducescatter, allreduce, alltoall, broadcast or reduce.")
@size_option
@click.option("--algorithm", "-a", "only", default=None, metavar="NAME",
              help="Only this baseline (ring, tree, direct, rd, oneshot, hier, hier-lb, multicast, nvls, sharp, nvls-tree); with "
                   "-o, the one to write.")
@click.option("--channels", type=click.IntRange(1, 64), default=None, help="Rings / trees / parallel copies.")
@_options
@switch_model_option
@click.option("-o", "--output", default=None, metavar="FILE.xml",
              help="Write the best baseline as MSCCL XML, with chunk and channel counts the runtime picks at --size.")
@click.option("--dialect", type=click.Choice(["v2", "v1"]), default="v2", show_default=True,
              help="MSCCL XML dialect for -o.")
@click.option("--schedule-out", type=click.Path(dir_okay=False), default=None, metavar="FILE.json",
              help="Write the best baseline (or -a's) as schedule JSON; the form for multicast / in-switch reduction.")
@click.option("--protocol", "protocol_names", multiple=True,
              type=click.Choice([p.value for p in PROTOCOLS], case_sensitive=False), metavar="LL|LL128|Simple",
              help="Under a calibrated runtime model: a protocol the runs allow (NCCL_PROTO); repeat for several. "
                   "Every baseline and NCCL's choice take the fastest of those only (Alltoall's point-to-point "
                   "sends keep NCCL's own pick). Default: the runtime model's (all, unless its file says).")
@plot_option
@json_option
def baseline_command(topology_spec: str, collective_name: str, size_spec: str, only: str | None,
                     channels: int | None, root: int, step_overhead_us: float, switch_model: str | None,
                     output: str | None, dialect: str, schedule_out: str | None, protocol_names: tuple[str, ...],
                     plot_path: str | None, as_json: bool) -> None:
    """Every applicable NCCL-style baseline side by side with the lower bound (and, on a calibrated runtime model,
    what NCCL itself would run at each size)."""
    from taccl_py.baselines import ALGORITHMS, applicable_baselines
    from taccl_py.baselines.offload import OFFLOAD_ALGORITHMS

    _check_overhead(step_overhead_us)
    topology = load_topology_arg(topology_spec, switch_model)
    runtime_model_for(topology, host_overlap=True)  # store-and-forward with a calibrated runtime model: refused before any work
    kind = collective_from(collective_name)
    sizes = sizes_from(size_spec)
    if not 0 <= root < topology.num_gpus:
        raise InputError(f"must be a rank in 0..{topology.num_gpus - 1} (got {root})", where="--root")
    if only is not None and only not in ALGORITHMS:
        raise InputError(f"unknown baseline {only!r} (choose one of: {', '.join(ALGORITHMS)})", where="--algorithm")
    names = [only] if only else applicable_baselines(topology, kind, root=root)
    protocols = protocols_option(protocol_names)
    model = runtime_model_for(topology, host_overlap=True)
    host = host_overlap_requested()
    if protocols is not None and model is None:
        raise InputError("chooses among the calibrated runtime model's protocols; the raw-link model has none "
                         "(drop --ideal, or use a topology with a runtime model)", where="--protocol")
    own = model.protocols if model is not None else None
    if model is not None and own is not None:  # the runs the model was fitted on allow only these
        from taccl_py.predict import model_protocols

        runs = model_protocols(model, kind, protocols or own)
        if not runs:
            raise InputError(f"the runtime model of {topology.name!r} allows {', '.join(p.value for p in own)} only "
                             "(its runs' NCCL_PROTO: runtime.protocols)", where="--protocol")
        protocols = runs
    if protocols is not None:
        kept = [n for n in names if _table_protocols(n, kind, protocols)]
        if not kept:
            why = "--protocol" if protocol_names else f"the runtime model's protocols ({topology.name}: runtime.protocols)"
            raise InputError(f"{', '.join(names)} run(s) Simple only (NCCL's NVLS), which {why} leaves out",
                             where="--protocol" if protocol_names else topology_spec)
        names = kept
    if not names:
        raise InputError(f"no baseline runs {kind.value} on {topology.name}", where="--collective")
    if output and len(sizes) > 1:
        raise InputError("needs a single --size (the schedule's pipelining depends on it)", where="-o")
    if schedule_out and len(sizes) > 1:
        raise InputError("needs a single --size (the schedule's pipelining depends on it)", where="--schedule-out")
    check_output_file(output, "-o")
    check_output_file(schedule_out, "--schedule-out")
    if output and only in OFFLOAD_ALGORITHMS:
        raise InputError(f"{only} uses switch multicast or in-network reduction, which MSCCL XML cannot express (an "
                         "MSCCL step sends from one rank to one rank); write it as schedule JSON with --schedule-out, "
                         "or pick a unicast baseline", where="-o")
    if output:
        check_xml_root(kind, root, dialect)
    check_picture_path(plot_path, "--plot")
    rows = _baseline_rows(topology, kind, sizes, names, channels, root, step_overhead_us, progress_enabled(as_json),
                          protocols)
    if plot_path:
        write_algbw_plot(plot_path, f"NCCL-style baselines, {kind.value} on {topology.name} ({topology.num_gpus} GPUs)",
                         sizes, {name: [r["baselines"][k]["time_us"] for r in rows] for k, name in enumerate(names)},
                         [r["bound_us"] for r in rows])
    written = None
    not_xml = None
    if output:
        chosen = only or rows[0]["best"]
        if chosen is None:
            raise Infeasible("no baseline was correct on this topology; nothing to write to -o")
        if chosen in OFFLOAD_ALGORITHMS:
            unicast = rows[0].get("best_unicast")
            if unicast is None:
                raise Infeasible(f"the best baseline, {chosen}, uses switch multicast or in-network reduction, which "
                                 "MSCCL XML cannot express, and no unicast baseline was correct; nothing to write to -o")
            not_xml = (f"the best baseline, {chosen}, uses switch multicast or in-network reduction, which MSCCL XML "
                       f"cannot express (write it with --schedule-out); -o gets the best unicast baseline, {unicast}")
            chosen = unicast
        proto = next((e.get("proto") for e in rows[0]["baselines"] if e["algorithm"] == chosen), None) or "Simple"
        placed = _write_xml(topology, kind, sizes[0], chosen, channels, root, step_overhead_us, output, dialect,
                            proto, protocols)
        written = {"path": output, "algorithm": chosen, "dialect": dialect, "proto": proto, **placed}
        if not_xml:
            written["note"] = not_xml
    if schedule_out:
        from taccl_py.schedule import save_schedule

        best = only or rows[0]["best"]
        if best is None:
            raise Infeasible("no baseline was correct on this topology; nothing to write to --schedule-out")
        save_schedule(_timed_baseline(topology, kind, best, sizes[0], channels, root, step_overhead_us, protocols),
                      topology, schedule_out)
    head: dict[str, Any] = {"topology": topology.name, "collective": kind.value,
                            "model": "ideal" if model is None else model.name, **_host_keys(host),
                            **switch_model_keys(topology)}
    if protocols is not None:
        head["protocols"] = [p.value for p in protocols]
    if written:
        head["xml"] = written
    if schedule_out:
        head["schedule_json"] = {"path": schedule_out, "algorithm": only or rows[0]["best"]}
    flat = [e | {"size_bytes": r["size_bytes"]} for r in rows for e in r["baselines"]]
    if as_json:
        emit_json({**head, **rows[0]} if len(rows) == 1 else {**head, "rows": rows})
    else:
        columns = ["size (B)", "bound (us)", "bound algbw"]
        for name in names:
            columns += [f"{name} (us)", f"{name} algbw", f"{name} busbw", f"{name} eff"]
            if model is not None:
                columns.append(f"{name} proto")
        table_rows = []
        for r in rows:
            cells: list[Any] = [r["size_bytes"], _num(r["bound_us"]), _num(r["bound_algbw_GBps"])]
            for e in r["baselines"]:
                cells += [_num(e["time_us"]), _num(e["algbw_GBps"]), _num(e["busbw_GBps"]), _num(e["efficiency"], 3)]
                if model is not None:
                    cells.append(e.get("proto") or "-")
            table_rows.append(cells)
        title = (f"NCCL-style baselines for {kind.value} on {topology.name}{_switch_note(topology)} (times in us, "
                 "bandwidth in GB/s)")
        out_console.print(make_table(title, columns, table_rows))
        chosen = [r for r in rows if r.get("nccl")]
        if chosen and model is not None:
            out_console.print(make_table(
                f"What NCCL itself would run: the fastest of its algorithms and protocols{_proto_note(kind, protocols)} "
                f"under {model.name} (NCCL's own tuning may pick otherwise)",
                ["size (B)", "algorithm", "proto", "time (us)", "algbw", "busbw"],
                [[r["size_bytes"], r["nccl"]["algorithm"], r["nccl"]["proto"], _num(r["nccl"]["time_us"]),
                  _num(r["nccl"]["algbw_GBps"]), _num(r["nccl"]["busbw_GBps"])] for r in chosen]))
        out_console.print(model_note(model, host), markup=False)
        for r in rows:
            for e in r["baselines"]:
                if e.get("description"):
                    size = f" at {format_bytes(r['size_bytes'])}" if len(rows) > 1 else ""
                    out_console.print(f"{e['algorithm']}{size}: {e['description']}", markup=False)
        if "bound_assumes" in rows[-1]:
            out_console.print(f"bound assumes {rows[-1]['bound_assumes']}", markup=False)
        if not_xml:
            out_console.print(not_xml, markup=False)
        if written:
            out_console.print(f"wrote {written['algorithm']} as MSCCL XML ({dialect}) to {output}; "
                              f"{written['selection']}", markup=False)
        if schedule_out:
            out_console.print(f"wrote {only or rows[0]['best']} as schedule JSON to {schedule_out}", markup=False)
    for e in flat:
        if not e["correct"] and not as_json:
            err_console.print(f"taccl: error: {e['algorithm']} at {format_bytes(e['size_bytes'])}: {e.get('error')}",
                              markup=False)
    _fail_if_incorrect(flat)


# ---------------------------------------------------------------------- bound
@click.command("bound")
@topology_option
@click.option("--collective", "-c", "collective_name", required=True, metavar="NAME",
              help="allgather, reducescatter, allreduce, alltoall, broadcast or reduce.")
@size_option
@_options
@click.option("--unicast", is_flag=True, default=False,
              help="Ignore the switches' multicast / reduce flags: the bound of point-to-point algorithms.")
@json_option
def bound_command(topology_spec: str, collective_name: str, size_spec: str, root: int, step_overhead_us: float,
                  unicast: bool, as_json: bool) -> None:
    """The lower bound: no algorithm can be faster on this topology (fluid link model)."""
    _check_overhead(step_overhead_us)
    topology = load_topology_arg(topology_spec)
    kind = collective_from(collective_name)
    sizes = sizes_from(size_spec)
    busbw = _collective_for(kind, topology).busbw_factor
    rows = []
    for size in sizes:
        bound = lower_bound(topology, kind, size, root=root, step_overhead_us=step_overhead_us, offload=not unicast)
        algbw = bound.algbw_GBps
        together = _latency_and_data(topology, kind, size, root, step_overhead_us)
        rows.append({"size_bytes": size, **bound.summary(), "busbw_GBps": None if algbw is None else algbw * busbw,
                     "latency_and_data_us": together[0] if together else None,
                     "latency_and_data": together[1] if together else None})
    head = {"topology": topology.name, "collective": kind.value}
    if as_json:
        emit_json({**head, **rows[0]} if len(rows) == 1 else {**head, "rows": rows})
        return
    table = make_table(f"lower bound for {kind.value} on {topology.name}",
                       ["size (B)", "bound (us)", "algbw (GB/s)", "busbw (GB/s)", "data (us)", "cut latency (us)",
                        "latency (us)", "latency + data (us)"],
                       [[r["size_bytes"], _num(r["bound_us"]), _num(r["algbw_GBps"]), _num(r["busbw_GBps"]),
                         _num(r["bandwidth_us"]), _num(r["cut_latency_us"]), _num(r["latency_us"]),
                         _num(r["latency_and_data_us"])] for r in rows])
    out_console.print(table)
    out_console.print(rows[-1]["explanation"], markup=False)
    if rows[-1]["latency_and_data_us"] is not None and rows[-1]["latency_and_data_us"] > rows[-1]["bound_us"]:
        out_console.print(f"latency + data, a lower bound too but not folded into the bound (see docs/simulator.md): "
                          f"{rows[-1]['latency_and_data']}", markup=False)
    out_console.print(f"assumes {rows[-1]['assumes']}", markup=False)


def _latency_and_data(topology: Topology, kind: CollectiveKind, size: float, root: int,
                      step_overhead_us: float) -> tuple[float, str] | None:
    """The larger of the pair and crossing bounds (latency and data added), and what it says."""
    found = [b for b in (pair_bound(topology, kind, size, root=root, step_overhead_us=step_overhead_us),
                         crossing_bound(topology, kind, size, root=root, step_overhead_us=step_overhead_us))
             if b is not None]
    if not found:
        return None
    best = max(found, key=lambda b: b.bound_us)
    return best.bound_us, best.explanation


COMMANDS: list[click.Command] = [simulate_command, baseline_command, bound_command]
