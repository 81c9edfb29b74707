"""Representative simulation (taccl_py.symmetry) against the full simulation: exactly the same times.

Random rank-translation-symmetric topologies (GPU circulants plus one switch per
block of ``shift`` GPUs), random representative schedules over them, and the
ring Allgather baseline's representative form; every per-transfer time and
link figure must equal the full simulation's, and the verdicts must agree.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import baseline, ring_plan
from taccl_py.baselines.ring import symmetric_ring
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.library.fabrics import dgx_a100_cluster
from taccl_py.library.grids import ring, switch_star
from taccl_py.schedule import Op, Transfer
from taccl_py.simulator import SimOptions, simulate
from taccl_py.symmetry import (
    SymmetricSchedule,
    expand,
    simulate_symmetric,
    symmetry_error,
    translation_automorphism,
)
from taccl_py.topology import Endpoint, Link, Switch, Topology


def _symmetric_topology(d: int, m: int, offsets: list[tuple[int, float, float]], pods: bool,
                        kinds: tuple[str, ...] = ("nvlink",), rails: bool = False) -> Topology:
    """GPU g -> g + o for every (o, GB/s, us) of ``offsets`` (per position g mod d, the k-th offset of kind
    ``kinds[k % len(kinds)]``), a switch per block; with ``rails`` an InfiniBand rail switch per position that
    every block shares, under one core switch (its links are fixed by every translation: link orbits of 1 link)."""
    n = d * m
    links: dict[tuple[object, object], Link] = {}
    for g in range(n):
        for k, (o, bw, lat) in enumerate(offsets):
            h = (g + o) % n
            if h != g and (g, h) not in links:
                links[(g, h)] = Link(g, h, bw + (g % d), lat, kinds[k % len(kinds)])
    switches: list[Switch] = []
    if pods:
        switches += [Switch(f"pod{a}", "nvswitch") for a in range(m)]
        for g in range(n):
            pod = f"pod{g // d}"
            links[(g, pod)] = Link(g, pod, 100.0, 0.3)
            links[(pod, g)] = Link(pod, g, 100.0, 0.3)
    if rails:
        switches += [Switch(f"rail{p}", "ib") for p in range(d)] + [Switch("core", "ib")]
        for g in range(n):
            rail = f"rail{g % d}"
            links[(g, rail)] = Link(g, rail, 25.0, 1.0, "ib")
            links[(rail, g)] = Link(rail, g, 25.0, 1.0, "ib")
        for p in range(d):
            links[(f"rail{p}", "core")] = Link(f"rail{p}", "core", 40.0 + p, 0.5, "ib")
            links[("core", f"rail{p}")] = Link("core", f"rail{p}", 40.0 + p, 0.5, "ib")
    return Topology("sym", n, tuple(links.values()), tuple(switches))


def _route(topo: Topology, src: int, dst: int) -> tuple[int, ...] | None:
    index = topo.link_index
    if (src, dst) in index:
        return (index[(src, dst)],)
    for s in topo.switches:
        if (src, s.name) in index and (s.name, dst) in index:
            return (index[(src, s.name)], index[(s.name, dst)])
    for s in topo.switches:  # two switches: up a rail, through the core, down another
        for t in topo.switches:
            if (src, s.name) in index and (s.name, t.name) in index and (t.name, dst) in index:
                return (index[(src, s.name)], index[(s.name, t.name)], index[(t.name, dst)])
    return None


@st.composite
def _cases(draw: st.DrawFn) -> tuple[Topology, SymmetricSchedule]:
    d = draw(st.integers(1, 3))
    m = draw(st.integers(2, 4))
    n = d * m
    offsets = draw(st.lists(st.tuples(st.integers(1, n - 1), st.sampled_from([10.0, 25.0, 50.0]),
                                      st.sampled_from([0.5, 1.0])), min_size=1, max_size=3))
    kinds = draw(st.lists(st.sampled_from(["nvlink", "pcie", "ib"]), min_size=1, max_size=3, unique=True))
    topo = _symmetric_topology(d, m, offsets, draw(st.booleans()) and d > 1, tuple(kinds), draw(st.booleans()))
    kind = draw(st.sampled_from([CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE, CollectiveKind.REDUCESCATTER,
                                 CollectiveKind.ALLTOALL]))
    coll = Collective(kind, n, draw(st.integers(1, 2)))
    reps = []
    for _ in range(draw(st.integers(1, 12))):
        src = draw(st.integers(0, d - 1))
        dst = draw(st.integers(0, n - 1))
        route = _route(topo, src, dst) if dst != src else None
        if route is None:
            continue
        chunks = tuple(sorted(set(draw(st.lists(st.integers(0, coll.num_chunks - 1), min_size=1, max_size=2)))))
        op = Op.REDUCE if coll.is_reduction and draw(st.booleans()) else Op.COPY
        reps.append(Transfer(src, dst, chunks, route, op, draw(st.integers(0, 1))))
    assume(reps)
    return topo, SymmetricSchedule(coll, d, tuple(reps))


def _same(full: object, quotient: object, *, same_order: bool = True) -> None:
    """Same verdict, makespan, link figures; same per-transfer times (as multisets unless ``same_order``)."""
    from taccl_py.simulator import SimResult

    assert isinstance(full, SimResult) and isinstance(quotient, SimResult)
    assert full.correct == quotient.correct, (full.error, quotient.error)
    if full.correct:
        assert full.time_us is not None and quotient.time_us is not None
        assert abs(full.time_us - quotient.time_us) <= 1e-9 * max(1.0, full.time_us)
        for a, b in ((full.start_us, quotient.start_us), (full.arrive_us, quotient.arrive_us),
                     (full.commit_us, quotient.commit_us)):
            if not same_order:
                a, b = np.sort(a), np.sort(b)
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(full.link_bytes, quotient.link_bytes, rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(full.link_busy_us, quotient.link_busy_us, rtol=1e-9, atol=1e-9)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                  HealthCheck.too_slow])
@given(_cases(), st.sampled_from([1.0, 4096.0, 2.0**20]), st.sampled_from([0.0, 1.5]), st.one_of(st.none(), st.tuples(
    st.lists(st.floats(0.1, 1.0), min_size=3, max_size=3), st.lists(st.floats(0.0, 5.0), min_size=3, max_size=3),
    st.floats(0.0, 20.0), st.sampled_from([0.0, 0.7, 2.0]))))
def test_representatives_time_as_the_full_schedule(case: tuple[Topology, SymmetricSchedule], size: float,
                                                   overhead: float,
                                                   costs: tuple[list[float], list[float], float, float] | None) -> None:
    """Also under a runtime's costs: a share of each link and a step latency per link class, a launch time, the
    proxies' posts across the network; and on shared switches whose links every translation keeps."""
    from taccl_py.runtime import Protocol, TransferCosts

    topo, sym = case
    assume(symmetry_error(sym, topo) is None)
    options = SimOptions(step_overhead_us=overhead)
    if costs is not None:
        shares, hops, launch, post = costs
        classes = ("nvlink", "pci", "net")
        options = SimOptions(step_overhead_us=overhead, costs=TransferCosts(
            Protocol.SIMPLE, dict(zip(classes, hops, strict=True)), dict(zip(classes, shares, strict=True)), launch,
            post_us=post))
    _same(simulate(topo, expand(sym, topo), size, options), simulate_symmetric(topo, sym, size, options))


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 12), st.sampled_from([1, 2, None]), st.sampled_from([1e3, 2.0**30]),
       st.sampled_from([CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE]))
