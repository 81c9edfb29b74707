"""The scaling benchmark (benchmarks/bench_scaling.py) in its tiny mode: it runs the real commands and renders."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_scaling.py"


@pytest.mark.slow
def test_tiny_scaling_run_measures_and_renders(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_scaling", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_scaling"] = module
    spec.loader.exec_module(module)
    data = module.run_tiny()
    rows = data["rows"]
    assert {(r["stage"], r["gpus"]) for r in rows} == {(s, n) for s in module.STAGES[:3] for n in (8, 16)}
    for row in rows:
        assert row["exit"] == 0 and row["wall_s"] > 0 and row["peak_rss_mib"] > 10 and row["time_us"] > 0
    text = module.render(data, tmp_path)
    assert "| simulate ring (NCCL channels) |" in text and " s / " in text
    assert module.fitted_growth([{"stage": "s", "gpus": n, "exit": 0, "wall_s": float(n) ** 2} for n in (2, 4, 8)],
                                "s") == 2.0
