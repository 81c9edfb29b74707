"""``taccl synthesize``: topology + collective + size -> verified MSCCL XML and a report."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click
from rich.live import Live
from rich.text import Text

from taccl_py.bounds import Bound
from taccl_py.cli.common import (
    check_synthesis_args,
    collective_from,
    emit_json,
    err_console,
    fmt,
    json_option,
    load_topology_arg,
    make_table,
    out_console,
    runtime_model_for,
    size_option,
    sizes_from,
    switch_model_keys,
    switch_model_option,
    topology_option,
)
from taccl_py.cli.jobs_cli import jobs_option
from taccl_py.cli.plot_hooks import check_picture_path, plot_option, write_algbw_plot
from taccl_py.cli.sim_cmd import apply_endpoint_options, endpoint_options
from taccl_py.collectives import CollectiveKind
from taccl_py.endpoint import EndpointMode
from taccl_py.errors import InputError, LoweringError, OutputError
from taccl_py.msccl.ir import Program
from taccl_py.msccl.selection import DEFAULT_TYPE_SIZE, band_sizes, falls_back
from taccl_py.predict import Prediction
from taccl_py.runtime import PROTOCOLS, RuntimeModel
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimResult
from taccl_py.sketch import load_sketch
from taccl_py.synthesis import STAGES, SynthesisOptions, SynthesisResult, WorkBudget, synthesize
from taccl_py.synthesis.candidates import Choice
from taccl_py.synthesis.endpoint import channel_limit
from taccl_py.synthesis.multidim import RERUN_MAX_GPUS
from taccl_py.threads import in_background
from taccl_py.topology import SwitchModel, Topology
from taccl_py.units import algbw_gbps, format_bytes

__all__ = ["synthesize_command"]

_NCCL_DEFAULT = {CollectiveKind.ALLTOALL: "direct"}

SOLVE_SHARE = 0.85
"""The solver stages' wall-clock guard is this share of --time-limit; lowering, verifying and writing use the rest."""

MIN_LEFT_SHARE = 0.25
"""When the multi-dimensional shortcut's choice cannot be written, the solver stages run after all only if at least
this share of --time-limit is left (with less they would be cut short by the guard, or push the command past it)."""

_LOWERING_TRANSFER_RUNS = 16
"""The lowering's memory per transfer in units of a compiled run's (160 bytes): about 2.5 KB (a 1,024-GPU
Allgather of 1,047,552 transfers peaked at 2.6 GB lowered one stage after the other)."""

XML_STAGES = ("lower", "protocol", "verify", "write")
"""The stages of writing the XML (after the synthesis stages)."""
COMMAND_STAGES = (*STAGES, *XML_STAGES, "report")
"""The per-stage wall times a report shows (``stages_s``); ``protocol`` is the runtime model's prediction that
picks the XML's protocol (the wait for it after the lowering, when it started before: large schedules), ``report``
the bound and the reference ring."""


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


def _reference_time(topology: Topology, kind: CollectiveKind, size: int, root: int,
                    mode: EndpointMode) -> float | None:
    """The raw-link time of NCCL's default algorithm for ``kind`` (a large ring as arrays, through the compiled
    kernel)."""
    from taccl_py.cli.sim_cmd import _simulate_baseline
    from taccl_py.simulator import SimOptions

    return _simulate_baseline(topology, kind, _NCCL_DEFAULT.get(kind, "ring"), None, root, size,
                              SimOptions(endpoint=mode)).time_us


def _reference_ahead(band: _Band) -> Future[float | None] | None:
    """:func:`_reference_time` started in a thread of its own when the synthesis will not time it: on the
    multi-dimensional shortcut's rail-stream path (:func:`~taccl_py.synthesis.multidim.rail_path`), whose
    synthesis runs one schedule at a time in the compiled kernel and leaves the other CPUs free. (Where the
    hierarchical plan turns out not to apply, the solver stages run and time the ring themselves: this one is
    then not used.)"""
    from taccl_py.baselines import applicable_baselines
    from taccl_py.synthesis.multidim import rail_path
    from taccl_py.threads import available_cpus

    topology, kind, options = band.topology, band.kind, band.options
    if (available_cpus() < 2 or not rail_path(topology, kind, options)
            or _NCCL_DEFAULT.get(kind, "ring") not in applicable_baselines(topology, kind)):
        return None
    return in_background(lambda: _reference_time(topology, kind, band.size, band.root, options.endpoint))


def _reference_times(topology: Topology, kind: CollectiveKind, size: int, result: SynthesisResult,
                     root: int, mode: EndpointMode = EndpointMode.GPU,
                     ahead: Future[float | None] | None = None) -> tuple[str | None, float | None, Bound]:
    """(NCCL-default algorithm name, its time, the lower bound), with the endpoint limits in ``mode``; ``ahead``:
    that time, started before (:func:`_reference_ahead`)."""
    from taccl_py.bounds import lower_bound

    name: str | None = _NCCL_DEFAULT.get(kind, "ring")
    assert name is not None
    ring_time = result.baselines.get(name)
    if ring_time is None and name not in result.baselines:
        from taccl_py.baselines import applicable_baselines

        if name not in applicable_baselines(topology, kind):
            name = None
        elif ahead is None or ahead.exception() is not None:  # e.g. memory short beside the synthesis: again now
            ring_time = _reference_time(topology, kind, size, root, mode)
        else:
            ring_time = ahead.result()
    return name, ring_time, lower_bound(topology, kind, size, root=root, endpoint=mode)


def _endpoint_keys(topology: Topology, kind: CollectiveKind, size: int, schedule: Schedule, time_us: float | None,
                   root: int, mode: EndpointMode, bound: Bound) -> dict[str, Any]:
    """The ``endpoint`` block of a report: the mode, memory bytes per network byte (both modes), the bound
    without the endpoint limits and the efficiency against it."""
    from dataclasses import replace

    from taccl_py.bounds import lower_bound
    from taccl_py.endpoint import memory_traffic

    network = lower_bound(replace(topology, endpoints=()), kind, size, root=root)
    return {"mode": mode.value, "limits": topology.has_endpoint_limits,
            "memory_bytes_per_network_byte": {m.value: memory_traffic(schedule, size, m).per_network_byte
                                              for m in EndpointMode},
            "bound_explanation": bound.explanation, "network_bound_us": network.bound_us,
            "network_efficiency": network.efficiency(time_us)}


