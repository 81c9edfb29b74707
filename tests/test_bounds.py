"""Lower bounds: hand-checked cut values, brute-force cuts, and no correct schedule ever beating them.

Units: M bytes, B GB/s (1e3 bytes/us), alpha us. A cut bound is the bytes
that must cross the binding cut over its bandwidth, plus the latency of the
cheapest route through that cut (no byte crosses before it); the bound is the
larger of that and the latency eccentricity.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.baselines import applicable_baselines, baseline
from taccl_py.bounds import crossing_bound, lower_bound, pair_bound
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import InputError
from taccl_py.library import resolve_topology, ring, switch_star
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import SimOptions, simulate
from taccl_py.testing import topologies
from taccl_py.topology import Link, Switch, Topology, check_topology

M = 8e6  # bytes: large enough that the bandwidth term binds on every hand case


def gbps(bandwidth: float) -> float:
    """GB/s as bytes per microsecond."""
    return bandwidth * 1e3


# ------------------------------------------------------------------- hand cases
@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_ring_cut_bounds(n: int) -> None:
    """Bidirectional ring: all but one GPU send to the last over its two in-links (2B)."""
    bw, alpha = 10.0, 1.0
    topology = ring(n, bw, alpha)
    gather = (n - 1) / n * M / (2 * gbps(bw)) + alpha
    assert lower_bound(topology, "allgather", M).bound_us == pytest.approx(gather, rel=1e-12)
    assert lower_bound(topology, "reducescatter", M).bound_us == pytest.approx(gather, rel=1e-12)
    # broadcast: the whole buffer leaves the root over its two links
    assert lower_bound(topology, "broadcast", M).bound_us == pytest.approx(M / (2 * gbps(bw)) + alpha, rel=1e-12)
    assert lower_bound(topology, "reduce", M, root=1).bound_us == pytest.approx(M / (2 * gbps(bw)) + alpha,
                                                                              rel=1e-12)


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_ring_alltoall_bound(n: int) -> None:
    """On a ring the all-to-all optimum is total hop-bytes over total bandwidth (shortest routes, every link busy).

    Each rank sends M/n to every other one; the distances from a rank sum to
    sum_k min(k, n-k); n ranks, 2n directed links of B.
    """
    bw, alpha = 10.0, 1.0
    hops = sum(min(k, n - k) for k in range(1, n))
    expected = n * hops * (M / n) / (2 * n * gbps(bw)) + alpha
    bound = lower_bound(ring(n, bw, alpha), "alltoall", M)
    assert bound.bound_us == pytest.approx(expected, rel=1e-6)  # the LP optimum is shaved by 1e-7
    if n == 4:  # here the bisection cut alone gives it: 2 x 2 pieces of M/4 over 2B
        assert bound.bandwidth_us == pytest.approx(2 * 2 * (M / 4) / (2 * gbps(bw)), rel=1e-6)


@pytest.mark.parametrize("n", [2, 5, 8])
def test_star_switch_bounds(n: int) -> None:
    """GPUs on one switch: every GPU receives (n-1)/n M over its one down-link; routes cross two links."""
    bw, alpha = 10.0, 1.0
    topology = switch_star(n, bw, alpha)
    gather = (n - 1) / n * M / gbps(bw) + 2 * alpha
    for kind in ("allgather", "reducescatter", "alltoall"):
        assert lower_bound(topology, kind, M).bound_us == pytest.approx(gather, rel=1e-9), kind
    assert lower_bound(topology, "allreduce", M).bound_us == pytest.approx(
        2 * (n - 1) / n * M / gbps(bw) + 2 * alpha, rel=1e-9)
    assert lower_bound(topology, "broadcast", M).bound_us == pytest.approx(M / gbps(bw) + 2 * alpha, rel=1e-9)


NIC_BW, NIC_ALPHA, NV_BW, NV_ALPHA = 12.5, 0.5, 100.0, 0.35
IB_ALPHA = 1.0


def two_machines() -> Topology:
    """Two 4-GPU machines on their own NVSwitch, joined by one NIC pair: GPU 3 <-> nic0 <-> nic1 <-> GPU 4."""
    links: list[Link] = []

    def both(a: int | str, b: int | str, bandwidth: float, latency: float) -> None:
        links.extend([Link(a, b, bandwidth, latency), Link(b, a, bandwidth, latency)])

    for m in range(2):
        for g in range(4 * m, 4 * m + 4):
            both(g, f"nvs{m}", NV_BW, NV_ALPHA)
    both(3, "nic0", NIC_BW, NIC_ALPHA)
    both("nic0", "nic1", NIC_BW, IB_ALPHA)
    both("nic1", 4, NIC_BW, NIC_ALPHA)
    switches = (Switch("nvs0", "nvswitch"), Switch("nvs1", "nvswitch"), Switch("nic0", "nic"), Switch("nic1", "nic"))
    return check_topology(Topology("two-machines", 8, tuple(links), switches=switches,
                                   machines=((0, 1, 2, 3), (4, 5, 6, 7))))


def test_two_machines_one_nic_link() -> None:
    """Half the blocks of an allgather must cross the single NIC link; all of an allreduce, each way."""
    topology = two_machines()
    crossing = 2 * NIC_ALPHA + IB_ALPHA  # the GPU 3 -> GPU 4 route: the only way across
    half = (M / 2) / gbps(NIC_BW)
    for kind in ("allgather", "reducescatter"):
        bound = lower_bound(topology, kind, M)
        assert bound.bound_us == pytest.approx(half + crossing, rel=1e-9), kind
        assert bound.cut_latency_us == pytest.approx(crossing)
        gpus = {v for v in bound.cut if isinstance(v, int)}
        assert gpus in ({0, 1, 2, 3}, {4, 5, 6, 7})  # one machine (the two are alike)
        assert "machine" in bound.explanation
    assert lower_bound(topology, "allreduce", M).bound_us == pytest.approx(2 * half + crossing, rel=1e-9)
    # all-to-all: 4 x 4 pieces of M/8 cross each way
    assert lower_bound(topology, "alltoall", M).bound_us == pytest.approx(16 * (M / 8) / gbps(NIC_BW) + crossing,
                                                                         rel=1e-6)
    assert lower_bound(topology, "broadcast", M).bound_us == pytest.approx(M / gbps(NIC_BW) + crossing, rel=1e-9)


@pytest.mark.parametrize("topology", [ring(4, 10.0, 1.0), ring(7, 10.0, 1.0), switch_star(6, 10.0, 1.0),
                                      two_machines()], ids=["ring4", "ring7", "star6", "two-machines"])
def test_allreduce_is_reducescatter_plus_allgather(topology: Topology) -> None:
    """On symmetric systems the allreduce data term is the sum of the reduce-scatter and allgather ones."""
    rs = lower_bound(topology, "reducescatter", M)
    ag = lower_bound(topology, "allgather", M)
    ar = lower_bound(topology, "allreduce", M)
    assert ar.bandwidth_us == pytest.approx(rs.bandwidth_us + ag.bandwidth_us, rel=1e-9)
    assert ar.bound_us == pytest.approx(ar.bandwidth_us + ar.cut_latency_us, rel=1e-12)


def test_allreduce_bound_is_not_the_sum_where_a_schedule_beats_it() -> None:
    """One slow GPU: streaming its data out while the sum streams back beats RS + AG, never the allreduce bound.

    GPU 0 reaches the switch at 1 GB/s, GPUs 1 and 2 at 100 GB/s. RS + AG
    would be 2 x (2/3) M / 1 GB/s; the schedule below moves M out of GPU 0 and
    M back in, concurrently and pipelined, in about M / 1 GB/s.
    """
    links: list[Link] = []
    for g, bw in ((0, 1.0), (1, 100.0), (2, 100.0)):
        links += [Link(g, "sw", bw, 0.1), Link("sw", g, bw, 0.1)]
    topology = check_topology(Topology("slow-gpu", 3, tuple(links), switches=(Switch("sw"),)))
    pieces = 16
    col = Collective(CollectiveKind.ALLREDUCE, 3, pieces)

    def route(a: int, b: int) -> tuple[int, ...]:
        found = topology.gpu_route(a, b)
        assert found is not None
        return found

    transfers = []
    for chunk in range(col.num_chunks):  # GPU 1 sums every chunk and sends it back
        transfers += [Transfer(0, 1, (chunk,), route(0, 1), Op.REDUCE), Transfer(2, 1, (chunk,), route(2, 1), Op.REDUCE),
                      Transfer(1, 0, (chunk,), route(1, 0)), Transfer(1, 2, (chunk,), route(1, 2))]
    size = 3e6
    result = simulate(topology, Schedule(col, tuple(transfers)), size)
    assert result.correct, result.error
    assert result.time_us is not None
    rs_plus_ag = lower_bound(topology, "reducescatter", size).bound_us + lower_bound(topology, "allgather",
                                                                                      size).bound_us
    assert result.time_us < 0.8 * rs_plus_ag
    bound = lower_bound(topology, "allreduce", size)
    assert bound.bound_us <= result.time_us
    assert bound.bandwidth_us == pytest.approx(size / gbps(1.0), rel=1e-9)  # M out of GPU 0 (and back in)


# ---------------------------------------------------------------------- latency
@pytest.mark.parametrize("n,hops", [(5, 2), (8, 4), (9, 4)])
def test_latency_bound_on_ring(n: int, hops: int) -> None:
    """For a tiny buffer the bound is the hop eccentricity x alpha."""
    alpha = 1.5
    bound = lower_bound(ring(n, 10.0, alpha), "allgather", 8)
    assert bound.latency_us == pytest.approx(hops * alpha)
    assert bound.bound_us == pytest.approx(hops * alpha)
    assert bound.explanation.startswith("latency")
    # the same topology at a large size: the data term binds instead
    big = lower_bound(ring(n, 10.0, alpha), "allgather", 1e9)
    assert big.bound_us == pytest.approx(big.bandwidth_us + alpha) and big.bound_us > hops * alpha


def test_latency_bound_uses_cheapest_relay() -> None:
    """Eccentricity follows the lowest-latency path, relays through GPUs allowed."""
    links = [Link(0, 1, 10.0, 1.0), Link(1, 0, 10.0, 1.0), Link(1, 2, 10.0, 1.0), Link(2, 1, 10.0, 1.0),
             Link(0, 2, 10.0, 5.0), Link(2, 0, 10.0, 5.0)]
    topology = check_topology(Topology("tri", 3, tuple(links)))
    assert lower_bound(topology, "allgather", 1).latency_us == pytest.approx(2.0)  # 0 -> 1 -> 2, not 5 us
    assert lower_bound(topology, "broadcast", 1, root=1).latency_us == pytest.approx(1.0)


def test_step_overhead_raises_both_latency_terms() -> None:
    topology = ring(8, 10.0, 1.0)
    for size in (8, 1e8):
        plain = lower_bound(topology, "allgather", size)
        slow = lower_bound(topology, "allgather", size, step_overhead_us=2.5)
        assert slow.bound_us == pytest.approx(plain.bound_us + 2.5)
        assert slow.latency_us == pytest.approx(plain.latency_us + 2.5)
        assert slow.cut_latency_us == pytest.approx(plain.cut_latency_us + 2.5)


# ------------------------------------------------------------------- the record
def test_bound_fields_and_efficiency() -> None:
    """bound = max(latency, data + cut latency); algbw = size / bound; efficiency = bound / time."""
    bound = lower_bound(ring(6, 20.0, 0.5), "allgather", 3e6)
    assert bound.bound_us == max(bound.latency_us, bound.bandwidth_us + bound.cut_latency_us)
    assert bound.algbw_GBps == pytest.approx(3e6 / bound.bound_us / 1e3)
    assert bound.efficiency(2 * bound.bound_us) == pytest.approx(0.5)
    assert bound.efficiency(bound.bound_us) == 1.0
    # a schedule meeting the bound, an ulp faster after summing its times in another order: still 1.0
    assert bound.efficiency(bound.bound_us * (1 - 1e-15)) == 1.0
    # a real excess stays visible (it would mean the bound is wrong)
    assert bound.efficiency(bound.bound_us / 2) == pytest.approx(2.0)
    assert bound.efficiency(None) is None and bound.efficiency(0.0) is None
    assert bound.summary()["bound_us"] == bound.bound_us


def test_bandwidth_term_is_linear_in_size() -> None:
    topology = two_machines()
    for kind in CollectiveKind:
        one = lower_bound(topology, kind, 1e6)
        ten = lower_bound(topology, kind, 1e7)
        assert ten.bandwidth_us == pytest.approx(10 * one.bandwidth_us, rel=1e-12), kind
        assert ten.latency_us == one.latency_us


@pytest.mark.parametrize("size", [0, -1.0, math.nan])
def test_bad_size_rejected(size: float) -> None:
    with pytest.raises(InputError, match="--size"):
        lower_bound(ring(4), "allgather", size)


def test_bad_root_rejected() -> None:
    with pytest.raises(InputError, match="--root"):
        lower_bound(ring(4), "broadcast", 1e6, root=4)


def test_single_gpu_bound_is_zero() -> None:
    topology = check_topology(Topology("one", 1, ()))
    bound = lower_bound(topology, "allreduce", 1e6)
    assert (bound.bound_us, bound.algbw_GBps, bound.efficiency(1.0)) == (0.0, None, 0.0)


# ------------------------------------------------------ brute force on tiny graphs
def brute_force_cuts(topology: Topology) -> dict[str, float]:
    """Every vertex set S with GPUs on both sides: the cut ratios each bound maximises (us per byte x N)."""
    vertices = list(topology.vertices)
    n = topology.num_gpus
    best = {"gather": 0.0, "scatter": 0.0, "alltoall": 0.0, "whole": 0.0, "bcast": 0.0, "reduce": 0.0}
    for mask in range(1, 1 << len(vertices)):
        inside = {vertices[i] for i in range(len(vertices)) if mask >> i & 1}
        k = sum(1 for g in range(n) if g in inside)
        if k in (0, n):
            continue
        out = sum(gbps(lk.bandwidth) for lk in topology.links if lk.src in inside and lk.dst not in inside)
        into = sum(gbps(lk.bandwidth) for lk in topology.links if lk.dst in inside and lk.src not in inside)
        best["gather"] = max(best["gather"], k / out)
        best["scatter"] = max(best["scatter"], k / into)
        best["alltoall"] = max(best["alltoall"], k * (n - k) / out)
        best["whole"] = max(best["whole"], 1 / out, 1 / into)
        if 0 in inside:
            best["bcast"] = max(best["bcast"], 1 / out)
        else:
            best["reduce"] = max(best["reduce"], 1 / out)
    return best


@pytest.mark.slow
@settings(max_examples=300)
@given(topology=topologies(max_gpus=5, max_switches=3))
def test_cut_bounds_against_brute_force(topology: Topology) -> None:
    """Allgather / ReduceScatter / Broadcast / Reduce cut bounds are exact; Alltoall and Allreduce at least a cut."""
    n = topology.num_gpus
    cuts = brute_force_cuts(topology)

    def data_us(kind: str) -> float:
        return lower_bound(topology, kind, M).bandwidth_us

    assert data_us("allgather") == pytest.approx(M / n * cuts["gather"], rel=1e-9)
    assert data_us("reducescatter") == pytest.approx(M / n * cuts["scatter"], rel=1e-9)
    assert data_us("broadcast") == pytest.approx(M * cuts["bcast"], rel=1e-9)
    assert data_us("reduce") == pytest.approx(M * cuts["reduce"], rel=1e-9)
    assert data_us("alltoall") >= M / n * cuts["alltoall"] * (1 - 1e-6)
    assert data_us("allreduce") >= M * cuts["whole"] * (1 - 1e-9)


@pytest.mark.parametrize("name", ["dgx1", "dgx2", "ring8", "ndv2x2", "dgx2x2", "dgx-a100x2", "dgx-a100x4",
                                  "dgx-a100x2-forestcoll", "dgx-a100x2-rail", "mi250x2", "fat-tree16"])
def test_alltoall_flow_lp_runs_only_where_it_can_beat_the_cut(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Alltoall's flow LP is skipped when every pair on its own route already meets the cut bound (the LP's optimum is
    at most that routing's time): the bound is the same as with the LP run, and the LP runs where routes leave room."""
    import solver_models.mcf_bound as mcf
    from taccl_py import bounds

    topology = resolve_topology(name)
    n = topology.num_gpus
    solved: list[int] = []
    real = mcf.alltoall_mcf

    def counted(*args: object, **kwargs: object) -> object:
        solved.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(mcf, "alltoall_mcf", counted)
    quick = bounds._alltoall_profile(topology, 0.0)
    routed = bounds._direct_alltoall_us_per_pair_byte(topology)
    assert routed is not None and routed / n >= quick.us_per_byte * (1 - 1e-6)  # a flow never beats the bound
    assert bool(solved) == (routed / n > quick.us_per_byte), name
    monkeypatch.setattr(bounds, "_direct_alltoall_us_per_pair_byte", lambda topology: None)
    assert bounds._alltoall_profile(topology, 0.0) == quick


