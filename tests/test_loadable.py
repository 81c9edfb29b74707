"""The file the user gets is loadable: a hierarchical baseline past MSCCL's limits is written with fewer splits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_runner import only_json, run

from taccl_py.baselines import baseline
from taccl_py.collectives import CollectiveKind
from taccl_py.errors import LoweringError
from taccl_py.library import AstraDimension, AstraKind, astra_topology
from taccl_py.msccl import load_program, lower_schedule, verify_program
from taccl_py.msccl.ir import Program
from taccl_py.schedule import Schedule
from taccl_py.simulator import simulate
from taccl_py.synthesis.loadable import fewer_splits, hierarchical_splits
from taccl_py.topology import Topology
from taccl_py.topology_io import save_topology

GB = 2**30


def _network() -> Topology:
    """[Ring 4, Switch 2]: at 1 GB hier-lb's Allreduce pipelines 128 splits, 64 connections between two ranks
    (32 allowed); with 64 splits a rank needs 5007 XML nodes (4096 allowed); 32 splits fit."""
    return astra_topology([AstraDimension(AstraKind.RING, 4, 200.0, 500.0),
                           AstraDimension(AstraKind.SWITCH, 2, 50.0, 2000.0)], name="ring4-switch2")


def test_the_next_split_count_follows_how_far_over_the_limit_the_last_one_was() -> None:
    """A stand-in lowering that takes at most 8 splits and says how far over it is: 128 (4x over) -> 32 (3x
    over) -> 8 (largest power of two <= 32 / 3): three attempts, the last one kept."""
    topo = _network()
    schedule = baseline(topo, CollectiveKind.ALLREDUCE, "hier-lb", size_bytes=GB)
    assert hierarchical_splits(schedule) == ("hier-lb", 128)
    tried: list[int] = []

    def lower(candidate: Schedule, say_how_far: bool = True) -> Program:
        found = hierarchical_splits(candidate)
        assert found is not None
        tried.append(found[1])
        if found[1] > 8:
            raise LoweringError("too big", over=found[1] / 8 * 0.75 if say_how_far else None)
        return lower_schedule(candidate, topo)

    capped = fewer_splits(topo, CollectiveKind.ALLREDUCE, schedule, GB, LoweringError("too big", over=4.0), lower)
    assert capped is not None and capped.splits == 8 and tried == [32, 8]
    assert capped.refused == ("128 splits: too big", "32 splits: too big")
    assert hierarchical_splits(capped.schedule) == ("hier-lb", 8)
    # without a figure it halves; nothing hierarchical, nothing to cap
    tried.clear()
    assert fewer_splits(topo, CollectiveKind.ALLREDUCE, schedule, GB, LoweringError("too big"),
                        lambda candidate: lower(candidate, say_how_far=False)) is not None
    assert tried == [64, 32, 16, 8]
    ring = baseline(topo, CollectiveKind.ALLREDUCE, "ring", size_bytes=GB)
    assert hierarchical_splits(ring) is None
    assert fewer_splits(topo, CollectiveKind.ALLREDUCE, ring, GB, LoweringError("x"), lower) is None


@pytest.mark.slow
def test_the_capped_schedule_lowers_verifies_and_is_timed() -> None:
    topo = _network()
    schedule = baseline(topo, CollectiveKind.ALLREDUCE, "hier-lb", size_bytes=GB)
    with pytest.raises(LoweringError, match="need a channel but all 32 are taken") as failed:
        lower_schedule(schedule, topo)
    assert failed.value.over == pytest.approx(2.0)
    assert "; 1 before connections of more than the dialect's 64 steps" in str(failed.value)  # one cut into 64
    capped = fewer_splits(topo, CollectiveKind.ALLREDUCE, schedule, GB, failed.value,
                          lambda s: lower_schedule(s, topo))
    # 2x over on channels: 64 splits, which need 5007 XML nodes on a rank (4096 allowed): 32
    assert capped is not None and capped.splits == 32 and len(capped.refused) == 2
    assert "XML nodes" in capped.refused[1]
    assert verify_program(capped.program).correct
    choice = capped.choice(topo, GB)
    assert choice is not None and choice.candidate.label == "hier-lb (32 splits)"
    full = simulate(topo, schedule, GB).time_us
    assert full is not None and full <= choice.time_us < simulate(topo, baseline(
        topo, CollectiveKind.ALLREDUCE, "hier", size_bytes=GB), GB).time_us  # type: ignore[operator]


@pytest.mark.slow
def test_baseline_and_synthesize_write_the_capped_file_and_say_both_times(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    topo_path = tmp_path / "net.json"
    save_topology(_network(), topo_path)
    out = tmp_path / "b.xml"
    code, stdout, err = run(["baseline", "-t", str(topo_path), "-c", "allreduce", "-s", "1GB", "-a", "hier-lb",
                             "-o", str(out), "--json"], capsys)
    assert code == 0, err
    data = only_json(stdout)
    xml = data["xml"]
    assert xml["changed"].startswith("32 splits: with 128 splits, 64 splits the program exceeds the runtime's limits")
    assert xml["time_us"] > data["baselines"][0]["time_us"]  # the file's time, not the table's 128 splits
    assert verify_program(load_program(out)).correct
    out = tmp_path / "s.xml"
    code, stdout, err = run(["synthesize", "-t", str(topo_path), "-c", "allreduce", "-s", "1GB", "-o", str(out),
                             "--json"], capsys)
    assert code == 0, err
    report = only_json(stdout)
    # the file written is the fastest that fits: the capped baseline (the file `baseline -o` writes), or a
    # synthesized schedule faster than it (the shortcut's hier-lb could not be written, so the solver stages ran)
    assert report["xml_verified"] and report["algorithm"] in ("baseline hier-lb (32 splits)", "synthesized")
    assert report["best_overall"]["algorithm"] == "baseline hier-lb"
    assert report["best_overall"]["time_us"] < report["time_us"] <= xml["time_us"] * (1 + 1e-9)
    # the JSON says which choice was refused and the file that stands for it
    assert report["xml_refused"][0]["algorithm"] == "baseline hier-lb"
    assert report["xml_refused"][0]["time_us"] == report["best_overall"]["time_us"]
    assert "need a channel" in report["xml_refused"][0]["reason"]
    # 64 splits were planned and refused too; 32 splits fit, lowered only if nothing faster fits before it
    assert [r["algorithm"] for r in report["xml_refused"]][-1] == "baseline hier-lb (64 splits)"
    capped = report["algorithm"] == "baseline hier-lb (32 splits)"
    assert report["xml_fallbacks"] == [{"algorithm": "baseline hier-lb (32 splits)",
                                        "time_us": pytest.approx(xml["time_us"]), "splits": 32,
                                        "lowered": True if capped else None}]
    assert any("the hier-lb baseline (128 splits)" in note and "cannot be written" in note
               for note in report["notes"])


def _hier_lb_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                     ) -> tuple[Path, tuple[str, int] | None, list[Schedule]]:
    """[Ring 2, Switch 2] saved to a file, and a stand-in lowering that refuses the split count hier-lb plans for
    Allreduce 16 MB there: (the file, that split count, every schedule the lowering was given)."""
    import taccl_py.msccl as msccl

    topo = astra_topology([AstraDimension(AstraKind.RING, 2, 200.0, 500.0),
                           AstraDimension(AstraKind.SWITCH, 2, 50.0, 2000.0)], name="ring2-switch2")
    topo_path = tmp_path / "net.json"
    save_topology(topo, topo_path)
    found = hierarchical_splits(baseline(topo, CollectiveKind.ALLREDUCE, "hier-lb", size_bytes=16 * 2**20))
    real_lower = msccl.lower_schedule
    lowered: list[Schedule] = []

    def lower(schedule: Schedule, topology: Topology, **kwargs: object) -> Program:
        lowered.append(schedule)
        if hierarchical_splits(schedule) == found:
            raise LoweringError("rank 0 needs 5000 XML nodes; the runtime parser stores at most 4096 per rank",
                                over=2.0)
        return real_lower(schedule, topology, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(msccl, "lower_schedule", lower)
    return topo_path, found, lowered


def _synthesize_written(topo_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``synthesize -c allreduce -s 16MB -o`` on the saved topology: its JSON report, the XML written and
    verified."""
    out = tmp_path / "ar.xml"
    code, stdout, err = run(["synthesize", "-t", str(topo_path), "-c", "allreduce", "-s", "16MB", "-o", str(out),
                             "--time-limit", "30", "--json"], capsys)
    assert code == 0, err
    report = only_json(stdout)
    assert report["correct"] and verify_program(load_program(out)).correct
    return report


