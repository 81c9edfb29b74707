"""The GPU endpoint: memory bandwidth as a fluid resource, GPU-driven vs offload-engine memory traffic.

Hand-computed cases on two or four GPUs around one switch, property tests on
random spanning-tree schedules (memory that never binds changes no time; times
are monotone in memory bandwidth), and the SimGrid oracle with each GPU's memory
as one more link, crossed by a transfer as many times as its weight there.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import baseline
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.endpoint import EndpointMode, endpoint_flows, endpoint_layout, memory_demand, memory_traffic
from taccl_py.errors import TopologyError
from taccl_py.library import resolve_topology
from taccl_py.library.grids import switch_star
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import SimOptions, simulate
from taccl_py.testing import spanning_tree_allgathers, spanning_tree_reductions, topologies
from taccl_py.topology import Endpoint, Topology
from taccl_py.topology_io import dumps_topology, topology_from_dict

GPU, ENGINE = EndpointMode.GPU, EndpointMode.ENGINE


def one_transfer(op: Op) -> tuple[Topology, Schedule]:
    """GPU 0 -> GPU 1 through one switch (100 GB/s, 1 us per link), one chunk, copy or reduce."""
    topo = switch_star(2, 100, 1.0)
    kind = CollectiveKind.REDUCE if op is Op.REDUCE else CollectiveKind.BROADCAST
    root = 1 if op is Op.REDUCE else 0
    route = topo.route_from_vertices([0, "switch", 1])
    return topo, Schedule(Collective(kind, 2, 1, root), (Transfer(0, 1, (0,), route, op),))


# ------------------------------------------------------------------ hand-computed
def test_a_transfer_limited_by_memory_bandwidth() -> None:
    """1 MB: 2 us latency + 1e6 B / 100 GB/s = 12 us; with 50 GB/s of memory at each end, 2 + 20 = 22 us."""
    topo, schedule = one_transfer(Op.COPY)
    assert simulate(topo, schedule, 1e6).time_us == 12.0
    result = simulate(topo.with_endpoints(Endpoint(memory_bandwidth=50.0)), schedule, 1e6)
    assert result.time_us == 22.0
    assert result.memory_bytes == (1e6, 1e6)  # the sender read it, the receiver wrote it
    assert result.memory_busy_us == (20.0, 20.0)


def test_a_reduce_reads_twice_and_writes_once_at_the_receiver() -> None:
    """120 GB/s of memory: the receiver uses 3 bytes of it per byte received, so 40 GB/s: 2 + 25 us."""
    topo, schedule = one_transfer(Op.REDUCE)
    result = simulate(topo.with_endpoints(Endpoint(memory_bandwidth=120.0)), schedule, 1e6)
    assert result.correct, result.error
    assert result.time_us == 27.0
    assert result.memory_bytes == (1e6, 3e6)
    # only the receiver is limited: the sender's memory alone would allow 100 GB/s
    only_receiver = topo.with_endpoints(Endpoint(120.0))
    only_receiver = Topology(**{**only_receiver.__dict__, "endpoints": (Endpoint(), Endpoint(120.0))})
    assert simulate(only_receiver, schedule, 1e6).time_us == 27.0


def test_communication_channels_cap_a_gpu_driven_transfer_but_not_an_engine() -> None:
    """2 channels x 20 GB/s = 40 GB/s at each end: 2 + 25 us GPU-driven; the engine needs no SM: 12 us."""
    topo, schedule = one_transfer(Op.COPY)
    limited = topo.with_endpoints(Endpoint(comm_channels=2, channel_bandwidth=20.0))
    assert simulate(limited, schedule, 1e6).time_us == 27.0
    assert simulate(limited, schedule, 1e6, SimOptions(endpoint=ENGINE)).time_us == 12.0


def test_two_senders_share_one_memory() -> None:
    """GPU 0 sends 1 MB to 1 and to 2 at once: 2 x 100 GB/s of links but 100 GB/s of memory at GPU 0."""
    topo = switch_star(3, 100, 1.0)
    r = topo.route_from_vertices
    schedule = Schedule(Collective(CollectiveKind.BROADCAST, 3),
                        (Transfer(0, 1, (0,), r([0, "switch", 1])), Transfer(0, 2, (0,), r([0, "switch", 2]))))
    # the uplink is shared too (100 GB/s for both): memory at 100 GB/s changes nothing ...
    assert simulate(topo.with_endpoints(Endpoint(100.0)), schedule, 1e6).time_us == 22.0
    # ... 60 GB/s binds: 30 each, 2 + 1e6 / 3e4 us
    assert simulate(topo.with_endpoints(Endpoint(60.0)), schedule, 1e6).time_us == pytest.approx(2 + 1e6 / 3e4)


def test_ring_allreduce_memory_per_network_byte() -> None:
    """Ring Allreduce on N GPUs: GPU-driven 3 bytes (RS 1 + 3, AG 1 + 1); engine N / (N - 1) (each chunk once)."""
    topo = switch_star(4, 100, 1.0)
    schedule = baseline(topo, "allreduce", "ring", size_bytes=2**20)
    gpu, engine = memory_traffic(schedule, 2**20, GPU), memory_traffic(schedule, 2**20, ENGINE)
    assert gpu.per_network_byte == pytest.approx(3.0)
    assert engine.per_network_byte == pytest.approx(4 / 3)
    assert engine.read_bytes == pytest.approx((2**20,) * 4)  # every rank reads its input once ...
    assert engine.write_bytes == pytest.approx((2**20,) * 4)  # ... and writes its result once
    rs = baseline(topo, "reducescatter", "ring", size_bytes=2**20)
    assert memory_traffic(rs, 2**20, GPU).per_network_byte == pytest.approx(4.0)
    assert memory_traffic(rs, 2**20, ENGINE).per_network_byte == pytest.approx(5 / 3)  # only own block written


def test_engine_mode_is_faster_when_memory_binds() -> None:
    """One ring at 100 GB/s per link. In the ReduceScatter half a GPU-driven rank sends (reads 1) and reduces
    (3) at once: 400 GB/s of memory, twice its 200; the engine touches at most 200 (its first step: read its
    own chunk to send, its own contribution to reduce), and the Allgather half needs 200 in both modes."""
    topo = switch_star(4, 100, 0.5)
    schedule = baseline(topo, "allreduce", "ring", size_bytes=64 * 2**20)
    assert schedule.notes["channels"] == 1
    free = simulate(topo, schedule, 64 * 2**20).time_us
    limited = topo.with_endpoints(Endpoint(200.0))
    gpu = simulate(limited, schedule, 64 * 2**20).time_us
    engine = simulate(limited, schedule, 64 * 2**20, SimOptions(endpoint=ENGINE)).time_us
    assert free is not None and gpu is not None and engine is not None
    assert gpu == pytest.approx(1.5 * free, rel=0.02)  # the RS half (half the bytes) twice as long
    assert engine == pytest.approx(free, rel=1e-9)


def test_engine_weights_are_fractions_for_multi_chunk_transfers() -> None:
    """A transfer of two chunks where only one is the sender's own input reads half a byte per byte."""
    topo = switch_star(3, 100, 1.0)
    r = topo.route_from_vertices
    schedule = Schedule(Collective(CollectiveKind.ALLGATHER, 3),
                        (Transfer(0, 1, (0,), r([0, "switch", 1])),
                         Transfer(1, 2, (0, 1), r([1, "switch", 2])),
                         Transfer(2, 0, (1, 2), r([2, "switch", 0])),
                         Transfer(0, 1, (2,), r([0, "switch", 1]))))
    demand = memory_demand(schedule, ENGINE)
    assert demand.src_read == (1.0, 0.5, 0.5, 0.0)
    assert demand.dst_write == (1.0, 1.0, 1.0, 1.0)
    layout = endpoint_layout(topo.with_endpoints(Endpoint(50.0)), len(topo.links))
    resources, weights = endpoint_flows(topo, schedule, ENGINE, layout)
    assert resources[3] == (*schedule.transfers[3].route, layout.memory[1])  # a forward: no read at GPU 0
    assert weights[1] == (1.0, 1.0, 0.5, 1.0)
    result = simulate(topo.with_endpoints(Endpoint(50.0)), schedule, 3e6, SimOptions(endpoint=ENGINE))
    assert result.correct, result.error


