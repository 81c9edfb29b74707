"""Issue 15: no traceback, no hang, nothing lost, and errors that say what happened.

Each case a new user hit is replayed here with its message asserted: outputs that
cannot be written (checked before any work), degenerate and absurd inputs
(refused with the limit named), the sketch and schedule mistakes that used to be
explained wrongly, and Ctrl-C in every phase.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run

from taccl_py.baselines import baseline
from taccl_py.cli import synth_cmd
from taccl_py.errors import OutputError, TopologyError
from taccl_py.inputs import json_depth, parse_json_text
from taccl_py.library import resolve_topology, ring
from taccl_py.limits import MAX_JSON_DEPTH
from taccl_py.schedule import save_schedule
from taccl_py.topology import Topology, check_topology
from taccl_py.topology_io import atomic_write_text, save_topology

REPO = Path(__file__).resolve().parent.parent
TACCL = str(Path(sys.executable).parent / "taccl")


def one_error_line(code: int, err: str, *words: str) -> None:
    """Exit status 2, exactly one line ``taccl: error: ...`` holding every word, no traceback."""
    assert code == 2, err
    assert err.startswith("taccl: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)


@pytest.fixture
def ring4(tmp_path: Path) -> Path:
    path = tmp_path / "ring4.json"
    save_topology(ring(4, 50.0, 0.5), path)
    return path


def topology_file(tmp_path: Path, **changes: Any) -> Path:
    data = json.loads((REPO / "topologies" / "ndv2.json").read_text())
    data.update(changes)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def no_synthesis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the synthesizer starts: the error must come before the work."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("synthesis started before the arguments were checked")

    monkeypatch.setattr(synth_cmd, "synthesize", refuse)


def immutable(path: Path) -> Iterator[Path]:
    """``chattr +i`` (even root cannot write); skipped where chattr is unavailable."""
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not available here ({done.stderr.decode().strip()})")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


@pytest.fixture
def immutable_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "locked.xml"
    path.write_text("old contents\n")
    yield from immutable(path)


@pytest.fixture
def immutable_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "locked"
    path.mkdir()
    yield from immutable(path)


# ------------------------------------------------------------------ 15.1 outputs, checked before the work
COMMANDS_WITH_OUTPUT = {
    "synthesize -o": lambda topo, out: ["synthesize", "-t", topo, "-c", "allgather", "-s", "1MB", "-o", out],
    "synthesize --schedule-out": lambda topo, out: ["synthesize", "-t", topo, "-c", "allgather", "-s", "1MB",
                                                    "--schedule-out", out],
    "baseline -o": lambda topo, out: ["baseline", "-t", topo, "-c", "allgather", "-s", "1MB", "-o", out],
    "profile fit -o": lambda topo, out: ["profile", "fit", str(REPO / "tests/data/profiler/sample_sendrecv.log"),
                                         "-o", out],
    "topo generate -o": lambda topo, out: ["topo", "generate", "ring", "--gpus", "4", "-o", out],
}


@pytest.mark.parametrize("command", sorted(COMMANDS_WITH_OUTPUT))
def test_output_in_a_missing_directory(command: str, ring4: Path, tmp_path: Path, no_synthesis: None,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "no" / "such" / "out.xml"
    code, _, err = run(COMMANDS_WITH_OUTPUT[command](str(ring4), str(target)), capsys)
    one_error_line(code, err, str(target), "does not exist")


@pytest.mark.parametrize("command", sorted(COMMANDS_WITH_OUTPUT))
def test_output_onto_a_directory(command: str, ring4: Path, tmp_path: Path, no_synthesis: None,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(COMMANDS_WITH_OUTPUT[command](str(ring4), str(tmp_path)), capsys)
    assert code == 2 and "Traceback" not in err and "directory" in err, err


@pytest.mark.parametrize("command", sorted(COMMANDS_WITH_OUTPUT))
def test_output_onto_an_immutable_file(command: str, ring4: Path, immutable_file: Path, no_synthesis: None,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(COMMANDS_WITH_OUTPUT[command](str(ring4), str(immutable_file)), capsys)
    one_error_line(code, err, str(immutable_file), "cannot replace the existing file")
    assert immutable_file.read_text() == "old contents\n"


@pytest.mark.parametrize("command", sorted(COMMANDS_WITH_OUTPUT))
def test_output_into_a_read_only_directory(command: str, ring4: Path, immutable_dir: Path, no_synthesis: None,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    target = immutable_dir / "out.xml"
    code, _, err = run(COMMANDS_WITH_OUTPUT[command](str(ring4), str(target)), capsys)
    one_error_line(code, err, str(target), "cannot create files in")
    assert not list(immutable_dir.iterdir())


def test_sweep_output_directory_that_cannot_be_created(ring4: Path, immutable_dir: Path, no_synthesis: None,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    target = immutable_dir / "bands"
    code, _, err = run(["synthesize", "-t", str(ring4), "-c", "allgather", "-s", "1KB:4KB", "-o", str(target)],
                       capsys)
    one_error_line(code, err, "cannot create the directory")


@pytest.mark.parametrize("command", ["synthesize -o", "synthesize --schedule-out", "baseline -o", "profile fit -o"])
def test_dash_is_not_a_file_name(command: str, ring4: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 no_synthesis: None, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(COMMANDS_WITH_OUTPUT[command](str(ring4), "-"), capsys)
    one_error_line(code, err, "standard output is not an option here")
    assert not (tmp_path / "-").exists()


def test_write_failure_at_the_end_is_one_line(tmp_path: Path) -> None:
    """Should the disk change between the check and the write, the write still fails as one named error."""
    with pytest.raises(OutputError, match="it is a directory"):
        atomic_write_text(tmp_path, "x")
    with pytest.raises(OutputError, match="cannot write here"):
        atomic_write_text(tmp_path / "missing" / "x.txt", "x")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_writing_to_a_pipe_writes_through_it(tmp_path: Path) -> None:
    """``-o /dev/stdout`` or a named pipe is written into: a rename over it would replace the device itself."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    atomic_write_text(fifo, "through the pipe\n")
    reader.join(timeout=30)
    assert received == ["through the pipe\n"] and fifo.is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