def _resolve_topology(spec: str, sketch_nodes: int | None, switch_model: str | None = None) -> Topology:
    """A shipped name, a topology file, or a TACCL topology profile (machines from the sketch's nnodes); with
    ``switch_model`` (``--switch-model``) its switches are of that model."""
    path = Path(spec)
    if path.suffix == ".json" and path.is_file():
        import json

        from taccl_py.taccl_profile import is_taccl_profile, topology_from_taccl_profile

        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            data = None
        if is_taccl_profile(data):
            topology = topology_from_taccl_profile(data, nnodes=sketch_nodes or 1, where=spec)
            return topology if switch_model is None else topology.with_switch_model(SwitchModel(switch_model))
    return load_topology_arg(spec, switch_model)


@dataclass
class _Written:
    """What the XML stages of one size did: the choice written, its program, notes, wall time per stage."""

    schedule: Schedule
    sim: SimResult
    label: str
    program: Program | None = None
    path: Path | None = None
    verified: bool | None = None
    notes: list[str] = field(default_factory=list)
    stages_s: dict[str, float] = field(default_factory=dict)
    proto: str | None = None
    proto_source: str = ""
    calibrated: Prediction | None = None
    """The written schedule under the runtime model with the XML's protocol (None without a runtime model)."""
    refused: list[dict[str, Any]] = field(default_factory=list)
    """The choices tried before the one written that could not be lowered: algorithm, time_us, reason."""
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    """Hierarchical baselines planned again with fewer splits so that they lower: algorithm, time_us, splits."""

    def timed(self, stage: str, started: float) -> None:
        self.stages_s[stage] = self.stages_s.get(stage, 0.0) + time.perf_counter() - started


def _choose_proto(schedule: Schedule, topology: Topology, size: int, proto: str | None,
                  runtime: RuntimeModel | None, stop: threading.Event | None = None) -> tuple[str, str, Prediction | None]:
    """The XML's protocol, why, and the calibrated prediction of ``schedule`` (None without a runtime model).

    ``--proto`` wins; otherwise the protocol the runtime model finds fastest for this schedule at this size
    (the runtime picks its protocol per size the same way); without a runtime model, Simple (the raw-link
    model does not tell the protocols apart). ``stop``: as :func:`taccl_py.predict.predict_schedule`.
    """
    from taccl_py.predict import predict_schedule
    from taccl_py.runtime import Protocol

    prediction = None
    why_not = ""
    if runtime is not None:
        protocols = (Protocol(proto),) if proto is not None else PROTOCOLS
        try:
            prediction = predict_schedule(topology, schedule, size, runtime, protocols=protocols, stop=stop)
        except InputError as exc:  # e.g. GPU memory / channel limits, simulated on the raw-link model only
            why_not = f"; the runtime model does not apply: {exc}"
    if proto is not None:
        if runtime is not None and runtime.protocols is not None and proto not in {p.value for p in runtime.protocols}:
            why_not += (f"; the runtime model's runs allow {', '.join(p.value for p in runtime.protocols)} only: its "
                        f"{proto} figures were not fitted on a run")
        return proto, "--proto" + why_not, prediction
    if prediction is None:
        return Protocol.SIMPLE.value, "default (raw-link model" + why_not + ")", None
    return prediction.protocol.value, f"fastest under the runtime model {runtime.name!r}" if runtime else "", \
        prediction


