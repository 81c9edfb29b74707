"""Issue 17: protocols, runtime overheads, calibrated presets, --ideal, and the published nccl-tests fixtures."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taccl_py.baselines import baseline
from taccl_py.cli.main import main
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import InputError
from taccl_py.fidelity import FidelityRow, load_cases, predict_case, published_rows
from taccl_py.library import resolve_topology
from taccl_py.library.grids import switch_star
from taccl_py.runtime import (
    PRESETS,
    PROTOCOLS,
    Protocol,
    RuntimeModel,
    TransferCosts,
    nccl_nvls_chunk_bytes,
    nccl_ring_pieces,
    nccl_tree_pieces,
    payload_fraction,
    runtime_from_dict,
    runtime_to_dict,
    wire_bytes,
)
from taccl_py.schedule import Schedule, Transfer
from taccl_py.simulator import SimOptions, simulate
from taccl_py.topology import Topology
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


def test_tree_pieces_follow_nccl_chunks() -> None:
    """enqueue.cc's Simple tree (NCCL 2.19 on): one 512 KB step a channel a loop; 32 channels move 16 MB a loop."""
    assert nccl_tree_pieces(1 << 20, 32) == 1
    assert nccl_tree_pieces(16 << 20, 32) == 1
    assert nccl_tree_pieces((16 << 20) + 1, 32) == 2
    assert nccl_tree_pieces(1 << 30, 32) == 64
    assert nccl_tree_pieces(1 << 30, 24) == 86  # 1 GB over 24 x 512 KB: 85.3 loops
    assert nccl_tree_pieces(8 << 30, 32) == 256  # 512 loops, capped


def test_the_smallest_simple_slice_is_a_share_of_the_buffer() -> None:
    """prims_simple.h: a slice is at least 1/32 of a full slice of 2 steps: 32 KiB with 4 MiB, 64 KiB with 8 MiB."""
    from taccl_py.runtime import simple_slice_bytes, simple_step_latency

    assert simple_slice_bytes(128 << 10) == 64 << 10  # half the chunk: above either floor
    assert simple_slice_bytes(40 << 10) == 32 << 10 and simple_slice_bytes(40 << 10, 8 << 20) == 40 << 10
    assert simple_slice_bytes(100 << 10, 8 << 20) == 64 << 10
    # 100 KiB at 1,000 bytes/us behind a 100 us hop: what follows the first slice (50 KiB, or 64 KiB with the
    # 8 MiB buffer) hides 51.2 or 36.9 us of it
    assert simple_step_latency(100.0, 100 << 10, 1000.0) == pytest.approx(100.0 - (50 << 10) / 1000.0)
    assert simple_step_latency(100.0, 100 << 10, 1000.0, 8 << 20) == pytest.approx(100.0 - (36 << 10) / 1000.0)


def test_nccl_buffsize_sets_simple_steps_only() -> None:
    """NCCL_BUFFSIZE (``simple_buffer_bytes``) is Simple's buffer: 8 MiB makes 1 MiB steps, so the tree takes half
    the chunk steps and a ring chunk doubles; LL and LL128 keep their own buffers."""
    eight = 8 << 20
    assert nccl_tree_pieces(64 << 20, 32, eight) == 2 and nccl_tree_pieces(64 << 20, 32) == 4
    assert nccl_tree_pieces((32 << 20) + 1, 32, eight) == 2
    assert nccl_ring_pieces("Simple", 32 << 20, 8, 1, eight) == 1 and nccl_ring_pieces("Simple", 32 << 20, 8, 1) == 2
    for p in ("LL", "LL128"):
        assert nccl_ring_pieces(p, 1 << 30, 8, 4, eight) == nccl_ring_pieces(p, 1 << 30, 8, 4)


def test_a_preset_takes_the_runs_buffer_size() -> None:
    """``{"preset": ..., "simple_buffer_bytes": N}`` is the preset run with NCCL_BUFFSIZE=N, and writes back the
    same; anything but a whole multiple of 8 bytes in 64 KiB..1 GiB is one error naming the field."""
    model = runtime_from_dict({"preset": "dgx-h100", "simple_buffer_bytes": 8 << 20}, where="t.json")
    assert model == replace(PRESETS["dgx-h100"], simple_buffer_bytes=8 << 20)
    assert runtime_to_dict(model) == {"preset": "dgx-h100", "simple_buffer_bytes": 8 << 20}
    assert runtime_to_dict(PRESETS["dgx-h100"]) == {"preset": "dgx-h100"}
    full = replace(PRESETS["dgx-a100"], name="mine", simple_buffer_bytes=2 << 20)
    assert runtime_from_dict(runtime_to_dict(full), where="t.json") == full
    assert "simple_buffer_bytes" not in runtime_to_dict(replace(full, simple_buffer_bytes=4 << 20))
    for bad in (True, 1.5e6, 1000, 1 << 31, (1 << 20) + 4):
        with pytest.raises(InputError, match="NCCL_BUFFSIZE") as error:
            runtime_from_dict({"preset": "dgx-h100", "simple_buffer_bytes": bad}, where="t.json")
        assert error.value.where == "t.json: runtime.simple_buffer_bytes"
    with pytest.raises(InputError, match="no other keys than simple_buffer_bytes and protocols"):
        runtime_from_dict({"preset": "dgx-h100", "channels": 8}, where="t.json")


def test_a_runtime_keeps_to_its_runs_protocols() -> None:
    """``"protocols"`` (the runs' NCCL_PROTO) reads in NCCL's order, next to a preset or in a full model, and writes
    back the same; a bad list is one error naming the field."""
    model = runtime_from_dict({"preset": "dgx-h100", "protocols": ["Simple", "LL"]}, where="t.json")
    assert model.protocols == (Protocol.LL, Protocol.SIMPLE)
    assert runtime_to_dict(model) == {"preset": "dgx-h100", "protocols": ["LL", "Simple"]}
    full = replace(PRESETS["dgx-a100"], name="mine", protocols=(Protocol.SIMPLE,))
    assert runtime_from_dict(runtime_to_dict(full), where="t.json") == full
    assert "protocols" not in runtime_to_dict(replace(full, protocols=None))
    for bad in ([], ["LL9"], ["LL", "LL"], "Simple", [1]):
        with pytest.raises(InputError, match="NCCL_PROTO") as error:
            runtime_from_dict({"preset": "dgx-h100", "protocols": bad}, where="t.json")
        assert error.value.where == "t.json: runtime.protocols"


def test_a_models_protocols_bound_what_it_predicts() -> None:
    """A model whose runs allow Simple only times NCCL's collectives with Simple (a protocol it excludes is not
    applicable), while Alltoall keeps NCCL's point-to-point pick and a schedule asked for an excluded protocol is
    timed as asked."""
    from taccl_py.cli.synth_cmd import _choose_proto
    from taccl_py.errors import NotApplicable
    from taccl_py.predict import (
        allowed_protocols,
        model_protocols,
        predict_baseline,
        predict_nccl,
        predict_schedule,
    )

    topo = resolve_topology("dgx-h100x2")
    assert topo.runtime is not None
    simple = replace(topo.runtime, protocols=(Protocol.SIMPLE,))
    kind = CollectiveKind.ALLREDUCE
    assert model_protocols(simple, kind) == (Protocol.SIMPLE,)
    assert model_protocols(simple, CollectiveKind.ALLTOALL) == (Protocol.LL, Protocol.SIMPLE)  # never LL128
    assert replace(simple, protocols=(Protocol.SIMPLE, Protocol.LL)).protocols == (Protocol.LL, Protocol.SIMPLE)
    assert allowed_protocols(CollectiveKind.ALLTOALL, "direct", 4096, 16, (Protocol.SIMPLE,)) == (Protocol.LL,)
    free = predict_nccl(topo, kind, 64 << 10, topo.runtime)
    kept = predict_nccl(topo, kind, 64 << 10, simple)
    assert free is not None and kept is not None
    assert free[1].protocol is not Protocol.SIMPLE and kept[1].protocol is Protocol.SIMPLE
    with pytest.raises(NotApplicable, match="NCCL_PROTO"):
        predict_baseline(topo, kind, "ring", 64 << 10, simple, protocols=(Protocol.LL128,))
    a2a = predict_nccl(topo, CollectiveKind.ALLTOALL, 64 << 10, simple)
    assert a2a is not None and a2a[1].protocol is Protocol.LL  # 4 KB a peer: below NCCL's point-to-point threshold
    schedule = baseline(topo, kind, "ring", size_bytes=64 << 10)
    assert predict_schedule(topo, schedule, 64 << 10, simple).protocol is Protocol.SIMPLE
    assert predict_schedule(topo, schedule, 64 << 10, simple, protocols=(Protocol.LL,)).protocol is Protocol.LL
    # synthesize: its own choice keeps to Simple, --proto LL warns
    assert _choose_proto(schedule, topo, 64 << 10, None, simple)[0] == "Simple"
    proto, why, _ = _choose_proto(schedule, topo, 64 << 10, "LL", simple)
    assert proto == "LL" and "allow Simple only" in why


def test_the_tree_of_a_larger_buffer_pipelines_less() -> None:
    """With NCCL_BUFFSIZE=8 MiB the Simple tree at 64 MB takes 2 chunk steps a channel where 4 MiB takes 4: the
    pipeline fills with larger pieces, so the same tree is slower; at 1 GB (64 or 32 steps) the two are close."""
    from taccl_py.predict import predict_baseline

    topo = resolve_topology("dgx-h100x2")
    assert topo.runtime is not None
    big = replace(topo.runtime, simple_buffer_bytes=8 << 20)
    times = {}
    for size in (64 << 20, 1 << 30):
        for name, model in (("4MiB", topo.runtime), ("8MiB", big)):
            pred = predict_baseline(topo, CollectiveKind.ALLREDUCE, "tree", size, model, protocols=(Protocol.SIMPLE,))
            times[name, size] = pred.sim.time_us
    assert times["8MiB", 64 << 20] > 1.05 * times["4MiB", 64 << 20]
    assert times["8MiB", 1 << 30] == pytest.approx(times["4MiB", 1 << 30], rel=0.05)


@given(st.integers(1, 1 << 36), st.integers(1, 64))
def test_tree_pieces_cover_the_buffer(size: int, channels: int) -> None:
    """Pieces x channels x 512 KB covers the buffer (below the cap) and one piece fewer does not."""
    pieces = nccl_tree_pieces(size, channels)
    assert 1 <= pieces <= 256
    assert nccl_tree_pieces(size + 1, channels) >= pieces
    if pieces < 256:
        assert pieces * channels * (512 << 10) >= size > (pieces - 1) * channels * (512 << 10)


def test_costs_on_a_hand_computed_switch() -> None:
    """Two GPUs on a switch (nvlink, 100 GB/s): Simple at efficiency 0.5 moves 1e6 bytes in 3.4 + 8.4 + 20 us."""
    topo = switch_star(2, 100.0, 1.0)
    model = RuntimeModel(name="t", efficiency={"nvlink": 0.5}, channels=24)
    costs = model.costs("Simple", CollectiveKind.ALLGATHER, topo)
    assert costs.route_latency_us(topo, topo.gpu_route(0, 1)) == 3.4  # tuning.cc NVLink ring Simple
    assert costs.link_capacity_us(topo) == [50_000.0] * len(topo.links)  # half of 100 GB/s on every nvlink
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


def test_simple_hides_the_hop_behind_the_slices_after_the_first() -> None:
    from taccl_py.runtime import simple_step_latency

    # 1 MiB step in two 512 KiB slices at 1000 B/us: the second slice (524.288 us) hides a 10 us hop
    assert simple_step_latency(10.0, 1 << 20, 1000.0) == 0.0
    # 40 KiB: the first slice is the 32 KiB minimum, 8 KiB after it (8.192 us) hide that much of the hop
    assert simple_step_latency(10.0, 40 * 1024, 1000.0) == pytest.approx(10.0 - 8.192)
    assert simple_step_latency(10.0, 16 * 1024, 1000.0) == 10.0  # one slice: the hop in full


def test_tree_and_nvls_shares_follow_tuning_cc() -> None:
    topo = resolve_topology("dgx-a100")  # one machine, 300 GB/s NVSwitch ports
    model = RuntimeModel(name="t", efficiency={"nvlink": 0.8}, channels=24, nvls_efficiency=0.5, tree_caps=True)
    tree = model.costs("Simple", CollectiveKind.ALLREDUCE, topo, algorithm="tree", size_bytes=1 << 30)
    assert tree.fraction["nvlink"] == pytest.approx(110 / 300)  # min(0.9 x 0.8, maxTreeBw 110 / 300)
    mid = model.costs("Simple", CollectiveKind.ALLREDUCE, topo, algorithm="tree", size_bytes=1 << 20)
    assert mid.fraction["nvlink"] == pytest.approx(110 / 300 * 0.5)  # treeCorrectionFactor[Simple][log2(1M/64)=14]
    ll = model.costs("LL", CollectiveKind.ALLREDUCE, topo, algorithm="tree", size_bytes=1 << 30)
    assert ll.fraction["nvlink"] == pytest.approx(110 / 300 / 3.8)
    uncapped = replace(model, tree_caps=False).costs("Simple", CollectiveKind.ALLREDUCE, topo, algorithm="tree")
    assert uncapped.fraction["nvlink"] == pytest.approx(0.9 * 0.8)
    assert model.costs("Simple", CollectiveKind.ALLREDUCE, topo, algorithm="nvls").fraction["nvlink"] == 0.5
    assert model.costs("Simple", CollectiveKind.ALLREDUCE, topo).fraction["nvlink"] == 0.8


def test_one_phase_nvls_is_priced_as_a_copy() -> None:
    """NVLS Allgather and ReduceScatter take the NVLink copy share and Simple's launch; Allreduce keeps NVLS's share,
    its chunk cost and its latency."""
    topo = resolve_topology("dgx-h100-nvls")
    model = RuntimeModel(name="t", efficiency={"nvlink": 0.8}, copy_efficiency={"nvlink": 0.85}, nvls_efficiency=0.6,
                         nvls_latency_us=9.0, nvls_half_chunk_bytes=4096.0)
    simple = model.costs("Simple", CollectiveKind.ALLREDUCE, topo)
    for kind in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER):
        one = model.costs("Simple", kind, topo, algorithm="nvls", size_bytes=1 << 20)
        assert one.fraction["nvlink"] == 0.85 and one.launch_us == simple.launch_us
    two = model.costs("Simple", CollectiveKind.ALLREDUCE, topo, algorithm="nvls", size_bytes=1 << 20)
    chunk = nccl_nvls_chunk_bytes(1 << 20, 8)
    assert two.fraction["nvlink"] == pytest.approx(0.6 * chunk / (chunk + 4096) * 0.5)  # 8 of 16 channels at 1 MB
    assert two.launch_us == pytest.approx(simple.launch_us + 9.0)


def test_one_phase_nvls_runs_one_stream_per_block_and_only_on_nvlink_sharp() -> None:
    """Calibrated, NVLS Allgather and ReduceScatter move each block as one piece, Allreduce in NCCL's chunk steps;
    NVLS needs switches that reduce (a fabric that only multicasts has ``multicast``, not ``nvls``)."""
    from taccl_py.baselines import applicable_baselines
    from taccl_py.predict import nccl_algorithms, predict_baseline

    topo = resolve_topology("dgx-h100-nvls")
    assert topo.runtime is not None
    for kind, one in ((CollectiveKind.ALLGATHER, True), (CollectiveKind.REDUCESCATTER, True),
                      (CollectiveKind.ALLREDUCE, False)):
        pred = predict_baseline(topo, kind, "nvls", 64 << 20, topo.runtime)
        assert pred.schedule is not None and pred.protocol is Protocol.SIMPLE
        pieces = pred.schedule.collective.chunk_factor
        assert pieces == 1 if one else pieces > 1
        assert "nvls" in nccl_algorithms(topo, kind)
    fabric = resolve_topology("fat-tree8")
    assert any(s.multicast for s in fabric.switches) and not any(s.reduce for s in fabric.switches)
    assert "multicast" in applicable_baselines(fabric, CollectiveKind.ALLGATHER)
    assert "nvls" not in applicable_baselines(fabric, CollectiveKind.ALLGATHER)
    assert nccl_algorithms(fabric, CollectiveKind.ALLGATHER) == ["ring"]


def test_copy_collectives_take_the_copy_share() -> None:
    """Allgather, Alltoall and Broadcast take ``copy_efficiency``; reductions and unnamed classes ``efficiency``."""
    topo = resolve_topology("dgx-a100")
    model = RuntimeModel(name="t", efficiency={"nvlink": 0.8, "net": 0.9}, copy_efficiency={"nvlink": 0.88})
    for kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLTOALL, CollectiveKind.BROADCAST):
        costs = model.costs("Simple", kind, topo)
        assert costs.fraction["nvlink"] == 0.88 and costs.fraction["net"] == 0.9
    for kind in (CollectiveKind.ALLREDUCE, CollectiveKind.REDUCESCATTER, CollectiveKind.REDUCE):
        assert model.costs("Simple", kind, topo).fraction["nvlink"] == 0.8
    assert model.costs("LL", CollectiveKind.ALLGATHER, topo).fraction["nvlink"] == pytest.approx(0.88 / 3)
    back = runtime_from_dict(json.loads(json.dumps(runtime_to_dict(model))), where="t.json")
    assert back.copy_efficiency == {"nvlink": 0.88}


