"""`taccl simulate`, `taccl baseline` and `taccl bound`: JSON contract, sizes, sweep tables, errors.

Commands run in-process through :func:`taccl_py.cli.main.main` (the function
the ``taccl`` script calls, which maps errors to ``taccl: error: ...`` and an
exit status); a few run as real subprocesses to see exactly what a user sees.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import only_json, run

from taccl_py.library import resolve_topology

GOLDEN_BW = 50 * 2**30 / 1e9  # ring8: ASTRA-sim's 50 GiB/s per link, in GB/s
GOLDEN_ALPHA = 0.5
CONTRACT = ("correct", "time_us", "algbw_GBps", "busbw_GBps", "bound_us", "efficiency")


def table(out: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and body rows of the one rich table in ``out``."""
    header: list[str] = []
    rows: list[list[str]] = []
    for line in out.splitlines():
        if line.startswith("┃"):
            cells = [c.strip() for c in line.strip("┃").split("┃")]
            header = cells if not header else [f"{a} {b}".strip() for a, b in zip(header, cells, strict=True)]
        elif line.startswith("│"):
            rows.append([c.strip() for c in line.strip("│").split("│")])
    assert header and rows, out
    return header, rows


def ring8_allgather_us(size: float) -> float:
    """ring8 runs one ring each way: 7 steps of alpha + M / (8 x 2 x B)."""
    return 7 * (GOLDEN_ALPHA + size / 16 / (GOLDEN_BW * 1e3))


# ------------------------------------------------------------------ JSON contract
def test_simulate_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["simulate", "-t", "ring8", "-c", "allgather", "-s", "1MiB", "-a", "ring", "--json"], capsys)
    assert code == 0 and err == ""
    data = only_json(out)
    assert set(CONTRACT) <= set(data)
    assert data["correct"] is True
    for key in CONTRACT[1:]:
        assert isinstance(data[key], float), key
    size = 1 << 20
    assert data["size_bytes"] == size
    assert (data["topology"], data["collective"], data["algorithm"]) == ("ring8", "allgather", "ring")
    assert data["time_us"] == pytest.approx(ring8_allgather_us(size), rel=1e-12)
    assert data["algbw_GBps"] == pytest.approx(size / data["time_us"] / 1e3)
    assert data["busbw_GBps"] == pytest.approx(data["algbw_GBps"] * 7 / 8)
    assert data["efficiency"] == pytest.approx(data["bound_us"] / data["time_us"])
    assert 0 < data["efficiency"] <= 1
    code, out, _ = run(["bound", "-t", "ring8", "-c", "allgather", "-s", "1MiB", "--json"], capsys)
    assert code == 0 and only_json(out)["bound_us"] == data["bound_us"]


def test_bound_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    """ring8 allgather: 7/8 of the buffer enters a GPU over its two 53.7 GB/s links, after one hop."""
    code, out, err = run(["bound", "-t", "ring8", "-c", "allgather", "-s", "1MiB", "--json"], capsys)
    assert code == 0 and err == ""
    data = only_json(out)
    assert {"bound_us", "algbw_GBps"} <= set(data)
    size = 1 << 20
    expected = 7 / 8 * size / (2 * GOLDEN_BW * 1e3) + GOLDEN_ALPHA
    assert data["bound_us"] == pytest.approx(expected, rel=1e-12)
    assert data["algbw_GBps"] == pytest.approx(size / expected / 1e3, rel=1e-12)
    assert data["busbw_GBps"] == pytest.approx(data["algbw_GBps"] * 7 / 8)


def test_bound_reports_latency_and_data_beside_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """ndv2x2 Allreduce 16 KB: the bound is the 4.1 us latency; the crossing bound (path 1.4 + 1.3 + 1.4 us
    plus 16 KB over the one 12.5 GB/s link between the machines) is listed next to it, not folded in."""
    code, out, _ = run(["bound", "-t", "ndv2x2", "-c", "allreduce", "-s", "16KiB", "--json"], capsys)
    data = only_json(out)
    assert code == 0 and data["bound_us"] == pytest.approx(4.1)
    assert data["latency_and_data_us"] == pytest.approx(4.1 + 16384 / 12500)
    assert "across a cut" in data["latency_and_data"]
    code, out, _ = run(["bound", "-t", "ndv2x2", "-c", "allreduce", "-s", "16KiB"], capsys)
    assert code == 0 and "latency + data, a lower bound too" in out and "5.41" in out


