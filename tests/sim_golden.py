"""Golden simulated times: what the simulator and the XML timing computed, recorded to catch any change.

``tests/data/sim_golden.json`` holds, for a broad set of cases, the verdict, the error and the times
(makespan, the sums of every start, arrival and commit time, per-link busy time and bytes, the critical
path) that ``simulate`` and ``simulate_program`` gave when the file was written. ``test_sim_golden.py``
recomputes every case and compares (times to 1e-9 relative, messages exactly). The cases:

* ``baselines``: every applicable NCCL-style baseline of every collective on every shipped topology up to
  72 GPUs, at 1 KB, 1 MB and 1 GB (and Broadcast/Reduce from the last rank on the small ones); the 1 GB ones on
  more than :data:`COMPILED_GPUS` GPUs are simulated by the compiled kernel where it covers them (the same
  results as the Python simulator, which runs every other case);
* ``programs``: the XML timing of lowered baselines and of the third-party files in ``tests/vectors/msccl``
  (the broken ones too: their verdict, and the makespan of a valid but wrong one);
* ``perturbed``: baselines with random ``after`` edges, ``not_before_us``, channel moves and a step overhead
  (``random.Random(seed)``, so the schedule is the same on every run);
* ``invalid``: schedules the simulator must reject (missing data, a double reduction, a deadlock, a bad
  route, a lost chunk), with the exact message.

Every case also records a fingerprint of the schedule or program it ran. When a producer (a baseline, the
lowering) changes what it emits, the test says so instead of reporting a simulator change; then, and only
then, regenerate with ``.venv/bin/python tests/sim_golden.py`` (never to hide a change of simulated times;
``--only TEXT`` re-records only the cases of the producer that changed).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from taccl_py.baselines import applicable_baselines, baseline
from taccl_py.collectives import CollectiveKind
from taccl_py.compact import compact
from taccl_py.fast_sim import kernel_covers, simulate_compact
from taccl_py.library import SHIPPED_NAMES, resolve_topology, switch_star
from taccl_py.msccl import Program, load_program, lower_schedule, simulate_program, write_xml
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import SimOptions, SimResult, simulate
from taccl_py.topology import Link, Switch, Topology, check_topology

HERE = Path(__file__).parent
GOLDEN = HERE / "data" / "sim_golden.json"
VECTORS = HERE / "vectors" / "msccl"
FORMAT = "taccl_py-sim-golden/1"
KB, MB, GB = 1 << 10, 1 << 20, 1 << 30
SIZES = (KB, MB, GB)
MAX_GPUS = 72
"""Shipped topologies up to this many GPUs (mi250x8, 128 GPUs, is left to the benchmark)."""
FAST_GPUS = 8
"""Baselines on topologies up to this many GPUs are the fast part of the test; the rest is marked slow."""
COMPILED_GPUS = 16
"""Baselines of 1 GB on topologies of more than this many GPUs run through the compiled kernel
(:func:`taccl_py.fast_sim.simulate_compact`, which gives the Python simulator's results exactly:
``tests/test_fast_sim.py``), so the fixture's largest cases take seconds; the Python simulator still runs
every other case."""
FAST_LOWERED = ("ring8", "dgx-a100")
"""Topologies whose lowered baselines are timed in the fast part."""
REL = 1e-9
"""Relative tolerance on every recorded time."""


@dataclass(frozen=True)
class Case:
    """One recorded run. ``section`` and ``key`` name it; ``group`` gathers cases into one test, ``slow`` marks it."""

    section: str
    key: str
    group: str
    slow: bool
    run: Callable[[], dict[str, Any]]


# ------------------------------------------------------------------ fingerprints and records
def schedule_digest(schedule: Schedule) -> str:
    col = schedule.collective
    body: list[list[Any]] = [[col.kind.value, col.num_ranks, col.chunk_factor, col.root]]
    body += [[t.src, t.dst, list(t.chunks), list(t.route), t.op.value, t.channel, list(t.after), t.not_before_us]
             for t in schedule.transfers]
    return hashlib.sha256(json.dumps(body).encode()).hexdigest()[:12]


def program_digest(program: Program) -> str:
    return hashlib.sha256(write_xml(program, "v2").encode()).hexdigest()[:12]


def _sum(values: Any) -> float:
    return math.fsum(float(v) for v in values if not math.isnan(v))


def record(result: SimResult) -> dict[str, Any]:
    """What is compared: verdict, message, makespan and sums over every transfer and link."""
    path = result.critical_path
    notes_time = result.notes.get("time_us")
    return {"correct": result.correct, "error": result.error, "time_us": result.time_us,
            "wrong_time_us": notes_time,
            "start": _sum(result.start_us), "arrive": _sum(result.arrive_us), "commit": _sum(result.commit_us),
            "unset": int(sum(1 for v in result.commit_us if math.isnan(v))),
            "busy": math.fsum(result.link_busy_us), "bytes": math.fsum(result.link_bytes),
            "path": [len(path), sum(path)], "stuck": len(result.stuck)}


# ------------------------------------------------------------------ topologies
@cache
def topology(name: str) -> Topology:
    if name == "switch3":
        return switch_star(3, 100.0, 1.0)
    if name.startswith("star"):
        n = int(name[4:])
        links = []
        for g in range(n):
            links += [Link(g, "nvswitch", 100.0, 0.7), Link("nvswitch", g, 100.0, 0.7)]
        return check_topology(Topology(name, n, tuple(links), switches=(Switch("nvswitch"),)))
    return resolve_topology(name)


def shipped(max_gpus: int = MAX_GPUS) -> list[str]:
    return [name for name in sorted(SHIPPED_NAMES) if topology(name).num_gpus <= max_gpus]


# ------------------------------------------------------------------ baselines
def _baseline_case(name: str, kind: CollectiveKind, algorithm: str, size: int, root: int) -> Case:
    def run() -> dict[str, Any]:
        topo = topology(name)
        schedule = baseline(topo, kind, algorithm, root=root, size_bytes=size)
        compiled = size == GB and topo.num_gpus > COMPILED_GPUS and kernel_covers(topo, schedule, SimOptions())
        result = simulate_compact(topo, compact(schedule), size) if compiled else simulate(topo, schedule, size)
        return {"schedule": schedule_digest(schedule), "transfers": len(schedule), **record(result)}
    key = f"{name}/{kind.value}/{algorithm}/{size}" + (f"/root{root}" if root else "")
    return Case("baselines", key, name, topology(name).num_gpus > FAST_GPUS, run)


def baseline_cases() -> Iterator[Case]:
    for name in shipped():
        topo = topology(name)
        for kind in CollectiveKind:
            roots = [0]
            if kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE) and topo.num_gpus <= FAST_GPUS:
                roots.append(topo.num_gpus - 1)
            for root in roots:
                for algorithm in applicable_baselines(topo, kind, root=root):
                    for size in SIZES:
                        yield _baseline_case(name, kind, algorithm, size, root)


# ------------------------------------------------------------------ XML timing
def _lowered_case(name: str, kind: CollectiveKind, algorithm: str, size: int, overhead: float) -> Case:
    def run() -> dict[str, Any]:
        topo = topology(name)
        schedule = baseline(topo, kind, algorithm, size_bytes=size, step_overhead_us=overhead)
        program = lower_schedule(schedule, topo)
        options = SimOptions(step_overhead_us=overhead)
        scheduled = simulate(topo, schedule, size, options)
        return {"schedule": schedule_digest(schedule), "program": program_digest(program),
                "schedule_time_us": scheduled.time_us, **record(simulate_program(program, topo, size, options))}
    key = f"lowered/{name}/{kind.value}/{algorithm}/{size}" + (f"/overhead{overhead:g}" if overhead else "")
    return Case("programs", key, f"lowered-{name}", name not in FAST_LOWERED, run)


def _vector_topology(ngpus: int) -> str:
    return {8: "dgx-a100", 16: "dgx2"}.get(ngpus, f"star{ngpus}")


@cache
def _vector(path: Path) -> Program:
    return load_program(path)


def _vector_case(path: Path, size: int, overhead: float) -> Case:
    def run() -> dict[str, Any]:
        program = _vector(path)
        topo = topology(_vector_topology(program.ngpus))
        return {"program": program_digest(program),
                **record(simulate_program(program, topo, size, SimOptions(step_overhead_us=overhead)))}
    rel = path.relative_to(VECTORS).as_posix()
    key = f"vector/{rel}/{size}" + (f"/overhead{overhead:g}" if overhead else "")
    return Case("programs", key, "vectors" if size == MB and not overhead else "vectors-sizes",
                size != MB or bool(overhead), run)


def _broken_case(path: Path) -> Case:
    """A broken vector: only its verdict (the verifier's message is not the timing's) and a wrong run's time."""
    def run() -> dict[str, Any]:
        try:
            program = load_program(path)
        except Exception as exc:  # the loader rejects it: nothing to time
            return {"loads": False, "kind": type(exc).__name__}
        topo = topology(_vector_topology(program.ngpus))
        got = record(simulate_program(program, topo, MB))
        return {"loads": True, "correct": got["correct"], "time_us": got["time_us"],
                "wrong_time_us": got["wrong_time_us"], "invalid": (got["error"] or "").startswith("invalid program")}
    return Case("programs", f"broken/{path.name}", "broken-vectors", False, run)


