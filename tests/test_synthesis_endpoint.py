"""Synthesis that knows the endpoint (issue 12, part 4).

Hand-computed: the GPU-driven bound (every transfer touches memory at both ends,
a reduce twice more; the channels carry every byte at both ends), the routing
LP's optimum once GPU memory is a capacity row (an Alltoall relay costs its GPU a
copy, a Broadcast relay a write and a read), the ordering's memory queue, the
engine's memory weights, and synthesis choosing differently where memory binds.
Properties: a memory bandwidth that cannot bind leaves the synthesized schedule
exactly as without it; a synthesized time is never below the endpoint-aware bound
and never above the best baseline simulated under the same model.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver_models.logical import build_logical_graph
from solver_models.ordering import EndpointUse, Task, arrival_order, list_order
from solver_models.routing import path_columns, tree_columns
from solver_models.symmetry import trivial_symmetry
from taccl_py.bounds import lower_bound
from taccl_py.collectives import CollectiveKind
from taccl_py.endpoint import EndpointMode
from taccl_py.library.grids import fully_connected, ring, switch_star
from taccl_py.simulator import SimOptions, simulate
from taccl_py.sketch import derive_sketch
from taccl_py.synthesis import SynthesisOptions, SynthesisResult, synthesize
from taccl_py.synthesis.candidates import compare_baselines
from taccl_py.synthesis.endpoint import channel_limit, endpoint_use, gpu_resources
from taccl_py.topology import Endpoint, Topology
from taccl_py.topology_io import dumps_topology
from tests.cli_runner import only_json, run

GPU, ENGINE = EndpointMode.GPU, EndpointMode.ENGINE
MB = 2**20


def slow_pair() -> Topology:
    """Three GPUs linked every way at 100 GB/s (0.5 us), except 0 <-> 2 at 10 GB/s."""
    topo = fully_connected(3, 100.0, 0.5)
    links = tuple(replace(link, bandwidth=10.0) if {link.src, link.dst} == {0, 2} else link for link in topo.links)
    return replace(topo, links=links, name="fc3-slow-pair")


def quick(**kw: object) -> SynthesisOptions:
    return SynthesisOptions(time_limit_s=20, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the bound
def test_the_gpu_driven_bound_counts_every_transfer_at_both_ends() -> None:
    """4 GPUs around a switch, 50 GB/s of memory each (200 together), S = 16 MiB.

    GPU-driven: Allreduce 2(N-1)S moved and (N-1)S reduced: 2 x 6S + 2 x 3S = 18S over 200 GB/s; Allgather
    2 x 3S; ReduceScatter 2 x 3S + 2 x 3S. Engine (and any mode): each GPU's own minimum, Allreduce 2S at 50.
    """
    s = 16 * MB
    topo = switch_star(4, 100.0, 0.5).with_endpoints(Endpoint(50.0))
    per_us = 50e3  # 50 GB/s in bytes per us
    for kind, touched in ((CollectiveKind.ALLREDUCE, 18 * s), (CollectiveKind.ALLGATHER, 6 * s),
                          (CollectiveKind.REDUCESCATTER, 12 * s)):
        bound = lower_bound(topo, kind, s, endpoint=GPU)
        assert bound.bound_us == pytest.approx(touched / (4 * per_us)), kind
        assert bound.explanation.startswith("memory (GPU-driven)")
    assert lower_bound(topo, "allreduce", s, endpoint=ENGINE).bound_us == pytest.approx(2 * s / per_us)
    assert lower_bound(topo, "allreduce", s).bound_us == pytest.approx(2 * s / per_us)  # no mode: any mode's
    # the channels carry every byte at both ends: Allgather 2 x 3S over 4 x 2 x 20 GB/s; an engine needs none
    channels = switch_star(4, 100.0, 0.5).with_endpoints(Endpoint(None, 2, 20.0))
    assert lower_bound(channels, "allgather", s, endpoint=GPU).bound_us == pytest.approx(6 * s / (4 * 40e3))
    assert lower_bound(channels, "allgather", s, endpoint=ENGINE) == lower_bound(switch_star(4, 100.0, 0.5),
                                                                                  "allgather", s)
    # a switch that reduces in the network needs fewer transfers: the GPU-driven terms are left out
    reducing = replace(topo, switches=tuple(replace(sw, reduce=True) for sw in topo.switches))
    assert lower_bound(reducing, "allreduce", s, endpoint=GPU).bound_us == pytest.approx(2 * s / per_us)
    assert lower_bound(reducing, "allreduce", s, endpoint=GPU, offload=False).bound_us == \
        pytest.approx(18 * s / (4 * per_us))


def test_the_ring_meets_the_gpu_driven_bound() -> None:
    """A ring touches exactly the minimum, so where memory binds it runs within 1% of the bound."""
    from taccl_py.baselines import baseline

    s = 16 * MB
    topo = switch_star(4, 100.0, 0.5).with_endpoints(Endpoint(50.0))
    for kind in ("allreduce", "allgather", "reducescatter"):
        time_us = simulate(topo, baseline(topo, kind, "ring", size_bytes=s), s).time_us
        bound = lower_bound(topo, kind, s, endpoint=GPU).bound_us
        assert time_us is not None and bound <= time_us < 1.01 * bound, kind


# ------------------------------------------------------------------ routing
def _lp(topo: Topology, kind: CollectiveKind, memory: float | None) -> float:
    """The routing LP optimum (us per byte of a GPU's data, x 1e3) with the GPUs' memory (None: links only)."""
    limited = topo.with_endpoints(Endpoint(memory)) if memory else topo
    graph = build_logical_graph(limited, derive_sketch())
    symmetry = trivial_symmetry(limited)
    if kind is CollectiveKind.ALLTOALL:
        pool = path_columns(limited, graph, symmetry, resources=gpu_resources(limited, GPU, reduction=False))
    else:
        pool = tree_columns(limited, graph, symmetry, roots=(0,),
                            resources=gpu_resources(limited, GPU, reduction=False))
    return pool.lp_time_per_byte_us * 1e3


def test_routing_counts_the_copy_a_relay_gpu_makes() -> None:
    """Alltoall on ``slow_pair``, per pair b bytes; a share x of 0 <-> 2 relayed through GPU 1.

    Links only: (1 - x) b / 10 = (1 + x) b / 100 gives x = 9/11, T = 2/110 per byte. With 100 GB/s of memory,
    GPU 1 touches 4b of its own plus 2 x 2x b relayed: (1 - x) / 10 = (4 + 4x) / 100 gives x = 3/7, T = 4/70.
    """
    assert _lp(slow_pair(), CollectiveKind.ALLTOALL, None) == pytest.approx(2 / 110)
    assert _lp(slow_pair(), CollectiveKind.ALLTOALL, 100.0) == pytest.approx(4 / 70)


def test_routing_counts_the_memory_of_broadcast_relays() -> None:
    """Broadcast from GPU 0 around a 100 GB/s switch: links alone allow S / 100 (every GPU sends its share on).

    With 100 GB/s of memory, a root sending each piece x times reads xS, every other GPU writes S and reads its
    share of the (3 - x) S forwarded: xS = S + (3 - x) S / 3 gives x = 1.5, T = 1.5 S / 100.
    """
    assert _lp(switch_star(4, 100.0, 0.5), CollectiveKind.BROADCAST, None) == pytest.approx(0.01)
    assert _lp(switch_star(4, 100.0, 0.5), CollectiveKind.BROADCAST, 100.0) == pytest.approx(0.015)


def test_engine_mode_and_unlimited_gpus_add_no_routing_rows() -> None:
    topo = switch_star(3, 100.0, 0.5)
    assert gpu_resources(topo, GPU, reduction=False) == ()
    limited = topo.with_endpoints(Endpoint(100.0, 2, 30.0))
    assert gpu_resources(limited, ENGINE, reduction=True) == ()  # a chunk touches memory once wherever it goes
    memory, channels = gpu_resources(limited, GPU, reduction=True)
    assert (memory.at_src, memory.at_dst) == (3.0, 1.0)  # backwards: the edge's source receives and reduces
    assert (channels.at_src, channels.at_dst, channels.capacity_GBps) == (1.0, 1.0, (60.0,) * 3)


# ------------------------------------------------------------------ ordering
def _task(src: int, dst: int, link: int, pred: int = -1) -> Task:
    return Task(src=src, dst=dst, chunks=(src,), route=(link,), latency_us=1.0, bytes=1e6, bandwidth_GBps=100.0,
                pred=pred, priority=(0.0,))


def test_ordering_queues_tasks_on_their_gpus_memory() -> None:
    """GPU 0 sends 1 MB on two links at 100 GB/s: alone each arrives at 1 + 10 us. With GPU 0's memory at
    100 GB/s (10 us of it per task), the second waits for the first's: 1 + 20 us."""
    tasks = [_task(0, 1, 0), _task(0, 2, 1)]
    assert arrival_order(tasks, 2).arrive_us == [11.0, 11.0]
    use = EndpointUse(((((0, 10.0),)), ((0, 10.0),)), 1)
    assert arrival_order(tasks, 2, use).arrive_us == [11.0, 21.0]
    assert list_order(tasks, 2, endpoint=use).arrive_us == [11.0, 21.0]


def test_engine_memory_weights_of_trees() -> None:
    """Engine: forward, the root's one read is shared by its two sends and every receiver writes; backwards
    (reductions), the root reduces twice (one read of its own, one write shared) and leaves read their own."""
    topo = switch_star(3, 100.0, 0.5).with_endpoints(Endpoint(100.0))
    tasks = [_task(0, 1, 0), _task(0, 2, 1)]  # 1 MB each, 100 GB/s: 10 us per byte-per-byte
    forward = endpoint_use(topo, ENGINE, tasks, reduction=False)
    assert forward is not None and forward.uses == (((0, 5.0), (1, 10.0)), ((0, 5.0), (2, 10.0)))
    backward = endpoint_use(topo, ENGINE, tasks, reduction=True)
    assert backward is not None and backward.uses == (((0, 10.0), (1, 10.0)), ((0, 10.0), (2, 10.0)))
    after = endpoint_use(topo, ENGINE, tasks, reduction=False, after_reduction=True)
    assert after is not None and after.uses == (((1, 10.0),), ((2, 10.0),))
    chain = [_task(0, 1, 0), _task(1, 2, 1, pred=0)]
    path = endpoint_use(topo, ENGINE, chain, reduction=False, paths=True)  # an Alltoall relay keeps nothing
    assert path is not None and path.uses == (((0, 10.0),), ((2, 10.0),))
    gpu = endpoint_use(topo, GPU, chain, reduction=True)
    assert gpu is not None and gpu.uses == (((0, 30.0), (1, 10.0)), ((1, 30.0), (2, 10.0)))


# ------------------------------------------------------------------ choices
@pytest.mark.slow
def test_synthesis_avoids_the_relay_copy_where_memory_binds() -> None:
    """Alltoall on ``slow_pair`` with 100 GB/s of memory: counting it, the synthesizer relays less through
    GPU 1 and is faster, under the same endpoint model, than without counting it; both keep above the bound."""
    topo = slow_pair().with_endpoints(Endpoint(100.0))
    size = 3 * 4 * MB
    kind = CollectiveKind.ALLTOALL
    blind = synthesize(topo, kind, size, quick(endpoint_aware=False, compare_baselines=False))
    aware = synthesize(topo, kind, size, quick(compare_baselines=False))

    def relayed(result: SynthesisResult) -> int:
        """Pieces GPU 1 forwards for the pair 0 <-> 2 (an Alltoall chunk's source is chunk // (N x factor))."""
        per_source = 3 * result.schedule.collective.chunk_factor
        return sum(1 for t in result.schedule.transfers if t.src == 1 for c in t.chunks if c // per_source != 1)

    # as a share of the pair's pieces
    assert relayed(aware) / aware.schedule.collective.chunk_factor < \
        relayed(blind) / blind.schedule.collective.chunk_factor
    assert aware.sim.time_us is not None and blind.sim.time_us is not None
    assert aware.sim.time_us < 0.9 * blind.sim.time_us
    bound = lower_bound(topo, kind, size, endpoint=GPU).bound_us
    assert bound <= aware.sim.time_us


@pytest.mark.slow
def test_synthesis_spreads_broadcast_relays_where_memory_binds() -> None:
    """Broadcast around a switch with 100 GB/s of memory: the endpoint-aware bound is 1.5 S / 100 GB/s (above
    the links' S / 100 GB/s); counting memory the synthesizer comes within 15% of it (pipelining costs some
    latency at 16 MiB), not counting it does not: it relays through every GPU, as the links alone would have it,
    and leaves the root's memory idle."""
    topo = switch_star(4, 100.0, 0.5).with_endpoints(Endpoint(100.0))
    size = 16 * MB
    bound = lower_bound(topo, "broadcast", size, endpoint=GPU).bound_us
    assert bound == pytest.approx(1.5 * size / 100e3)
    aware = synthesize(topo, CollectiveKind.BROADCAST, size, quick(compare_baselines=False))
    blind = synthesize(topo, CollectiveKind.BROADCAST, size, quick(endpoint_aware=False, compare_baselines=False))
    assert aware.sim.time_us is not None and blind.sim.time_us is not None
    assert bound <= aware.sim.time_us < 1.15 * bound
    assert blind.sim.time_us > 1.3 * aware.sim.time_us


def test_baselines_are_rebuilt_within_the_channel_limit() -> None:
    """The tree baseline spreads over 4 channels on 4 GPUs; with 2 communication channels it is compared with
    at most 2, and every baseline is simulated with the endpoint resources."""
    topo = switch_star(4, 100.0, 0.5).with_endpoints(Endpoint(None, 2, 30.0))
    assert channel_limit(topo, GPU) == 2 and channel_limit(topo, ENGINE) is None
    free = compare_baselines(topo, CollectiveKind.ALLREDUCE, 4 * MB, 0)
    limited = compare_baselines(topo, CollectiveKind.ALLREDUCE, 4 * MB, 0, sim_options=SimOptions(endpoint=GPU),
                                channel_limit=2)
    assert all(choice.schedule.num_channels <= 2 for choice in limited.correct)
    wide = [c for c in free.correct if c.schedule.num_channels > 2]
    assert wide and any("channels" in note for note in limited.notes)


@pytest.mark.slow
def test_synthesis_uses_no_more_channels_than_the_gpus_give() -> None:
    topo = switch_star(4, 100.0, 0.5).with_endpoints(Endpoint(None, 1, 60.0))
    result = synthesize(topo, CollectiveKind.ALLGATHER, 4 * MB, quick())
    assert result.ranked and all(choice.schedule.num_channels == 1 for choice in result.ranked)


# ------------------------------------------------------------------ properties
def small_topologies() -> st.SearchStrategy[Topology]:
    return st.one_of(st.builds(switch_star, st.integers(3, 4), st.sampled_from([50.0, 100.0]), st.just(0.5)),
                     st.builds(ring, st.integers(3, 4), st.sampled_from([50.0, 100.0]), st.just(0.5)))


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=small_topologies(), kind=st.sampled_from([CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE]),
       mode=st.sampled_from(list(EndpointMode)))
def test_memory_that_cannot_bind_changes_nothing(topo: Topology, kind: CollectiveKind, mode: EndpointMode) -> None:
    """1 PB/s of memory at every GPU: the synthesized schedule is exactly the one without it, at the same time."""
    size = 4 * MB
    plain = synthesize(topo, kind, size, quick(endpoint=mode))
    huge = synthesize(topo.with_endpoints(Endpoint(1e6)), kind, size, quick(endpoint=mode))
    assert huge.schedule.transfers == plain.schedule.transfers and huge.chosen == plain.chosen
    assert huge.sim.time_us == pytest.approx(plain.sim.time_us, rel=1e-9)


@pytest.mark.slow
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=small_topologies(),
       kind=st.sampled_from([CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE]),
       mode=st.sampled_from(list(EndpointMode)), memory=st.sampled_from([20.0, 60.0, 200.0]))
