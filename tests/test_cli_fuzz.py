"""Fuzzing the whole command line: random arguments and random file contents never end in a traceback.

Every command of the ``taccl`` group (found by walking the click tree, so a new
command is fuzzed without touching this file) gets random values for a random
subset of its options and arguments, drawn from pools that mix valid values
(small topologies, real files) with the absurd (negative, NaN, 1e308, 10^9,
directories, missing and unwritable paths). A second fuzz feeds every file
reader random bytes, random JSON, and valid files with one field replaced.

The contract: the command exits 0, 2 (bad input, one ``taccl: error:`` line),
or 1 (a result that is wrong, e.g. an incorrect algorithm), never with an
exception; and it finishes in seconds. Examples are few enough for ``make
test``; ``TACCL_FUZZ_EXAMPLES=2000`` runs a longer campaign, and ``FUZZ_LOG=FILE`` appends
every run (exit status, command, first error line) to FILE to see what the fuzz reached.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import click
import pytest
from cli_runner import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import baseline
from taccl_py.cli.main import cli
from taccl_py.library import ring
from taccl_py.msccl import write_schedule_xml
from taccl_py.profiler import live
from taccl_py.profiler.measurements import Sample, write_measurements_csv
from taccl_py.schedule import save_schedule
from taccl_py.topology_io import save_topology

EXAMPLES = int(os.environ.get("TACCL_FUZZ_EXAMPLES", "60"))
PROFILER_DATA = Path(__file__).parent / "data" / "profiler"
SKETCHES = Path(__file__).parent / "vectors" / "taccl" / "sketch"
FUZZ_SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                         suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ------------------------------------------------------------------ the command tree
def _leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                      click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from _leaf_commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


COMMANDS = sorted(_leaf_commands(cli), key=lambda item: item[0])


def test_the_fuzz_sees_every_command() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"synthesize", "simulate", "baseline", "bound", "verify", "topo list", "topo show", "topo validate",
            "topo generate", "profile fit", "profile run", "profile show"} <= names


@pytest.fixture(autouse=True)
def _work_in_a_scratch_directory(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative outputs a fuzzed command writes land in a scratch directory, never in the repository."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


# ------------------------------------------------------------------ files the pools point at
@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Valid inputs, garbage inputs and output locations, by name."""
    root = tmp_path_factory.mktemp("fuzz")
    ring4 = ring(4, 50.0, 0.5)
    save_topology(ring4, root / "ring4.json")
    schedule = baseline(ring4, "allgather", "ring", channels=1)
    save_schedule(schedule, ring4, root / "ag.json")
    write_schedule_xml(schedule, ring4, root / "ag.xml")
    one_gpu = {"name": "one", "gpus": 1, "machines": [[0]], "links": []}
    (root / "one.json").write_text(json.dumps(one_gpu))
    (root / "empty.json").write_text("")
    (root / "nested.json").write_text("[" * 50_000 + "]" * 50_000)
    (root / "binary.json").write_bytes(b"\xff\xfe\x00\x01" * 64)
    (root / "array.json").write_text("[1, 2, 3]")
    (root / "bigint.json").write_text('{"gpus": ' + "9" * 5000 + ', "links": []}')
    (root / "notes.txt").write_text("hello\n")
    (root / "bad.xml").write_text("<algo><gpu id='0'></algo>")
    (root / "adir").mkdir()
    (root / "adir.xml").mkdir()
    return {name: str(root / name) for name in (
        "ring4.json", "ag.json", "ag.xml", "one.json", "empty.json", "nested.json", "binary.json", "array.json",
        "bigint.json", "notes.txt", "bad.xml", "adir", "adir.xml")} | {
        "out.xml": str(root / "out.xml"), "out.json": str(root / "out.json"), "out.csv": str(root / "out.csv"),
        "out.png": str(root / "out.png"), "missing/x.xml": str(root / "missing" / "x.xml"),
        "nosuch.json": str(root / "nosuch.json"), "root": str(root),
        "sendrecv.log": str(PROFILER_DATA / "sample_sendrecv.log"),
        "pingpong.csv": str(PROFILER_DATA / "sample_pingpong.csv"),
        "sketch.json": str(SKETCHES / "sk2-ndv2-n2.json"),
    }


_TOPOLOGY_FILES = ["ring4.json", "one.json", "empty.json", "nested.json", "binary.json", "array.json", "bigint.json",
                   "adir", "nosuch.json", "notes.txt"]
_INPUT_FILES = [*_TOPOLOGY_FILES, "ag.json", "ag.xml", "bad.xml", "adir.xml", "sendrecv.log", "pingpong.csv",
                "sketch.json"]