LOWERED = (("allgather", "ring"), ("allgather", "rd"), ("allgather", "direct"), ("reducescatter", "ring"),
           ("allreduce", "ring"), ("allreduce", "tree"), ("alltoall", "direct"), ("broadcast", "tree"),
           ("reduce", "ring"))


def program_cases() -> Iterator[Case]:
    for name in ("ring8", "dgx1", "dgx-a100", "ndv2x2", "dgx-a100x2"):
        topo = topology(name)
        for kind_name, algorithm in LOWERED:
            kind = CollectiveKind(kind_name)
            if algorithm not in applicable_baselines(topo, kind):
                continue
            for size in (MB, GB):
                yield _lowered_case(name, kind, algorithm, size, 0.0)
            yield _lowered_case(name, kind, algorithm, MB, 1.5)
    for path in sorted(VECTORS.glob("*.xml")):
        for size in SIZES:
            yield _vector_case(path, size, 0.0)
        yield _vector_case(path, MB, 2.0)
    for path in sorted((VECTORS / "broken").glob("*.xml")):
        yield _broken_case(path)


# ------------------------------------------------------------------ perturbed schedules
def perturbed(schedule: Schedule, seed: int, channels: int) -> Schedule:
    """Random extra waits (``after`` to earlier transfers, ``not_before_us``) and channel moves.

    Waits only delay transfers and the data semantics follow program order, so
    the result stays correct; it exercises the start rules and the timers.
    Only ``Random.random()`` draws decide, so the result is the same in every Python.
    """
    rng = random.Random(seed)
    out: list[Transfer] = []
    for i, t in enumerate(schedule.transfers):
        after = set(t.after)
        if i and rng.random() < 0.25:
            after.update(int(rng.random() * i) for _ in range(1 + int(rng.random() * 2)))
        not_before = t.not_before_us
        if rng.random() < 0.2:
            not_before = round(rng.random() * 30.0, 3)
        channel = int(rng.random() * channels) if rng.random() < 0.3 else t.channel
        out.append(replace(t, after=tuple(sorted(after)), not_before_us=not_before, channel=channel))
    return schedule.with_transfers(out)