def test_ring_representatives_on_rings(n: int, channels: int | None, size: float, kind: CollectiveKind) -> None:
    topo = ring(n)
    sym = symmetric_ring(topo, ring_plan(topo, channels), kind)
    phases = 2 if kind is CollectiveKind.ALLREDUCE else 1
    assert sym is not None and sym.shift == 1 and len(sym.reps) == phases * (n - 1) * sym.collective.chunk_factor
    assert symmetry_error(sym, topo) is None
    full = simulate(topo, baseline(topo, kind, "ring", channels=channels), size)
    assert full.correct
    _same(full, simulate_symmetric(topo, sym, size), same_order=False)
    _same(simulate(topo, expand(sym, topo), size), simulate_symmetric(topo, sym, size))


@pytest.mark.slow
@pytest.mark.parametrize("kind", [CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE])
def test_ring_representatives_on_a_rail_cluster(kind: CollectiveKind) -> None:
    """DGX A100 machines on rail switches: the 8 rings repeat every 2 machines (shift 16), 2 members per orbit."""
    topo = dgx_a100_cluster(4, fabric="rail")
    sym = symmetric_ring(topo, ring_plan(topo), kind)
    assert sym is not None and sym.shift == 16 and sym.orbit_size == 2
    quotient = simulate_symmetric(topo, sym, 2.0**30)
    _same(simulate(topo, baseline(topo, kind, "ring"), 2.0**30), quotient, same_order=False)
    _same(simulate(topo, expand(sym, topo), 2.0**30), quotient)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE])
