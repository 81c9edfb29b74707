"""Store-and-forward switches: hand-computed times, SimGrid, the bounds, files and the command line.

With store-and-forward switches a transfer crosses its route hop by hop: each hop waits its link's latency,
then moves the whole message over that link alone (max-min shared with the other flows there); the next hop
starts when it is through. Cut-through (the default) streams over the whole route at once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from cli_runner import only_json, run
from helpers import round_trip, star
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_simgrid_oracle import Oracle, assert_agrees, link_spec, oracle, schedule_spec, transfer_spec

from taccl_py.baselines import applicable_baselines, baseline
from taccl_py.bounds import lower_bound
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.endpoint import EndpointMode, endpoint_layout, endpoint_sides
from taccl_py.errors import TopologyError
from taccl_py.library import resolve_topology
from taccl_py.library.astra import load_astra_yaml, save_astra_yaml
from taccl_py.library.grids import switch_star, switch_tree
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import SimOptions, simulate
from taccl_py.testing import spanning_tree_allgathers, spanning_tree_reductions, topologies, with_waits
from taccl_py.topology import Endpoint, Link, Switch, SwitchModel, Topology, check_topology
from taccl_py.topology_io import dumps_topology, load_topology, save_topology, topology_from_dict

__all__ = ["oracle"]  # the fixture, imported for its name

CT, SF = SwitchModel.CUT_THROUGH, SwitchModel.STORE_AND_FORWARD


def _saf(topology: Topology) -> Topology:
    return topology.with_switch_model(SF)


def _two_hops() -> Topology:
    """GPU 0 -> switch (1 us, 10 GB/s) -> GPU 1 (0.25 us, 4 GB/s), and back the same way."""
    links = (Link(0, "sw", 10.0, 1.0), Link("sw", 1, 4.0, 0.25), Link(1, "sw", 10.0, 1.0), Link("sw", 0, 4.0, 0.25))
    return check_topology(Topology("two-hops", 2, links, switches=(Switch("sw"),)))


def _copy(topology: Topology, src: int, dst: int, chunk: int, **fields: Any) -> Transfer:
    route = topology.gpu_route(src, dst)
    assert route is not None
    return Transfer(src, dst, (chunk,), route, **fields)


# ------------------------------------------------------------------ hand-computed
def test_an_unloaded_transfer_pays_every_hop_in_turn() -> None:
    """100 kB over 10 GB/s then 4 GB/s: (1 + 10) + (0.25 + 25) us, against 1.25 + 25 us cut-through."""
    topo = _two_hops()
    schedule = Schedule(Collective(CollectiveKind.BROADCAST, 2), (_copy(topo, 0, 1, 0),))
    assert simulate(topo, schedule, 100_000).time_us == pytest.approx(26.25, rel=1e-12)
    saf = simulate(_saf(topo), schedule, 100_000)
    assert saf.correct and saf.time_us == pytest.approx(36.25, rel=1e-12)
    # the step overhead is a software cost: once per transfer, not per hop
    slow = simulate(_saf(topo), schedule, 100_000, SimOptions(step_overhead_us=2.0))
    assert slow.time_us == pytest.approx(38.25, rel=1e-12)
    assert saf.link_bytes == simulate(topo, schedule, 100_000).link_bytes  # every link still carries 100 kB once


def test_two_transfers_share_the_downlink_only_while_both_are_on_it() -> None:
    """Hand-computed on a star (10 GB/s and 1 us per link): 0 -> 2 with 100 kB, 1 -> 2 with 150 kB at time 0.

    Store-and-forward: 0 -> 2 reaches the switch at 11 us and has the downlink alone from 12 us; 1 -> 2
    reaches the switch at 16 us and joins at 17 us, when 0 -> 2 has 50 kB left: both at 5 kB/us, so
    0 -> 2 arrives at 27 us and 1 -> 2 has 100 kB left, alone: 37 us. Cut-through: both from 2 us,
    sharing: 0 -> 2 at 22 us, 1 -> 2 with 50 kB left alone: 27 us.
    """
    topo = star(3)
    # an Allgather fragment (3 ranks, 3 chunks of 50 kB each): 0 -> 2 sends two of rank 0's, 1 -> 2 rank 1's three
    route = topo.gpu_route
    transfers = (Transfer(0, 2, (0, 1), route(0, 2) or ()), Transfer(1, 2, (3, 4, 5), route(1, 2) or ()))
    schedule = Schedule(Collective(CollectiveKind.ALLGATHER, 3, 3), transfers)
    size = 9 * 50_000
    saf = simulate(_saf(topo), schedule, size)
    assert list(saf.arrive_us) == pytest.approx([27.0, 37.0], rel=1e-12)
    assert list(simulate(topo, schedule, size).arrive_us) == pytest.approx([22.0, 27.0], rel=1e-12)
    assert not saf.correct  # a fragment: rank 2 never gets the rest (the times above are the simulator's anyway)


def test_store_and_forward_can_finish_sooner_than_cut_through() -> None:
    """The brief's intuition "never faster" does not hold under max-min sharing (also checked in SimGrid below).

    0 -> 1 crosses a 1 GB/s uplink and a 2 GB/s downlink; 2 -> 1 a fast uplink and the same downlink;
    rank 1 then forwards 2's chunk over a 1 GB/s link. Cut-through, 0 -> 1 is held to 1 GB/s by its
    uplink on the shared downlink, so 2 -> 1 gets 1 GB/s too (both 1000 us for 1 MB) and the forward ends
    at 2000 us. Store-and-forward, 0 -> 1 is still on its uplink while 2 -> 1 has the downlink alone
    (2 GB/s, 501 us), so the forward ends at 1501 us.
    """
    topo, schedule = _counterexample()
    cut = simulate(topo, schedule, 4_000_000)
    saf = simulate(_saf(topo), schedule, 4_000_000)
    assert cut.correct and saf.correct
    assert cut.time_us == pytest.approx(2000.0) and saf.time_us == pytest.approx(1501.0)


def _counterexample() -> tuple[Topology, Schedule]:
    fast = 1000.0
    links = [Link(0, "sw", 1.0, 0.0), Link(2, "sw", fast, 0.0), Link("sw", 1, 2.0, 0.0), Link(1, 3, 1.0, 0.0)]
    links += [Link(a, b, fast, 0.0) for a in range(4) for b in range(4) if a != b and (a, b) != (1, 3)]
    topo = check_topology(Topology("counterexample", 4, tuple(links), switches=(Switch("sw"),)))
    index = topo.link_index
    via_switch = [Transfer(s, 1, (s,), (index[(s, "sw")], index[("sw", 1)])) for s in (0, 2)]
    direct = [(1, 3, 2), (0, 2, 0), (0, 3, 0), (1, 0, 1), (1, 2, 1), (2, 0, 2), (3, 0, 3), (3, 1, 3), (3, 2, 3),
              (2, 3, 1)]
    schedule = Schedule(Collective(CollectiveKind.ALLGATHER, 4),
                        (*via_switch, *(Transfer(s, d, (c,), (index[(s, d)],)) for s, d, c in direct)),
                        name="counterexample")
    return topo, schedule


def test_a_multicast_is_forwarded_link_by_link_down_the_tree() -> None:
    """GPU 0 multicasts 1000 bytes on a two-level tree (GPU links 10 GB/s 1 us, uplinks 5 GB/s 2 us).

    Each tree link carries the bytes once after the link before it: GPU 1 has them at 1.1 + 1.1 = 2.2 us,
    GPUs 2 and 3 after 0 -> leaf0 (1.1), leaf0 -> spine (2.2), spine -> leaf1 (2.2), leaf1 -> GPU (1.1):
    6.6 us (cut-through: 2.2 and 6.2 us).
    """
    topo = switch_tree(2, 2, 10.0, 1.0, uplink_bandwidth=5.0, uplink_latency=2.0, multicast=True)
    group = tuple(_copy(topo, 0, d, 0, group=0) for d in (1, 2, 3))
    schedule = Schedule(Collective(CollectiveKind.BROADCAST, 4), group)
    saf = simulate(_saf(topo), schedule, 1000)
    assert saf.correct and list(saf.arrive_us) == pytest.approx([2.2, 6.6, 6.6])
    assert list(simulate(topo, schedule, 1000).arrive_us) == pytest.approx([2.2, 6.2, 6.2])
    assert saf.link_bytes == simulate(topo, schedule, 1000).link_bytes  # each tree link once


def test_memory_goes_with_the_hop_that_touches_the_gpu() -> None:
    """A GPU memory of 5 GB/s slows the hop leaving the sender (read b) and the hop into the receiver (write b).

    0 -> 1 over the two-hop route (10 GB/s then 4 GB/s), 100 kB: (1 + 20) + (0.25 + 25) us.
    """
    topo = _two_hops().with_endpoints(Endpoint(memory_bandwidth=5.0))
    schedule = Schedule(Collective(CollectiveKind.BROADCAST, 2), (_copy(topo, 0, 1, 0),))
    assert simulate(_saf(topo), schedule, 100_000).time_us == pytest.approx(46.25, rel=1e-12)
    assert simulate(topo, schedule, 100_000).time_us == pytest.approx(26.25, rel=1e-12)  # 4 < 5 GB/s


def test_the_xml_of_a_schedule_takes_its_time_with_store_and_forward_switches() -> None:
    """Lowered to MSCCL XML, loaded and timed hop by hop: the schedule's time (the round-trip contract)."""
    topo = _saf(resolve_topology("dgx-a100"))
    for kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE):
        round_trip(baseline(topo, kind, "ring"), topo)


