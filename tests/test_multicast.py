"""Switch multicast and in-network reduction: network groups in the schedule IR and the simulator.

Hand-computed cases on a star switch and a two-level switch tree, the errors a
group without the switch capability (or with an inconsistent shape) gets, and
property tests: random multicast and in-switch reduction schedules are judged
correct exactly when their data flow is (against a plain sequential reading of
the program), and a schedule without groups is timed as before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.bounds import lower_bound
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import ScheduleError
from taccl_py.library.grids import switch_star, switch_tree
from taccl_py.schedule import Op, Schedule, Transfer, schedule_from_dict, schedule_to_dict
from taccl_py.simulator import simulate
from taccl_py.topology import Topology

AG, AR, BC, RS, RD = (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE, CollectiveKind.BROADCAST,
                      CollectiveKind.REDUCESCATTER, CollectiveKind.REDUCE)


def multicast(topo: Topology, src: int, dsts: list[int], chunks: tuple[int, ...], group: int,
              **kw: Any) -> list[Transfer]:
    route = topo.gpu_route
    out = []
    for d in dsts:
        r = route(src, d)
        assert r is not None
        out.append(Transfer(src, d, chunks, r, group=group, **kw))
    return out


def in_switch_reduce(topo: Topology, srcs: list[int], dsts: list[int], chunks: tuple[int, ...], group: int,
                     **kw: Any) -> list[Transfer]:
    out = []
    for s in srcs:
        for d in dsts:
            if s != d:
                r = topo.gpu_route(s, d)
                assert r is not None
                out.append(Transfer(s, d, chunks, r, Op.REDUCE, group=group, **kw))
    return out


def multicast_allgather(topo: Topology) -> Schedule:
    n = topo.num_gpus
    ts = [t for r in range(n) for t in multicast(topo, r, [d for d in range(n) if d != r], (r,), r)]
    return Schedule(Collective(AG, n), tuple(ts), name="multicast")


# ------------------------------------------------------------------ a star switch
def test_star_multicast_allgather_hand_computed() -> None:
    """4 GPUs, 10 GB/s and 1 us per link, 4000 B: every uplink carries one 1000 B block, every downlink three.

    Each group's flow uses its sender's uplink and the three other downlinks; a
    downlink is shared by three groups: 10,000/3 B/us each, 1000 B in 0.3 us,
    after 2 us of latency.
    """
    topo = switch_star(4, 10.0, 1.0, multicast=True)
    result = simulate(topo, multicast_allgather(topo), 4000)
    assert result.correct, result.error
    assert result.time_us == pytest.approx(2.3)
    up = [topo.link_index[(g, "switch")] for g in range(4)]
    down = [topo.link_index[("switch", g)] for g in range(4)]
    assert [result.link_bytes[i] for i in up] == [1000.0] * 4  # injected once: M/N
    assert [result.link_bytes[i] for i in down] == [3000.0] * 4
    unicast = multicast_allgather(topo)
    plain = unicast.with_transfers(t.__class__(t.src, t.dst, t.chunks, t.route) for t in unicast.transfers)
    base = simulate(topo, plain, 4000)
    assert base.correct and [base.link_bytes[i] for i in up] == [3000.0] * 4  # (N-1)/N M without multicast


def test_star_nvls_allreduce_hand_computed() -> None:
    """Reduce-scatter through the switch, then a multicast all-gather: M = 4000 B each way per GPU.

    Phase 1: group b combines the other three GPUs' copies of block b in the
    switch; each uplink is in three groups (10,000/3 B/us), 1000 B in 0.3 us
    after 2 us. Phase 2: as the multicast Allgather. 2.3 + 2.3 us.
    """
    topo = switch_star(4, 10.0, 1.0, multicast=True, reduce=True)
    ts = [t for b in range(4) for t in in_switch_reduce(topo, [s for s in range(4) if s != b], [b], (b,), b)]
    ts += [t for b in range(4) for t in multicast(topo, b, [d for d in range(4) if d != b], (b,), 4 + b)]
    result = simulate(topo, Schedule(Collective(AR, 4), tuple(ts)), 4000)
    assert result.correct, result.error
    assert result.time_us == pytest.approx(4.6)
    assert set(result.link_bytes) == {4000.0}


def test_multicast_without_the_flag_is_rejected() -> None:
    topo = switch_star(4, 10.0, 1.0)
    result = simulate(topo, multicast_allgather(topo), 4000)
    assert not result.correct and result.time_us is None
    assert result.error == ("transfer 0: group 0: replicates data at 'switch', which is not multicast-capable "
                            "(its switch 'multicast' flag is off in topology 'switch4')")
    topo = switch_star(3, 10.0, 1.0, multicast=True)
    ts = in_switch_reduce(topo, [1, 2], [0], (0,), 0)
    result = simulate(topo, Schedule(Collective(RS, 3), tuple(ts)), 3000)
    assert result.error is not None and "cannot reduce in the network (its switch 'reduce' flag is off" in result.error


@pytest.mark.parametrize(("members", "message"), [
    ([Transfer(0, 1, (0,), (0, 3), group=0), Transfer(0, 2, (1,), (0, 5), group=0)],
     "member 1 carries chunks [1], not [0] as the first"),
    ([Transfer(1, 0, (0,), (2, 1), Op.COPY, group=0), Transfer(2, 0, (0,), (4, 1), Op.COPY, group=0)],
     "2 senders combine in the network, so the receivers must add the result (op reduce), not copy it"),
    ([Transfer(0, 1, (0,), (0, 3), group=0), Transfer(0, 1, (0,), (0, 3), group=0)],
     "two members send from rank 0 to rank 1"),
    ([Transfer(0, 1, (0,), (0, 3), group=0), Transfer(2, 0, (2,), (4, 1), group=1),
      Transfer(0, 2, (0,), (0, 5), group=0)],
     "transfer 2: group 0 is not one run of consecutive transfers"),
])
def test_malformed_groups_are_rejected(members: list[Transfer], message: str) -> None:
    topo = switch_star(3, 10.0, 1.0, multicast=True, reduce=True)  # links: g->switch = 2g, switch->g = 2g+1
    problem = Schedule(Collective(AG, 3), tuple(members)).structural_error(topo)
    assert problem is not None and message in problem


def test_a_repeated_group_shape_is_still_checked_for_its_chunks() -> None:
    """The structure check judges each group shape once; a later group of a sound shape that carries different
    chunks in its members is still found, and so is a later group of a new, broken shape."""
    topo = switch_star(3, 10.0, 1.0, multicast=True, reduce=True)
    sound = [t for c in range(3) for t in multicast(topo, c, [d for d in range(3) if d != c], (c,), c)]
    assert Schedule(Collective(AG, 3), tuple(sound)).structural_error(topo) is None
    again = [replace(t, group=3 + t.group, chunks=(t.chunks[0] + 3,)) for t in sound]
    mixed = [*again[:4], replace(again[4], chunks=(2,)), *again[5:]]  # group 5 (the shape of group 2): its first member
    problem = Schedule(Collective(AG, 3, 2), tuple(sound + mixed)).structural_error(topo)
    assert problem == "transfer 10: group 5: member 11 carries chunks [5], not [2] as the first"
    copied = [replace(t, op=Op.COPY) for t in in_switch_reduce(topo, [1, 2], [0], (0,), 9)]  # a new shape, broken
    problem = Schedule(Collective(RS, 3), tuple(copied)).structural_error(topo)
    assert problem is not None and "2 senders combine in the network" in problem


def test_shared_switch_searches_give_the_trees_and_routes_of_separate_ones() -> None:
    from taccl_py.baselines.offload import AggregationTree, SwitchReach, best_root
    from taccl_py.library import resolve_topology

    topo = resolve_topology("dgx-h100x2-nvls-sharp")
    reach = SwitchReach(topo)
    for gpus in ([0, 1, 2, 3, 4, 5, 6, 7], [3, 11], list(range(16))):
        root = best_root(topo, gpus)
        assert best_root(topo, gpus, reach) == root
        alone, shared = AggregationTree(topo, root, gpus), AggregationTree(topo, root, gpus, reach)
        for s in gpus:
            for d in gpus:
                if s != d:
                    assert shared.route(s, d) == alone.route(s, d) == shared.route(s, d)


# ------------------------------------------------------------------ a two-level tree
def tree(*, multicast: bool = False, reduce: bool = False) -> Topology:
    """GPUs 0,1 under leaf0, 2,3 under leaf1; GPU links 10 GB/s 1 us, uplinks 5 GB/s 2 us."""
    return switch_tree(2, 2, 10.0, 1.0, uplink_bandwidth=5.0, uplink_latency=2.0, multicast=multicast,
                       reduce=reduce)


def test_tree_multicast_broadcast_hand_computed() -> None:
    """GPU 0 multicasts 1000 B to 1, 2, 3: the bytes flow after the shortest route latency (2 us) at the
    uplinks' 5000 B/us (0.2 us); GPU 1 has them at 2.2 us, GPUs 2 and 3 their 6 us routes' extra 4 us later.
    Every link of the tree carries the 1000 B once; GPU 0's uplink too."""
    topo = tree(multicast=True)
    ts = multicast(topo, 0, [1, 2, 3], (0,), 0)
    result = simulate(topo, Schedule(Collective(BC, 4), tuple(ts)), 1000)
    assert result.correct, result.error
    assert list(result.arrive_us) == pytest.approx([2.2, 6.2, 6.2])
    assert result.time_us == pytest.approx(6.2)
    used = {li for t in ts for li in t.route}
    assert all(result.link_bytes[li] == 1000.0 for li in used)
    assert sum(result.link_bytes) == 1000.0 * len(used) == 6000.0


