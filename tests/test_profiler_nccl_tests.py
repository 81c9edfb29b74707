"""The shipped nccl-tests sample logs parse to the expected tables, and their fits recover the truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from taccl_py.errors import ProfileInputError
from taccl_py.profiler.fitting import FitRequest, fit_measurements
from taccl_py.profiler.nccl_tests import (
    BINARY_MODELS,
    binary_from_name,
    parse_nccl_tests_log,
    parse_nccl_tests_text,
    resolve_binary,
)
from taccl_py.topology_io import load_topology

DATA = Path(__file__).parent / "data" / "profiler"

# the per-hop truth each sample was generated from (tests/data/profiler/make_samples.py)
TRUTH = {
    "sample_sendrecv.log": ("sendrecv_perf", 2, 9.0, 230.0),
    "all_gather_perf_h100x8.log": ("all_gather_perf", 8, 3.0, 360.0),
    "all_reduce_2nodes.log": ("all_reduce_perf", 16, 1.6, 48.0),
    "reduce_scatter_old_format.log": ("reduce_scatter_perf", 4, 4.0, 20.0),
    "alltoall_4gpu.log": ("alltoall_perf", 4, 6.0, 40.0),
}


def test_sendrecv_sample_parses_to_its_table() -> None:
    (run,) = parse_nccl_tests_log(DATA / "sample_sendrecv.log")
    assert run.binary == "sendrecv_perf"
    assert run.version == "2.17.6"
    assert (run.nthreads, run.ngpus, run.min_bytes, run.max_bytes) == (1, 1, 8, 268435456)
    assert run.nranks == 2 and run.hosts == ("dgx-a100-07",)
    assert [r.device_name for r in run.ranks] == ["NVIDIA A100-SXM4-80GB"] * 2
    assert run.complete and run.avg_busbw == pytest.approx(63.7158)
    assert len(run.rows) == 26
    assert [r.size_bytes for r in run.rows] == [8 << k for k in range(26)]
    first, last = run.rows[0], run.rows[-1]
    assert (first.line, first.size_bytes, first.count, first.dtype) == (12, 8, 2, "float")
    assert (first.time_us_out, first.time_us_in) == (8.81, 9.14)
    assert (last.size_bytes, last.time_us_out, last.busbw_out, last.time_us_in) == (268435456, 1165.38, 230.34,
                                                                                   1193.98)
    assert not any(r.wrong for r in run.rows)  # "N/A" in-place #wrong is not a wrong result


def test_old_format_without_redop_root_and_group_columns() -> None:
    (run,) = parse_nccl_tests_log(DATA / "reduce_scatter_old_format.log")
    assert run.binary is None  # the log does not say; the file name does
    assert run.nranks == 4 and run.hosts == ("v100box",)
    assert run.rows[0].size_bytes == 4096 and run.rows[0].count == 256
    assert run.rows[0].time_us_out == 12.3 and run.rows[0].time_us_in == 12.28
    assert len(run.rows) == 16


def test_interleaved_nccl_info_and_mpi_lines_are_skipped() -> None:
    (run,) = parse_nccl_tests_log(DATA / "all_reduce_2nodes.log")
    assert run.binary == "all_reduce_perf"
    assert run.nranks == 16 and run.hosts == ("gpu-node-1", "gpu-node-2")
    assert len(run.rows) == 28
    assert [r.size_bytes for r in run.rows] == [8 << k for k in range(28)]


def test_multi_gpu_single_process_run_counts_its_rank_lines() -> None:
    (run,) = parse_nccl_tests_log(DATA / "all_gather_perf_h100x8.log")
    assert (run.nthreads, run.ngpus, run.nranks) == (1, 8, 8)
    assert run.rows[0].count == 32  # count per rank: 1024 B / 4 B / 8 ranks


def test_two_runs_in_one_log_are_both_read() -> None:
    text = (DATA / "sample_sendrecv.log").read_text() + (DATA / "alltoall_4gpu.log").read_text()
    runs = parse_nccl_tests_text(text, where="both.log")
    assert [r.binary for r in runs] == ["sendrecv_perf", "alltoall_perf"]
    assert [r.nranks for r in runs] == [2, 4]


def test_repeated_rank_lines_are_flagged() -> None:
    text = (DATA / "sample_sendrecv.log").read_text().replace("#  Rank  1 Group", "#  Rank  0 Group")
    (run,) = parse_nccl_tests_text(text, where="x.log")
    assert run.repeated_ranks and run.nranks == 1


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_sample_logs_fit_back_to_the_parameters_they_were_made_from(name: str, tmp_path: Path) -> None:
    binary, ranks, alpha, bandwidth = TRUTH[name]
    outcome = fit_measurements(FitRequest(files=(str(DATA / name),)))
    (link_fit,) = outcome.fits
    assert outcome.inputs[0].split(": ")[1].startswith(f"{binary}, {ranks} ranks")
    # 1.2 % noise per point, a 4 % protocol bump at mid sizes: a few percent is what the data supports
    assert link_fit.fit.alpha_us == pytest.approx(alpha, rel=0.06)
    assert link_fit.fit.bandwidth_gbps == pytest.approx(bandwidth, rel=0.03)
    assert link_fit.fit.r_squared > 0.999
    topology = outcome.topology
    assert topology.num_gpus == ranks
    path = tmp_path / "fitted.json"
    from taccl_py.topology_io import save_topology

    save_topology(topology, path)
    assert load_topology(path) == topology


def test_the_sendrecv_outlier_is_dropped() -> None:
    (link_fit,) = fit_measurements(FitRequest(files=(str(DATA / "sample_sendrecv.log"),))).fits
    dropped = [p for p in link_fit.fit.points if p.dropped]
    assert [(p.size_bytes, p.time_us) for p in dropped] == [(2 << 20, 56.70)]
    assert dropped[0].origin.endswith("sample_sendrecv.log: line 30")


def test_ring_and_alltoall_models() -> None:
    assert BINARY_MODELS["all_gather_perf"].coefficients(8) == (7.0, 7 / 8)
    assert BINARY_MODELS["all_reduce_perf"].coefficients(4) == (6.0, 1.5)
    assert BINARY_MODELS["broadcast_perf"].coefficients(4) == (3.0, 1.0)
    assert BINARY_MODELS["alltoall_perf"].coefficients(4) == (1.0, 0.25)
    assert BINARY_MODELS["sendrecv_perf"].coefficients(16) == (1.0, 1.0)


def test_binary_names_and_aliases() -> None:
    assert resolve_binary("allgather") == "all_gather_perf"
    assert resolve_binary("all_reduce_perf_mpi") == "all_reduce_perf"
    assert binary_from_name("node3-reduce-scatter.log") == "reduce_scatter_perf"
    assert binary_from_name("allreduce_16.log") == "all_reduce_perf"
    assert binary_from_name("run.log") is None
    with pytest.raises(ProfileInputError, match="no per-link model"):
        resolve_binary("gather_perf")


@pytest.mark.parametrize(("name", "message"), [
    ("truncated_all_reduce.log", "line 54: table row has 6 of 13 fields"),
    ("garbled_all_reduce.log", "line 41: column 'time' is not a number (got '1x.40')"),
])
def test_broken_logs_name_file_and_line(name: str, message: str) -> None:
    with pytest.raises(ProfileInputError) as info:
        parse_nccl_tests_log(DATA / name)
    assert str(info.value) == f"{DATA / name}: {message}" + (" (table cut mid-row?)" if "fields" in message else "")


def test_a_row_whose_size_is_damaged_is_an_error_and_other_output_between_rows_is_not() -> None:
    header = ("# nThread 1 nGpus 2 minBytes 8 maxBytes 64\n"
              "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n")
    row = "{} 4 float sum -1 10.0 0.0 0.0 0 10.0 0.0 0.0 0\n"
    chatter = "10-0-0-1:123:123 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n"
    (run,) = parse_nccl_tests_text(header + row.format(16) + chatter + row.format(32), where="x.log")
    assert [r.size_bytes for r in run.rows] == [16, 32]
    numactl = "0 10 12 12 12 12 12 12 12 12 12 12 12 12\n"  # a node distance row, after the run's footer
    (run,) = parse_nccl_tests_text(header + row.format(16) + "# Avg bus bandwidth    : 0.0\n" + numactl, where="x.log")
    assert [r.size_bytes for r in run.rows] == [16]
    for damaged in ("1O24", "4096x"):
        with pytest.raises(ProfileInputError, match=rf"x\.log: line 4: column 'size' is not an integer \(got '{damaged}'\)"):
            parse_nccl_tests_text(header + row.format(16) + row.format(damaged), where="x.log")


def test_empty_and_tableless_logs() -> None:
    with pytest.raises(ProfileInputError, match=r"x\.log: file is empty"):
        parse_nccl_tests_text("\n \n", where="x.log")
    with pytest.raises(ProfileInputError, match=r"x\.log: no nccl-tests result table"):
        parse_nccl_tests_text("# nThread 1 nGpus 1 minBytes 8 maxBytes 8\nsome text\n", where="x.log")
    header = "# nThread 1 nGpus 2 minBytes 8 maxBytes 64\n#  size count type redop root time algbw busbw #wrong\n"
    with pytest.raises(ProfileInputError, match=r"x\.log: line 2: the result table has no rows"):
        parse_nccl_tests_text(header, where="x.log")


@pytest.mark.parametrize(("name", "kind"), [
    ("sample_sendrecv.log", "allgather"),
    ("all_gather_perf_h100x8.log", "allgather"),
    ("all_reduce_2nodes.log", "allreduce"),
    ("reduce_scatter_old_format.log", "reducescatter"),
])
def test_simulating_the_measured_collective_on_the_fitted_topology_gives_the_measured_time(name: str,
                                                                                           kind: str) -> None:
    from taccl_py import baselines
    from taccl_py.simulator import simulate

    outcome = fit_measurements(FitRequest(files=(str(DATA / name),)))
    (run,) = parse_nccl_tests_log(DATA / name)
    rows = {row.size_bytes: row for row in run.rows}
    topology = outcome.topology
    binary = TRUTH[name][0]
    simulated_binary = {"allgather": "all_gather_perf", "allreduce": "all_reduce_perf",
                        "reducescatter": "reduce_scatter_perf"}[kind]
    lat, byt = BINARY_MODELS[simulated_binary].coefficients(topology.num_gpus)
    for size in (1 << 20, 1 << 26):
        result = simulate(topology, baselines.baseline(topology, kind, "ring", size_bytes=size), size)
        assert result.time_us is not None, result.error
        # the ring on the fitted topology runs exactly at the fitted model's time ...
        assert result.time_us == pytest.approx(outcome.fits[0].fit.predict_us(size, lat, byt), rel=1e-4)
        if binary == simulated_binary:  # ... which is the measured time, up to the fit's residual
            assert result.time_us == pytest.approx(rows[size].time_us_out, rel=0.06)


def test_rank_count_without_rank_lines_warns_and_ranks_overrides(tmp_path: Path) -> None:
    text = "\n".join(line for line in (DATA / "reduce_scatter_old_format.log").read_text().splitlines()
                     if "Rank" not in line)
    log = tmp_path / "reduce_scatter.log"
    log.write_text(text)
    outcome = fit_measurements(FitRequest(files=(str(log),)))
    assert outcome.topology.num_gpus == 4  # nThread 1 x nGpus 4
    assert any("assuming nThread x nGpus = 4 ranks" in w for w in outcome.warnings)
    override = fit_measurements(FitRequest(files=(str(log),), ranks=8))
    assert override.topology.num_gpus == 8 and not any("assuming" in w for w in override.warnings)
    # 8 ranks instead of 4: the same times mean a faster per-hop bandwidth, (7/8) / (3/4) times
    ratio = override.fits[0].fit.bandwidth_gbps / outcome.fits[0].fit.bandwidth_gbps
    assert ratio == pytest.approx((7 / 8) / (3 / 4), rel=1e-6)


def test_single_rank_run_is_an_input_error(tmp_path: Path) -> None:
    text = (DATA / "sample_sendrecv.log").read_text().replace("#  Rank  1 Group", "#  Rank  0 Group")
    log = tmp_path / "one.log"
    log.write_text(text)
    with pytest.raises(ProfileInputError, match="ran on 1 rank"):
        fit_measurements(FitRequest(files=(str(log),)))