@settings(max_examples=60, deadline=None)
@given(topology=topologies(max_gpus=6, max_switches=3))
def test_alltoall_direct_routes_never_beat_the_bound(topology: Topology) -> None:
    """The direct routing's time is a flow's, so it is at least the Alltoall bound (the cut or the LP's optimum)."""
    from taccl_py import bounds

    routed = bounds._direct_alltoall_us_per_pair_byte(topology)
    assert routed is not None  # the strategy's backbone joins every GPU
    assert routed / topology.num_gpus >= bounds._alltoall_profile(topology, 0.0).us_per_byte * (1 - 1e-6)


# ------------------------------------------------- no correct schedule beats it
@pytest.mark.slow
@settings(max_examples=400)
@given(topology=topologies(max_gpus=8), kind=st.sampled_from(list(CollectiveKind)),
       size=st.sampled_from([1, 1000, 65536, 1 << 20, 1 << 26]) | st.integers(1, 1 << 28),
       channels=st.sampled_from([None, 1, 2]), overhead=st.sampled_from([0.0, 0.0, 0.8]), data=st.data())
def test_every_baseline_respects_the_bound(topology: Topology, kind: CollectiveKind, size: int,
                                           channels: int | None, overhead: float, data: st.DataObject) -> None:
    """Simulated time of every (correct) baseline >= lower bound, i.e. efficiency <= 1."""
    root = data.draw(st.integers(0, topology.num_gpus - 1), label="root")
    bound = lower_bound(topology, kind, size, root=root, step_overhead_us=overhead)
    names = applicable_baselines(topology, kind, root=root)
    assert names
    for algorithm in names:
        schedule = baseline(topology, kind, algorithm, channels=channels, root=root, size_bytes=size,
                            step_overhead_us=overhead)
        result = simulate(topology, schedule, size, SimOptions(step_overhead_us=overhead))
        assert result.correct, f"{algorithm}: {result.error}"
        assert result.time_us is not None
        assert result.time_us >= bound.bound_us * (1 - 1e-9), (algorithm, result.time_us, bound)
        efficiency = bound.efficiency(result.time_us)
        assert efficiency == pytest.approx(bound.bound_us / result.time_us)
        assert efficiency is not None and 0 < efficiency <= 1


