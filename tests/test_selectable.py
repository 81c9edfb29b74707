"""Files the runtime actually picks: ``baseline -o`` at its size, ``verify``'s selection warnings and ``--size``.

The runtime's rule is recomputed here from its definition (msccl-executor-nccl /
RCCL ``mscclInternalSchedulerSelectAlgo``), independently of
``taccl_py.msccl.selection``: a call of ``count`` elements is served by the
file only if ``count x sizeMultiplier`` is a multiple of ``nchunksperloop``
(sizeMultiplier = ngpus for allgather, reducescatter and alltoall, else 1;
``count`` is per rank for allgather and reducescatter) and the size lies in
``minBytes..maxBytes``.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cli_runner import only_json, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import baseline
from taccl_py.collectives import CollectiveKind
from taccl_py.library import mesh, resolve_topology, switch_star
from taccl_py.msccl import load_program, lower_schedule, save_xml, verify_program
from taccl_py.msccl.ir import Program
from taccl_py.msccl.rules import check_rules
from taccl_py.schedule import Schedule
from taccl_py.testing import topologies
from taccl_py.topology import Topology
from taccl_py.topology_io import save_topology

KB, MB = 1024, 1 << 20
FLOAT = 4


def runtime_picks(program: Program, size: int, type_size: int = FLOAT) -> bool:
    """The v2 runtime's decision, written from its definition."""
    multiplied = program.coll in ("allgather", "reducescatter", "alltoall")
    multiplier = program.ngpus if multiplied else 1
    if size % (type_size * multiplier):
        return False
    count = size // (type_size * multiplier)
    if count <= 0:
        return False
    lo, hi = program.min_bytes or 0, program.max_bytes or 0
    if size < lo or (hi and size > hi):
        return False
    return (count * multiplier) % program.nchunksperloop == 0


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


# ---------------------------------------------------------------- baseline -o
@pytest.mark.slow
@pytest.mark.parametrize(("name", "algorithm", "verify"), [("dgx2x2", "tree", False), ("dgx-a100x2", "tree", True),
                                                          ("dgx1", "ring", True)])
def test_issue_examples_are_now_picked(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                       algorithm: str, verify: bool) -> None:
    """Issue 16: ``baseline -t dgx2x2 -c allreduce -s 1MB`` wrote a tree with nchunksperloop 1632, dgx-a100x2
    one with 96; DGX-1 rings came in twelves. The files written now are picked at 1 MB."""
    out = tmp_path / "b.xml"
    code, stdout, _ = run(["baseline", "-t", name, "-c", "allreduce", "-s", "1MB", "-a", algorithm, "-o", str(out),
                           "--json"], capsys)
    assert code == 0
    xml = only_json(stdout)["xml"]
    program = load_program(out)
    assert runtime_picks(program, MB)
    assert xml["selected"] and xml["nchunksperloop"] == program.nchunksperloop
    assert _power_of_two(program.nchunksperloop)
    assert xml["changed"]  # the default did not fit
    assert xml["count"] == MB // FLOAT
    if verify:  # (the 32-GPU tree takes long to verify; the others cover the same code)
        report = verify_program(program)
        assert report.valid and report.correct
        assert not [n for n in report.notes if "selected]" in n]


def test_human_output_says_what_the_runtime_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(["baseline", "-t", "dgx-a100x2", "-c", "allreduce", "-s", "1MB", "-a", "tree", "-o",
                           str(tmp_path / "t.xml")], capsys)
    assert code == 0
    assert "the runtime picks it at 1048576 bytes (count 262144 elements of 4 bytes)" in stdout.replace("\n", " ")


