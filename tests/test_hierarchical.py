"""Hierarchical (per-dimension) baselines: correct on random multi-dimensional networks, hand-computed times,
never below the bound, lowered to XML that the verifier finds correct.

The hand-computed times use only the network's figures: a unidirectional ring phase of n members takes
n-1 steps of (latency + group block / bandwidth), where a group block on dimension d is the data a member
owns there (the buffer / (product of the sizes of the dimensions already reduced, and d)). A switch
dimension's route is two links (NPU -> switch -> NPU). With S splits the slow dimension is never idle
once the first split has reached it, so T = (fast phases of the first and last split) + S x (slow phase).
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import NotApplicable, applicable_baselines, baseline
from taccl_py.baselines.dimension_phases import DimAlgorithm
from taccl_py.baselines.hierarchical import check_hierarchical, hierarchical_plan, hierarchical_schedule
from taccl_py.bounds import lower_bound
from taccl_py.cli.main import main
from taccl_py.collectives import CollectiveKind
from taccl_py.library import (
    AstraDimension,
    AstraKind,
    astra_topology,
    hypercube,
    mesh,
    resolve_topology,
    torus,
)
from taccl_py.msccl import lower_schedule, simulate_program, verify_program
from taccl_py.simulator import simulate
from taccl_py.topology import Topology

K = CollectiveKind
MiB = 1 << 20
GIB = 2**30 / 1e9
"""ASTRA-sim GB/s (2^30 bytes) in GB/s of 1e9 bytes."""
KINDS = (K.ALLGATHER, K.REDUCESCATTER, K.ALLREDUCE)


def ring_ring() -> Topology:
    return astra_topology([AstraDimension(AstraKind.RING, 4, 100.0, 1000.0),
                           AstraDimension(AstraKind.RING, 4, 25.0, 3000.0)])


def ring_switch() -> Topology:
    return astra_topology([AstraDimension(AstraKind.RING, 4, 100.0, 1000.0),
                           AstraDimension(AstraKind.SWITCH, 4, 25.0, 1500.0)])


def run(topology: Topology, kind: CollectiveKind, size: float, **options: object) -> float:
    schedule = hierarchical_schedule(topology, kind, size_bytes=size, **options)  # type: ignore[arg-type]
    result = simulate(topology, schedule, size)
    assert result.correct, result.error
    assert result.time_us is not None
    return result.time_us


# ----------------------------------------------------------- hand-computed times
def _ring_phase(steps: int, latency_us: float, group_block: float, gbps: float) -> float:
    return steps * (latency_us + group_block / (gbps * 1e3))


M = 64 * MiB
B0, B1 = 100 * GIB, 25 * GIB  # dimension 0 ring, dimension 1 ring or switch


@pytest.mark.parametrize("make", [ring_ring, ring_switch], ids=["ring-ring", "ring-switch"])
def test_allreduce_ring_ring_hand_computed(make: object) -> None:
    """RS along dimension 0 (group block M/4), ring Allreduce along dimension 1 (M/16), AG back (M/4)."""
    topology = make()  # type: ignore[operator]
    a0, a1 = 1.0, 3.0  # the ring link's 1000 ns; two switch links of 1500 ns, or one ring link of 3000 ns
    first = _ring_phase(3, a0, M / 4, B0)
    slow = 2 * _ring_phase(3, a1, M / 16, B1)
    assert run(topology, K.ALLREDUCE, M, algorithms=["ring", "ring"], splits=1) == pytest.approx(
        2 * first + slow, rel=1e-12)
    assert 2 * first + slow == pytest.approx(1899.0)
    # four splits: dimension 1 runs the four Allreduce phases back to back, after the first split's
    # ReduceScatter on dimension 0 and before the last split's Allgather
    p0 = _ring_phase(3, a0, M / 4 / 4, B0)
    p1 = 2 * _ring_phase(3, a1, M / 4 / 16, B1)
    assert p1 >= p0
    assert run(topology, K.ALLREDUCE, M, algorithms=["ring", "ring"], splits=4) == pytest.approx(
        2 * p0 + 4 * p1, rel=1e-12)
    assert 2 * p0 + 4 * p1 == pytest.approx(1249.875)


def test_allreduce_ring_switch_direct_hand_computed() -> None:
    """Direct on the switch dimension: one step per half, each NPU's uplink carries 3 group blocks."""
    topology = ring_switch()
    a_switch = 2 * 1.5
    first = _ring_phase(3, 1.0, M / 4, B0)
    direct = 2 * (a_switch + 3 * (M / 16) / (B1 * 1e3))
    assert run(topology, K.ALLREDUCE, M, algorithms=["ring", "direct"], splits=1) == pytest.approx(
        2 * first + direct, rel=1e-12)
    assert 2 * first + direct == pytest.approx(1887.0)
    p0 = _ring_phase(3, 1.0, M / 16, B0)
    p1 = 2 * (a_switch + 3 * (M / 64) / (B1 * 1e3))
    assert run(topology, K.ALLREDUCE, M, algorithms=["ring", "direct"], splits=4) == pytest.approx(
        2 * p0 + 4 * p1, rel=1e-12)
    assert 2 * p0 + 4 * p1 == pytest.approx(1201.875)