def test_baseline_json_lists_every_applicable_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "4MB", "--json"], capsys)
    assert code == 0
    data = only_json(out)
    names = [e["algorithm"] for e in data["baselines"]]
    assert names == ["ring", "tree", "direct", "rd", "oneshot"]
    for entry in data["baselines"]:
        assert set(CONTRACT) <= set(entry) and entry["correct"] is True
        assert entry["bound_us"] == data["bound_us"]
        assert entry["efficiency"] == pytest.approx(data["bound_us"] / entry["time_us"])
        assert entry["efficiency"] <= 1
    assert data["best"] == min(data["baselines"], key=lambda e: e["time_us"])["algorithm"]


def test_step_overhead_option(capsys: pytest.CaptureFixture[str]) -> None:
    """--step-overhead adds its latency to every ring step, and to the bound's latency."""
    args = ["simulate", "-t", "ring8", "-c", "allgather", "-s", "1MiB", "-a", "ring", "--json"]
    base = only_json(run(args, capsys)[1])
    slow = only_json(run([*args, "--step-overhead", "2"], capsys)[1])
    assert slow["time_us"] == pytest.approx(base["time_us"] + 7 * 2.0)
    assert slow["bound_us"] == pytest.approx(base["bound_us"] + 2.0)


def test_channels_option(capsys: pytest.CaptureFixture[str]) -> None:
    """--channels 1 runs one ring: the bandwidth term doubles on ring8."""
    data = only_json(run(["simulate", "-t", "ring8", "-c", "allgather", "-s", "8MiB", "-a", "ring", "--channels", "1",
                          "--json"], capsys)[1])
    assert data["time_us"] == pytest.approx(140.21875, abs=1e-9)  # the golden value


# ------------------------------------------------------------------------- sizes
@pytest.mark.parametrize("spec,size", [("1MiB", 1 << 20), ("256KB", 256 << 10), ("1GB", 1 << 30), ("4096", 4096),
                                       ("1M", 1 << 20), ("64kib", 64 << 10), ("3000", 3000), ("2G", 2 << 30)])
def test_size_parsing(capsys: pytest.CaptureFixture[str], spec: str, size: int) -> None:
    """nccl-tests sizes: K/M/G are binary with or without B / iB; a plain number is bytes."""
    code, out, _ = run(["bound", "-t", "ring8", "-c", "allgather", "-s", spec, "--json"], capsys)
    assert code == 0
    data = only_json(out)
    assert data["size_bytes"] == size
    assert data["bandwidth_us"] == pytest.approx(7 / 8 * size / (2 * GOLDEN_BW * 1e3), rel=1e-12)


# ------------------------------------------------------------------------- sweeps
def test_simulate_sweep_table(capsys: pytest.CaptureFixture[str]) -> None:
    """--size 1KB:1MB: one row per power of two, nccl-tests columns, efficiency <= 1."""
    code, out, err = run(["simulate", "-t", "ring8", "-c", "allgather", "-s", "1KB:1MB", "-a", "ring"], capsys)
    assert code == 0 and err == ""
    header, rows = table(out)
    assert header == ["size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "bound (us)", "efficiency"]
    assert [int(r[0]) for r in rows] == [1 << k for k in range(10, 21)]
    for size_text, time_text, algbw, busbw, bound, efficiency in rows:
        size = int(size_text)
        assert float(time_text) == pytest.approx(ring8_allgather_us(size), abs=0.006)
        assert float(algbw) == pytest.approx(size / ring8_allgather_us(size) / 1e3, abs=0.006)
        assert float(busbw) == pytest.approx(float(algbw) * 7 / 8, abs=0.011)
        assert 0 < float(bound) <= float(time_text)
        assert 0 < float(efficiency) <= 1


def test_sweep_json_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["simulate", "-t", "dgx-a100", "-c", "alltoall", "-s", "1KB:64KB", "-a", "direct", "--json"],
                       capsys)
    assert code == 0
    data = only_json(out)
    assert data["correct"] is True
    assert [r["size_bytes"] for r in data["rows"]] == [1 << k for k in range(10, 17)]
    for row in data["rows"]:
        assert set(CONTRACT) <= set(row) and row["correct"] is True
        assert 0 < row["efficiency"] <= 1