def test_tree_in_network_reduce_hand_computed() -> None:
    """GPUs 1, 2, 3 reduce into 0: 2 and 3 combine in leaf1, the sum and 1's copy in leaf0. One stream per link;
    the bytes move at 5000 B/us (0.2 us for 1000 B) after the shortest latency (2 us, from GPU 1), and GPU 0
    gets them its longest route's extra 4 us later: 6.2 us."""
    topo = tree(multicast=True, reduce=True)
    ts = in_switch_reduce(topo, [1, 2, 3], [0], (0,), 0)
    result = simulate(topo, Schedule(Collective(RD, 4), tuple(ts)), 1000)
    assert result.correct, result.error
    assert result.time_us == pytest.approx(6.2)
    assert sum(result.link_bytes) == 6000.0
    no_reduce = simulate(tree(multicast=True), Schedule(Collective(RD, 4), tuple(ts)), 1000)
    assert no_reduce.error is not None and "combines data at 'leaf" in no_reduce.error


def test_sharp_allreduce_on_the_tree() -> None:
    """Every GPU sends to every other through one group per chunk (SHARP: reduce up, multicast down), each group
    on its own channel; every receiver adds the others' sum to its own copy."""
    topo = tree(multicast=True, reduce=True)
    ts = [t for c in range(4) for t in in_switch_reduce(topo, [0, 1, 2, 3], [0, 1, 2, 3], (c,), c, channel=c)]
    result = simulate(topo, Schedule(Collective(AR, 4), tuple(ts)), 4000)
    assert result.correct, result.error
    # each group: 1000 B over every link; 4 groups share the 5000 B/us uplinks: 0.8 us, after 2 us, +4 us
    assert result.time_us == pytest.approx(6.8)