@dataclass
class _Lowerings:
    """Lowering of the choices of one size to one file's dialect and range, each schedule once.

    What it found is kept across :func:`_write_xml` calls: on the multi-dimensional shortcut's path the
    shortcut's choice is lowered first, and the ranking written after the solver stages holds the same
    baseline choices (the same objects, :func:`_without_shortcut`). Each schedule is lowered once, a refused
    hierarchical baseline is planned with fewer splits once, and a protocol is chosen once per schedule. Keyed
    by the schedule's identity (the schedule kept alive here so that the key stays its own). Programs are
    lowered with ``proto`` (``--proto``, else Simple) and take the chosen protocol afterwards: it is an
    attribute of the program, and no limit of the lowering depends on it.
    """

    topology: Topology
    dialect: str
    instances: int
    proto: str
    min_bytes: int
    max_bytes: int
    programs: dict[int, tuple[Schedule, Program | LoweringError]] = field(default_factory=dict)
    capped: dict[int, tuple[Schedule, Choice | None]] = field(default_factory=dict)
    """Per refused hierarchical schedule: the same baseline with the next smaller split count, simulated (None:
    there is none, or :data:`~taccl_py.synthesis.loadable.MAX_ATTEMPTS` were planned already)."""
    attempts: dict[int, int] = field(default_factory=dict)
    """How many times the baseline of a fewer-splits schedule was planned again to get it."""
    protos: dict[int, tuple[Schedule, tuple[str, str, Prediction | None]]] = field(default_factory=dict)
    ahead: dict[int, tuple[Schedule, Future[tuple[str, str, Prediction | None]], threading.Event]] = field(
        default_factory=dict)
    """Protocol choices started before their schedule's lowering (:meth:`protocol_ahead`), each with the event
    that stops it (:meth:`stop_ahead`)."""

    def lower(self, schedule: Schedule, timing: SimResult | None = None) -> Program:
        """The program of ``schedule`` (lowered the first time it is asked for); raises its refusal."""
        from taccl_py.msccl import lower_schedule

        known = self.programs.get(id(schedule))
        if known is None:
            outcome: Program | LoweringError
            try:
                outcome = lower_schedule(schedule, self.topology, dialect=self.dialect, instances=self.instances,
                                         proto=self.proto, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
                                         timing=timing)
            except LoweringError as exc:
                outcome = exc
                self.stop_ahead(schedule)  # its protocol is not wanted
            known = self.programs[id(schedule)] = (schedule, outcome)
        if isinstance(known[1], LoweringError):
            raise known[1]
        return known[1]

    def lowered(self, schedule: Schedule) -> bool | None:
        """True: ``schedule`` was lowered; False: it was refused; None: it was never tried."""
        known = self.programs.get(id(schedule))
        return None if known is None else not isinstance(known[1], LoweringError)

    def fewer_splits(self, choice: Choice, failure: LoweringError, kind: CollectiveKind, size: int,
                     progress: Callable[[str, dict[str, Any]], None]) -> Choice | None:
        """``choice`` (refused with ``failure``) planned with the next smaller split count and simulated, once per
        refused schedule; None when it is not hierarchical or no smaller count is left to try."""
        from taccl_py.synthesis.loadable import (
            MAX_ATTEMPTS,
            hierarchical_splits,
            next_splits,
            split_choice,
            with_splits,
        )

        known = self.capped.get(id(choice.schedule))
        if known is not None:
            return known[1]
        fallback: Choice | None = None
        found = hierarchical_splits(choice.schedule)
        attempts = self.attempts.get(id(choice.schedule), 0)
        splits = next_splits(found[1], failure) if found is not None and attempts < MAX_ATTEMPTS else None
        if found is not None and splits is not None:
            progress("lowering", {"detail": f"{found[0]} with {splits} splits"})
            fallback = split_choice(self.topology, with_splits(self.topology, kind, found[0], splits, size), size)
            if fallback is not None:
                self.attempts[id(fallback.schedule)] = attempts + 1
        self.capped[id(choice.schedule)] = (choice.schedule, fallback)
        return fallback

    def protocol(self, schedule: Schedule, size: int, proto: str | None,
                 runtime: RuntimeModel | None) -> tuple[str, str, Prediction | None]:
        """:func:`_choose_proto` of ``schedule``, once (what :meth:`protocol_ahead` started, when it did)."""
        known = self.protos.get(id(schedule))
        if known is None:
            started = self.ahead.pop(id(schedule), None)
            self.stop_ahead()  # any other started ahead is not the one written
            chosen = started[1].result() if started is not None else _choose_proto(schedule, self.topology, size,
                                                                                   proto, runtime)
            known = self.protos[id(schedule)] = (schedule, chosen)
        return known[1]

    def protocol_ahead(self, schedule: Schedule, size: int, proto: str | None, runtime: RuntimeModel | None) -> None:
        """Start choosing the protocol of a large ``schedule`` about to be lowered, in a thread of its own.

        Its runs in the compiled kernel release the GIL, so they go on while the lowering works in Python (at
        1,024 GPUs each takes about half a minute); :meth:`protocol` waits for it. Nothing starts for a schedule
        of fewer than 100,000 transfers, without a runtime model, on one CPU, or when the memory available now
        would not hold every protocol's run and the lowering beside them."""
        from taccl_py.fast_sim import FAST_MIN_TRANSFERS, full_simulation_error
        from taccl_py.threads import available_cpus

        transfers = len(schedule.transfers)
        beside = len(PROTOCOLS) + _LOWERING_TRANSFER_RUNS  # every protocol's run and the lowering beside them
        if (runtime is None or transfers < FAST_MIN_TRANSFERS or available_cpus() < 2 or id(schedule) in self.protos
                or id(schedule) in self.ahead or full_simulation_error(beside * transfers) is not None):
            return
        stop = threading.Event()
        self.ahead[id(schedule)] = (schedule, in_background(
            lambda: _choose_proto(schedule, self.topology, size, proto, runtime, stop)), stop)

    def stop_ahead(self, schedule: Schedule | None = None) -> None:
        """Stop the protocol choice started ahead for ``schedule`` (None: every one not waited for): it ends before
        its next simulations start (the process waits for a thread's run under way before it exits)."""
        for key in [id(schedule)] if schedule is not None else list(self.ahead):
            started = self.ahead.pop(key, None)
            if started is not None:
                started[2].set()

    def refusal(self, choice: Choice) -> LoweringError | None:
        """Why ``choice`` cannot be lowered, or None (it is lowered now if it was not yet)."""
        try:
            self.lower(choice.schedule, choice.sim)
        except LoweringError as exc:
            return exc
        return None


def _write_xml(result: SynthesisResult, topology: Topology, path: Path, *, size: int, dialect: str, instances: int,
               proto: str | None, min_bytes: int, max_bytes: int, progress: Callable[[str, dict[str, Any]], None],
               runtime: RuntimeModel | None = None, lowerings: _Lowerings | None = None) -> _Written:
    """Lower the first ranked choice that fits the dialect, verify it, write it atomically.

    A choice that cannot be lowered (too many XML nodes or steps...) gives way to
    the next one, and the notes say so; a hierarchical baseline that cannot is planned
    again with fewer splits (:func:`taccl_py.synthesis.loadable.next_splits`),
    simulated, and joins the choices in order (lowered only when its turn comes; if
    refused, the next smaller count joins in turn). Nothing is written if no choice
    fits or the lowered program fails verification. The protocol (a runtime-model
    prediction per protocol) is chosen only for the choice that lowers. ``lowerings``:
    what earlier calls for this size found (see :class:`_Lowerings`; made from the
    arguments when None).
    """
    from taccl_py.msccl import save_xml, verify_program
    from taccl_py.synthesis.chunking import selectable_at

    memo = lowerings if lowerings is not None else \
        _Lowerings(topology, dialect, instances, proto or "Simple", min_bytes, max_bytes)

    def rank(choice: Choice) -> tuple[bool, float]:  # the ranking's order: what the runtime selects, then time
        return not selectable_at(choice.schedule.collective, size, DEFAULT_TYPE_SIZE, instances), choice.time_us

    first = result.ranked[0] if result.ranked else None
    untried = next((c for c in result.ranked if memo.lowered(c.schedule) is not False), None)
    if untried is not None and memo.lowered(untried.schedule) is None and (untried.candidate.rail
                                                                         or not result.shortcut):
        # the first choice not refused already, while it is lowered; on the shortcut's path a rail-stream one only
        # (see _synthesize_band)
        memo.protocol_ahead(untried.schedule, size, proto, runtime)
    written = _Written(result.schedule, result.sim, result.chosen)
    pending = list(result.ranked)
    offered: list[Choice] = []  # hierarchical baselines planned again with fewer splits
    program: Program | None = None
    while pending:
        choice = pending.pop(0)
        started = time.perf_counter()
        progress("lowering", {"detail": choice.label})
        try:
            program = memo.lower(choice.schedule, choice.sim)
        except LoweringError as exc:
            written.notes.append(f"{_describe(choice)} ({choice.time_us:.4g} us) cannot be "
                                 f"written as MSCCL XML: {exc}")
            written.refused.append({"algorithm": choice.label, "time_us": choice.time_us, "reason": str(exc)})
            fallback = memo.fewer_splits(choice, exc, result.schedule.collective.kind, size, progress)
            written.timed("lower", started)
            if fallback is not None:
                offered.append(fallback)
                pending.append(fallback)
                pending.sort(key=rank)  # stable: an equal earlier choice stays first
            continue
        written.timed("lower", started)
        started = time.perf_counter()
        progress("protocol", {"detail": choice.label})
        chosen_proto, why, prediction = memo.protocol(choice.schedule, size, proto, runtime)
        written.timed("protocol", started)
        if program.proto != chosen_proto:
            program = replace(program, proto=chosen_proto)
        written.schedule, written.sim, written.label, written.program = choice.schedule, choice.sim, choice.label, \
            program
        written.proto, written.proto_source, written.calibrated = chosen_proto, why, prediction
        if choice is not first:
            written.notes.append(f"wrote {_describe(choice)} instead ({choice.time_us:.4g} us), "
                                 "the fastest that fits the runtime's limits")
        break
    # the fewer-splits files not refused: lowered (True), or never tried (None: ranked after the file written)
    written.fallbacks += [{"algorithm": c.label, "time_us": c.time_us, "splits": _splits(c.schedule),
                           "lowered": memo.lowered(c.schedule)} for c in offered if memo.lowered(c.schedule) is not False]
    if program is None:
        written.notes.append("nothing was written: no candidate fits the runtime's limits")
        return written
    started = time.perf_counter()
    progress("verifying", {"detail": path.name})
    report = verify_program(program, dialect)
    written.timed("verify", started)
    written.verified = report.correct
    written.notes += [f"XML check: {note}" for note in report.notes]
    if not report.correct:
        written.notes += [f"XML check failed: {error}" for error in report.errors[:5]]
        written.notes.append(f"{path} was not written: the lowered program did not verify")
        return written
    started = time.perf_counter()
    save_xml(program, path, dialect)
    written.timed("write", started)
    written.path = path
    return written


