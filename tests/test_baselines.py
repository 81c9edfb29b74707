"""NCCL-style baselines: correct on every shipped topology, ring times equal to the alpha-beta formulas.

The formulas here are derived by hand from the link parameters, never by
calling the ring planner or the bound code: a ring of n ranks takes n-1 steps
(Allgather, ReduceScatter) or 2(n-1) steps (Allreduce = RS + AG) of one block
of M / (n x channels) bytes per channel, and in the fluid model a pipelined
ring whose legs all take the same time runs exactly at (steps x slowest leg).
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.baselines import ALGORITHMS, NotApplicable, TreePlan, applicable_baselines, baseline, tree_plan
from taccl_py.baselines.common import pipeline_pieces
from taccl_py.baselines.tree import nccl_double_tree_edges
from taccl_py.bounds import lower_bound
from taccl_py.cli.main import main
from taccl_py.collectives import CollectiveKind
from taccl_py.errors import InputError
from taccl_py.library import SHIPPED_NAMES, fully_connected, resolve_topology, ring
from taccl_py.library.grids import switch_tree
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimOptions, SimResult, simulate
from taccl_py.testing import topologies
from taccl_py.topology import Topology

MiB = 1 << 20
LARGE_GPUS = 64
"""From this many GPUs on, a shipped topology is only checked with cheap baselines (see below)."""


@functools.cache
def shipped(name: str) -> Topology:
    """A shipped topology, loaded once per test session."""
    return resolve_topology(name)


def run(topology: Topology, schedule: Schedule, size: float, overhead: float = 0.0) -> SimResult:
    """Simulate and insist the schedule is correct."""
    result = simulate(topology, schedule, size, SimOptions(step_overhead_us=overhead))
    assert result.correct, f"{schedule.name} {schedule.collective.kind.value} on {topology.name}: {result.error}"
    return result


def check_timeline(result: SimResult, schedule: Schedule) -> None:
    """Every transfer starts, arrives and commits in that order, within the makespan."""
    assert result.time_us is not None and math.isfinite(result.time_us) and result.time_us > 0
    assert len(result.start_us) == len(schedule.transfers)
    assert np.all(result.start_us <= result.arrive_us)
    assert np.all(result.arrive_us <= result.commit_us)
    assert float(np.max(result.commit_us)) == pytest.approx(result.time_us)


def ir_channels(schedule: Schedule, channels: int) -> int:
    """Schedule channels used by ``channels`` baseline channels: a tree Allreduce channel sends up and down
    on two connections (NCCL's tree up and down), every other baseline on one."""
    double = schedule.name == "tree" and schedule.collective.kind is CollectiveKind.ALLREDUCE
    return 2 * channels if double else channels


# --------------------------------------------------- every baseline, every topology
def _case(name: str, kind: CollectiveKind) -> tuple[tuple[int, ...], dict[str, int | None]]:
    """Sizes and channel counts the correctness check uses on one topology.

    Below :data:`LARGE_GPUS` every baseline runs with its default channel count
    at a small size (one piece per pipelined step) and a large one (deep
    pipelining). The 64- to 128-GPU topologies build up to 16 rings of N-1
    steps: mi250x8 alone takes ~26 s for all its default-channel baselines (a
    ring Allreduce is 520k transfers), more than this file's whole budget. There
    they run once at 1 MiB with 2 channels for ring, tree and rd (the same ring
    and tree construction, channel after channel, exercised on every topology
    below the threshold with all channels), direct with its default; and
    Broadcast / Reduce, whose chains are cheap at 4 KiB, keep every default
    channel, so every ring and tree of the default plan is still walked once.
    """
    n = shipped(name).num_gpus
    if n < LARGE_GPUS:
        return (4096, 16 * MiB), dict.fromkeys(ALGORITHMS)
    if kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
        return (4096,), dict.fromkeys(ALGORITHMS)
    return (MiB,), {"ring": 2, "tree": 2, "rd": 2, "direct": None, "oneshot": None, "hier": None, "hier-lb": None}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CollectiveKind), ids=[k.value for k in CollectiveKind])
