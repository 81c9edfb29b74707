"""Pictures: every figure is drawn, readable (title, labels, legend), byte-identical on a rerun, and the
CLI options write them (tiny inputs, so they never rot)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from cli_runner import only_json, run
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from taccl_py.baselines import baseline
from taccl_py.cli.topo_cmd import GenerateOptions, generate_topology
from taccl_py.collectives import CollectiveKind
from taccl_py.errors import InputError
from taccl_py.library import resolve_topology
from taccl_py.plots import (
    ScalingPoint,
    SeriesKind,
    TimelineRows,
    TimeSeries,
    algbw_figure,
    figure_bytes,
    save_figure,
    scaling_figure,
    timeline_figure,
    topology_figure,
)
from taccl_py.plots.timeline import _lanes
from taccl_py.simulator import simulate

SIZES = (1024, 1 << 20, 1 << 30)


def picture(data: bytes) -> np.ndarray:
    """The PNG as a grey-level array."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("L"), dtype=float)


def assert_drawn(png: bytes) -> None:
    """A real picture: a PNG with both ink and background, not one flat colour."""
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    grey = picture(png)
    assert grey.shape[0] > 200 and grey.shape[1] > 400
    assert grey.var() > 100
    assert 0.005 < (grey < 200).mean() < 0.9


def texts(figure) -> str:  # type: ignore[no-untyped-def]
    """Every title, label, tick label and legend entry of the figure, as one string."""
    out = [t.get_text() for t in figure.findobj(lambda a: hasattr(a, "get_text"))]
    return "\n".join(out)


def curve_series() -> list[TimeSeries]:
    return [TimeSeries("taccl synthesized", SeriesKind.SYNTHESIZED, SIZES, (4.0, 50.0, 4000.0)),
            TimeSeries("NCCL-style ring", SeriesKind.BASELINE, SIZES, (40.0, 80.0, 6000.0)),
            TimeSeries("NCCL-style tree", SeriesKind.BASELINE, SIZES, (None, 70.0, 9000.0)),
            TimeSeries("lower bound", SeriesKind.BOUND, SIZES, (3.0, 45.0, 3900.0))]


# ------------------------------------------------------------------ algbw curves
@pytest.mark.slow
def test_algbw_chart_is_labelled_and_deterministic() -> None:
    figure = algbw_figure("allgather on test", curve_series())
    words = texts(figure)
    for expected in ("allgather on test", "algbw (GB/s", "efficiency (bound / time, %)", "size (bytes",
                     "taccl synthesized", "NCCL-style ring", "lower bound", "1KB", "1MB", "1GB"):
        assert expected in words, expected
    png = figure_bytes(figure, "png")
    assert_drawn(png)
    assert png == figure_bytes(algbw_figure("allgather on test", curve_series()), "png")
    svg = figure_bytes(algbw_figure("allgather on test", curve_series()), "svg")
    assert svg.startswith(b"<?xml") and b"<svg" in svg and b"<dc:date>" not in svg
    assert svg == figure_bytes(algbw_figure("allgather on test", curve_series()), "svg")


def test_algbw_chart_plots_algbw_and_efficiency_values() -> None:
    figure = algbw_figure("t", curve_series())
    top, bottom = figure.axes[:2]
    synthesized = next(line for line in top.get_lines() if line.get_label() == "taccl synthesized")
    assert list(synthesized.get_ydata()) == pytest.approx([s / t / 1e3 for s, t in zip(SIZES, (4.0, 50.0, 4000.0),
                                                                                          strict=True)])
    tree = next(line for line in bottom.get_lines() if line.get_label() == "NCCL-style tree")
    assert list(tree.get_xdata()) == [1 << 20, 1 << 30]  # a missing time is a gap, not a zero
    assert list(tree.get_ydata()) == pytest.approx([100 * 45 / 70, 100 * 3900 / 9000])


def test_series_lengths_must_match() -> None:
    with pytest.raises(InputError, match="3 sizes but 2 times"):
        TimeSeries("x", SeriesKind.BASELINE, SIZES, (1.0, 2.0))


# ------------------------------------------------------------------ timeline
def ring_run(size: int = 1 << 20):  # type: ignore[no-untyped-def]
    topology = resolve_topology("ring8")
    schedule = baseline(topology, "allgather", "ring", size_bytes=size)
    return topology, schedule, simulate(topology, schedule, size)


