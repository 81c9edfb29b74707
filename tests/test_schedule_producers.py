"""Every producer of schedules through the one round-trip oracle (``tests/helpers.py``).

The baselines, the synthesizer and MSCCL XML loaded from a file are judged by the
same contract: correct in the simulator, lowered XML that loads back unchanged,
verifies valid and correct, and takes the simulator's time. Hand-written schedules
and random topologies go through the same oracle in ``test_msccl_lowering.py``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
from helpers import round_trip, star, xml_round_trip

from taccl_py import baselines
from taccl_py.collectives import CollectiveKind
from taccl_py.library import resolve_topology
from taccl_py.msccl import load_program, lower_schedule
from taccl_py.synthesis import SynthesisOptions, synthesize

VECTORS = Path(__file__).parent / "vectors" / "msccl"
SIZES = (1 << 10, 1 << 24)
"""A latency-bound and a bandwidth-bound size: baselines and the synthesizer tune for the size."""


SLOW = pytest.mark.slow
BASELINE_CASES = [pytest.param(name, size, marks=[SLOW] if heavy else [], id=f"{name}-{size}")
                  for name, heavy_sizes in (("ring8", (1 << 24,)), ("dgx-a100", (1 << 24,)), ("dgx1", SIZES),
                                            ("ndv2x2", SIZES), ("dgx-a100x2", SIZES))
                  for size in SIZES for heavy in [size in heavy_sizes]]


@pytest.mark.parametrize(("name", "size"), BASELINE_CASES)
def test_every_baseline_passes_the_round_trip(name: str, size: int) -> None:
    topology = resolve_topology(name)
    seen = 0
    for kind in CollectiveKind:
        for algorithm in baselines.applicable_baselines(topology, kind):
            round_trip(baselines.baseline(topology, kind, algorithm, size_bytes=size), topology, size)
            seen += 1
    assert seen >= len(CollectiveKind)


@pytest.mark.parametrize("size", [SIZES[0], pytest.param(SIZES[1], marks=SLOW)])
@pytest.mark.parametrize("kind", list(CollectiveKind))
def test_synthesized_schedules_pass_the_round_trip(kind: CollectiveKind, size: int) -> None:
    topology = resolve_topology("dgx-a100")
    # the deterministic work budget ends the solve; the wall-clock guard is far (a loaded machine must not
    # stop it early and hand back another schedule)
    result = synthesize(topology, kind, size, SynthesisOptions(time_limit_s=120))
    round_trip(result.schedule, topology, size)


@SLOW
@pytest.mark.parametrize("kind", [CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE, CollectiveKind.ALLTOALL])
def test_synthesized_multi_machine_schedules_pass_the_round_trip(kind: CollectiveKind) -> None:
    topology = resolve_topology("ndv2x2")
    result = synthesize(topology, kind, 1 << 20, SynthesisOptions(time_limit_s=4))
    round_trip(result.schedule, topology, 1 << 20)


def _vectors() -> list[Any]:
    """Every shipped vector; the 4-rank ones also run in ``make test-fast``."""
    with (VECTORS / "MANIFEST.tsv").open(newline="") as handle:
        names = [row["filename"] for row in csv.DictReader(handle, delimiter="\t")]
    return [pytest.param(name, marks=[] if "-n4-" in name else [SLOW], id=name) for name in names]


@pytest.mark.parametrize("filename", _vectors())
def test_loaded_xml_passes_the_round_trip(filename: str) -> None:
    program = load_program(VECTORS / filename)
    topology = resolve_topology("dgx-a100") if program.ngpus == 8 else (
        resolve_topology("dgx2") if program.ngpus == 16 else star(program.ngpus, 100.0, 0.7, "nvswitch"))
    xml_round_trip(program, topology, 1 << 20, dialect=program.detected_dialect)


def test_the_oracle_catches_a_wrong_schedule() -> None:
    """A schedule missing one transfer fails the oracle: it cannot pass silently."""
    topology = resolve_topology("ring8")
    schedule = baselines.baseline(topology, CollectiveKind.ALLGATHER, "ring", size_bytes=1 << 20)
    broken = schedule.with_transfers(schedule.transfers[:-1])
    with pytest.raises(AssertionError):
        round_trip(broken, topology)
    with pytest.raises(AssertionError):
        xml_round_trip(lower_schedule(broken, topology), topology)