def _splits(schedule: Schedule) -> int:
    """The split count of a hierarchical baseline schedule."""
    from taccl_py.synthesis.loadable import hierarchical_splits

    found = hierarchical_splits(schedule)
    assert found is not None
    return found[1]


def _describe(choice: Choice) -> str:
    """``the ring baseline``, ``the hier-lb baseline (128 splits)`` or ``the synthesized schedule (chunk factor 12)``."""
    from taccl_py.synthesis.loadable import hierarchical_splits

    if choice.is_baseline:
        found = hierarchical_splits(choice.schedule)
        if found is not None and "splits" not in choice.candidate.label:
            return f"the {choice.candidate.label} baseline ({found[1]} splits)"
        return f"the {choice.candidate.label} baseline"
    return f"the synthesized schedule (chunk factor {choice.schedule.collective.chunk_factor})"


def _size_ranges(sizes: list[int]) -> str:
    """Power-of-two sizes as runs: ``1B-32B, 1GB``."""
    runs: list[list[int]] = []
    for size in sorted(sizes):
        if runs and size == runs[-1][-1] * 2:
            runs[-1].append(size)
        else:
            runs.append([size])
    return ", ".join(format_bytes(r[0]) if len(r) == 1 else f"{format_bytes(r[0])}-{format_bytes(r[-1])}"
                     for r in runs)


def _selection(program: Program, size: int, dialect: str) -> tuple[dict[str, Any], list[str]]:
    """At which power-of-two sizes of its band (and at its own size) the runtime would not run the file."""
    sizes = sorted({*band_sizes(program, dialect), size})
    skipped = falls_back(program, sizes, DEFAULT_TYPE_SIZE, dialect)
    skipped_bytes = [s.size_bytes for s in skipped]
    at_size = size not in skipped_bytes
    info = {"nchunksperloop": program.nchunksperloop, "element_bytes": DEFAULT_TYPE_SIZE,
            "selected_at_size": at_size, "falls_back_bytes": skipped_bytes}
    notes = []
    if skipped:
        where = "including its own size" if not at_size else "all below its own size" \
            if all(b < size for b in skipped_bytes) else "some of its sizes"
        reason = next((s for s in skipped if s.size_bytes == size), skipped[-1]).reason
        notes.append(f"the runtime would skip this file (and run its own algorithm) at {_size_ranges(skipped_bytes)} "
                     f"of its band ({where}; {DEFAULT_TYPE_SIZE}-byte elements): {reason}")
    return info, notes