def test_synthesized_is_above_the_bound_and_never_slower_than_a_baseline(
        topo: Topology, kind: CollectiveKind, mode: EndpointMode, memory: float) -> None:
    size = 4 * MB
    limited = topo.with_endpoints(Endpoint(memory))
    result = synthesize(limited, kind, size, quick(endpoint=mode))
    assert result.sim.time_us is not None
    assert result.sim.time_us >= lower_bound(limited, kind, size, endpoint=mode).bound_us * (1 - 1e-9)
    best = min(t for t in result.baselines.values() if t is not None)
    assert result.sim.time_us <= best * (1 + 1e-9)
    # the reported time is the schedule's under the same model
    again = simulate(limited, result.schedule, size, SimOptions(endpoint=mode)).time_us
    assert again == pytest.approx(result.sim.time_us, rel=1e-12)


# ------------------------------------------------------------------ the command line
def test_synthesize_reports_the_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo_file = tmp_path / "star4.json"
    topo_file.write_text(dumps_topology(switch_star(4, 100.0, 0.5)))
    code, out, err = run(["synthesize", "-t", str(topo_file), "-c", "allgather", "-s", "4MB", "--time-limit", "5",
                          "--memory-bandwidth", "50", "--chunk-factor", "1", "--json"], capsys)
    assert code == 0, err
    row = only_json(out)
    limited = switch_star(4, 100.0, 0.5).with_endpoints(Endpoint(50.0))
    bound = lower_bound(limited, "allgather", 4 * MB, endpoint=GPU)
    assert row["bound_us"] == pytest.approx(bound.bound_us)
    assert row["efficiency"] == pytest.approx(bound.bound_us / row["time_us"])
    endpoint = row["endpoint"]
    assert endpoint["mode"] == "gpu" and endpoint["limits"] is True
    assert endpoint["memory_bytes_per_network_byte"]["gpu"] == pytest.approx(2.0)
    assert endpoint["bound_explanation"].startswith("memory (GPU-driven)")
    assert endpoint["network_bound_us"] < bound.bound_us
    # the same limits from the topology file, engine mode
    data = json.loads(topo_file.read_text())
    data["endpoints"] = [{"gpus": "all", "memory_bandwidth": 50}]
    topo_file.write_text(json.dumps(data))
    code, out, err = run(["synthesize", "-t", str(topo_file), "-c", "allgather", "-s", "4MB", "--time-limit", "5",
                          "--endpoint", "engine", "--chunk-factor", "1", "--json"], capsys)
    assert code == 0, err
    row = only_json(out)
    assert row["endpoint"]["mode"] == "engine"
    assert row["bound_us"] == pytest.approx(lower_bound(limited, "allgather", 4 * MB, endpoint=ENGINE).bound_us)