def test_ring_across_machines_pays_the_network_on_its_crossings_only() -> None:
    """tuning.cc's form of the ring latency: (nsteps - nInterSteps) x intraLat + nInterSteps x interLat, with
    nInterSteps the crossings of the longest chain (m machines: m, Allreduce 2 m), spread over the ring's steps
    on its network connection; intraLat lifted toward the network post overhead (x3 with Simple) on all but one
    loop's share of the steps."""
    from taccl_py.predict import ring_step_latencies
    from taccl_py.topology_io import load_topology

    topo = load_topology(FIXTURES / "a100x3-4nic.json")  # 3 machines x 8 GPUs
    hops = {"nvlink": 0.5, "pci": 1.0, "net": 9.0}
    ll = TransferCosts(Protocol.LL, hops, {"nvlink": 1.0, "pci": 1.0, "net": 1.0}, 3.6)
    # Allreduce in one loop: nsteps 2 x 23 = 46, nInterSteps 2 x 3 = 6; one loop pays NVLink's own 0.5
    out = ring_step_latencies(topo, ll, 1024, 1, 24, CollectiveKind.ALLREDUCE, net_overhead_us=2.0)
    assert out["nvlink"] == 0.5 and out["net"] == pytest.approx(0.5 + (9.0 - 0.5) * 6 / 46)
    assert 40 * out["nvlink"] + 6 * 9.0 == pytest.approx(46 * out["nvlink"] + 46 * (out["net"] - out["nvlink"]))
    # four loops: the floor (2 us) on three of them, each loop's step a quarter
    out = ring_step_latencies(topo, ll, 1024, 4, 24, CollectiveKind.ALLREDUCE, net_overhead_us=2.0)
    intra = 0.5 + 1.5 * 3 / 4
    assert out["nvlink"] == pytest.approx(intra / 4)
    assert out["net"] == pytest.approx((intra + (9.0 - intra) * 6 / 46) / 4)
    # Allgather: nsteps 23, nInterSteps 3; two pieces carry half each
    out = ring_step_latencies(topo, ll, 1024, 2, 24, CollectiveKind.ALLGATHER, net_overhead_us=0.0)
    assert out["nvlink"] == 0.25 and out["net"] == pytest.approx((0.5 + (9.0 - 0.5) * 3 / 23) / 2)
    simple = replace(ll, protocol=Protocol.SIMPLE)
    assert ring_step_latencies(topo, simple, 1024, 1, 24, CollectiveKind.ALLREDUCE,
                               net_overhead_us=2.0)["nvlink"] == 0.5  # one loop: no floor
    assert ring_step_latencies(topo, simple, 1024, 2, 24, CollectiveKind.ALLREDUCE, net_overhead_us=2.0)[
        "nvlink"] == pytest.approx((0.5 + 5.5 / 2) / 2)  # Simple: three times the overhead, on one of two loops
    one = resolve_topology("dgx-a100")  # one machine: no crossing, no floor
    assert ring_step_latencies(one, ll, 1024, 4, 24, CollectiveKind.ALLREDUCE, net_overhead_us=2.0)["nvlink"] == 0.125


def test_alltoall_across_machines_waits_for_its_proxies_to_post() -> None:
    """Each rank's proxy posts its 8 network receives, then its 8 sends, 2 us each on this AMD host: the first
    network transfer enters at 18 us, the last at 32, then pays the network hop and the launch (1 KB: the data is
    negligible)."""
    from taccl_py.predict import predict_baseline

    topo = resolve_topology("dgx-a100x2")
    model = PRESETS["dgx-a100"]
    pred = predict_baseline(topo, CollectiveKind.ALLTOALL, "direct", 1024, model, protocols=(Protocol.SIMPLE,))
    assert isinstance(pred.schedule, Schedule)
    costs = model.costs(Protocol.SIMPLE, CollectiveKind.ALLTOALL, topo)
    assert costs.post_us == model.net_overhead_us
    net = [i for i, t in enumerate(pred.schedule.transfers) if costs.route_class(topo, t.route) == "net"]
    hop = model.hop_latency_us["net"][Protocol.SIMPLE]
    entered = sorted(float(pred.sim.arrive_us[i]) - hop for i in net)  # 1 KB: the bytes take ~0 us
    assert len(net) == 16 * 8 and entered[-1] == pytest.approx(16 * model.net_overhead_us, abs=0.05)
    assert entered[0] == pytest.approx(9 * model.net_overhead_us, abs=0.05)  # every receive, then a first send
    expected = 16 * 2.0 + hop + model.launch_us[Protocol.SIMPLE]
    assert pred.sim.time_us == pytest.approx(expected, abs=0.1)
    one = resolve_topology("dgx-a100")
    assert model.costs(Protocol.SIMPLE, CollectiveKind.ALLTOALL, one).post_us == 0.0  # one machine: nothing posted
    ideal = simulate(topo, pred.schedule, 1024)  # the raw-link model posts nothing either
    assert ideal.time_us is not None and ideal.time_us < 16 * 2.0


@pytest.mark.parametrize(("kind", "algorithm", "written", "timed"), [
    ("allreduce", "tree", 64 << 10, 1024), ("broadcast", "ring", 1 << 20, 3000), ("allgather", "ring", 1024, 1024)])
def test_posts_are_the_same_in_both_kernels(tmp_path: Path, kind: str, algorithm: str, written: int,
                                            timed: int) -> None:
    """Sends that become ready during the run are posted in the same order by the Python and compiled kernels,
    for an XML file and for a schedule: the same times, exactly."""
    import numpy as np

    from taccl_py.compact import compact
    from taccl_py.fast_sim import simulate_compact
    from taccl_py.msccl.arrays import program_arrays
    from taccl_py.msccl.fast_timing import simulate_arrays
    from taccl_py.msccl.loader import load_program
    from taccl_py.msccl.timing import simulate_program

    topo = resolve_topology("dgx-a100x2")
    path = tmp_path / "b.xml"
    with pytest.raises(SystemExit):
        main(["baseline", "-t", "dgx-a100x2", "-c", kind, "-s", str(written), "-a", algorithm, "-o", str(path)])
    program = load_program(path)
    options = SimOptions(costs=PRESETS["dgx-a100"].costs(Protocol(program.proto), CollectiveKind(kind), topo))
    assert options.costs is not None and options.costs.post_us == 2.0
    python = simulate_program(program, topo, timed, options)
    arrays = program_arrays(program)
    assert arrays is not None
    compiled = simulate_arrays(arrays, topo, timed, options)
    assert python.time_us is not None and compiled.time_us == python.time_us
    assert np.array_equal(np.asarray(compiled.arrive_us), np.asarray(python.arrive_us))
    assert compiled.link_busy_us == python.link_busy_us
    schedule = baseline(topo, kind, algorithm, size_bytes=written)
    assert isinstance(schedule, Schedule)
    slow = simulate(topo, schedule, timed, options)
    fast = simulate_compact(topo, compact(schedule), timed, options)
    assert slow.time_us is not None and fast.time_us == slow.time_us
    assert slow.time_us > simulate(topo, schedule, timed, SimOptions(costs=replace(options.costs, post_us=0.0))).time_us


def test_proxy_posts_one_after_another() -> None:
    """Hand-computed: each post costs 2 us; an instant's receives are posted first, then its sends, each no earlier
    than it is ready and after what its proxy posted before."""
    from taccl_py.runtime import proxy_posts

    posted = [0.0, 0.0, 0.0]
    # at 0, 0 -> 1 and 0 -> 2: ranks 1 and 2 post their receives by 2, then rank 0 its two sends by 2 and 4
    assert proxy_posts(posted, [(0, 1), (0, 2)], 0.0, 2.0) == [2.0, 4.0]
    # at 10, 2 -> 1: rank 1's receive is posted ahead (at 4, long before), rank 2's send at 12
    assert proxy_posts(posted, [(2, 1)], 10.0, 2.0) == [12.0]
    assert posted == [4.0, 4.0, 12.0]
    # an exchange 0 <-> 1 at 20: both receives first (rank 0 has posted by 6, rank 1 by 6), then both sends
    assert proxy_posts(posted, [(0, 1), (1, 0)], 20.0, 2.0) == [22.0, 22.0]
    assert posted == [22.0, 22.0, 12.0]


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_proxy_posts_of_a_round_do_not_depend_on_its_order(n: int) -> None:
    """A ring round r -> r + 1 ready at once: whatever rank comes first, every send starts at 2 posts (its receive,
    then its send), the same on every rank; the compiled kernels' version gives the same times."""
    import numpy as np

    from taccl_py.fast_kernel import proxy_posts as compiled_posts
    from taccl_py.runtime import proxy_posts

    for first in range(n):
        pairs = [((first + k) % n, (first + k + 1) % n) for k in range(n)]
        posted = [0.0] * n
        assert proxy_posts(posted, pairs, 0.0, 1.5) == [3.0] * n
        arrays = np.zeros(n)
        ranks, peers = (np.array(list(column), np.int64) for column in zip(*pairs, strict=True))
        assert compiled_posts(arrays, ranks, peers, 0.0, 1.5).tolist() == [3.0] * n
        assert arrays.tolist() == posted == [3.0] * n


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)).filter(lambda p: p[0] != p[1]), min_size=1,
                max_size=12),
       st.lists(st.floats(0.0, 50.0), min_size=6, max_size=6), st.floats(0.0, 60.0), st.floats(0.1, 3.0))
def test_proxy_posts_rules_and_the_compiled_version(pairs: list[tuple[int, int]], before: list[float], now: float,
                                                    post_us: float) -> None:
    """Any instant: a send starts once its proxy and its receiver's have posted it, no earlier than the instant plus
    one post; each proxy ends having posted its receives and sends of the instant after what it had posted (its
    sends no earlier than the instant); the kernels' version gives the same, exactly."""
    import numpy as np

    from taccl_py.fast_kernel import proxy_posts as compiled_posts
    from taccl_py.runtime import proxy_posts

    posted = list(before)
    starts = proxy_posts(posted, pairs, now, post_us)
    for rank in range(6):
        receives = sum(1 for _, peer in pairs if peer == rank)
        sends = sum(1 for src, _ in pairs if src == rank)
        expected = before[rank] + receives * post_us
        if sends:
            expected = max(now, expected) + sends * post_us
        assert posted[rank] == pytest.approx(expected)
    assert all(start >= now + post_us - 1e-12 for start in starts)
    assert all(start <= max(posted[src], posted[dst]) + 1e-12 for start, (src, dst) in zip(starts, pairs, strict=True))
    arrays = np.array(before)
    ranks, peers = (np.array(column, np.int64) for column in zip(*pairs, strict=True))
    assert compiled_posts(arrays, ranks, peers, now, post_us).tolist() == starts and arrays.tolist() == posted


@pytest.mark.parametrize("size", [1024, 1 << 20])
def test_an_xml_across_machines_waits_for_its_proxies(tmp_path: Path, size: int) -> None:
    """An MSCCL XML's sends over the network start once posted, in both timing kernels; at 1 KB a direct Alltoall
    XML takes what the NCCL baseline it was written from takes (the same posts, in the same order)."""
    from taccl_py.msccl.arrays import program_arrays
    from taccl_py.msccl.fast_timing import simulate_arrays
    from taccl_py.msccl.loader import load_program
    from taccl_py.msccl.timing import simulate_program
    from taccl_py.predict import predict_baseline

    topo = resolve_topology("dgx-a100x2")
    path = tmp_path / "a2a.xml"
    with pytest.raises(SystemExit):
        main(["baseline", "-t", "dgx-a100x2", "-c", "alltoall", "-s", str(size), "-a", "direct", "-o", str(path)])
    program = load_program(path)
    costs = PRESETS["dgx-a100"].costs(Protocol(program.proto), CollectiveKind.ALLTOALL, topo)
    unposted = replace(costs, post_us=0.0)
    times = []
    for c in (costs, unposted):
        python = simulate_program(program, topo, size, SimOptions(costs=c)).time_us
        arrays = program_arrays(program)
        assert arrays is not None
        assert simulate_arrays(arrays, topo, size, SimOptions(costs=c)).time_us == python  # the same, exactly
        times.append(python)
    assert times[0] is not None and times[1] is not None and times[0] > times[1] + 2 * costs.post_us
    if size == 1024:
        nccl = predict_baseline(topo, CollectiveKind.ALLTOALL, "direct", size, PRESETS["dgx-a100"],
                                protocols=(Protocol(program.proto),))
        assert times[0] == pytest.approx(nccl.sim.time_us, abs=0.1)
        from taccl_py.predict import predict_schedule  # a schedule (synthesized, or a file) is posted too

        plain = baseline(topo, "alltoall", "direct", size_bytes=size)
        assert isinstance(plain, Schedule)
        timed = predict_schedule(topo, plain, size, PRESETS["dgx-a100"], protocols=(Protocol(program.proto),))
        assert timed.sim.time_us == pytest.approx(nccl.sim.time_us, abs=0.1)


def test_nccl_sends_point_to_point_by_its_threshold_and_nvls_with_simple_only() -> None:
    """Alltoall: LL up to NCCL_P2P_LL_THRESHOLD (16 KB) per peer, Simple above; NVLS: Simple only."""
    from taccl_py.predict import P2P_LL_THRESHOLD_BYTES, nccl_protocols, predict_nccl

    assert P2P_LL_THRESHOLD_BYTES == 16384
    assert nccl_protocols(CollectiveKind.ALLTOALL, "direct", 8 * 16384, 8) == (Protocol.LL,)
    assert nccl_protocols(CollectiveKind.ALLTOALL, "direct", 8 * 16384 + 8, 8) == (Protocol.SIMPLE,)
    assert nccl_protocols(CollectiveKind.ALLTOALL, "direct") == (Protocol.LL, Protocol.SIMPLE)
    assert nccl_protocols(CollectiveKind.ALLREDUCE, "nvls") == (Protocol.SIMPLE,)
    assert len(nccl_protocols(CollectiveKind.ALLREDUCE, "ring", 1024, 8)) == 3
    topo = resolve_topology("dgx-a100")
    for size, proto in ((1024, Protocol.LL), (1 << 20, Protocol.SIMPLE)):
        found = predict_nccl(topo, CollectiveKind.ALLTOALL, size, PRESETS["dgx-a100"])
        assert found is not None and found[1].protocol is proto


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


def test_launch_offset_adds_a_harness_cost_to_the_calibrated_model(capsys: pytest.CaptureFixture[str]) -> None:
    """``taccl --launch-offset`` adds its microseconds once per collective (the -g 8 harness of the fidelity check)."""
    times = []
    for extra in ([], ["--launch-offset", "24.98"]):
        with pytest.raises(SystemExit) as exit_info:
            main([*extra, "baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "64MB", "-a", "ring", "--json"])
        assert exit_info.value.code == 0
        data = json.loads(capsys.readouterr().out)
        times.append(data["baselines"][0]["time_us"])
    assert data["model"] == "dgx-a100+24.98us" and times[1] == pytest.approx(times[0] + 24.98, abs=1e-6)
    for bad in (["--ideal", "--launch-offset", "5", "baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB"],
                ["--launch-offset", "5", "baseline", "-t", "ndv2x2", "-c", "allreduce", "-s", "1KB"]):
        with pytest.raises(SystemExit) as exit_info:
            main(bad)
        assert exit_info.value.code == 2 and "--launch-offset" in capsys.readouterr().err


def test_xml_proto_is_honoured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ring.xml"
    with pytest.raises(SystemExit):
        main(["baseline", "-t", "dgx-a100", "-c", "allgather", "-s", "64KB", "-a", "ring", "-o", str(path), "--json"])
    written = json.loads(capsys.readouterr().out)["xml"]
    assert f'proto="{written["proto"]}"' in path.read_text()
    with pytest.raises(SystemExit):
        main(["simulate", "-t", "dgx-a100", "-s", "64KB", "-a", str(path), "--json"])
    assert json.loads(capsys.readouterr().out)["proto"] == written["proto"]


@pytest.mark.parametrize("ideal", [False, True])
def test_an_xml_whose_proto_names_no_protocol_fails_its_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 ideal: bool) -> None:
    """``proto="simple"`` (NCCL's names are case-sensitive) is the program's fault, reported as the verifier words it,
    under the runtime model as with ``--ideal``: no traceback, the row without a time, exit status 1."""
    path = tmp_path / "ring.xml"
    with pytest.raises(SystemExit):
        main(["baseline", "-t", "dgx-a100", "-c", "allgather", "-s", "64KB", "-a", "ring", "-o", str(path)])
    capsys.readouterr()
    text = path.read_text()
    path.write_text(re.sub(r'proto="[A-Za-z0-9]+"', 'proto="simple"', text, count=1))
    with pytest.raises(SystemExit) as done:
        main([*(["--ideal"] if ideal else []), "simulate", "-t", "dgx-a100", "-s", "64KB", "-a", str(path)])
    err = capsys.readouterr().err
    assert done.value.code == 1 and "Traceback" not in err
    assert "invalid program: [protocol] proto='simple' must be one of Simple, LL, LL128" in err


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
    ({"copy_efficiency": {"nvlink": 0}}, "runtime.copy_efficiency.nvlink"),
    ({"net_overhead_us": "2"}, "runtime.net_overhead_us"),
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
def test_every_cited_run_parses_with_its_source() -> None:
    cases = load_cases(FIXTURES)
    assert {c.role for c in cases} == {"calibration", "held-out"}
    readme = (FIXTURES / "README.md").read_text()
    for case in cases:
        rows = published_rows(case)
        assert rows and all(r.busbw_GBps > 0 for r in rows)
        assert case.url.startswith("https://") and case.url.split("/blob/")[0] in readme and case.hardware
        assert case.load_topology(FIXTURES).num_gpus == case.ranks


@pytest.mark.parametrize("change, message", [
    ({"select": ["machines", "1"]}, "select must be an object"),
    ({"algorithms": "ring"}, "algorithms must be a non-empty list"),
    ({"algorithms": ["rings"]}, "algorithms must be a non-empty list"),
    ({"role": "training"}, "role must be one of"),
])
def test_a_bad_manifest_case_is_one_line(tmp_path: Path, change: dict[str, object], message: str) -> None:
    from taccl_py.fidelity import harness_offsets

    raw = json.loads((FIXTURES / "manifest.json").read_text())
    raw["cases"] = [{**raw["cases"][0], **change}]
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match=message):
        load_cases(tmp_path)
    raw["harness"]["one-process-azure-h100"]["launch_offset_us"] = "x"
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match="launch_offset_us must be a number"):
        harness_offsets(tmp_path)


def test_even_and_odd_rows_split_a_log() -> None:
    cases = {c.name: c for c in load_cases(FIXTURES)}
    even = published_rows(cases["A3 Mega 2 x 8 H100 all_reduce, even rows (calibration)"])
    odd = published_rows(cases["A3 Mega 2 x 8 H100 all_reduce, odd rows"])
    assert {r.size_bytes for r in even}.isdisjoint({r.size_bytes for r in odd})
    assert even[0].size_bytes == 64 and odd[0].size_bytes == 128  # 16 ranks: rows below 64 B are skipped