@pytest.mark.parametrize("make", [ring_ring, ring_switch], ids=["ring-ring", "ring-switch"])
@pytest.mark.parametrize("kind", [K.ALLGATHER, K.REDUCESCATTER])
def test_allgather_and_reducescatter_hand_computed(make: object, kind: CollectiveKind) -> None:
    """Allgather gathers the highest dimension first (one block), then dimension 0 (four blocks);
    ReduceScatter the mirror image; the slow phase is the dimension-1 one either way."""
    topology = make()  # type: ignore[operator]
    one = _ring_phase(3, 1.0, M / 4, B0) + _ring_phase(3, 3.0, M / 16, B1)
    assert run(topology, kind, M, algorithms=["ring", "ring"], splits=1) == pytest.approx(one, rel=1e-12)
    fast, slow = _ring_phase(3, 1.0, M / 16, B0), _ring_phase(3, 3.0, M / 64, B1)
    assert slow >= fast
    assert run(topology, kind, M, algorithms=["ring", "ring"], splits=4) == pytest.approx(fast + 4 * slow,
                                                                                          rel=1e-12)


def test_bidirectional_ring_halves_the_ring_dimension() -> None:
    first = _ring_phase(3, 1.0, M / 8, B0)  # each direction carries half a group block
    slow = 2 * _ring_phase(3, 3.0, M / 16, B1)
    assert run(ring_ring(), K.ALLREDUCE, M, algorithms=["biring", "ring"], splits=1) == pytest.approx(
        2 * first + slow, rel=1e-12)


def test_order_and_parameters_in_the_notes() -> None:
    schedule = hierarchical_schedule(ring_switch(), K.ALLGATHER, algorithms=["ring", "direct"], splits=4)
    assert schedule.notes["parameters"]["orders"] == [[1, 0]]  # Allgather alone: highest dimension first
    assert schedule.notes["description"] == "per dimension ring, direct; 4 splits; dimension order 1,0"
    assert schedule.collective.chunk_factor == 4
    schedule = hierarchical_schedule(ring_switch(), K.ALLREDUCE, algorithms=["biring", "direct"], splits=3)
    assert schedule.collective.chunk_factor == 6 and schedule.notes["channels"] == 2


# ------------------------------------------------------------- random networks
@st.composite
def astra_networks(draw: st.DrawFn, max_npus: int = 24) -> Topology:
    dims = []
    total = 1
    for _ in range(draw(st.integers(1, 3))):
        npus = draw(st.integers(2, 4))
        if total * npus > max_npus:
            break
        total *= npus
        dims.append(AstraDimension(draw(st.sampled_from(list(AstraKind))), npus,
                                   draw(st.sampled_from([25.0, 50.0, 100.0, 200.0])),
                                   draw(st.sampled_from([0.0, 50.0, 500.0, 2000.0]))))
    return astra_topology(dims)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=astra_networks(), kind=st.sampled_from(KINDS), balanced=st.booleans(),
       size=st.sampled_from([4096, 1 << 20, 64 << 20]), data=st.data())
