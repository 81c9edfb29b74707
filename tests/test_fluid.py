"""FluidNetwork (max-min sharing by flow groups, selective re-solve) against a from-scratch max-min computation.

The reference below knows nothing of groups, components or frozen rates: it
runs progressive filling over individual flows in exact rational arithmetic on
the whole network. Random scenarios put many flows on identical resource sets
(and on the same resources listed in another order; a set need not be a path),
with capacities drawn from a few small integers (so ties are common) or awkward
floats, and interleave adds, removes, time passing and re-solves.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.fluid import FluidNetwork, binding_resources

Route = tuple[int, ...]


def max_min(capacity: list[float], routes: dict[int, Route]) -> dict[int, Fraction]:
    """Max-min fair rates: saturate the link with the smallest fair share, fix its flows, repeat."""
    left = [Fraction(c) for c in capacity]
    unfixed = dict(routes)
    rate: dict[int, Fraction] = {}
    while unfixed:
        share: dict[int, Fraction] = {}
        for link in range(len(capacity)):
            users = sum(1 for route in unfixed.values() if link in route)
            if users:
                share[link] = left[link] / users
        bottleneck = min(share, key=lambda link: share[link])
        level = share[bottleneck]
        for flow in [f for f, route in unfixed.items() if bottleneck in route]:
            rate[flow] = level
            for link in unfixed.pop(flow):
                left[link] -= level
    return rate


# ------------------------------------------------------------------ hand-checked cases
def moved_flows(net: FluidNetwork, now: float) -> list[int]:
    """Re-solve; the flows of the groups whose next finish may have moved (checking the finish reported with them)."""
    moved = net.reshare(now)
    for group, time, flow in moved:
        assert (time, flow) == group.next_finish()
    return sorted(f for group, _, _ in moved for f in group.members)


def rate(net: FluidNetwork, flow: int) -> float:
    return net.group_of[flow].rate


def test_flows_on_one_route_split_the_link() -> None:
    net = FluidNetwork([12.0, 30.0])
    for f in range(3):
        net.add(f, (0, 1), 100.0, 0.0)
    assert moved_flows(net, 0.0) == [0, 1, 2]
    assert [rate(net, f) for f in range(3)] == [4.0, 4.0, 4.0]
    net.remove(1, 5.0)
    assert moved_flows(net, 5.0) == [0, 2]
    assert rate(net, 0) == rate(net, 2) == 6.0
    assert net.group_of[0].remaining(0, 5.0) == pytest.approx(100.0 - 4.0 * 5.0)


def test_resources_need_not_form_a_path() -> None:
    """Resources 0 and 2 are links, 3 stands for a GPU's memory: a flow may use any set of them."""
    net = FluidNetwork([10.0, 10.0, 10.0, 12.0])
    net.add(0, (0, 3), 100.0, 0.0)  # a link and the memory
    net.add(1, (2, 3), 100.0, 0.0)  # another link and the same memory
    net.add(2, (1,), 100.0, 0.0)
    net.reshare_groups(0.0)
    assert rate(net, 0) == rate(net, 1) == 6.0  # the memory binds: 12 shared by two
    assert rate(net, 2) == 10.0
    net.finish_busy(1.0)
    assert net.bytes_carried == [100.0, 100.0, 100.0, 200.0]


def test_a_flow_replaced_on_its_route_keeps_the_others_rates() -> None:
    net = FluidNetwork([6.0, 10.0, 4.0])
    net.add(0, (0, 1), 50.0, 0.0)
    net.add(1, (0, 1), 50.0, 0.0)
    net.add(2, (1, 2), 50.0, 0.0)
    net.reshare_groups(0.0)
    before = {f: rate(net, f) for f in range(3)}
    assert before == {0: 3.0, 1: 3.0, 2: 4.0}
    net.remove(0, 2.0)
    net.add(3, (0, 1), 20.0, 2.0)
    groups = net.reshare_groups(2.0)
    assert [g.resources for g in groups] == [(0, 1)]  # nothing re-solved; the group's next finish moved
    assert rate(net, 3) == 3.0 and rate(net, 2) == 4.0
    assert groups[0].next_finish() == (pytest.approx(2.0 + 20.0 / 3.0), 3)