def test_pieced_ring_representatives_under_runtime_costs(kind: CollectiveKind) -> None:
    """NCCL's ring in 3 pieces per channel under the calibrated LL128 costs: the representatives expand to the
    pieced ring's transfers and give its times exactly (launch, per-class latencies and link shares included)."""
    from taccl_py.runtime import Protocol

    topo = dgx_a100_cluster(4, fabric="rail")
    plan = ring_plan(topo)
    sym = symmetric_ring(topo, plan, kind, pieces=3)
    assert sym is not None and sym.collective.chunk_factor == 3 * plan.channels and sym.notes["pieces"] == 3
    full = baseline(topo, kind, "ring", chunk_factor=3 * plan.channels)
    assert Counter(expand(sym, topo).transfers) == Counter(full.transfers)
    assert topo.runtime is not None
    posted = topo.runtime.costs(Protocol.LL128, kind, topo, algorithm="ring", size_bytes=2**26)
    costs = replace(posted, post_us=0.0)  # NCCL's rings carry the proxy's cost in their step latencies
    options = SimOptions(costs=costs)
    quotient = simulate_symmetric(topo, sym, 2.0**26, options)
    reference = simulate(topo, full, 2.0**26, options)
    raw = simulate(topo, full, 2.0**26).time_us
    assert reference.time_us is not None and raw is not None and reference.time_us > raw  # the costs do count
    _same(reference, quotient, same_order=False)
    _same(simulate(topo, expand(sym, topo), 2.0**26, options), quotient)  # in order: a timeline draws that order
    per_rep = simulate_symmetric(topo, sym, 2.0**26, options, expand_times=False)
    m = sym.orbit_size
    assert per_rep.notes["times_per"] == "representative" and len(per_rep.start_us) == len(sym.reps)
    assert per_rep.time_us == quotient.time_us and per_rep.link_busy_us == quotient.link_busy_us
    for short, full_times in ((per_rep.start_us, quotient.start_us), (per_rep.commit_us, quotient.commit_us)):
        np.testing.assert_array_equal(np.repeat(short, m), full_times)
    assert posted.post_us > 0  # posted (as a synthesized ring would be): the same times too
    with_posts = SimOptions(costs=posted)
    reference_posted = simulate(topo, full, 2.0**26, with_posts)
    assert reference_posted.time_us is not None and reference_posted.time_us > reference.time_us
    _same(reference_posted, simulate_symmetric(topo, sym, 2.0**26, with_posts), same_order=False)


def _predicted_both_ways(monkeypatch: pytest.MonkeyPatch, topo: Topology, kind: CollectiveKind, algorithm: str,
                         size: int) -> tuple[Any, Any]:
    """predict_baseline on the full schedule, then through representatives (SYMMETRIC_MIN_GPUS lowered to the
    topology's GPUs): the same protocol and the same time per protocol. Returns (full, through representatives)."""
    import taccl_py.predict as predict

    assert topo.runtime is not None
    full = predict.predict_baseline(topo, kind, algorithm, size, topo.runtime)
    monkeypatch.setattr(predict, "SYMMETRIC_MIN_GPUS", topo.num_gpus)
    fast = predict.predict_baseline(topo, kind, algorithm, size, topo.runtime)
    monkeypatch.undo()
    assert isinstance(fast.schedule, SymmetricSchedule) and not isinstance(full.schedule, SymmetricSchedule)
    assert fast.protocol is full.protocol and fast.times_us.keys() == full.times_us.keys()
    for p, t in full.times_us.items():
        assert t is not None and abs(fast.times_us[p] - t) <= 1e-9 * t  # type: ignore[operator]
    return full, fast


