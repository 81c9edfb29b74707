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
    assert all("error" not in row for row in rows)
    failed = module._measure([module._TAccl, "simulate", "-t", str(tmp_path / "missing.json"), "-c", "allgather",
                              "-s", "1MB", "-a", "ring"], 60.0)
    assert failed["exit"] == 2 and "missing.json" in failed["error"] and failed["error"].startswith("taccl: error")
    shown = module.render({**data, "rows": [*rows, {"stage": module.STAGES[0], "gpus": 8, **failed}]}, tmp_path)
    assert "Failed: simulate ring (NCCL channels) at 8 GPUs (exit 2): `taccl: error" in shown


def test_synthesize_rows_run_again_where_the_method_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A synthesize row that timed out below 256 GPUs runs again from 256 (rail streams); other rows stay stopped."""
    spec = importlib.util.spec_from_file_location("bench_scaling_resume", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_topology", lambda gpus, workdir, kind: workdir / f"{kind}{gpus}.json")
    calls: list[tuple[str, int]] = []

    def fake(command: list[str], timeout_s: float) -> dict[str, object]:
        gpus = int("".join(ch for ch in Path(command[command.index("-t") + 1]).stem if ch.isdigit()))
        calls.append((command[1], gpus))
        return {"exit": "timeout" if gpus == 128 else 0, "wall_s": 1.0, "peak_rss_mib": 50.0, "time_us": None}

    monkeypatch.setattr(module, "_measure", fake)
    rows = module.measure([128, 256, 512], ("simulate tree AR", "synthesize AG"), 1.0)
    exits = {(r["stage"], r["gpus"]): r["exit"] for r in rows}
    assert exits == {("simulate tree AR", 128): "timeout", ("simulate tree AR", 256): "not run",
                     ("simulate tree AR", 512): "not run", ("synthesize AG", 128): "timeout",
                     ("synthesize AG", 256): 0, ("synthesize AG", 512): 0}
    assert calls == [("simulate", 128), ("synthesize", 128), ("synthesize", 256), ("synthesize", 512)]