def test_link_accounting() -> None:
    net = FluidNetwork([10.0, 10.0])
    net.add(0, (0,), 30.0, 1.0)
    net.add(1, (0, 1), 20.0, 2.0)
    net.reshare_groups(2.0)
    net.remove(1, 6.0)
    net.reshare_groups(6.0)
    net.finish_busy(8.0)
    assert net.bytes_carried == [50.0, 20.0]
    assert net.busy_us == [7.0, 4.0]


# ------------------------------------------------------------------ random scenarios
@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[float], list[tuple[float, list[tuple[Route, int, bool]], list[int]]]]:
    num_links = draw(st.integers(1, 6))
    # small integers make ties common; awkward floats exercise rounding in the filling
    values = st.one_of(st.integers(1, 4), st.floats(0.01, 300.0, allow_nan=False, allow_infinity=False))
    capacity = draw(st.lists(values, min_size=num_links, max_size=num_links))
    paths = st.lists(st.integers(0, num_links - 1), min_size=1, max_size=4, unique=True).map(tuple)
    pool = draw(st.lists(paths, min_size=1, max_size=5))
    routes = st.sampled_from(pool)
    step = st.tuples(st.sampled_from([0.0, 0.0, 0.25, 1.0, 3.5]),
                     st.lists(st.tuples(routes, st.integers(0, 1000), st.booleans()), max_size=6),
                     st.lists(st.integers(0, 50), max_size=4))
    return capacity, draw(st.lists(step, min_size=1, max_size=30))


def scenario_routes(steps: list[tuple[float, list[tuple[Route, int, bool]], list[int]]]) -> list[Route]:
    return [route for _, adds, _ in steps for route, _, _ in adds]


@pytest.mark.slow
@settings(max_examples=400)
@given(scenario=scenarios(), told=st.booleans())
def test_rates_match_a_from_scratch_max_min(
        scenario: tuple[list[float], list[tuple[float, list[tuple[Route, int, bool]], list[int]]]], told: bool) -> None:
    """``told``: the network is given which resources bind (:func:`binding_resources` of the scenario's routes)."""
    capacity, steps = scenario
    caps = [float(c) for c in capacity]
    net = FluidNetwork(caps, binding_resources(caps, scenario_routes(steps)) if told else None)
    active: dict[int, Route] = {}
    left: dict[int, float] = {}  # bytes each flow has left, integrated here from the reference rates
    rates: dict[int, Fraction] = {}
    now = 0.0
    next_flow = 0
    gone: list[int] = []  # removed flows, whose numbers may come back
    for dt, adds, removes in steps:
        for f in active:
            left[f] -= float(rates.get(f, 0)) * dt
        now += dt
        for pick in removes:
            if active:
                f = sorted(active)[pick % len(active)]
                net.remove(f, now)
                del active[f], left[f]
                rates.pop(f, None)
                gone.append(f)
        for route, num_bytes, reuse in adds:
            if reuse and gone:
                f = gone.pop()
            else:
                f, next_flow = next_flow, next_flow + 1
            net.add(f, route, float(num_bytes), now)
            active[f], left[f] = route, float(num_bytes)
        reported = set(moved_flows(net, now))
        expected = max_min(capacity, active)
        for f, route in active.items():
            r = expected[f]
            assert net.group_of[f].rate == pytest.approx(float(r), rel=1e-9), (f, route)
            if f not in rates or abs(r - rates[f]) > 1e-9 * rates[f]:
                assert f in reported, f"flow {f} changed rate but was not reported"
            assert net.group_of[f].remaining(f, now) == pytest.approx(left[f], rel=1e-9, abs=1e-6)
        rates = expected
        for group in {id(g): g for g in net.group_of.values()}.values():
            when, first = group.next_finish()
            soonest = min(now + left[f] / float(rates[f]) for f in group.members)
            assert first in group.members
            assert when == pytest.approx(soonest, rel=1e-9, abs=1e-9)
            assert now + left[first] / float(rates[first]) == pytest.approx(soonest, rel=1e-9, abs=1e-9)