def test_fewer_channels_when_the_default_exceeds_the_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A default whose program the runtime cannot hold (as the 8-ring Allreduce on dgx-a100x16, 48 connections
    between two ranks where MSCCL has 32 channels) is written with fewer channels, and the output says why;
    an explicit --channels is refused instead. Here the runtime is given 6 channels for the 12 rings of NDv2."""
    from taccl_py.msccl import assembly, lowering

    monkeypatch.setattr(lowering, "MAX_CHANNELS", 6)
    monkeypatch.setattr(assembly, "MAX_CHANNELS", 6)
    out = tmp_path / "ring.xml"
    code, stdout, _ = run(["baseline", "-t", "ndv2", "-c", "allgather", "-s", "1MB", "-a", "ring", "-o", str(out),
                           "--json"], capsys)
    assert code == 0 and out.exists()
    xml = only_json(stdout)["xml"]
    assert re.search(r"^\d+ channels: with \d+ channels the program exceeds the runtime's limits$", xml["changed"])
    assert xml["selected"] and runtime_picks(load_program(out), MB)
    assert max(tb.chan for gpu in load_program(out).gpus for tb in gpu.threadblocks) < 6
    code, _, stderr = run(["baseline", "-t", "ndv2", "-c", "allgather", "-s", "1MB", "-a", "ring", "--channels",
                           "12", "-o", str(tmp_path / "asked.xml")], capsys)
    assert code == 1 and "need a channel but all 6 are taken" in stderr  # a limit of the format, not bad input
    assert not (tmp_path / "asked.xml").exists()


def test_the_channel_floor_refuses_before_the_analysis(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A channel count whose floor (``fewest_connections``) is above the runtime's channels is refused before the
    lowering analyses the schedule, or, a ring's, before it is lowered at all (its floor known from the plan), and
    the file and the output are those of refusing it after the analysis: NDv2 on a runtime of 2 channels, with
    both floors, with the lowering's alone and with neither. At 1 MB the runtime picks 16 rings, not the plan's 12
    (so only the built schedule can say: at least 6 connections), then 8 (at least 4, known from the plan), then 4
    (at least 2: only the analysis finds more) and 2, which fit."""
    from taccl_py.baselines import selectable
    from taccl_py.msccl import assembly, lowering

    monkeypatch.setattr(lowering, "MAX_CHANNELS", 2)
    monkeypatch.setattr(assembly, "MAX_CHANNELS", 2)
    analysed: list[int] = []
    lowered: list[int] = []
    real_analyze, real_lower = lowering.analyze, lowering.lower_schedule

    def counting_analyze(schedule: Schedule) -> Any:
        analysed.append(int(schedule.notes.get("channels") or 1))
        return real_analyze(schedule)

    def counting_lower(schedule: Schedule, *args: Any, **kwargs: Any) -> Any:
        lowered.append(int(schedule.notes.get("channels") or 1))
        return real_lower(schedule, *args, **kwargs)

    monkeypatch.setattr(lowering, "analyze", counting_analyze)
    monkeypatch.setattr(lowering, "lower_schedule", counting_lower)
    outputs = []
    refusals: list[tuple[str, list[int]]] = []
    for floors in ("both", "lowering's", "none"):
        if floors == "lowering's":
            monkeypatch.setattr(selectable, "ring_send_waits_at", lambda *args, **kwargs: None)
        if floors == "none":
            monkeypatch.setattr(lowering, "_floor_of_waits", lambda members, limit: ({}, {}))
        analysed.clear()
        lowered.clear()
        out = tmp_path / f"ring-{floors}.xml"
        code, stdout, _ = run(["baseline", "-t", "ndv2", "-c", "allgather", "-s", "1MB", "-a", "ring", "-o",
                               str(out), "--json"], capsys)
        assert code == 0
        xml = only_json(stdout)["xml"]
        del xml["path"]
        outputs.append((out.read_bytes(), xml, list(lowered), list(analysed)))
        lowered.clear()
        asked = tmp_path / f"asked-{floors}.xml"
        code, _, stderr = run(["baseline", "-t", "ndv2", "-c", "allgather", "-s", "1MB", "-a", "ring", "--channels",
                               "8", "-o", str(asked)], capsys)
        assert code == 1 and not asked.exists()
        refusals.append((stderr, list(lowered)))
    (both, keys, *tried), (lowering_only, keys_lowering, *tried_lowering), (none, keys_none, *tried_none) = outputs
    assert refusals[0][0] == refusals[1][0]  # without either floor the analysis refuses it, with the exact count
    assert "need a channel but all 2 are taken (at least 3 connections" in refusals[0][0]
    assert "need a channel but all 2 are taken (3 connections" in refusals[2][0]
    assert [lowered for _, lowered in refusals] == [[], [8], [8]]  # an explicit count refused from the plan: unbuilt
    assert both == lowering_only == none and keys == keys_lowering == keys_none
    assert keys["changed"] == ("2 channels: with 16 channels, 8 channels, 4 channels the program exceeds the "
                               "runtime's limits")
    assert tried == [[16, 4, 2], [4, 2]] and tried_lowering == [[16, 8, 4, 2], [4, 2]]  # (lowered, analysed)
    assert tried_none == [[16, 8, 4, 2], [16, 8, 4, 2]]