# ------------------------------------------------- latency and data per pair
def test_pair_bound_on_a_ring_is_the_farthest_latency_plus_the_buffer_over_both_links() -> None:
    """ring of 8 (0.5 us per link): GPU 4 is 4 hops from GPU 0 either way, so 0's buffer enters 4 over its two
    links from 2.0 us on: T >= 2.0 + M / (2 B). For Allgather only a block (M/8) must."""
    topology = ring(8)
    assert {link.latency for link in topology.links} == {0.5}
    rate = gbps(topology.links[0].bandwidth)
    got = pair_bound(topology, "allreduce", 32768)
    assert got is not None and (got.source, got.destination) == (0, 4)
    assert got.bound_us == pytest.approx(2.0 + 32768 / (2 * rate))
    assert pair_bound(topology, "allgather", 32768).bound_us == pytest.approx(2.0 + 4096 / (2 * rate))
    assert pair_bound(topology, "broadcast", 32768, root=3).bound_us == pytest.approx(2.0 + 32768 / (2 * rate))


def test_pair_bound_counts_each_link_from_when_the_data_can_reach_it() -> None:
    """GPU 0 -> 1 directly (1 GB/s, 1 us) and through GPU 2 (0->2 and 2->1, 1 GB/s, 2 us each). 4000 B
    enter GPU 1 over the direct link from 1 us and over 2->1 from 4 us: 3000 B by 4 us, then 2000 B per us:
    T = 4.5 us (4000 B)."""
    links = [Link(0, 1, 1.0, 1.0), Link(0, 2, 1.0, 2.0), Link(2, 1, 1.0, 2.0), Link(1, 0, 1.0, 1.0),
             Link(1, 2, 1.0, 1.0), Link(2, 0, 1.0, 1.0)]
    topology = check_topology(Topology("tri", 3, tuple(links)))
    got = pair_bound(topology, "reduce", 4000, root=1)
    assert got is not None and got.source == 0 and got.bound_us == pytest.approx(4.5)