# ------------------------------------------------------------------ resources that cannot bind
def test_a_cable_behind_its_port_and_a_spine_as_wide_as_its_leaves_do_not_bind() -> None:
    """0 and 2: two NICs' ports (25), 1 and 3: their cables (25), 4: the spine both cross (50), 5: a wide hop."""
    caps = [25.0, 25.0, 25.0, 25.0, 50.0, 100.0]
    routes = [(0, 1, 4), (2, 3, 4, 5)]
    assert binding_resources(caps, routes) == [True, False, True, False, False, False]
    caps[4] = 49.0  # a narrower spine can be the bottleneck
    assert binding_resources(caps, routes) == [True, False, True, False, True, False]
    assert binding_resources([5.0, 5.0], [(1, 0), (0, 1)]) == [True, False]  # alike: the first stays
    assert binding_resources([5.0, 4.0], [(0,), (0, 1)]) == [True, True]  # 0 carries a flow 1 does not
    assert binding_resources([5.0, 7.0, 1.0], [(0,)]) == [True, True, True]  # resources no route uses stay
    # a cover must not exceed the capacity by any rounding: 0 is the lone (0, 1) flow's bottleneck
    assert binding_resources([1.0, 1.0 + 5e-13, 10.0, 10.0], [(0, 1), (0, 1, 2), (1, 3)])[0]


@settings(max_examples=300)
@given(scenario=scenarios())
def test_telling_the_network_what_binds_changes_no_rate_and_no_account(
        scenario: tuple[list[float], list[tuple[float, list[tuple[Route, int, bool]], list[int]]]]) -> None:
    """Side by side with and without :func:`binding_resources`: the same rates (to rounding), busy times, bytes."""
    capacity, steps = scenario
    caps = [float(c) for c in capacity]
    binding = binding_resources(caps, scenario_routes(steps))
    nets = FluidNetwork(caps), FluidNetwork(caps, binding)
    active: list[int] = []
    now = 0.0
    for dt, adds, removes in steps:
        now += dt
        for pick in removes:
            if active:
                f = active.pop(pick % len(active))
                for net in nets:
                    net.remove(f, now)
        for route, num_bytes, _ in adds:
            f = max(active, default=-1) + 1
            active.append(f)
            for net in nets:
                net.add(f, route, float(num_bytes), now)
        for net in nets:
            net.reshare_groups(now)
        for f in active:
            assert nets[1].group_of[f].rate == pytest.approx(nets[0].group_of[f].rate, rel=1e-11)
    for net in nets:
        net.finish_busy(now)
    assert nets[0].busy_us == nets[1].busy_us
    assert nets[0].bytes_carried == nets[1].bytes_carried
    assert nets[0].load == nets[1].load


def test_a_network_told_what_binds_refuses_weighted_flows_and_a_mask_of_another_size() -> None:
    net = FluidNetwork([10.0, 10.0], [True, False])
    with pytest.raises(ValueError, match="without weights"):
        net.add(0, (0, 1), 5.0, 0.0, (1.0, 2.0))
    with pytest.raises(ValueError, match="names 1 resources, the network has 2"):
        FluidNetwork([10.0, 10.0], [True])


def test_reference_on_a_textbook_case() -> None:
    # links 0 (cap 1) and 1 (cap 2): flow a on 0, b on 0 and 1, c on 1 -> a = b = 1/2, c = 3/2
    assert max_min([1, 2], {0: (0,), 1: (0, 1), 2: (1,)}) == {0: Fraction(1, 2), 1: Fraction(1, 2),
                                                            2: Fraction(3, 2)}
    assert math.isclose(float(max_min([3], {0: (0,), 1: (0,), 2: (0,)})[1]), 1.0)


# ------------------------------------------------------------------ weights (endpoint memory)
Weighted = tuple[Route, tuple[int, ...]]