@pytest.mark.slow
def test_calibrated_ring_prediction_from_representatives(monkeypatch: pytest.MonkeyPatch) -> None:
    """predict_baseline on a rail cluster: through the representatives (in pieces) the same times per protocol,
    protocol and transfer count as the full schedule."""
    topo = dgx_a100_cluster(4, fabric="rail")
    for size, pieces in ((2**20, 1), (2**30, 2)):
        full, fast = _predicted_both_ways(monkeypatch, topo, CollectiveKind.ALLREDUCE, "ring", size)
        assert isinstance(fast.schedule, SymmetricSchedule) and full.schedule is not None and len(fast.schedule) == len(full.schedule)
        assert fast.schedule.notes["pieces"] == full.schedule.notes["pieces"] == pieces
        assert fast.sim.notes["times_per"] == "representative" and len(fast.sim.commit_us) == len(fast.schedule.reps)


@pytest.mark.parametrize("kind", [CollectiveKind.ALLTOALL, CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER,
                                  CollectiveKind.ALLREDUCE])
def test_direct_representatives_under_proxy_posts(kind: CollectiveKind) -> None:
    """The direct baseline on 4 DGX H100s (leaf-spine: the spine's links are kept by moving machines, orbits of
    fewer links than members) under the calibrated costs, every network transfer posted: its representatives give
    every transfer's times, the links' figures and the makespan of the full schedule."""
    from taccl_py.baselines.direct import direct_schedule, symmetric_direct
    from taccl_py.library.registry import resolve_topology
    from taccl_py.runtime import Protocol

    topo = resolve_topology("dgx-h100x4")
    assert topo.runtime is not None
    sym = symmetric_direct(topo, kind)
    full = direct_schedule(topo, kind)
    assert sym is not None and sym.shift == 8 and sym.orbit_size == 4 and 4 * len(sym.reps) == len(full.transfers)
    for protocol, size in ((Protocol.LL, 4096.0), (Protocol.SIMPLE, 2.0**26)):
        costs = topo.runtime.costs(protocol, kind, topo)
        assert costs.post_us > 0 and any(costs.posts(topo, t.route) for t in sym.reps)
        options = SimOptions(costs=costs)
        reference = simulate(topo, full, size, options)
        unposted = simulate(topo, full, size, SimOptions(costs=replace(costs, post_us=0.0))).time_us
        assert reference.time_us is not None and unposted is not None and reference.time_us > unposted
        _same(reference, simulate_symmetric(topo, sym, size, options), same_order=False)
    assert symmetric_direct(topo, CollectiveKind.BROADCAST) is None  # a root: no rank translation keeps it


@pytest.mark.parametrize("name", ["dgx-h100x4", "switch8", "dgx-a100x2-single"])
@pytest.mark.parametrize("channels", [1, 2])
def test_direct_representatives_expand_to_the_direct_schedule(name: str, channels: int) -> None:
    """Built alone and checked pair by pair, the representatives' orbits are the direct schedule's transfers, as
    a multiset, for every kind they are made for; a link map that does not move the routes, or a representative
    carrying another pair's chunks, fails the check."""
    from taccl_py.baselines.direct import _orbits_are_direct, direct_schedule, symmetric_direct
    from taccl_py.library.registry import resolve_topology

    topo = switch_star(8) if name == "switch8" else resolve_topology(name)
    for kind in (CollectiveKind.ALLTOALL, CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER,
                 CollectiveKind.ALLREDUCE):
        sym = symmetric_direct(topo, kind, channels=channels)
        assert sym is not None, (name, kind)
        full = direct_schedule(topo, kind, channels=channels)
        assert Counter(expand(sym, topo).transfers) == Counter(full.transfers)
        links = translation_automorphism(topo, sym.shift)
        assert links is not None and _orbits_are_direct(sym, topo, links)
        assert not _orbits_are_direct(sym, topo, list(range(len(topo.links))))  # routes kept in place
        first, c = sym.reps[0], sym.collective.chunk_factor
        moved = tuple((x + c) % sym.collective.num_chunks for x in first.chunks)  # the next block or pair's
        swapped = SymmetricSchedule(sym.collective, sym.shift, (replace(first, chunks=moved), *sym.reps[1:]),
                                    notes=dict(sym.notes))
        assert not _orbits_are_direct(swapped, topo, links)
        if channels > 1:  # its own pair's chunks, but another channel's
            crossed = SymmetricSchedule(sym.collective, sym.shift, (replace(first, channel=1 - first.channel),
                                                                    *sym.reps[1:]), notes=dict(sym.notes))
            assert not _orbits_are_direct(crossed, topo, links)