def test_double_counted_contribution_in_a_group_is_found() -> None:
    """Copy 1's block to 0 first, then reduce 1 and 2 into 0 through the switch: 1's contribution twice."""
    topo = switch_star(3, 10.0, 1.0, multicast=True, reduce=True)
    ts = [Transfer(1, 0, (0,), topo.gpu_route(1, 0) or (), Op.REDUCE)]
    ts += in_switch_reduce(topo, [1, 2], [0], (0,), 0)
    result = simulate(topo, Schedule(Collective(RS, 3), tuple(ts)), 3000)
    assert not result.correct
    assert result.error is not None and "reduces the contribution of rank(s) [1]" in result.error


def test_groups_round_trip_through_json() -> None:
    topo = tree(multicast=True)
    schedule = Schedule(Collective(BC, 4), tuple(multicast(topo, 0, [1, 2, 3], (0,), 7)))
    data = schedule_to_dict(schedule, topo)
    assert [t["group"] for t in data["transfers"]] == [7, 7, 7]
    assert schedule_from_dict(data, topo).transfers == schedule.transfers
    with pytest.raises(ScheduleError, match="not multicast-capable"):
        schedule_from_dict(data, tree())


# ------------------------------------------------------------------ properties
def _reference_verdict(schedule: Schedule) -> bool:
    """Read the program sequentially: each group (or transfer) reads, then writes; True when the result is right."""
    col = schedule.collective
    state = {(r, c): m for r, c, m in col.initial()}
    transfers = schedule.transfers
    i = 0
    while i < len(transfers):
        end = i + 1
        if transfers[i].group is not None:
            while end < len(transfers) and transfers[end].group == transfers[i].group:
                end += 1
        reads = []
        for t in transfers[i:end]:
            masks = [state.get((t.src, c), 0) for c in t.chunks]
            if 0 in masks:
                return False
            reads.append(masks)
        for t, masks in zip(transfers[i:end], reads, strict=True):
            for c, m in zip(t.chunks, masks, strict=True):
                held = state.get((t.dst, c), 0)
                if t.op is Op.REDUCE:
                    if held & m:
                        return False
                    state[(t.dst, c)] = held | m
                else:
                    state[(t.dst, c)] = m
        i = end
    return all(state.get((r, c), 0) == col.complete_mask(c) for r, c in col.required())