def weighted_max_min(capacity: list[float], flows: dict[int, Weighted]) -> dict[int, Fraction]:
    """Max-min fair rates when flow f uses resource r with weight w: a rate x consumes w x of it."""
    left = [Fraction(c) for c in capacity]
    unfixed = dict(flows)
    rate: dict[int, Fraction] = {}
    while unfixed:
        share: dict[int, Fraction] = {}
        for r in range(len(capacity)):
            demand = sum(w for route, weights in unfixed.values() for q, w in zip(route, weights, strict=True) if q == r)
            if demand:
                share[r] = left[r] / demand
        bottleneck = min(share, key=lambda r: share[r])
        level = share[bottleneck]
        for flow in [f for f, (route, _) in unfixed.items() if bottleneck in route]:
            rate[flow] = level
            route, weights = unfixed.pop(flow)
            for r, w in zip(route, weights, strict=True):
                left[r] -= level * w
    return rate


def test_a_weighted_flow_uses_its_weight_times_its_rate() -> None:
    """Memory (resource 1, 12 bytes/us) behind a 10 bytes/us link: a reduce using it 3x gets 4, alone."""
    net = FluidNetwork([10.0, 12.0])
    net.add(0, (0, 1), 100.0, 0.0, (1.0, 3.0))
    net.reshare_groups(0.0)
    assert rate(net, 0) == 4.0
    net.add(1, (1,), 100.0, 0.0)  # a plain reader of the same memory: 3x + y = 12 with x = y
    net.reshare_groups(0.0)
    assert rate(net, 0) == rate(net, 1) == 3.0
    net.remove(1, 1.0)
    net.reshare_groups(1.0)
    assert rate(net, 0) == 4.0
    net.finish_busy(2.0)
    assert net.bytes_carried == [100.0, 400.0]  # the memory counts what the flows used of it


@st.composite
def weighted_scenarios(draw: st.DrawFn) -> tuple[list[float], list[tuple[float, list[tuple[Weighted, int]], list[int]]]]:
    num = draw(st.integers(1, 5))
    values = st.one_of(st.integers(1, 6), st.floats(0.05, 300.0, allow_nan=False, allow_infinity=False))
    capacity = draw(st.lists(values, min_size=num, max_size=num))
    routes = st.lists(st.integers(0, num - 1), min_size=1, max_size=3, unique=True).map(tuple)
    weighted = routes.flatmap(lambda r: st.tuples(st.just(r), st.lists(st.sampled_from([1, 1, 2, 3]), min_size=len(r),
                                                                        max_size=len(r)).map(tuple)))
    pool = draw(st.lists(weighted, min_size=1, max_size=5))
    step = st.tuples(st.sampled_from([0.0, 0.25, 1.0]),
                     st.lists(st.tuples(st.sampled_from(pool), st.integers(1, 1000)), max_size=5),
                     st.lists(st.integers(0, 50), max_size=3))
    return capacity, draw(st.lists(step, min_size=1, max_size=20))


@pytest.mark.slow
@settings(max_examples=200)
@given(scenario=weighted_scenarios())
def test_weighted_rates_match_a_from_scratch_max_min(
        scenario: tuple[list[float], list[tuple[float, list[tuple[Weighted, int]], list[int]]]]) -> None:
    """Flows with weights (given only when one differs from 1) and without, added and removed at random."""
    capacity, steps = scenario
    net = FluidNetwork([float(c) for c in capacity])
    active: dict[int, Weighted] = {}
    now = 0.0
    next_flow = 0
    for dt, adds, removes in steps:
        now += dt
        for pick in removes:
            if active:
                f = sorted(active)[pick % len(active)]
                net.remove(f, now)
                del active[f]
        for (route, weights), num_bytes in adds:
            plain = all(w == 1 for w in weights)
            net.add(next_flow, route, float(num_bytes), now, None if plain else tuple(float(w) for w in weights))
            active[next_flow] = (route, weights)
            next_flow += 1
        net.reshare_groups(now)
        expected = weighted_max_min(capacity, active)
        for f in active:
            assert net.group_of[f].rate == pytest.approx(float(expected[f]), rel=1e-9), f