@pytest.mark.slow
@pytest.mark.parametrize("rows", list(TimelineRows))
def test_timeline_rows_and_critical_path(rows: TimelineRows) -> None:
    topology, schedule, sim = ring_run()
    figure = timeline_figure(topology, schedule, sim, rows)
    words = texts(figure)
    assert "time (us)" in words and "critical path" in words and "chunk carried" in words
    assert f"{sim.time_us:.4g} us" in words
    axes = figure.axes[0]
    bars, outlined = axes.collections[:2]
    per_bar = sum(len(t.route) for t in schedule.transfers) if rows is not TimelineRows.RANK else len(schedule)
    assert len(bars.get_paths()) == per_bar
    crit = len(sim.critical_path) * (1 if rows is TimelineRows.RANK else
                                     len(schedule.transfers[sim.critical_path[0]].route))
    assert len(outlined.get_paths()) == crit
    labels = [t.get_text() for t in axes.get_yticklabels()]
    assert labels[0] == ("rank 0" if rows is TimelineRows.RANK else "0→1")
    assert_drawn(figure_bytes(figure, "png"))


def test_timeline_refuses_an_incorrect_run() -> None:
    topology, schedule, _ = ring_run()
    broken = schedule.with_transfers(schedule.transfers[:-1])
    sim = simulate(topology, broken, 1 << 20)
    assert not sim.correct
    with pytest.raises(InputError, match="incorrect algorithm"):
        timeline_figure(topology, broken, sim)


@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0, 100), st.floats(0.01, 30)), min_size=1, max_size=40))
def test_lanes_never_overlap_below_the_lane_cap(bars: list[tuple[int, float, float]]) -> None:
    start = np.array([b[1] for b in bars])
    end = start + np.array([b[2] for b in bars])
    pairs = [(row, i) for i, (row, _, _) in enumerate(bars)]
    lane, per_row = _lanes(pairs, start, end, 3)
    for row in range(3):
        assert per_row[row] >= 1
        if per_row[row] >= 8:
            continue  # capped: beyond 8 concurrent bars they may share a lane
        for a in range(len(bars)):
            for b in range(a + 1, len(bars)):
                if pairs[a][0] == pairs[b][0] == row and lane[a] == lane[b]:
                    assert end[a] <= start[b] + 1e-9 or end[b] <= start[a] + 1e-9


# ------------------------------------------------------------------ topology drawing
@pytest.mark.parametrize("name", ["dgx-a100x2", "ndv2x2", "mi250x2", "ring8", "dgx2"])
def test_topology_drawing(name: str) -> None:
    topology = resolve_topology(name)
    figure = topology_figure(topology)
    words = texts(figure)
    assert f"{topology.name}: {topology.num_gpus} GPUs" in words and "GB/s" in words
    for kind in {link.kind for link in topology.links}:
        assert f"{kind} link:" in words
    for kind in {s.kind for s in topology.switches}:
        assert f"{kind} switch" in words
    if topology.machines and len(topology.machines) > 1:
        assert "machine 1" in words
    assert_drawn(figure_bytes(figure, "png"))


def test_topology_without_machines_uses_a_seeded_layout() -> None:
    torus = generate_topology("torus", GenerateOptions(dims="3x3"))
    assert figure_bytes(topology_figure(torus), "png") == figure_bytes(topology_figure(torus), "png")


# ------------------------------------------------------------------ scaling
def test_scaling_figure() -> None:
    points = [ScalingPoint("dgx-a100 allgather 1GB", g, s, e)
              for g, s, e in ((16, 1.5, 0.99), (32, 5.5, 0.97), (64, 9.2, 0.96))]
    figure = scaling_figure(points, "synthesis scaling")
    words = texts(figure)
    assert "synthesis wall time (s)" in words and "efficiency (bound / time, %)" in words and "GPUs" in words
    assert_drawn(figure_bytes(figure, "png"))