_INTS = [0, 1, 2, 3, 7, 8, 16, 64, 1000, -1, 10**9, 2**63]
_FLOATS = [0.0, 0.5, 1.0, 2.0, 60.0, -1.0, 1e-300, 1e308, math.inf, math.nan]
_TEXT = ["", "x", "-1", "0", "1", "nan", "inf", "1e308", "ring", "tree", "4x4", "2x0", "100000x100000",
         "Ring:2:200:50", "Ring:100000:1:1", "--json", "../..", "a" * 300]


Pool = tuple[list[Any], list[Any]]
"""Valid values (so a run gets past the first check) and absurd ones, for one kind of parameter."""


def _file(names: list[str]) -> list[str]:
    return [f"@{name}" for name in names]


_TOPOLOGIES: Pool = (["ring8", "@ring4.json", "ndv2"],
                     ["dgx1", "nosuch", "ndv2x100000000", "dgx2x0", "", "mi250x2-nvls", *_file(_TOPOLOGY_FILES)])
_SIZES: Pool = (["1KB", "1MB", "1KB:4KB", "4096"],
                ["1", "0", "-5", "1e300", "1TB", "2TB", "4KB:1KB", ":", "abc", "1.5", "64MiB", "nan"])
_COLLECTIVES: Pool = (["allgather", "allreduce", "reducescatter", "alltoall", "broadcast", "reduce"],
                      ["sendrecv", "bogus", ""])
_ALGORITHMS: Pool = (["ring", "tree", "direct", "rd", "@ag.json", "@ag.xml"], ["bogus", *_file(_INPUT_FILES)])
_OUTPUTS: Pool = (["@out.xml", "@out.json", "@out.csv", "@out.png"], ["@missing/x.xml", "@adir", "@root", "-"])
_FILES: Pool = (["@ag.xml", "@sendrecv.log", "@pingpong.csv", "@ring4.json", "@sketch.json"], _file(_INPUT_FILES))
_GENERATORS: Pool = (["ring", "torus", "hypercube", "ndv2", "dgx-a100", "switch", "astra"],
                     ["mesh", "dgx-h100", "gb200-nvl72", "bogus"])


def _pool_for(param: click.Parameter) -> Pool:
    """The values one option or argument gets, by its type and by what its name says it is."""
    name = (param.name or "").lower()
    if isinstance(param.type, click.Choice):
        return list(param.type.choices), ["bogus"]
    if isinstance(param.type, click.types.IntParamType):
        return [1, 2, 4, 8], _INTS
    if isinstance(param.type, click.types.FloatParamType):
        return [0.0, 1.0, 2.0], _FLOATS
    if any(word in name for word in ("output", "schedule_out", "plot", "fit_output")):
        return _OUTPUTS
    if "topology" in name or name in ("spec", "into"):
        return _TOPOLOGIES
    if "size" in name:
        return _SIZES
    if "collective" in name:
        return _COLLECTIVES
    if name in ("algorithm", "only"):
        return _ALGORITHMS
    if name == "kind":
        return _GENERATORS
    if "sketch" in name or name in ("files", "file", "path", "xml_file"):
        return _FILES
    return _TEXT, _file(_INPUT_FILES)


def _values_for(param: click.Parameter, *, weird: bool | None = None) -> st.SearchStrategy[Any]:
    """Valid values (``weird=False``), absurd ones (``True``), or mostly valid, often absurd (``None``)."""
    valid, absurd = _pool_for(param)
    if weird is None:
        return st.one_of(*[st.sampled_from(valid)] * 3, st.sampled_from(absurd))
    return st.sampled_from(absurd if weird else valid)


def _params(command: click.Command) -> list[click.Parameter]:
    return [p for p in command.params if p.name not in ("help",) and not getattr(p, "hidden", False)]


def _render(param: click.Parameter, value: Any) -> list[Any]:
    if isinstance(param, click.Option):
        return [param.opts[-1]] if param.is_flag else [param.opts[-1], value]
    return [value]


def _args_for(command: click.Command) -> st.SearchStrategy[list[Any]]:
    """A random selection of the command's parameters with random values (flags just on or off).

    Required parameters are given nine times in ten, others one time in three.
    """
    params = _params(command)

    @st.composite
    def build(draw: st.DrawFn) -> list[Any]:
        args: list[Any] = []
        for param in params:
            required = getattr(param, "required", False)
            if not draw(st.integers(0, 9 if required else 2)):
                continue
            count = 2 if isinstance(param, click.Argument) and param.nargs != 1 and draw(st.booleans()) else 1
            for _ in range(count):
                args += _render(param, draw(_values_for(param)))
        return args

    return build()


def _one_absurd_cases() -> list[tuple[tuple[str, ...], tuple[Any, ...]]]:
    """Every (command, parameter, absurd value), with every required parameter given its first valid value.

    Each command line once: a flag renders the same whatever value its pool offers.
    """
    cases: dict[tuple[tuple[str, ...], tuple[Any, ...]], None] = {}
    for path, command in COMMANDS:
        params = _params(command)
        for odd in params:
            for value in _pool_for(odd)[1]:
                args: list[Any] = []
                for param in params:
                    if param is odd:
                        args += _render(param, value)
                    elif getattr(param, "required", False):
                        args += _render(param, _pool_for(param)[0][0])
                cases[(path, tuple(args))] = None
    return list(cases)


