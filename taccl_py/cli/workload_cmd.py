"""``taccl workload simulate``: one training step (compute kernels and collectives) overlapped on a topology.

The workload format is documented in docs/workloads.md; the model in :mod:`taccl_py.workload_sim`.
"""

from __future__ import annotations

import os
from typing import Any

import click

from taccl_py.cli.common import (
    check_step_overhead,
    emit_json,
    err_console,
    json_option,
    load_topology_arg,
    make_table,
    out_console,
    progress_enabled,
    progress_line,
    topology_option,
)
from taccl_py.cli.sim_cmd import apply_endpoint_options
from taccl_py.endpoint import EndpointMode, memory_traffic
from taccl_py.errors import InputError
from taccl_py.schedule import Schedule
from taccl_py.topology import MAX_COMM_CHANNELS, Topology
from taccl_py.units import format_bytes
from taccl_py.workload import CollectiveNode, Workload, load_workload
from taccl_py.workload_sim import StepResult, check_cut_through, simulate_step

__all__ = ["build_schedules", "workload"]

_BAR = 60
"""Characters of a resource's row in the text timeline."""


@click.group("workload")
def workload() -> None:
    """Training steps: compute kernels and collectives overlapped (docs/workloads.md)."""


def build_schedules(topology: Topology, wl: Workload, *, step_overhead_us: float = 0.0,
                    synthesis_time_limit_s: float = 30.0, say: Any = None) -> list[Schedule | None]:
    """Every collective node's schedule (one per distinct kind, size, algorithm and channels), each checked alone.

    A schedule that is wrong on its own (a bad schedule file) is an :class:`InputError` naming the node.
    """
    from taccl_py.baselines import baseline
    from taccl_py.simulator import SimOptions, simulate

    made: dict[tuple[Any, ...], Schedule] = {}
    out: list[Schedule | None] = []
    for k, node in enumerate(wl.nodes):
        if not isinstance(node, CollectiveNode):
            out.append(None)
            continue
        key = (node.kind, node.size_bytes, node.algorithm, node.channels)
        schedule = made.get(key)
        where = f"{wl.path or wl.name}: nodes[{k}] ({node.id})"
        if schedule is None:
            if say is not None:
                say(f"building {node.algorithm} {node.kind.value} {format_bytes(node.size_bytes)}")
            if node.algorithm.lower().endswith(".json"):
                from taccl_py.schedule import load_schedule

                schedule = load_schedule(node.algorithm, topology)
                if schedule.collective.kind is not node.kind:
                    raise InputError(f"the schedule file is for {schedule.collective.kind.value}, not "
                                     f"{node.kind.value}", where=where, field="algorithm")
            elif node.algorithm == "synthesized":
                from taccl_py.synthesis import SynthesisOptions, synthesize

                schedule = synthesize(topology, node.kind, node.size_bytes,
                                      SynthesisOptions(time_limit_s=synthesis_time_limit_s)).schedule
            else:
                schedule = baseline(topology, node.kind, node.algorithm, channels=node.channels,
                                    size_bytes=node.size_bytes, step_overhead_us=step_overhead_us)
            if schedule.collective.num_ranks != topology.num_gpus:
                raise InputError(f"the schedule has {schedule.collective.num_ranks} ranks, the topology "
                                 f"{topology.num_gpus} GPUs", where=where, field="algorithm")
            alone = simulate(topology, schedule, node.size_bytes, SimOptions(step_overhead_us=step_overhead_us))
            if not alone.correct:
                raise InputError(f"the schedule is wrong on its own: {alone.error}", where=where, field="algorithm")
            made[key] = schedule
        out.append(schedule)
    return out


def _bar(intervals: tuple[tuple[float, float], ...], step: float) -> str:
    """A row of the text timeline: '#' where the resource was busy for at least half the cell."""
    if step <= 0:
        return ""
    cells = [0.0] * _BAR
    width = step / _BAR
    for start, end in intervals:
        first, last = int(start / width), min(_BAR - 1, int(end / width))
        for c in range(first, last + 1):
            lo, hi = max(start, c * width), min(end, (c + 1) * width)
            if hi > lo:
                cells[c] += hi - lo
    return "".join("#" if busy >= width / 2 else "+" if busy > 0 else "." for busy in cells)


def _result_dict(result: StepResult, memory_ratio: dict[str, float]) -> dict[str, Any]:
    return {**result.summary(), "memory_bytes_per_network_byte": memory_ratio,
            "nodes": [{"id": n.id, "type": n.type, "start_us": n.start_us, "end_us": n.end_us} for n in result.nodes],
            "resources": [{"name": r.name, "kind": r.kind, "capacity_GBps": r.capacity_GBps, "bytes": r.bytes,
                           "busy_us": r.busy_us, "intervals": [list(iv) for iv in r.intervals]}
                          for r in result.resources]}