def test_published_tables_give_busbw_or_time(tmp_path: Path) -> None:
    from taccl_py.errors import ProfileInputError
    from taccl_py.profiler.tables import read_timing_table

    rows = read_timing_table(FIXTURES / "mscclpp_ndmv4.csv")
    first = rows[0]  # 1 node allgather, latency at 1 KB: busbw = 1024 B / 12.53 us x 7/8
    assert first.extra["machines"] == "1" and first.busbw(8) == pytest.approx(1024 / 12.53e3 * 7 / 8)
    bad = tmp_path / "t.csv"
    bad.write_text("collective,size_bytes,placement,time_us,busbw_GBps\nallreduce,1024,in-place,,\n")
    with pytest.raises(ProfileInputError, match=r"line 2.*neither"):
        read_timing_table(bad)


MISSED_ROWS = {
    "Azure ND A100 v4 all_reduce (calibration)": {128 << 20},
    "Galvatron 8 x A100 all_reduce": {1 << 20, 2 << 20, 4 << 20, 8 << 20},
    "NDmv4 1 x 8 A100 allreduce (calibration)": set(),
    "NDmv4 1 x 8 A100 allgather (calibration)": set(),
    "NDmv4 1 x 8 A100 alltoall (calibration)": set(),
    "NDmv4 2 x 8 A100 allgather": set(),
    "NDmv4 2 x 8 A100 alltoall, 1 KB and 1 GB": set(),
    "NDmv4 2 x 8 A100 alltoall, 4 GB (calibration)": set(),
    "nccl#527 p4dn 8 x A100 all_reduce": set(),
    "nccl-tests#290 8 x H100 all_reduce": set(),
    "Together 8 x H100 all_reduce (ring, calibration)": set(),
    "Together 8 x H100 all_gather (ring, calibration)": set(),
    "Together 8 x H100 reduce_scatter (ring)": set(),
    "Together 8 x H100 all_reduce (NVLS enabled, NCCL's choice)": {8 << 20},
    "Together 8 x H100 all_reduce (NVLS disabled, NCCL's choice)": set(),
    "Together 8 x H100 all_reduce (ring, earlier session)": {512 << 10},
    "Together 8 x H100 all_gather (NVLS enabled, NCCL's choice)": set(),
    "Together 8 x H100 reduce_scatter (NVLS enabled, NCCL's choice)": set(),
    "DGX Cloud 8 x H100 all_reduce, 64 B..512 KB (per rank, calibration)": {4 << 10},
    "DGX Cloud 8 x H100 all_reduce, 1 MB (per rank)": set(),
    "DGX Cloud 8 x H100 all_reduce, 2 MB..16 GB, even rows (per rank, NVLS, calibration)": set(),
    "DGX Cloud 8 x H100 all_reduce, 2 MB..16 GB, odd rows (per rank, NVLS)": set(),
    "Azure ND H100 v5 all_reduce (NVLS), even rows (calibration)": set(),
    "Azure ND H100 v5 all_reduce (NVLS), odd rows": {8 << 20},
    "nccl-tests#309 2 x 8 H100 all_reduce (ring), 1 MB..32 MB": {1 << e for e in range(20, 25)},
    "nccl-tests#309 2 x 8 H100 all_reduce (ring), 64 MB..8 GB, even rows (calibration)": set(),
    "nccl-tests#309 2 x 8 H100 all_reduce (ring), 64 MB..8 GB, odd rows": {128 << 20},
    "nccl-tests#309 2 x 8 H100 all_reduce, 64 B..256 B (XE9680)": {256},
    "nccl-tests#309 2 x 8 H100 all_reduce, 512 B..256 KB, even rows (XE9680, calibration)": set(),
    "nccl-tests#309 2 x 8 H100 all_reduce, 512 B..256 KB, odd rows (XE9680)": set(),
    "nccl-tests#309 2 x 8 H100 all_reduce, 512 KB..1 MB (XE9680, NVLSTree)": set(),
    "nccl-tests#309 2 x 8 H100 all_reduce, 2 MB..16 GB, even rows (XE9680, NVLSTree, calibration)": {2 << 20},
    "nccl-tests#309 2 x 8 H100 all_reduce, 2 MB..16 GB, odd rows (XE9680, NVLSTree)": set(),
}
"""Per cited run (the quick ones), the sizes whose prediction misses its target, as benchmarks/RESULTS.md reports
them (docs/runtime.md "Limits, stated plainly" says why); every other row is within it."""


def test_the_docs_fidelity_table_is_the_benchmarks() -> None:
    """docs/runtime.md's table of cited runs and its counts say what the committed fidelity benchmark measured
    (benchmarks/results/fidelity.json): rerunning the benchmark without carrying its figures into the docs fails."""
    root = Path(__file__).resolve().parents[1]
    cases = json.loads((root / "benchmarks/results/fidelity.json").read_text())["data"]["cases"]
    doc = (root / "docs/runtime.md").read_text()
    lines = doc.splitlines()
    start = lines.index("| run (source) | hardware | role | met >= 1 MB | met < 1 MB | worst busbw error | target |")
    table = [line for line in lines[start + 2:start + 2 + len(cases) + 1] if line.startswith("| [")]
    assert len(table) == len(cases)
    for line, case in zip(table, cases, strict=True):
        rows = case["rows"]
        large = [r for r in rows if r["size_bytes"] >= 1 << 20]
        small = [r for r in rows if r["size_bytes"] < 1 << 20]
        worst = max(abs(r["error"]) for r in rows if r["error"] is not None)
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        assert cells[0].startswith(f"[{case['name']}]") and cells[2] == case["role"], cells[:3]
        assert cells[3:] == [f"{sum(r['met'] for r in large)} of {len(large)}",
                             f"{sum(r['met'] for r in small)} of {len(small)}", f"{worst:.1%}",
                             "met" if all(r["met"] for r in rows) else "not met"], case["name"]
    words = " ".join(doc.split())
    for role in ("held-out", "calibration"):
        rows = [r for c in cases if c["role"] == role for r in c["rows"]]
        said = re.findall(rf"(\d+) of (\d+) {role} rows", words)
        assert said and set(said) == {(str(sum(r["met"] for r in rows)), str(len(rows)))}, (role, said)
    met = sum(all(r["met"] for r in c["rows"]) for c in cases)
    assert f"**met on {met} of the {len(cases)} cases**" in doc
    twice = [r for c in cases for r in c["rows"] if not r["met"] and r["in_place_busbw_GBps"] is not None]
    apart = sum(r["run_disagrees"] for r in twice)
    near = sum(r["met_in_place_only"] for r in twice)
    rest = [r for r in twice if not r["run_disagrees"] and not r["met_in_place_only"]]
    both = sum(abs(r["in_place_error"]) > r["target"] for r in rest)
    assert (f"{apart} of the {len(twice)} such rows are too far apart; {near} others are within the target of the "
            f"in-place time; of the other {len(rest)}, {both} miss against both times, the model's misses whatever "
            f"the run's spread, and {len(rest) - both} {'is' if len(rest) - both == 1 else 'are'} borderline") in words


@given(out_us=st.floats(1.0, 1e5), in_us=st.floats(1.0, 1e5), size=st.sampled_from([4096, 1 << 20]),
       predicted_us=st.floats(1.0, 1e5))
def test_a_run_that_disagrees_with_itself_is_one_no_prediction_meets_twice(out_us: float, in_us: float, size: int,
                                                                           predicted_us: float) -> None:
    """``run_disagrees`` holds exactly when no predicted busbw is within the row's target of both the out-of-place
    and the in-place measurement; otherwise one in the middle of what each allows meets both."""
    def busbw(t: float) -> float:
        return size / t  # any busbw factor: only ratios matter

    row = FidelityRow(size, busbw(out_us), busbw(predicted_us), "ring", "LL", predicted_us, busbw(in_us))
    assert row.run_spread == pytest.approx(out_us / in_us - 1.0)
    assert row.in_place_error == pytest.approx(in_us / predicted_us - 1.0)
    t = row.target
    low, high = max(busbw(out_us), busbw(in_us)) * (1 - t), min(busbw(out_us), busbw(in_us)) * (1 + t)
    if abs(high - low) > 1e-9 * high:  # not on the boundary
        assert row.run_disagrees == (low > high)
    if not row.run_disagrees:
        middle = replace(row, predicted_busbw=(low + high) / 2)
        assert middle.error is not None and middle.in_place_error is not None
        assert abs(middle.error) <= t * (1 + 1e-9) and abs(middle.in_place_error) <= t * (1 + 1e-9)
    elif row.error is not None and row.in_place_error is not None:
        assert not (abs(row.error) <= t and abs(row.in_place_error) <= t)
    assert not FidelityRow(size, 1.0, 1.0, None, None).run_disagrees  # a table's row: measured once


def test_a_logs_rows_carry_its_in_place_time() -> None:
    """A log's published rows keep the in-place busbw beside the out-of-place one (the 4-machine run's 1 MB row:
    317.0 us out of place, 93.26 in place); a published table has none."""
    cases = {c.name: c for c in load_cases(FIXTURES)}
    row = published_rows(cases["nccl-tests#309 4 x 8 H100 all_reduce, 1 MB"])[0]
    factor = Collective(CollectiveKind.ALLREDUCE, 32).busbw_factor
    assert row.busbw_GBps == pytest.approx((1 << 20) / 317.0 / 1e3 * factor)
    assert row.in_place_busbw_GBps == pytest.approx((1 << 20) / 93.26 / 1e3 * factor)
    assert all(r.in_place_busbw_GBps is None for r in published_rows(cases["Azure ND A100 v4 all_reduce (calibration)"]))


@pytest.mark.slow
def test_published_runs_stay_where_they_were_measured() -> None:
    """Regression: which rows of the cited runs meet the targets, and the error of two multi-machine rows."""
    cases = {c.name: c for c in load_cases(FIXTURES)}
    for name, missed in MISSED_ROWS.items():
        rows = predict_case(cases[name], FIXTURES)
        assert {r.size_bytes for r in rows if not r.met} == missed, name
        if name == "NDmv4 1 x 8 A100 allgather (calibration)":  # the copy share is fitted on its 1 GB row
            assert next(r.error for r in rows if r.size_bytes == 1 << 30) == pytest.approx(0.0, abs=0.01)
    rows = predict_case(cases["nccl-tests#119 3 x 8 A100 all_reduce"], FIXTURES, max_rows=1)
    assert rows[0].error == pytest.approx(-0.031, abs=0.01) and rows[0].proto == "Simple"
    two = predict_case(cases["NDmv4 2 x 8 A100 allreduce (calibration)"], FIXTURES, max_rows=1)
    assert two[0].error == pytest.approx(0.04, abs=0.01) and two[0].algorithm == "tree"
    nvls = predict_case(cases["Azure ND H100 v5 all_reduce (NVLS), odd rows"], FIXTURES)
    assert {(r.algorithm, r.proto) for r in nvls} == {("nvls", "Simple")}
    one = predict_case(cases["DGX Cloud 8 x H100 all_reduce, 1 MB (per rank)"], FIXTURES)
    assert (one[0].algorithm, one[0].proto) == ("ring", "LL128") and one[0].met  # the model's choice (docs: Limits)


# ------------------------------------------------------------------------ taccl profile fit --runtime
def _nccl_tests_text(times: list[tuple[int, float]], ranks: int, binary: str = "all_reduce_perf",
                     in_place: dict[int, float] | None = None) -> str:
    """An nccl-tests log of ``binary`` (its layout; busbw as all_reduce_perf's) with the given out-of-place times
    (in place the same, or ``in_place``'s time for its sizes)."""
    lines = [f"# Collective test starting: {binary}",
             f"# nThread 1 nGpus 1 minBytes {times[0][0]} maxBytes {times[-1][0]} step: 2(factor) warmup iters: 5 "
             "iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {100 + r} on host device {r} [0x{r:02x}] NVIDIA Test GPU"
              for r in range(ranks)]
    lines += ["#", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time "
              "  algbw   busbw #wrong"]
    for size, t in times:
        algbw = size / t / 1e3
        busbw = algbw * 2 * (ranks - 1) / ranks
        t_in = (in_place or {}).get(size, t)
        algbw_in = size / t_in / 1e3
        busbw_in = algbw_in * 2 * (ranks - 1) / ranks
        lines.append(f"{size:12d} {size // 4:13d}     float     sum      -1 {t:8.2f} {algbw:7.2f} {busbw:7.2f}      0 "
                     f"{t_in:8.2f} {algbw_in:7.2f} {busbw_in:7.2f}      0")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.0", "#"]
    return "\n".join(lines) + "\n"


def _predicted_us(topo: Topology, kind: CollectiveKind, size: int, model: RuntimeModel) -> float:
    """What NCCL is predicted to take under ``model``, to nccl-tests' 2 decimals (a simulated measurement)."""
    from taccl_py.predict import predict_nccl

    found = predict_nccl(topo, kind, size, model)
    assert found is not None and found[1].sim.time_us is not None
    return round(found[1].sim.time_us, 2)


def _start_file(tmp_path: Path, topo: Topology) -> Path:
    """``topo`` with a start runtime model (NVLink share 0.9, 8 channels, tuning.cc's latencies) as a file."""
    start = tmp_path / "star.json"
    start.write_text(json.dumps({**topology_to_dict(topo), "runtime": {"name": "start", "efficiency": {"nvlink": 0.9},
                                                                       "channels": 8}}))
    return start


@pytest.mark.slow
def test_runtime_fit_recovers_the_model_that_made_the_log(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A log simulated from a known runtime model is fitted back to that model's figures (hand-set truth)."""
    from taccl_py.runtime import NCCL_HOP_LATENCY_US

    topo = switch_star(4, 100.0, 0.5)
    hops = {c: dict(v) for c, v in NCCL_HOP_LATENCY_US.items()}
    hops["nvlink"] = {Protocol.LL: 0.9, Protocol.LL128: 2.5, Protocol.SIMPLE: 6.0}
    truth = RuntimeModel(name="truth", efficiency={"nvlink": 0.7}, channels=8, hop_latency_us=hops,
                         launch_us={Protocol.LL: 15.6, Protocol.LL128: 22.0, Protocol.SIMPLE: 20.4})  # tuning.cc + 12
    log = tmp_path / "all_reduce.log"
    log.write_text(_nccl_tests_text([(1 << e, _predicted_us(topo, CollectiveKind.ALLREDUCE, 1 << e, truth))
                                     for e in range(10, 29)], 4))
    start = _start_file(tmp_path, topo)
    data = json.loads(start.read_text())
    data["runtime"]["sources"] = ["nvlink (the start's guess)", "pci: untouched"]
    start.write_text(json.dumps(data))
    out = tmp_path / "fitted.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", str(log), "--into", str(start), "-o", str(out), "--json"])
    assert exit_info.value.code == 0
    report = json.loads(capsys.readouterr().out)
    sources = json.loads(out.read_text())["runtime"]["sources"]  # the refitted class's old source line goes
    assert sources[0] == "pci: untouched" and len(sources) == 2 and sources[1].startswith("nvlink: fitted by")
    figures = report["fit"]["figures"]
    assert figures["launch"] == pytest.approx(12.0, abs=0.5)
    assert figures["hop LL"] == pytest.approx(0.9, abs=0.1)
    assert figures["hop LL128"] == pytest.approx(2.5, abs=0.2)
    # Simple runs only from 16 MB on, where its 14 steps are a fifth of the time: the weak pull toward the
    # starting efficiency (0.9) is worth a little of it
    assert figures["hop Simple"] == pytest.approx(6.0, abs=1.0)
    assert figures["efficiency"] == pytest.approx(0.7, rel=0.01)
    assert report["fit"]["rms_error"] < 0.01
    fitted = json.loads(out.read_text())["runtime"]
    assert fitted["efficiency"]["nvlink"] == pytest.approx(0.7, rel=0.01)
    assert fitted["fitted"]["files"] == [str(log)] and fitted["name"] == "start+fit"
    back = runtime_from_dict(fitted, where="fitted.json")  # the written object loads again
    assert back.launch_us[Protocol.SIMPLE] == pytest.approx(20.4, abs=0.5)