def _resolve(args: list[Any], files: dict[str, str]) -> list[str]:
    return [files[a[1:]] if isinstance(a, str) and a.startswith("@") else str(a) for a in args]


def _check_outcome(code: int, out: str, err: str, argv: list[str]) -> None:
    if os.environ.get("FUZZ_LOG"):
        with open(os.environ["FUZZ_LOG"], "a") as log:
            log.write(f"{code} {argv[:6]} {err.strip()[:150]!r}\n")
    assert "Traceback" not in out + err, (argv, err)
    assert code in (0, 1, 2), (argv, code, err)
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines, (argv, "exit 2 without a word")
        if lines[0].startswith("taccl: error:"):
            assert len([line for line in lines if line.startswith("taccl: error:")]) == 1, (argv, err)


_SHORT_RUNS: dict[tuple[str, ...], tuple[tuple[str, str], ...]] = {
    ("synthesize",): (("--time-limit", "1"), ("--threads", "1")),
    ("profile", "run"): (("--sizes", "1KB:2KB"), ("--repeats", "1"), ("--warmup", "0")),
}
"""Options that keep a run short, added unless the example sets them: the fuzz tests the inputs, not the
solver, and not a live ping-pong at its default sizes (up to 256 MB, 20 repeats: minutes where PyTorch is
installed)."""


def _short_run_guard(path: tuple[str, ...], argv: list[str]) -> list[str]:
    return [*argv, *[arg for option, value in _SHORT_RUNS.get(path, ()) if option not in argv
                     for arg in (option, value)]]


LIVE_PING_PONG = (("profile", "run"), ("--nproc", "3", "--output", "@out.xml"))
"""The one fuzz case that spawns real ranks where PyTorch is installed; the others measure with
:func:`_recorded_ping_pong`. The live path's own tests are tests/test_profiler_live.py."""


def _recorded_ping_pong(config: live.PingPongConfig, nproc: int, output: str) -> None:
    """Stands in for :func:`live.run_local`: its checks, then the CSV its rank 0 writes, on a fixed line.

    The fuzz tests what the command makes of its arguments; a real ping-pong per accepted argument (up to 16
    processes each) cost CI minutes and timed nothing.
    """
    live.check_local_run(config, nproc)
    samples = [Sample(src, dst, size, 3.0 + size / 2e3, repeat) for src, dst in config.pairs
               for size in config.sizes for repeat in range(config.repeats)]
    write_measurements_csv(output, samples, comments=[f"fuzz stand-in for {nproc} local ranks"])


@contextlib.contextmanager
def _ping_pong_for(case: tuple[tuple[str, ...], tuple[Any, ...]] | None) -> Iterator[None]:
    if case is not None and (case[0], tuple(map(str, case[1]))) == LIVE_PING_PONG:
        yield
        return
    with mock.patch.object(live, "run_local", _recorded_ping_pong):
        yield


