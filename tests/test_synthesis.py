"""The synthesizer end to end: correct by simulation, verified as XML, between the bound and the baselines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import applicable_baselines, baseline
from taccl_py.bounds import lower_bound
from taccl_py.collectives import CollectiveKind
from taccl_py.errors import Infeasible, SketchError
from taccl_py.library import resolve_topology
from taccl_py.msccl import lower_schedule, verify_program, write_xml
from taccl_py.simulator import simulate
from taccl_py.sketch import load_sketch, sketch_from_dict
from taccl_py.synthesis import SynthesisOptions, synthesize
from taccl_py.taccl_profile import load_taccl_profile, topology_from_taccl_profile
from taccl_py.testing import topologies

VECTORS = Path(__file__).parent / "vectors" / "taccl"
FAST = SynthesisOptions(time_limit_s=20, compare_baselines=False)


def _best_baseline(topo, kind, size):  # type: ignore[no-untyped-def]
    times = [simulate(topo, baseline(topo, kind, name), size).time_us for name in applicable_baselines(topo, kind)]
    return min(t for t in times if t is not None)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=topologies(min_gpus=3, max_gpus=8, max_switches=2),
       kind=st.sampled_from(list(CollectiveKind)),
       size=st.sampled_from([1024, 65536, 4 * 2**20]))
def test_synthesized_schedules_are_correct_verified_and_bounded(topo, kind, size) -> None:  # type: ignore[no-untyped-def]
    result = synthesize(topo, kind, size, SynthesisOptions(time_limit_s=4))
    assert result.sim.correct, result.sim.error
    time_us = result.sim.time_us
    assert time_us is not None
    assert time_us >= lower_bound(topo, kind, size).bound_us * (1 - 1e-9)
    assert time_us <= _best_baseline(topo, kind, size) * (1 + 1e-9)
    program = lower_schedule(result.schedule, topo)
    report = verify_program(program)
    assert report.valid and report.correct, report.errors[:3]


@pytest.mark.parametrize("kind", list(CollectiveKind))
def test_every_collective_on_a_multi_machine_topology(kind: CollectiveKind) -> None:
    topo = resolve_topology("ndv2x2")
    result = synthesize(topo, kind, 2**20, FAST)
    assert result.sim.correct, result.sim.error
    assert result.sim.time_us is not None
    assert result.sim.time_us >= lower_bound(topo, kind, 2**20).bound_us


def test_reference_instance_reaches_its_target() -> None:
    """2xNDv2 Allgather of 1 GB: >= 24 GB/s (cut bound 25.0, TE-CCL 22.86, TACCL 18.6)."""
    topo = resolve_topology("ndv2x2")
    result = synthesize(topo, CollectiveKind.ALLGATHER, 2**30, SynthesisOptions(time_limit_s=30))
    assert result.sim.correct and result.chosen == "synthesized"
    assert result.sim.algbw_GBps is not None and result.sim.algbw_GBps >= 24.0


def test_small_buffers_beat_the_ring_thanks_to_latency_aware_routing() -> None:
    topo = resolve_topology("dgx-a100x2")
    ring = simulate(topo, baseline(topo, CollectiveKind.ALLGATHER, "ring"), 4096).time_us
    result = synthesize(topo, CollectiveKind.ALLGATHER, 4096, FAST)
    assert result.sim.time_us is not None and ring is not None
    assert result.sim.time_us < ring / 2


def test_identical_inputs_give_identical_xml() -> None:
    topo = resolve_topology("dgx1")
    texts = []
    for _ in range(2):
        result = synthesize(topo, CollectiveKind.ALLREDUCE, 2**20, SynthesisOptions(time_limit_s=10, seed=3))
        texts.append(write_xml(lower_schedule(result.schedule, topo)))
    assert texts[0] == texts[1]


def test_a_faster_baseline_is_returned_and_reported() -> None:
    topo = resolve_topology("ring8")
    result = synthesize(topo, CollectiveKind.ALLGATHER, 2**20, SynthesisOptions(time_limit_s=10,
                                                                              chunk_factors=(1,)))
    best = _best_baseline(topo, CollectiveKind.ALLGATHER, 2**20)
    assert result.sim.time_us is not None and result.sim.time_us <= best * (1 + 1e-9)
    if result.chosen != "synthesized":
        assert any("faster" in note for note in result.notes)


# ------------------------------------------------------------------ TACCL inputs
@pytest.mark.parametrize(("profile", "sketch"), [
    ("topo-ndv2-1MB.json", "sk1-ndv2-n2.json"), ("topo-ndv2-1MB.json", "sk2-ndv2-n2.json"),
    ("topo-ndv2-1MB.json", "sk3-ndv2-n2.json"), ("topo-ndv2-32KB.json", "sk2-ndv2-n4.json"),
    ("topo-ndv2-1KB.json", "sk1-ndv2-n1.json"), ("topo-dgx2-1MB.json", "sk1-dgx2-n2.json"),
    ("topo-dgx2-1MB.json", "sk2-dgx2-n2.json"), ("topo-dgx2-1KB.json", "sk1-dgx2-n1.json"),
])
def test_taccl_shipped_sketches_load_and_synthesize(profile: str, sketch: str) -> None:
    sk = load_sketch(VECTORS / "sketch" / sketch)
    topo = topology_from_taccl_profile(load_taccl_profile(VECTORS / "topo" / profile), nnodes=sk.num_machines or 1,
                                       where=profile)
    result = synthesize(topo, CollectiveKind.ALLGATHER, 2**20,
                        SynthesisOptions(sketch=sk, time_limit_s=10, compare_baselines=False))
    assert result.sim.correct, result.sim.error
    assert result.schedule.collective.chunk_factor == (sk.chunk_factor or 1)


def test_taccl_profile_units() -> None:
    """NDv2 1MB profile: beta 23 us/MB -> 2^20 B / 23 us = 45.59 GB/s; alpha 0.3 us; remote 105 us/MB."""
    topo = topology_from_taccl_profile(load_taccl_profile(VECTORS / "topo" / "topo-ndv2-1MB.json"), nnodes=2)
    fast = topo.links[topo.link_index[(0, 1)]]
    assert fast.bandwidth == pytest.approx(2**20 / 23 / 1e3) and fast.latency == pytest.approx(0.3)
    scaled = topology_from_taccl_profile(load_taccl_profile(VECTORS / "topo" / "topo-ndv2-32KB.json"), nnodes=1)
    assert scaled.links[scaled.link_index[(0, 1)]].bandwidth == pytest.approx(32768 / 0.718 / 1e3)
    assert topo.route_latency(topo.gpu_route(0, 9) or ()) == pytest.approx(2.6)


def test_sketch_errors_name_the_field() -> None:
    with pytest.raises(SketchError, match="switch_hyperedge_strategy"):
        sketch_from_dict({"intranode_sketch": {"strategy": "switch", "switches": [[0, 1]],
                                               "switch_hyperedge_strategy": ["minmax"]}})
    with pytest.raises(SketchError, match="input_chunkup"):
        sketch_from_dict({"hyperparameters": {"input_chunkup": 0}})


def test_infeasible_sketch_is_explained() -> None:
    topo = resolve_topology("ndv2x2")
    sk = sketch_from_dict({"nnodes": 2, "intranode_sketch": {"strategy": "none"},
                           "internode_sketch": {"strategy": "relay", "internode_conn": {"3": [5]}}})
    with pytest.raises(Infeasible, match="cannot reach"):
        synthesize(topo, CollectiveKind.ALLGATHER, 2**20, SynthesisOptions(sketch=sk))
