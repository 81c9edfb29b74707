"""Predicted versus published nccl-tests busbw: the fidelity check of the calibrated runtime model.

A *case* is a published run kept under ``tests/data/nccl_tests/`` (its source in ``manifest.json``
there): an nccl-tests log (``log``) or a published table of sizes and busbw or times (``table``,
:mod:`taccl_py.profiler.tables`), the topology that models the machines it ran on (a file there or
a shipped name), the collective, the ranks, how nccl-tests was launched (``harness``) and its role:

* ``calibration``: rows the runtime figures were fitted on (``taccl profile fit --runtime``);
* ``held-out``: rows no figure was fitted on.

``harness``: ``per-rank`` (one GPU per process, MPI or torchrun: what applications run) or a name of
the manifest's ``harness`` object, one per host whose ``all_reduce_perf -g 8`` cost is known (one thread
launches every GPU's kernel in turn: a host cost per collective, which differs between hosts), fitted on a
declared calibration case. An entry gives either a launch offset (``launch_offset_us``), added to the model's
launch overheads, or an overlapped host cost (``host_us`` and ``host_per_channel_us``,
:class:`taccl_py.harness.OverlappedHost`): a row then takes the longer of the predicted GPU time and the host's
time on the channels NCCL's choice runs on. ``sizes`` (``LO:HI``) keeps a log's or table's rows of those sizes only (a log split into
calibration and held-out sizes). ``algorithms`` and ``protocols`` name what the run allowed (its NCCL_ALGO and
NCCL_PROTO, or what it is known or taken to have run, which its note says); without them NCCL's choice among all
is predicted.

For every row NCCL's choice is simulated (:func:`taccl_py.predict.predict_nccl`: the fastest of
its algorithms and protocols) under the topology's runtime model, and the predicted busbw is
compared with the published one (a log's out-of-place time as busbw, a table's published figure).
A log also measured each size in place: where its two times are too far apart for any prediction to be
within the row's target of both, the run disagrees with itself (:attr:`FidelityRow.run_disagrees`);
such rows are reported, and still judged on the out-of-place time.

Targets (issue 17): within 10 % at sizes >= 1 MB, within 25 % below.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taccl_py.collectives import Collective, CollectiveKind, parse_collective
from taccl_py.errors import InputError
from taccl_py.harness import OverlappedHost
from taccl_py.predict import overlapped_time_us, predict_nccl
from taccl_py.profiler.nccl_tests import BINARY_MODELS, parse_nccl_tests_log
from taccl_py.profiler.tables import read_timing_table
from taccl_py.runtime import NCCL_ALGORITHM_NAMES, Protocol, RuntimeModel, with_launch_offset
from taccl_py.topology import Topology
from taccl_py.units import algbw_gbps, parse_size_bounds

__all__ = ["LARGE_BYTES", "LARGE_TARGET", "PER_RANK", "ROLES", "SMALL_TARGET", "FidelityCase", "FidelityRow",
           "PublishedRow", "harness_hosts", "harness_offsets", "load_cases", "measured_busbw", "predict_case", "predict_row",
           "published_rows", "target_for", "too_far_apart"]

LARGE_BYTES = 1 << 20
"""Sizes from 1 MB on are held to :data:`LARGE_TARGET`."""
LARGE_TARGET = 0.10
SMALL_TARGET = 0.25
ROLES = ("calibration", "held-out")
KNOWN_ALGORITHMS = NCCL_ALGORITHM_NAMES
"""What a case's ``algorithms`` (its run's ``NCCL_ALGO``) may name."""
PER_RANK = "per-rank"
"""The harness of one GPU per process: no launch offset (the model's own launch costs)."""


def target_for(size_bytes: int) -> float:
    """The relative error a prediction of this size is held to: :data:`LARGE_TARGET` from 1 MB, else
    :data:`SMALL_TARGET`."""
    return LARGE_TARGET if size_bytes >= LARGE_BYTES else SMALL_TARGET


def too_far_apart(a: float, b: float, target: float) -> bool:
    """Two positive measurements of one quantity (times or busbw) that no single prediction is within ``target``
    (relative) of both: the larger exceeds the smaller by more than (1 + target) / (1 - target)."""
    low, high = sorted((a, b))
    return high * (1.0 - target) > low * (1.0 + target)


@dataclass(frozen=True)
class FidelityCase:
    """One published run and what it ran on."""

    name: str
    source: Path
    source_kind: str  # "log" or "table"
    topology: str
    collective: str
    ranks: int
    url: str
    role: str
    harness: str = "per-rank"
    hardware: str = ""
    note: str = ""
    select: dict[str, str] = field(default_factory=dict)
    """Table rows whose extra columns have these values (a table holding several runs)."""
    rows: str = "all"
    """``all``, or ``even`` / ``odd``: every other row (a log split into calibration and held-out rows)."""
    algorithms: tuple[str, ...] | None = None
    """The algorithms the run allowed (its ``NCCL_ALGO``), or is known or taken to have run (its ``note`` says
    which); None: NCCL's own choice."""
    protocols: tuple[Protocol, ...] | None = None
    """The protocols the run allowed (its ``NCCL_PROTO``, known or taken, as for ``algorithms``); None: all of
    NCCL's (within the runtime model's own)."""
    sizes: tuple[int, int] | None = None
    """Only the rows of sizes in this range (bytes, both ends included); None: every size."""

    @property
    def kind(self) -> CollectiveKind:
        return parse_collective(self.collective)

    def load_topology(self, directory: Path) -> Topology:
        from taccl_py.library import resolve_topology

        path = directory / self.topology
        return resolve_topology(str(path) if path.is_file() else self.topology)


@dataclass(frozen=True)
class PublishedRow:
    """A published size with its busbw (GB/s) and where it was read."""

    size_bytes: int
    busbw_GBps: float
    origin: str
    in_place_busbw_GBps: float | None = None
    """The busbw of the same size measured in place (a log's second time); None for a table."""


@dataclass(frozen=True)
class FidelityRow:
    """One size of a case: published and predicted busbw, the relative error and whether it meets its target."""

    size_bytes: int
    published_busbw: float
    predicted_busbw: float | None
    algorithm: str | None
    proto: str | None
    predicted_us: float | None = None
    """The predicted time (us) of NCCL's choice (None when nothing was predicted, or not kept)."""
    in_place_busbw: float | None = None
    """The run's in-place busbw at this size (None: not measured twice, as a published table)."""

    @property
    def error(self) -> float | None:
        if self.predicted_busbw is None or self.published_busbw <= 0:
            return None
        return self.predicted_busbw / self.published_busbw - 1.0

    @property
    def in_place_error(self) -> float | None:
        """The prediction's error against the in-place measurement (None without one)."""
        if self.predicted_busbw is None or not self.in_place_busbw:
            return None
        return self.predicted_busbw / self.in_place_busbw - 1.0

    @property
    def run_spread(self) -> float | None:
        """How far the run's in-place busbw is from its out-of-place one (relative; None without both)."""
        if not self.in_place_busbw or self.published_busbw <= 0:
            return None
        return self.in_place_busbw / self.published_busbw - 1.0

    @property
    def off_band(self) -> bool:
        """The run's in-place busbw lies outside the target band around its out-of-place one (a spread that
        matters at this size's target)."""
        spread = self.run_spread
        return spread is not None and abs(spread) > self.target

    @property
    def met_in_place_only(self) -> bool:
        """Missed against the out-of-place time, within target of the in-place one, the two times neither too far
        apart for any prediction nor within the band of each other: the run's own spread is part of the miss."""
        error = self.in_place_error
        return (not self.met and self.off_band and not self.run_disagrees and error is not None
                and abs(error) <= self.target)

    @property
    def run_disagrees(self) -> bool:
        """The run's two measurements of this size are too far apart for any prediction to be within the target
        of both (the larger busbw over the smaller beyond (1 + target) / (1 - target)): a warm-up or a disturbed
        iteration, usually, not something a model of the machine can follow."""
        if not self.in_place_busbw or self.published_busbw <= 0:
            return False
        return too_far_apart(self.published_busbw, self.in_place_busbw, self.target)

    @property
    def target(self) -> float:
        return target_for(self.size_bytes)

    @property
    def met(self) -> bool:
        return self.error is not None and abs(self.error) <= self.target

    def as_dict(self) -> dict[str, Any]:
        return {"size_bytes": self.size_bytes, "published_busbw_GBps": self.published_busbw,
                "predicted_busbw_GBps": self.predicted_busbw, "error": self.error, "target": self.target,
                "met": self.met, "algorithm": self.algorithm, "proto": self.proto, "predicted_us": self.predicted_us,
                "in_place_busbw_GBps": self.in_place_busbw, "in_place_error": self.in_place_error,
                "run_spread": self.run_spread, "run_disagrees": self.run_disagrees,
                "met_in_place_only": self.met_in_place_only}


def _manifest(directory: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    root = Path(directory)
    manifest = root / "manifest.json"
    try:
        raw = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the fidelity manifest ({exc})", where=str(manifest)) from None
    if not isinstance(raw, dict):
        raise InputError("must be an object", where=str(manifest))
    return root, raw


def load_cases(directory: str | os.PathLike[str]) -> list[FidelityCase]:
    """The cases of ``directory/manifest.json``."""
    root, raw = _manifest(directory)
    where = str(root / "manifest.json")
    offsets, hosts = _harnesses(raw, where)
    harnesses = {**offsets, **hosts}
    cases = []
    entries = raw.get("cases", [])
    if not isinstance(entries, list):
        raise InputError("cases must be a list", where=where)
    for k, entry in enumerate(entries):
        at = f"{where}: cases[{k}]"
        if not isinstance(entry, dict):
            raise InputError("must be an object", where=at)
        if not isinstance(entry.get("select", {}), dict):
            raise InputError("select must be an object of column: value", where=at)
        algorithms = entry.get("algorithms")
        if algorithms is not None and (not isinstance(algorithms, list) or not algorithms
                                       or not all(a in KNOWN_ALGORITHMS for a in algorithms)):
            raise InputError(f"algorithms must be a non-empty list of {', '.join(KNOWN_ALGORITHMS)} "
                             f"(got {algorithms!r})", where=at)
        protocols = entry.get("protocols")
        known_protocols = [p.value for p in Protocol]
        if protocols is not None and (not isinstance(protocols, list) or not protocols
                                      or not all(p in known_protocols for p in protocols)):
            raise InputError(f"protocols must be a non-empty list of {', '.join(known_protocols)} "
                             f"(got {protocols!r})", where=at)
        sizes = entry.get("sizes")
        if sizes is not None and not isinstance(sizes, str):
            raise InputError(f"sizes must be a range LO:HI (got {sizes!r})", where=at)
        bounds = None if sizes is None else parse_size_bounds(sizes, where=f"{at}: sizes")
        try:
            has_log, has_table = "log" in entry, "table" in entry
            if has_log == has_table:
                raise InputError("give exactly one of log and table", where=at)
            case = FidelityCase(
                name=entry["name"], source=root / (entry["log"] if has_log else entry["table"]),
                source_kind="log" if has_log else "table", topology=entry["topology"],
                collective=entry["collective"], ranks=int(entry["ranks"]), url=entry["url"], role=entry["role"],
                harness=entry.get("harness", "per-rank"), hardware=entry.get("hardware", ""),
                note=entry.get("note", ""), select={str(a): str(b) for a, b in entry.get("select", {}).items()},
                rows=entry.get("rows", "all"),
                algorithms=tuple(entry["algorithms"]) if "algorithms" in entry else None,
                protocols=None if protocols is None else tuple(Protocol(p) for p in protocols),
                sizes=bounds)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"bad entry ({exc})", where=at) from None
        if case.role not in ROLES:
            raise InputError(f"role must be one of {', '.join(ROLES)} (got {case.role!r})", where=at)
        if case.harness not in harnesses:
            raise InputError(f"harness must be {PER_RANK} or a name of the manifest's harness object "
                             f"({', '.join(sorted(harnesses))}; got {case.harness!r})", where=at)
        if case.rows not in ("all", "even", "odd"):
            raise InputError(f"rows must be all, even or odd (got {case.rows!r})", where=at)
        cases.append(case)
    return cases


def harness_offsets(directory: str | os.PathLike[str]) -> dict[str, float]:
    """Launch offset (us) of each harness that adds one: ``per-rank`` (0) and every entry of the manifest's
    ``harness`` object that gives ``launch_offset_us``."""
    root, raw = _manifest(directory)
    return _harnesses(raw, str(root / "manifest.json"))[0]


def harness_hosts(directory: str | os.PathLike[str]) -> dict[str, OverlappedHost]:
    """The overlapped host cost of each harness of the manifest's ``harness`` object that gives ``host_us``."""
    root, raw = _manifest(directory)
    return _harnesses(raw, str(root / "manifest.json"))[1]


def _us(entry: dict[str, Any], key: str, name: str, where: str) -> float:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e6:
        raise InputError(f"harness {name!r}: {key} must be a number of us in 0..1e6 (got {value!r})", where=where)
    return float(value)


_HARNESS_KEYS = {"calibrated_on", "about"}
"""The keys of a harness entry besides its cost: what it was fitted on and what it is."""


def _harnesses(raw: dict[str, Any], where: str) -> tuple[dict[str, float], dict[str, OverlappedHost]]:
    offsets = {PER_RANK: 0.0}
    hosts: dict[str, OverlappedHost] = {}
    harnesses = raw.get("harness", {})
    if not isinstance(harnesses, dict):
        raise InputError("harness must be an object", where=where)
    for name, entry in harnesses.items():
        if name == PER_RANK or not isinstance(entry, dict) or ("launch_offset_us" in entry) == ("host_us" in entry):
            raise InputError(f"harness {name!r}: expected an object with launch_offset_us, or host_us (and "
                             f"host_per_channel_us), and a name other than {PER_RANK}, whose offset is 0",
                             where=where)
        unknown = sorted(set(entry) - _HARNESS_KEYS - ({"launch_offset_us"} if "launch_offset_us" in entry
                                                          else {"host_us", "host_per_channel_us"}))
        if unknown:
            raise InputError(f"harness {name!r}: unknown key(s) {', '.join(unknown)} (an added cost gives "
                             "launch_offset_us, an overlapping one host_us and host_per_channel_us)", where=where)
        if "launch_offset_us" in entry:
            offsets[name] = _us(entry, "launch_offset_us", name, where)
        else:
            per_channel = _us(entry, "host_per_channel_us", name, where) if "host_per_channel_us" in entry else 0.0
            hosts[name] = OverlappedHost(_us(entry, "host_us", name, where), per_channel)
    return offsets, hosts


def published_rows(case: FidelityCase) -> list[PublishedRow]:
    """The case's published rows (the first run of a log; a table's selected rows), every other one if asked."""
    kind = case.kind
    out: list[PublishedRow] = []
    if case.source_kind == "log":
        run = parse_nccl_tests_log(case.source)[0]
        if run.binary is not None and BINARY_MODELS[run.binary].collective != kind.value:
            raise InputError(f"the log is {run.binary}, not {kind.value}", where=str(case.source))
        for row in run.rows:
            if row.size_bytes < case.ranks * 4:  # fewer elements than ranks: not a collective in nccl-tests' sense
                continue
            in_place = (None if row.time_us_in is None
                        else measured_busbw(kind, case.ranks, row.size_bytes, row.time_us_in))
            out.append(PublishedRow(row.size_bytes, measured_busbw(kind, case.ranks, row.size_bytes, row.time_us_out),
                                    f"{case.source}: line {row.line}", in_place))
    else:
        for trow in read_timing_table(case.source):
            if trow.kind is not kind or any(trow.extra.get(k) != v for k, v in case.select.items()):
                continue
            out.append(PublishedRow(trow.size_bytes, trow.busbw(case.ranks), trow.origin))
    if case.sizes is not None:
        lo, hi = case.sizes
        out = [r for r in out if lo <= r.size_bytes <= hi]
    if case.rows != "all":
        out = out[0 if case.rows == "even" else 1::2]
    if not out:
        raise InputError("no published row is kept (see its sizes, rows and select)", where=case.name)
    return out


def case_model(case: FidelityCase, topology: Topology, offsets: dict[str, float]) -> RuntimeModel:
    """The topology's runtime model with the case's harness launch offset added (none for a harness whose host
    cost overlaps the GPUs' work)."""
    model = topology.runtime
    if model is None:
        raise InputError("the topology has no runtime model to predict with", where=case.topology)
    return with_launch_offset(model, offsets.get(case.harness, 0.0))


def predict_case(case: FidelityCase, directory: str | os.PathLike[str], *,
                 max_rows: int | None = None) -> list[FidelityRow]:
    """Every published row of the case, predicted with the topology's runtime model."""
    root = Path(directory)
    topology = case.load_topology(root)
    if topology.num_gpus != case.ranks:
        raise InputError(f"{case.ranks} ranks but the topology has {topology.num_gpus} GPUs", where=case.name)
    offsets, hosts = _harnesses(_manifest(root)[1], str(root / "manifest.json"))
    model = case_model(case, topology, offsets)
    return [predict_row(topology, model, case.kind, pub.size_bytes, pub.busbw_GBps, algorithms=case.algorithms,
                        protocols=case.protocols, in_place_busbw=pub.in_place_busbw_GBps,
                        host=hosts.get(case.harness))
            for pub in published_rows(case)[:max_rows]]


def predict_row(topology: Topology, model: RuntimeModel, kind: CollectiveKind, size_bytes: int,
                published_busbw: float, *, algorithms: tuple[str, ...] | None = None,
                protocols: tuple[Protocol, ...] | None = None,
                in_place_busbw: float | None = None, host: OverlappedHost | None = None) -> FidelityRow:
    """One published size against NCCL's predicted choice under ``model`` (among ``algorithms`` and ``protocols``,
    None: all of NCCL's); the predicted busbw is None when no algorithm applies or completes. ``in_place_busbw``:
    the same run's in-place measurement of the size, kept beside it. ``host``: the harness's host cost, which
    overlaps the GPUs' work (the row takes the longer of the two; NCCL's choice is the GPUs' fastest)."""
    best = predict_nccl(topology, kind, size_bytes, model, algorithms=algorithms, protocols=protocols)
    if best is None:
        return FidelityRow(size_bytes, published_busbw, None, None, None, in_place_busbw=in_place_busbw)
    name, pred = best
    time_us, busbw = pred.sim.time_us, pred.sim.busbw_GBps
    if host is not None and time_us is not None:
        time_us = overlapped_time_us(host, time_us, name, kind, pred.protocol, size_bytes, topology, model)
        assert time_us is not None
        busbw = measured_busbw(kind, topology.num_gpus, size_bytes, time_us)
    return FidelityRow(size_bytes, published_busbw, busbw, name, pred.protocol.value, time_us, in_place_busbw)


def measured_busbw(kind: CollectiveKind, ranks: int, size_bytes: int, time_us: float) -> float:
    """The busbw (GB/s) nccl-tests prints for a collective of ``size_bytes`` that took ``time_us``."""
    return algbw_gbps(size_bytes, time_us) * Collective(kind, ranks).busbw_factor