@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_every_applicable_baseline_is_correct(name: str, kind: CollectiveKind) -> None:
    """Each baseline applicable to (topology, collective) is a correct schedule of that collective."""
    topology = shipped(name)
    names = applicable_baselines(topology, kind)
    assert names, f"no baseline for {kind.value} on {name}"
    if kind is CollectiveKind.ALLTOALL:
        assert names == ["direct"]
    else:
        assert "ring" in names  # every shipped topology has at least 2 GPUs
    sizes, channels = _case(name, kind)
    for algorithm in names:
        for size in sizes:
            schedule = baseline(topology, kind, algorithm, channels=channels[algorithm], size_bytes=size)
            col = schedule.collective
            assert (col.kind, col.num_ranks) == (kind, topology.num_gpus)
            assert schedule.notes["algorithm"] == algorithm
            assert schedule.num_channels == ir_channels(schedule, schedule.notes["channels"])
            if channels[algorithm] is not None:
                assert schedule.notes["channels"] == channels[algorithm]
            result = run(topology, schedule, size)
            check_timeline(result, schedule)
            # no schedule beats the physical limit (the property tests of test_bounds.py, on real machines)
            efficiency = lower_bound(topology, kind, size).efficiency(result.time_us)
            assert efficiency is not None and 0 < efficiency <= 1, (algorithm, size, efficiency)


def test_applicable_lists_are_ordered_and_runnable() -> None:
    """applicable_baselines keeps ALGORITHMS order and rejects what it leaves out with NotApplicable."""
    topology = ring(6, 40.0, 0.5)
    for kind in CollectiveKind:
        names = applicable_baselines(topology, kind)
        assert names == [a for a in ALGORITHMS if a in names]
        for algorithm in set(ALGORITHMS) - set(names):
            with pytest.raises(NotApplicable):
                baseline(topology, kind, algorithm)


# --------------------------------------------------------- ring formulas, ring topology
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 12])
def test_ring_allgather_formula_on_ring(n: int) -> None:
    """One channel: (n-1)(alpha + M/(nB)); reduce-scatter takes the same; allreduce twice as long."""
    alpha, bandwidth = 0.7, 25.0  # us, GB/s
    topology = ring(n, bandwidth, alpha)
    size = n * 3_000_000
    block_us = size / n / (bandwidth * 1e3)
    ag = run(topology, baseline(topology, "allgather", "ring", channels=1), size)
    ag_us = (n - 1) * (alpha + block_us)
    assert ag.time_us == pytest.approx(ag_us, rel=1e-12)
    assert ag.algbw_GBps == pytest.approx(size / ag_us / 1e3)
    assert ag.busbw_GBps == pytest.approx(size / ag_us / 1e3 * (n - 1) / n)
    rs = run(topology, baseline(topology, "reducescatter", "ring", channels=1), size)
    assert rs.time_us == pytest.approx(ag_us, rel=1e-12)
    ar = run(topology, baseline(topology, "allreduce", "ring", channels=1), size)
    assert ar.time_us == pytest.approx(2 * ag_us, rel=1e-12)
    assert ar.busbw_GBps == pytest.approx(size / (2 * ag_us) / 1e3 * 2 * (n - 1) / n)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_ring_default_channels_use_both_directions(n: int) -> None:
    """By default a bidirectional ring runs one ring per direction (n > 2), halving the bandwidth term."""
    alpha, bandwidth = 0.5, 50.0
    topology = ring(n, bandwidth, alpha)
    size = n * MiB
    schedule = baseline(topology, "allgather", "ring")
    directions = 1 if n == 2 else 2  # two GPUs share one link each way
    assert schedule.num_channels == directions
    result = run(topology, schedule, size)
    assert result.time_us == pytest.approx((n - 1) * (alpha + size / (n * directions) / (bandwidth * 1e3)),
                                           rel=1e-12)


def test_golden_ring8_baseline() -> None:
    """ring8 (ASTRA-sim's 50 GiB/s, 0.5 us) with one channel reproduces the golden 140.21875 us."""
    topology = shipped("ring8")
    result = run(topology, baseline(topology, "allgather", "ring", channels=1), 8 * MiB)
    assert result.time_us == pytest.approx(140.21875, abs=1e-9)