# ------------------------------------------------------------------ 15.1 degenerate and malformed inputs
def test_one_gpu_synthesize_is_a_clear_answer(tmp_path: Path, no_synthesis: None,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"name": "solo", "gpus": 1, "machines": [[0]], "links": []}))
    code, _, err = run(["synthesize", "-t", str(path), "-c", "allgather", "-s", "1MB"], capsys)
    one_error_line(code, err, "solo: has 1 GPU", "nothing to synthesize")
    code, out, _ = run(["topo", "validate", str(path)], capsys)
    assert code == 0 and "valid (1 GPU, 1 machine, 0 switch vertices, 0 directed links)" in out


@pytest.mark.parametrize("command", [["topo", "validate"], ["baseline", "-c", "allgather", "-s", "1MB", "-t"],
                                     ["simulate", "-c", "allgather", "-s", "1MB", "-a", "ring", "-t"]])
def test_a_machine_with_no_gpu_is_refused(command: list[str], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.json"
    save_topology(ring(4, 50.0, 0.5), path)
    data = json.loads(path.read_text())
    data["machines"] = [[0, 1, 2, 3], []]
    path.write_text(json.dumps(data))
    code, _, err = run([*command, str(path)], capsys)
    one_error_line(code, err, f"{path}: machines[1] is empty")


def test_an_empty_machine_is_refused_in_the_python_api_too() -> None:
    topology = ring(4, 50.0, 0.5)
    with pytest.raises(TopologyError, match=r"machines\[1\] is empty"):
        check_topology(Topology(topology.name, 4, topology.links, machines=((0, 1, 2, 3), ())))


@pytest.mark.parametrize("where", ["topology", "schedule"])
def test_deeply_nested_json(where: str, ring4: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    argv = (["topo", "validate", str(path)] if where == "topology" else
            ["simulate", "-t", str(ring4), "-s", "1MB", "-a", str(path)])
    code, _, err = run(argv, capsys)
    one_error_line(code, err, str(path), f"more than {MAX_JSON_DEPTH} levels deep (MAX_JSON_DEPTH)")


def test_json_depth_is_measured_without_recursion() -> None:
    assert json_depth(1) == 0 and json_depth([]) == 1 and json_depth({"a": [{"b": 1}]}) == 3
    assert json_depth(parse_json_text("[" * 60 + "]" * 60, TopologyError, where="t")) == 60


@pytest.mark.parametrize("gpus", [10**12, 10**8, 65_537])
def test_absurd_gpu_counts(gpus: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = topology_file(tmp_path, gpus=gpus)
    started = time.perf_counter()
    code, _, err = run(["topo", "validate", str(path)], capsys)
    one_error_line(code, err, f"gpus is {gpus}; the limit is 65,536 (MAX_GPUS)")
    assert time.perf_counter() - started < 60  # refused before any per-GPU work (generous bound for loaded CI)


def test_absurd_machine_count_in_a_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["topo", "show", "ndv2x100000000"], capsys)
    one_error_line(code, err, "the limit is 2000000")


# ------------------------------------------------------------------ 15.2 absurd numbers: refused, never a hang
@pytest.mark.parametrize(("field", "value", "words"), [
    ("latency", 1e308, ["links[0].latency is 1e+308 us", "the limit is 1e+06 us (MAX_LATENCY_US)"]),
    ("bandwidth", 1e-300, ["links[0].bandwidth is 1e-300 GB/s", "MIN_BANDWIDTH_GBPS"]),
    ("bandwidth", 1e300, ["links[0].bandwidth is 1e+300 GB/s", "MAX_BANDWIDTH_GBPS"]),
])
def test_link_figures_beyond_the_limits(field: str, value: float, words: list[str], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((REPO / "topologies" / "ndv2.json").read_text())
    data["links"][0][field] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    code, _, err = run(["simulate", "-t", str(path), "-c", "allgather", "-s", "1MB", "-a", "ring"], capsys)
    one_error_line(code, err, str(path), *words)


def test_link_figures_beyond_the_limits_in_the_python_api() -> None:
    topology = ring(4, 50.0, 0.5)
    slow = topology.links[0].__class__(0, 1, 1e-9, 0.5)
    with pytest.raises(TopologyError, match="MIN_BANDWIDTH_GBPS"):
        check_topology(Topology("t", 4, (slow, *topology.links[1:])))


def test_schedule_with_an_absurd_chunk_factor(ring4: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    topology = ring(4, 50.0, 0.5)
    path = tmp_path / "s.json"
    save_schedule(baseline(topology, "allgather", "ring", channels=1), topology, path)
    data = json.loads(path.read_text())
    data["collective"]["chunk_factor"] = 10**9
    path.write_text(json.dumps(data))
    code, _, err = run(["simulate", "-t", str(ring4), "-s", "1MB", "-a", str(path)], capsys)
    one_error_line(code, err, "collective.chunk_factor is 1000000000", "the limit is 4,096 (MAX_CHUNK_FACTOR)")


def test_schedule_with_too_many_rank_chunk_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology = resolve_topology("dgx-a100x8")  # 64 ranks: alltoall x 4096 = 64^3 x 4096 (rank, chunk) pairs
    path = tmp_path / "s.json"
    save_schedule(baseline(topology, "alltoall", "direct"), topology, path)
    data = json.loads(path.read_text())
    data["collective"]["chunk_factor"] = 4096
    path.write_text(json.dumps(data))
    code, _, err = run(["simulate", "-t", "dgx-a100x8", "-s", "1MB", "-a", str(path)], capsys)
    one_error_line(code, err, "(rank, chunk) pairs", "MAX_CHUNK_COPIES")


def test_synthesize_chunk_factor_that_cannot_fit_msccl(ring4: Path, no_synthesis: None,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["synthesize", "-t", str(ring4), "-c", "allgather", "-s", "1MB", "--chunk-factor", "100000"],
                       capsys)
    one_error_line(code, err, "--chunk-factor: 100000 needs at least 600,000 MSCCL steps per rank",
                   "at most 4096 per rank (MAX_NODES_PER_RANK)")
    code, _, err = run(["synthesize", "-t", "ndv2x2", "-c", "allgather", "-s", "1MB", "--chunk-factor", "8",
                        "--instances", "32"], capsys)
    one_error_line(code, err, "8 needs at least 7,680 MSCCL steps per rank", "x 32 instances")


def test_profile_fit_with_an_absurd_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.csv"
    path.write_text("src,dst,bytes,time_us\n0,1,1024,5\n0,100000000,1024,5\n")
    code, _, err = run(["profile", "fit", str(path)], capsys)
    one_error_line(code, err, f"{path}: line 3: dst is 100000000", "rank ids stop at 65,535 (MAX_GPUS")


def test_profile_fit_with_an_absurd_rank_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = (REPO / "tests/data/profiler/sample_sendrecv.log").read_text()
    log = log.replace("#  Rank  0", "#  Rank 0").replace("nThread 1 nGpus 1", "nThread 100000 nGpus 100000")
    log = "\n".join(line for line in log.splitlines() if "Rank" not in line)
    path = tmp_path / "sendrecv.log"
    path.write_text(log)
    code, _, err = run(["profile", "fit", str(path)], capsys)
    one_error_line(code, err, "the run has 10000000000 ranks; the limit is 65,536 (MAX_GPUS)")
    code, _, err = run(["profile", "fit", str(path), "--ranks", "100000000"], capsys)
    one_error_line(code, err, "--ranks", "100000000 is not in the range 1<=x<=65536")


@pytest.mark.parametrize(("argv", "words"), [
    (["--instances", "1000", "-o", "{out}"], ["--instances: must be in 1..32 (got 1000)"]),
    (["--root", "1", "--dialect", "v1", "-o", "{out}", "-c", "broadcast"],
     ["--dialect: broadcast with --root 1 cannot be written as v1 MSCCL XML"]),
    (["--solver", "bogus"], ["--solver: solver 'bogus' is not available"]),
    (["--seed", str(2**63)], ["--seed: must be in -2147483648..2147483647", "32-bit seed"]),
    (["--time-limit", "nan"], ["--time-limit: must be a number of seconds"]),
])
def test_synthesize_arguments_are_checked_before_the_work(argv: list[str], words: list[str], ring4: Path,
                                                          tmp_path: Path, no_synthesis: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    args = [a.replace("{out}", str(tmp_path / "out.xml")) for a in argv]
    collective = [] if "-c" in args else ["-c", "allgather"]
    code, _, err = run(["synthesize", "-t", str(ring4), *collective, "-s", "1MB", *args], capsys)
    one_error_line(code, err, *words)
    assert not (tmp_path / "out.xml").exists()


def test_baseline_root_with_v1_is_checked_before_the_simulations(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["baseline", "-t", "ring8", "-c", "broadcast", "-s", "1MB", "--root", "1", "--dialect", "v1",
                        "-o", str(tmp_path / "b.xml")], capsys)
    one_error_line(code, err, "--dialect: broadcast with --root 1 cannot be written as v1 MSCCL XML")


@pytest.mark.parametrize("value", ["inf", "nan", "1e308", "-1"])
def test_step_overhead_beyond_the_limits(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["simulate", "-t", "ring8", "-c", "allgather", "-s", "1MB", "-a", "ring", "--step-overhead",
                        value], capsys)
    one_error_line(code, err, "--step-overhead", "MAX_LATENCY_US")


def test_sizes_beyond_a_terabyte(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["bound", "-t", "ring8", "-c", "allgather", "-s", "1e300"], capsys)
    one_error_line(code, err, "--size: size '1e300' is above 1TB", "MAX_SIZE_BYTES")


# ------------------------------------------------------------------ 15.3 say what happened
def sketch_file(tmp_path: Path, **fields: Any) -> Path:
    data = {"nnodes": 2, "intranode_sketch": {"strategy": "none"},
            "internode_sketch": {"strategy": "relay", "internode_conn": "fully-connected"}} | fields
    path = tmp_path / "sketch.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("fields", "words"), [
    ({"symmetry_offsets": [[8, 16], [3, 16]]}, ["symmetry_offsets[1] [3, 16]"]),
    ({"symmetry_offsets": [[2, 5]]}, ["symmetry_offsets[0] [2, 5]: groups of 5 GPUs do not divide the 16 GPUs"]),
    ({"symmetry_offsets": [[16, 16]]}, ["symmetry_offsets[0] [16, 16]: an offset of 16", "moves no GPU"]),
    ({"internode_sketch": {"strategy": "relay", "internode_conn": {"0": [99]}}},
     ["internode_sketch.internode_conn.0 names GPU 99, but a machine of ndv2x2 has local GPUs 0..7"]),
    ({"intranode_sketch": {"strategy": "switch", "switches": [[0, 1, 12]]}},
     ["intranode_sketch.switches[0] names GPU 12"]),
])
def test_sketch_mistakes_are_named(fields: dict[str, Any], words: list[str], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = sketch_file(tmp_path, **fields)
    code, _, err = run(["synthesize", "-t", "ndv2x2", "-c", "allgather", "-s", "1MB", "--sketch", str(path),
                        "--time-limit", "5"], capsys)
    one_error_line(code, err, f"{path}: ", *words)


def test_an_offset_that_is_not_a_symmetry_of_the_topology(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With every connection allowed, [3, 8] inside each NDv2 machine is simply not an automorphism."""
    path = tmp_path / "sketch.json"
    path.write_text(json.dumps({"nnodes": 2, "symmetry_offsets": [[3, 8]]}))
    code, _, err = run(["synthesize", "-t", "ndv2x2", "-c", "allgather", "-s", "1MB", "--sketch", str(path),
                        "--time-limit", "5"], capsys)
    one_error_line(code, err, "symmetry_offsets[0] [3, 8] is not a symmetry of ndv2x2")


def test_after_naming_its_own_transfer(ring4: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology = ring(4, 50.0, 0.5)
    path = tmp_path / "s.json"
    save_schedule(baseline(topology, "allgather", "ring", channels=1), topology, path)
    data = json.loads(path.read_text())
    data["transfers"][2]["after"] = [2]
    path.write_text(json.dumps(data))
    code, _, err = run(["simulate", "-t", str(ring4), "-s", "1MB", "-a", str(path)], capsys)
    one_error_line(code, err, f"{path}: transfers[2] 'after' refers to itself")


@pytest.mark.parametrize("name", ["plain", "looks.xml", "looks.json"])
def test_a_directory_as_algorithm(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / name
    directory.mkdir()
    code, _, err = run(["simulate", "-t", "ring8", "-c", "allgather", "-s", "1MB", "-a", str(directory)], capsys)
    one_error_line(code, err, "is a directory")


# ------------------------------------------------------------------ Ctrl-C
@pytest.mark.parametrize("phase", ["synthesize", "compiled kernel", "write_xml", "save_schedule"])
def test_ctrl_c_in_each_synthesize_phase(phase: str, ring4: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A Ctrl-C while solving, in a compiled kernel, while writing the XML or the schedule: one line, exit 130, no
    file left."""
    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    def interrupt_in_numba(*args: object, **kwargs: object) -> None:
        """As numba reports a Ctrl-C that lands while it loads a cached kernel: SystemErrors raised from it."""
        try:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as exc:
                raise SystemError("<function _numba_unpickle> returned a result with an exception set") from exc
        except SystemError as exc:
            raise SystemError("CPUDispatcher(<function run>) returned a result with an exception set") from exc

    if phase == "compiled kernel":
        monkeypatch.setattr(synth_cmd, "synthesize", interrupt_in_numba)
    elif phase == "synthesize":
        monkeypatch.setattr(synth_cmd, "synthesize", interrupt)
    elif phase == "write_xml":
        monkeypatch.setattr("taccl_py.msccl.writer.write_xml", interrupt)
    else:
        monkeypatch.setattr("taccl_py.schedule.schedule_to_dict", interrupt)
    code, _, err = run(["synthesize", "-t", str(ring4), "-c", "allgather", "-s", "1KB", "-o",
                          str(tmp_path / "out.xml"), "--schedule-out", str(tmp_path / "s.json"),
                          "--time-limit", "5"], capsys)
    assert (code, err) == (130, "taccl: interrupted\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["out.xml", "ring4.json"] if phase == "save_schedule"
                                                          else ["ring4.json"])


def test_a_system_error_that_is_not_an_interrupt_is_not_hidden(ring4: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise SystemError("a real bug")

    monkeypatch.setattr(synth_cmd, "synthesize", broken)
    with pytest.raises(SystemError, match="a real bug"):
        run(["synthesize", "-t", str(ring4), "-c", "allgather", "-s", "1KB", "--time-limit", "5"], capsys)


@pytest.mark.slow
@pytest.mark.serial  # its own process, away from the load of the parallel phase
def test_ctrl_c_stops_a_cp_sat_solve_at_once() -> None:
    """CP-SAT would swallow the first Ctrl-C (and then leave SIGINT at its default); ours stops and propagates."""
    from ortools.sat.python import cp_model

    from solver_models._backend import solve_cpsat_interruptibly

    # A 13-mark Golomb ruler: proving its optimum takes one CP-SAT worker far longer than the 60 s limit, so
    # the solve is still running when the interrupt comes, however fast or loaded the machine is.
    marks, longest = 13, 200
    model = cp_model.CpModel()
    xs = [model.new_int_var(0, longest, f"m{i}") for i in range(marks)]
    model.add(xs[0] == 0)
    for i in range(marks - 1):
        model.add(xs[i] < xs[i + 1])
    gaps = []
    for i in range(marks):
        for j in range(i + 1, marks):
            gap = model.new_int_var(1, longest, f"d{i}_{j}")
            model.add(gap == xs[j] - xs[i])
            gaps.append(gap)
    model.add_all_different(gaps)
    model.minimize(xs[-1])
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 60
    solver.parameters.num_workers = 1
    # what a user's Ctrl-C meets: Python's handler (a shell starts background jobs with SIGINT ignored, and Python
    # then keeps it ignored; the test suite may run so)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        started = time.perf_counter()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            solve_cpsat_interruptibly(solver, model)
        assert time.perf_counter() - started < 30  # far below the 60 s limit: the interrupt stopped the search
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):  # and the next Ctrl-C is still Python's, not a silent kill
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    finally:
        signal.signal(signal.SIGINT, inherited)


@pytest.mark.slow
def test_ctrl_c_through_the_real_command(tmp_path: Path) -> None:
    """A real SIGINT to a running ``taccl synthesize``: one line, status 130, no XML and no temporary file."""
    process = subprocess.Popen([TACCL, "synthesize", "-t", "ndv2x2", "-c", "allgather", "-s", "1GB", "-o",
                                str(tmp_path / "out.xml"), "--time-limit", "120"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(4)  # past start-up: loading, symmetry or the solvers
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert err == "taccl: interrupted\n"
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ the README's examples and figures
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_example_log_is_shipped_and_fits(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "examples" / "nccl-tests" / "sendrecv.log"
    assert "taccl profile fit examples/nccl-tests/sendrecv.log -o fitted.json" in README
    assert path.read_bytes() == (REPO / "tests" / "data" / "profiler" / "sample_sendrecv.log").read_bytes()
    code, out, _ = run(["profile", "fit", str(path), "--json"], capsys)
    fit = json.loads(out)["fits"][0]
    assert code == 0 and round(fit["alpha_us"], 2) == 9.11 and round(fit["bandwidth_GBps"], 1) == 230.0


def test_the_readme_says_how_to_run_taccl_after_make_demo() -> None:
    assert ".venv/bin/taccl" in README and "source .venv/bin/activate" in README


@pytest.mark.slow
def test_the_readme_quotes_what_make_demo_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """The figures the README gives for `make demo` are the ones the demo's synthesize prints."""
    code, out, _ = run(["synthesize", "--topology", "ndv2x2", "--collective", "allgather", "--size", "1GB",
                        "--json"], capsys)
    row = json.loads(out)
    assert code == 0 and row["ring_time_us"]
    size = row["size_bytes"]
    sentence = (f"({row['algbw_GBps']:.2f} GB/s against a cut bound of {size / row['bound_us'] / 1e3:.2f} and a "
                f"ring at {size / row['ring_time_us'] / 1e3:.2f}")
    assert sentence in " ".join(README.split()), sentence


@pytest.mark.slow
@pytest.mark.parametrize(("text", "words"), [
    ("[" * 100_000 + "]" * 100_000, ["more than 64 levels deep (MAX_JSON_DEPTH)"]),
    ("a: &a [1, *a]\n", ["more than 64 levels deep"]),
])
def test_astra_yaml_nesting_and_self_reference(text: str, words: list[str], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "network.yml"
    path.write_text(text)
    code, _, err = run(["topo", "validate", str(path)], capsys)
    one_error_line(code, err, str(path), *words)


def test_json_depth_survives_shared_and_cyclic_data() -> None:
    shared: list[Any] = [1, 2]
    for _ in range(60):
        shared = [shared] * 9  # 9^60 paths, 61 levels: measured once per container
    assert json_depth(shared) == 61
    cyclic: list[Any] = []
    cyclic.append([cyclic])
    assert json_depth(cyclic) == sys.maxsize


def test_an_endless_input_is_cut_off(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["topo", "validate", "/dev/zero"], capsys)
    one_error_line(code, err, "/dev/zero: is larger than 256 MiB (MAX_FILE_BYTES)")
