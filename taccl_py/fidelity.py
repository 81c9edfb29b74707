"""Predicted versus published nccl-tests busbw: the fidelity check of the calibrated runtime model.

A *case* is one published nccl-tests log kept under ``tests/data/nccl_tests/`` (its source in
``manifest.json`` there), the topology that models the machines it ran on, the number of ranks
and whether the log was used to calibrate (``role`` ``calibration``) or not (``held-out``). For
every row of the log the best NCCL-style baseline is simulated at that size under the topology's
runtime model (:func:`taccl_py.predict.predict_baseline`), and its busbw is compared with the
published out-of-place busbw (recomputed from the published time, so both use the same formula).

Targets (issue 17): within 10 % at sizes >= 1 MB, within 25 % below.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taccl_py.baselines import applicable_baselines
from taccl_py.collectives import Collective, parse_collective
from taccl_py.errors import InputError
from taccl_py.predict import Prediction, predict_baseline
from taccl_py.profiler.nccl_tests import BINARY_MODELS, parse_nccl_tests_log
from taccl_py.topology import Topology
from taccl_py.topology_io import load_topology
from taccl_py.units import algbw_gbps

__all__ = ["LARGE_BYTES", "LARGE_TARGET", "SMALL_TARGET", "FidelityCase", "FidelityRow", "load_cases", "predict_case"]

LARGE_BYTES = 1 << 20
"""Sizes from 1 MB on are held to :data:`LARGE_TARGET`."""
LARGE_TARGET = 0.10
SMALL_TARGET = 0.25
NCCL_ALGORITHMS = ("ring", "tree")
"""What NCCL itself runs for these collectives (without NVLS / CollNet): the prediction is the faster of the two."""


@dataclass(frozen=True)
class FidelityCase:
    """One published log and what it ran on."""

    name: str
    log: Path
    topology: Path
    collective: str
    ranks: int
    url: str
    role: str
    note: str = ""

    def load_topology(self) -> Topology:
        return load_topology(self.topology)


@dataclass(frozen=True)
class FidelityRow:
    """One size of a case: published and predicted busbw, the relative error and whether it meets its target."""

    size_bytes: int
    published_busbw: float
    predicted_busbw: float | None
    algorithm: str | None
    proto: str | None

    @property
    def error(self) -> float | None:
        if self.predicted_busbw is None or self.published_busbw <= 0:
            return None
        return self.predicted_busbw / self.published_busbw - 1.0

    @property
    def target(self) -> float:
        return LARGE_TARGET if self.size_bytes >= LARGE_BYTES else SMALL_TARGET

    @property
    def met(self) -> bool:
        return self.error is not None and abs(self.error) <= self.target

    def as_dict(self) -> dict[str, Any]:
        return {"size_bytes": self.size_bytes, "published_busbw_GBps": self.published_busbw,
                "predicted_busbw_GBps": self.predicted_busbw, "error": self.error, "target": self.target,
                "met": self.met, "algorithm": self.algorithm, "proto": self.proto}


def load_cases(directory: str | os.PathLike[str]) -> list[FidelityCase]:
    """The cases of ``directory/manifest.json``."""
    root = Path(directory)
    manifest = root / "manifest.json"
    try:
        raw = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the fidelity manifest ({exc})", where=str(manifest)) from None
    cases = []
    for k, entry in enumerate(raw.get("cases", [])):
        try:
            cases.append(FidelityCase(name=entry["name"], log=root / entry["log"], topology=root / entry["topology"],
                                      collective=entry["collective"], ranks=int(entry["ranks"]), url=entry["url"],
                                      role=entry["role"], note=entry.get("note", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"bad entry ({exc})", where=f"{manifest}: cases[{k}]") from None
    return cases


def predict_case(case: FidelityCase, *, max_rows: int | None = None) -> list[FidelityRow]:
    """Every row of the case's log (the first run in it), predicted with the topology's runtime model."""
    topology = case.load_topology()
    if topology.runtime is None:
        raise InputError("the topology has no runtime model to predict with", where=str(case.topology))
    if topology.num_gpus != case.ranks:
        raise InputError(f"{case.ranks} ranks but the topology has {topology.num_gpus} GPUs", where=case.name)
    kind = parse_collective(case.collective)
    factor = Collective(kind, case.ranks).busbw_factor
    run = parse_nccl_tests_log(case.log)[0]
    if run.binary is not None and BINARY_MODELS[run.binary].collective != kind.value:
        raise InputError(f"the log is {run.binary}, not {kind.value}", where=str(case.log))
    names = [n for n in applicable_baselines(topology, kind) if n in NCCL_ALGORITHMS]
    rows: list[FidelityRow] = []
    for row in run.rows[:max_rows]:
        if row.size_bytes < case.ranks * 4:  # fewer elements than ranks: nccl-tests' figure is not a collective
            continue
        published = algbw_gbps(row.size_bytes, row.time_us_out) * factor
        best: tuple[float, str, Prediction] | None = None
        for name in names:
            pred = predict_baseline(topology, kind, name, row.size_bytes, topology.runtime)
            time_us = pred.sim.time_us
            if time_us is not None and (best is None or time_us < best[0]):
                best = (time_us, name, pred)
        if best is None:
            rows.append(FidelityRow(row.size_bytes, published, None, None, None))
            continue
        _, name, pred = best
        rows.append(FidelityRow(row.size_bytes, published, pred.sim.busbw_GBps, name, pred.protocol.value))
    return rows