# ------------------------------------------------------ ring formulas, two DGX A100
def dgx_a100x2_ring_parameters(topology: Topology) -> tuple[float, float, int]:
    """(latency us, bandwidth GB/s) of a cross-machine leg GPU -> NIC -> IB -> NIC -> GPU, and NICs per machine.

    Read from the topology's links: NCCL builds one ring per NIC (each ring
    leaves a machine through one NIC and enters the next through another), so
    the channel count is the NIC count of a machine.
    """
    links = topology.links
    kinds = {s.name: s.kind for s in topology.switches}
    gpu_to_nic = [lk for lk in links if isinstance(lk.src, int) and kinds.get(str(lk.dst)) == "nic"]
    nic_to_ib = [lk for lk in links if kinds.get(str(lk.src)) == "nic" and kinds.get(str(lk.dst)) == "ib"]
    ib_to_nic = [lk for lk in links if kinds.get(str(lk.src)) == "ib" and kinds.get(str(lk.dst)) == "nic"]
    nic_to_gpu = [lk for lk in links if kinds.get(str(lk.src)) == "nic" and isinstance(lk.dst, int)]
    hops = (gpu_to_nic, nic_to_ib, ib_to_nic, nic_to_gpu)
    for hop in hops:  # every NIC-side link alike, so one leg describes them all
        assert hop and len({(lk.latency, lk.bandwidth) for lk in hop}) == 1
    latency = sum(hop[0].latency for hop in hops)
    bandwidth = min(hop[0].bandwidth for hop in hops)
    nics = sum(1 for lk in gpu_to_nic if lk.src in topology.machines[0])
    return latency, bandwidth, nics


def dgx_a100x2_ring_us(topology: Topology, steps: int, size: float, channels: int, overhead: float = 0.0) -> float:
    """steps x (cross-machine leg): the NIC leg is every ring's slowest.

    An NVLink leg (GPU -> NVSwitch -> GPU, 0.7 us) shares a GPU's 300 GB/s
    port with at most channels - 1 other rings, so it is faster than the 25 GB/s
    NIC leg at every size; the check below keeps that premise honest.
    """
    latency, bandwidth, _ = dgx_a100x2_ring_parameters(topology)
    nvlink = [lk for lk in topology.links if lk.kind == "nvlink"]
    nv_latency = 2 * nvlink[0].latency
    nv_bandwidth = min(lk.bandwidth for lk in nvlink)
    block = size / (topology.num_gpus * channels)
    nic_leg = latency + overhead + block / (bandwidth * 1e3)
    assert nv_latency + overhead + (channels - 1) * block / (nv_bandwidth * 1e3) < nic_leg
    return steps * nic_leg


def test_dgx_a100x2_ring_parameters() -> None:
    """The shipped model: 2.6 us and 25 GB/s across machines, 8 NICs per machine."""
    assert dgx_a100x2_ring_parameters(shipped("dgx-a100x2")) == pytest.approx((2.6, 25.0, 8))