# ------------------------------------------------------------------ files
@pytest.mark.slow
def test_save_figure_checks_the_path_and_writes_atomically(tmp_path: Path) -> None:
    figure = algbw_figure("t", curve_series())
    with pytest.raises(InputError, match=r"must end in \.png or \.svg"):
        save_figure(figure, tmp_path / "out.pdf")
    with pytest.raises(InputError, match="does not exist"):
        save_figure(figure, tmp_path / "missing" / "out.png")
    written = save_figure(figure, tmp_path / "out.svg")
    assert written.read_bytes().startswith(b"<?xml")
    assert [p.name for p in tmp_path.iterdir()] == ["out.svg"]  # no temporary file left


# ------------------------------------------------------------------ CLI options
def test_topo_show_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "topo.png"
    code, out, _ = run(["topo", "show", "dgx-a100x2", "--plot", str(out_file), "--json"], capsys)
    assert code == 0 and only_json(out)["plot"] == str(out_file)
    assert_drawn(out_file.read_bytes())


@pytest.mark.slow
def test_baseline_plot_and_bad_suffix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "bl.svg"
    code, _, _ = run(["baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB:1MB", "--plot", str(out_file)],
                     capsys)
    assert code == 0 and b"<svg" in out_file.read_bytes()
    code, _, err = run(["baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB", "--plot", "x.jpg"], capsys)
    assert code == 2 and "--plot" in err and ".png or .svg" in err


@pytest.mark.slow
def test_simulate_timeline_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    timeline, curve = tmp_path / "tl.png", tmp_path / "curve.png"
    code, _, _ = run(["simulate", "-t", "ring8", "-c", "allgather", "-s", "1MB", "-a", "ring", "--timeline",
                      str(timeline), "--timeline-rows", "link"], capsys)
    assert code == 0
    assert_drawn(timeline.read_bytes())
    code, _, _ = run(["simulate", "-t", "ring8", "-c", "allgather", "-s", "1KB:1MB", "-a", "ring", "--plot",
                      str(curve)], capsys)
    assert code == 0
    assert_drawn(curve.read_bytes())
    code, _, err = run(["simulate", "-t", "ring8", "-c", "allgather", "-s", "1KB:1MB", "-a", "ring", "--timeline",
                        str(timeline)], capsys)
    assert code == 2 and "--timeline" in err and "one size" in err