def test_the_ring_floor_is_the_built_rings() -> None:
    """:func:`ring_send_waits_at` gives the sends of the ring :func:`selectable_baseline` builds, where that is the
    default ring (picked at the size), and None where another chunk factor is tried: NDv2 and a 3 x 3 mesh (whose
    rings relay through GPUs), three kinds, sizes where the runtime picks the default and one where not."""
    from taccl_py.baselines.selectable import ring_send_waits_at, selectable_baseline
    from taccl_py.msccl.lowering import send_waits

    for topology in (resolve_topology("ndv2"), mesh((3, 3))):
        for kind in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
            for channels in (None, 2):
                for size in (1 << 20, 48 * KB):
                    planned = ring_send_waits_at(topology, kind, size, channels=channels)
                    placed = selectable_baseline(topology, kind, "ring", size, channels=channels)
                    default = placed.changed == "" and placed.selected
                    assert (planned is not None) == default, (topology.name, kind, channels, size)
                    if planned is not None:
                        assert planned == (placed.schedule.notes["channels"], send_waits(placed.schedule))
    assert ring_send_waits_at(resolve_topology("ndv2"), CollectiveKind.BROADCAST, 1 << 20) is None


def test_impossible_sizes_are_said_plainly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Six GPUs: an Allreduce file has 6c chunks per loop, which no power-of-two element count is a multiple
    of: the file is written and the output says the runtime will not pick it."""
    topo_file = tmp_path / "six.json"
    save_topology(switch_star(6, 100.0, 0.5), topo_file)
    out = tmp_path / "six.xml"
    code, stdout, _ = run(["baseline", "-t", str(topo_file), "-c", "allreduce", "-s", "64KB", "-o", str(out),
                           "--json"], capsys)
    assert code == 0 and out.exists()
    xml = only_json(stdout)["xml"]
    assert not xml["selected"] and xml["smallest_selected_bytes"] is None
    assert "does NOT pick it at 65536 bytes" in xml["selection"]
    assert not runtime_picks(load_program(out), 64 * KB)


COLLECTIVES = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce"]


@pytest.mark.slow
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(topology=topologies(max_gpus=8), kind=st.sampled_from(COLLECTIVES), log_size=st.integers(10, 24),
       algorithm=st.sampled_from([None, "ring", "direct", "oneshot"]), dialect=st.sampled_from(["v2", "v1"]))
def test_every_file_baseline_writes_is_picked_at_its_size(capsys: pytest.CaptureFixture[str], topology: Topology,
                                                          kind: str, log_size: int, algorithm: str | None,
                                                          dialect: str) -> None:
    """For random topologies and sizes: the written file is picked at its size whenever any file of this
    collective on these GPUs can be (N a power of two, or Broadcast/Reduce), and otherwise says so."""
    size = 1 << log_size
    with tempfile.TemporaryDirectory() as tmp:
        topo_file = os.path.join(tmp, "t.json")
        save_topology(topology, topo_file)
        out = os.path.join(tmp, "b.xml")
        args = ["baseline", "-t", topo_file, "-c", kind, "-s", str(size), "-o", out, "--dialect", dialect, "--json"]
        if algorithm:
            args += ["-a", algorithm]
        code, stdout, _ = run(args, capsys)
        if code == 2:  # this baseline does not apply here
            assert algorithm is not None
            return
        assert code == 0, stdout
        xml = only_json(stdout)["xml"]
        program = load_program(out)
        picked = runtime_picks(program, size)
        assert xml["selected"] == picked and xml["nchunksperloop"] == program.nchunksperloop
        n = topology.num_gpus
        if _power_of_two(n) or kind in ("broadcast", "reduce"):
            assert picked, f"nchunksperloop {program.nchunksperloop} at {size} bytes"
        else:
            assert picked or "does NOT pick it" in xml["selection"]


# ------------------------------------------------------------------- verify
@pytest.fixture(scope="module")
def never_picked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tree Allreduce of dgx-a100x2 at 1 MB, lowered as it was: nchunksperloop 96."""
    topo = resolve_topology("dgx-a100x2")
    program = lower_schedule(baseline(topo, "allreduce", "tree", size_bytes=MB), topo)
    assert program.nchunksperloop == 96
    path = tmp_path_factory.mktemp("sel") / "tree96.xml"
    save_xml(program, path)
    return path