@pytest.mark.parametrize("size_spec,size", [("1KB", 1024), ("1MB", MiB), ("64MB", 64 * MiB), ("1GB", 1 << 30)])
def test_dgx_a100x2_baseline_table_ring_matches_formula(capsys: pytest.CaptureFixture[str], size_spec: str,
                                                         size: int) -> None:
    """`taccl baseline` on dgx-a100x2: ring allreduce = 2(n-1)(alpha_NIC + M/(n x 8 x B_NIC))."""
    topology = shipped("dgx-a100x2")
    _, _, nics = dgx_a100x2_ring_parameters(topology)
    with pytest.raises(SystemExit) as done:
        main(["--ideal", "baseline", "-t", "dgx-a100x2", "-c", "allreduce", "-s", size_spec, "-a", "ring", "--json"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    data: dict[str, Any] = json.loads(out)
    assert data["size_bytes"] == size
    (entry,) = data["baselines"]
    assert entry["algorithm"] == "ring" and entry["correct"] is True
    assert entry["channels"] == nics
    n = topology.num_gpus
    expected = dgx_a100x2_ring_us(topology, 2 * (n - 1), size, nics)
    assert entry["time_us"] == pytest.approx(expected, rel=1e-9)
    assert entry["algbw_GBps"] == pytest.approx(size / expected / 1e3, rel=1e-9)
    assert entry["busbw_GBps"] == pytest.approx(size / expected / 1e3 * 2 * (n - 1) / n, rel=1e-9)
    assert 0 < entry["efficiency"] <= 1


@pytest.mark.parametrize("channels", [1, 2, 4, 8])
def test_dgx_a100x2_ring_channels(channels: int) -> None:
    """k rings take k different NICs: allgather = (n-1)(alpha_NIC + M/(n k B_NIC))."""
    topology = shipped("dgx-a100x2")
    size = 32 * MiB
    schedule = baseline(topology, "allgather", "ring", channels=channels)
    assert schedule.num_channels == schedule.notes["channels"] == channels
    result = run(topology, schedule, size)
    n = topology.num_gpus
    assert result.time_us == pytest.approx(dgx_a100x2_ring_us(topology, n - 1, size, channels), rel=1e-9)


# ------------------------------------------------------------------ NCCL's double binary tree
def machine_trees(topology: Topology, plan: TreePlan) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
    """Per channel: the (child, parent) machines of its reduce legs that cross machines, in program order, and
    the (child, parent) machines of its broadcast legs that do."""
    machine = topology.machine_of
    out = []
    for channel in plan.channels:
        ups = [(machine[leg.src], machine[leg.dst]) for leg in channel.reduce_legs
               if machine[leg.src] != machine[leg.dst]]
        downs = [(machine[leg.dst], machine[leg.src]) for leg in channel.bcast_legs
                 if machine[leg.src] != machine[leg.dst]]
        out.append((ups, downs))
    return out


@pytest.mark.parametrize("count", range(2, 21))
def test_tree_allreduce_runs_nccls_two_trees_of_machines(count: int) -> None:
    """Channel k reduces up and broadcasts down tree k % 2 of NCCL's double binary tree (trees.cc), children's
    subtrees first: machine 0 the root of the first tree, the second mirrored (even counts) or shifted (odd)."""
    topology = switch_tree(count, 2)
    plan = tree_plan(topology, CollectiveKind.ALLREDUCE)
    assert len(plan.channels) >= 2
    for k, (ups, downs) in enumerate(machine_trees(topology, plan)):
        assert ups == nccl_double_tree_edges(count, k % 2), k
        assert sorted(downs) == sorted(ups), k


@settings(max_examples=30, deadline=None)
@given(count=st.integers(2, 128))
def test_tree_allreduce_trees_share_no_inner_machine_but_a_root(count: int) -> None:
    """The baseline's two trees over ``count`` machines span them, a machine has at most two children, and no
    machine but a root is an inner node of both (so none carries an inner node's traffic on both trees)."""
    topology = switch_tree(count, 1)
    trees = machine_trees(topology, tree_plan(topology, CollectiveKind.ALLREDUCE, channels=2))
    inner = []
    for ups, _ in trees:
        parents = [p for _, p in ups]
        roots = set(range(count)) - {c for c, _ in ups}
        assert len(roots) == 1 and len(ups) == count - 1 and len({c for c, _ in ups}) == count - 1
        assert max(parents.count(m) for m in roots | set(parents)) <= 2
        inner.append(set(parents) - roots)
    assert not inner[0] & inner[1]


@pytest.mark.parametrize("name", ["ndv2x8", "ndv2x9", "dgx-h100x3"])
def test_tree_allreduce_on_many_machines_is_correct(name: str) -> None:
    """Correct in the simulator and above the lower bound on 8 and 9 machines (the second tree mirrored and
    shifted) and on 3 (where NCCL's trees are chains), at a size with several pieces per channel."""
    topology = resolve_topology(name)
    for size in (64 * 1024, 4 * MiB):
        schedule = baseline(topology, "allreduce", "tree", size_bytes=size)
        result = run(topology, schedule, size)
        assert result.time_us is not None
        assert result.time_us >= lower_bound(topology, "allreduce", size).bound_us * (1 - 1e-9)


# --------------------------------------------------------------------- step overhead
@pytest.mark.parametrize("overhead", [0.5, 3.0])
def test_step_overhead_adds_per_step_latency(overhead: float) -> None:
    """NCCL's per-step software latency is paid once per ring step."""
    n, alpha, bandwidth = 6, 0.7, 25.0
    topology = ring(n, bandwidth, alpha)
    size = n * MiB
    schedule = baseline(topology, "allgather", "ring", channels=1)
    plain = run(topology, schedule, size)
    slow = run(topology, schedule, size, overhead)
    assert slow.time_us == pytest.approx((n - 1) * (alpha + overhead + size / n / (bandwidth * 1e3)), rel=1e-12)
    assert plain.time_us is not None and slow.time_us == pytest.approx(plain.time_us + (n - 1) * overhead)
    a100 = shipped("dgx-a100x2")
    ar = baseline(a100, "allreduce", "ring")
    m = a100.num_gpus
    result = run(a100, ar, size, overhead)
    assert result.time_us == pytest.approx(dgx_a100x2_ring_us(a100, 2 * (m - 1), size, 8, overhead), rel=1e-9)


def test_step_overhead_shortens_pipelines() -> None:
    """A costlier step makes pipelined chains use fewer, larger pieces."""
    topology = ring(8, 50.0, 0.5)
    pieces = [baseline(topology, "broadcast", "ring", size_bytes=64 * MiB, step_overhead_us=overhead).notes["pieces"]
              for overhead in (0.0, 5.0, 50.0)]
    assert pieces[0] > pieces[1] > pieces[2] >= 1


# -------------------------------------------------------------------------- channels
@pytest.mark.parametrize("channels", [1, 2])
def test_channels_option_on_ring(channels: int) -> None:
    """channels=k runs k rings, each with 1/k of the data."""
    n, alpha, bandwidth = 5, 1.0, 10.0
    topology = ring(n, bandwidth, alpha)
    size = n * MiB
    schedule = baseline(topology, "allgather", "ring", channels=channels)
    assert schedule.num_channels == channels
    assert schedule.collective.chunk_factor == channels
    result = run(topology, schedule, size)
    assert result.time_us == pytest.approx((n - 1) * (alpha + size / (n * channels) / (bandwidth * 1e3)),
                                           rel=1e-12)


@pytest.mark.parametrize("algorithm,kind", [("direct", "alltoall"), ("direct", "allreduce"), ("tree", "allreduce"),
                                            ("rd", "allgather"), ("ring", "broadcast")])
def test_channels_option_other_baselines(algorithm: str, kind: str) -> None:
    """Every baseline honours channels=3 and stays correct."""
    topology = fully_connected(4, 50.0, 0.5)
    schedule = baseline(topology, kind, algorithm, channels=3, size_bytes=MiB)
    assert schedule.notes["channels"] == 3
    assert schedule.num_channels == ir_channels(schedule, 3)
    assert schedule.collective.chunk_factor % 3 == 0
    run(topology, schedule, MiB)


@pytest.mark.parametrize("channels", [0, 65, -1])
def test_channels_out_of_range(channels: int) -> None:
    with pytest.raises(InputError, match="--channels"):
        baseline(ring(4), "allgather", "ring", channels=channels)


def test_chunk_factor_must_split_over_channels() -> None:
    with pytest.raises(NotApplicable, match="multiple of the 2 channels"):
        baseline(ring(4), "allgather", "ring", channels=2, chunk_factor=3)
    schedule = baseline(ring(4), "allgather", "ring", channels=2, chunk_factor=4)
    assert schedule.collective.chunk_factor == 4
    run(ring(4), schedule, 4 * MiB)


# ------------------------------------------------------------------ recursive doubling
@pytest.mark.parametrize("n", range(2, 10))
def test_recursive_doubling_only_for_powers_of_two(n: int) -> None:
    """rd is offered, and builds, exactly when N is a power of two; it then takes log2 N steps."""
    topology = fully_connected(n, 50.0, 0.5)
    power_of_two = n & (n - 1) == 0
    for kind in ("allgather", "reducescatter", "allreduce"):
        assert ("rd" in applicable_baselines(topology, kind)) == power_of_two
        if not power_of_two:
            with pytest.raises(NotApplicable, match="power-of-two GPU count"):
                baseline(topology, kind, "rd")
            continue
        schedule = baseline(topology, kind, "rd", channels=1)
        phases = 2 if kind == "allreduce" else 1
        assert len(schedule) == phases * n * int(math.log2(n))  # every rank talks to one partner per step
        run(topology, schedule, n * MiB)


@pytest.mark.slow
def test_recursive_doubling_on_shipped_topologies() -> None:
    """Allgather rd appears on a shipped topology iff its GPU count is a power of two (72-GPU NVL72: no)."""
    for name in SHIPPED_NAMES:
        n = shipped(name).num_gpus
        assert ("rd" in applicable_baselines(shipped(name), "allgather")) == (n & (n - 1) == 0), name
    assert "rd" not in applicable_baselines(shipped("gb200-nvl72"), "allgather")


def test_rd_is_never_offered_for_other_collectives() -> None:
    topology = fully_connected(4)
    for kind in ("alltoall", "broadcast", "reduce"):
        assert "rd" not in applicable_baselines(topology, kind)
        with pytest.raises(NotApplicable, match="recursive doubling runs"):
            baseline(topology, kind, "rd")


# ------------------------------------------------------------------------ bad requests
@pytest.mark.parametrize("algorithm", ["bogus", "RING", "", "nccl"])
def test_unknown_algorithm_errors(algorithm: str) -> None:
    with pytest.raises(InputError, match=r"--algorithm: unknown baseline") as caught:
        baseline(ring(4), "allgather", algorithm)
    assert repr(algorithm) in str(caught.value)
    assert "ring, tree, direct, rd" in str(caught.value)


@pytest.mark.parametrize("algorithm,kind,message", [
    ("ring", "alltoall", "no ring alltoall"),
    ("tree", "allgather", "no tree allgather"),
    ("tree", "alltoall", "no tree alltoall"),
])
def test_baseline_not_applicable(algorithm: str, kind: str, message: str) -> None:
    with pytest.raises(NotApplicable, match=message):
        baseline(ring(4), kind, algorithm)


def test_unknown_collective_and_root() -> None:
    with pytest.raises(InputError, match="unknown collective 'gather'"):
        baseline(ring(4), "gather", "ring")
    with pytest.raises(InputError, match="--root"):
        baseline(ring(4), "broadcast", "ring", root=4)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "direct"])