@pytest.mark.parametrize("kind", [CollectiveKind.ALLGATHER, CollectiveKind.ALLTOALL])
def test_direct_with_relays_has_no_representatives(kind: CollectiveKind) -> None:
    """On a ring of 7 GPUs most pairs relay through the GPUs between them: moving every GPU by 1 keeps the ring,
    but the expansion would not keep the order of the relays' legs, so the direct baseline is simulated whole."""
    from taccl_py.baselines.direct import missing_direct_route, symmetric_direct

    topo = ring(7)
    assert translation_automorphism(topo, 1) is not None and missing_direct_route(topo, [(0, 3)]) == (0, 3)
    assert symmetric_direct(topo, kind) is None


def test_link_orbits_that_do_not_divide_the_orbit_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A link map with an orbit of 3 links under a shift whose orbits have 2 members: no weight m / k would be
    whole, so the check refuses it (translation_automorphism gives none such today: a guard on its contract)."""
    import taccl_py.symmetry as symmetry

    star = switch_star(4)
    sym = SymmetricSchedule(Collective(CollectiveKind.ALLGATHER, 4, 1), 2, (Transfer(0, 1, (0,), (0, 3)),))
    assert symmetry_error(sym, star) is None
    n = len(star.links)
    cycled = [1, 2, 0, *range(3, n)]  # links 0 -> 1 -> 2 -> 0, the others kept
    monkeypatch.setattr(symmetry, "translation_automorphism", lambda topology, shift: cycled)
    fresh = SymmetricSchedule(sym.collective, 2, sym.reps)
    assert "does not divide" in (symmetry_error(fresh, star) or "")


def test_direct_prediction_from_representatives(monkeypatch: pytest.MonkeyPatch) -> None:
    """predict_baseline's direct Alltoall through the representatives: the same protocol and time per protocol."""
    from taccl_py.library.registry import resolve_topology

    topo = resolve_topology("dgx-h100x4")
    for size in (2**12, 2**28):
        _, fast = _predicted_both_ways(monkeypatch, topo, CollectiveKind.ALLTOALL, "direct", size)
        assert isinstance(fast.schedule, SymmetricSchedule) and fast.schedule.notes["algorithm"] == "direct"


def test_a_check_is_kept_per_schedule_and_topology_object() -> None:
    """The verdict is reused for the same topology object only: an equal topology is checked again, and a
    schedule stays hashable and compares without its notes or verdict."""
    import taccl_py.symmetry as symmetry

    star, same = switch_star(4), switch_star(4)
    sym = SymmetricSchedule(Collective(CollectiveKind.ALLGATHER, 4, 1), 1, (Transfer(0, 1, (0,), (0, 3)),),
                            notes={"algorithm": "test"})
    calls: list[int] = []
    checked_now = symmetry._checked_now

    def counting(schedule: SymmetricSchedule, topology: Topology) -> object:
        calls.append(1)
        return checked_now(schedule, topology)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(symmetry, "_checked_now", counting)
        assert symmetry_error(sym, star) is None and symmetry_error(sym, star) is None and len(calls) == 1
        simulate_symmetric(star, sym, 2.0**20)
        assert len(calls) == 1
        assert symmetry_error(sym, same) is None and len(calls) == 2
    twin = SymmetricSchedule(sym.collective, 1, sym.reps)
    assert twin == sym and hash(twin) == hash(sym) and twin._verdict == []


@pytest.mark.slow
def test_leaf_spine_clusters_have_no_translation_symmetry() -> None:
    """Scalable units of 20 machines: a route across units takes the spine, so moving machines is no symmetry."""
    topo = dgx_a100_cluster(24)
    assert symmetric_ring(topo, ring_plan(topo), CollectiveKind.ALLGATHER) is None
    assert translation_automorphism(topo, 16) is None