@pytest.mark.slow
def test_a_refused_choice_is_lowered_once_when_the_solver_stages_run_after_all(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The multi-dimensional shortcut's hier-lb is refused (a stand-in lowering refuses its split count), a
    fewer-splits file is written, the solver stages run after all and the XML is written again: that second
    ranking holds the refused hier-lb and its fewer-splits choice again, and neither is lowered a second time
    (nor the baselines simulated again). [Ring 2, Switch 2] Allreduce 16 MB: hier-lb at 94% of the bound."""
    from taccl_py.synthesis import candidates

    topo_path, found, lowered = _hier_lb_refused(tmp_path, monkeypatch)
    assert found is not None and found[1] > 1
    real_compare = candidates.compare_baselines
    compared: list[int] = []

    def compare(*args: object, **kwargs: object) -> candidates.BaselineComparison:
        compared.append(1)
        return real_compare(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("taccl_py.synthesis.pipeline.compare_baselines", compare)
    report = _synthesize_written(topo_path, tmp_path, capsys)
    assert any("the solver stages ran after all" in note for note in report["notes"])
    refused = [s for s in lowered if hierarchical_splits(s) == found]
    assert len(refused) == 1  # the first attempt's refusal stands for the second ranking
    assert len({id(s) for s in lowered}) == len(lowered)  # no schedule lowered twice
    assert report["xml_refused"][0]["algorithm"] == "baseline hier-lb"
    assert report["xml_fallbacks"][0]["splits"] < found[1]
    assert compared == [1]  # the shortcut's comparison is the solver stages' too
    assert report["stages_s"]["baselines"] > 0 and report["stages_s"]["lower"] > 0


def test_without_time_left_the_shortcuts_next_choice_is_written_and_the_guard_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """As above, with no share of --time-limit enough to run the solver stages after all: the shortcut's
    ranking is written (hier-lb with fewer splits, lowered once) and the report says the guard bit."""
    from taccl_py.cli import synth_cmd

    topo_path, found, lowered = _hier_lb_refused(tmp_path, monkeypatch)
    monkeypatch.setattr(synth_cmd, "MIN_LEFT_SHARE", 1.0)  # never enough left
    report = _synthesize_written(topo_path, tmp_path, capsys)
    assert any("the solver stages were not run" in note for note in report["notes"])
    assert report["time_limit_hit"] is True and report["candidates"] == []
    assert [hierarchical_splits(s) for s in lowered].count(found) == 1
    assert report["algorithm"].startswith("baseline hier-lb (") and report["xml_fallbacks"][0]["lowered"] is True


def test_a_connection_cut_for_its_steps_says_so_when_the_channels_run_out() -> None:
    """A 1-channel ring whose one connection has more steps than 32 threadblocks of the dialect's 64 hold
    (2,048-GPU rings, or here 9 ranks in 300 pieces): the error says why two ranks need 64 connections."""
    from taccl_py.library.grids import ring

    topo = ring(9)
    schedule = baseline(topo, "allgather", "ring", channels=1, chunk_factor=300)
    with pytest.raises(LoweringError, match=r"64 connections between the two ranks.*; 1 before connections of more "
                                            r"than the dialect's 64 steps per threadblock were cut"):
        lower_schedule(schedule, topo)
    wide = baseline(ring(2), "allgather", "ring", channels=40)  # 40 connections before any cut: no such clause
    with pytest.raises(LoweringError, match=r"\(at least 40 connections between the two ranks; one connection per "
                                            r"peer and channel\)$"):  # refused by the floor, before the analysis
        lower_schedule(wide, ring(2))