@pytest.mark.slow
def test_runtime_fit_tells_the_harness_from_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A one-process log 12 us slower than the model, fitted with per-rank rows of the same model: the 12 us is
    the harness's (reported, not written into the model), and the model keeps tuning.cc's launch overheads."""
    from taccl_py.runtime import NCCL_BASE_LATENCY_US, NCCL_HOP_LATENCY_US

    topo = switch_star(4, 100.0, 0.5)
    hops = {c: dict(v) for c, v in NCCL_HOP_LATENCY_US.items()}
    hops["nvlink"] = {Protocol.LL: 0.9, Protocol.LL128: 2.5, Protocol.SIMPLE: 6.0}
    truth = RuntimeModel(name="truth", efficiency={"nvlink": 0.7}, channels=8, hop_latency_us=hops)

    def time_of(size: int) -> float:
        return _predicted_us(topo, CollectiveKind.ALLREDUCE, size, truth)

    log = tmp_path / "all_reduce.log"
    log.write_text(_nccl_tests_text([(1 << e, time_of(1 << e) + 12.0) for e in range(10, 29)], 4))
    table = tmp_path / "per_rank.csv"
    table.write_text("collective,size_bytes,placement,time_us,busbw_GBps,machines\n"
                     + "".join(f"allreduce,{1 << e},in-place,{time_of(1 << e)},,{m}\n" for e in (10, 12, 20, 24)
                               for m in (1, 2)))  # the machines=2 rows are another run: --select drops them
    start = _start_file(tmp_path, topo)
    out = tmp_path / "fitted.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", str(log), "--per-rank", str(table), "--select", "machines=1",
              "--algorithm", "ring", "--algorithm", "tree", "--into", str(start), "-o", str(out), "--json"])
    assert exit_info.value.code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fit"]["harness_launch_offset_us"] == pytest.approx(12.0, abs=0.5)
    assert sum(r["per_rank"] for r in report["rows"]) == 4 and report["fit"]["select"] == {"machines": "1"}
    assert report["fit"]["algorithms"] == ["ring", "tree"]
    assert report["fit"]["rms_error"] < 0.03
    fitted = json.loads(out.read_text())["runtime"]
    assert fitted["launch_us"] == {p.value: v for p, v in NCCL_BASE_LATENCY_US.items()}  # the offset stays out
    assert fitted["hop_latency_us"]["nvlink"]["LL"] == pytest.approx(0.9, abs=0.1)
    with pytest.raises(SystemExit) as exit_info:  # a malformed selection is one line, status 2
        main(["profile", "fit", "--runtime", str(log), "--select", "machines", "--into", str(start), "-o", str(out)])
    assert exit_info.value.code == 2 and "--select" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # a mistyped column selects nothing: refused, not ignored
        main(["profile", "fit", "--runtime", str(log), "--per-rank", str(table), "--select", "machine=1",
              "--into", str(start), "-o", str(out)])
    assert exit_info.value.code == 2 and "no published table read has a column 'machine'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # NCCL_ALGO=NVLS on a machine without NVLink SHARP
        main(["profile", "fit", "--runtime", str(log), "--algorithm", "nvls", "--into", str(start), "-o", str(out)])
    assert exit_info.value.code == 2 and "no NCCL algorithm among nvls" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # --per-rank is a --runtime option
        main(["profile", "fit", str(log), "--per-rank", str(table)])
    assert exit_info.value.code == 2 and "--per-rank applies to --runtime" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # the harness's cost known from elsewhere: given, not fitted
        main(["profile", "fit", "--runtime", str(log), "--harness-offset", "12", "--algorithm", "ring",
              "--into", str(start), "-o", str(out), "--json"])
    assert exit_info.value.code == 0
    given = json.loads(capsys.readouterr().out)["fit"]
    assert given["harness_launch_offset_us"] == 12.0 and given["harness_offset_given"] is True
    assert "launch" not in given["fitted"] and given["rms_error"] < 0.03
    fitted = json.loads(out.read_text())["runtime"]
    assert fitted["launch_us"] == {p.value: v for p, v in NCCL_BASE_LATENCY_US.items()}  # kept out of the model
    assert fitted["hop_latency_us"]["nvlink"]["LL"] == pytest.approx(0.9, abs=0.1)
    for bad in (["--runtime", "--per-rank", str(table), "--harness-offset", "12", "--into", str(start), "-o", str(out)],
                [str(log), "--harness-offset", "12"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["profile", "fit", *bad])
        assert exit_info.value.code == 2 and "--harness-offset" in capsys.readouterr().err


@pytest.mark.slow
def test_a_fit_of_copies_only_fits_the_copy_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Allgather rows only: the share fitted is ``copy_efficiency``; the reductions' ``efficiency`` stays."""
    topo = switch_star(4, 100.0, 0.5)
    truth = RuntimeModel(name="truth", efficiency={"nvlink": 0.9}, copy_efficiency={"nvlink": 0.8}, channels=8)
    log = tmp_path / "all_gather.log"
    log.write_text(_nccl_tests_text([(1 << e, _predicted_us(topo, CollectiveKind.ALLGATHER, 1 << e, truth))
                                     for e in range(10, 29, 2)], 4, "all_gather_perf"))
    start = _start_file(tmp_path, topo)
    out = tmp_path / "fitted.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", str(log), "--collective", "allgather", "--into", str(start), "-o",
              str(out), "--json"])
    assert exit_info.value.code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fit"]["figures"]["copy efficiency"] == pytest.approx(0.8, rel=0.02)
    assert "efficiency" not in report["fit"]["figures"]
    fitted = json.loads(out.read_text())["runtime"]
    assert fitted["copy_efficiency"]["nvlink"] == pytest.approx(0.8, rel=0.02)
    assert fitted["efficiency"]["nvlink"] == 0.9


@pytest.mark.slow
def test_runtime_fit_tells_ll_launch_and_the_copy_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Per-rank rows running LL over 6 ring steps (Allreduce), 3 (Allgather) and one point-to-point step (Alltoall)
    tell LL's launch latency from its per-step latency; with copies next to reductions both shares are fitted."""
    from taccl_py.errors import ProfileInputError
    from taccl_py.profiler.runtime_fit import read_timed_rows
    from taccl_py.runtime import NCCL_BASE_LATENCY_US, NCCL_HOP_LATENCY_US

    topo = switch_star(4, 100.0, 0.5)
    hops = {c: dict(v) for c, v in NCCL_HOP_LATENCY_US.items()}
    hops["nvlink"] = {Protocol.LL: 0.6, Protocol.LL128: 2.5, Protocol.SIMPLE: 6.0}
    truth = RuntimeModel(name="truth", efficiency={"nvlink": 0.7}, copy_efficiency={"nvlink": 0.8}, channels=8,
                         hop_latency_us=hops, launch_us={**NCCL_BASE_LATENCY_US, Protocol.LL: 8.6})
    log = tmp_path / "all_reduce.log"
    log.write_text(_nccl_tests_text([(1 << e, _predicted_us(topo, CollectiveKind.ALLREDUCE, 1 << e, truth) + 12.0)
                                     for e in range(10, 29, 2)], 4))
    kinds = (CollectiveKind.ALLREDUCE, CollectiveKind.ALLGATHER, CollectiveKind.ALLTOALL, CollectiveKind.BROADCAST)
    table = tmp_path / "per_rank.csv"
    table.write_text("collective,size_bytes,placement,time_us,busbw_GBps\n" + "".join(
        f"{k.value},{size},in-place,{_predicted_us(topo, k, size, truth)},\n" for k in kinds for size in (1024, 1 << 30)))
    assert len(read_timed_rows([], topo, per_rank=[str(table)], collective="allgather,alltoall")[0]) == 4
    for listed in ("allgather,alltoall", "allgather"):  # the log ran all_reduce_perf: its run is not relabelled
        with pytest.raises(ProfileInputError, match="no run of the log is among --collective"):
            read_timed_rows([str(log)], topo, collective=listed)
    start = _start_file(tmp_path, topo)
    out = tmp_path / "fitted.json"
    with pytest.raises(SystemExit) as exit_info:  # the broadcast rows are left out by --collective
        main(["profile", "fit", "--runtime", str(log), "--per-rank", str(table), "--collective",
              "allreduce,allgather,alltoall", "--into", str(start), "-o", str(out), "--json"])
    assert exit_info.value.code == 0
    report = json.loads(capsys.readouterr().out)
    figures = report["fit"]["figures"]
    assert len(report["rows"]) == 10 + 6 and {"launch LL", "copy efficiency"} <= set(report["fit"]["fitted"])
    assert figures["launch LL"] == pytest.approx(8.6 - NCCL_BASE_LATENCY_US[Protocol.LL], abs=0.3)
    assert figures["hop LL"] == pytest.approx(0.6, abs=0.1)
    assert figures["copy efficiency"] == pytest.approx(0.8, rel=0.02)
    assert figures["efficiency"] == pytest.approx(0.7, rel=0.02)
    assert report["fit"]["harness_launch_offset_us"] == pytest.approx(12.0, abs=0.5)
    fitted = json.loads(out.read_text())["runtime"]
    assert fitted["launch_us"]["LL"] == pytest.approx(8.6, abs=0.3)
    assert fitted["launch_us"]["Simple"] == NCCL_BASE_LATENCY_US[Protocol.SIMPLE]  # the harness's offset stays out
    assert fitted["copy_efficiency"]["nvlink"] == pytest.approx(0.8, rel=0.02)
    with pytest.raises(SystemExit) as exit_info:  # one per-rank step count: LL's launch cannot be told apart
        main(["profile", "fit", "--runtime", str(log), "--per-rank", str(table), "--collective", "allreduce",
              "--into", str(start), "-o", str(out), "--json"])
    assert exit_info.value.code == 0
    assert not {"launch LL", "copy efficiency"} & set(json.loads(capsys.readouterr().out)["fit"]["figures"])


@pytest.mark.slow
def test_runtime_fit_on_a_published_log_improves_on_the_start() -> None:
    """The Galvatron 8 x A100 log (every other row, one iteration): the fitted figures describe it better."""
    from taccl_py.profiler.runtime_fit import fit_runtime, read_timed_rows

    topo = resolve_topology("dgx-a100")
    rows, inputs, _ = read_timed_rows([str(FIXTURES / "galvatron_a100x8_all_reduce.log")], topo, rows_kept="even")
    assert [r.size_bytes for r in rows] == [1 << k for k in range(20, 31, 2)] and "8 ranks" in inputs[0]
    start = fit_runtime(topo, rows, max_iterations=0)
    fitted = fit_runtime(topo, rows, max_iterations=1)
    assert fitted.rms_error < start.rms_error
    assert fitted.rms_error < 0.2 and 0.5 < fitted.figures["efficiency"] <= 1.0


@given(st.integers(1, 1 << 40), st.integers(1, 1 << 40))
def test_size_bounds_read_both_ends(a: int, b: int) -> None:
    from taccl_py.units import format_bytes, parse_size_bounds

    lo, hi = min(a, b), max(a, b)
    assert parse_size_bounds(f"{lo}:{hi}") == (lo, hi) and parse_size_bounds(str(hi)) == (hi, hi)
    if lo < hi:
        with pytest.raises(InputError, match="lower end above"):
            parse_size_bounds(f"{hi}:{lo}")
    if lo.bit_count() == 1:  # a power of two reads back from its short form (1KB, 64MB)
        assert parse_size_bounds(format_bytes(lo)) == (lo, lo)


def test_a_file_names_the_algorithms_its_runs_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``FILE[@LO:HI]#ALGO[,ALGO]``: that file's rows are fitted as those algorithms (its ``NCCL_ALGO``), the
    others as NCCL's choice (or ``--algorithm``); an unknown name is one line naming the file."""
    from taccl_py.errors import ProfileInputError
    from taccl_py.profiler.runtime_fit import fit_runtime, read_timed_rows, split_algorithm_qualifier

    topo = switch_star(4, 100.0, 0.5)
    log = tmp_path / "all_reduce.log"
    log.write_text(_nccl_tests_text([(1 << e, 10.0 + e) for e in range(4, 21)], 4))
    assert split_algorithm_qualifier(f"{log}@1KB:64KB#ring,tree") == (f"{log}@1KB:64KB", ("ring", "tree"))
    assert split_algorithm_qualifier(str(log)) == (str(log), None)
    odd = tmp_path / "run#2.log"  # an existing name is taken whole, even with a # in it
    odd.write_text(log.read_text())
    assert split_algorithm_qualifier(str(odd)) == (str(odd), None)
    assert split_algorithm_qualifier(f"{odd}@1KB:4KB") == (f"{odd}@1KB:4KB", None)  # its # is the name's
    assert split_algorithm_qualifier(f"{odd}@1KB:4KB#tree") == (f"{odd}@1KB:4KB", ("tree",))
    rows, inputs, _ = read_timed_rows([f"{log}#tree"], topo, per_rank=[f"{log}@1KB:4KB"])
    assert {r.algorithms for r in rows if r.offset} == {("tree",)} and inputs[0].endswith("algorithm tree")
    assert {r.algorithms for r in rows if not r.offset} == {None}
    start = topology_from_dict(json.loads(_start_file(tmp_path, topo).read_text())).runtime
    fit = fit_runtime(topo, rows, base=start, max_iterations=1, algorithms=("ring",))
    assert {f.algorithm for f in fit.rows if f.row.offset} == {"tree"}  # the file's own, not --algorithm's
    assert {f.algorithm for f in fit.rows if not f.row.offset} == {"ring"}
    for bad in (f"{log}#sharp", f"{log}#", f"{log}#ring,,tree", f"{log}#ring@1KB:4KB"):
        with pytest.raises(ProfileInputError, match="unknown algorithm") as error:
            read_timed_rows([bad], topo)
        assert error.value.where == bad
    with pytest.raises(ProfileInputError, match="give @LO:HI before #ALGO"):
        read_timed_rows([f"{log}#ring@1KB:4KB"], topo)
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", f"{log}#ring,nope", "--into", str(_start_file(tmp_path, topo)), "-o",
              str(tmp_path / "out.json")])
    assert exit_info.value.code == 2 and "unknown algorithm nope after #" in capsys.readouterr().err