@st.composite
def random_group_programs(draw: Any, topo: Topology, kind: CollectiveKind) -> Schedule:
    """Random multicasts (Allgather) or in-switch reductions (ReduceScatter) of random chunks, often wrong."""
    n = topo.num_gpus
    ts: list[Transfer] = []
    for g in range(draw(st.integers(1, 2 * n))):
        chunk = draw(st.integers(0, n - 1))
        if kind is AG:
            src = draw(st.integers(0, n - 1))
            dsts = draw(st.lists(st.sampled_from([d for d in range(n) if d != src]), min_size=1, unique=True))
            ts += multicast(topo, src, dsts, (chunk,), g, channel=g)
        else:
            dst = draw(st.integers(0, n - 1))
            srcs = draw(st.lists(st.sampled_from([s for s in range(n) if s != dst]), min_size=1, unique=True))
            ts += in_switch_reduce(topo, srcs, [dst], (chunk,), g, channel=g)
    return Schedule(Collective(kind, n), tuple(ts))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_group_programs_are_judged_by_their_data_flow(data: st.DataObject) -> None:
    topo = data.draw(st.sampled_from([switch_star(3, 10.0, 1.0, multicast=True, reduce=True),
                                      tree(multicast=True, reduce=True)]))
    kind = data.draw(st.sampled_from([AG, RS]))
    schedule = data.draw(random_group_programs(topo, kind))
    result = simulate(topo, schedule, 1000 * topo.num_gpus)
    assert result.correct == _reference_verdict(schedule), result.error


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_group_reads_as_its_unicast_transfers(data: st.DataObject) -> None:
    """Dropping the group numbers leaves the same data flow (each sender's copy to each receiver) and never
    moves fewer bytes over any link."""
    topo = data.draw(st.sampled_from([switch_star(4, 10.0, 1.0, multicast=True, reduce=True),
                                      tree(multicast=True, reduce=True)]))
    kind = data.draw(st.sampled_from([AG, RS]))
    schedule = data.draw(random_group_programs(topo, kind))
    grouped = simulate(topo, schedule, 4000)
    plain = schedule.with_transfers(Transfer(t.src, t.dst, t.chunks, t.route, t.op, t.channel)
                                    for t in schedule.transfers)
    unicast = simulate(topo, plain, 4000)
    if grouped.correct and unicast.correct:
        assert all(u >= g - 1e-9 for u, g in zip(unicast.link_bytes, grouped.link_bytes, strict=True))