def test_refusals_name_the_reason() -> None:
    star = switch_star(4)
    coll = Collective(CollectiveKind.ALLGATHER, 4, 1)
    sym = SymmetricSchedule(coll, 1, (Transfer(0, 1, (0,), (0, 3)),))
    assert translation_automorphism(star, 1) is not None
    # every GPU -> switch link moves, but the switch itself is fixed: fine; a rooted collective is not
    rooted = SymmetricSchedule(Collective(CollectiveKind.BROADCAST, 4, 1), 1, sym.reps)
    assert "root" in (symmetry_error(rooted, star) or "")
    assert "does not divide" in (symmetry_error(SymmetricSchedule(coll, 3, sym.reps), star) or "")
    with_memory = star.with_endpoints(Endpoint(memory_bandwidth=100.0))
    assert "memory" in (symmetry_error(sym, with_memory) or "")
    lopsided = Topology("lop", 4, (*star.links[:2], Link(1, "switch", 5.0, 1.0), *star.links[3:]), star.switches)
    assert "not a symmetry" in (symmetry_error(sym, lopsided) or "")
    # a representative whose orbit members write what other members read
    clash = SymmetricSchedule(Collective(CollectiveKind.ALLREDUCE, 4, 1), 1,
                              (Transfer(0, 1, (0, 1), (0, 3), Op.REDUCE),))
    assert "touch the same" in (symmetry_error(clash, star) or "")


@pytest.mark.slow
def test_simulate_command_uses_representatives_from_256_gpus() -> None:
    """`taccl simulate --algorithm ring` on 256 GPUs: the representative run gives the full run's figures."""
    from taccl_py.cli.sim_cmd import _simulate_baseline
    from taccl_py.symmetry import SYMMETRIC_MIN_GPUS

    topo = ring(SYMMETRIC_MIN_GPUS)
    kind = CollectiveKind.ALLGATHER
    fast = _simulate_baseline(topo, kind, "ring", 1, 0, 2.0**30, SimOptions())
    full = _simulate_baseline(topo, kind, "ring", 1, 0, 2.0**30, SimOptions(), representatives=False)
    assert fast.notes["orbit_size"] == SYMMETRIC_MIN_GPUS and "orbit_size" not in full.notes
    assert fast.notes["times_per"] == "representative"  # the command reads the makespan and link figures only
    m = fast.notes["orbit_size"]
    expanded = replace(fast, start_us=np.repeat(fast.start_us, m), arrive_us=np.repeat(fast.arrive_us, m),
                       commit_us=np.repeat(fast.commit_us, m))
    _same(full, expanded, same_order=False)


@pytest.mark.slow
def test_simulate_command_runs_direct_alltoall_from_representatives() -> None:
    """`taccl simulate --algorithm direct -c alltoall` on 256 GPUs around one switch: one shift moves every GPU, so
    255 representatives give the 65,280 transfers' figures."""
    from taccl_py.cli.sim_cmd import _simulate_baseline

    topo = switch_star(256)
    kind = CollectiveKind.ALLTOALL
    fast = _simulate_baseline(topo, kind, "direct", 1, 0, 2.0**28, SimOptions())
    full = _simulate_baseline(topo, kind, "direct", 1, 0, 2.0**28, SimOptions(), representatives=False)
    assert fast.notes["representatives"] == 255 and fast.notes["orbit_size"] == 256
    m = fast.notes["orbit_size"]
    expanded = replace(fast, start_us=np.repeat(fast.start_us, m), arrive_us=np.repeat(fast.arrive_us, m),
                       commit_us=np.repeat(fast.commit_us, m))
    _same(full, expanded, same_order=False)


def test_baseline_command_rows_from_representatives() -> None:
    """`taccl baseline -a ring` on 256 GPUs reports the full schedule's time, channels and transfer count."""
    from taccl_py.cli.sim_cmd import _baseline_rows

    topo = ring(256)
    (row,) = _baseline_rows(topo, CollectiveKind.ALLGATHER, [2**20], ["ring"], 1, 0, 0.0, False)
    (entry,) = row["baselines"]
    schedule = baseline(topo, "allgather", "ring", channels=1)
    full = simulate(topo, schedule, 2**20)
    assert entry["transfers"] == len(schedule) and entry["channels"] == 1
    assert full.time_us is not None and abs(entry["time_us"] - full.time_us) <= 1e-9 * full.time_us