@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
def test_rooted_baselines_any_root(algorithm: str, kind: str) -> None:
    """Broadcast and Reduce are correct from every root."""
    topology = shipped("dgx-a100")
    for root in range(topology.num_gpus):
        schedule = baseline(topology, kind, algorithm, root=root, size_bytes=MiB)
        assert schedule.collective.root == root
        run(topology, schedule, MiB)


def test_subnormal_latency_does_not_break_pipelining() -> None:
    """Regression: a 1e-310 us latency overflowed the pipelining optimum to inf (OverflowError)."""
    assert pipeline_pieces(2, 4096.0, 0.001, 2.2e-309) == 4096 // 512  # capped by the 512-byte pieces
    topology = ring(3, 1.0, 1e-310)
    for kind, algorithm in (("broadcast", "ring"), ("broadcast", "tree"), ("allreduce", "tree")):
        run(topology, baseline(topology, kind, algorithm, size_bytes=4096), 4096)


def test_a_baseline_built_again_is_the_one_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """baseline() returns the schedule it built last for the same arguments (schedules are immutable), builds again
    for any other argument, and keeps at most MEMO_TRANSFERS transfers, each schedule at most a quarter of them."""
    import taccl_py.baselines as baselines

    topo = resolve_topology("dgx-a100")
    first = baseline(topo, "allreduce", "ring", size_bytes=2**20)
    assert baseline(topo, CollectiveKind.ALLREDUCE, "ring", size_bytes=2**20) is first
    assert baseline(resolve_topology("dgx-a100"), "allreduce", "ring", size_bytes=2**20) is first  # an equal topology
    other = baseline(topo, "allreduce", "ring", size_bytes=2**30, chunk_factor=16)
    assert other is not first and len(other.transfers) > len(first.transfers)
    assert baseline(topo, "allreduce", "tree", size_bytes=2**20) is not first
    with pytest.raises(InputError):  # arguments are checked before the memo is looked at
        baseline(topo, "allreduce", "ring", channels=0)

    monkeypatch.setattr(baselines, "_built", type(baselines._built)())
    monkeypatch.setattr(baselines, "_built_transfers", [0])
    monkeypatch.setattr(baselines, "MEMO_TRANSFERS", 4 * len(other.transfers))  # room for four of them

    def build(size: int) -> Schedule:
        return baseline(topo, "allreduce", "ring", size_bytes=size, chunk_factor=16)

    four = [build(2**k) for k in (27, 28, 29, 30)]
    assert [build(2**k) for k in (27, 28, 29, 30)] == four and all(
        build(2**k) is s for k, s in zip((27, 28, 29, 30), four, strict=True))
    fifth = build(2**31)  # the least recently used (2**27) goes
    assert baselines._built_transfers[0] == sum(len(s.transfers) for s in baselines._built.values()) == 4 * len(
        fifth.transfers)
    assert build(2**28) is four[1] and build(2**31) is fifth and build(2**27) is not four[0]
    monkeypatch.setattr(baselines, "MEMO_TRANSFERS", 4 * len(other.transfers) - 4)  # now over a quarter: not kept
    assert build(2**32) is not build(2**32)
    baselines.forget_built()  # what a benchmark timing builds calls
    assert baselines._built_transfers[0] == 0 and build(2**31) is not fifth and build(2**31) == fifth