def _row(topology: Topology, kind: CollectiveKind, size: int, result: SynthesisResult, root: int,
         written: _Written | None, started: float, time_limit: float, dialect: str,
         mode: EndpointMode = EndpointMode.GPU, reference: Future[float | None] | None = None) -> dict[str, Any]:
    """The report of one size; the wall time runs from ``started`` to the end of the reference computations."""
    selection: dict[str, Any] | None = None
    selection_notes: list[str] = []
    if written is not None and written.program is not None:
        selection, selection_notes = _selection(written.program, size, dialect)
        written.program = None  # written; at 1,024 GPUs millions of steps the reference ring's memory can reuse
    report_started = time.perf_counter()
    ring_name, ring_time, bound = _reference_times(topology, kind, size, result, root, mode, reference)
    report_s = time.perf_counter() - report_started
    wall_s = time.perf_counter() - started
    schedule, sim, label = (written.schedule, written.sim, written.label) if written else \
        (result.schedule, result.sim, result.chosen)
    time_us = sim.time_us
    endpoint = _endpoint_keys(topology, kind, size, schedule, time_us, root, mode, bound) \
        if topology.has_endpoint_limits or mode is not EndpointMode.GPU else None
    notes = [*result.notes, *(written.notes if written else []), *selection_notes]
    stages = {name: round(result.stages_s.get(name, 0.0), 3) for name in STAGES}
    stages.update({name: round((written.stages_s if written else {}).get(name, 0.0), 3)
                   for name in XML_STAGES})
    stages["report"] = round(report_s, 3)
    hit = result.time_limit_hit or wall_s > time_limit
    if wall_s > time_limit:
        xml_s = sum(stages[name] for name in XML_STAGES)
        solve_s = sum(stages[name] for name in STAGES)
        notes.append(f"the command took {wall_s:.1f} s, over --time-limit {time_limit:g} s: the synthesis stages took "
                     f"{solve_s:.1f} s (the guard lets the first chunk factor and the baselines finish), "
                     f"lowering, verifying and writing the XML {xml_s:.1f} s, which cannot be cut short")
    best_overall: dict[str, Any] | None = None
    if written is not None and result.schedule is not written.schedule and result.sim.time_us is not None:
        # the fastest choice could not be XML (switch offload, or past the runtime's limits): the headline figures
        # describe the file written, this block the faster one that was not
        offload = result.schedule.uses_switch_offload
        best_overall = {
            "algorithm": result.chosen, "time_us": result.sim.time_us, "algbw_GBps": result.sim.algbw_GBps,
            "busbw_GBps": result.sim.busbw_GBps, "efficiency": bound.efficiency(result.sim.time_us),
            "uses_switch_offload": offload,
            "why_not_xml": "it uses switch multicast or in-network reduction, which MSCCL XML cannot express; "
                           "--schedule-out writes it as schedule JSON" if offload else
                           "it does not fit the runtime's limits (see the notes)"}
    return {
        "size_bytes": size,
        "correct": sim.correct and (written is None or written.path is not None),
        "time_us": time_us,
        "algbw_GBps": sim.algbw_GBps,
        "busbw_GBps": sim.busbw_GBps,
        "ring_time_us": ring_time,
        "ring_algorithm": ring_name,
        "bound_us": bound.bound_us,
        "efficiency": bound.efficiency(time_us),
        "speedup_vs_ring": (ring_time / time_us) if ring_time and time_us else None,
        "synthesis_s": round(result.synthesis_s, 3),
        "wall_s": round(wall_s, 3),
        "stages_s": stages,
        "time_limit_s": time_limit,
        "time_limit_hit": hit,
        "xml": str(written.path) if written and written.path else None,
        "xml_verified": written.verified if written else None,
        "selection": selection,
        "algorithm": label,
        "chunk_factor": schedule.collective.chunk_factor,
        "transfers": len(schedule.transfers),
        "symmetry": result.symmetry,
        "sketch": result.sketch,
        "baselines_us": result.baselines,
        "baselines_unselected": list(result.unselected_baselines),
        "baselines_rebuilt_us": result.rebuilt_baselines_us,
        "candidates": [{"label": c.label, "time_us": c.time_us, "transfers": c.transfers} for c in result.candidates],
        "solver_stages": [s.to_dict() for s in result.stats],
        "notes": notes,
        "best_overall": best_overall,
        "xml_refused": written.refused if written else [],
        "xml_fallbacks": written.fallbacks if written else [],
        **({"endpoint": endpoint} if endpoint is not None else {}),
        **switch_model_keys(topology),
    }


RAW_LINK_NOTE = ("synthesis, the bound and the efficiency are on the raw-link model (the solvers optimize link "
                 "time); the calibrated line is the runtime model's prediction of what was written")


def _calibrated_fields(proto: str, why: str, calibrated: Prediction | None,
                       runtime: RuntimeModel | None) -> dict[str, Any]:
    """The protocol of the XML and, with a runtime model, the calibrated prediction of the written schedule."""
    block: dict[str, Any] | None = None
    if calibrated is not None and runtime is not None:
        block = {"model": runtime.name, "proto": calibrated.protocol.value, "time_us": calibrated.sim.time_us,
                 "algbw_GBps": calibrated.sim.algbw_GBps, "busbw_GBps": calibrated.sim.busbw_GBps,
                 "proto_times_us": {p.value: calibrated.times_us.get(p.value) for p in PROTOCOLS
                                    if p.value in calibrated.times_us},
                 "note": RAW_LINK_NOTE}
    return {"proto": proto, "proto_source": why, "calibrated": block}


def _print_report(topology: Topology, kind: CollectiveKind, row: dict[str, Any]) -> None:
    best = row.get("best_overall")
    switches = f", {topology.switch_model.value} switches" if topology.store_and_forward else ""
    title = (f"{kind.value} on {topology.name} ({topology.num_gpus} GPUs{switches}), size "
             f"{format_bytes(row['size_bytes'])}: {row['algorithm']}")
    first = ["synthesized" if row["algorithm"] == "synthesized" else row["algorithm"], row["time_us"],
             row["algbw_GBps"], row["busbw_GBps"]]
    lines = [first]
    if best:
        title += f" written as XML; the fastest found is {best['algorithm']}, not XML"
        first[0] = f"written (XML): {first[0]}"
        lines.append([f"fastest (not XML): {best['algorithm']}", best["time_us"], best["algbw_GBps"],
                      best["busbw_GBps"]])
    table = make_table(title, ["", "time us", "algbw GB/s", "busbw GB/s"], [
        *lines,
        [f"NCCL-style {row['ring_algorithm'] or '-'}", row["ring_time_us"],
         algbw_gbps(row["size_bytes"], row["ring_time_us"]) if row["ring_time_us"] else None, None],
        ["lower bound", row["bound_us"], algbw_gbps(row["size_bytes"], row["bound_us"]) if row["bound_us"] else None,
         None],
    ])
    out_console.print(table)
    calibrated = row.get("calibrated")
    if calibrated:
        out_console.print(f"calibrated ({calibrated['model']}, proto {calibrated['proto']}): "
                          f"{fmt(calibrated['time_us'], 4)} us, busbw {fmt(calibrated['busbw_GBps'], 4)} GB/s "
                          f"(raw-link: {fmt(row['time_us'], 4)} us); {RAW_LINK_NOTE}", markup=False)
    out_console.print(f"protocol: {row['proto']} ({row['proto_source']})", markup=False)
    out_console.print(f"correct: {'yes' if row['correct'] else 'NO'}   efficiency (bound/time): "
                      f"{fmt(row['efficiency'], 3)}   speedup vs {row['ring_algorithm'] or 'ring'}: "
                      f"{fmt(row['speedup_vs_ring'], 3)}x{' (the XML written)' if best else ''}   synthesis: "
                      f"{row['synthesis_s']:.2f} s")
    if best:
        out_console.print(f"fastest found: {best['algorithm']}, efficiency {fmt(best['efficiency'], 3)}, speedup vs "
                          f"{row['ring_algorithm'] or 'ring'} "
                          f"{fmt(row['ring_time_us'] / best['time_us'] if row['ring_time_us'] else None, 3)}x; "
                          f"not written as XML: {best['why_not_xml']}", markup=False)
    endpoint = row.get("endpoint")
    if endpoint:
        ratio = endpoint["memory_bytes_per_network_byte"]
        out_console.print(f"endpoint {endpoint['mode']}: memory bytes per network byte gpu-driven {ratio['gpu']:.3f}, "
                          f"engine {ratio['engine']:.3f}; bound: {endpoint['bound_explanation']}; without the endpoint "
                          f"limits the bound is {endpoint['network_bound_us']:.6g} us (efficiency "
                          f"{fmt(endpoint['network_efficiency'], 3)})", markup=False)
    stages_text = ", ".join(f"{name} {seconds:.2f}" for name, seconds in row["stages_s"].items() if seconds)
    out_console.print(f"wall time: {row['wall_s']:.2f} s of --time-limit {row['time_limit_s']:g} s"
                      f"{' (reached)' if row['time_limit_hit'] else ''}   per stage (s): {stages_text}")
    out_console.print(f"symmetry: {row['symmetry']}\nsketch: {row['sketch']}")
    stages = make_table("solver statistics per stage", ["stage", "solver", "status", "objective", "bound", "gap",
                                                        "time s", "vars", "stopped by"],
                        [[s["stage"], s["solver"], s["status"], s["objective"], s["bound"],
                          "-" if s["gap"] is None else f"{100 * s['gap']:.2f}%", f"{s['time_s']:.2f}",
                          s["variables"] or "-", s["stopped_by"] or "-"] for s in row["solver_stages"]])
    out_console.print(stages)
    out_console.print(make_table("candidates (simulated)", ["candidate", "time us", "transfers"],
                                 [[c["label"], c["time_us"], c["transfers"]] for c in row["candidates"]]))
    for note in row["notes"]:
        out_console.print(f"note: {note}")
    if row["xml"]:
        out_console.print(f"wrote {row['xml']}")


