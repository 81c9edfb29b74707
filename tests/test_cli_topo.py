"""``taccl topo list | show | validate | generate``: output, JSON mode, and one-line errors with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from taccl_py.cli.main import main
from taccl_py.library import SHIPPED_NAMES, resolve_topology
from taccl_py.topology_io import load_topology, topology_from_dict

REPO = Path(__file__).resolve().parent.parent
ASTRA_VECTORS = Path(__file__).resolve().parent / "vectors" / "astra"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI in-process; return (exit status, stdout, stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 0), out, err


def assert_one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert err.startswith("taccl: error: "), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err


# -------------------------------------------------------------------------- list
def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["topo", "list"], capsys)
    assert code == 0
    for name in ("dgx1", "ndv2x2", "dgx-a100x4", "gb200-nvl72", "dgx-h100xK"):
        assert name in out


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["topo", "list", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert [t["name"] for t in data["topologies"]] == list(SHIPPED_NAMES)
    assert any(f["pattern"].startswith("dgx-a100xK") for f in data["families"])


# -------------------------------------------------------------------------- show
@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_show_every_shipped_name(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    topology = resolve_topology(name)
    code, out, err = run(["topo", "show", name], capsys)
    assert code == 0, err
    assert out.startswith(f"{name}: {topology.num_gpus} GPUs")
    assert "Directed links" in out and "Per-GPU link bandwidth" in out and "source:" in out
    code, out, err = run(["topo", "show", name, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["name"] == name and data["gpus"] == topology.num_gpus and data["links"] == len(topology.links)
    assert data["source"] == topology.source
    assert len(data["out_GBps"]) == topology.num_gpus


def test_show_reports_the_reference_figures(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["topo", "show", "dgx2x2", "--json"], capsys)
    data = json.loads(out)
    assert data["link_kinds"]["ib"]["count"] == 16
    assert {g["gpus"]: g["in_GBps"] for g in data["gpu_bandwidth"]} == {
        ",".join(str(g) for g in range(0, 32, 2)): 137.5, ",".join(str(g) for g in range(1, 32, 2)): 125.0}
    _, out, _ = run(["topo", "show", "ndv2x2"], capsys)
    assert "machines: 2 x 8 GPUs (m0: 0-7; m1: 8-15)" in out


def test_show_files(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["topo", "show", str(ASTRA_VECTORS / "ring_fc_switch_64npus.yml")], capsys)
    assert code == 0 and out.startswith("ring_fc_switch_64npus: 64 GPUs, 16 switch vertices, 640 directed links")
    code, out, _ = run(["topo", "show", str(REPO / "topologies" / "dgx1.json"), "--json"], capsys)
    assert code == 0 and json.loads(out)["name"] == "dgx1"


def test_show_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["topo", "show", "dgx3"], capsys)
    assert out == ""
    assert_one_line_error(code, err, "dgx3", "did you mean dgx2")


# ---------------------------------------------------------------------- validate
GOOD: dict[str, Any] = {"gpus": 2, "switches": [{"name": "sw"}],
                        "links": [{"src": 0, "dst": "sw", "bandwidth": 10, "bidirectional": True},
                                  {"src": 1, "dst": "sw", "bandwidth": 10, "bidirectional": True}]}


def variant(**changes: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if key.startswith("link1_"):
            field = key.removeprefix("link1_")
            if value is None:
                del data["links"][1][field]
            else:
                data["links"][1][field] = value
        elif value is None:
            del data[key]
        else:
            data[key] = value
    return data


BAD: list[tuple[str, dict[str, Any] | str, str]] = [
    ("unknown vertex", variant(link1_dst="nvs7"), "links[1].dst names unknown vertex 'nvs7'"),
    ("duplicate link", variant(links=[*GOOD["links"], {"src": "sw", "dst": 0, "bandwidth": 1}]),
     "links[2] duplicates links[0]"),
    ("zero bandwidth", variant(link1_bandwidth=0), "links[1].bandwidth must be > 0 (got 0)"),
    ("negative bandwidth", variant(link1_bandwidth=-5), "links[1].bandwidth must be > 0 (got -5)"),
    ("negative latency", variant(link1_latency=-1), "links[1].latency must be >= 0 (got -1)"),
    ("GPU id out of range", variant(link1_src=7), "links[1].src is GPU 7 but GPU ids are 0..1"),
    ("unreachable GPU", variant(gpus=3), "links GPU 0 cannot reach GPU 2"),
    ("malformed JSON", '{"gpus": 2,, }', "not valid JSON"),
    ("wrong type", variant(link1_bandwidth="10"), "links[1].bandwidth must be a number (got a string '10')"),
    ("missing field", variant(gpus=None), "gpus is missing"),
    ("missing link field", variant(link1_src=None), "links[1].src is missing"),
]


@pytest.mark.parametrize(("case", "content", "words"), BAD, ids=[c[0] for c in BAD])
def test_validate_rejects_with_one_line(case: str, content: dict[str, Any] | str, words: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mytopo.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    code, out, err = run(["topo", "validate", str(path)], capsys)
    assert out == ""
    assert_one_line_error(code, err, f"{path}: {words}")
    code, out, err = run(["topo", "validate", str(path), "--json"], capsys)
    assert_one_line_error(code, err, words)
    report = json.loads(out)
    assert report["valid"] is False and words in report["error"]


def test_validate_accepts_a_good_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "good.json"
    path.write_text(json.dumps(GOOD))
    code, out, _ = run(["topo", "validate", str(path)], capsys)
    assert code == 0 and f"{path}: valid" in out
    code, out, _ = run(["topo", "validate", str(path), "--json"], capsys)
    assert code == 0 and json.loads(out) == {"file": str(path), "valid": True, "name": "good", "gpus": 2,
                                             "machines": 0, "switches": 1, "links": 4}


def test_validate_astra_yaml_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["topo", "validate", str(ASTRA_VECTORS / "ring_8npus.yml")], capsys)
    assert code == 0 and "valid (8 GPUs" in out
    bad = tmp_path / "net.yml"
    bad.write_text("topology: [ Ring, Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 1, 1 ]\nlatency: [ 1, 1 ]\n")
    code, _, err = run(["topo", "validate", str(bad)], capsys)
    assert_one_line_error(code, err, f"{bad}: npus_count has 1 entries")
    code, _, err = run(["topo", "validate", str(tmp_path / "none.json")], capsys)
    assert_one_line_error(code, err, "none.json: no such file")


# ---------------------------------------------------------------------- generate
GENERATE_CASES: list[tuple[list[str], str, int]] = [
    # (arguments after KIND, expected name, GPUs)
    (["ring", "--gpus", "6", "--bandwidth", "25", "--latency", "1"], "ring6", 6),
    (["fc", "--gpus", "4"], "fully-connected4", 4),
    (["switch", "--gpus", "5"], "switch5", 5),
    (["torus", "--dims", "4x4"], "torus4x4", 16),
    (["mesh", "--dims", "2,3,2"], "mesh2x3x2", 12),
    (["hypercube", "--dims", "3"], "hypercube3", 8),
    (["hypercube", "--gpus", "16"], "hypercube4", 16),
    (["astra", "--dims", "Ring:2:200:50,FullyConnected:8:100:500,Switch:4:50:2000"], "astra-ring2-fc8-switch4", 64),
    (["astra", "--dims", str(ASTRA_VECTORS / "ring_8npus.yml")], "ring_8npus", 8),
    (["dgx1"], "dgx1", 8),
    (["ndv2", "--machines", "2"], "ndv2x2", 16),
    (["dgx2", "--machines", "3"], "dgx2x3", 48),
    (["dgx-a100", "--machines", "4", "--fabric", "rail"], "dgx-a100x4-rail", 32),
    (["dgx-h100", "--nvls"], "dgx-h100-nvls", 8),
    (["mi250", "-k", "2", "--name", "two-mi250"], "two-mi250", 32),
    (["nvl72"], "gb200-nvl72", 72),
    (["ring8"], "ring8", 8),
]


@pytest.mark.parametrize(("args", "name", "gpus"), GENERATE_CASES, ids=[" ".join(c[0][:2]) for c in GENERATE_CASES])
def test_generate_writes_a_valid_file(args: list[str], name: str, gpus: int, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "out.json"
    code, out, err = run(["topo", "generate", *args, "-o", str(path), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["name"] == name
    topology = load_topology(path)
    assert topology.name == name and topology.num_gpus == gpus


def test_generate_matches_the_shipped_file_and_is_deterministic(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for path in (first, second):
        code, out, _ = run(["topo", "generate", "dgx-a100", "--machines", "4", "-o", str(path)], capsys)
        assert code == 0 and f"wrote {path}: dgx-a100x4, 32 GPUs" in out
    shipped = (REPO / "topologies" / "dgx-a100x4.json").read_bytes()
    assert first.read_bytes() == second.read_bytes() == shipped


def test_generate_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["topo", "generate", "torus", "--dims", "2x2x2", "-o", "-"], capsys)
    assert code == 0
    topology = topology_from_dict(json.loads(out))
    assert topology.num_gpus == 8 and len(topology.links) == 24


GENERATE_ERRORS: list[tuple[list[str], str]] = [
    (["ring", "--gpus", "1"], "ring: gpus must be >= 2 (got 1)"),
    (["ring"], "--gpus: is required for ring"),
    (["ring", "--gpus", "4", "--bandwidth", "-1"], "ring: bandwidth must be > 0 (got -1)"),
    (["ring", "--gpus", "four"], "'four' is not a valid integer"),
    (["torus", "--dims", "4xq"], "--dims: cannot read '4xq'"),
    (["torus"], "--dims: is required for torus"),
    (["hypercube", "--gpus", "6"], "--gpus: must be a power of two"),
    (["hypercube", "--gpus", "8", "--dims", "3"], "give either --dims D"),
    (["dgx1", "--gpus", "3"], "--gpus: does not apply to dgx1"),
    (["dgx-a100", "--bandwidth", "3"], "--bandwidth: does not apply to dgx-a100"),
    (["ndv2", "--machines", "0"], "--machines: must be >= 1 (got 0)"),
    (["dgx-a100", "--machines", "2", "--fabric", "torus"], "unknown fabric 'torus'"),
    (["dgx-a100", "--fabric", "rail"], "--fabric: applies to two or more machines"),
    (["mi250", "--nvls"], "--nvls: does not apply to mi250"),
    (["astra"], "--dims: is required for astra"),
    (["astra", "--dims", "Torus:4:1:1"], "unknown topology kind 'Torus'"),
    (["astra", "--dims", "missing.yml"], "missing.yml: no such file"),
    (["fat-tree", "--gpus", "4"], "KIND: unknown kind 'fat-tree'"),
    (["ring", "--gpus", "4", "--name", " "], "--name: must not be empty"),
    (["fully-connected", "--gpus", "5000"], "limit is"),
]


@pytest.mark.parametrize(("args", "words"), GENERATE_ERRORS, ids=[" ".join(c[0]) for c in GENERATE_ERRORS])
def test_generate_bad_input_writes_nothing(args: list[str], words: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "out.json"
    code, out, err = run(["topo", "generate", *args, "-o", str(path)], capsys)
    assert out == ""
    assert_one_line_error(code, err, words)
    assert list(tmp_path.iterdir()) == []


def test_generate_into_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "no" / "such" / "dir.json"
    code, _, err = run(["topo", "generate", "dgx1", "-o", str(target)], capsys)
    assert_one_line_error(code, err, f"-o {target}: directory", "does not exist")


@pytest.mark.slow
def test_real_entry_point_prints_one_line_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"gpus": 2, "links": [{"src": 0, "dst": 1, "bandwidth": -5}]}')
    result = subprocess.run([sys.executable, "-m", "taccl_py", "topo", "validate", str(path)],
                            capture_output=True, text=True, check=False, cwd=REPO)
    assert result.returncode == 2
    assert result.stderr == f"taccl: error: {path}: links[0].bandwidth must be > 0 (got -5)\n"
    assert result.stdout == ""