def test_correct_and_above_the_bound_on_random_astra_networks(topology: Topology, kind: CollectiveKind,
                                                              balanced: bool, size: int, data: st.DataObject) -> None:
    explicit = data.draw(st.booleans(), label="explicit parameters")
    options: dict[str, object] = {"balanced": balanced}
    if explicit:
        options["algorithms"] = [data.draw(st.sampled_from(list(DimAlgorithm)), label=f"dim {d}")
                                 for d in range(len(topology.dimensions))]
        options["splits"] = data.draw(st.integers(1, 4), label="splits")
    try:
        schedule = hierarchical_schedule(topology, kind, size_bytes=size, **options)  # type: ignore[arg-type]
    except NotApplicable:
        assume(False)
        raise
    result = simulate(topology, schedule, size)
    assert result.correct, result.error
    assert result.time_us is not None
    assert result.time_us >= lower_bound(topology, kind, size).bound_us * (1 - 1e-9)
    estimate = schedule.notes["parameters"]["estimate_us"]
    algorithms = set(schedule.notes["parameters"]["algorithms"])
    if (schedule.notes["pieces"] == 1 and "dbt" not in algorithms) or algorithms <= {"ring", "biring", "direct"}:
        # an ASTRA-sim network (no relays, symmetric groups) whose dimensions keep each phase on the same
        # connections: the pipeline model's makespan is the simulated time, whatever the splits and channels
        assert result.time_us == pytest.approx(estimate, rel=1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS), balanced=st.booleans(), size=st.sampled_from([4096, 16 << 20]),
       which=st.sampled_from(["torus", "mesh", "hypercube"]),
       sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3).filter(lambda s: 2 <= math.prod(s) <= 24))
def test_correct_on_tori_meshes_and_hypercubes(kind: CollectiveKind, balanced: bool, size: int, which: str,
                                               sizes: list[int]) -> None:
    """Meshes relay the ring's wrap-around step through the line; size-1 dimensions take no phase."""
    topology = {"torus": lambda: torus(sizes), "mesh": lambda: mesh(sizes),
                "hypercube": lambda: hypercube(max(1, len(sizes)))}[which]()
    schedule = hierarchical_schedule(topology, kind, balanced=balanced, size_bytes=size)
    result = simulate(topology, schedule, size)
    assert result.correct, result.error
    assert result.time_us is not None and result.time_us >= lower_bound(topology, kind, size).bound_us * (1 - 1e-9)


def test_two_channel_slots_hide_one_latency_hand_computed() -> None:
    """[Switch 4], 25 GB/s (2^30) and 1.5 us per link, Allgather of 64 MiB in two splits, direct: each split
    sends 3 blocks of M/8 through every NPU's switch port after 2 x 1.5 us. One slot: the splits one after
    the other; two slots: both wait their latency at once, then share the port."""
    topology = astra_topology([AstraDimension(AstraKind.SWITCH, 4, 25.0, 1500.0)])
    block = M / 4 / 2
    one = run(topology, K.ALLGATHER, M, algorithms=["direct"], splits=2, channels=1)
    assert one == pytest.approx(2 * (3.0 + 3 * block / (B1 * 1e3)), rel=1e-12)
    two = run(topology, K.ALLGATHER, M, algorithms=["direct"], splits=2, channels=2, balanced=True)
    assert two == pytest.approx(3.0 + 6 * block / (B1 * 1e3), rel=1e-12)
    assert one - two == pytest.approx(3.0)