@pytest.mark.slow
@settings(max_examples=60)
@given(topology=topologies(max_gpus=7), kind=st.sampled_from(list(CollectiveKind)),
       size=st.sampled_from([1, 1000, 65536, 1 << 20]) | st.integers(1, 1 << 24),
       overhead=st.sampled_from([0.0, 0.0, 0.8]), data=st.data())
def test_no_baseline_beats_the_pair_or_crossing_bound(topology: Topology, kind: CollectiveKind, size: int,
                                                      overhead: float, data: st.DataObject) -> None:
    """Simulated time of every correct baseline (ring, trees, direct, one-shot exchanges...) >= the pair bound
    and >= the crossing bound (its single-GPU sides, where a GPU's links all end at GPUs)."""
    root = data.draw(st.integers(0, topology.num_gpus - 1), label="root")
    pair = pair_bound(topology, kind, size, root=root, step_overhead_us=overhead)
    assert pair is not None
    crossing = crossing_bound(topology, kind, size, root=root, step_overhead_us=overhead)
    bound = pair if crossing is None or crossing.bound_us < pair.bound_us else crossing
    for algorithm in applicable_baselines(topology, kind, root=root):
        schedule = baseline(topology, kind, algorithm, root=root, size_bytes=size, step_overhead_us=overhead)
        result = simulate(topology, schedule, size, SimOptions(step_overhead_us=overhead))
        assert result.correct and result.time_us is not None, f"{algorithm}: {result.error}"
        assert result.time_us >= bound.bound_us * (1 - 1e-9), (algorithm, result.time_us, bound)


