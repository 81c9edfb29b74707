"""The whole-curve benchmark's comparison (benchmarks/bench_curve.py): the fastest baseline the runtime can load,
and the rows of topologies not re-measured kept with their date."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_curve  # noqa: E402
import harness  # noqa: E402


def _row(time_us: float, **extra: Any) -> dict[str, Any]:
    return {"topology": "dgx-a100x4", "gpus": 32, "collective": "allreduce", "size": 1 << 30, "correct": True,
            "time_us": time_us, "algorithm": "synthesized", "synthesized_us": time_us, "bound_us": 8000.0,
            "efficiency": 8000.0 / time_us, "baselines_us": {"ring": 9000.0, "hier-lb": 8100.0, "hier": None},
            "wall_s": 1.0, **extra}


def test_a_refused_baseline_counts_with_its_fewer_splits_file() -> None:
    # hier-lb (8,100 us) could not be lowered; with 16 splits its file takes 8,300 us: the loadable best
    row = _row(8126.0, xml_refused=[{"algorithm": "baseline hier-lb", "time_us": 8100.0}],
               xml_fallbacks=[{"algorithm": "baseline hier-lb (16 splits)", "time_us": 8300.0}])
    assert bench_curve.best_baseline(row) == ("hier-lb", 8100.0)
    assert bench_curve.best_writable_baseline(row) == ("hier-lb (16 splits)", 8300.0)
    assert not bench_curve._slower_than_baseline(row)
    assert bench_curve._slower_than_baseline(row, writable=False)
    assert "hier-lb (16 splits) 8,300 (fastest hier-lb 8,100: no file)" in bench_curve._fmt_row(row)
    # refused without a file that fits: the next baseline (the ring) is the loadable best
    bare = _row(8126.0, xml_refused=[{"algorithm": "baseline hier-lb", "time_us": 8100.0}])
    assert bench_curve.best_writable_baseline(bare) == ("ring", 9000.0)
    # a row measured before the refusals were recorded compares with the fastest baseline, as it did
    assert bench_curve.best_writable_baseline(_row(8126.0)) == ("hier-lb", 8100.0)
    assert bench_curve._slower_than_baseline(_row(8126.0))


def test_a_baseline_the_runtime_would_skip_counts_with_its_rebuilt_form() -> None:
    # the ring (8,100 us) has nchunksperloop 96, which 2^28 elements are not a multiple of; rebuilt with 16
    # channels it takes 8,400 us: that is the best baseline the runtime would run
    row = _row(8126.0, baselines_unselected=["ring", "hier-lb"], baselines_rebuilt_us={"ring": 8400.0},
               baselines_us={"ring": 8000.0, "hier-lb": 8100.0, "tree": 8600.0})
    assert bench_curve.best_baseline(row) == ("ring", 8000.0)
    assert bench_curve.best_writable_baseline(row) == ("ring", 8400.0)
    assert not bench_curve._slower_than_baseline(row) and bench_curve._slower_than_baseline(row, writable=False)
    # without a rebuilt form the next baseline the runtime selects is the one
    assert bench_curve.best_writable_baseline({**row, "baselines_rebuilt_us": {}}) == ("tree", 8600.0)


def test_the_summary_names_both_comparisons() -> None:
    rows = [_row(8126.0, xml_refused=[{"algorithm": "baseline hier-lb", "time_us": 8100.0}],
                 xml_fallbacks=[{"algorithm": "baseline hier-lb (16 splits)", "time_us": 8300.0}]),
            {**_row(8200.0), "size": 1 << 32, "measured": "2026-11-26 22:54"}]
    data = {"sizes": [1 << 30, 1 << 32], "time_limit_s": 60, "jobs": 1,
            "environment": {"TACCL_CURVE_TOPOLOGIES": "dgx-a100x4"}}
    text = "\n".join(bench_curve._summary(rows, [], data))
    assert "Never slower than the best baseline the runtime can load: 1 of 2 points (slower at dgx-a100x4 " \
           "allreduce 4GB)" in text
    assert "cannot be written as a loadable MSCCL file" in text and "1 points (dgx-a100x4 allreduce 1GB)" in text
    assert "This run measured dgx-a100x4 (with TACCL_CURVE_TOPOLOGIES=dgx-a100x4); rows of dgx-a100x4 are carried " \
           "over from the run of 2026-11-26 22:54 (not re-measured)." in text
    assert "1 point at a time" in text
    assert "read back from its resume file" not in text
    assert "7 of this run's points were read back from its resume file" in "\n".join(
        bench_curve._summary(rows, [], {**data, "resumed": 7}))


def test_rows_of_other_topologies_are_carried_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    stored = {"date": "2026-11-26 22:54", "data": {"rows": [
        {**_row(1.0), "topology": "ndv2x2"}, {**_row(2.0), "topology": "dgx-a100x4"},
        {**_row(3.0), "topology": "dgx2x2", "measured": "2026-11-25 08:00"}]}}
    (tmp_path / "curve.json").write_text(json.dumps(stored))
    kept = bench_curve._carried_rows({"dgx-a100x4"})
    assert [(r["topology"], r["measured"]) for r in kept] == [("ndv2x2", "2026-11-26 22:54"),
                                                              ("dgx2x2", "2026-11-25 08:00")]


def test_resumed_points_are_counted_even_after_a_cut_line(tmp_path: Path) -> None:
    """An interrupted run leaves its last line half-written: the count repairs it as the runner does."""
    path = tmp_path / "resume.jsonl"
    done = {"key": "a|allreduce|1024|tl=60", "job": {}, "result": {"time_us": 1.0}, "error": None, "measured": {}}
    other = {**done, "key": "b|allreduce|1024|tl=60"}
    path.write_text(json.dumps(done) + "\n" + json.dumps(other) + "\n" + json.dumps(done)[:20], encoding="utf-8")
    assert bench_curve._resumed_points(str(path), {"a|allreduce|1024|tl=60", "c|allgather|1024|tl=60"}) == 1
    assert bench_curve._resumed_points(None, {"a|allreduce|1024|tl=60"}) == 0
