"""Third-party MSCCL XML files (msccl-tools, RCCL): each loads, verifies and simulates; each broken one is caught.

The vectors and their manifests live in ``tests/vectors/msccl`` (see its README).
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

import pytest

from taccl_py.errors import XmlError
from taccl_py.library import resolve_topology
from taccl_py.msccl import XmlLoadError, load_program, simulate_program, verify_program
from taccl_py.topology import Link, Switch, Topology, check_topology

VECTORS = Path(__file__).parent / "vectors" / "msccl"


def _manifest(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


VALID = _manifest(VECTORS / "MANIFEST.tsv")
BROKEN = _manifest(VECTORS / "broken" / "MANIFEST.tsv")

# manifest verdict of each broken file -> the rule our verifier names
BROKEN_RULE = {
    "broken01-missing-attr-srcoff.xml": "missing-attribute",
    "broken02-step-s-not-position.xml": "step-index",
    "broken03-depid-nonexistent-tb.xml": "dangling-dependency",
    "broken04-sendrecv-channel-mismatch.xml": "unmatched-connection",
    "broken05-cnt-mismatch-send-recv.xml": "count-mismatch",
    "broken06-offset-beyond-o_chunks.xml": "offset-range",
    "broken07-dependency-cycle-intra-rank.xml": "deadlock",
    "broken08-deadlock-recv-before-send.xml": "deadlock",
    "broken09-allgather-chunk-never-arrives.xml": "wrong-result",
}


def star(n: int) -> Topology:
    links = []
    for g in range(n):
        links += [Link(g, "nvswitch", 100.0, 0.7), Link("nvswitch", g, 100.0, 0.7)]
    return check_topology(Topology(f"star{n}", n, tuple(links), switches=(Switch("nvswitch"),)))


@cache
def topology_for(ngpus: int) -> Topology:
    """A topology where every pair of ranks has a route through switches only."""
    return {8: resolve_topology("dgx-a100"), 16: resolve_topology("dgx2")}.get(ngpus) or star(ngpus)


def test_manifests_cover_the_folder() -> None:
    listed = {row["filename"] for row in VALID}
    assert listed == {p.name for p in VECTORS.glob("*.xml")}
    assert {row["filename"] for row in BROKEN} == {p.name for p in (VECTORS / "broken").glob("*.xml")}
    assert set(BROKEN_RULE) == {row["filename"] for row in BROKEN}


@pytest.mark.slow
@pytest.mark.parametrize("row", VALID, ids=lambda r: r["filename"])
def test_vector_loads_verifies_and_simulates(row: dict[str, str]) -> None:
    program = load_program(VECTORS / row["filename"])
    assert program.detected_dialect == row["dialect"]
    assert (program.coll, program.ngpus, program.nchunksperloop, program.nchannels, program.proto) == (
        row["coll"], int(row["ngpus"]), int(row["nchunksperloop"]), int(row["nchannels"]), row["proto"])
    report = verify_program(program)
    assert report.valid and report.correct, [str(e) for e in report.errors]
    assert report.modes == (("inplace",) if row["inplace"] == "1" else ("outofplace",))
    result = simulate_program(program, topology_for(program.ngpus), 1 << 20)
    assert result.correct and result.time_us is not None and result.time_us > 0
    assert result.busbw_GBps is not None


@pytest.mark.parametrize("row", [r for r in VALID if r["dialect"] == "v1"], ids=lambda r: r["filename"])
def test_v1_vectors_fail_the_v2_parser(row: dict[str, str]) -> None:
    """The manifest says the v2 parser rejects them: it needs outofplace/minBytes/maxBytes."""
    assert row["loads_in_v2_parser"].startswith("no")
    report = verify_program(load_program(VECTORS / row["filename"]), "v2")
    assert not report.valid
    assert "missing-attribute" in report.rules or "unknown-collective" in report.rules


@pytest.mark.parametrize("row", BROKEN, ids=lambda r: r["filename"])
def test_broken_vector_is_rejected_with_its_rule(row: dict[str, str]) -> None:
    path = VECTORS / "broken" / row["filename"]
    rule = BROKEN_RULE[row["filename"]]
    if rule == "missing-attribute":
        with pytest.raises(XmlError) as caught:
            load_program(path)
        assert isinstance(caught.value, XmlLoadError) and caught.value.rule == rule
        assert str(caught.value).startswith(f"{path}: line 21: step attribute 'srcoff'")
        return
    report = verify_program(load_program(path))
    assert rule in report.rules, [str(e) for e in report.errors]
    assert not report.correct
    if row["expected_verdict"].startswith("simulate->wrong result"):
        assert report.valid  # a wrong result is not a broken file
    else:
        assert not report.valid


def test_broken_messages_locate_the_fault() -> None:
    report = verify_program(load_program(VECTORS / "broken" / "broken09-allgather-chunk-never-arrives.xml"))
    (error,) = report.errors
    assert (error.rank, error.rule) == (5, "wrong-result") and "chunk 0" in error.message
    report = verify_program(load_program(VECTORS / "broken" / "broken02-step-s-not-position.xml"))
    assert {(e.rank, e.tb, e.step) for e in report.errors} == {(1, 0, 1), (1, 0, 2)}
    report = verify_program(load_program(VECTORS / "broken" / "broken08-deadlock-recv-before-send.xml"))
    assert "cycle" in report.errors[0].message and report.errors[0].rank in (0, 1)