@pytest.mark.slow
def test_calibrated_timeline_draws_the_ring_in_nccls_pieces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a calibrated topology NCCL's ring runs in chunk loops (4 pieces per channel at 1 GB on 16 GPUs, 8 channels): the
    timeline draws that schedule, the one the times are of, not the one-piece baseline."""
    from taccl_py.predict import predict_baseline

    topo = resolve_topology("dgx-a100x2")
    assert topo.runtime is not None
    pred = predict_baseline(topo, CollectiveKind.ALLREDUCE, "ring", 2**30, topo.runtime)
    assert pred.schedule is not None and pred.schedule.notes["pieces"] == 4
    timeline = tmp_path / "pieces.png"
    code, out, err = run(["simulate", "-t", "dgx-a100x2", "-c", "allreduce", "-s", "1GB", "-a", "ring", "--timeline",
                          str(timeline), "--json"], capsys)
    assert code == 0, err
    assert only_json(out)["time_us"] == pred.sim.time_us
    assert_drawn(timeline.read_bytes())


@pytest.mark.slow
def test_simulate_timeline_of_an_xml_program(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    xml, timeline = tmp_path / "ring.xml", tmp_path / "xml.png"
    assert run(["baseline", "-t", "ring8", "-c", "allgather", "-s", "1MB", "-a", "ring", "-o", str(xml)], capsys)[0] == 0
    code, _, _ = run(["simulate", "-t", "ring8", "-s", "1MB", "-a", str(xml), "--timeline", str(timeline)], capsys)
    assert code == 0
    assert_drawn(timeline.read_bytes())


def test_program_timeline_has_a_bar_per_send() -> None:
    from taccl_py.msccl import lower_schedule, simulate_program
    from taccl_py.plots.timeline import program_timeline_figure

    topology, schedule, _ = ring_run()
    program = lower_schedule(schedule, topology)
    sim = simulate_program(program, topology, 1 << 20)
    figure = program_timeline_figure(topology, program, sim, TimelineRows.RANK)
    bars, outlined = figure.axes[0].collections[:2]
    assert len(bars.get_paths()) == len(sim.start_us) > 0
    assert 0 < len(outlined.get_paths()) <= len(sim.critical_path)
    assert "sends" in texts(figure)


@pytest.mark.slow
def test_synthesize_range_plot_through_the_job_runner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    curve = tmp_path / "syn.png"
    code, out, _ = run(["synthesize", "-t", "dgx-a100", "-c", "allgather", "-s", "1KB:4KB", "--threads", "1",
                        "--plot", str(curve), "--json"], capsys)
    assert code == 0
    rows = only_json(out)["rows"]
    assert [r["size_bytes"] for r in rows] == [1024, 2048, 4096]
    assert_drawn(curve.read_bytes())


@pytest.mark.parametrize("count, cols, shape", [(5, 4, (2, 4)), (3, 4, (1, 3)), (1, 4, (1, 1)), (8, 4, (2, 4))])
def test_panel_grid_gives_one_visible_panel_per_item(count: int, cols: int, shape: tuple[int, int]) -> None:
    from taccl_py.plots._files import panel_grid

    figure, panels = panel_grid(count, 2.0, 1.5, cols=cols)
    assert len(panels) == count and all(p.get_visible() for p in panels)
    every = figure.get_axes()
    assert len(every) == shape[0] * shape[1] and sum(not a.get_visible() for a in every) == len(every) - count
    assert tuple(figure.get_size_inches()) == (2.0 * shape[1], 1.5 * shape[0])


# ------------------------------------------------------------------ fidelity panels
def test_fidelity_figure_draws_measurement_prediction_band_and_misses() -> None:
    from taccl_py.fidelity import FidelityRow
    from taccl_py.plots.fidelity import fidelity_figure

    rows = [FidelityRow(1 << 10, 0.10, 0.11, "ring", "LL"),        # +10 % below 1 MB: met (25 %)
            FidelityRow(1 << 20, 20.0, 30.0, "ring", "LL128"),     # +50 %: missed
            FidelityRow(1 << 30, 200.0, None, None, None)]         # no prediction: missed, no line point
    figure = fidelity_figure([("run A", rows), ("run B", rows[:1])], measured="measured")
    first = figure.axes[0]
    lines = {line.get_label(): line for line in first.get_lines()}
    assert list(lines["measured"].get_ydata()) == [0.10, 20.0, 200.0]
    assert list(lines["predicted"].get_xdata()) == [1 << 10, 1 << 20]
    assert list(lines["missed"].get_xdata()) == [1 << 20, 1 << 30]
    band = first.collections[0].get_paths()[0].vertices[:, 1]
    assert min(band) == pytest.approx(0.10 * 0.75) and max(band) == pytest.approx(200.0 * 1.10)
    assert "missed" not in {line.get_label() for line in figure.axes[1].get_lines()}
    assert "run A" in texts(figure) and "run B" in texts(figure)
    assert "in place (off the band)" not in lines  # no in-place measurement given
    assert_drawn(figure_bytes(figure, "png"))


def test_fidelity_figure_rings_the_in_place_times_off_the_band() -> None:
    """A log's in-place busbw is drawn where it lies outside the target band of the out-of-place one (the run's
    own spread): 30 % off at 1 KB (beyond 25 %: drawn), 5 % off at 1 MB (within 10 %: not drawn)."""
    from taccl_py.fidelity import FidelityRow
    from taccl_py.plots.fidelity import fidelity_figure

    rows = [FidelityRow(1 << 10, 0.10, 0.10, "ring", "LL", in_place_busbw=0.13),
            FidelityRow(1 << 20, 20.0, 20.0, "ring", "LL128", in_place_busbw=21.0)]
    lines = {line.get_label(): line for line in fidelity_figure([("run", rows)]).axes[0].get_lines()}
    ringed = lines["in place (off the band)"]
    assert list(ringed.get_xdata()) == [1 << 10] and list(ringed.get_ydata()) == [0.13]
    figure = fidelity_figure([("quiet", rows[1:]), ("run", rows)])  # the rings in the second panel only
    second = {line.get_label(): line for line in figure.axes[1].get_lines()}
    assert list(second["in place (off the band)"].get_xdata()) == [1 << 10]
    legend = figure.axes[0].get_legend()
    assert legend is not None and "in place (off the band)" in [t.get_text() for t in legend.get_texts()]
