"""The benchmark harness (benchmarks/harness.py): sections rendered from stored JSON, foreign sections kept,
the README block rewritten; and every benchmark module still renders the committed results."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import harness  # noqa: E402


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The harness writing into tmp_path instead of benchmarks/ and the README."""
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(harness, "FIGURES_DIR", tmp_path / "figures")
    monkeypatch.setattr(harness, "RESULTS_MD", tmp_path / "RESULTS.md")
    monkeypatch.setattr(harness, "README", tmp_path / "README.md")
    monkeypatch.setattr(harness, "HERE", tmp_path)
    (tmp_path / "README.md").write_text(f"# x\n\n{harness.README_START}\nold\n{harness.README_END}\n\nafter\n")
    return tmp_path


def fake_benchmark() -> harness.Benchmark:
    module = types.ModuleType("bench_fake")

    def run(quick: bool) -> dict[str, Any]:
        return {"value": 3 if quick else 4}

    def render(data: dict[str, Any], figures: Path) -> str:
        (figures / "fake.png").write_bytes(b"png")
        return f"value {data['value']}\n\n![fake](figures/fake.png)"

    def headline(data: dict[str, Any]) -> list[list[str]]:
        return [["fake instance", f"value {data['value']}", "1 s"]]

    module.run, module.render, module.headline = run, render, headline  # type: ignore[attr-defined]
    return harness.Benchmark("fake", "Fake", 5, module)


def test_results_and_readme_are_rendered_from_the_json(sandbox: Path) -> None:
    bench = fake_benchmark()
    envelope = harness.run_benchmark(bench, True, "make bench")
    assert envelope["mode"] == "quick" and envelope["data"] == {"value": 3}
    stored = json.loads((sandbox / "results" / "fake.json").read_text())
    assert stored["machine"]["cpus"] and "python" in stored["machine"] and stored["command"] == "make bench"
    (sandbox / "results" / "other.md").write_text("## Other\n\nwritten by another script\n")  # a foreign section
    text = harness.render_results([bench])
    assert text.startswith("# Benchmark results") and "Latest run:" in text
    assert text.index("## Fake") < text.index("## Other")  # protocol sections first, foreign ones kept
    assert "value 3" in text and "written by another script" in text and "with `make bench`" in text
    assert (sandbox / "figures" / "fake.png").exists()
    harness.render_readme([bench], None)
    readme = (sandbox / "README.md").read_text()
    assert "old" not in readme and "| fake instance | value 3 | 1 s |" in readme and readme.endswith("after\n")
    again = harness.render_results([bench])
    assert again == text  # rendering is a pure function of the stored JSON


def test_the_readme_markers_are_required(sandbox: Path) -> None:
    (sandbox / "README.md").write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        harness.render_readme([fake_benchmark()], None)


@pytest.mark.slow
def test_the_shipped_benchmarks_render_their_committed_results(tmp_path: Path) -> None:
    """Each module's render() still reads the JSON it wrote (so `make bench-render` never rots)."""
    found = {b.name: b for b in harness.discover()}
    assert {"simulator", "synthesis", "sweep"} <= set(found)
    for name, bench in found.items():
        envelope = harness.load_envelope(name)
        if envelope is None:
            continue
        body = bench.render(envelope["data"], tmp_path)
        assert body.count("|---") >= 1, name
        if bench.headline is not None:
            assert all(len(row) == 3 for row in bench.headline(envelope["data"]))
    assert (tmp_path / "synthesis-scaling.png").exists() and (tmp_path / "sweep-dgx-a100x2-allreduce.png").exists()