# ------------------------------------------------------------------ properties
@st.composite
def tree_schedules(draw: st.DrawFn) -> tuple[Topology, Schedule]:
    topo = draw(topologies(max_gpus=5))
    if draw(st.booleans()):
        return topo, draw(spanning_tree_allgathers(topo))
    return topo, draw(spanning_tree_reductions(topo))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tree_schedules(), mode=st.sampled_from(list(EndpointMode)))
def test_memory_that_never_binds_changes_no_time(case: tuple[Topology, Schedule], mode: EndpointMode) -> None:
    topo, schedule = case
    size = 3 * 2**20
    plain = simulate(topo, schedule, size)
    assert plain.correct, plain.error
    undeclared = simulate(topo.with_endpoints(Endpoint()), schedule, size, SimOptions(endpoint=mode))
    assert list(undeclared.commit_us) == list(plain.commit_us)  # no field: the same run, exactly
    huge = simulate(topo.with_endpoints(Endpoint(1e6)), schedule, size, SimOptions(endpoint=mode))
    assert huge.commit_us == pytest.approx(plain.commit_us, rel=1e-9)


MEMORY_SWEEP = (5.0, 20.0, 50.0, 100.0, 300.0, 1000.0, 3000.0)


def memory_sweep(topo: Topology, schedule: Schedule, size: int, mode: EndpointMode) -> list[float]:
    times = [simulate(topo.with_endpoints(Endpoint(bw)), schedule, size, SimOptions(endpoint=mode)).time_us
             for bw in MEMORY_SWEEP]
    assert all(t is not None for t in times)
    return [t for t in times if t is not None]


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["switch5", "ring8", "dgx-a100x2"])
@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce"])
@pytest.mark.parametrize("mode", list(EndpointMode))
def test_ring_times_are_monotone_in_memory_bandwidth(topology: str, kind: str, mode: EndpointMode) -> None:
    """More memory bandwidth never slows a ring (which the max-min model does not promise in general, below)."""
    topo = switch_star(5, 100, 0.5) if topology == "switch5" else resolve_topology(topology)
    schedule = baseline(topo, kind, "ring", size_bytes=2**22)
    times = memory_sweep(topo, schedule, 2**22, mode)
    for slower, faster in itertools.pairwise(times):
        assert faster <= slower * (1 + 1e-9)
    assert times[0] > 5 * times[-1]