# ------------------------------------------------------------------ bounds, baselines, output
def test_bounds_say_what_they_assume() -> None:
    from taccl_py.bounds import lower_bound
    from taccl_py.library import resolve_topology

    plain, nvls = resolve_topology("dgx-h100"), resolve_topology("dgx-h100-nvls")
    size = 2**30
    unicast = lower_bound(plain, "allreduce", size)
    offload = lower_bound(nvls, "allreduce", size)
    assert "unicast" in unicast.assumes and "in-network reduction at nvswitch" in offload.assumes
    # NVLS: M each way per GPU (450 GB/s) instead of 2(N-1)/N M
    assert offload.bandwidth_us == pytest.approx(size / 450e3)
    assert unicast.bandwidth_us == pytest.approx(2 * 7 / 8 * size / 450e3)
    assert lower_bound(nvls, "allreduce", size, offload=False).bound_us == unicast.bound_us
    ag = lower_bound(nvls, "allgather", size)
    assert "switch multicast at nvswitch" in ag.assumes
    assert ag.bound_us == lower_bound(plain, "allgather", size).bound_us  # the ingress cut binds either way


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kind", "algorithm"), [
    ("dgx-h100-nvls", AG, "multicast"), ("dgx-h100-nvls", BC, "multicast"), ("dgx-h100-nvls", AR, "nvls"),
    ("dgx-h100-nvls", RS, "nvls"), ("dgx-h100-nvls", AG, "nvls"), ("dgx-h100x2-nvls-sharp", AR, "sharp"),
    ("dgx-h100x2-sharp", AR, "sharp"),
    ("dgx-h100x2-nvls", AR, "nvls-tree"), ("dgx-h100x4-nvls", AR, "nvls-tree")])
def test_offload_baselines_are_correct_and_above_their_bound(name: str, kind: CollectiveKind, algorithm: str) -> None:
    from taccl_py.baselines import applicable_baselines, baseline
    from taccl_py.bounds import lower_bound
    from taccl_py.library import resolve_topology

    topo = resolve_topology(name)
    assert algorithm in applicable_baselines(topo, kind)
    for size in (2**20, 2**30):
        schedule = baseline(topo, kind, algorithm, size_bytes=size)
        assert schedule.uses_switch_offload
        result = simulate(topo, schedule, size)
        assert result.correct, result.error
        assert result.time_us is not None and result.time_us >= lower_bound(topo, kind, size).bound_us * (1 - 1e-9)
    plain = resolve_topology(name.replace("-nvls", "").replace("-sharp", ""))
    assert algorithm not in applicable_baselines(plain, kind)


def test_nvls_trees_are_nccls_double_binary_tree() -> None:
    """NVLSTree's two trees of machines are NCCL's (trees.cc): rank 0 the root of the first with one child, odd
    ranks its leaves, the second mirrored (even counts) or shifted (odd); children come before parents, and no
    machine is inside both trees."""
    from taccl_py.baselines.tree import nccl_double_tree_edges

    assert nccl_double_tree_edges(2, 0) == [(1, 0)] and nccl_double_tree_edges(2, 1) == [(0, 1)]
    assert nccl_double_tree_edges(8, 0) == [(1, 2), (3, 2), (2, 4), (5, 6), (7, 6), (6, 4), (4, 0)]
    assert nccl_double_tree_edges(8, 1) == [(0, 1), (2, 1), (1, 3), (4, 5), (6, 5), (5, 3), (3, 7)]  # mirrored
    assert nccl_double_tree_edges(3, 0) == [(1, 2), (2, 0)] and nccl_double_tree_edges(3, 1) == [(2, 0), (0, 1)]  # shifted
    for count in range(2, 40):
        inner = []
        for which in (0, 1):
            pairs = nccl_double_tree_edges(count, which)
            roots = set(range(count)) - {c for c, _ in pairs}
            assert len(roots) == 1 and len(pairs) == count - 1
            sent: set[int] = set()
            for child, _parent in pairs:  # a machine passes its sum up only after all its children did
                assert all(c in sent for c, p in pairs if p == child)
                sent.add(child)
            assert max(sum(1 for _, p in pairs if p == m) for m in range(count)) <= 2
            inner.append({p for _, p in pairs} - roots)
        assert not inner[0] & inner[1], count


