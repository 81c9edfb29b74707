"""The command line around MSCCL XML: ``taccl verify``, and XML through ``taccl simulate`` / ``taccl baseline``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_runner import only_json, run

from taccl_py.library import resolve_topology
from taccl_py.msccl import load_program, simulate_program, verify_program

VECTORS = Path(__file__).parent / "vectors" / "msccl"


def test_verify_valid_file(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(VECTORS / "azure-allreduce-ring-n8-ch4-i1-ll128.xml")
    code, out, _ = run(["verify", path], capsys)
    assert code == 0 and "valid: yes" in out and "correct: yes" in out
    code, out, _ = run(["verify", path, "--json"], capsys)
    data = only_json(out)
    assert code == 0
    assert (data["valid"], data["correct"], data["errors"], data["dialect"]) == (True, True, [], "v2")


def test_verify_wrong_result_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(VECTORS / "broken" / "broken09-allgather-chunk-never-arrives.xml")
    code, out, _ = run(["verify", "--json", path], capsys)
    data = only_json(out)
    assert code == 1 and data["valid"] is True and data["correct"] is False
    assert data["errors"] == [{"rank": 5, "tb": None, "step": None, "rule": "wrong-result",
                               "message": "in-place: output chunk 0 was never written"}]
    code, out, _ = run(["verify", path], capsys)
    assert code == 1 and "wrong-result" in out


def test_verify_dialect_option(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(VECTORS / "msft-allgather-ring-n4-ch1-i1-simple.xml")
    assert run(["verify", path], capsys)[0] == 0
    code, out, _ = run(["verify", path, "--dialect", "v2", "--json"], capsys)
    data = only_json(out)
    assert code == 1 and data["dialect"] == "v2" and not data["valid"]
    assert {e["rule"] for e in data["errors"]} == {"missing-attribute"}
    code, _, err = run(["verify", path, "--dialect", "v3"], capsys)
    assert code == 2 and "v3" in err


def test_verify_unreadable_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["verify", str(tmp_path / "nope.xml")], capsys)
    assert code == 2 and out == "" and err.strip() == f"taccl: error: {tmp_path / 'nope.xml'}: no such file"
    broken = VECTORS / "broken" / "broken01-missing-attr-srcoff.xml"
    code, out, err = run(["verify", "--json", str(broken)], capsys)
    data = only_json(out)
    assert code == 2 and data["valid"] is False and data["errors"][0]["rule"] == "missing-attribute"
    assert "line 21: step attribute 'srcoff' is missing" in err
    assert "Traceback" not in err


def test_simulate_an_xml_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ring.xml"
    shutil.copy(VECTORS / "azure-allreduce-ring-n8-ch4-i1-ll128.xml", path)
    code, out, _ = run(["--ideal", "simulate", "--topology", "dgx-a100", "--algorithm", str(path), "--size", "1MB",
                        "--json"], capsys)
    assert code == 0
    data = only_json(out)
    expected = simulate_program(load_program(path), resolve_topology("dgx-a100"), 1 << 20)
    assert expected.time_us is not None
    times = [v for k, v in _walk(data) if k == "time_us" and isinstance(v, float | int)]
    assert times and times[0] == pytest.approx(expected.time_us, rel=1e-9)


@pytest.mark.slow
def test_baseline_writes_xml_that_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ring.xml"
    code, out, _ = run(["--ideal", "baseline", "--topology", "dgx-a100x2", "--collective", "allreduce", "--size",
                        "64MB", "-a", "ring", "-o", str(path), "--json"], capsys)
    assert code == 0 and path.exists()
    data = only_json(out)
    assert data["xml"]["algorithm"] == "ring"
    program = load_program(path)
    report = verify_program(program)
    assert report.valid and report.correct, [str(e) for e in report.errors]
    assert run(["verify", str(path)], capsys)[0] == 0
    # the XML takes the time the baseline table reports for the ring
    ring_time = next(e["time_us"] for e in data["baselines"] if e["algorithm"] == "ring")
    timed = simulate_program(program, resolve_topology("dgx-a100x2"), 64 << 20)
    assert timed.time_us == pytest.approx(ring_time, rel=0.01)
    v1 = tmp_path / "ring-v1.xml"
    code, _, _ = run(["baseline", "-t", "dgx-a100", "-c", "reducescatter", "-s", "1MB", "-a", "ring", "-o", str(v1),
                      "--dialect", "v1"], capsys)
    assert code == 0 and 'coll="reduce_scatter"' in v1.read_text()
    assert run(["verify", str(v1)], capsys)[0] == 0
    assert run(["verify", "--dialect", "v2", str(v1)], capsys)[0] == 1


def _walk(value: Any) -> list[tuple[str, Any]]:
    """Every (key, value) pair in a nested JSON object, depth first."""
    found: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append((key, item))
            found += _walk(item)
    elif isinstance(value, list):
        for item in value:
            found += _walk(item)
    return found