@pytest.mark.slow
def test_max_min_sharing_is_not_monotone_in_memory_bandwidth() -> None:
    """A counterexample: more memory lets one flow take more of a link another needs sooner (as SimGrid does too,
    see test_a_non_monotone_case_matches_simgrid). On DGX A100 the GPU-driven tree Allreduce gets slower from
    1,000 to 3,000 GB/s of memory; random spanning-tree schedules do so more often."""
    topo = resolve_topology("dgx-a100")
    schedule = baseline(topo, "allreduce", "tree", size_bytes=2**22)
    times = memory_sweep(topo, schedule, 2**22, GPU)
    assert times[-1] > times[-2] * 1.001
    assert all(faster < slower for slower, faster in itertools.pairwise(times[:-1]))


# ------------------------------------------------------------------ the file format
def test_topology_file_endpoints_round_trip_and_errors() -> None:
    base = {"gpus": 2, "links": [{"src": 0, "dst": 1, "bandwidth": 10, "bidirectional": True}]}
    topo = topology_from_dict({**base, "endpoints": [
        {"gpus": [0], "memory_bandwidth": 1555, "comm_channels": 8, "channel_bandwidth": 20},
        {"gpus": [1], "memory_bandwidth": 2039}]})
    assert topo.endpoints == (Endpoint(1555, 8, 20), Endpoint(2039))
    assert topology_from_dict(__import__("json").loads(dumps_topology(topo))) == topo
    uniform = topology_from_dict({**base, "endpoints": [{"memory_bandwidth": 1555}]})
    assert '"endpoints": [\n    {"gpus": "all", "memory_bandwidth": 1555}' in dumps_topology(uniform)
    assert topology_from_dict(base).endpoints == ()
    bad = [({"gpus": [0, 2], "memory_bandwidth": 1}, "endpoints[0].gpus must be \"all\" or a non-empty list"),
           ({"memory_bandwidth": -1}, "endpoints[0].memory_bandwidth must be a bandwidth"),
           ({"comm_channels": 4}, "endpoints[0] comm_channels and channel_bandwidth go together"),
           ({"comm_channels": 0, "channel_bandwidth": 3}, "endpoints[0].comm_channels must be an integer"),
           ({"memory": 5}, "endpoints[0] unknown field 'memory'")]
    for entry, message in bad:
        with pytest.raises(TopologyError, match=None) as info:
            topology_from_dict({**base, "endpoints": [entry]}, where="t.json")
        assert str(info.value).startswith(f"t.json: {message}"), str(info.value)
    with pytest.raises(TopologyError, match="declares GPU 0 again"):
        topology_from_dict({**base, "endpoints": [{"gpus": "all", "memory_bandwidth": 5},
                                                  {"gpus": [0], "memory_bandwidth": 6}]})