@pytest.mark.slow
def test_load_balanced_near_the_bound_on_the_3d_network() -> None:
    """Issue 10's [Ring 2, FullyConnected 8, Switch 4] at 1 GB: the model's makespan is within 90% of the
    bound for all three collectives, and the simulator agrees with it (Allgather simulated here)."""
    topology = astra_topology([AstraDimension(AstraKind.RING, 2, 200.0, 50.0),
                               AstraDimension(AstraKind.FULLY_CONNECTED, 8, 100.0, 500.0),
                               AstraDimension(AstraKind.SWITCH, 4, 50.0, 2000.0)])
    size = 1 << 30
    for kind in KINDS:
        plan = hierarchical_plan(topology, kind, balanced=True, size_bytes=size)
        assert plan.estimate_us is not None
        assert lower_bound(topology, kind, size).bound_us >= 0.9 * plan.estimate_us, (kind, plan.describe())
        assert len(set(plan.orders)) >= 2 and max(plan.slots) >= 2
    schedule = hierarchical_schedule(topology, K.ALLGATHER, balanced=True, size_bytes=size)
    result = simulate(topology, schedule, size)
    assert result.correct and result.time_us == pytest.approx(schedule.notes["parameters"]["estimate_us"], rel=1e-9)


def test_double_binary_tree_on_the_last_dimension() -> None:
    topology = astra_topology([AstraDimension(AstraKind.RING, 4, 100.0, 500.0),
                               AstraDimension(AstraKind.SWITCH, 5, 50.0, 1000.0)])
    for splits in (1, 3):
        schedule = hierarchical_schedule(topology, K.ALLREDUCE, algorithms=["ring", "dbt"], splits=splits)
        result = simulate(topology, schedule, 8 * MiB)
        assert result.correct, result.error
    with pytest.raises(NotApplicable, match="Allreduce phases only"):
        hierarchical_schedule(topology, K.ALLGATHER, algorithms=["ring", "dbt"])
    with pytest.raises(NotApplicable, match="cannot run a double binary tree"):
        hierarchical_schedule(topology, K.ALLREDUCE, algorithms=["ring", "dbt"], balanced=True)


# ------------------------------------------------------------ selection, errors
@pytest.mark.slow
def test_the_load_balanced_variant_beats_the_plain_one_on_the_3d_network() -> None:
    """ASTRA-sim's [Ring 2, FullyConnected 8, Switch 4]: the ring of 2 carries half the buffer in the plain
    order; the balanced orders move part of the data to the fully connected dimension first."""
    topology = astra_topology([AstraDimension(AstraKind.RING, 2, 200.0, 50.0),
                               AstraDimension(AstraKind.FULLY_CONNECTED, 8, 100.0, 500.0),
                               AstraDimension(AstraKind.SWITCH, 4, 50.0, 2000.0)])
    size = 64 * MiB
    plain = run(topology, K.ALLREDUCE, size)
    balanced = run(topology, K.ALLREDUCE, size, balanced=True)
    assert balanced < 0.8 * plain
    plan = hierarchical_plan(topology, K.ALLREDUCE, balanced=True, size_bytes=size)
    assert any(order != (0, 1, 2) for order in plan.orders)


def test_more_splits_at_large_sizes_fewer_at_small() -> None:
    topology = ring_switch()
    small = hierarchical_plan(topology, K.ALLREDUCE, size_bytes=4096)
    large = hierarchical_plan(topology, K.ALLREDUCE, size_bytes=1 << 30)
    assert small.splits == 1 and large.splits > 1
    assert small.estimate_us is not None and large.estimate_us is not None