@pytest.mark.slow
def test_never_selected_is_a_warning(never_picked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, stderr = run(["verify", str(never_picked)], capsys)
    assert code == 0  # valid and correct: only a warning
    assert "valid: yes   correct: yes" in stdout
    assert "[never-selected]" in stderr and "odd factor 3" in stderr
    code, stdout, _ = run(["verify", str(never_picked), "--json"], capsys)
    data = only_json(stdout)
    assert data["valid"] and data["correct"] and not data["errors"]
    assert any(n.startswith("[never-selected]") for n in data["notes"])


def _program(coll: str, ngpus: int, nchunks: int, lo: int, hi: int) -> Program:
    return Program(name="x", coll=coll, ngpus=ngpus, nchunksperloop=nchunks, nchannels=1, proto="Simple",
                   inplace=1, gpus=(), outofplace=0, min_bytes=lo, max_bytes=hi)


@pytest.mark.parametrize(("nchunks", "lo", "hi", "rule"), [
    (96, 0, 0, "never-selected"),                 # odd factor: no power-of-two size
    (1 << 20, 0, 0, "rarely-selected"),           # picked from 4 MiB only: 11 of 33 sizes up to 4 GiB
    (8192, 1 << 10, 1 << 14, "never-selected"),   # needs 32 KiB, the band ends at 16 KiB
    (8, 0, 0, None),                              # picked from 32 bytes on
    (1 << 12, 1 << 20, 1 << 30, None),            # picked in the whole band
])
def test_selection_rules(nchunks: int, lo: int, hi: int, rule: str | None) -> None:
    program = _program("allreduce", 8, nchunks, lo, hi)
    found = {v.rule for v in check_rules(program, "v2")} & {"never-selected", "rarely-selected"}
    assert found == ({rule} if rule else set())
    # the rule agrees with the runtime's arithmetic over the band's powers of two
    sizes = [1 << k for k in range(33) if (lo or 1) <= 1 << k and (not hi or 1 << k <= hi)]
    picked = [s for s in sizes if runtime_picks(program, s)]
    assert (rule == "never-selected") == (not picked)
    assert (rule == "rarely-selected") == (0 < 2 * len(picked) < len(sizes))


def test_verify_size_answers(never_picked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(["verify", str(never_picked), "--size", "1MB"], capsys)
    assert code == 0
    assert "runtime: not selected at 1048576 bytes" in stdout and "nchunksperloop=96" in stdout
    good = tmp_path / "good.xml"
    run(["baseline", "-t", "dgx-a100", "-c", "allgather", "-s", "64KB", "-o", str(good)], capsys)
    code, stdout, _ = run(["verify", str(good), "--size", "64KB", "--type-size", "2", "--json"], capsys)
    selection = only_json(stdout)["selection"]
    program = load_program(good)
    assert selection == {"size_bytes": 64 * KB, "type_size": 2, "selected": True,
                         "count": 64 * KB // (2 * 8), "reason": None}
    assert runtime_picks(program, 64 * KB, 2)
    code, stdout, _ = run(["verify", str(good), "--size", "1KB:4KB", "--json"], capsys)
    rows = only_json(stdout)["selections"]
    assert [r["size_bytes"] for r in rows] == [KB, 2 * KB, 4 * KB]
    assert [r["selected"] for r in rows] == [runtime_picks(program, s) for s in (KB, 2 * KB, 4 * KB)]


def test_verify_size_bad_input(never_picked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, stderr = run(["verify", str(never_picked), "--size", "4XB"], capsys)
    assert code == 2 and "--size" in stderr and "Traceback" not in stderr
    code, _, stderr = run(["verify", str(never_picked), "--size", "4KB", "--type-size", "0"], capsys)
    assert code == 2