def test_a_fit_under_nccl_proto_leaves_the_other_protocols_alone(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``--protocol`` (the runs' NCCL_PROTO): every row is fitted as one of those protocols, and the figures of the
    others (their per-step latencies, LL's launch, the LL128 cap) are neither fitted nor moved; it is a --runtime
    option of the link classes only, and ``profile check`` takes it too."""
    from taccl_py.profiler.runtime_fit import fit_runtime, read_timed_rows

    topo = switch_star(4, 100.0, 0.5)
    log = tmp_path / "all_reduce.log"
    log.write_text(_nccl_tests_text([(1 << e, 30.0 + (1 << e) / 2e4) for e in range(4, 24, 2)], 4))
    start_file = _start_file(tmp_path, topo)
    start = topology_from_dict(json.loads(start_file.read_text())).runtime
    assert start is not None
    rows, _, _ = read_timed_rows([str(log)], topo)
    free = fit_runtime(topo, rows, base=start, max_iterations=1)
    assert {f.protocol for f in free.rows} - {"Simple"} and "ll128 channels" in free.fitted  # what is held back
    fit = fit_runtime(topo, rows, base=start, max_iterations=2, protocols=(Protocol.SIMPLE,))
    assert {f.protocol for f in fit.rows} == {"Simple"}
    assert not {"hop LL", "hop LL128", "ll128 channels", "launch LL"} & set(fit.fitted)
    assert {"hop Simple", "efficiency"} <= set(fit.fitted)
    for p in (Protocol.LL, Protocol.LL128):
        assert fit.model.hop_latency_us["nvlink"][p] == start.hop_latency_us["nvlink"][p]
    assert (fit.model.ll128_channels or fit.model.channels) == (start.ll128_channels or start.channels)
    launch_ll = fit.model.launch_us[Protocol.LL] - fit.model.launch_us[Protocol.SIMPLE]
    assert launch_ll == pytest.approx(start.launch_us[Protocol.LL] - start.launch_us[Protocol.SIMPLE])
    assert fit.model.protocols == (Protocol.SIMPLE,)  # the model keeps to what its runs ran
    assert not any("run fastest with LL" in w for w in fit.warnings)  # no warning about what the runs could not run
    out = tmp_path / "fitted.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", str(log), "--protocol", "Simple", "--into", str(start_file), "-o",
              str(out), "--json"])
    assert exit_info.value.code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fit"]["protocols"] == ["Simple"] and {r["proto"] for r in report["rows"]} == {"Simple"}
    assert json.loads(out.read_text())["runtime"]["protocols"] == ["Simple"]
    with pytest.raises(SystemExit) as exit_info:  # a model that keeps to Simple is not refitted as LL
        main(["profile", "fit", "--runtime", str(log), "--protocol", "LL", "--into", str(out), "-o",
              str(tmp_path / "again.json")])
    assert exit_info.value.code == 2 and "allows Simple (NCCL_PROTO), none of LL" in capsys.readouterr().err
    for args, message in ((["profile", "fit", str(log), "--protocol", "LL"], "--protocol applies to --runtime"),
                          (["profile", "fit", "--runtime", str(log), "--class", "nvls", "--protocol", "Simple",
                            "--into", str(start_file), "-o", str(out)], "--protocol applies to the nvlink, pci and net"),
                          (["profile", "fit", "--runtime", str(log), "--protocol", "LL9", "--into", str(start_file),
                            "-o", str(out)], "LL9")):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    start_all = tmp_path / "start-all.json"  # the start model, every protocol: the check picks LL or LL128 there
    start_all.write_text(start_file.read_text())
    protos = {}
    for name, extra in (("free", []), ("simple", ["--protocol", "simple"])):  # NCCL_PROTO's case does not matter
        with pytest.raises(SystemExit) as exit_info:
            main(["profile", "check", f"{log}@64B:4KB", "-t", str(start_all), *extra, "--json"])
        assert exit_info.value.code == 0
        checked = json.loads(capsys.readouterr().out)
        protos[name] = {r["proto"] for f in checked["files"] for r in f["rows"]}
    assert protos["simple"] == {"Simple"} and protos["free"] - {"Simple"}
    with pytest.raises(SystemExit) as exit_info:  # the model fitted on Simple runs keeps to Simple
        main(["profile", "check", f"{log}@64B:4KB", "-t", str(out), "--protocol", "LL"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("taccl: error: --protocol: ") and "allows Simple only" in err
    with pytest.raises(SystemExit) as exit_info:  # refitting it keeps to Simple, and says so
        main(["profile", "fit", "--runtime", str(log), "--into", str(out), "-o", str(tmp_path / "again.json"), "--json"])
    assert exit_info.value.code == 0
    again = json.loads(capsys.readouterr().out)
    assert again["fit"]["protocols"] == ["Simple"] and any("--into's own protocols" in w for w in again["warnings"])


@pytest.mark.slow
def test_a_network_fit_keeps_the_model_wide_ll128_cap() -> None:
    """The LL128 cap is the channels one GPU drives, on every class: a fit of the network leaves it where the
    NVLink fit put it, even where capping LL128 would describe the rows better (here: LL128 rows far slower than
    the model's), and says nothing about it."""
    from taccl_py.profiler.runtime_fit import TimedRow, default_link_class, fit_runtime, gpu_link_class

    topo = resolve_topology("dgx-a100x2")
    assert topo.runtime is not None
    assert gpu_link_class(topo) == "nvlink" and default_link_class(topo) == "net"
    assert gpu_link_class(switch_star(4, 100.0, 0.5)) == default_link_class(switch_star(4, 100.0, 0.5))
    rows = [TimedRow(CollectiveKind.ALLREDUCE, size, t, offset=False) for size, t in ((1 << 20, 400.0),
                                                                                      (1 << 23, 1500.0))]
    fit = fit_runtime(topo, rows, link_class="net", max_iterations=2)
    assert fit.model.ll128_channels == topo.runtime.ll128_channels
    assert "ll128 channels" not in fit.fitted and not any("LL128 bandwidth cap" in w for w in fit.warnings)


def test_a_file_keeps_the_sizes_after_its_at_sign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``FILE@LO:HI`` fits a log's rows of those sizes only (e.g. those run with the algorithm fitted); a range
    that keeps nothing, a bad range or a missing file is one line naming it."""
    from taccl_py.errors import ProfileInputError
    from taccl_py.profiler.runtime_fit import read_timed_rows, split_size_qualifier

    topo = switch_star(4, 100.0, 0.5)
    log = tmp_path / "all_reduce.log"
    log.write_text(_nccl_tests_text([(1 << e, 10.0 + e) for e in range(3, 21)], 4))
    whole, _, _ = read_timed_rows([str(log)], topo)
    part, inputs, _ = read_timed_rows([], topo, per_rank=[f"{log}@1KB:64KB"])
    assert [r.size_bytes for r in part] == [1 << e for e in range(10, 17)] and len(whole) == 17  # 8 B: < 1 / rank
    assert all(not r.offset for r in part) and inputs[0].endswith("one GPU per process, sizes 1KB..64KB")
    assert [r.time_us for r in part] == [r.time_us for r in whole if 1 << 10 <= r.size_bytes <= 1 << 16]
    assert split_size_qualifier(str(log)) == (str(log), None)
    odd = tmp_path / "run@2.log"  # an existing name is taken whole, even with an @ in it
    odd.write_text(log.read_text())
    assert split_size_qualifier(str(odd)) == (str(odd), None)
    assert split_size_qualifier(f"{odd}@4KB") == (str(odd), (4096, 4096))
    with pytest.raises(ProfileInputError, match="no row of the run is in the size range"):
        read_timed_rows([f"{log}@2MB:4MB"], topo)
    with pytest.raises(ProfileInputError, match="no row of the run is left"):  # in range, but 4 ranks need 16 B
        read_timed_rows([f"{log}@8:8"], topo)
    odd_rows, _, _ = read_timed_rows([f"{log}@1KB:64KB"], topo, rows_kept="odd")  # alternates from the range's start
    assert [r.size_bytes for r in odd_rows] == [1 << e for e in (11, 13, 15)]
    with pytest.raises(ProfileInputError, match="no row of the run is left"):
        read_timed_rows([f"{log}@1KB"], topo, rows_kept="odd")
    table = tmp_path / "per_rank.csv"
    table.write_text("collective,size_bytes,placement,time_us,busbw_GBps\n"
                     + "".join(f"allreduce,{1 << e},in-place,{10.0 + e},\n" for e in range(10, 21)))
    kept, _, _ = read_timed_rows([f"{table}@4KB:16KB"], topo)
    assert [r.size_bytes for r in kept] == [4096, 8192, 16384]
    with pytest.raises(ProfileInputError, match="and the sizes after @"):
        read_timed_rows([f"{table}@4GB:8GB"], topo)
    with pytest.raises(InputError, match="lower end above its upper end"):
        read_timed_rows([f"{log}@64KB:1KB"], topo)
    with pytest.raises(ProfileInputError, match="no such file") as missing:
        read_timed_rows([f"{tmp_path / 'missing.log'}@1KB:2KB"], topo)
    assert missing.value.where == str(tmp_path / "missing.log")
    with pytest.raises(SystemExit) as exit_info:  # a link fit takes whole files
        main(["profile", "fit", f"{log}@1KB:2KB"])
    assert exit_info.value.code == 2 and "applies to --runtime fits only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", f"{log}@1KB:xx", "--into", str(_start_file(tmp_path, topo)), "-o",
              str(tmp_path / "out.json")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "sizes after @" in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out.json").exists()


def test_a_case_keeps_its_sizes_and_names_its_host_harness(tmp_path: Path) -> None:
    """A log split by size into a calibration and a held-out case; a case's harness is per-rank or one the
    manifest names (a host whose -g 8 cost was fitted), anything else is refused."""
    from taccl_py.fidelity import harness_hosts, harness_offsets
    from taccl_py.harness import OverlappedHost

    cases = {c.name: c for c in load_cases(FIXTURES)}
    small = published_rows(cases["DGX Cloud 8 x H100 all_reduce, 64 B..512 KB (per rank, calibration)"])
    one = published_rows(cases["DGX Cloud 8 x H100 all_reduce, 1 MB (per rank)"])
    even = published_rows(cases["DGX Cloud 8 x H100 all_reduce, 2 MB..16 GB, even rows (per rank, NVLS, calibration)"])
    odd = published_rows(cases["DGX Cloud 8 x H100 all_reduce, 2 MB..16 GB, odd rows (per rank, NVLS)"])
    assert [r.size_bytes for r in small] == [64 << k for k in range(14)] and [r.size_bytes for r in one] == [1 << 20]
    assert [r.size_bytes for r in even] == [2 << k for k in range(20, 34, 2)]  # sizes first, then every other row
    assert [r.size_bytes for r in odd] == [4 << k for k in range(20, 34, 2)]
    offsets, hosts = harness_offsets(FIXTURES), harness_hosts(FIXTURES)
    assert offsets == {"per-rank": 0.0, "one-process-azure-h100": 0.51}
    assert hosts == {"one-process": OverlappedHost(42.81, 0.32),  # these hosts overlap the GPUs' work
                     "one-process-together": OverlappedHost(35.51, 0.2174)}
    together = predict_case(cases["Together 8 x H100 all_reduce (ring, calibration)"], FIXTURES)
    assert [r.predicted_us for r in together[:3]] == [pytest.approx(35.51 + 0.2174)] * 3  # one channel: the host's
    assert together[-1].predicted_us > 10 * 35.51  # 8 GB: the GPUs' time, nothing added
    assert cases["Together 8 x H100 reduce_scatter (ring)"].harness == "one-process-together"
    raw = json.loads((FIXTURES / "manifest.json").read_text())
    first = raw["cases"][0]
    a3 = cases["A3 Mega 2 x 8 H100 all_reduce, odd rows"]  # NCCL_ALGO=Ring,Tree NCCL_PROTO=Simple, run as the tree
    assert a3.protocols == (Protocol.SIMPLE,) and a3.algorithms == ("tree",)
    a3_model = a3.load_topology(FIXTURES).runtime
    assert a3_model is not None and a3_model.simple_buffer_bytes == 8 << 20 and a3_model.protocols == (Protocol.SIMPLE,)
    row = predict_case(replace(a3, protocols=None, algorithms=None), FIXTURES, max_rows=1)[0]
    assert (row.algorithm, row.proto) == ("tree", "Simple")  # the model's own protocols, without the case's
    assert cases["Galvatron 8 x A100 all_reduce"].protocols is None
    for change, message in (({"harness": "one-process-elsewhere"}, "harness must be per-rank or a name"),
                            ({"protocols": ["LL9"]}, "protocols must be a non-empty list of"),
                            ({"protocols": []}, "protocols must be a non-empty list of"),
                            ({"sizes": "1MB:1KB"}, r"^\S*manifest.json: cases\[0\]: sizes: range '1MB:1KB' has"),
                            ({"sizes": 1024}, "sizes must be a range")):
        raw["cases"] = [{**first, **change}]
        (tmp_path / "manifest.json").write_text(json.dumps(raw))
        with pytest.raises(InputError, match=message):
            load_cases(tmp_path)
    raw["cases"] = [{**first, "sizes": "1TB:1TB"}]  # a range that keeps no published row
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    (tmp_path / first["table"]).write_text((FIXTURES / first["table"]).read_text())
    with pytest.raises(InputError, match="no published row is kept"):
        published_rows(load_cases(tmp_path)[0])
    raw["harness"]["per-rank"] = {"launch_offset_us": 3.0}
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match="a name other than per-rank"):
        harness_offsets(tmp_path)
    del raw["harness"]["per-rank"]
    for entry, message in (({"launch_offset_us": 3.0, "host_us": 30.0}, "with launch_offset_us, or host_us"),
                           ({"host_us": -1}, "host_us must be a number of us"),
                           ({"host_us": 30.0, "host_per_channel_us": "x"}, "host_per_channel_us must be"),
                           ({"host_us": 30.0, "host_per_channel": 0.2}, "unknown key.s. host_per_channel"),
                           ({"launch_offset_us": 3.0, "host_per_channel_us": 0.2}, "unknown key.s. host_per_channel_us")):
        raw["harness"]["elsewhere"] = entry
        (tmp_path / "manifest.json").write_text(json.dumps(raw))
        with pytest.raises(InputError, match=message):
            harness_offsets(tmp_path)


def test_runtime_fit_overlaps_the_harness_with_the_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A one-process log whose host (30 us + 0.5 us a channel) overlaps the GPUs' work: the figures are fitted on
    the per-rank rows, then the host's two costs on the log, where the host binds; none of it enters the model."""
    from taccl_py.fidelity import predict_row
    from taccl_py.harness import OverlappedHost
    from taccl_py.predict import predict_nccl
    from taccl_py.profiler.runtime_fit import fit_overlapped_host, read_timed_rows
    from taccl_py.runtime import NCCL_BASE_LATENCY_US, nccl_channels

    topo = switch_star(4, 100.0, 0.5)
    truth = RuntimeModel(name="truth", efficiency={"nvlink": 0.7}, channels=8)
    host = OverlappedHost(30.0, 0.5)

    def times(size: int) -> tuple[float, float]:
        found = predict_nccl(topo, CollectiveKind.ALLREDUCE, size, truth)
        assert found is not None and found[1].sim.time_us is not None
        gpu = found[1].sim.time_us
        used = nccl_channels(found[0], found[1].protocol, size, 4, truth.channels)
        return round(gpu, 2), round(host.time_us(gpu, used), 2)

    sizes = [1 << e for e in range(10, 29)]
    measured = {s: times(s) for s in sizes}
    assert sum(m > g for g, m in measured.values()) >= 6  # the host binds the small sizes ...
    assert measured[1 << 28][0] == measured[1 << 28][1]  # ... and hides under the GPUs at the large ones
    log = tmp_path / "all_reduce.log"
    log.write_text(_nccl_tests_text([(s, measured[s][1]) for s in sizes], 4).replace("nGpus 1", "nGpus 4"))
    per_rank = tmp_path / "per_rank.log"
    per_rank.write_text(_nccl_tests_text([(s, measured[s][0]) for s in sizes], 4))
    rows, _, _ = read_timed_rows([str(log)], topo)
    fit = fit_overlapped_host(topo, truth, rows)
    assert fit.host.host_us == pytest.approx(30.0, abs=0.3) and fit.host.per_channel_us == pytest.approx(0.5, abs=0.05)
    assert fit.max_error < 0.01 and sum(fit.host_bound) == sum(m > g for g, m in measured.values())
    row = predict_row(topo, truth, CollectiveKind.ALLREDUCE, 1024, 1.0, host=fit.host)
    assert row.predicted_us == pytest.approx(measured[1024][1], rel=0.01)  # the fidelity table's overlapped row

    start = _start_file(tmp_path, topo)
    out = tmp_path / "fitted.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", str(log), "--per-rank", str(per_rank), "--overlap", "--into", str(start),
              "-o", str(out), "--json"])
    assert exit_info.value.code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fit"]["harness_host"]["host_us"] == pytest.approx(30.0, abs=1.0)
    assert report["fit"]["harness_host"]["per_channel_us"] == pytest.approx(0.5, abs=0.1)
    assert "harness_launch_offset_us" not in report["fit"] and report["fit"]["rms_error"] < 0.03
    assert sum(r.get("host_bound", False) for r in report["rows"]) >= 6 and not report["warnings"]
    fitted = json.loads(out.read_text())["runtime"]
    assert fitted["launch_us"] == {p.value: v for p, v in NCCL_BASE_LATENCY_US.items()}  # the host stays out
    small = [r for r in rows if r.size_bytes <= 8 << 10]  # one channel each: the per-channel cost is not told
    alone = fit_overlapped_host(topo, truth, small)
    assert alone.host.per_channel_us == 0.0 and alone.host.host_us == pytest.approx(30.5, abs=0.3)
    assert len(alone.warnings) == 1 and "all run on one number of channels" in alone.warnings[0]
    assert not alone.per_channel_fitted and alone.as_dict()["per_channel_fitted"] is False
    import numpy as np

    from taccl_py.profiler.runtime_fit import _nonnegative_pair
    same = np.array([4.0, 4.0, 4.0])  # one channel count: no split of the cost between the two parts
    assert _nonnegative_pair(same, np.array([31.0, 32.0, 33.0]), per_channel=True)[1] == 0.0
    gpu_rows = [replace(r, time_us=measured[r.size_bytes][0]) for r in rows if r.size_bytes >= 1 << 24]
    hidden = fit_overlapped_host(topo, truth, gpu_rows)  # the GPUs bind every row: nothing tells the host
    assert not any(hidden.host_bound) and "no row is above its GPU time" in hidden.warnings[0]
    for extra, message in (([], "give both"), (["--harness-offset", "5"], "--harness-offset gives one added to it")):
        with pytest.raises(SystemExit) as exit_info:
            main(["profile", "fit", "--runtime", str(log), *(["--per-rank", str(per_rank)] if extra else []),
                  "--overlap", *extra, "--into", str(start), "-o", str(out)])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # --overlap is a --runtime option
        main(["profile", "fit", str(log), "--overlap"])
    assert exit_info.value.code == 2 and "--overlap applies to --runtime" in capsys.readouterr().err


def test_runtime_fit_refuses_what_it_cannot_fit(tmp_path: Path) -> None:
    from taccl_py.errors import ProfileInputError
    from taccl_py.profiler.runtime_fit import TimedRow, fit_runtime, read_timed_rows

    topo = switch_star(4, 100.0, 0.5)
    with pytest.raises(ProfileInputError, match="several sizes"):
        fit_runtime(topo, [TimedRow(CollectiveKind.ALLREDUCE, 1024, 10.0)] * 3)
    log = tmp_path / "all_reduce.log"
    log.write_text(_nccl_tests_text([(1024, 10.0), (2048, 11.0)], 8))
    with pytest.raises(ProfileInputError, match="8 ranks but the topology has 4 GPUs"):
        read_timed_rows([str(log)], topo)
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", str(log)])
    assert exit_info.value.code == 2


# ------------------------------------------------------------------------ synthesize: protocol per band
@pytest.mark.slow
def test_synthesize_picks_the_protocol_and_reports_the_calibrated_time(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from cli_runner import only_json, run

    xml = tmp_path / "ag.xml"
    args = ["synthesize", "-t", "dgx-a100", "-c", "allgather", "-s", "1KB", "-o", str(xml), "--time-limit", "5",
            "--json"]
    code, out, _ = run(args, capsys)
    auto = only_json(out)
    assert code == 0 and auto["proto"] == "LL" and auto["proto_source"].startswith("fastest under the runtime model")
    assert f'proto="{auto["proto"]}"' in xml.read_text()
    calibrated = auto["calibrated"]
    assert calibrated["proto"] == "LL" and calibrated["time_us"] == min(calibrated["proto_times_us"].values())
    assert calibrated["time_us"] > auto["time_us"]  # the runtime's costs come on top of the raw-link time
    code, out, _ = run([*args, "--proto", "Simple"], capsys)
    forced = only_json(out)
    assert forced["proto"] == "Simple" and forced["proto_source"] == "--proto" and 'proto="Simple"' in xml.read_text()
    assert forced["calibrated"]["time_us"] == pytest.approx(calibrated["proto_times_us"]["Simple"])
    assert forced["time_us"] == auto["time_us"]  # the synthesis itself stays on the raw-link model
    code, out, _ = run(["--ideal", *args], capsys)
    ideal = only_json(out)
    assert ideal["proto"] == "Simple" and ideal["calibrated"] is None and ideal["time_us"] == auto["time_us"]


# ------------------------------------------------------------------------ NVLS: NCCL's chunks, latency, fit
def test_nvls_chunks_follow_nccls_rule() -> None:
    """enqueue.cc: 128 KB chunks, halved to 64 / 32 / 16 KB below 64 / 8 / 2 x (16 channels x 8 ranks) chunks."""
    from taccl_py.runtime import nccl_nvls_chunk_bytes, nccl_nvls_pieces

    kb, mb = 1 << 10, 1 << 20
    for size, chunk, pieces in ((1 * kb, 16 * kb, 1), (2 * mb, 16 * kb, 1), (8 * mb - 1, 16 * kb, 4),
                                (8 * mb, 32 * kb, 2), (64 * mb - 1, 32 * kb, 16), (64 * mb, 64 * kb, 8),
                                (1 << 30, 128 * kb, 64), (16 << 30, 128 * kb, 1024)):
        assert nccl_nvls_chunk_bytes(size, 8) == chunk, size
        assert nccl_nvls_pieces(size, 8) == pieces, size
    # fewer ranks: fewer chunks in flight, so larger chunks from smaller sizes
    assert nccl_nvls_chunk_bytes(4 * mb, 8) == 16 * kb and nccl_nvls_chunk_bytes(4 * mb, 4) == 32 * kb
    # NVLSTree on 2 machines: the chunk of 8 heads, shared by 16 blocks
    assert nccl_nvls_pieces(1 << 30, 8, blocks=16) == 32


def test_nvls_channels_below_its_loop_size_idle() -> None:
    """NCCL's NVLS loop gives each channel 8 heads x a 16 KB chunk below 2 MB (16 channels): a smaller buffer fills
    ceil(size / 128 KB) channels, each with a whole block, and the others idle."""
    from taccl_py.runtime import nccl_nvls_occupancy

    kb, mb = 1 << 10, 1 << 20
    for size, active in ((1 * kb, 1), (128 * kb, 1), (128 * kb + 1, 2), (512 * kb, 4), (1 * mb, 8),
                         (2 * mb - 1, 16), (2 * mb, 16), (8 * mb, 16), (1 << 30, 16)):
        assert nccl_nvls_occupancy(size, 8) == active / 16, size
    assert nccl_nvls_occupancy(1 * mb, 4) == 16 / 16  # 4 heads: 64 KB blocks
    topo = resolve_topology("dgx-h100-nvls")
    model = replace(topo.runtime, nvls_efficiency=0.7, nvls_half_chunk_bytes=0.0, nvls_latency_us=0.0)
    share = {s: model.costs(Protocol.SIMPLE, CollectiveKind.ALLREDUCE, topo, algorithm="nvls",
                            size_bytes=s).fraction["nvlink"] for s in (256 * kb, 2 * mb)}
    assert share[2 * mb] == pytest.approx(0.7) and share[256 * kb] == pytest.approx(0.7 * 2 / 16)
    # the collective's time is flat between one channel's block and the loop (what Azure's NVLS run shows)
    from taccl_py.predict import predict_baseline
    times = [predict_baseline(topo, CollectiveKind.ALLREDUCE, "nvls", s, model,
                              protocols=(Protocol.SIMPLE,)).sim.time_us for s in (128 * kb, 512 * kb, 2 * mb)]
    finished = [t for t in times if t is not None]
    assert len(finished) == 3 and max(finished) / min(finished) == pytest.approx(1.0, abs=0.02)
    # NVLSTree across machines: a channel without data sends nothing over the network either
    two = resolve_topology("dgx-h100x2-nvls")
    assert two.runtime is not None
    tree_costs = {s: two.runtime.costs(Protocol.SIMPLE, CollectiveKind.ALLREDUCE, two, algorithm="nvls-tree",
                                       size_bytes=s).fraction for s in (256 * kb, 2 * mb)}
    for link_class in ("nvlink", "net"):
        assert tree_costs[256 * kb][link_class] == pytest.approx(tree_costs[2 * mb][link_class] * 2 / 16)
    # one phase (Allgather, ReduceScatter) moves each block as one stream: no idle channels
    ag = model.costs(Protocol.SIMPLE, CollectiveKind.ALLGATHER, topo, algorithm="nvls", size_bytes=256 * kb)
    assert ag.fraction["nvlink"] == model.copy_efficiency.get("nvlink", 0.0)


def test_nvls_pays_its_latency_and_its_chunks_share() -> None:
    topo = resolve_topology("dgx-h100-nvls")
    model = replace(topo.runtime, nvls_efficiency=0.7, nvls_half_chunk_bytes=16384.0, nvls_latency_us=9.0)
    costs = model.costs(Protocol.SIMPLE, CollectiveKind.ALLREDUCE, topo, algorithm="nvls", size_bytes=2 << 20)
    ring = model.costs(Protocol.SIMPLE, CollectiveKind.ALLREDUCE, topo, algorithm="ring", size_bytes=2 << 20)
    assert costs.launch_us == pytest.approx(ring.launch_us + 9.0)
    assert costs.fraction["nvlink"] == pytest.approx(0.7 * 16384 / (16384 + 16384))  # 16 KB chunks at 2 MB
    large = model.costs(Protocol.SIMPLE, CollectiveKind.ALLREDUCE, topo, algorithm="nvls", size_bytes=1 << 30)
    assert large.fraction["nvlink"] == pytest.approx(0.7 * 131072 / (131072 + 16384))
    back = runtime_from_dict(json.loads(json.dumps(runtime_to_dict(replace(model, name="x")))), where="t")
    assert (back.nvls_latency_us, back.nvls_half_chunk_bytes) == (9.0, 16384.0)
    for key, value in (("nvls_latency_us", -1), ("nvls_half_chunk_bytes", "big")):
        with pytest.raises(InputError, match=f"runtime.{key}"):
            runtime_from_dict({"name": "x", "efficiency": {}, key: value}, where="t")


@pytest.mark.slow
def test_nvls_fit_recovers_the_model_that_made_the_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rows simulated with known NVLS figures, some with a 5 us harness: the fit finds the figures and the harness."""
    from taccl_py.errors import ProfileInputError
    from taccl_py.predict import predict_baseline
    from taccl_py.profiler.runtime_fit import TimedRow, fit_nvls

    topo = resolve_topology("dgx-h100-nvls")
    truth = replace(topo.runtime, nvls_efficiency=0.7, nvls_half_chunk_bytes=8192.0, nvls_latency_us=12.0)
    rows = []
    for size, harness in ((1 << 10, True), (2 << 20, False), (32 << 20, False), (64 << 20, True), (512 << 20, False)):
        t = predict_baseline(topo, CollectiveKind.ALLREDUCE, "nvls", size, truth, protocols=(Protocol.SIMPLE,)).sim
        assert t.time_us is not None
        rows.append(TimedRow(CollectiveKind.ALLREDUCE, size, round(t.time_us + (5.0 if harness else 0.0), 2),
                             offset=harness))
    start = replace(topo, runtime=replace(topo.runtime, nvls_efficiency=0.623, nvls_half_chunk_bytes=0.0,
                                          nvls_latency_us=0.0))
    fit = fit_nvls(start, rows)
    assert fit.figures["launch"] == pytest.approx(5.0, abs=0.05)
    assert fit.figures["nvls latency"] == pytest.approx(12.0, abs=0.1)
    assert fit.figures["nvls efficiency"] == pytest.approx(0.7, rel=0.01)
    assert fit.figures["nvls half chunk"] == pytest.approx(8192, rel=0.05)
    assert fit.model.nvls_latency_us == pytest.approx(12.0, abs=0.1) and fit.rms_error < 0.001
    assert {r.algorithm for r in fit.rows} == {"nvls"} and {r.protocol for r in fit.rows} == {"Simple"}
    with pytest.raises(ProfileInputError, match="does not run on 'dgx-h100'"):
        fit_nvls(resolve_topology("dgx-h100"), rows)
    with pytest.raises(ProfileInputError, match="three sizes"):
        fit_nvls(start, rows[:2])
    scatter = [replace(r, kind=CollectiveKind.REDUCESCATTER) for r in rows]
    with pytest.raises(ProfileInputError, match=r"fits allreduce rows, not reducescatter.*--class nvlink"):
        fit_nvls(start, scatter)
    log = tmp_path / "all_reduce.log"
    log.write_text(_nccl_tests_text([(r.size_bytes, r.time_us) for r in rows], 8))
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", str(log), "--class", "nvls", "--algorithm", "ring", "--into",
              "dgx-h100-nvls", "-o", str(tmp_path / "out.json")])
    assert exit_info.value.code == 2 and "--algorithm can only be nvls" in capsys.readouterr().err


def test_nvls_runs_simple_in_nccls_steps_wherever_it_is_timed(tmp_path: Path) -> None:
    """A baseline and its schedule file get the same calibrated NVLS time, with Simple; other protocols are refused;
    the chunk steps stop at NVLS_MAX_PIECES per block."""
    from taccl_py.errors import NotApplicable
    from taccl_py.predict import NVLS_MAX_PIECES, predict_baseline, predict_schedule

    topo = resolve_topology("dgx-h100-nvls")
    model = topo.runtime
    assert model is not None
    base = predict_baseline(topo, CollectiveKind.ALLREDUCE, "nvls", 8 << 20, model)
    assert base.protocol is Protocol.SIMPLE and set(base.times_us) == {"Simple"}
    assert isinstance(base.schedule, Schedule) and base.schedule.notes["pieces"] == 2  # 32 KB chunks at 8 MB
    again = predict_schedule(topo, base.schedule, 8 << 20, model)
    assert again.protocol is Protocol.SIMPLE and again.sim.time_us == pytest.approx(base.sim.time_us)
    with pytest.raises(NotApplicable, match="Simple protocol only"):
        predict_baseline(topo, CollectiveKind.ALLREDUCE, "nvls", 8 << 20, model, protocols=(Protocol.LL128,))
    large = predict_baseline(topo, CollectiveKind.ALLREDUCE, "nvls", 4 << 30, model)
    assert isinstance(large.schedule, Schedule) and large.schedule.notes["pieces"] == NVLS_MAX_PIECES == 64


def test_nvls_tree_runs_simple_with_nvls_costs_inside_and_the_network_across() -> None:
    """NCCL's NVLSTree is one of its Allreduce algorithms across machines whose NVSwitches reduce: Simple only, NVLS's
    latency on the launch and NVLS's share on NVLink, a tree's 90 % of the network's share on the NICs; its schedule
    file gets the same time."""
    from taccl_py.errors import NotApplicable
    from taccl_py.predict import nccl_algorithms, nccl_protocols, predict_baseline, predict_schedule

    topo = resolve_topology("dgx-h100x2-nvls")
    model = topo.runtime
    assert model is not None
    assert "nvls-tree" in nccl_algorithms(topo, CollectiveKind.ALLREDUCE)
    assert "nvls-tree" not in nccl_algorithms(resolve_topology("dgx-h100x2"), CollectiveKind.ALLREDUCE)
    assert nccl_protocols(CollectiveKind.ALLREDUCE, "nvls-tree") == (Protocol.SIMPLE,)
    costs = model.costs(Protocol.SIMPLE, CollectiveKind.ALLREDUCE, topo, algorithm="nvls-tree", size_bytes=1 << 30)
    ring = model.costs(Protocol.SIMPLE, CollectiveKind.ALLREDUCE, topo, algorithm="ring", size_bytes=1 << 30)
    assert costs.launch_us == pytest.approx(ring.launch_us + model.nvls_latency_us)
    assert costs.fraction["nvlink"] < ring.fraction["nvlink"]
    assert costs.fraction["net"] == pytest.approx(0.9 * ring.fraction["net"])  # its network part is a tree
    base = predict_baseline(topo, CollectiveKind.ALLREDUCE, "nvls-tree", 64 << 20, model)
    assert base.protocol is Protocol.SIMPLE and set(base.times_us) == {"Simple"}
    assert isinstance(base.schedule, Schedule)
    again = predict_schedule(topo, base.schedule, 64 << 20, model)
    assert again.protocol is Protocol.SIMPLE and again.sim.time_us == pytest.approx(base.sim.time_us)
    with pytest.raises(NotApplicable, match="Simple protocol only"):
        predict_baseline(topo, CollectiveKind.ALLREDUCE, "nvls-tree", 8 << 20, model, protocols=(Protocol.LL,))


def test_nvls_tree_share_slows_only_nvls_trees_nvlink_part() -> None:
    """``nvls_tree_share`` scales NVLSTree's NVLink share (not NVLS's, not the network's), survives a topology file and
    is checked there."""
    from taccl_py.errors import InputError

    topo = resolve_topology("dgx-h100x2-nvls")
    model = replace(topo.runtime, nvls_tree_share=1.0)
    slower = replace(model, nvls_tree_share=0.8)
    args = (Protocol.SIMPLE, CollectiveKind.ALLREDUCE, topo)
    for algorithm in ("nvls", "ring"):
        assert slower.costs(*args, algorithm=algorithm, size_bytes=1 << 30) == replace(
            model.costs(*args, algorithm=algorithm, size_bytes=1 << 30), model=slower.name)
    tree, base = (m.costs(*args, algorithm="nvls-tree", size_bytes=1 << 30) for m in (slower, model))
    assert tree.fraction["nvlink"] == pytest.approx(0.8 * base.fraction["nvlink"])
    assert tree.fraction["net"] == base.fraction["net"] and tree.launch_us == base.launch_us
    back = runtime_from_dict(json.loads(json.dumps(runtime_to_dict(slower))), where="t.json")
    assert back.nvls_tree_share == 0.8
    assert "nvls_tree_share" not in runtime_to_dict(replace(slower, nvls_tree_share=1.0, name="x"))
    for bad in (0, 1.5, True, "0.9"):
        with pytest.raises(InputError, match=r"runtime\.nvls_tree_share"):
            runtime_from_dict({**runtime_to_dict(replace(slower, name="x")), "nvls_tree_share": bad}, where="t.json")


@pytest.mark.slow
def test_nvls_tree_fit_recovers_the_share_that_made_the_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NVLSTree rows simulated at share 0.7, one with a 5 us harness: the fit finds both; bad rows are refused."""
    from taccl_py.errors import ProfileInputError
    from taccl_py.predict import predict_baseline
    from taccl_py.profiler.runtime_fit import TimedRow, fit_nvls_tree

    topo = resolve_topology("dgx-h100x2-nvls")
    truth = replace(topo.runtime, nvls_tree_share=0.7)
    rows = []
    for size, harness in ((64 << 20, False), (64 << 20, True), (1 << 30, False)):
        t = predict_baseline(topo, CollectiveKind.ALLREDUCE, "nvls-tree", size, truth).sim.time_us
        assert t is not None
        rows.append(TimedRow(CollectiveKind.ALLREDUCE, size, t + (5.0 if harness else 0.0), offset=harness))
    fit = fit_nvls_tree(replace(topo, runtime=replace(truth, nvls_tree_share=1.0)), rows, tolerance=1e-3)
    assert fit.figures["nvls tree share"] == pytest.approx(0.7, rel=0.005)
    assert fit.figures["launch"] == pytest.approx(5.0, abs=0.2) and fit.rms_error < 0.002
    assert fit.model.nvls_tree_share == fit.figures["nvls tree share"] and fit.link_class == "nvls-tree"
    assert {r.algorithm for r in fit.rows} == {"nvls-tree"}
    given = fit_nvls_tree(topo, rows[:1] + rows[2:], harness_offset_us=0.0, tolerance=0.2)
    assert given.fitted == ("nvls tree share",) and given.figures["launch"] == 0.0
    with pytest.raises(ProfileInputError, match="does not run on 'dgx-h100x2'"):
        fit_nvls_tree(resolve_topology("dgx-h100x2"), rows)
    with pytest.raises(ProfileInputError, match="two sizes"):
        fit_nvls_tree(topo, rows[:2])
    with pytest.raises(ProfileInputError, match="not allgather"):
        fit_nvls_tree(topo, [replace(rows[0], kind=CollectiveKind.ALLGATHER), rows[2]])
    with pytest.raises(ProfileInputError, match="ran NVLSTree, not ring"):
        fit_nvls_tree(topo, [replace(rows[0], algorithms=("ring",)), rows[2]])
    log = tmp_path / "all_reduce.log"
    log.write_text(_nccl_tests_text([(r.size_bytes, r.time_us) for r in rows[::2]], 16))
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", str(log), "--class", "nvls-tree", "--algorithm", "nvls", "--into",
              "dgx-h100x2-nvls", "-o", str(tmp_path / "out.json")])
    assert exit_info.value.code == 2 and "--algorithm can only be nvls-tree" in capsys.readouterr().err


def test_alltoall_net_share_slows_only_alltoalls_network_traffic() -> None:
    """``alltoall_net_share`` scales the network's share of Alltoall (every protocol, any algorithm), not its NVLink
    share nor another collective's; it survives a topology file and is checked there."""
    from taccl_py.errors import InputError

    topo = resolve_topology("dgx-a100x2")
    model = replace(topo.runtime, alltoall_net_share=1.0)
    slower = replace(model, alltoall_net_share=0.8)
    for p in PROTOCOLS:
        for algorithm in ("direct", None):
            a2a, base = (m.costs(p, CollectiveKind.ALLTOALL, topo, algorithm=algorithm) for m in (slower, model))
            assert a2a.fraction["net"] == pytest.approx(0.8 * base.fraction["net"])
            assert a2a.fraction["nvlink"] == base.fraction["nvlink"] and a2a.hop_latency_us == base.hop_latency_us
        for kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE):
            assert slower.costs(p, kind, topo, algorithm="ring") == replace(
                model.costs(p, kind, topo, algorithm="ring"), model=slower.name)
    back = runtime_from_dict(json.loads(json.dumps(runtime_to_dict(replace(slower, name="x")))), where="t.json")
    assert back.alltoall_net_share == 0.8
    assert "alltoall_net_share" not in runtime_to_dict(replace(model, name="x"))
    for bad in (0, 1.5, True, "0.9"):
        with pytest.raises(InputError, match=r"runtime\.alltoall_net_share"):
            runtime_from_dict({**runtime_to_dict(replace(slower, name="x")), "alltoall_net_share": bad}, where="t.json")
    assert PRESETS["dgx-a100"].alltoall_net_share < 1.0 and PRESETS["dgx-h100"].alltoall_net_share == 1.0
    fabric = resolve_topology("fat-tree16")  # network links, no machines: nothing is across machines
    assert slower.costs(Protocol.SIMPLE, CollectiveKind.ALLTOALL, fabric).fraction == model.costs(
        Protocol.SIMPLE, CollectiveKind.ALLTOALL, fabric).fraction