# ------------------------------------------------------------------ the bounds and the comparison
@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), size=st.integers(1_000, 50_000_000), overhead=st.sampled_from([0.0, 0.5]))
def test_store_and_forward_respects_the_bound_and_every_hop(data: st.DataObject, size: int, overhead: float) -> None:
    """Random schedules: the lower bound holds, and every transfer takes at least the sum of its hops alone."""
    topo = data.draw(topologies(max_gpus=6, min_switches=1, max_switches=3), label="topology")
    if data.draw(st.booleans(), label="allgather"):
        schedule = data.draw(spanning_tree_allgathers(topo), label="schedule")
    else:
        kind = data.draw(st.sampled_from([CollectiveKind.REDUCESCATTER, CollectiveKind.REDUCE]), label="kind")
        schedule = data.draw(spanning_tree_reductions(topo, kind), label="schedule")
    saf = simulate(_saf(topo), schedule, size, SimOptions(step_overhead_us=overhead))
    assert saf.correct and saf.time_us is not None, saf.error
    kind = schedule.collective.kind
    bound = lower_bound(topo, kind, size, root=schedule.collective.root, step_overhead_us=overhead)
    assert saf.time_us >= bound.bound_us * (1 - 1e-9)
    chunk = schedule.collective.chunk_bytes(size)
    for i, t in enumerate(schedule.transfers):
        alone = overhead + sum(topo.links[k].latency + len(t.chunks) * chunk / (topo.links[k].bandwidth * 1e3)
                               for k in t.route)
        assert saf.arrive_us[i] - saf.start_us[i] >= alone * (1 - 1e-9)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), size=st.integers(1_000, 50_000_000), overhead=st.sampled_from([0.0, 0.5]))