@dataclass(frozen=True)
class _Band:
    """One size of a synthesize run and where its XML goes (``lo``/``hi``: its size band in the XML)."""

    topology: Topology
    kind: CollectiveKind
    size: int
    options: SynthesisOptions
    root: int
    xml_path: Path | None
    lo: int
    hi: int
    dialect: str
    instances: int
    proto: str | None
    """The XML's protocol: --proto, or None to choose it per band (the runtime model's fastest, else Simple)."""
    schedule_out: str | None
    time_limit: float
    live_label: str = ""
    """Show the live status line with this label while solving (only when run in this process)."""
    chakra_dir: str | None = None
    """Also write Chakra execution traces into this directory."""
    runtime: RuntimeModel | None = None
    """The topology's calibrated runtime model (None with --ideal or without one): picks ``proto`` when it is None
    and gives the calibrated prediction of what is written."""


def _without_shortcut(band: _Band, result: SynthesisResult, refusal: LoweringError, started: float, report: Any,
                      lowerings: _Lowerings) -> tuple[SynthesisResult, _Written]:
    """The multi-dimensional shortcut chose a hierarchical baseline the runtime cannot load (``hier-lb`` with
    more splits than MSCCL has channels or XML nodes, ``refusal``): run the solver stages after all.

    Their ranking holds every baseline too (the shortcut's comparison, not simulated again), so what it writes
    is never slower than what the shortcut's ranking would give, and no choice is lowered twice
    (``lowerings``). The deterministic budgets stay those of the command; the wall-clock guard of the solver
    stages is :data:`SOLVE_SHARE` of what is left of ``--time-limit``. With less than :data:`MIN_LEFT_SHARE`
    of it left, or when nothing of their ranking can be written, the shortcut's ranking is written (the next
    choice that fits); the report says which.
    """
    def write(ranked: SynthesisResult) -> _Written:
        return _write_xml(ranked, band.topology, band.xml_path, size=band.size,  # type: ignore[arg-type]
                          dialect=band.dialect, instances=band.instances, proto=band.proto, min_bytes=band.lo,
                          max_bytes=band.hi, progress=report, runtime=band.runtime, lowerings=lowerings)

    left = band.time_limit - (time.perf_counter() - started)
    why = f"the multi-dimensional shortcut chose {result.chosen}, which cannot be written as MSCCL XML"
    if left < MIN_LEFT_SHARE * band.time_limit:
        written = write(result)
        written.notes.insert(0, f"{why}; the solver stages were not run: {max(0.0, left):.1f} s of --time-limit "
                                f"{band.time_limit:g} s was left (raise --time-limit to run them)")
        return replace(result, time_limit_hit=True), written
    options = replace(band.options, multidim_shortcut=False, budget=band.options.work,
                      time_limit_s=max(1.0, SOLVE_SHARE * left))
    full = synthesize(band.topology, band.kind, band.size, options, report, baselines=result.comparison)
    stages = {name: result.stages_s.get(name, 0.0) + full.stages_s.get(name, 0.0) for name in STAGES}
    full = replace(full, synthesis_s=result.synthesis_s + full.synthesis_s, stages_s=stages)
    written = write(full)
    if written.path is None:  # nothing of it fits, or its program did not verify: the shortcut's ranking
        again = write(result)
        if again.path is not None:
            again.notes[:0] = [f"{why}; the solver stages ran after all, and nothing of theirs could be written",
                               *written.notes]
            for stage, seconds in written.stages_s.items():
                again.stages_s[stage] = again.stages_s.get(stage, 0.0) + seconds
            return replace(result, synthesis_s=full.synthesis_s, stages_s=stages,
                           time_limit_hit=result.time_limit_hit or full.time_limit_hit), again
    if not any(entry["algorithm"] == result.chosen for entry in written.refused):  # a faster choice came first
        written.refused.insert(0, {"algorithm": result.chosen, "time_us": result.sim.time_us,
                                   "reason": str(refusal)})
        why += f": {refusal}"
    written.notes.insert(0, f"{why}; the solver stages ran after all")
    return full, written