def _print_result(result: StepResult, memory_ratio: dict[str, float], timeline: bool) -> None:
    step = result.step_time_us
    out_console.print(f"{result.workload} on {result.topology}, endpoint {result.endpoint.value}: step "
                      f"{step:.2f} us, compute {result.compute_us:.2f} us, communication "
                      f"{result.communication_us:.2f} us, exposed communication {result.exposed_communication_us:.2f}"
                      f" us, network utilization {result.network_utilization:.3f}, memory bytes per network byte "
                      f"{memory_ratio[result.endpoint.value]:.3f}", markup=False)
    if not timeline:
        return
    rows = []
    for r in result.resources:
        if r.kind in ("compute", "memory", "channels") and not r.name.startswith("gpu0."):
            continue  # every GPU runs the same step: GPU 0 stands for all
        use = "-" if not r.capacity_GBps or step <= 0 else f"{r.bytes / (r.capacity_GBps * 1e3 * step):.3f}"
        rows.append([r.name, f"{r.busy_us:.1f}", use, _bar(r.intervals, step)])
    out_console.print(make_table(f"busy timeline, 0 .. {step:.1f} us ('#' busy, '+' partly)",
                                 ["resource", "busy (us)", "utilization", "timeline"], rows))


@workload.command("simulate")
@click.argument("workload_path", metavar="STEP.json")
@topology_option
@click.option("--endpoint", "endpoint_mode", type=click.Choice([*(m.value for m in EndpointMode), "both"]),
              default=EndpointMode.GPU.value, show_default=True,
              help="gpu (GPU-driven collectives), engine (ACE offload engine) or both (and the engine's speedup).")
@click.option("--memory-bandwidth", type=float, default=None, metavar="GBPS",
              help="Every GPU's memory bandwidth, GB/s (overrides the topology file's endpoints).")
@click.option("--comm-channels", type=click.IntRange(1, MAX_COMM_CHANNELS), default=None, metavar="N",
              help="Channels (SMs) a GPU-driven runtime gives to communication, on every GPU.")
@click.option("--channel-bandwidth", type=float, default=None, metavar="GBPS",
              help="GB/s one communication channel moves (with --comm-channels).")
@click.option("--step-overhead", "step_overhead_us", type=float, default=0.0, show_default=True, metavar="US",
              help="Software latency per transfer, us.")
@click.option("--synthesis-time-limit", type=click.FloatRange(1, 3600), default=30.0, show_default=True,
              metavar="S", help="Seconds per synthesized collective (algorithm \"synthesized\").")
@click.option("--no-timeline", is_flag=True, help="Leave out the per-resource busy timeline (text output).")
@json_option
def workload_simulate(workload_path: str, topology_spec: str, endpoint_mode: str, memory_bandwidth: float | None,
                      comm_channels: int | None, channel_bandwidth: float | None, step_overhead_us: float,
                      synthesis_time_limit: float, no_timeline: bool, as_json: bool) -> None:
    """Simulate one training step: step time, exposed communication, network utilization, busy timeline."""
    check_step_overhead(step_overhead_us)
    if os.path.isdir(workload_path):
        raise InputError("is a directory; give a workload JSON file", where=workload_path)
    wl = load_workload(workload_path)
    topology = apply_endpoint_options(load_topology_arg(topology_spec), memory_bandwidth, comm_channels,
                                      channel_bandwidth)
    if topology.num_gpus < 2:
        raise InputError("a workload needs at least 2 GPUs", where=topology.name)
    check_cut_through(topology)
    modes = list(EndpointMode) if endpoint_mode == "both" else [EndpointMode(endpoint_mode)]
    with progress_line(progress_enabled(as_json)) as say:
        schedules = build_schedules(topology, wl, step_overhead_us=step_overhead_us,
                                    synthesis_time_limit_s=synthesis_time_limit, say=say)
        results = []
        for mode in modes:
            say(f"simulating {wl.name} ({mode.value})")
            results.append(simulate_step(topology, wl, schedules, mode, step_overhead_us))
    ratio = _memory_ratio(wl, schedules)
    if not topology.has_endpoint_limits:
        err_console.print("taccl: note: the topology declares no GPU memory bandwidth (use --memory-bandwidth): "
                          "compute and communication do not contend", markup=False)
    speedup = results[0].step_time_us / results[1].step_time_us if len(results) == 2 and results[1].step_time_us \
        else None
    if as_json:
        head = {"workload": wl.name, "topology": topology.name}
        if len(results) == 1:
            emit_json({**head, **_result_dict(results[0], ratio)})
        else:
            emit_json({**head, "modes": [_result_dict(r, ratio) for r in results], "engine_speedup": speedup,
                       "utilization_ratio": results[1].network_utilization / results[0].network_utilization
                       if results[0].network_utilization else None})
        return
    for result in results:
        _print_result(result, ratio, not no_timeline)
    if speedup is not None:
        out_console.print(f"engine vs gpu-driven: step time speedup {speedup:.3f}x, network utilization "
                          f"{results[1].network_utilization / results[0].network_utilization:.3f}x", markup=False)


def _memory_ratio(wl: Workload, schedules: list[Schedule | None]) -> dict[str, float]:
    """Memory bytes per network byte over all the step's collectives, per endpoint mode."""
    out = {}
    for mode in EndpointMode:
        memory = network = 0.0
        for node, schedule in zip(wl.nodes, schedules, strict=True):
            if isinstance(node, CollectiveNode) and schedule is not None:
                traffic = memory_traffic(schedule, node.size_bytes, mode)
                memory += traffic.memory_bytes
                network += traffic.network_bytes
        out[mode.value] = memory / network if network else 0.0
    return out