def test_store_and_forward_is_never_faster_without_concurrency(data: st.DataObject, size: int,
                                                               overhead: float) -> None:
    """One transfer at a time (each waits for the one before): no sharing, so no transfer and no time is
    shorter than with cut-through (with sharing it can be: the counterexample above)."""
    topo = data.draw(topologies(max_gpus=6, min_switches=1, max_switches=3), label="topology")
    schedule = data.draw(spanning_tree_allgathers(topo), label="schedule")
    serial = Schedule(schedule.collective, tuple(t if i == 0 else Transfer(
        t.src, t.dst, t.chunks, t.route, t.op, t.channel, after=(i - 1,)) for i, t in enumerate(schedule.transfers)))
    options = SimOptions(step_overhead_us=overhead)
    cut, saf = simulate(topo, serial, size, options), simulate(_saf(topo), serial, size, options)
    assert cut.correct and saf.correct and cut.time_us is not None and saf.time_us is not None
    assert saf.time_us >= cut.time_us * (1 - 1e-12)
    assert all(s >= c * (1 - 1e-12) for s, c in zip(saf.commit_us, cut.commit_us, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dgx1", "dgx-a100", "ndv2x2", "dgx-a100x2"])
def test_every_shipped_baseline_is_slower_and_above_the_bound(name: str) -> None:
    """Every baseline of every collective at 1 KB, 1 MB and 1 GB: store-and-forward >= cut-through >= bound."""
    topo = resolve_topology(name)
    for kind in CollectiveKind:
        for algorithm in applicable_baselines(topo, kind):
            for size in (1 << 10, 1 << 20, 1 << 30):
                schedule = baseline(topo, kind, algorithm, size_bytes=size)
                cut, saf = simulate(topo, schedule, size), simulate(_saf(topo), schedule, size)
                assert saf.correct and saf.time_us is not None and cut.time_us is not None
                assert saf.time_us >= cut.time_us * (1 - 1e-12), (kind, algorithm, size)
                assert saf.time_us >= lower_bound(topo, kind, size).bound_us * (1 - 1e-9)


# ------------------------------------------------------------------ SimGrid
def test_simgrid_agrees_on_the_hand_computed_cases(oracle: Oracle) -> None:
    topo = _saf(star(3))
    spec = {"links": link_spec(topo, 1), "switch_model": SF.value,
            "transfers": [transfer_spec(_copy(topo, 0, 2, 0), 100_000), transfer_spec(_copy(topo, 1, 2, 1), 150_000)]}
    answer = oracle(spec)
    assert answer["arrive_us"] == pytest.approx([27.0, 37.0], rel=1e-9)
    spec["switch_model"] = CT.value  # the oracle's cut-through on the same input: 22 and 27 us
    assert oracle(spec)["arrive_us"] == pytest.approx([22.0, 27.0], rel=1e-9)
    topo, schedule = _counterexample()
    assert_agrees(oracle, _saf(topo), schedule, 4_000_000)
    assert_agrees(oracle, topo, schedule, 4_000_000)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dgx1", "dgx-a100"])
def test_baselines_match_simgrid(oracle: Oracle, name: str) -> None:
    """Every baseline of Allgather and Allreduce on one machine, hop by hop, with a step overhead."""
    topo = _saf(resolve_topology(name))
    for kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE):
        for algorithm in applicable_baselines(topo, kind):
            schedule = baseline(topo, kind, algorithm, size_bytes=3 * 2**20, step_overhead_us=0.5)
            assert_agrees(oracle, topo, schedule, 3 * 2**20, 0.5)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CollectiveKind))