@pytest.mark.slow
def test_shipped_topology_with_a100_memory_runs_both_modes() -> None:
    topo = resolve_topology("dgx-a100x2").with_endpoints(Endpoint(memory_bandwidth=1555.0))
    schedule = baseline(topo, "allreduce", "ring", size_bytes=2**26)
    for mode in EndpointMode:
        result = simulate(topo, schedule, 2**26, SimOptions(endpoint=mode))
        assert result.correct and result.time_us is not None and math.isfinite(result.time_us)
        assert len(result.memory_bytes) == 16 and min(result.memory_bytes) > 0


# ------------------------------------------------------------------ SimGrid: memory as a link
@pytest.fixture(scope="module")
def oracle() -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The SimGrid oracle of ``test_simgrid_oracle`` (skips, or fails under TACCL_REQUIRE_SIMGRID=1)."""
    import os

    from test_simgrid_oracle import _simgrid_missing, run_oracle

    reason = _simgrid_missing()
    if reason:
        if os.environ.get("TACCL_REQUIRE_SIMGRID") == "1":
            pytest.fail(f"TACCL_REQUIRE_SIMGRID=1 but {reason}")
        pytest.skip(reason)
    return run_oracle


def endpoint_spec(topology: Topology, schedule: Schedule, size_bytes: int, mode: EndpointMode) -> dict[str, Any]:
    """The oracle's input with every memory and channel budget as one more link (latency 0).

    A transfer that uses a resource with weight w crosses its link w times (SimGrid
    adds a link's consumption weights when a route lists it again); only whole weights.
    """
    from test_simgrid_oracle import link_spec, schedule_spec

    spec = schedule_spec(topology, schedule, size_bytes)
    pieces = round(size_bytes / schedule.collective.chunk_bytes(size_bytes))
    layout = endpoint_layout(topology, len(topology.links))
    spec["links"] = link_spec(topology, pieces) + [{"capacity": c * pieces, "latency": 0.0} for c in layout.capacities]
    resources, weights = endpoint_flows(topology, schedule, mode, layout)
    for entry, used, weight in zip(spec["transfers"], resources, weights, strict=True):
        route: list[int] = []
        for k, r in enumerate(used):
            w = 1.0 if weight is None else weight[k]
            assert w == int(w), "SimGrid takes whole weights only"
            route += [r] * int(w)
        entry["route"] = route
    return spec


@pytest.mark.slow
@pytest.mark.simgrid
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=tree_schedules(), mode=st.sampled_from(list(EndpointMode)), memory=st.sampled_from([3.0, 20.0, 70.0]),
       channels=st.sampled_from([None, 2]))
def test_memory_limited_times_match_simgrid(oracle: Callable[[dict[str, Any]], dict[str, Any]],
                                            case: tuple[Topology, Schedule], mode: EndpointMode, memory: float,
                                            channels: int | None) -> None:
    from test_simgrid_oracle import REL_TOL

    topo, schedule = case
    endpoint = Endpoint(memory, channels, None if channels is None else 4.0)
    limited = topo.with_endpoints(endpoint)
    if mode is ENGINE and any(len(t.chunks) > 1 for t in schedule.transfers):
        schedule = Schedule(schedule.collective, tuple(t for t in schedule.transfers if len(t.chunks) == 1))
    size = 6 * 2**20
    result = simulate(limited, schedule, size, SimOptions(endpoint=mode))
    if not result.correct:  # dropping multi-chunk transfers may break the schedule: nothing to compare
        assert mode is ENGINE
        return
    assert result.time_us is not None
    answer = oracle(endpoint_spec(limited, schedule, size, mode))
    assert result.time_us == pytest.approx(answer["makespan_us"], rel=REL_TOL)
    slack = REL_TOL * answer["makespan_us"]
    late = [(i, a, b) for i, (a, b) in enumerate(zip(result.commit_us, answer["commit_us"], strict=True))
            if abs(a - b) > slack]
    assert not late, late[:5]


@pytest.mark.slow
@pytest.mark.simgrid
def test_a_non_monotone_case_matches_simgrid(oracle: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """SimGrid, with memory as links, times the counterexample above the same at both memory bandwidths."""
    from test_simgrid_oracle import REL_TOL

    topo = resolve_topology("dgx-a100")
    schedule = baseline(topo, "allreduce", "tree", size_bytes=2**22)
    for bw in (1000.0, 3000.0):
        limited = topo.with_endpoints(Endpoint(bw))
        ours = simulate(limited, schedule, 2**22).time_us
        theirs = oracle(endpoint_spec(limited, schedule, 2**22, GPU))["makespan_us"]
        assert ours == pytest.approx(theirs, rel=REL_TOL), bw


@pytest.mark.slow
@pytest.mark.simgrid
def test_ring_allreduce_with_a100_memory_matches_simgrid(oracle: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Memory that binds (the four-GPU ring above, GPU-driven): SimGrid with memory as a link agrees."""
    from test_simgrid_oracle import REL_TOL

    topo = switch_star(4, 100, 0.5).with_endpoints(Endpoint(200.0, 4, 30.0))
    schedule = baseline(topo, "allreduce", "ring", size_bytes=2**24)
    for mode in EndpointMode:
        ours = simulate(topo, schedule, 2**24, SimOptions(endpoint=mode)).time_us
        theirs = oracle(endpoint_spec(topo, schedule, 2**24, mode))["makespan_us"]
        assert ours == pytest.approx(theirs, rel=REL_TOL), mode


# ------------------------------------------------------------------ the endpoint-aware bound
def test_the_bound_includes_memory_and_no_schedule_beats_it() -> None:
    """Ring Allreduce on 4 GPUs at 100 GB/s links; with 20 GB/s of memory each GPU must read and write 2S."""
    from taccl_py.bounds import lower_bound

    topo = switch_star(4, 100, 0.5)
    size = 2**24
    plain = lower_bound(topo, "allreduce", size)
    limited = topo.with_endpoints(Endpoint(20.0))
    bound = lower_bound(limited, "allreduce", size)
    assert bound.bound_us == pytest.approx(2 * size / 2e4)
    assert bound.bound_us > plain.bound_us and bound.explanation.startswith("memory: GPU 0")
    schedule = baseline(topo, "allreduce", "ring", size_bytes=size)
    engine = simulate(limited, schedule, size, SimOptions(endpoint=ENGINE)).time_us
    gpu = simulate(limited, schedule, size).time_us
    assert engine is not None and gpu is not None
    assert bound.bound_us <= engine < gpu
    efficiency = bound.efficiency(engine)
    assert efficiency is not None and efficiency > 0.9  # the engine is near the bound
    assert lower_bound(topo.with_endpoints(Endpoint(1e6)), "allreduce", size) == plain  # memory that never binds


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tree_schedules(), mode=st.sampled_from(list(EndpointMode)), memory=st.sampled_from([2.0, 10.0, 50.0]))
def test_no_schedule_beats_the_memory_bound(case: tuple[Topology, Schedule], mode: EndpointMode,
                                            memory: float) -> None:
    from taccl_py.bounds import lower_bound

    topo, schedule = case
    limited = topo.with_endpoints(Endpoint(memory))
    size = 3 * 2**20
    result = simulate(limited, schedule, size, SimOptions(endpoint=mode))
    assert result.correct and result.time_us is not None
    c = schedule.collective
    assert result.time_us >= lower_bound(limited, c.kind, size, root=c.root).bound_us * (1 - 1e-9)
    # the mode's own bound (GPU-driven: the memory every transfer touches in all, at the GPUs' summed bandwidth)
    assert result.time_us >= lower_bound(limited, c.kind, size, root=c.root, endpoint=mode).bound_us * (1 - 1e-9)
