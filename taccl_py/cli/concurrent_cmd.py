"""Several collectives at once (``-c allgather+reducescatter``) for ``taccl simulate`` and ``taccl synthesize``.

``simulate`` takes one algorithm per collective, joined by ``+`` in the same order
(``-a ring+multicast``); ``best`` (the default for every collective when ``-a`` is
not given) is the fastest applicable baseline for that collective alone at the
size; a schedule JSON file (``synthesize --schedule-out``) is also accepted.
``synthesize`` synthesizes each collective, keeps its fastest few correct
choices (synthesized schedules and baselines) plus its fastest choice that uses
switch multicast or in-network reduction, and returns
the combination with the smallest makespan when they run together.

The JSON contract: ``collectives`` (one object per collective: ``collective``,
``algorithm``, ``size_bytes``, ``correct``, ``time_us`` next to the others,
``alone_us``, ``slowdown``, ``algbw_GBps``, ``busbw_GBps``, ``bound_us``,
``efficiency``), ``makespan_us``, ``makespan_bound_us`` (the joint lower bound of
the collectives running at once, :func:`taccl_py.bounds.joint_lower_bound`: at
least the largest of their own bounds), ``makespan_efficiency`` (that bound over
the makespan), ``makespan_bound`` (its explanation), ``correct``,
``injected_bytes`` and ``ejected_bytes`` (bytes on GPU -> network and network ->
GPU links, all collectives together). ``synthesize -o DIR`` adds ``files``: one
object per collective (``collective``, ``algorithm``, ``path``, ``format``
``xml`` or ``json``, ``why_not_xml``, ``xml_verified``).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taccl_py.bounds import joint_lower_bound, lower_bound
from taccl_py.cli.common import (
    emit_json,
    err_console,
    make_table,
    out_console,
    progress_line,
    switch_model_keys,
)
from taccl_py.collectives import CollectiveKind, parse_collective
from taccl_py.concurrent import ConcurrentResult, endpoint_bytes, simulate_concurrent
from taccl_py.endpoint import EndpointMode
from taccl_py.errors import InputError
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimOptions, simulate
from taccl_py.topology import Topology
from taccl_py.units import format_bytes

__all__ = ["JOINT_CHOICES", "collectives_from", "is_concurrent", "report_concurrent", "simulate_concurrent_rows",
           "synthesize_concurrent_row"]

JOINT_CHOICES = 3
"""``synthesize``: how many of each collective's fastest correct choices enter the joint search (plus its fastest
choice that uses switch multicast or in-network reduction, when it has one)."""


def is_concurrent(spec: str | None) -> bool:
    return spec is not None and "+" in spec


def collectives_from(spec: str) -> list[CollectiveKind]:
    """``allgather+reducescatter`` -> the kinds, in order (two or more)."""
    names = spec.split("+")
    if len(names) < 2 or any(not name.strip() for name in names):
        raise InputError(f"{spec!r}: give two or more collectives joined by '+', e.g. allgather+reducescatter",
                         where="--collective")
    return [parse_collective(name, where="--collective") for name in names]


def _algorithms_from(spec: str | None, count: int) -> list[str]:
    if spec is None:
        return ["best"] * count
    names = spec.split("+")
    if len(names) != count or any(not name for name in names):
        raise InputError(f"{spec!r}: give one algorithm per collective joined by '+' ({count} here), e.g. "
                         "ring+multicast, or 'best'", where="--algorithm")
    return names


def _best_baseline(topology: Topology, kind: CollectiveKind, size: int, root: int,
                   options: SimOptions) -> tuple[str, Schedule]:
    """The fastest correct applicable baseline for ``kind`` alone at ``size`` (the first listed wins ties)."""
    from taccl_py.baselines import applicable_baselines, baseline

    best: tuple[float, str, Schedule] | None = None
    for name in applicable_baselines(topology, kind, root=root):
        schedule = baseline(topology, kind, name, root=root, size_bytes=size,
                            step_overhead_us=options.step_overhead_us)
        time_us = simulate(topology, schedule, size, options).time_us
        if time_us is not None and (best is None or time_us < best[0]):
            best = (time_us, name, schedule)
    if best is None:
        raise InputError(f"no baseline runs {kind.value} correctly on {topology.name}", where="--algorithm")
    return best[1], best[2]


def _schedule_for(topology: Topology, kind: CollectiveKind, algorithm: str, size: int, channels: int | None,
                  root: int, options: SimOptions) -> tuple[str, Schedule]:
    """(the algorithm's name as reported, its schedule) for one collective of a concurrent run."""
    from taccl_py.baselines import baseline

    lowered = algorithm.lower()
    if lowered.endswith(".xml"):
        raise InputError(f"{algorithm}: an MSCCL XML program cannot run next to other collectives here (it is timed "
                         "by its own executor model); give a baseline name or a schedule JSON file "
                         "(synthesize --schedule-out)", where="--algorithm")
    if lowered.endswith(".json") or os.sep in algorithm:
        from taccl_py.schedule import load_schedule

        schedule = load_schedule(algorithm, topology)
        if schedule.collective.kind is not kind:
            raise InputError(f"the schedule is for {schedule.collective.kind.value}, not {kind.value}",
                             where=algorithm)
        return os.path.basename(algorithm), schedule
    if lowered == "best":
        name, schedule = _best_baseline(topology, kind, size, root, options)
        return f"best: {name}", schedule
    return algorithm, baseline(topology, kind, algorithm, channels=channels, root=root, size_bytes=size,
                               step_overhead_us=options.step_overhead_us)


def _row(topology: Topology, kinds: list[CollectiveKind], names: list[str], size: int, result: ConcurrentResult,
         root: int, step_overhead_us: float, endpoint: EndpointMode = EndpointMode.GPU) -> dict[str, Any]:
    """One size of a concurrent run, in the JSON contract of the module docstring (bounds in ``endpoint`` mode)."""
    parts = []
    for kind, name, part in zip(kinds, names, result.parts, strict=True):
        bound = lower_bound(topology, kind, size, root=root, step_overhead_us=step_overhead_us, endpoint=endpoint)
        entry: dict[str, Any] = {"collective": kind.value, "algorithm": name, "size_bytes": size,
                                 "correct": part.correct, "time_us": part.time_us, "alone_us": part.alone_us,
                                 "slowdown": part.slowdown, "algbw_GBps": part.algbw_GBps,
                                 "busbw_GBps": part.busbw_GBps, "bound_us": bound.bound_us,
                                 "efficiency": bound.efficiency(part.time_us), "transfers": part.transfers}
        if part.error:
            entry["error"] = part.error
        parts.append(entry)
    injected, ejected = endpoint_bytes(topology, result.link_bytes)
    joint = joint_lower_bound(topology, [(kind, size) for kind in kinds], root=root, step_overhead_us=step_overhead_us,
                              endpoint=endpoint)
    row: dict[str, Any] = {"size_bytes": size, "correct": result.correct, "makespan_us": result.makespan_us,
                           "makespan_bound_us": joint.bound_us,
                           "makespan_efficiency": joint.efficiency(result.makespan_us),
                           "makespan_bound": joint.explanation,
                           "injected_bytes": injected if result.correct else None,
                           "ejected_bytes": ejected if result.correct else None, "collectives": parts}
    if result.error:
        row["error"] = result.error
    return row


def simulate_concurrent_rows(topology: Topology, spec: str, algorithm: str | None, sizes: list[int],
                             channels: int | None, root: int, options: SimOptions,
                             show: bool) -> list[dict[str, Any]]:
    """``taccl simulate -c a+b``: every size, every collective's verdict and time, the makespan."""
    kinds = collectives_from(spec)
    algorithms = _algorithms_from(algorithm, len(kinds))
    rows = []
    with progress_line(show) as say:
        for size in sizes:
            say(f"simulating {spec} ({format_bytes(size)})")
            chosen = [_schedule_for(topology, kind, name, size, channels, root, options)
                      for kind, name in zip(kinds, algorithms, strict=True)]
            result = simulate_concurrent(topology, [(schedule, size) for _, schedule in chosen], options)
            rows.append(_row(topology, kinds, [name for name, _ in chosen], size, result, root,
                             options.step_overhead_us, options.endpoint))
    return rows


@dataclass(frozen=True)
class _Option:
    """One collective's candidate for the joint search: how the report names it and its schedule."""

    label: str
    schedule: Schedule
    alone_us: float


def synthesize_concurrent_row(topology: Topology, spec: str, size: int, options: Any, progress: Any = None,
                              out_dir: Path | None = None, dialect: str = "v2", instances: int = 1,
                              proto: str | None = None) -> dict[str, Any]:
    """``taccl synthesize -c a+b``: each collective's best few choices, the combination with the smallest makespan.

    Ties go to the combination listed first (each collective's choices fastest alone first). With ``out_dir``,
    one file per collective of that combination (:func:`write_parts`).
    """
    from taccl_py.synthesis import synthesize

    kinds = collectives_from(spec)
    pools: list[list[_Option]] = []
    notes: list[str] = []
    synthesis_s = 0.0
    for kind in kinds:
        result = synthesize(topology, kind, size, options, progress)
        synthesis_s += result.synthesis_s
        choices = sorted(result.ranked, key=lambda c: c.time_us)
        # the fastest few alone, and the fastest that offloads to the switches (it frees the GPUs' links for the
        # other collectives even where it is no faster alone)
        offloaded = [c for c in choices if c.schedule.uses_switch_offload][:1]
        pool: list[_Option] = []
        seen: set[object] = set()
        for choice in [*choices[:JOINT_CHOICES], *offloaded]:
            if choice.schedule.transfers in seen:
                continue
            seen.add(choice.schedule.transfers)
            label = choice.label if choice.is_baseline or choice.candidate.switch else \
                f"synthesized (chunk factor {choice.schedule.collective.chunk_factor})"
            pool.append(_Option(label, choice.schedule, choice.time_us))
        pools.append(pool)
        notes += [f"{kind.value}: {note}" for note in result.notes]
    sim_options = SimOptions(endpoint=options.endpoint)
    tried = []
    best: tuple[float, tuple[_Option, ...], ConcurrentResult] | None = None
    for combination in itertools.product(*pools):
        result_joint = simulate_concurrent(topology, [(o.schedule, size) for o in combination], sim_options)
        tried.append({"algorithms": [o.label for o in combination], "makespan_us": result_joint.makespan_us})
        if result_joint.makespan_us is not None and (best is None or result_joint.makespan_us < best[0]):
            best = (result_joint.makespan_us, combination, result_joint)
    if best is None:
        raise InputError(f"no combination of the collectives' choices runs correctly together on {topology.name}",
                         where="--collective")
    _, combination, joint = best
    independent = tried[0]  # every collective's fastest-alone choice
    if combination != tuple(pool[0] for pool in pools) and independent["makespan_us"] is not None:
        notes.append(f"jointly best: {' + '.join(o.label for o in combination)} ({joint.makespan_us:.6g} us) beats "
                     f"each collective's fastest alone together ({independent['makespan_us']:.6g} us)")
    row = _row(topology, kinds, [o.label for o in combination], size, joint, options.root, 0.0, options.endpoint)
    row["combinations"] = tried
    row["synthesis_s"] = round(synthesis_s, 3)
    row["notes"] = notes
    if out_dir is not None:
        row["files"] = write_parts(topology, [(o.label, o.schedule) for o in combination], size, out_dir,
                                   dialect=dialect, instances=instances, proto=proto)
        notes += [f"{f['collective']}: {f['why_not_xml']}" for f in row["files"] if f["why_not_xml"]]
    return row


def part_file_names(topology: Topology, kinds: list[CollectiveKind]) -> list[str]:
    """``allgather-dgx-h100`` per collective (``-2``, ``-3`` on a repeated collective), without extension."""
    names = []
    for k, kind in enumerate(kinds):
        base = f"{kind.value}-{topology.name}".replace("/", "_")
        repeat = sum(1 for other in kinds[:k] if other is kind)
        names.append(base if not repeat else f"{base}-{repeat + 1}")
    return names


def write_parts(topology: Topology, chosen: list[tuple[str, Schedule]], size: int, out_dir: Path, *,
                dialect: str, instances: int, proto: str | None) -> list[dict[str, Any]]:
    """One file per collective of a joint result in ``out_dir``: MSCCL XML when the schedule is unicast, lowers and
    passes ``taccl verify``'s checks, else its schedule JSON (which ``taccl simulate -a`` and the Python API read);
    each entry says which and why. The files are the schedules the makespan was measured with: no other choice
    is substituted (that would change the makespan). An XML's protocol is ``proto``, or the one the topology's
    runtime model finds fastest for it (Simple without one), as for a single collective."""
    from taccl_py.cli.common import runtime_model_for
    from taccl_py.cli.synth_cmd import _choose_proto, _selection
    from taccl_py.errors import LoweringError
    from taccl_py.msccl import lower_schedule, save_xml, verify_program
    from taccl_py.schedule import save_schedule

    out_dir.mkdir(parents=True, exist_ok=True)
    runtime = runtime_model_for(topology)
    files = []
    names = part_file_names(topology, [schedule.collective.kind for _, schedule in chosen])
    for (label, schedule), name in zip(chosen, names, strict=True):
        kind = schedule.collective.kind.value
        why: str | None = None
        verified: bool | None = None
        selection: dict[str, Any] | None = None
        if schedule.uses_switch_offload:
            why = ("it uses switch multicast or in-network reduction, which MSCCL XML cannot express: written as "
                   "schedule JSON")
        else:
            try:
                file_proto = _choose_proto(schedule, topology, size, proto, runtime)[0]
                program = lower_schedule(schedule, topology, dialect=dialect, instances=instances, proto=file_proto)
            except LoweringError as exc:
                why = f"it cannot be MSCCL XML ({exc}): written as schedule JSON"
            else:
                report = verify_program(program, dialect)
                verified = report.correct
                if report.correct:
                    path = out_dir / f"{name}.xml"
                    save_xml(program, path, dialect)
                    selection, _ = _selection(program, size, dialect)
                    files.append({"collective": kind, "algorithm": label, "path": str(path), "format": "xml",
                                  "why_not_xml": None, "xml_verified": True, "selection": selection,
                                  "proto": file_proto})
                    continue
                why = (f"its MSCCL program did not pass taccl verify's checks ({'; '.join(str(e) for e in report.errors[:2])}): "
                       "written as schedule JSON")
        path = out_dir / f"{name}.json"
        save_schedule(schedule, topology, path)
        files.append({"collective": kind, "algorithm": label, "path": str(path), "format": "json",
                      "why_not_xml": why, "xml_verified": verified, "selection": selection})
    return files


def report_concurrent(topology: Topology, spec: str, rows: list[dict[str, Any]], as_json: bool) -> None:
    """Print the rows (a table per size, or one JSON object) and the errors."""
    head = {"topology": topology.name, "collective": spec, **switch_model_keys(topology)}
    if as_json:
        emit_json({**head, **rows[0]} if len(rows) == 1 else {**head, "correct": all(r["correct"] for r in rows),
                                                                 "rows": rows})
    else:
        for row in rows:
            title = (f"{spec} at once on {topology.name}, size {format_bytes(row['size_bytes'])} each: makespan "
                     f"{_num(row['makespan_us'])} us (bound {_num(row['makespan_bound_us'])} us)")
            out_console.print(make_table(title, ["collective", "algorithm", "time (us)", "alone (us)", "slowdown",
                                                 "algbw (GB/s)", "busbw (GB/s)", "bound (us)", "efficiency"],
                                         [[p["collective"], p["algorithm"], _num(p["time_us"]), _num(p["alone_us"]),
                                           _num(p["slowdown"], 3), _num(p["algbw_GBps"]), _num(p["busbw_GBps"]),
                                           _num(p["bound_us"]), _num(p["efficiency"], 3)]
                                          for p in row["collectives"]]))
            if row["injected_bytes"] is not None:
                n = topology.num_gpus
                out_console.print(f"endpoint bytes per GPU: injected {row['injected_bytes'] / n:,.0f}, ejected "
                                  f"{row['ejected_bytes'] / n:,.0f}", markup=False)
            for note in row.get("notes", ()):
                out_console.print(f"note: {note}", markup=False)
            if row.get("makespan_efficiency") is not None:
                out_console.print(f"makespan efficiency (joint bound / makespan): {row['makespan_efficiency']:.3f}; "
                                  f"joint bound: {row['makespan_bound']}", markup=False)
            for f in row.get("files", ()):
                out_console.print(f"wrote {f['collective']} ({f['algorithm']}) as "
                                  f"{'MSCCL XML' if f['format'] == 'xml' else 'schedule JSON'} to {f['path']}",
                                  markup=False)
    for row in rows:
        for p in row["collectives"]:
            if not p["correct"] and not as_json:
                err_console.print(f"taccl: error: {p['collective']} at {format_bytes(row['size_bytes'])}: "
                                  f"{p.get('error')}", markup=False)
        if row.get("error") and not as_json:
            err_console.print(f"taccl: error: at {format_bytes(row['size_bytes'])}: {row['error']}", markup=False)


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