def test_cluster_baselines_match_simgrid(oracle: Oracle, kind: CollectiveKind) -> None:
    """Two DGX A100 (NVSwitch, NICs, an IB switch: four hops between machines)."""
    topo = _saf(resolve_topology("dgx-a100x2"))
    for algorithm in applicable_baselines(topo, kind, root=5):
        schedule = baseline(topo, kind, algorithm, root=5, size_bytes=4 * 2**20, step_overhead_us=1.0)
        assert_agrees(oracle, topo, schedule, 4 * 2**20, 1.0)


RANDOM = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])


@pytest.mark.slow
@RANDOM
@given(data=st.data(), size=st.integers(1_000, 20_000_000), overhead=st.sampled_from([0.0, 0.7]))
def test_random_schedules_match_simgrid(oracle: Oracle, data: st.DataObject, size: int, overhead: float) -> None:
    """Random spanning-tree Allgathers and in-tree reductions on random switched topologies, with waits."""
    topo = _saf(data.draw(topologies(max_gpus=6, min_switches=1, max_switches=3), label="topology"))
    if data.draw(st.booleans(), label="allgather"):
        schedule = data.draw(spanning_tree_allgathers(topo), label="schedule")
    else:
        kind = data.draw(st.sampled_from([CollectiveKind.REDUCESCATTER, CollectiveKind.REDUCE]), label="kind")
        schedule = data.draw(spanning_tree_reductions(topo, kind), label="schedule")
    if data.draw(st.booleans(), label="extra waits"):
        schedule = data.draw(with_waits(schedule), label="waits")
    assert_agrees(oracle, topo, schedule, size, overhead)


@pytest.mark.slow
def test_network_groups_match_simgrid(oracle: Oracle) -> None:
    """Multicast, in-network reduction (NVLS, SHARP) and a mix with unicast, as legs over the tree links."""
    from test_simgrid_oracle import _group_cases

    for _, topo, schedule, size in _group_cases():
        assert_agrees(oracle, _saf(topo), schedule, size)
        assert_agrees(oracle, _saf(topo), schedule, size, step_overhead_us=0.5)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data(), mode=st.sampled_from(list(EndpointMode)), memory=st.sampled_from([3.0, 20.0]),
       channels=st.sampled_from([None, 2]))