@pytest.mark.slow
def test_alltoall_net_fit_recovers_the_share_that_made_the_rows(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Alltoall rows across two machines simulated at share 0.8, a latency-bound one with a 5 us harness: the fit
    finds both; rows the share cannot tell warn; rows of one machine or of another collective are refused."""
    from taccl_py.errors import ProfileInputError
    from taccl_py.profiler.runtime_fit import TimedRow, fit_alltoall_net

    topo = resolve_topology("dgx-a100x2")
    truth = replace(topo.runtime, alltoall_net_share=0.8)
    rows = []
    for size, harness in ((1 << 10, True), (256 << 20, False), (1 << 30, False)):
        t = _predicted_us(topo, CollectiveKind.ALLTOALL, size, truth)
        rows.append(TimedRow(CollectiveKind.ALLTOALL, size, t + (5.0 if harness else 0.0), offset=harness))
    fit = fit_alltoall_net(replace(topo, runtime=replace(truth, alltoall_net_share=1.0)), rows, tolerance=1e-3)
    assert fit.figures["alltoall net share"] == pytest.approx(0.8, rel=0.005)
    assert fit.figures["launch"] == pytest.approx(5.0, abs=0.2) and fit.rms_error < 0.002
    assert fit.model.alltoall_net_share == fit.figures["alltoall net share"] and fit.link_class == "net-alltoall"
    assert [(r.algorithm, r.protocol) for r in fit.rows] == [("direct", "LL"), ("direct", "Simple"), ("direct", "Simple")]
    assert not fit.warnings
    loose = fit_alltoall_net(topo, rows[:1], harness_offset_us=5.0, tolerance=0.05)
    assert loose.fitted == ("alltoall net share",) and any("barely depend" in w for w in loose.warnings)
    with pytest.raises(ProfileInputError, match="is one machine"):
        fit_alltoall_net(resolve_topology("dgx-a100"), rows)
    with pytest.raises(ProfileInputError, match="alltoall rows, not allgather"):
        fit_alltoall_net(topo, [replace(rows[1], kind=CollectiveKind.ALLGATHER)])
    with pytest.raises(ProfileInputError, match="must be positive"):
        fit_alltoall_net(topo, [replace(rows[1], time_us=0.0)])
    with pytest.raises(ProfileInputError, match="ran NCCL's Alltoall"):
        fit_alltoall_net(topo, [replace(rows[1], algorithms=("ring",))])
    with pytest.raises(ProfileInputError, match="of one size"):  # the offset alone would meet the row
        fit_alltoall_net(topo, [replace(rows[2], offset=True)])
    one_size = fit_alltoall_net(topo, [replace(rows[2], offset=True)], harness_offset_us=0.0, tolerance=1e-3)
    assert one_size.figures["alltoall net share"] == pytest.approx(0.8, rel=0.005)
    table = tmp_path / "a2a.csv"
    table.write_text("collective,size_bytes,placement,time_us,busbw_GBps\n"
                     + "".join(f"alltoall,{r.size_bytes},in-place,{r.time_us},\n" for r in rows[1:]))
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", "--per-rank", str(table), "--class", "net-alltoall", "--into", "dgx-a100x2",
              "-o", str(out)])
    assert exit_info.value.code == 0 and "alltoall net share 0.8" in capsys.readouterr().out
    written = json.loads(out.read_text())["runtime"]
    assert written["alltoall_net_share"] == pytest.approx(0.8, rel=0.005)
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "fit", "--runtime", "--per-rank", str(table), "--class", "net-alltoall", "--algorithm", "ring",
              "--into", "dgx-a100x2", "-o", str(tmp_path / "other.json")])
    assert exit_info.value.code == 2 and "--algorithm can only be direct" in capsys.readouterr().err


def test_nvls_fit_keeps_its_fixed_costs_at_zero_or_above() -> None:
    """Rows faster than any NVLS latency allows: the latency is held at 0 (not negative); rows that all take the
    offset, without a per-rank row, warn that the latency includes their harness."""
    from taccl_py.predict import predict_baseline
    from taccl_py.profiler.runtime_fit import TimedRow, fit_nvls

    topo = resolve_topology("dgx-h100-nvls")
    model = replace(topo.runtime, nvls_latency_us=0.0)
    rows = []
    for size in (2 << 20, 32 << 20, 256 << 20):
        t = predict_baseline(topo, CollectiveKind.ALLREDUCE, "nvls", size, model).sim.time_us
        assert t is not None
        rows.append(TimedRow(CollectiveKind.ALLREDUCE, size, t - 3.0, offset=False))
    fit = fit_nvls(replace(topo, runtime=model), rows, max_iterations=4)
    assert fit.figures["nvls latency"] == 0.0 and fit.figures["launch"] == 0.0 and "launch" not in fit.fitted
    assert fit.as_dict()["method"].startswith("least squares") and "Nelder-Mead" in fit.as_dict()["method"]
    harnessed = [replace(r, offset=True) for r in rows]
    warned = fit_nvls(replace(topo, runtime=model), harnessed, max_iterations=4)
    assert any("includes the harness" in w for w in warned.warnings)


@pytest.mark.parametrize("link_class", ["net", "pci"])
def test_a_fit_of_a_class_no_route_crosses_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     link_class: str) -> None:
    """One DGX H100 has neither network nor PCIe between its GPUs: its rows cannot tell those figures (a fit would
    push the whole error into the launch), so the fit is refused and writes nothing."""
    out = tmp_path / "fitted.json"
    log = Path(__file__).parent / "data" / "nccl_tests" / "together_h100x8_all_reduce_ring.log"
    with pytest.raises(SystemExit) as done:
        main(["profile", "fit", "--runtime", f"{log}@1MB:64MB", "--into", "dgx-h100", "-o", str(out),
              "--class", link_class])
    err = capsys.readouterr().err
    assert done.value.code == 2 and not out.exists()
    assert f"--class: no route between the GPUs of 'dgx-h100' crosses a {link_class} link" in err
    from taccl_py.profiler.runtime_fit import crosses_link_class

    # DGX-2 pairs: the InfiniBand links run one way (GPU 2k+1 -> GPU 2k of the other machine), none from GPU 0
    assert crosses_link_class(resolve_topology("dgx2x2"), "net")


def test_a_log_cut_at_a_row_boundary_is_checked_with_a_warning(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The header promised rows to 8 GB and the footer is missing: the rows there are used, and the user is told."""
    log = Path(__file__).parent / "data" / "nccl_tests" / "together_h100x8_all_reduce_ring.log"
    lines = log.read_text().splitlines()
    last = next(k for k, line in enumerate(lines) if line.split()[:1] == ["33554432"])
    cut = tmp_path / "cut.log"
    cut.write_text("\n".join(lines[:last + 1]) + "\n")
    with pytest.raises(SystemExit) as done:
        main(["profile", "check", str(cut), "-t", "dgx-h100", "--json"])
    captured = capsys.readouterr()
    assert done.value.code in (0, 1)
    assert "the table stops at 32MB of the header's maxBytes 8GB, without the '# Avg bus bandwidth' footer" in (
        captured.err + captured.out)


def test_profile_check_takes_the_ranks_of_a_log_without_rank_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """nccl-tests#119's log prints no '#  Rank' lines: without --ranks the run looks like one rank (and the error
    says what to pass); with --ranks 24 it is checked as the fidelity table checks it."""
    data = Path(__file__).parent / "data" / "nccl_tests"
    args = ["profile", "check", str(data / "nccl_tests_119_a100x3_all_reduce.log"), "-t", str(data / "a100x3-4nic.json")]
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code == 2 and "pass --ranks N" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main([*args, "--ranks", "24", "--json"])
    assert done.value.code == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["rows_checked"] == checked["rows_within_target"] == 6
    assert checked["inputs"][0].endswith("all_reduce_perf, 24 ranks, 6 sizes")


def test_profile_fit_warns_of_rows_the_run_measured_two_ways(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A row whose out-of-place time is 3x its in-place one (beyond what any prediction could meet against both) is
    named by profile fit --runtime with its line; a log whose two times agree within that gets no such warning."""
    topo = switch_star(4, 100.0, 0.5)
    truth = RuntimeModel(name="truth", efficiency={"nvlink": 0.7}, channels=8)
    times = [(1 << e, _predicted_us(topo, CollectiveKind.ALLREDUCE, 1 << e, truth)) for e in (12, 16, 20, 24)]
    start = _start_file(tmp_path, topo)
    for in_place, warned in (({1 << 16: times[1][1] / 3}, True), ({1 << 16: times[1][1] / 1.5}, False)):
        log = tmp_path / "all_reduce.log"
        log.write_text(_nccl_tests_text(times, 4, in_place=in_place))
        with pytest.raises(SystemExit) as done:
            main(["profile", "fit", "--runtime", str(log), "--algorithm", "ring", "--into", str(start),
                  "-o", str(tmp_path / "fitted.json"), "--json"])
        assert done.value.code == 0
        said = [w for w in json.loads(capsys.readouterr().out)["warnings"] if "too far apart" in w]
        assert bool(said) == warned, said
        if warned:
            assert said[0].startswith(f"{log}: line ") and "(64KB: " in said[0] and "1MB" not in said[0]


def test_profile_check_notes_missed_sizes_the_in_place_time_meets(capsys: pytest.CaptureFixture[str]) -> None:
    """The Together host's earlier ring run misses at 512 KB against its out-of-place outlier (69.21 us) but the
    prediction is within the target of the in-place time (44.23 us): a note says the run's spread is part of the
    miss. A published table's rows have no in-place time; a log that timed each size once neither."""
    log = FIXTURES / "together_h100x8_all_reduce_ring_220043.log"
    with pytest.raises(SystemExit):
        main(["profile", "check", f"{log}@256KB:1MB", "-t", "dgx-h100", "--host-overlap", "35.51,0.2174", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert len(data["notes"]) == 1 and "512KB: 69.21 us out-of-place, 44.23 us in place" in data["notes"][0]
    assert "within the target of the in-place one" in data["notes"][0]
    assert [r["size_bytes"] for r in data["files"][0]["rows"] if r["met_in_place_only"]] == [512 << 10]
    table = FIXTURES / "azure_ndh100v5_all_reduce.csv"
    with pytest.raises(SystemExit):
        main(["profile", "check", f"{table}@1GB:1GB", "-t", "dgx-h100-nvls", "--algorithm", "nvls", "--json"])
    row = json.loads(capsys.readouterr().out)["files"][0]["rows"][0]
    assert (row["measured_in_place_us"], row["measured_in_place_busbw_GBps"], row["in_place_error"],
            row["run_spread"], row["run_disagrees"]) == (None, None, None, None, False)


def test_profile_check_offers_the_launch_offset_of_a_one_process_log(capsys: pytest.CaptureFixture[str]) -> None:
    """Together's ring Allreduce ran -g 8 (one process launching 8 GPUs): without taccl --launch-offset the check
    misses most rows and a hint gives the offset that fits them best (18.2 us) and how many rows it puts within
    target; with the offset given, no hint. A one-GPU-per-process log gets none. (An added offset is the check's
    approximation of that host, whose launches overlap the GPUs' work: the fidelity table's harness, fitted by
    profile fit --runtime --overlap, puts all 29 rows within target.)"""
    log = str(FIXTURES / "together_h100x8_all_reduce_ring.log")
    with pytest.raises(SystemExit):
        main(["profile", "check", log, "-t", "dgx-h100", "--json"])
    hints = [h for h in json.loads(capsys.readouterr().out)["hints"] if "--launch-offset" in h]
    assert len(hints) == 1 and "one thread launched 8 GPUs (nccl-tests -g)" in hints[0], hints
    offset = float(re.search(r"--launch-offset ([0-9.]+)", hints[0]).group(1))  # type: ignore[union-attr]
    assert offset == pytest.approx(18.2, abs=0.5) and "25 of the 29 rows checked are within target" in hints[0]
    assert "shifts" not in hints[0]  # no other file checked
    with pytest.raises(SystemExit):
        main(["--launch-offset", str(offset), "profile", "check", log, "-t", "dgx-h100", "--json"])
    checked = json.loads(capsys.readouterr().out)
    assert checked["rows_within_target"] == 25 and not [h for h in checked["hints"] if "--launch-offset" in h]
    with pytest.raises(SystemExit):  # the host as fitted, overlapping the GPUs' work: the fidelity table's rows
        main(["profile", "check", log, "-t", "dgx-h100", "--host-overlap", "35.51,0.2174", "--json"])
    overlapped = json.loads(capsys.readouterr().out)
    assert overlapped["rows_within_target"] == 29 and not [h for h in overlapped["hints"] if "--launch-offset" in h]
    fidelity = predict_case(next(c for c in load_cases(FIXTURES)
                                 if c.name == "Together 8 x H100 all_reduce (ring, calibration)"), FIXTURES)
    assert [r["predicted_us"] for r in overlapped["files"][0]["rows"]] == pytest.approx(
        [r.predicted_us for r in fidelity], rel=1e-9)
    per_rank_log = f"{FIXTURES / 'dgxc_h100x8_all_reduce.log'}@64B:1KB"
    with pytest.raises(SystemExit):  # a log that says one GPU per process keeps the model's own times
        main(["profile", "check", per_rank_log, "-t", "dgx-h100", "--host-overlap", "35.51", "--json"])
    alone = json.loads(capsys.readouterr().out)
    assert all(r["predicted_us"] < 30 for r in alone["files"][0]["rows"])
    assert any("do not say they launched several GPUs" in w for w in alone["warnings"])
    for args, message in ((["--host-overlap", "35,x"], "expected US or US,US"),
                          (["--host-overlap", "1,2,3"], "expected US or US,US"),
                          (["--launch-offset", "3", "--host-overlap", "35"], "not both")):
        with pytest.raises(SystemExit) as exit_info:
            offset_first = args[0] == "--launch-offset"
            main([*args[:2], "profile", "check", log, "-t", "dgx-h100", *args[2:]] if offset_first
                 else ["profile", "check", log, "-t", "dgx-h100", *args])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    per_rank = f"{FIXTURES / 'dgxc_h100x8_all_reduce.log'}@64B:1KB"
    with pytest.raises(SystemExit):
        main(["profile", "check", per_rank, "-t", "dgx-h100", "--json"])
    assert not [h for h in json.loads(capsys.readouterr().out)["hints"] if "--launch-offset" in h]
    with pytest.raises(SystemExit):  # both: one offset for the -g 8 rows, counted over every row it shifts
        main(["profile", "check", log, per_rank, "-t", "dgx-h100", "--json"])
    both = [h for h in json.loads(capsys.readouterr().out)["hints"] if "--launch-offset" in h]
    assert len(both) == 1 and f"it shifts {per_rank} too: check those without it" in both[0]
    assert "of the 34 rows checked" in both[0]


def test_profile_check_reads_the_launches_of_the_runs_it_checks(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A log of two runs, an Allreduce one GPU per process and an Allgather -g 8: checking its Allreduce alone gets
    no launch-offset hint (the -g 8 run is not checked); both runs' outliers are named with their collective."""
    ar = _nccl_tests_text([(1 << 20, 30.0), (1 << 24, 200.0)], 8, in_place={1 << 24: 60.0})
    ag = _nccl_tests_text([(1 << 20, 30.0), (1 << 24, 200.0)], 8, "all_gather_perf", in_place={1 << 24: 60.0})
    ag = ag.replace("nThread 1 nGpus 1", "nThread 1 nGpus 8")
    log = tmp_path / "two.log"
    log.write_text(ar + ag)
    with pytest.raises(SystemExit):
        main(["profile", "check", str(log), "-t", "dgx-h100", "--collective", "allreduce", "--json"])
    assert not [h for h in json.loads(capsys.readouterr().out)["hints"] if "--launch-offset" in h]
    with pytest.raises(SystemExit):
        main(["profile", "check", str(log), "-t", "dgx-h100", "--json"])
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 1 and "allreduce 16MB: 200 us" in notes[0] and "allgather 16MB: 200 us" in notes[0]


def test_a_log_that_timed_each_size_once_has_no_in_place_time(tmp_path: Path) -> None:
    """A table with one time column (out of place only) reads with no in-place time: none is made up."""
    from taccl_py.profiler.nccl_tests import parse_nccl_tests_log

    text = _nccl_tests_text([(1 << 20, 40.0), (1 << 21, 60.0)], 8)
    one = "\n".join(line if not line.strip() or line.startswith("#") else " ".join(line.split()[:10])
                     for line in text.splitlines())
    one = one.replace("#wrong     time   algbw   busbw #wrong", "#wrong")
    path = tmp_path / "once.log"
    path.write_text(one + "\n")
    rows = parse_nccl_tests_log(path)[0].rows
    assert [(r.time_us_out, r.time_us_in, r.busbw_in) for r in rows] == [(40.0, None, None), (60.0, None, None)]


def test_profile_check_notes_the_sizes_a_log_measured_two_ways(capsys: pytest.CaptureFixture[str]) -> None:
    """Where a log's out-of-place and in-place times differ by more than the target, profile check says so (the
    run disagrees with itself there) and gives both times in --json; a log whose two times agree gets no note."""
    log = FIXTURES / "nccl_tests_309_h100x4_all_reduce.log"
    topology = str(FIXTURES.parents[2] / "topologies" / "dgx-h100x4.json")
    with pytest.raises(SystemExit):
        main(["profile", "check", f"{log}@1MB:8MB", "-t", topology, "--json"])
    data = json.loads(capsys.readouterr().out)
    rows = data["files"][0]["rows"]
    assert [r["measured_in_place_us"] for r in rows] == [93.26, 156.4, 174.2, 256.7]
    assert [r["run_disagrees"] for r in rows] == [True, True, True, False]
    assert len(data["notes"]) == 1 and "1MB: 317 us out-of-place, 93.26 us in place (" in data["notes"][0]
    assert "4MB: 231.3 us out-of-place, 174.2 us in place (missed against both)" in data["notes"][0]
    assert "239 us out-of-place" not in data["notes"][0] and "too far apart" in data["notes"][0]
    with pytest.raises(SystemExit):
        main(["profile", "check", f"{log}@1MB:8MB", "-t", topology])
    assert "note: " in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["profile", "check", f"{FIXTURES / 'nccl_tests_309_h100x2_ring_all_reduce.log'}@64MB:256MB#ring", "-t",
              "dgx-h100x2", "--json"])
    assert json.loads(capsys.readouterr().out)["notes"] == []


@pytest.mark.parametrize("topology, kind, algorithm, size", [
    ("dgx-h100x2-nvls", "allreduce", "nvls-tree", "1GB"),  # NCCL's NVLS chunk steps at that size
    ("dgx-a100x2", "allreduce", "oneshot", "16KB"),  # the form fastest under the runtime's costs
    ("dgx-a100", "allgather", "ring", "64MB"),  # NCCL's ring in its chunk loops
])
def test_a_baselines_schedule_file_times_as_its_row(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    topology: str, kind: str, algorithm: str, size: str) -> None:
    """``baseline --schedule-out`` writes the schedule the calibrated row timed, so ``simulate -a FILE.json`` gives
    the row's time (it wrote the baseline as first built: NVLSTree at 1 GB in 64 chunk steps where NCCL takes 32,
    4,673 us against the row's 4,520)."""
    out = tmp_path / "b.json"
    with pytest.raises(SystemExit):
        main(["baseline", "-t", topology, "-c", kind, "-a", algorithm, "-s", size, "--schedule-out", str(out),
              "--json"])
    row = json.loads(capsys.readouterr().out)  # one size: the row itself
    entry = next(e for e in row["baselines"] if e["algorithm"] == algorithm)
    with pytest.raises(SystemExit):
        main(["simulate", "-t", topology, "-s", size, "-a", str(out), "--json"])
    timed = json.loads(capsys.readouterr().out)
    assert timed["time_us"] == pytest.approx(entry["time_us"], rel=1e-12) and timed["proto"] == entry["proto"]


@pytest.mark.parametrize("option", [["--ideal"], ["--launch-offset", "3"], ["--host-overlap", "40"]])
def test_an_option_of_taccl_itself_after_the_command_says_where_it_goes(capsys: pytest.CaptureFixture[str],
                                                                       option: list[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB", *option])
    assert done.value.code == 2
    value = {"--launch-offset": " US", "--host-overlap": " US[,US]"}.get(option[0], "")
    assert capsys.readouterr().err == (f"taccl: error: {option[0]} is an option of taccl itself: give it before the "
                                       f"command (taccl {option[0]}{value} baseline ...)\n")


def _nvls_file_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str], collective: str, written: str,
                        timed: str) -> tuple[Path, str]:
    """Write ``collective``'s nvls baseline at ``written`` as a schedule file, time it at ``timed``: (file, stderr)."""
    out = tmp_path / f"nvls-{collective}.json"
    with pytest.raises(SystemExit):
        main(["baseline", "-t", "dgx-h100-nvls", "-c", collective, "-s", written, "-a", "nvls", "--schedule-out",
              str(out), "--json"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["simulate", "-t", "dgx-h100-nvls", "-a", str(out), "-s", timed, "--json"])
    return out, capsys.readouterr().err


def test_an_nvls_schedule_file_timed_at_another_size_says_so(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """An NVLS schedule file holds NCCL's chunk steps at the size it was written for; timed where NCCL takes other
    steps it is timed as written, with a warning naming the file, the steps and the size. One phase (Allgather)
    moves one stream per block at every size: nothing to warn about."""
    assert "warning" not in _nvls_file_warnings(tmp_path, capsys, "allreduce", "1MB", "1MB")[1]
    out, err = _nvls_file_warnings(tmp_path, capsys, "allreduce", "1MB", "64MB")
    assert f"taccl: warning: {out}: nvls in 1 chunk step(s) per block, where NCCL takes 8 at 64MB: timed as " \
           "written; `taccl baseline -t dgx-h100-nvls -c allreduce -a nvls -s 64MB` times NCCL's own" in err
    assert "warning" not in _nvls_file_warnings(tmp_path, capsys, "allgather", "1MB", "1GB")[1]


@pytest.mark.parametrize(("topology", "collective", "sizes"), [
    ("dgx-a100", "allreduce", "1KB:1KB"), ("dgx-a100", "allreduce", "1MB:1MB"), ("dgx-a100x2", "alltoall", "256KB:512KB"),
    ("dgx-h100-nvls", "allreduce", "64MB:64MB")])
def test_baseline_says_what_nccl_itself_would_run(capsys: pytest.CaptureFixture[str], topology: str, collective: str,
                                                  sizes: str) -> None:
    """Each row of a calibrated ``taccl baseline`` names NCCL's own choice (its algorithms, with the protocols it runs
    them with): the algorithm, protocol and time ``profile check`` predicts."""
    from taccl_py.predict import predict_nccl
    from taccl_py.units import parse_size_range

    with pytest.raises(SystemExit):
        main(["baseline", "-t", topology, "-c", collective, "-s", sizes, "--json"])
    out = json.loads(capsys.readouterr().out)
    rows = out.get("rows", [out])
    topo = resolve_topology(topology)
    assert topo.runtime is not None
    for row, size in zip(rows, parse_size_range(sizes), strict=True):
        expected = predict_nccl(topo, CollectiveKind(collective), size, topo.runtime)
        assert expected is not None
        name, pred = expected
        assert (row["nccl"]["algorithm"], row["nccl"]["proto"]) == (name, pred.protocol.value)
        assert row["nccl"]["time_us"] == pytest.approx(pred.sim.time_us, rel=1e-9)
        assert row["nccl"]["busbw_GBps"] == pytest.approx(pred.sim.busbw_GBps, rel=1e-9)
    with pytest.raises(SystemExit):
        main(["--ideal", "baseline", "-t", topology, "-c", collective, "-s", sizes.split(":")[0], "--json"])
    assert "nccl" not in json.loads(capsys.readouterr().out)
    # with -a one baseline, NCCL's choice is still among all of its algorithms
    with pytest.raises(SystemExit):
        main(["baseline", "-t", topology, "-c", collective, "-s", sizes.split(":")[-1], "-a", "rd" if
              collective == "allreduce" else "direct", "--json"])
    one = json.loads(capsys.readouterr().out)
    assert one["nccl"]["algorithm"] == rows[-1]["nccl"]["algorithm"]
    assert one["nccl"]["time_us"] == pytest.approx(rows[-1]["nccl"]["time_us"], rel=1e-9)


def test_baseline_under_nccl_proto_times_those_protocols_only(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``baseline --protocol Simple`` (a run's NCCL_PROTO): every baseline and NCCL's choice take Simple (NCCL's
    choice as ``predict_nccl`` under the same restriction), the XML written says so; NVLS under LL alone, or any
    protocol on the raw-link model, is one line, exit 2."""
    from taccl_py.predict import predict_nccl

    topo = resolve_topology("dgx-h100-nvls")
    assert topo.runtime is not None
    xml = tmp_path / "ar.xml"
    with pytest.raises(SystemExit) as exit_info:
        main(["baseline", "-t", "dgx-h100-nvls", "-c", "allreduce", "-s", "64KB", "--protocol", "Simple", "-a", "ring",
              "-o", str(xml), "--json"])
    assert exit_info.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["protocols"] == ["Simple"] and {e["proto"] for e in out["baselines"]} == {"Simple"}
    expected = predict_nccl(topo, CollectiveKind.ALLREDUCE, 64 << 10, topo.runtime, protocols=(Protocol.SIMPLE,))
    assert expected is not None and expected[1].protocol is Protocol.SIMPLE
    assert (out["nccl"]["algorithm"], out["nccl"]["proto"]) == (expected[0], "Simple")
    assert out["nccl"]["time_us"] == pytest.approx(expected[1].sim.time_us, rel=1e-9)
    assert out["xml"]["proto"] == "Simple" and 'proto="Simple"' in xml.read_text()
    with pytest.raises(SystemExit) as exit_info:  # without -a: NVLS and NVLSTree drop out under LL alone
        main(["baseline", "-t", "dgx-h100-nvls", "-c", "allreduce", "-s", "64KB", "--protocol", "LL", "--json"])
    assert exit_info.value.code == 0
    names = {e["algorithm"]: e["proto"] for e in json.loads(capsys.readouterr().out)["baselines"]}
    assert "nvls" not in names and "ring" in names and set(names.values()) == {"LL"}
    with pytest.raises(SystemExit) as exit_info:  # Alltoall: NCCL's point-to-point sends keep their own pick
        main(["baseline", "-t", "dgx-a100x2", "-c", "alltoall", "-s", "64KB", "--protocol", "Simple", "--json"])
    assert exit_info.value.code == 0 and json.loads(capsys.readouterr().out)["nccl"]["proto"] == "LL"
    a3mega = str(FIXTURES / "a3mega-h100x2.json")  # fitted on NCCL_PROTO=Simple runs: Simple unless asked
    with pytest.raises(SystemExit) as exit_info:
        main(["baseline", "-t", a3mega, "-c", "allreduce", "-s", "64KB", "-a", "tree", "--json"])
    assert exit_info.value.code == 0
    kept = json.loads(capsys.readouterr().out)
    assert kept["protocols"] == ["Simple"] and kept["nccl"]["proto"] == "Simple"
    with pytest.raises(SystemExit) as exit_info:
        main(["baseline", "-t", a3mega, "-c", "allreduce", "-s", "64KB", "--protocol", "LL128"])
    assert exit_info.value.code == 2 and "allows Simple only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # Alltoall there: LL or Simple, never the unfitted LL128
        main(["baseline", "-t", a3mega, "-c", "alltoall", "-s", "1MB", "--json"])
    assert exit_info.value.code == 0
    a2a = json.loads(capsys.readouterr().out)
    assert {e["proto"] for e in a2a["baselines"]} | {a2a["nccl"]["proto"]} <= {"LL", "Simple"}
    assert all("LL128" not in (e.get("proto_times_us") or {}) for e in a2a["baselines"])
    ll_xml = tmp_path / "ll.xml"  # an XML naming a protocol the runs did not allow: timed as written, with a warning
    with pytest.raises(SystemExit) as exit_info:
        main(["baseline", "-t", "dgx-h100x2", "-c", "allreduce", "-s", "64KB", "-a", "ring", "--protocol", "LL",
              "-o", str(ll_xml)])
    assert exit_info.value.code == 0 and 'proto="LL"' in ll_xml.read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "-t", a3mega, "-a", str(ll_xml), "-s", "64KB", "--json"])
    timed = capsys.readouterr()
    assert exit_info.value.code == 0 and json.loads(timed.out)["proto"] == "LL"
    assert "proto='LL', where the runtime model's runs allow Simple only" in timed.err
    for args, message in ((["-a", "nvls", "--protocol", "LL"], "Simple only"),
                          (["--protocol", "LL9"], "LL9")):
        with pytest.raises(SystemExit) as exit_info:
            main(["baseline", "-t", "dgx-h100-nvls", "-c", "allreduce", "-s", "64KB", *args])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--ideal", "baseline", "-t", "dgx-h100", "-c", "allreduce", "-s", "64KB", "--protocol", "LL"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "raw-link model has none" in err and len(err.strip().splitlines()) == 1


def test_profile_check_hints_at_the_algorithm_a_run_used(capsys: pytest.CaptureFixture[str]) -> None:
    """The XE9680 run of nccl-tests#309 (NCCL's default) ran NVLSTree from 512 KB (NCCL's maintainer in the thread)
    where the model's fastest is its tree, then its ring: the check names NVLSTree for the missed rows it would meet,
    with the FILE@LO:HI#ALGO that says so; a file that names its algorithm gets no hint."""
    log = FIXTURES / "nccl_tests_309_h100x2_xe9680_all_reduce.log"
    with pytest.raises(SystemExit):
        main(["profile", "check", f"{log}@64KB:64MB", "-t", "dgx-h100x2-nvls", "--json"])
    hints = json.loads(capsys.readouterr().out)["hints"]
    assert len(hints) == 1 and hints[0].endswith(f"say so with {log}@512KB:64MB#nvls-tree")
    assert "6 of the 7 missed allreduce rows (512KB..64MB) are within target as nvls-tree" in hints[0]
    with pytest.raises(SystemExit):
        main(["profile", "check", f"{log}@512KB:64MB#nvls-tree", "-t", "dgx-h100x2-nvls", "--json"])
    named = json.loads(capsys.readouterr().out)
    assert named["hints"] == [] and named["rows_within_target"] == 7


def test_a_fit_refuses_the_launch_offset_of_predictions(capsys: pytest.CaptureFixture[str]) -> None:
    """taccl --launch-offset adds a harness's cost to predictions; a fit names --harness-offset instead of
    silently fitting without it."""
    log = FIXTURES / "together_h100x8_all_reduce_ring.log"
    with pytest.raises(SystemExit) as done:
        main(["--launch-offset", "20", "profile", "fit", "--runtime", str(log), "--into", "dgx-h100", "-o", "x.json"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("taccl: error: --launch-offset:") and "--harness-offset US" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as done:  # after the command too
        main(["profile", "fit", "--runtime", str(log), "--into", "dgx-h100", "-o", "x.json", "--launch-offset", "20"])
    assert done.value.code == 2 and "--harness-offset US" in capsys.readouterr().err


def test_a_oneshot_xml_is_the_form_its_calibrated_row_timed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``baseline -o`` lowers the ``oneshot`` form the runtime model preferred (on two DGX A100s at 16 KB not the raw
    links' pick, whose XML took 26.7 us against the row's 23.3), so the file times as its row."""
    xml = tmp_path / "os.xml"
    with pytest.raises(SystemExit):
        main(["baseline", "-t", "dgx-a100x2", "-c", "allreduce", "-a", "oneshot", "-s", "16KB", "-o", str(xml),
              "--json"])
    row = json.loads(capsys.readouterr().out)
    entry = row["baselines"][0]
    assert row["xml"]["selected"] and entry["algorithm"] == "oneshot"
    with pytest.raises(SystemExit):
        main(["simulate", "-t", "dgx-a100x2", "-s", "16KB", "-a", str(xml), "--json"])
    timed = json.loads(capsys.readouterr().out)
    assert timed["time_us"] == pytest.approx(entry["time_us"], rel=1e-9) and timed["proto"] == entry["proto"]


def _json_run(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``taccl ARGS`` in process: it exits 0; its --json output."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_host_overlap_times_baseline_and_simulate_as_a_g_n_harness(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``taccl --host-overlap US,US``: every NCCL time is the longer of the GPUs' and the host's over the channels
    NCCL runs it on; NCCL's choice and the protocols stay the GPUs' (the host does not change what NCCL runs); the
    Done-when curve is the fidelity table's calibration case, row by row."""
    from taccl_py.runtime import nccl_channels

    def run(args: list[str]) -> dict[str, Any]:
        return _json_run(args, capsys)

    command = ["baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB:8GB", "-a", "ring", "--json"]
    alone, hosted = run(command), run(["--host-overlap", "42.81,0.32", *command])
    assert hosted["host_overlap"] == {"host_us": 42.81, "per_channel_us": 0.32} and "host_overlap" not in alone
    bound = 0
    for plain, row in zip(alone["rows"], hosted["rows"], strict=True):
        choice = row["nccl"]
        assert (choice["algorithm"], choice["proto"]) == (plain["nccl"]["algorithm"], plain["nccl"]["proto"])
        assert choice["gpu_time_us"] == pytest.approx(plain["nccl"]["time_us"], rel=1e-12)
        channels = nccl_channels(choice["algorithm"], choice["proto"], row["size_bytes"], 8, 24)
        assert choice["host_channels"] == channels
        host = 42.81 + 0.32 * channels
        assert choice["time_us"] == pytest.approx(max(choice["gpu_time_us"], host), rel=1e-12)
        bound += host > choice["gpu_time_us"]
        entry = row["baselines"][0]
        assert entry["gpu_time_us"] == pytest.approx(plain["baselines"][0]["time_us"], rel=1e-12)
        assert entry["busbw_GBps"] == pytest.approx(
            row["size_bytes"] / entry["time_us"] / 1e3 * 2 * 7 / 8, rel=1e-9)
    assert 5 <= bound < len(hosted["rows"])  # the host binds the small sizes only
    case = next(c for c in load_cases(FIXTURES) if c.name == "Azure ND A100 v4 all_reduce (calibration)")
    published = predict_case(case, FIXTURES)
    assert [r["nccl"]["time_us"] for r in hosted["rows"]] == pytest.approx(
        [r.predicted_us for r in published], rel=1e-9)
    small = run(["--host-overlap", "42.81", "simulate", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB", "-a", "ring",
                 "--json"])
    assert small["time_us"] == pytest.approx(42.81) and small["gpu_time_us"] < 42.81
    xml = tmp_path / "ring.xml"
    run(["baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB", "-a", "ring", "-o", str(xml), "--json"])
    from taccl_py.msccl import load_program

    timed = run(["--host-overlap", "40,1", "simulate", "-t", "dgx-a100", "-s", "1KB", "-a", str(xml), "--json"])
    assert timed["time_us"] == pytest.approx(40 + load_program(str(xml)).nchannels)


def test_host_overlap_times_a_baseline_of_its_own_as_the_file_written_from_it(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A baseline NCCL does not run is charged the host on its own channels, as the file written from it is timed;
    times the host binds tie, and the table's best (and best unicast) is then the GPUs' fastest of them."""
    def run(args: list[str]) -> dict[str, Any]:
        return _json_run(args, capsys)

    host = ["--host-overlap", "40,1"]
    for name in ("rd", "oneshot"):
        out = tmp_path / f"{name}.json"
        row = run([*host, "baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "4KB", "-a", name, "--schedule-out",
                   str(out), "--json"])["baselines"][0]
        assert row["host_channels"] == (row["channels"] or 1)
        assert row["time_us"] == pytest.approx(40 + row["host_channels"]) and row["gpu_time_us"] < 40
        timed = run([*host, "simulate", "-t", "dgx-a100", "-s", "4KB", "-a", str(out), "--json"])
        assert timed["time_us"] == pytest.approx(row["time_us"], rel=1e-12)
    table = run([*host, "baseline", "-t", "dgx-h100-nvls", "-c", "allreduce", "-s", "1KB:1MB", "--json"])
    for r in table["rows"]:
        for key, kept in (("best", r["baselines"]), ("best_unicast", [e for e in r["baselines"]
                                                                      if e["algorithm"] not in ("nvls", "nvls-tree")])):
            if r.get(key) is None:
                continue
            chosen = next(e for e in kept if e["algorithm"] == r[key])
            assert all((chosen["time_us"], chosen["gpu_time_us"]) <= (e["time_us"], e["gpu_time_us"]) for e in kept
                       if e["time_us"] is not None), (r["size_bytes"], key)


@pytest.mark.parametrize(("args", "message"), [
    (["--ideal", "--host-overlap", "40", "baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB"], "--ideal"),
    (["--launch-offset", "3", "--host-overlap", "40", "baseline", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB"],
     "not both"),
    (["--host-overlap", "40,x", "simulate", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB", "-a", "ring"],
     "expected US or US,US"),
    (["--host-overlap", "40", "baseline", "-t", "ndv2x2", "-c", "allreduce", "-s", "1KB"], "no calibrated runtime"),
    (["--host-overlap", "40", "synthesize", "-t", "dgx-a100", "-c", "allgather", "-s", "1KB"],
     "applies to simulate, baseline and profile check"),
    (["--host-overlap", "40", "simulate", "-t", "dgx-a100", "-c", "allgather+reducescatter", "-s", "1KB"],
     "applies to simulate, baseline and profile check"),
    (["--host-overlap", "40", "profile", "fit", "--runtime", str(FIXTURES / "azure_nda100v4_all_reduce.csv"),
      "--into", "dgx-a100", "-o", "x.json"], "--overlap"),
    (["--host-overlap", "40", "profile", "check", str(FIXTURES / "azure_nda100v4_all_reduce.csv"), "-t", "dgx-a100",
      "--host-overlap", "40"], "give the host once"),
    (["--host-overlap", "x", "bound", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB"], "expected US or US,US"),
    (["--host-overlap", "40", "bound", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB"], "not to bound"),
    (["--host-overlap", "40", "profile", "show", "x.json"], "not to profile show"),
    (["--host-overlap", "40", "simulate", "-t", "dgx-a100", "-c", "allreduce", "-s", "1KB", "-a", "ring", "--timeline",
      "t.png"], "draws the GPUs' work"),
])
def test_host_overlap_is_refused_where_it_does_not_apply(capsys: pytest.CaptureFixture[str], args: list[str],
                                                         message: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    where = "--timeline" if "--timeline" in args else "--host-overlap"
    assert exit_info.value.code == 2 and err.startswith(f"taccl: error: {where}") and message in err
    assert err.count("\n") == 1


def test_a_subcommands_help_is_not_refused_for_an_option_of_taccl_itself(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--host-overlap", "40", "bound", "--help"], ["--host-overlap", "40", "profile", "show", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("Usage: taccl ")


def test_profile_check_takes_the_host_from_taccl_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """``taccl --host-overlap H profile check`` checks as ``profile check --host-overlap H`` does."""
    log = f"{FIXTURES / 'azure_nda100v4_all_reduce.csv'}@1KB:4MB"
    outs = []
    for args in (["--host-overlap", "42.81,0.32", "profile", "check", log, "-t", "dgx-a100", "--json"],
                 ["profile", "check", log, "-t", "dgx-a100", "--host-overlap", "42.81,0.32", "--json"]):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1] and outs[0]["rows_within_target"] == 13