def test_a_schedules_structural_check_is_the_topologys_it_is_asked_about() -> None:
    """Schedule.structural_error is found once per topology (a fit simulates one schedule hundreds of times): asked
    about another topology it answers for that one, and a pickled schedule does not carry the answer."""
    import pickle

    ring8 = ring(8)
    schedule = baseline(ring8, "allgather", "ring")
    assert schedule.structural_error(ring8) is None
    assert schedule.structural_error(ring8) is None
    twelve = ring(12)
    assert "12 GPUs" in (schedule.structural_error(twelve) or "")
    fewer = Topology(ring8.name, 8, ring8.links[:-1])  # the ring's last link gone
    assert "does not exist" in (schedule.structural_error(fewer) or "")
    assert schedule.structural_error(ring8) is None
    copy = pickle.loads(pickle.dumps(schedule))
    assert copy == schedule and "_checked" not in copy.__dict__


_RING_BUILDERS = {CollectiveKind.ALLGATHER: "ring_allgather", CollectiveKind.REDUCESCATTER: "ring_reducescatter",
                  CollectiveKind.ALLREDUCE: "ring_allreduce"}


def _ring_waits_agree(topology: Topology, kind: CollectiveKind, channels: int | None, pieces: int) -> None:
    from taccl_py.baselines import ring as ring_module
    from taccl_py.baselines.layout import ring_plan
    from taccl_py.msccl.lowering import fewest_connections, fewest_connections_from_waits, send_waits

    plan = ring_plan(topology, channels)
    built = getattr(ring_module, _RING_BUILDERS[kind])(plan, topology.name, chunk_factor=plan.channels * pieces)
    from_plan = ring_module.ring_send_waits(plan, kind, pieces)
    assert from_plan == send_waits(built)
    for dialect in ("v1", "v2"):
        assert fewest_connections_from_waits(from_plan, dialect) == fewest_connections(built, dialect)