def _xml_stages(band: _Band, result: SynthesisResult, lowerings: _Lowerings, started: float,
                report: Callable[[str, dict[str, Any]], None]) -> tuple[SynthesisResult, _Written]:
    """The XML stages of one size: the shortcut's choice lowered first (the solver stages after all when it is
    refused at most RERUN_MAX_GPUS GPUs: the result returned is then theirs), then the first choice that fits."""
    assert band.xml_path is not None
    lowered = time.perf_counter()
    if result.shortcut and result.ranked:
        report("lowering", {"detail": result.chosen})
        # a rail-stream schedule is built to fit MSCCL's limits; a baseline first (hier-lb) may be refused after
        # its lowering, and its protocol's runs (network posts: minutes at 256 GPUs) would be wasted; at most
        # RERUN_MAX_GPUS a refusal runs the solver stages, time-limited
        if result.ranked[0].candidate.rail and band.topology.num_gpus > RERUN_MAX_GPUS:
            lowerings.protocol_ahead(result.ranked[0].schedule, band.size, band.proto, band.runtime)
    refusal = lowerings.refusal(result.ranked[0]) if result.shortcut and result.ranked else None
    first_s = time.perf_counter() - lowered  # the shortcut's choice lowered (or refused) before the rest
    if refusal is not None and band.topology.num_gpus <= RERUN_MAX_GPUS:
        # it cannot be a file: the solver stages run after all (above RERUN_MAX_GPUS they would take longer than
        # anything they could gain; the next loadable choice is written)
        result, written = _without_shortcut(band, result, refusal, started, report, lowerings)
    else:
        written = _write_xml(result, band.topology, band.xml_path, size=band.size, dialect=band.dialect,
                             instances=band.instances, proto=band.proto, min_bytes=band.lo, max_bytes=band.hi,
                             progress=report, runtime=band.runtime, lowerings=lowerings)
    written.stages_s["lower"] = written.stages_s.get("lower", 0.0) + first_s
    return result, written


