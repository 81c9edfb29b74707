"""The synthesizer's own trees through multicast and reduce switches, and the joint bound of concurrent collectives.

Hand-computed cases on a star switch and a two-level switch tree (the routing
LP, the simulated times and every link's bytes), property tests on random small
topologies whose switches carry random capability flags (every schedule the
stage builds is correct and no faster than the capability-aware bound), the
joint lower bound (hand-computed, and between the single bounds and the
simulated makespan), and ``synthesize -c A+B -o DIR`` writing one file per
collective.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cli_runner import only_json, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver_models.logical import build_logical_graph
from solver_models.multicast import branch_graph, multicast_columns
from solver_models.symmetry import find_symmetry
from taccl_py.baselines import applicable_baselines, baseline
from taccl_py.bounds import joint_lower_bound, lower_bound
from taccl_py.collectives import CollectiveKind
from taccl_py.concurrent import simulate_concurrent
from taccl_py.library.grids import switch_star, switch_tree
from taccl_py.schedule import Op, load_schedule, network_groups
from taccl_py.simulator import simulate
from taccl_py.sketch import derive_sketch
from taccl_py.synthesis import SynthesisOptions, synthesize
from taccl_py.synthesis.multicast import SwitchStage, one_group_allreduce, split_by_latency, switch_candidates
from taccl_py.synthesis.options import Run
from taccl_py.synthesis.routes import prepare
from taccl_py.testing import topologies
from taccl_py.topology import Topology
from taccl_py.topology_io import load_topology, save_topology

AG, RS, AR, BC, RD, A2A = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE,
                           CollectiveKind.BROADCAST, CollectiveKind.REDUCE, CollectiveKind.ALLTOALL)


def stage(topo: Topology, kind: CollectiveKind, size: float, root: int = 0) -> SwitchStage:
    run_ = Run.start(SynthesisOptions(time_limit_s=20.0, root=root), None)
    return switch_candidates(run_, prepare(run_, topo, kind, size), size)


def link_bytes(topo: Topology, result: object, pairs: list[tuple[object, object]]) -> list[float]:
    return [result.link_bytes[topo.link_index[p]] for p in pairs]  # type: ignore[attr-defined]


# ------------------------------------------------------------------ hand-computed
def test_star_routing_lp_is_the_multicast_cut() -> None:
    """4 GPUs on one multicast switch (10 GB/s): each GPU's block leaves once, every downlink carries the 3 others,
    so the LP's bottleneck is 3 blocks / 10 GB/s = 0.3 us per kB of a GPU's data, one group per tree."""
    topo = switch_star(4, 10.0, 1.0, multicast=True)
    logical = build_logical_graph(topo, derive_sketch())
    graph = branch_graph(topo, logical, ["switch"])
    assert graph.num_vertices == 5 and len(graph.edges) == 8  # 4 GPU -> switch, 4 switch -> GPU segments
    pool = multicast_columns(topo, graph, find_symmetry(topo, allowed=frozenset(logical.edges)))
    assert pool.lp_time_per_byte_us == pytest.approx(3 / 10 / 1e3)
    (column,) = next(iter(pool.columns.values()))
    (hop,) = column.sends  # type: ignore[attr-defined]
    assert hop.is_group and sorted(hop.receivers) == [1, 2, 3] and len(hop.links) == 4


def test_star_switch_trees_hand_computed() -> None:
    """M = 4000 B on the star (10 GB/s, 1 us per link, multicast + reduce): Allgather 2 + 3000/10,000 = 2.3 us with
    M/N injected per GPU; ReduceScatter the reverse (2.3 us, M/N received per GPU); Allreduce one group over the
    switch, 2 + 4000/10,000 = 2.4 us with M each way. Each meets its capability-aware bound."""
    topo = switch_star(4, 10.0, 1.0, multicast=True, reduce=True)
    up = [(g, "switch") for g in range(4)]
    down = [("switch", g) for g in range(4)]
    for kind, time_us, sent, received in ((AG, 2.3, 1000.0, 3000.0), (RS, 2.3, 3000.0, 1000.0),
                                          (AR, 2.4, 4000.0, 4000.0)):
        best = stage(topo, kind, 4000).choices[0]
        assert best.sim.correct and best.schedule.uses_switch_offload
        assert best.time_us == pytest.approx(time_us)
        assert best.time_us == pytest.approx(lower_bound(topo, kind, 4000).bound_us)
        assert link_bytes(topo, best.sim, up) == [sent] * 4
        assert link_bytes(topo, best.sim, down) == [received] * 4
    assert stage(topo, AR, 4000).choices[0].label == "synthesized one-group in-network allreduce"
    assert all(t.op is Op.REDUCE for t in stage(topo, RS, 4000).choices[0].schedule.transfers)


def test_two_level_tree_multicast_allgather_hand_computed() -> None:
    """GPUs 0, 1 under leaf0 and 2, 3 under leaf1 (GPU links 10 GB/s 1 us, uplinks 5 GB/s 2 us), M = 4000 B.

    Every GPU multicasts its block in one group; a leaf's uplink carries its two GPUs' blocks once (2000 B at
    5000 B/us: 0.4 us), so every group flows at 2500 B/us: 1000 B in 0.4 us after the nearest receiver's 2 us,
    the far GPUs 4 us later: 6.4 us, which is the cut bound (2 blocks over 5 GB/s after 6 us of latency)."""
    topo = switch_tree(2, 2, 10.0, 1.0, multicast=True, uplink_bandwidth=5.0, uplink_latency=2.0)
    found = stage(topo, AG, 4000)
    best = found.choices[0]
    assert best.time_us == pytest.approx(6.4)
    assert lower_bound(topo, AG, 4000).bound_us == pytest.approx(6.4)
    assert len(network_groups(best.schedule.transfers)) == 4
    assert link_bytes(topo, best.sim, [("leaf0", "spine"), ("leaf1", "spine"), ("spine", "leaf0"),
                                       ("spine", "leaf1")]) == [2000.0] * 4
    assert link_bytes(topo, best.sim, [(g, f"leaf{g // 2}") for g in range(4)]) == [1000.0] * 4
    # split by latency, the near and the far receivers are two groups: the block leaves its GPU twice
    split = next(c for c in found.candidates if c.label.endswith("split by latency"))
    assert split.time_us == pytest.approx(6.4)


def test_split_one_group_allreduce_stays_one_exchange() -> None:
    """Split by latency, a one-group Allreduce becomes two groups (same leaf / across the spine); both read the
    buffers before either adds (one exchange), so every contribution is counted once."""
    topo = switch_tree(2, 2, 10.0, 1.0, multicast=True, reduce=True, uplink_bandwidth=5.0, uplink_latency=2.0)
    whole = one_group_allreduce(topo)
    assert whole is not None and len(whole) == 12
    cut = split_by_latency(topo, whole.transfers)
    assert cut is not None and len(network_groups(cut)) == 2 and {t.exchange for t in cut} == {0}
    result = simulate(topo, whole.with_transfers(cut), 4000)
    assert result.correct, result.error
    # without the shared exchange the far group would add sums that already hold the near group's data
    wrong = simulate(topo, whole.with_transfers(replace(t, exchange=None) for t in cut), 4000)
    assert not wrong.correct and "a second time" in (wrong.error or "")


def test_synthesize_ranks_switch_trees_and_never_loses_to_a_baseline() -> None:
    topo = switch_tree(2, 2, 10.0, 1.0, multicast=True, uplink_bandwidth=5.0, uplink_latency=2.0)
    result = synthesize(topo, AG, 4096, SynthesisOptions(time_limit_s=10.0))
    assert result.chosen.startswith("synthesized multicast trees") and result.schedule.uses_switch_offload
    assert result.sim.time_us is not None
    assert result.sim.time_us <= min(t for t in result.baselines.values() if t is not None)
    assert any(not c.schedule.uses_switch_offload for c in result.ranked)  # a unicast fallback for -o


def test_no_switch_trees_without_the_flags_or_for_alltoall() -> None:
    assert stage(switch_star(4, 10.0, 1.0), AG, 4000) == SwitchStage((), (), (), ())
    assert stage(switch_star(4, 10.0, 1.0, multicast=True), RS, 4000) == SwitchStage((), (), (), ())
    assert stage(switch_star(4, 10.0, 1.0, multicast=True, reduce=True), A2A, 4000) == SwitchStage((), (), (), ())


# ------------------------------------------------------------------ properties
@st.composite
def flagged_topologies(draw: st.DrawFn) -> Topology:
    """Random topologies with switches (irregular ones, and two-level switch trees), each switch with random
    multicast and reduce flags."""
    bandwidth, latency = st.sampled_from([1.0, 5.0, 10.0, 25.0]), st.sampled_from([0.0, 0.5, 1.0, 2.0])
    topo = draw(st.one_of(
        topologies(min_gpus=2, max_gpus=5, min_switches=1, max_switches=3),
        st.builds(lambda leaves, per, bw, lat, up_bw, up_lat: switch_tree(leaves, per, bw, lat, uplink_bandwidth=up_bw,
                                                                          uplink_latency=up_lat),
                  st.integers(2, 3), st.integers(1, 2), bandwidth, latency, bandwidth, latency)))
    flags = [(draw(st.booleans()), draw(st.booleans())) for _ in topo.switches]
    return replace(topo, switches=tuple(replace(s, multicast=m, reduce=r)
                                        for s, (m, r) in zip(topo.switches, flags, strict=True)))


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=flagged_topologies(), kind=st.sampled_from([AG, RS, AR, BC, RD]),
       size=st.sampled_from([4096, 1 << 20, 3 * 10**6]), root=st.integers(0, 4))
def test_switch_trees_are_correct_and_respect_the_bound(topo: Topology, kind: CollectiveKind, size: int,
                                                       root: int) -> None:
    """On random topologies with random switch flags, every schedule the stage builds is correct (its groups are
    trees the flags allow) and no faster than the capability-aware bound."""
    root %= topo.num_gpus
    found = stage(topo, kind, size, root)
    bound = lower_bound(topo, kind, size, root=root).bound_us
    for cand in found.candidates:
        assert cand.time_us is not None, cand.note
        assert cand.time_us >= bound * (1 - 1e-9)
    for choice in found.choices:
        assert choice.sim.correct and choice.schedule.structural_error(topo) is None


# ------------------------------------------------------------------ the joint bound
def test_joint_bound_hand_computed() -> None:
    """AG + RS of M = 4000 B each on 4 GPUs around one 10 GB/s switch (1 us per link).

    Unicast: the GPUs inject (N-1) M for each, 24,000 B over 4 x 10 GB/s, after one route's 2 us: 2.6 us, which
    direct + direct takes. With multicast and in-switch reduction every GPU still sends M/N + (N-1)/N M = M:
    2 + 0.4 = 2.4 us, which multicast + nvls takes. Each single bound is 2.3 us."""
    plain = switch_star(4, 10.0, 1.0)
    capable = switch_star(4, 10.0, 1.0, multicast=True, reduce=True)
    parts = [(AG, 4000), (RS, 4000)]
    for topo, expected, (ag, rs) in ((plain, 2.6, ("direct", "direct")), (capable, 2.4, ("multicast", "nvls"))):
        joint = joint_lower_bound(topo, parts)
        assert joint.parts_us == pytest.approx((2.3, 2.3))
        assert joint.bound_us == pytest.approx(expected)
        together = simulate_concurrent(topo, [(baseline(topo, AG, ag, chunk_factor=1), 4000),
                                              (baseline(topo, RS, rs, chunk_factor=1), 4000)])
        assert together.makespan_us == pytest.approx(expected)
        assert joint.efficiency(together.makespan_us) == pytest.approx(1.0)
    assert "traffic bound" in joint_lower_bound(plain, parts).explanation
    assert "summed cut bound" in joint_lower_bound(capable, parts).explanation


def test_joint_bound_of_one_collective_is_its_bound() -> None:
    topo = switch_tree(2, 2, 10.0, 1.0, uplink_bandwidth=5.0)
    assert joint_lower_bound(topo, [(AR, 1 << 20)]).bound_us == lower_bound(topo, AR, 1 << 20).bound_us


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=flagged_topologies(), kinds=st.lists(st.sampled_from([AG, RS, AR, A2A, BC]), min_size=2, max_size=3),
       sizes=st.lists(st.sampled_from([4096, 1 << 20, 3 * 10**6]), min_size=3, max_size=3), data=st.data())
def test_joint_bound_between_the_single_bounds_and_the_makespan(topo: Topology, kinds: list[CollectiveKind],
                                                                sizes: list[int], data: st.DataObject) -> None:
    """Every applicable baseline combination: the joint bound is at least each collective's bound and at most the
    simulated makespan of them running at once."""
    parts = []
    for kind, size in zip(kinds, sizes, strict=False):
        name = data.draw(st.sampled_from(applicable_baselines(topo, kind)), label=f"{kind.value} baseline")
        parts.append((baseline(topo, kind, name, size_bytes=size), size))
    joint = joint_lower_bound(topo, [(s.collective.kind, size) for s, size in parts])
    for (schedule, size), single in zip(parts, joint.parts_us, strict=True):
        assert single == lower_bound(topo, schedule.collective.kind, size).bound_us
        assert joint.bound_us >= single
    together = simulate_concurrent(topo, parts)
    assert together.makespan_us is not None, together.error
    assert together.makespan_us >= joint.bound_us * (1 - 1e-9)


# ------------------------------------------------------------------ files of a joint synthesis
def _star_file(tmp_path: Path, **flags: bool) -> str:
    path = tmp_path / "star.json"
    save_topology(switch_star(4, 10.0, 1.0, **flags), path)
    return str(path)


def test_joint_synthesis_writes_one_file_per_collective(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Unicast choices are written as MSCCL XML (verified); choices through the switches as schedule JSON, which
    simulate -a reads back with the same makespan."""
    for flags, fmt in (({}, "xml"), ({"multicast": True, "reduce": True}, "json")):
        out_dir = tmp_path / fmt
        topo_arg = _star_file(tmp_path, **flags)
        code, out, err = run(["synthesize", "-t", topo_arg, "-c", "allgather+reducescatter", "-s", "64KB",
                              "--time-limit", "5", "-o", str(out_dir), "--json"], capsys)
        assert code == 0, err
        data = only_json(out)
        files = data["files"]
        assert [f["collective"] for f in files] == ["allgather", "reducescatter"]
        assert [f["format"] for f in files] == [fmt, fmt]
        assert sorted(p.name for p in out_dir.iterdir()) == [f"allgather-switch4.{fmt}",
                                                              f"reducescatter-switch4.{fmt}"]
        assert data["makespan_efficiency"] == pytest.approx(data["makespan_bound_us"] / data["makespan_us"])
        if fmt == "xml":
            assert all(f["xml_verified"] and f["why_not_xml"] is None for f in files)
            assert (out_dir / "allgather-switch4.xml").read_text().startswith("<algo")
        else:
            assert all("MSCCL XML cannot express" in f["why_not_xml"] for f in files)
            code, out, err = run(["simulate", "-t", topo_arg, "-c", "allgather+reducescatter", "-s", "64KB", "-a",
                                  "+".join(f["path"] for f in files), "--json"], capsys)
            assert code == 0, err
            again = only_json(out)
            assert again["makespan_us"] == pytest.approx(data["makespan_us"])
            assert load_schedule(files[0]["path"], load_topology(topo_arg)).uses_switch_offload


def test_joint_synthesis_o_must_be_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "x.xml"
    target.write_text("keep")
    code, out, err = run(["synthesize", "-t", "ring8", "-c", "allgather+reducescatter", "-s", "1MB", "-o",
                          str(target)], capsys)
    assert code == 2 and "must be a directory" in err and not out
    assert target.read_text() == "keep"