@pytest.mark.parametrize("kind", list(_RING_BUILDERS))
def test_ring_send_waits_are_the_built_rings_relays_included(kind: CollectiveKind) -> None:
    """The sends that surely wait, per connection, known from the ring plan are those the lowering reads from the
    built ring: a 3 x 3 mesh, whose rings relay through GPUs (the relay's legs wait in the first step too), and a
    line of 70 GPUs on one channel, whose connections take more steps than a threadblock holds."""
    from taccl_py.baselines.layout import ring_plan
    from taccl_py.library import mesh

    grid = mesh((3, 3))
    assert ring_plan(grid, None).relays
    for channels in (None, 1, 3):
        for pieces in (1, 2):
            _ring_waits_agree(grid, kind, channels, pieces)
    _ring_waits_agree(mesh((70,)), kind, 1, 1)


@settings(max_examples=25, deadline=None)
@given(topology=topologies(max_gpus=7), kind=st.sampled_from(list(_RING_BUILDERS)),
       channels=st.sampled_from([None, 1, 2, 4]), pieces=st.integers(1, 3))
def test_ring_send_waits_are_the_built_rings(topology: Topology, kind: CollectiveKind, channels: int | None,
                                             pieces: int) -> None:
    """On random topologies, the plan's waits are the built ring's, connection by connection."""
    _ring_waits_agree(topology, kind, channels, pieces)