PERTURBED = (("ring8", "allgather", "ring", 1), ("ring8", "allreduce", "tree", 2), ("dgx1", "reducescatter", "ring", 3),
             ("dgx-a100", "alltoall", "direct", 4), ("dgx-a100", "broadcast", "ring", 5),
             ("ndv2x2", "allreduce", "ring", 6), ("ndv2x2", "reduce", "tree", 7),
             ("dgx-a100x2", "allgather", "rd", 8), ("switch3", "allgather", "ring", 9),
             ("dgx2", "allreduce", "direct", 10))


def _perturbed_case(name: str, kind: str, algorithm: str, seed: int, size: int, overhead: float) -> Case:
    def run() -> dict[str, Any]:
        topo = topology(name)
        schedule = perturbed(baseline(topo, kind, algorithm, size_bytes=size), seed, 3)
        return {"schedule": schedule_digest(schedule), "transfers": len(schedule),
                **record(simulate(topo, schedule, size, SimOptions(step_overhead_us=overhead)))}
    return Case("perturbed", f"{name}/{kind}/{algorithm}/seed{seed}/{size}/overhead{overhead:g}", "perturbed",
                False, run)


def perturbed_cases() -> Iterator[Case]:
    for name, kind, algorithm, seed in PERTURBED:
        for size, overhead in ((KB, 0.0), (MB, 0.0), (MB, 0.8), (GB, 3.0)):
            yield _perturbed_case(name, kind, algorithm, seed, size, overhead)