# ------------------------------------------------- latency and data across a cut
def _two_pairs() -> Topology:
    """Machines {0, 1} and {2, 3}: 1 us, 1 GB/s inside; one 0.5 GB/s link each way between GPUs 1 and 2."""
    links = [Link(0, 1, 1.0, 1.0), Link(1, 0, 1.0, 1.0), Link(2, 3, 1.0, 1.0), Link(3, 2, 1.0, 1.0),
             Link(1, 2, 0.5, 1.0), Link(2, 1, 0.5, 1.0)]
    return check_topology(Topology("two-pairs", 4, tuple(links), machines=((0, 1), (2, 3))))


def test_crossing_bound_adds_the_blocks_that_must_cross_one_link() -> None:
    """Allgather 4000 B (1000 B blocks): both blocks of {0, 1} cross 1 -> 2 (500 B/us) no earlier than 1 us
    (its latency, GPU 1's own block) and must still go 2 -> 3 (1 us): T >= 1 + 2000 / 500 + 1 = 6 us, where the
    pair bound, which sees only the links into each GPU, gives 4 us. Every baseline takes at least that."""
    topology = _two_pairs()
    got = crossing_bound(topology, "allgather", 4000)
    assert got is not None and got.bound_us == pytest.approx(6.0)
    assert got.side == (0, 1) and got.sources == (0, 1) and got.destination == 3 and got.bytes == 2000
    assert pair_bound(topology, "allgather", 4000).bound_us == pytest.approx(4.0)
    # Allreduce: one source's whole buffer at a time (sums combine sources): GPU 0 is 1 us from the link
    assert crossing_bound(topology, "allreduce", 4000).bound_us == pytest.approx(1 + 1 + 1 + 4000 / 500)
    for kind in ("allgather", "allreduce", "reducescatter", "alltoall"):
        bound = crossing_bound(topology, kind, 4000)
        assert bound is not None
        for algorithm in applicable_baselines(topology, kind):
            result = simulate(topology, baseline(topology, kind, algorithm, size_bytes=4000), 4000)
            assert result.time_us is not None and result.time_us >= bound.bound_us * (1 - 1e-9), (kind, algorithm)