def test_memory_limited_hops_match_simgrid(oracle: Oracle, data: st.DataObject, mode: EndpointMode, memory: float,
                                           channels: int | None) -> None:
    """GPU memory and channels on the first and last hops: SimGrid lists them on those hops' routes."""
    topo = data.draw(topologies(max_gpus=5, min_switches=1, max_switches=2), label="topology")
    limited = _saf(topo.with_endpoints(Endpoint(memory, channels, None if channels is None else 4.0)))
    schedule = data.draw(spanning_tree_allgathers(limited), label="schedule")
    size = 3_000_000
    result = simulate(limited, schedule, size, SimOptions(endpoint=mode))
    assert result.correct and result.time_us is not None
    spec = schedule_spec(limited, schedule, size)
    pieces = round(size / schedule.collective.chunk_bytes(size))
    layout = endpoint_layout(limited, len(limited.links))
    spec["links"] += [{"capacity": c * pieces, "latency": 0.0} for c in layout.capacities]
    for entry, (src_side, dst_side) in zip(spec["transfers"], endpoint_sides(schedule, mode, layout), strict=True):
        for key, side in (("src_extra", src_side), ("dst_extra", dst_side)):
            assert all(w == int(w) for _, w in side), "SimGrid takes whole weights only"
            entry[key] = [r for r, w in side for _ in range(int(w))]
    assert oracle(spec)["makespan_us"] == pytest.approx(result.time_us, rel=5e-3)


# ------------------------------------------------------------------ files
def test_the_topology_file_keeps_the_switch_model(tmp_path: Path) -> None:
    topo = switch_star(3, 100, 1.0)
    assert '"switch_model"' not in dumps_topology(topo)  # the default is left out: files stay as they were
    path = tmp_path / "saf.json"
    save_topology(_saf(topo), path)
    assert '"switch_model": "store-and-forward"' in path.read_text()
    loaded = load_topology(path)
    assert loaded == _saf(topo) and loaded.store_and_forward
    assert dumps_topology(loaded) == path.read_text()


def test_a_bad_switch_model_is_one_clear_error() -> None:
    data = {"gpus": 2, "links": [{"src": 0, "dst": 1, "bandwidth": 1, "bidirectional": True}],
            "switch_model": "wormhole"}
    with pytest.raises(TopologyError, match=r"t.json: switch_model is 'wormhole', not a switch model "
                                            r"\(cut-through, store-and-forward\)"):
        topology_from_dict(data, where="t.json")
    data["switch_model"] = 3
    with pytest.raises(TopologyError, match="switch_model must be a string"):
        topology_from_dict(data, where="t.json")


def test_the_astra_network_yaml_keeps_the_switch_model(tmp_path: Path) -> None:
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Ring, Switch ]\nnpus_count: [ 4, 2 ]\nbandwidth: [ 200.0, 50.0 ]\n"
                   "latency: [ 500.0, 2000.0 ]\nswitch_model: store-and-forward\n")
    topo = load_astra_yaml(net)
    assert topo.store_and_forward
    copy = tmp_path / "copy.yml"
    save_astra_yaml(topo, copy)
    assert "switch_model: store-and-forward" in copy.read_text()
    again = load_astra_yaml(copy)
    assert again.store_and_forward and again.links == topo.links and again.dimensions == topo.dimensions
    save_astra_yaml(topo.with_switch_model(CT), copy)
    assert "switch_model" not in copy.read_text()  # cut-through files are ASTRA-sim's four lists, as before
    net.write_text(net.read_text().replace("store-and-forward", "fifo"))
    with pytest.raises(TopologyError, match="switch_model is 'fifo'"):
        load_astra_yaml(net)