# ------------------------------------------------------------------ invalid schedules
def _drop(schedule: Schedule, i: int) -> Schedule:
    return schedule.with_transfers(replace(t, after=tuple(a - (a > i) for a in t.after if a != i))
                                   for k, t in enumerate(schedule.transfers) if k != i)


def _mutations(schedule: Schedule, topo: Topology) -> Iterator[tuple[str, Schedule]]:
    ts = list(schedule.transfers)
    n = len(ts)
    yield "drop-first", _drop(schedule, 0)
    yield "drop-middle", _drop(schedule, n // 2)
    yield "drop-last", _drop(schedule, n - 1)
    # the last transfer first: it sends what its sender does not hold yet (or overwrites early)
    yield "last-first", schedule.with_transfers([ts[-1], *ts[:-1]])
    reductions = [i for i, t in enumerate(ts) if t.op is Op.REDUCE]
    if reductions:
        i = reductions[len(reductions) // 2]
        yield "double-reduce", schedule.with_transfers([*ts[:i + 1], ts[i], *ts[i + 1:]])
    # a wait cycle between the first two transfers
    yield "after-cycle", schedule.with_transfers([replace(ts[0], after=(1,)), replace(ts[1], after=(0,)), *ts[2:]])
    # the first transfer waits for the last (which, through the data, waits for the first)
    yield "first-after-last", schedule.with_transfers([replace(ts[0], after=(n - 1,)), *ts[1:]])
    bad = replace(ts[0], route=ts[0].route[:-1]) if len(ts[0].route) > 1 else replace(ts[0], route=(len(topo.links),))
    yield "bad-route", schedule.with_transfers([bad, *ts[1:]])
    yield "self-send", schedule.with_transfers([replace(ts[0], dst=ts[0].src), *ts[1:]])


INVALID = (("ring8", "allgather", "ring"), ("ring8", "allreduce", "ring"), ("dgx1", "reducescatter", "ring"),
           ("dgx-a100", "broadcast", "tree"), ("dgx-a100", "reduce", "tree"), ("switch3", "alltoall", "direct"),
           ("ndv2x2", "allreduce", "tree"))


def _invalid_case(name: str, kind: str, algorithm: str, mutation: str) -> Case:
    def run() -> dict[str, Any]:
        topo = topology(name)
        schedule = dict(_mutations(baseline(topo, kind, algorithm, size_bytes=MB), topo))[mutation]
        return {"schedule": schedule_digest(schedule), **record(simulate(topo, schedule, MB))}
    return Case("invalid", f"{name}/{kind}/{algorithm}/{mutation}", "invalid", False, run)


def invalid_cases() -> Iterator[Case]:
    for name, kind, algorithm in INVALID:
        topo = topology(name)
        for mutation, _ in _mutations(baseline(topo, kind, algorithm, size_bytes=MB), topo):
            yield _invalid_case(name, kind, algorithm, mutation)


# ------------------------------------------------------------------ all of it
def all_cases() -> list[Case]:
    return [*baseline_cases(), *program_cases(), *perturbed_cases(), *invalid_cases()]


SECTIONS = ("baselines", "programs", "perturbed", "invalid")


def _stored(value: Any) -> Any:
    """Floats to 12 significant digits (the comparison is to 1e-9), everything else as it is."""
    return float(f"{value:.12g}") if isinstance(value, float) and math.isfinite(value) else value


def load_golden() -> dict[str, dict[str, dict[str, Any]]]:
    """section -> case key -> record (the file stores each section as field names and one row per case)."""
    data = json.loads(GOLDEN.read_text())
    assert data["format"] == FORMAT
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for section in SECTIONS:
        fields = data[section]["fields"]
        out[section] = {key: {f: v for f, v in zip(fields, row, strict=True) if v is not None}
                        for key, row in data[section]["rows"].items()}
    return out


def differences(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Fields that differ (floats beyond :data:`REL`), as readable lines; empty when they agree."""
    out = []
    got = {f: v for f, v in got.items() if v is not None}
    for field in sorted(set(want) | set(got)):
        a, b = want.get(field), got.get(field)
        if isinstance(a, float) and isinstance(b, float):
            if not math.isclose(a, b, rel_tol=REL, abs_tol=1e-12):
                out.append(f"{field}: recorded {a!r}, now {b!r} (rel {abs(a - b) / max(abs(a), 1e-300):.2e})")
        elif a != b:
            out.append(f"{field}: recorded {a!r}, now {b!r}")
    return out


def produced_differently(want: dict[str, Any], got: dict[str, Any]) -> str | None:
    """Why a case no longer tests the simulator: its schedule or program is not the recorded one."""
    for field in ("schedule", "program"):
        if field in want and want[field] != got.get(field):
            return (f"the {field} itself changed ({want[field]} -> {got.get(field)}): a producer changed, "
                    "not the simulator; regenerate with .venv/bin/python tests/sim_golden.py")
    return None


def main(argv: list[str] | None = None) -> None:
    """Write the fixture: every case, or with ``--only TEXT`` (repeatable) only the cases whose key contains one
    of the texts (a producer that changed, e.g. ``--only /hier-lb/``), every other row kept as recorded."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--only", action="append", default=[], metavar="TEXT")
    only = parser.parse_args(argv).only
    recorded = load_golden() if only and GOLDEN.exists() else {}
    sections: dict[str, dict[str, dict[str, Any]]] = {section: {} for section in SECTIONS}
    for case in all_cases():
        kept = recorded.get(case.section, {}).get(case.key)
        if only and kept is not None and not any(text in case.key for text in only):
            sections[case.section][case.key] = kept
            continue
        started = time.perf_counter()
        sections[case.section][case.key] = case.run()
        print(f"{time.perf_counter() - started:8.2f} s  {case.section} {case.key}", file=sys.stderr, flush=True)
    dump = json.dumps
    parts = [f'{{"format": {dump(FORMAT)},\n"note": "written by tests/sim_golden.py, compared by '
             'tests/test_sim_golden.py"']
    for section, records in sections.items():  # one case per line, so a diff reads
        fields = sorted({f for r in records.values() for f in r})
        rows = ",\n".join(f"{dump(key)}: {dump([_stored(r.get(f)) for f in fields], separators=(',', ':'))}"
                          for key, r in records.items())
        parts.append(f'{dump(section)}: {{"fields": {dump(fields)}, "rows": {{\n{rows}}}}}')
    text = ",\n".join(parts) + "}"
    json.loads(text)
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    tmp = GOLDEN.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(GOLDEN)
    print(f"{GOLDEN}: {sum(len(s) for s in sections.values())} cases, {len(text)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