def test_synthesize_refuses_more_instances_than_channels(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["synthesize", "-t", "dgx-a100", "-c", "allgather", "-s", "1MB", "--instances", "4",
                          "--comm-channels", "2", "--channel-bandwidth", "20"], capsys)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "--instances" in err and "2" in err


def test_a_network_group_touches_each_gpus_memory_once() -> None:
    """NVLS ReduceScatter on 8 GPUs (every block reduced in the switch, 7 senders per group): each GPU reads its
    input once (S) and, GPU-driven, reads its own block and the arriving sum and writes the result (3 S / 8);
    the engine reads its input once and writes its block (S / 8): the minimum, so no faster than the bound."""
    from taccl_py.baselines import baseline
    from taccl_py.endpoint import memory_traffic
    from taccl_py.library import resolve_topology

    topo = resolve_topology("dgx-h100-nvls")
    s = 16 * MB
    schedule = baseline(topo, "reducescatter", "nvls", size_bytes=s)
    gpu, engine = memory_traffic(schedule, s, GPU), memory_traffic(schedule, s, ENGINE)
    assert gpu.read_bytes == pytest.approx([s * 7 / 8 + 2 * s / 8] * 8)
    assert gpu.write_bytes == pytest.approx([s / 8] * 8)
    assert engine.read_bytes == pytest.approx([s] * 8) and engine.write_bytes == pytest.approx([s / 8] * 8)
    limited = topo.with_endpoints(Endpoint(50.0))
    for mode in EndpointMode:
        time_us = simulate(limited, schedule, s, SimOptions(endpoint=mode)).time_us
        assert time_us is not None
        assert time_us >= lower_bound(limited, "reducescatter", s, endpoint=mode).bound_us * (1 - 1e-9)