def test_crossing_bound_on_ndv2x2_is_the_path_plus_the_buffer_over_the_one_link() -> None:
    """ndv2x2: one 12.5 GB/s link from machine 0 to machine 1 (GPU 0 -> 9, 1.3 us). GPU 5 is 1.4 us from GPU 0,
    GPU 12 1.4 us from GPU 9: Allreduce 16 KB >= 1.4 + 1.3 + 1.4 + 16384 B / 12.5 GB/s."""
    topology = resolve_topology("ndv2x2")
    got = crossing_bound(topology, "allreduce", 16384)
    assert got is not None and got.side == tuple(range(8))
    assert got.bound_us == pytest.approx(4.1 + 16384 / 12500)
    assert "leave GPUs 0-7" in got.explanation
    assert crossing_bound(resolve_topology("dgx-a100x2"), "allreduce", 16384) is None  # its cuts pass NICs


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_nothing_written_for_ndv2x2_beats_the_crossing_bound(kind: str) -> None:
    """What ``taccl synthesize`` keeps on ndv2x2 (synthesized, or the fastest baseline) at 8 and 64 KB."""
    from taccl_py.collectives import parse_collective
    from taccl_py.synthesis import SynthesisOptions, synthesize

    topology = resolve_topology("ndv2x2")
    for size in (8192, 65536):
        bound = crossing_bound(topology, kind, size)
        result = synthesize(topology, parse_collective(kind), size, SynthesisOptions(time_limit_s=10.0))
        assert bound is not None and result.sim.time_us is not None
        assert result.sim.time_us >= bound.bound_us * (1 - 1e-9), (size, result.chosen, result.sim.time_us, bound)