def test_bound_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    """The bound table: one row per power of two, the data term doubling with the size."""
    code, out, _ = run(["bound", "-t", "ring8", "-c", "allgather", "-s", "1MB:16MB", "--json"], capsys)
    assert code == 0
    rows = only_json(out)["rows"]
    assert [r["size_bytes"] for r in rows] == [1 << k for k in range(20, 25)]
    for small, big in itertools.pairwise(rows):
        assert big["bandwidth_us"] == pytest.approx(2 * small["bandwidth_us"])
    code, out, _ = run(["bound", "-t", "ring8", "-c", "allgather", "-s", "1MB:16MB"], capsys)
    header, table_rows = table(out)
    assert header[:3] == ["size (B)", "bound (us)", "algbw (GB/s)"] and len(table_rows) == 5


# -------------------------------------------------------------------- bad inputs
BAD = [
    (["simulate", "-t", "nope", "-c", "allgather", "-s", "1MB", "-a", "ring"], "nope"),
    (["baseline", "-t", "dgx-z900", "-c", "allgather", "-s", "1MB"], "dgx-z900"),
    (["bound", "-t", "nope", "-c", "allgather", "-s", "1MB"], "nope"),
    (["simulate", "-t", "ring8", "-c", "allgather", "-s", "1XB", "-a", "ring"], "1XB"),
    (["bound", "-t", "ring8", "-c", "allgather", "-s", "lots"], "lots"),
    (["bound", "-t", "ring8", "-c", "allgather", "-s", "0"], "--size"),
    (["baseline", "-t", "ring8", "-c", "allgather", "-s", "1.5"], "1.5"),
    (["simulate", "-t", "ring8", "-c", "allgather", "-s", "1MB:1KB", "-a", "ring"], "1MB:1KB"),
    (["simulate", "-t", "ring8", "-c", "allgathr", "-s", "1MB", "-a", "ring"], "allgathr"),
    (["baseline", "-t", "ring8", "-c", "scatter", "-s", "1MB"], "scatter"),
    (["bound", "-t", "ring8", "-c", "gather", "-s", "1MB"], "gather"),
    (["simulate", "-t", "ring8", "-c", "allgather", "-s", "1MB", "-a", "bogus"], "bogus"),
    (["baseline", "-t", "ring8", "-c", "allgather", "-s", "1MB", "-a", "bogus"], "bogus"),
    (["simulate", "-t", "ring8", "-c", "alltoall", "-s", "1MB", "-a", "ring"], "ring alltoall"),
    (["simulate", "-t", "ring8", "-c", "allgather", "-s", "1MB", "-a", "ring", "--channels", "0"], "--channels"),
    (["simulate", "-t", "ring8", "-c", "broadcast", "-s", "1MB", "-a", "ring", "--root", "8"], "--root"),
    (["simulate", "-t", "ring8", "-c", "allgather", "-s", "1MB", "-a", "ring", "--step-overhead", "-1"],
     "--step-overhead"),
]

MALFORMED = {
    "not-json.json": ("{ this is not json", "not valid JSON"),
    "negative.json": (json.dumps({"name": "bad", "gpus": 2, "links": [
        {"src": 0, "dst": 1, "bandwidth": -5, "latency": 1, "bidirectional": True}]}), "bandwidth must be > 0"),
    "no-gpus.json": (json.dumps({"name": "bad", "links": []}), "gpus is missing"),
    "dangling.json": (json.dumps({"name": "bad", "gpus": 3, "links": [
        {"src": 0, "dst": 7, "bandwidth": 10, "latency": 1, "bidirectional": True}]}), "links[0].dst is GPU 7"),
    "disconnected.json": (json.dumps({"name": "bad", "gpus": 3, "links": [
        {"src": 0, "dst": 1, "bandwidth": 10, "latency": 1, "bidirectional": True}]}), "cannot reach GPU 2"),
}


def check_error(code: int, out: str, err: str, needle: str) -> None:
    """Exit 2, nothing on stdout, one line ``taccl: error: ...`` naming ``needle``, no traceback."""
    assert code == 2, (code, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("taccl: error: ")
    assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in err


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    check_error(*run(args, capsys), needle)


@pytest.mark.parametrize("command", ["simulate", "baseline", "bound"])
@pytest.mark.parametrize("filename", sorted(MALFORMED))
def test_malformed_topology_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
                                 filename: str) -> None:
    text, message = MALFORMED[filename]
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    args = [command, "-t", str(path), "-c", "allgather", "-s", "1MB"]
    if command == "simulate":
        args += ["-a", "ring"]
    code, out, err = run(args, capsys)
    check_error(code, out, err, str(path))
    assert message in err


