"""Issue 17: protocols, runtime overheads, calibrated presets, --ideal, and the published nccl-tests fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taccl_py.baselines import baseline
from taccl_py.cli.main import main
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import InputError
from taccl_py.fidelity import load_cases, predict_case
from taccl_py.library import resolve_topology
from taccl_py.library.grids import switch_star
from taccl_py.profiler.nccl_tests import parse_nccl_tests_log
from taccl_py.runtime import (
    PRESETS,
    Protocol,
    RuntimeModel,
    TransferCosts,
    nccl_ring_pieces,
    payload_fraction,
    runtime_from_dict,
    runtime_to_dict,
    wire_bytes,
)
from taccl_py.schedule import Schedule, Transfer
from taccl_py.simulator import SimOptions, simulate
from taccl_py.topology_io import topology_from_dict, topology_to_dict

FIXTURES = Path(__file__).parent / "data" / "nccl_tests"


# ------------------------------------------------------------------ protocol arithmetic, by hand
def test_payload_fractions_are_the_line_formats() -> None:
    assert payload_fraction("Simple") == 1.0
    assert payload_fraction("LL") == 0.5  # 4 data + 4 flag bytes per 8-byte line
    assert payload_fraction("LL128") == 120 / 128


def test_wire_bytes_round_up_to_whole_lines() -> None:
    assert wire_bytes("Simple", 1000) == 1000
    assert wire_bytes("LL", 1000) == 2000  # 250 lines of 8 bytes
    assert wire_bytes("LL", 1001) == 2008  # 251 lines
    assert wire_bytes("LL128", 120) == 128
    assert wire_bytes("LL128", 121) == 256


@given(st.integers(min_value=1, max_value=1 << 30), st.sampled_from(list(Protocol)))
def test_wire_bytes_never_below_payload_over_fraction(payload: int, protocol: Protocol) -> None:
    wire = wire_bytes(protocol, payload)
    assert wire >= payload / payload_fraction(protocol) - 1e-9
    assert wire < payload / payload_fraction(protocol) + 128


def test_ring_pieces_follow_nccl_chunks() -> None:
    # Simple: 4 MiB buffer / 8 steps x 4 chunk steps = 2 MiB per chunk; 8 ranks x 1 channel = 16 MiB a loop
    assert nccl_ring_pieces("Simple", 16 << 20, 8, 1) == 1
    assert nccl_ring_pieces("Simple", (16 << 20) + 1, 8, 1) == 2
    assert nccl_ring_pieces("Simple", 1 << 40, 8, 1) == 16  # capped


def test_costs_on_a_hand_computed_switch() -> None:
    """Two GPUs on a switch (nvlink, 100 GB/s): Simple at efficiency 0.5 moves 1e6 bytes in 3.4 + 8.4 + 20 us."""
    topo = switch_star(2, 100.0, 1.0)
    model = RuntimeModel(name="t", efficiency={"nvlink": 0.5}, channels=24)
    costs = model.costs("Simple", CollectiveKind.ALLGATHER, topo)
    assert costs.route_latency_us(topo, topo.gpu_route(0, 1)) == 3.4  # tuning.cc NVLink ring Simple
    assert costs.route_weights(topo, topo.gpu_route(0, 1)) == (2.0, 2.0)
    schedule = Schedule(Collective(CollectiveKind.ALLGATHER, 2), (Transfer(0, 1, (0,), topo.gpu_route(0, 1)),
                                                                  Transfer(1, 0, (1,), topo.gpu_route(1, 0))))
    sim = simulate(topo, schedule, 2_000_000, SimOptions(costs=costs))
    assert sim.time_us == pytest.approx(3.4 + 1e6 / 50_000 + 8.4, rel=1e-12)  # hop + bytes at half rate + launch
    ll = model.costs("LL", CollectiveKind.ALLGATHER, topo)
    assert ll.fraction["nvlink"] == pytest.approx(0.5 / 3)  # LL: 1/3 of Simple for Allgather on one machine
    assert simulate(topo, schedule, 2_000_000, SimOptions(costs=ll)).time_us == pytest.approx(
        0.47 + 1e6 / (100_000 * 0.5 / 3) + 3.6, rel=1e-12)


def test_ll128_is_capped_by_its_channels() -> None:
    topo = resolve_topology("dgx-a100")
    model = RuntimeModel(name="t", efficiency={"nvlink": 1.0}, channels=2)
    costs = model.costs("LL128", CollectiveKind.ALLREDUCE, topo)
    assert costs.fraction["nvlink"] == pytest.approx(2 * 16.7 / 300)  # 2 channels x 16.7 GB/s of a 300 GB/s port


# ------------------------------------------------------------------ --ideal and the Python API stay exact
def test_simulate_without_costs_is_the_raw_link_model() -> None:
    topo = resolve_topology("ring8")
    sim = simulate(topo, baseline(topo, "allgather", "ring", channels=1), 8 << 20)
    assert sim.time_us == 140.21875  # the brief's golden value


def test_ideal_flag_reproduces_the_raw_link_figures(capsys: pytest.CaptureFixture[str]) -> None:
    topo = resolve_topology("dgx-a100")
    expected = simulate(topo, baseline(topo, "allreduce", "ring", size_bytes=1 << 20), 1 << 20).time_us
    with pytest.raises(SystemExit) as exit_info:
        main(["--ideal", "baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "1MB", "-a", "ring", "--json"])
    assert exit_info.value.code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "ideal"
    assert data["baselines"][0]["time_us"] == expected
    with pytest.raises(SystemExit):
        main(["baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "1MB", "-a", "ring", "--json"])
    calibrated = json.loads(capsys.readouterr().out)
    assert calibrated["model"] == "dgx-a100"
    assert calibrated["baselines"][0]["proto"] in ("LL", "LL128", "Simple")
    assert calibrated["baselines"][0]["time_us"] > expected
    assert calibrated["bound_us"] == data["bound_us"]  # bounds stay on the raw-link model


def test_xml_proto_is_honoured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ring.xml"
    with pytest.raises(SystemExit):
        main(["baseline", "-t", "dgx-a100", "-c", "allgather", "-s", "64KB", "-a", "ring", "-o", str(path), "--json"])
    written = json.loads(capsys.readouterr().out)["xml"]
    assert f'proto="{written["proto"]}"' in path.read_text()
    with pytest.raises(SystemExit):
        main(["simulate", "-t", "dgx-a100", "-s", "64KB", "-a", str(path), "--json"])
    assert json.loads(capsys.readouterr().out)["proto"] == written["proto"]


# ------------------------------------------------------------------ presets and files
def test_shipped_machines_carry_presets_with_sources() -> None:
    assert resolve_topology("dgx-a100").runtime is PRESETS["dgx-a100"]
    assert resolve_topology("dgx-h100x2").runtime is PRESETS["dgx-h100"]
    assert resolve_topology("ndv2x2").runtime is None
    for model in PRESETS.values():
        assert any("tuning.cc" in s for s in model.sources) and any("github.com" in s for s in model.sources)


def test_runtime_round_trips_through_a_topology_file() -> None:
    topo = resolve_topology("dgx-a100")
    assert topology_to_dict(topo)["runtime"] == {"preset": "dgx-a100"}
    custom = RuntimeModel(name="mine", efficiency={"nvlink": 0.8, "net": 0.9}, channels=16)
    data = runtime_to_dict(custom)
    back = runtime_from_dict(json.loads(json.dumps(data)), where="t.json")
    assert back.efficiency == custom.efficiency and back.channels == 16


@pytest.mark.parametrize("runtime, field", [
    ({"preset": "dgx-z"}, "runtime.preset"),
    ({"efficiency": {"nvlink": 1.5}}, "runtime.efficiency.nvlink"),
    ({"efficiency": {"wifi": 0.5}}, "runtime.efficiency"),
    ({"channels": 0}, "runtime.channels"),
    ({"launch_us": {"LL": -1}}, "runtime.launch_us.LL"),
    ({"colour": 1}, "runtime"),
])
def test_bad_runtime_objects_name_the_field(runtime: object, field: str) -> None:
    data = topology_to_dict(switch_star(2, 100.0, 1.0))
    data["runtime"] = runtime
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        topology_from_dict(data, where="t.json")


def test_xml_timing_refuses_costs_of_another_protocol() -> None:
    from taccl_py.msccl import load_program, simulate_program

    program = load_program(Path(__file__).parent / "vectors" / "msccl" / "azure-allreduce-ring-n8-ch4-i1-ll128.xml")
    topo = resolve_topology("dgx-a100")
    model = PRESETS["dgx-a100"]
    with pytest.raises(InputError, match="proto is 'LL128'"):
        simulate_program(program, topo, 1 << 20, SimOptions(costs=model.costs("Simple", CollectiveKind.ALLREDUCE,
                                                                              topo)))
    costs = model.costs("LL128", CollectiveKind.ALLREDUCE, topo)
    assert isinstance(costs, TransferCosts)
    timed = simulate_program(program, topo, 1 << 20, SimOptions(costs=costs))
    raw = simulate_program(program, topo, 1 << 20)
    assert timed.time_us is not None and raw.time_us is not None and timed.time_us > raw.time_us + costs.launch_us


# ------------------------------------------------------------------ the published logs
def test_every_cited_log_parses_with_its_source() -> None:
    cases = load_cases(FIXTURES)
    assert cases
    readme = (FIXTURES / "README.md").read_text()
    for case in cases:
        runs = parse_nccl_tests_log(case.log)
        assert runs[0].rows and case.url.startswith("https://") and case.url.split("/blob/")[0] in readme


@pytest.mark.slow
def test_published_runs_stay_where_they_were_measured() -> None:
    """Regression: the predicted/published ratio of each cited log, as benchmarks/RESULTS.md reports it.

    These pin the figures, met or not (the nccl-tests#119 rows are -14 % and the A3 Mega small sizes are far
    off, see the Fidelity section), so a change to the model shows up here.
    """
    cases = {c.name.split(":")[0]: c for c in load_cases(FIXTURES)}
    rows = predict_case(cases["nccl-tests#119"], max_rows=1)
    assert rows[0].error == pytest.approx(-0.138, abs=0.01)