def test_collectives_at_once_add_their_memory() -> None:
    """Allgather + ReduceScatter at once on 4 GPUs with 50 GB/s of memory, S = 16 MiB each: GPU-driven they touch
    2 x 3S + 4 x 3S = 18S in all over 200 GB/s; the ring pair runs within 2% of that."""
    from taccl_py.baselines import baseline
    from taccl_py.bounds import joint_lower_bound
    from taccl_py.concurrent import simulate_concurrent

    s = 16 * MB
    topo = switch_star(4, 100.0, 0.5).with_endpoints(Endpoint(50.0))
    joint = joint_lower_bound(topo, [("allgather", s), ("reducescatter", s)], endpoint=GPU)
    assert joint.bound_us == pytest.approx(18 * s / 200e3)
    assert joint.explanation.startswith("memory (GPU-driven)")
    parts = [(baseline(topo, kind, "ring", size_bytes=s), float(s)) for kind in ("allgather", "reducescatter")]
    makespan = simulate_concurrent(topo, parts, SimOptions(endpoint=GPU)).makespan_us
    assert makespan is not None and joint.bound_us <= makespan < 1.02 * joint.bound_us
    # no mode: only what every mode needs (each GPU reads its inputs and writes its results: S + S (1 + 1/4))
    assert joint_lower_bound(topo, [("allgather", s), ("reducescatter", s)]).bound_us == \
        pytest.approx(s * (2 + 1 / 4) / 50e3)
