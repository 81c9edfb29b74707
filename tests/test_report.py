"""``taccl report``: the page is written, holds its tables and pictures, and renders in a real browser."""

from __future__ import annotations

import base64
import io
import os
import re
from pathlib import Path

import numpy as np
import pytest
from cli_runner import only_json, run
from headless_browser import find_chromium, open_page
from PIL import Image

from taccl_py.report import ReportRequest, assemble_report, render_html, report_jobs
from taccl_py.sweep import InlineBackend, SweepOptions, run_jobs, run_sweep_job


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`taccl report --quick` on one DGX A100 (8 GPUs): three sizes of Allgather, in seconds."""
    out = tmp_path_factory.mktemp("report") / "report.html"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.argv", ["taccl"])
        from taccl_py.cli.main import main

        with pytest.raises(SystemExit) as done:
            main(["report", "-t", "dgx-a100", "--quick", "--jobs", "1", "-o", str(out)])
    assert done.value.code in (0, None)
    return out


@pytest.mark.slow
def test_report_page_content(quick_report: Path) -> None:
    page = quick_report.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<title>taccl_py report: dgx-a100</title>" in page
    assert "<script" not in page and "http://" not in page and "https://" not in page  # self-contained
    images = re.findall(r'<img src="data:(image/[a-z+]+);base64,([A-Za-z0-9+/=]+)"', page)
    assert [mime for mime, _ in images] == ["image/png", "image/svg+xml", "image/png"]  # topology, chart, timeline
    for mime, data in images:
        raw = base64.b64decode(data)
        assert raw.startswith(b"\x89PNG") if mime == "image/png" else b"<svg" in raw
    for heading in ("Summary", "Topology", "allgather", "Timeline of one algorithm"):
        assert f">{heading}</h2>" in page
    for size in ("64KB", "256KB", "1MB"):
        assert f"<td class=\"l\">{size}</td>" in page
    assert "taccl synthesize -t dgx-a100 -c allgather -s SIZE" in page


@pytest.mark.slow
def test_report_is_the_same_from_the_same_results() -> None:
    request = ReportRequest("ring8", ("allgather",), (1024, 4096), SweepOptions(time_limit_s=20))
    records = run_jobs(run_sweep_job, report_jobs(request), InlineBackend())
    first = render_html(assemble_report(request, records))
    assert first == render_html(assemble_report(request, records))
    assert "ring8" in first and "Jobs that failed" not in first


def _chromium_or_skip() -> None:
    if find_chromium() is None:
        if os.environ.get("TACCL_REQUIRE_BROWSER"):
            pytest.fail("TACCL_REQUIRE_BROWSER is set but chromium is not installed")
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does); the page was not opened")


@pytest.mark.slow
def test_report_renders_in_headless_chromium(quick_report: Path, tmp_path: Path) -> None:
    _chromium_or_skip()
    view = open_page(quick_report, tmp_path / "profile")
    (tmp_path / "screenshot.png").write_bytes(view.screenshot_png)
    assert view.title == "taccl_py report: dgx-a100"
    assert view.errors == []
    assert len(view.images) == 3 and all(complete and width > 0 for complete, width in view.images)
    grey = np.asarray(Image.open(io.BytesIO(view.screenshot_png)).convert("L"), dtype=float)
    assert grey.shape[1] == 1280 and grey.shape[0] > 1500
    assert grey.var() > 200  # not blank: text, tables and pictures
    assert (grey < 128).mean() > 0.01


def test_report_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["report", "-t", "dgx-a100", "--quick", "-o", str(tmp_path / "r.pdf")], capsys)
    assert code == 2 and "-o" in err and ".html" in err
    code, _, err = run(["report", "-t", "dgx-a100", "--quick", "-c", "allsorts", "-o", str(tmp_path / "r.html")],
                       capsys)
    assert code == 2 and "allsorts" in err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_report_json_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    code, stdout, _ = run(["report", "-t", "ring8", "-s", "1KB:2KB", "-c", "allgather", "--time-limit", "20",
                           "--jobs", "1", "-o", str(out), "--json"], capsys)
    assert code == 0
    summary = only_json(stdout)
    assert summary["report"] == str(out) and summary["jobs"] == 4 and summary["failed"] == []
    assert [p["size_bytes"] for p in summary["points"]] == [1024, 2048]
    assert out.read_text().count("<img ") == 3


@pytest.mark.slow
def test_the_browser_check_sees_broken_pages(tmp_path: Path) -> None:
    """The check can fail: a broken picture has no width, a script error is reported, blank is blank."""
    _chromium_or_skip()
    broken = tmp_path / "broken.html"
    broken.write_text('<!DOCTYPE html><html><head><title>b</title></head><body>'
                      '<img src="data:image/png;base64,iVBORw0KGgoAAAA="><script>undefinedCall()</script>'
                      "</body></html>")
    view = open_page(broken, tmp_path / "profile")
    assert view.images == [(True, 0)]
    assert any("undefinedCall" in e for e in view.errors)
    grey = np.asarray(Image.open(io.BytesIO(view.screenshot_png)).convert("L"), dtype=float)
    assert grey.var() < 200


@pytest.mark.slow
def test_a_timeline_too_big_to_draw_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    request = ReportRequest("ring8", ("allgather",), (4096,), SweepOptions(time_limit_s=20))
    records = run_jobs(run_sweep_job, report_jobs(request), InlineBackend())
    monkeypatch.setattr("taccl_py.plots.timeline.MAX_TIMELINE_BARS", 3)
    report = assemble_report(request, records)
    assert report.timeline is None and "too many to draw" in report.timeline_note
    page = render_html(report)
    assert "No timeline: allgather at 4KB:" in page and page.count("<img ") == 2
