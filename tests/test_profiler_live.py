"""The live profiler: gloo ping-pongs between local processes over loopback.

torch is an optional extra: without it these tests skip with the reason shown,
unless ``TACCL_REQUIRE_TORCH=1`` (CI sets it when it installed torch), which
turns a missing torch into a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run

from taccl_py.profiler.measurements import read_measurements_csv
from taccl_py.topology_io import load_topology

pytestmark = pytest.mark.serial  # real ping-pong timings: never next to another test worker

DATA = Path(__file__).parent / "data" / "profiler"
HAVE_TORCH = importlib.util.find_spec("torch") is not None

if not HAVE_TORCH:
    if os.environ.get("TACCL_REQUIRE_TORCH") == "1":
        pytest.fail("TACCL_REQUIRE_TORCH=1 but torch is not installed", pytrace=False)
    pytest.skip("torch is not installed (pip install 'taccl_py[profile]'); live profiler tests skipped",
                allow_module_level=True)


def test_gloo_two_processes_write_csv_and_a_valid_topology(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    csv_path, fitted = tmp_path / "m.csv", tmp_path / "fitted.json"
    code, stdout, stderr = run(["profile", "run", "--nproc", "2", "--backend", "gloo", "--sizes", "1KB:4MB",
                                "--repeats", "3", "--warmup", "3", "-o", str(csv_path), "--fit", str(fitted),
                                "--json", "--timeout", "120"], capsys)
    assert code == 0, stderr
    samples = read_measurements_csv(csv_path)
    assert {(s.src, s.dst) for s in samples} == {(0, 1)}
    assert sorted({s.size_bytes for s in samples}) == [1024 << k for k in range(13)]
    assert sorted({s.repeat for s in samples}) == [0, 1, 2] and len(samples) == 39
    assert all(s.time_us > 0 for s in samples)
    assert "backend gloo, 2 ranks" in csv_path.read_text().splitlines()[0]
    topology = load_topology(fitted)
    assert topology.num_gpus == 2 and len(topology.links) == 2
    assert all(link.provenance is not None and link.bandwidth > 0 for link in topology.links)
    report = json.loads(stdout)
    assert report["backend"] == "gloo" and report["pairs"] == [[0, 1]] and report["fit"]["output"] == str(fitted)


@pytest.mark.slow
def test_per_class_pairs_recalibrate_a_topology(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv_path, fitted = tmp_path / "m.csv", tmp_path / "fitted.json"
    code, _, stderr = run(["profile", "run", "--nproc", "3", "--sizes", "1KB:4MB", "--repeats", "2",
                           "--topology", str(DATA / "two_node_4gpu.json"), "--pairs", "per-class",
                           "-o", str(csv_path), "--fit", str(fitted), "--timeout", "120"], capsys)
    assert code == 0, stderr
    # one pair per class of the topology: NVLink 0-1, IB 0-2
    assert sorted({(s.src, s.dst) for s in read_measurements_csv(csv_path)}) == [(0, 1), (0, 2)]
    before, after = load_topology(DATA / "two_node_4gpu.json"), load_topology(fitted)
    assert after.switches == before.switches and after.machines == before.machines
    assert all(link.provenance is not None for link in after.links)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_torchrun_entry_point(tmp_path: Path) -> None:
    csv_path = tmp_path / "m.csv"
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
               "-m", "taccl_py.profile", "--sizes", "1KB:64KB", "--repeats", "2", "--warmup", "1",
               "-o", str(csv_path), "--timeout", "120"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert result.returncode == 0, result.stderr[-2000:]
    samples = read_measurements_csv(csv_path)
    assert len(samples) == 7 * 2 and {(s.src, s.dst) for s in samples} == {(0, 1)}
    assert result.stdout.count("wrote ") == 1  # rank 0 alone reports