def test_nvls_tree_sums_inside_machines_and_across_them_over_the_nics() -> None:
    """NVLSTree on 2 x DGX H100: each block crosses the network once each way per piece (up the tree, back down),
    through the owners' NICs only, and one machine alone or switches that cannot reduce refuse it."""
    from taccl_py.baselines import applicable_baselines, baseline
    from taccl_py.baselines.common import NotApplicable
    from taccl_py.baselines.tree import nccl_double_tree_edges
    from taccl_py.library import resolve_topology

    topo = resolve_topology("dgx-h100x2-nvls")
    schedule = baseline(topo, AR, "nvls-tree", chunk_factor=2)
    across = [t for t in schedule.transfers if topo.machine_of[t.src] != topo.machine_of[t.dst]]
    assert len(across) == 16 * 2 * 2  # 16 blocks x 2 pieces x (up, down)
    assert all(t.src % 8 == t.dst % 8 for t in across)  # one rail: the owners of a block
    ups = [t for t in across if t.op is Op.REDUCE]
    assert {(topo.machine_of[t.src], topo.machine_of[t.dst]) for t in ups} == {(1, 0), (0, 1)}  # both trees
    result = simulate(topo, schedule, 2**24)
    assert result.correct, result.error
    four = resolve_topology("dgx-h100x4-nvls")  # one piece per block: a rail's blocks still take both trees
    one = baseline(four, AR, "nvls-tree", chunk_factor=1)
    machine = four.machine_of
    ups4 = {(machine[t.src], machine[t.dst]) for t in one.transfers
            if t.op is Op.REDUCE and machine[t.src] != machine[t.dst]}
    assert ups4 == set(nccl_double_tree_edges(4, 0)) | set(nccl_double_tree_edges(4, 1))
    assert simulate(four, one, 2**20).correct
    three = resolve_topology("dgx-h100x3-nvls")  # an odd count: the second tree is the first shifted
    odd = simulate(three, baseline(three, AR, "nvls-tree", chunk_factor=1), 2**20)
    assert odd.correct, odd.error
    assert "sharp" not in applicable_baselines(topo, AR)  # the owners' exchange would need no switch to add
    with pytest.raises(NotApplicable, match="switch joining a rail across machines to reduce"):
        baseline(topo, AR, "sharp")
    for name in ("dgx-h100-nvls", "dgx-h100x2"):
        with pytest.raises(NotApplicable):
            baseline(resolve_topology(name), AR, "nvls-tree")


def test_nvls_allreduce_is_near_its_bound_and_beats_the_ring() -> None:
    from taccl_py.baselines import baseline
    from taccl_py.bounds import lower_bound
    from taccl_py.library import resolve_topology

    topo, size = resolve_topology("dgx-h100-nvls"), 2**30
    nvls = simulate(topo, baseline(topo, AR, "nvls", size_bytes=size), size)
    ring = simulate(topo, baseline(topo, AR, "ring", size_bytes=size), size)
    assert nvls.time_us is not None and ring.time_us is not None
    assert lower_bound(topo, AR, size).efficiency(nvls.time_us) > 0.95
    assert ring.time_us > 1.6 * nvls.time_us