@pytest.mark.slow
@FUZZ_SETTINGS
@given(data=st.data())
def test_random_arguments_never_crash(data: st.DataObject, files: dict[str, str],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path, command = data.draw(st.sampled_from(COMMANDS), label="command")
    argv = _short_run_guard(path, [*path, *_resolve(data.draw(_args_for(command), label="args"), files)])
    with _ping_pong_for(None):
        code, out, err = run(argv, capsys)
    _check_outcome(code, out, err, argv)


ONE_ABSURD = _one_absurd_cases()


def test_one_case_spawns_real_ranks() -> None:
    assert LIVE_PING_PONG in [(path, tuple(map(str, args))) for path, args in ONE_ABSURD]


@pytest.mark.slow
@pytest.mark.parametrize("case", ONE_ABSURD, ids=[" ".join(map(str, (*p, *a))) for p, a in ONE_ABSURD])
def test_one_absurd_argument_never_crashes(case: tuple[tuple[str, ...], tuple[Any, ...]], files: dict[str, str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Each absurd value of each parameter once, everything else valid: one check at a time, exhaustively."""
    path, args = case
    argv = _short_run_guard(path, [*path, *_resolve(list(args), files)])
    with _ping_pong_for(case):
        code, out, err = run(argv, capsys)
    _check_outcome(code, out, err, argv)


# ------------------------------------------------------------------ random file contents
def _json_containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8), _json_containers, max_leaves=20)


def _paths_in(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths_in(child, (*prefix, key))
    elif isinstance(value, list):
        for k, child in enumerate(value):
            yield from _paths_in(child, (*prefix, k))


def _replace(value: Any, where: tuple[Any, ...], new: Any) -> Any:
    if not where:
        return new
    copy = json.loads(json.dumps(value))
    node = copy
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = new
    return copy


@st.composite
def _mutated(draw: st.DrawFn, document: Any) -> str:
    """A valid document with one node replaced by random JSON (or the text cut short, or random JSON)."""
    how = draw(st.sampled_from(["replace", "replace", "replace", "truncate", "random"]))
    if how == "random":
        return json.dumps(draw(_JSON))
    text = json.dumps(document)
    if how == "truncate":
        return text[:draw(st.integers(0, len(text)))]
    where = draw(st.sampled_from(list(_paths_in(document))))
    return json.dumps(_replace(document, where, draw(_JSON)))


def _documents(files: dict[str, str]) -> dict[str, Any]:
    return {kind: json.loads(Path(files[name]).read_text()) for kind, name in
            (("topology", "ring4.json"), ("schedule", "ag.json"), ("sketch", "sketch.json"))}


_READERS = {
    "topology": lambda f, p: ["topo", "validate", p],
    "topology-simulate": lambda f, p: ["simulate", "-t", p, "-c", "allgather", "-s", "1MB", "-a", "ring"],
    "schedule": lambda f, p: ["simulate", "-t", f["ring4.json"], "-s", "1KB:4KB", "-a", p],
    "sketch": lambda f, p: ["synthesize", "-t", "ndv2x2", "-c", "allgather", "-s", "1MB", "--sketch", p,
                            "--time-limit", "1", "--threads", "1", "--chunk-factor", "1", "--no-baselines"],
}


@pytest.mark.slow
@FUZZ_SETTINGS
@given(data=st.data())
def test_random_json_files_never_crash(data: st.DataObject, files: dict[str, str], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    reader = data.draw(st.sampled_from(sorted(_READERS)), label="reader")
    document = _documents(files)[reader.split("-")[0]]
    text = data.draw(_mutated(document), label="contents")
    path = tmp_path / f"fuzz-{reader}.json"
    path.write_text(text)
    argv = _READERS[reader](files, str(path))
    code, out, err = run(argv, capsys)
    _check_outcome(code, out, err, argv)


_LINES = st.sampled_from([
    "src,dst,bytes,time_us", "0,1,1024,5.0", "1,0,2048,7.5", "0,0,1,1", "0,99999999,1,1", "-1,2,3,4", "a,b,c,d",
    "0,1,0,1", "0,1,1e30,1", "0,1,1024,nan", "0,1,1024,1e308", "# comment", "",
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 1024 step: 2(factor)", "# nThread 99999 nGpus 99999 minBytes 8",
    "#  Rank  0 Group  0 Pid 1 on host device  0 [0x01] NVIDIA H100",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
    "#wrong",
    "           8             2     float     sum      -1    10.00    0.00    0.00      0    10.00    0.00    0.00"
    "      0",
    "        1024           256     float     sum      -1    12.00    0.09    0.09      0    12.00    0.09    0.09"
    "      0",
    "     1048576        262144     float     sum      -1    1e999    nan    -1      0    12.00    0.09    0.09      0",
    "# Avg bus bandwidth    : 0.05", "<algo name='x'>", "\x00\xff",
])


@pytest.mark.slow
@FUZZ_SETTINGS
@given(lines=st.lists(_LINES, max_size=12), suffix=st.sampled_from([".csv", ".log"]),
       command=st.sampled_from(["fit", "show"]))
def test_random_measurement_files_never_crash(lines: list[str], suffix: str, command: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"m{suffix}"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")
    argv = ["profile", command, str(path), *(["--collective", "sendrecv"] if suffix == ".log" else [])]
    code, out, err = run(argv, capsys)
    _check_outcome(code, out, err, argv)


@pytest.mark.slow
@FUZZ_SETTINGS
@given(body=st.text(max_size=300), wrap=st.booleans())
def test_random_xml_files_never_crash(body: str, wrap: bool, files: dict[str, str], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fuzz.xml"
    text = Path(files["ag.xml"]).read_text()
    path.write_text(text.replace("<tb ", body + "<tb ", 1) if wrap else body, encoding="utf-8",
                    errors="surrogateescape")
    for argv in (["verify", str(path)], ["simulate", "-t", files["ring4.json"], "-s", "1KB", "-a", str(path)]):
        code, out, err = run(argv, capsys)
        _check_outcome(code, out, err, argv)


@pytest.mark.slow
def test_the_installed_command_prints_no_traceback(files: dict[str, str]) -> None:
    """One fuzz finding replayed through the real entry point (a subprocess), as a user runs it."""
    done = subprocess.run(["taccl", "topo", "validate", files["nested.json"]], capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
                          timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "MAX_JSON_DEPTH" in done.stderr