def _synthesize_band(band: _Band, progress: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Synthesize one size, write its XML; the report row (a job function of the runner: module level)."""
    started = time.perf_counter()
    with _Progress(progress is None and bool(band.live_label), band.live_label) as live:
        report = progress if progress is not None else live
        reference = _reference_ahead(band)
        result = synthesize(band.topology, band.kind, band.size, band.options, report)
        written: _Written | None = None
        if band.xml_path is not None:
            lowerings = _Lowerings(band.topology, band.dialect, band.instances, band.proto or "Simple", band.lo,
                                   band.hi)
            try:
                result, written = _xml_stages(band, result, lowerings, started, report)
            finally:
                lowerings.stop_ahead()  # what started ahead and was not waited for (a refusal, an error)
            del lowerings  # its programs (millions of steps at 1,024 GPUs) go before the reference ring is simulated

    if band.schedule_out:
        from taccl_py.schedule import save_schedule

        # a multicast / in-switch reduction winner cannot be XML: the JSON keeps it, the XML the best unicast one
        offload = result.schedule.uses_switch_offload
        save_schedule(written.schedule if written and not offload else result.schedule, band.topology,
                      band.schedule_out)
    if written is not None and written.proto is not None:
        proto, why, calibrated = written.proto, written.proto_source, written.calibrated
    else:  # no XML written: what -o would write
        proto, why, calibrated = _choose_proto(result.schedule, band.topology, band.size, band.proto, band.runtime)
    row = _row(band.topology, band.kind, band.size, result, band.root, written, started, band.time_limit,
               band.dialect, band.options.endpoint, reference)
    row.update(_calibrated_fields(proto, why, calibrated, band.runtime))
    if band.chakra_dir:
        from taccl_py.cli.export_cmd import write_chakra

        row["chakra"] = write_chakra(written.schedule if written else result.schedule, band.size, band.chakra_dir,
                                     f"{band.kind.value}-{band.topology.name}")
    return row, {}


def _plot_times(rows: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    """Per size: the synthesizer's best candidate and every baseline it was compared with."""
    times: dict[str, list[float | None]] = {"taccl synthesized": [min(
        (c["time_us"] for c in r["candidates"] if c["time_us"] is not None), default=None) for r in rows]}
    for name in sorted({name for r in rows for name in r["baselines_us"]}):
        times[f"NCCL-style {name}"] = [r["baselines_us"].get(name) for r in rows]
    return times


def _band_name(kind: CollectiveKind, topology: Topology, lo: int) -> str:
    return f"{kind.value}-{topology.name}-{format_bytes(lo)}.xml".replace("/", "_")


@click.command("synthesize")
@topology_option
@click.option("--collective", "-c", "collective_name", required=True, metavar="NAME[+NAME...]",
              help="allgather, reducescatter, allreduce, alltoall, broadcast or reduce; several joined by '+' "
                   "(allgather+reducescatter) are synthesized to run at once, jointly.")
@size_option
@click.option("--sketch", "sketch_path", type=click.Path(dir_okay=False), default=None,
              help="A communication sketch (TACCL's JSON format). Without one, it is derived from the topology.")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Write the MSCCL XML here (a directory when --size is a range, or with several collectives at once: "
                   "one file per collective, schedule JSON where it cannot be XML).")
@click.option("--time-limit", type=click.FloatRange(min=1.0), default=60.0, show_default=True,
              help="Wall-clock limit of the command per size (solve, simulate, lower, verify, write). The solvers "
                   "stop on deterministic work budgets scaled from it; the clock only guards, and the report says "
                   "when it bites.")
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
@click.option("--proto", type=click.Choice(["Simple", "LL", "LL128"]), default=None,
              help="The XML's protocol. Default: per size band, the one the topology's runtime model finds fastest "
                   "for the schedule written (Simple without a runtime model, or with taccl --ideal).")
@click.option("--no-baselines", is_flag=True, help="Do not compare with (or fall back to) NCCL-style baselines.")
@click.option("--no-multidim-shortcut", is_flag=True,
              help="On a network with dimensions, run the solver stages even when hier-lb is modelled near the bound.")
@click.option("--schedule-out", type=click.Path(dir_okay=False), default=None,
              help="Also write the schedule IR as JSON (single size only).")
@click.option("--chakra", "chakra_dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Also write Chakra execution traces, DIR/<collective>-<topology>.<rank>.et (single size only).")
@endpoint_options
@jobs_option(default=1)
@switch_model_option
@plot_option
@json_option
def synthesize_command(topology_spec: str, collective_name: str, size_spec: str, sketch_path: str | None,
                       output: str | None, time_limit: float, solver: str, threads: int, seed: int,
                       chunk_factors: tuple[int, ...], root: int, dialect: str, instances: int, proto: str | None,
                       no_baselines: bool, no_multidim_shortcut: bool, schedule_out: str | None, chakra_dir: str | None,
                       endpoint_mode: str, memory_bandwidth: float | None, comm_channels: int | None,
                       channel_bandwidth: float | None, jobs: int, switch_model: str | None, plot_path: str | None,
                       as_json: bool) -> None:
    """Synthesize a collective algorithm, verify it by simulation and write MSCCL XML.

    Example: taccl synthesize --topology ndv2x2 --collective allgather --size 1GB -o ag.xml
    """
    from taccl_py.cli.concurrent_cmd import collectives_from, is_concurrent

    concurrent = is_concurrent(collective_name)
    kinds = collectives_from(collective_name) if concurrent else [collective_from(collective_name)]
    kind = kinds[0]
    sizes = sizes_from(size_spec)
    sketch = load_sketch(sketch_path) if sketch_path else None
    topology = apply_endpoint_options(_resolve_topology(topology_spec, sketch.num_machines if sketch else None,
                                                        switch_model),
                                      memory_bandwidth, comm_channels, channel_bandwidth)
    runtime_model_for(topology)  # store-and-forward with a calibrated runtime model: refused before any work
    mode = EndpointMode(endpoint_mode)
    limit = channel_limit(topology, mode)
    if limit is not None and instances > limit:
        raise InputError(f"{instances} instances take {instances} channels, but the GPUs give communication {limit} "
                         "(comm_channels)", where="--instances")
    if concurrent:
        for given, where in ((schedule_out, "--schedule-out"), (chakra_dir, "--chakra"), (plot_path, "--plot")):
            if given:
                raise InputError("applies to one collective; with several at once, -o DIR writes one file per "
                                 "collective (schedule JSON where it cannot be MSCCL XML)", where=where)
        if len(sizes) > 1:
            raise InputError("needs a single size with several collectives at once", where="--size")
        if output and ((Path(output).exists() and not Path(output).is_dir()) or
                       (not Path(output).exists() and Path(output).suffix.lower() in (".xml", ".json"))):
            raise OutputError("must be a directory with several collectives at once (one file per collective: "
                              "MSCCL XML, or schedule JSON where it cannot be XML)", where=f"-o {output}")
    if root >= topology.num_gpus:
        raise InputError(f"root must be a GPU id in 0..{topology.num_gpus - 1} (got {root})", where="--root")
    if len(sizes) > 1 and schedule_out:
        raise InputError("--schedule-out needs a single size", where="--schedule-out")
    for each in kinds:
        check_synthesis_args(topology, each, output=output, schedule_out=schedule_out,
                             ranged=len(sizes) > 1 or concurrent,
                             dialect=dialect, instances=instances, root=root, chunk_factors=chunk_factors,
                             solver=solver, seed=seed, time_limit=time_limit, threads=threads)
    check_picture_path(plot_path, "--plot")
    if len(sizes) > 1 and chakra_dir:
        raise InputError("needs a single size", where="--chakra")
    options = SynthesisOptions(sketch=sketch, solver=solver, time_limit_s=time_limit * SOLVE_SHARE, threads=threads,
                               seed=seed, chunk_factors=chunk_factors or None, compare_baselines=not no_baselines,
                               root=root, budget=WorkBudget.for_time_limit(time_limit), instances=instances,
                               multidim_shortcut=not no_multidim_shortcut, endpoint=mode)
    if concurrent:
        from taccl_py.cli.concurrent_cmd import report_concurrent, synthesize_concurrent_row

        with _Progress(not as_json) as progress:
            row = synthesize_concurrent_row(topology, collective_name, sizes[0], options, progress,
                                            Path(output) if output else None, dialect, instances, proto)
        report_concurrent(topology, collective_name, [row], as_json)
        if not row["correct"]:
            raise click.exceptions.Exit(1)
        return
    out_dir = Path(output) if output and len(sizes) > 1 else None
    if out_dir is not None:
        if out_dir.exists() and not out_dir.is_dir():
            raise InputError("must be a directory when --size is a range", where=str(out_dir))
        out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runtime = runtime_model_for(topology)
    bands = []
    for k, size in enumerate(sizes):
        xml_path = (out_dir / _band_name(kind, topology, size) if out_dir is not None else
                    Path(output) if output else None)
        band_lo, band_hi = (0 if k == 0 else size, 0 if k == len(sizes) - 1 else sizes[k + 1] - 1) \
            if out_dir is not None else (0, 0)
        live = f"size {k + 1}/{len(sizes)} {format_bytes(size)}" if len(sizes) > 1 and jobs == 1 and not as_json \
            else ""
        bands.append(_Band(topology, kind, size, options, root, xml_path, band_lo, band_hi, dialect, instances,
                           proto, schedule_out, time_limit, live, chakra_dir, runtime))
    if len(bands) == 1:
        with _Progress(not as_json) as progress:
            rows = [_synthesize_band(bands[0], progress)[0]]
        if not as_json:
            _print_report(topology, kind, rows[0])
    else:
        from taccl_py.cli.jobs_cli import run_bands

        # one size at a time shows each size's live line (stage, incumbent); several at once, a progress bar
        rows = run_bands(_synthesize_band, bands, [b.size for b in bands], jobs,
                         show_progress=not as_json and jobs > 1)
    if plot_path:
        write_algbw_plot(plot_path, f"{kind.value} on {topology.name} ({topology.num_gpus} GPUs)",
                         sizes, _plot_times(rows), [r["bound_us"] for r in rows], synthesized="taccl synthesized")
    if len(sizes) > 1:
        if as_json:
            emit_json({"topology": topology.name, "collective": kind.value, "rows": rows,
                       "total_s": round(time.perf_counter() - started, 3),
                       "directory": str(out_dir) if out_dir else None})
        else:
            out_console.print(make_table(
                f"{kind.value} on {topology.name}: synthesized per size band",
                ["size", "time us", "algbw", "busbw", "ring us", "bound us", "efficiency", "speedup", "algorithm",
                 "proto", "calibrated us", "xml"],
                [[format_bytes(r["size_bytes"]), r["time_us"], r["algbw_GBps"], r["busbw_GBps"], r["ring_time_us"],
                  r["bound_us"], r["efficiency"], r["speedup_vs_ring"], r["algorithm"], r["proto"],
                  r["calibrated"]["time_us"] if r["calibrated"] else "-",
                  os.path.basename(r["xml"]) if r["xml"] else "-"] for r in rows]))
            if runtime is not None:
                out_console.print(f"proto: {rows[0]['proto_source']}; {RAW_LINK_NOTE}", markup=False)
    elif as_json:
        emit_json(rows[0])
    if not all(r["correct"] for r in rows):  # a file that could not be written or did not verify
        raise click.exceptions.Exit(1)