def test_xml_refuses_groups_and_baseline_o_writes_the_best_unicast(tmp_path: Any,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from cli_runner import run

    from taccl_py.errors import LoweringError
    from taccl_py.library import resolve_topology
    from taccl_py.msccl import lower_schedule

    topo = switch_star(4, 10.0, 1.0, multicast=True)
    with pytest.raises(LoweringError, match="MSCCL XML cannot express"):
        lower_schedule(multicast_allgather(topo), topo)
    xml, js = tmp_path / "ar.xml", tmp_path / "ar.json"
    code, out, err = run(["baseline", "-t", "dgx-h100-nvls", "-c", "allreduce", "-s", "64MB", "-o", str(xml),
                          "--schedule-out", str(js)], capsys)
    assert code == 0, err
    assert "the best baseline, nvls, uses switch multicast or in-network reduction, which MSCCL XML" in out
    assert xml.read_text().startswith("<algo") and '"group"' in js.read_text()
    from taccl_py.schedule import load_schedule

    assert load_schedule(js, resolve_topology("dgx-h100-nvls")).uses_switch_offload
    code, out, err = run(["baseline", "-t", "dgx-h100-nvls", "-c", "allreduce", "-s", "64MB", "-a", "nvls",
                          "-o", str(tmp_path / "x.xml")], capsys)
    assert code == 2 and "MSCCL XML cannot express" in err and not (tmp_path / "x.xml").exists()


def test_nvls_allgather_multicasts_each_block_in_nvls_pieces() -> None:
    """NCCL's NVLS Allgather: every piece of a block leaves its GPU once, as one multicast group to the others."""
    from taccl_py.baselines import baseline
    from taccl_py.library import resolve_topology

    topo = resolve_topology("dgx-h100-nvls")
    schedule = baseline(topo, AG, "nvls", chunk_factor=3)
    assert schedule.collective.chunk_factor == 3 and len(schedule.transfers) == 8 * 3 * 7
    groups: dict[int | None, set[int]] = {}
    for t in schedule.transfers:
        assert t.chunks == (t.src * 3 + t.chunks[0] % 3,) and t.op is Op.COPY
        groups.setdefault(t.group, set()).add(t.src)
    assert len(groups) == 8 * 3 and all(len(srcs) == 1 for srcs in groups.values())
    result = simulate(topo, schedule, 2**24)
    assert result.correct, result.error


@pytest.mark.parametrize(("kind", "algorithm"), [(AG, "multicast"), (RS, "nvls"), (AR, "nvls")])
def test_gb200_nvl72_nvls_baselines(kind: CollectiveKind, algorithm: str) -> None:
    """GB200 NVL72 with NVLS: the offload baselines run on its 72 GPUs, correct, above the NVLS-aware bound and
    faster than the ring at 256 MB; the plain NVL72 has none of them."""
    from taccl_py.baselines import applicable_baselines, baseline
    from taccl_py.bounds import lower_bound
    from taccl_py.library import resolve_topology

    topo, size = resolve_topology("gb200-nvl72-nvls"), 2**28
    assert algorithm in applicable_baselines(topo, kind)
    assert algorithm not in applicable_baselines(resolve_topology("gb200-nvl72"), kind)
    offload = simulate(topo, baseline(topo, kind, algorithm, size_bytes=size), size)
    ring = simulate(topo, baseline(topo, kind, "ring", size_bytes=size), size)
    assert offload.correct, offload.error
    assert offload.time_us is not None and ring.time_us is not None
    bound = lower_bound(topo, kind, size)
    assert offload.time_us >= bound.bound_us * (1 - 1e-9)
    # the NVLS Allreduce's reduce and multicast phases overlap only across pieces: the baseline's 3 pieces per block
    # at 256 MB reach 0.75 (the synthesizer's searched depth, 24, reaches 0.91)
    assert bound.efficiency(offload.time_us) > (0.7 if kind is AR else 0.85)
    if kind is AR:  # in-switch reduction halves what every GPU sends and receives
        assert ring.time_us > 1.6 * offload.time_us
    else:
        assert ring.time_us >= offload.time_us * (1 - 1e-9)


def test_synthesizer_searches_the_nvls_pipeline_depth() -> None:
    """DGX H100 with NVLS at 16 MB: the baseline's 2 pieces per block take 53.4 us, the searched depth (8) 47.1 us;
    the synthesizer's own one-group in-network Allreduce is faster still (one latency, M each way: the bound), and the
    result is never slower than the best baseline or the tuned schedule."""
    from taccl_py.library import resolve_topology
    from taccl_py.synthesis import SynthesisOptions, synthesize
    from taccl_py.synthesis.offload import tuned_offload
    from taccl_py.synthesis.options import Run

    topo, size = resolve_topology("dgx-h100-nvls"), 2**24
    choices, notes = tuned_offload(Run.start(SynthesisOptions(time_limit_s=60.0), None), topo, AR, size, 0)
    assert len(choices) == 1 and choices[0].candidate.chunk_factor == 8
    assert choices[0].time_us == pytest.approx(47.0780, rel=1e-4)
    assert choices[0].schedule.uses_switch_offload and choices[0].label.startswith("tuned nvls")
    assert "searched [1, 2, 4, 8, 16]" in notes[0] or "searched [2, 4, 8, 16]" in notes[0]
    result = synthesize(topo, AR, size, SynthesisOptions(time_limit_s=20.0, chunk_factors=(1,)))
    assert result.chosen == "synthesized one-group in-network allreduce"
    assert result.sim.time_us is not None and result.sim.time_us < choices[0].time_us
    assert result.sim.time_us == pytest.approx(lower_bound(topo, AR, size).bound_us, rel=1e-9)
    assert result.sim.time_us <= min(t for t in result.baselines.values() if t is not None)


def test_synthesizer_searches_the_nvls_tree_pipeline_depth() -> None:
    """2 x DGX H100 with NVLS at 4 MB: the offload comparison tunes NCCL's NVLSTree too; the baseline's 1 piece per
    block takes 32.2 us, the searched depth (4) 28.95 us. Where it cannot run it is skipped: one machine (the nvls
    schedule alone is tuned there), NVSwitches that do not reduce."""
    from taccl_py.baselines import baseline
    from taccl_py.library import resolve_topology
    from taccl_py.synthesis import SynthesisOptions
    from taccl_py.synthesis.offload import tuned_offload
    from taccl_py.synthesis.options import Run

    def tuned(name: str, size: int) -> tuple[list[Any], list[str]]:
        return tuned_offload(Run.start(SynthesisOptions(time_limit_s=60.0), None), resolve_topology(name), AR, size, 0)

    topo, size = resolve_topology("dgx-h100x2-nvls"), 4 * 2**20
    choices, notes = tuned("dgx-h100x2-nvls", size)
    assert [c.label for c in choices] == ["tuned nvls-tree pipelined (4 pieces per block)"]
    (choice,) = choices
    assert choice.candidate.chunk_factor == 4 and choice.schedule.name == "nvls-tree"
    assert choice.sim.correct and choice.schedule.uses_switch_offload
    assert choice.time_us == pytest.approx(28.9481, rel=1e-4)
    plain = simulate(topo, baseline(topo, AR, "nvls-tree", size_bytes=size), size)
    assert plain.time_us == pytest.approx(32.2, rel=1e-3) and plain.time_us > choice.time_us
    assert notes == ["nvls-tree: 4 pieces per block (28.95 us) beat the baseline's 1 (32.2 us); searched [1, 2, 4, 8]"]
    one, _ = tuned("dgx-h100-nvls", 2**24)
    assert [c.candidate.label.split(" ")[0] for c in one] == ["nvls"]
    assert tuned("dgx-h100x2", size) == ([], [])


def test_synthesize_ranks_the_tuned_nvls_tree() -> None:
    """The tuned NVLSTree enters synthesize's ranking on 2 x DGX H100 with NVLS (the result is never slower)."""
    from taccl_py.library import resolve_topology
    from taccl_py.synthesis import SynthesisOptions, synthesize

    size = 4 * 2**20
    result = synthesize(resolve_topology("dgx-h100x2-nvls"), AR, size,
                        SynthesisOptions(time_limit_s=10.0, chunk_factors=(1,)))
    labels = [c.label for c in result.ranked]
    assert "tuned nvls-tree pipelined (4 pieces per block)" in labels
    assert result.sim.time_us is not None and result.sim.time_us <= 28.9481 * (1 + 1e-4)


def test_synthesize_o_report_shows_the_xml_written_and_the_faster_offload(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """With -o, the headline figures describe the XML written (unicast), and best_overall the faster schedule through
    the switches (the synthesizer's one-group in-network Allreduce), which --schedule-out writes."""
    import json

    from cli_runner import only_json, run

    from taccl_py.library import resolve_topology
    from taccl_py.schedule import load_schedule

    xml, js = tmp_path / "ar.xml", tmp_path / "ar.json"
    code, out, err = run(["synthesize", "-t", "dgx-h100-nvls", "-c", "allreduce", "-s", "64MB", "--time-limit", "5",
                          "--chunk-factor", "1", "-o", str(xml), "--schedule-out", str(js), "--json"], capsys)
    assert code == 0, err
    row = only_json(out)
    best = row["best_overall"]
    assert best["uses_switch_offload"] and best["algorithm"] == "synthesized one-group in-network allreduce"
    assert best["time_us"] < row["time_us"] and best["efficiency"] == pytest.approx(1.0)
    assert "nvls" not in row["algorithm"] and xml.read_text().startswith("<algo")
    assert load_schedule(js, resolve_topology("dgx-h100-nvls")).uses_switch_offload
    assert json.loads(js.read_text())["name"] == "taccl-allreduce-one-group"
    code, out, err = run(["synthesize", "-t", "dgx-h100-nvls", "-c", "allreduce", "-s", "64MB", "--time-limit", "5",
                          "--chunk-factor", "1", "-o", str(xml)], capsys)
    assert code == 0, err
    assert "written (XML):" in out and "fastest (not XML):" in out and "not written as XML" in out