# ------------------------------------------------------------------ the command line
def test_the_command_line_option_and_the_file_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """dgx-a100 carries a calibrated runtime model: store-and-forward asks for the raw-link model (--ideal)."""
    args = ["-c", "allgather", "-s", "8MB", "-a", "ring", "--json"]

    def simulate_json(*extra: str) -> dict[str, Any]:
        code, out, err = run(["--ideal", "simulate", *extra, *args], capsys)
        assert code == 0, err
        return only_json(out)

    cut = simulate_json("-t", "dgx-a100")
    saf = simulate_json("-t", "dgx-a100", "--switch-model", "store-and-forward")
    assert "switch_model" not in cut and saf["switch_model"] == "store-and-forward"
    assert saf["time_us"] > cut["time_us"] and saf["bound_us"] == cut["bound_us"]
    path = tmp_path / "a100-saf.json"
    save_topology(_saf(resolve_topology("dgx-a100")), path)
    assert simulate_json("-t", str(path))["time_us"] == saf["time_us"]
    overridden = simulate_json("-t", str(path), "--switch-model", "cut-through")
    assert overridden["time_us"] == cut["time_us"] and "switch_model" not in overridden
    code, out, _ = run(["--ideal", "baseline", "-t", str(path), "-c", "allreduce", "-s", "1MB", "--json"], capsys)
    assert code == 0 and only_json(out)["switch_model"] == "store-and-forward"
    for command in (["simulate", "-t", "dgx-a100", *args], ["baseline", "-t", str(path), "-c", "allreduce", "-s",
                                                            "1MB"]):
        code, _, err = run([*command, "--switch-model", "store-and-forward"], capsys)
        assert code == 2 and "store-and-forward switches are simulated on the raw-link model only" in err
        assert "add taccl --ideal" in err
    code, _, err = run(["simulate", "-t", "dgx-a100", *args, "--switch-model", "wormhole"], capsys)
    assert code == 2 and "wormhole" in err


def test_workload_simulation_refuses_store_and_forward_switches(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "saf.json"
    save_topology(_saf(switch_star(4, 100, 1.0)), path)
    workload = tmp_path / "step.json"
    workload.write_text(json.dumps({"name": "w", "nodes": [{"id": "ag", "type": "collective", "kind": "allgather",
                                                            "size": "1MB"}]}))
    code, _, err = run(["workload", "simulate", str(workload), "-t", str(path)], capsys)
    assert code == 2 and "store-and-forward switches, which workload simulation does not model" in err
    assert "Traceback" not in err


def test_times_are_finite_and_reproducible() -> None:
    topo = _saf(resolve_topology("ndv2x2"))
    schedule = baseline(topo, CollectiveKind.ALLREDUCE, "ring", size_bytes=1 << 26)
    first, second = simulate(topo, schedule, 1 << 26), simulate(topo, schedule, 1 << 26)
    assert first.time_us is not None and math.isfinite(first.time_us)
    assert list(first.commit_us) == list(second.commit_us)
    # a reduction's data is tracked hop by hop as before: every transfer commits once, the result is right
    assert first.correct and all(op in (Op.COPY, Op.REDUCE) for op in (t.op for t in schedule.transfers))


def test_the_representative_simulation_refuses_store_and_forward_switches() -> None:
    """Large symmetric rings fall back to the full simulation (the command line catches the refusal)."""
    from taccl_py.baselines import ring_plan
    from taccl_py.baselines.ring import symmetric_ring
    from taccl_py.symmetry import symmetry_error

    topo = resolve_topology("ring8")
    sym = symmetric_ring(topo, ring_plan(topo, None), CollectiveKind.ALLGATHER)
    assert sym is not None and symmetry_error(sym, topo) is None
    assert "store-and-forward" in (symmetry_error(sym, _saf(topo)) or "")


def test_the_compiled_simulator_leaves_store_and_forward_to_python() -> None:
    """The compiled kernel streams every transfer over its whole route: it refuses, and the result is Python's."""
    from taccl_py.compact import compact
    from taccl_py.fast_sim import fast_error, simulate_compact

    topo = _saf(switch_star(4, 100, 1.0))
    schedule = baseline(topo, CollectiveKind.ALLGATHER, "ring", size_bytes=1 << 20)
    arrays = compact(schedule)
    assert "store-and-forward" in (fast_error(arrays, topo) or "")
    assert fast_error(arrays, topo.with_switch_model(CT)) is None
    fast, python = simulate_compact(topo, arrays, 1 << 20), simulate(topo, schedule, 1 << 20)
    assert fast.time_us == python.time_us and python.time_us != simulate(topo.with_switch_model(CT), schedule,
                                                                         1 << 20).time_us