@pytest.mark.parametrize(("call", "words"), [
    (lambda: hierarchical_schedule(resolve_topology("dgx1"), K.ALLREDUCE), "has no dimensions"),
    (lambda: hierarchical_schedule(ring_switch(), K.ALLTOALL), "not alltoall"),
    (lambda: hierarchical_schedule(ring_switch(), K.ALLREDUCE, algorithms=["ring"] * 3),
     "one algorithm per dimension (2), got 3"),
    (lambda: hierarchical_schedule(ring_switch(), K.ALLREDUCE, algorithms=["ring", "spiral"]),
     "unknown dimension algorithm 'spiral'"),
    (lambda: hierarchical_schedule(ring_switch(), K.ALLREDUCE, algorithms=["direct", "ring"]),
     "dimension 0: direct needs a direct route from GPU 0 to GPU 2"),
    (lambda: hierarchical_schedule(mesh([3, 2]), K.ALLREDUCE, algorithms=["hd", "ring"]),
     "power-of-two group (got 3)"),
    (lambda: hierarchical_schedule(ring_switch(), K.ALLREDUCE, splits=0), "splits: must be an integer in 1..1024 (got 0)"),
    (lambda: hierarchical_schedule(ring_switch(), K.ALLREDUCE, channels=[1, 2, 3]),
     "one channel count per dimension (2), got 3"),
    (lambda: hierarchical_schedule(ring_switch(), K.ALLREDUCE, channels=5), "channels: must be integers in 1..4 (got 5)"),
])
def test_bad_requests_say_why(call: object, words: str) -> None:
    with pytest.raises(NotApplicable) as info:
        call()  # type: ignore[operator]
    assert words in str(info.value)


def test_listed_only_where_there_are_dimensions() -> None:
    assert "hier" in applicable_baselines(ring_switch(), K.ALLREDUCE)
    assert "hier-lb" in applicable_baselines(ring_switch(), K.ALLGATHER)
    assert "hier" not in applicable_baselines(ring_switch(), K.BROADCAST)
    assert "hier" not in applicable_baselines(resolve_topology("dgx1"), K.ALLREDUCE)
    with pytest.raises(NotApplicable):
        check_hierarchical(resolve_topology("ndv2x2"), K.ALLGATHER)
    schedule = baseline(ring_switch(), K.ALLREDUCE, "hier-lb", size_bytes=M)
    assert schedule.name == "hier-lb" and schedule.notes["parameters"]["balanced"] is True


# ------------------------------------------------------------------- XML, CLI
@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("algorithms", "balanced"), [(["ring", "ring"], False), (["biring", "direct"], True),
                                                      (["ring", "hd"], False)])
def test_lowers_to_xml_the_verifier_finds_correct(kind: CollectiveKind, algorithms: list[str],
                                                  balanced: bool) -> None:
    topology = ring_switch()
    schedule = hierarchical_schedule(topology, kind, algorithms=algorithms, splits=2, balanced=balanced)
    program = lower_schedule(schedule, topology)
    report = verify_program(program)
    assert report.correct, report.errors[:3]
    size = 16 * MiB
    assert simulate_program(program, topology, size).time_us == pytest.approx(
        simulate(topology, schedule, size).time_us, rel=1e-9)


@pytest.mark.slow
def test_cli_baseline_reports_the_parameters(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = f"{tmp_path}/net.yml"
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("topology: [ Ring, Switch ]\nnpus_count: [ 4, 4 ]\nbandwidth: [ 200.0, 50.0 ]\n"
                     "latency: [ 500.0, 2000.0 ]\n")
    with pytest.raises(SystemExit) as status:
        main(["baseline", "-t", path, "-c", "allreduce", "-s", "64MB", "--json"])
    assert status.value.code == 0
    data = json.loads(capsys.readouterr().out)
    entries = {e["algorithm"]: e for e in data["baselines"]}
    assert {"hier", "hier-lb"} <= set(entries)
    assert entries["hier"]["correct"] and entries["hier"]["parameters"]["algorithms"][1] in ("ring", "direct",
                                                                                             "hd", "dbt")
    assert entries["hier"]["parameters"]["splits"] >= 1
    assert entries["hier"]["time_us"] >= data["bound_us"]
    with pytest.raises(SystemExit):
        main(["baseline", "-t", path, "-c", "allreduce", "-s", "64MB", "-a", "hier"])
    out = capsys.readouterr().out
    assert "hier: per dimension" in out and "split" in out