def test_missing_topology_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "absent.json"
    check_error(*run(["bound", "-t", str(path), "-c", "allgather", "-s", "1MB"], capsys), str(path))


def taccl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real command line (``python -m taccl_py`` runs the same main as the ``taccl`` script)."""
    return subprocess.run([sys.executable, "-m", "taccl_py", *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.mark.slow
@pytest.mark.parametrize("args,needle", [BAD[0], BAD[3], BAD[8], BAD[11]], ids=["topology", "size", "collective",
                                                                                  "algorithm"])
def test_bad_input_in_a_real_process(args: list[str], needle: str) -> None:
    done = taccl(*args)
    check_error(done.returncode, done.stdout, done.stderr, needle)


@pytest.mark.slow
def test_json_in_a_real_process() -> None:
    done = taccl("simulate", "-t", "ring8", "-c", "allgather", "-s", "1MiB", "-a", "ring", "--json")
    assert done.returncode == 0 and done.stderr == ""
    assert only_json(done.stdout)["time_us"] == pytest.approx(ring8_allgather_us(1 << 20), rel=1e-12)


# ----------------------------------------------------------------- the done-when check
def dgx_a100x2_ring_allreduce_us(size: float) -> float:
    """2(n-1) steps of the cross-machine leg: GPU -> NIC -> IB switch -> NIC -> GPU, 8 rings (one per NIC).

    Read from the shipped topology's links (2 x 0.5 us NIC + 2 x 0.8 us IB =
    2.6 us; 25 GB/s); each ring step moves M / (16 x 8) bytes per ring. The
    NVLink legs (0.7 us, 300 GB/s shared by 7 rings) are always faster.
    """
    topology = resolve_topology("dgx-a100x2")
    by_kind: dict[str, list[float]] = {}
    for link in topology.links:
        by_kind.setdefault(link.kind, []).append(link.latency)
    assert set(by_kind["nic"]) == {0.5} and set(by_kind["ib"]) == {0.8}
    # a ring stays on its rail: the leaf -> spine uplinks (2 x 25 GB/s) carry none of its legs
    nic_bw = {lk.bandwidth for lk in topology.links if lk.kind in ("nic", "ib") and "spine" not in (lk.src, lk.dst)}
    assert nic_bw == {25.0}
    n, rings = topology.num_gpus, 8
    return 2 * (n - 1) * (2 * 0.5 + 2 * 0.8 + size / (n * rings) / 25e3)


@pytest.mark.slow
def test_done_when_dgx_a100x2_allreduce_table(capsys: pytest.CaptureFixture[str]) -> None:
    """`taccl baseline --topology dgx-a100x2 --collective allreduce --size 1KB:1GB`: correct at every size,
    ring figures on the alpha-beta formula, every efficiency <= 1. On the leaf-spine fabric every GPU reaches
    every GPU, so direct and rd run too, and the 2-D hierarchical baselines (GPUs in a machine x machines):
    more columns than a table's numbers can be read back from, so they are read from --json (the same rows)."""
    code, out, err = run(["--ideal", "baseline", "--topology", "dgx-a100x2", "--collective", "allreduce",
                          "--size", "1KB:1GB", "--json"], capsys)
    assert code == 0 and err == ""
    rows = only_json(out)["rows"]
    assert [r["size_bytes"] for r in rows] == [1 << k for k in range(10, 31)]
    for row in rows:
        size = row["size_bytes"]
        entries = {e["algorithm"]: e for e in row["baselines"]}
        assert list(entries) == ["ring", "tree", "direct", "rd", "oneshot", "hier", "hier-lb"]
        expected = dgx_a100x2_ring_allreduce_us(size)
        ring = entries["ring"]
        assert ring["time_us"] == pytest.approx(expected, rel=1e-9), row
        assert ring["algbw_GBps"] == pytest.approx(size / expected / 1e3, rel=1e-9), row
        assert ring["busbw_GBps"] == pytest.approx(size / expected / 1e3 * 30 / 16, rel=1e-9), row
        for entry in entries.values():
            assert entry["correct"] and row["bound_us"] <= entry["time_us"], entry
            assert 0 < entry["efficiency"] <= 1, entry
