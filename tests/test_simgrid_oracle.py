"""The simulator against an independent oracle: the same schedules replayed in SimGrid.

``tests/simgrid_oracle.py`` runs under Debian's ``/usr/bin/python3`` (package
``python3-simgrid``; ``TACCL_SIMGRID_PYTHON`` names another interpreter) and
shares no code with taccl_py. Every applicable baseline of every collective on
four shipped topologies, and random schedules on random topologies, must have
the same makespan in both within 0.5%. Without SimGrid these tests skip and
say why, unless ``TACCL_REQUIRE_SIMGRID=1`` (set by ``.ci/run``) makes that a
failure.

Sizes reach the oracle in exact units (1/pieces of a byte, see
:func:`schedule_spec`): pipelined schedules are chaotic, and rounding every
message to whole bytes moved some makespans by 0.2%.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import applicable_baselines, baseline
from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.library import resolve_topology
from taccl_py.schedule import Schedule, Transfer
from taccl_py.simulator import SimOptions, simulate
from taccl_py.testing import spanning_tree_allgathers, spanning_tree_reductions, topologies, with_waits
from taccl_py.topology import Link, Switch, Topology, check_topology

pytestmark = pytest.mark.simgrid

ORACLE = Path(__file__).with_name("simgrid_oracle.py")
SIMGRID_PYTHON = os.environ.get("TACCL_SIMGRID_PYTHON", "/usr/bin/python3")
REL_TOL = 5e-3
"""Makespans must agree within 0.5%."""

Oracle = Callable[[dict[str, Any]], dict[str, Any]]


# ------------------------------------------------------------------ the oracle
@functools.cache
def _simgrid_missing() -> str | None:
    """Why the oracle cannot run here, or None."""
    if not Path(SIMGRID_PYTHON).is_file():
        return f"{SIMGRID_PYTHON} does not exist (install Debian's python3-simgrid)"
    try:
        proc = subprocess.run([SIMGRID_PYTHON, "-c", "import simgrid"], capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{SIMGRID_PYTHON} did not run: {exc}"
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return f"{SIMGRID_PYTHON} cannot import simgrid ({last}); install Debian's python3-simgrid"
    return None


def run_oracle(spec: dict[str, Any]) -> dict[str, Any]:
    """Replay ``spec`` in SimGrid; the oracle's JSON answer (raises if it reports an error)."""
    proc = subprocess.run([SIMGRID_PYTHON, str(ORACLE)], input=json.dumps(spec), capture_output=True,
                          text=True, timeout=300)
    try:
        answer: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"oracle crashed (exit {proc.returncode}): {proc.stderr[-2000:]}") from None
    if proc.returncode or "error" in answer:
        raise AssertionError(f"oracle failed: {answer.get('error')} {answer.get('stuck', '')}")
    return answer


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    """The oracle runner; skips (or fails under TACCL_REQUIRE_SIMGRID=1) when SimGrid is missing."""
    reason = _simgrid_missing()
    if reason:
        if os.environ.get("TACCL_REQUIRE_SIMGRID") == "1":
            pytest.fail(f"TACCL_REQUIRE_SIMGRID=1 but {reason}")
        pytest.skip(reason)
    return run_oracle


# ------------------------------------------------------------------ the specs
def link_spec(topology: Topology, units_per_byte: int) -> list[dict[str, float]]:
    """Links in oracle units: capacity in units per us (GB/s = 1e3 bytes per us), latency in us."""
    return [{"capacity": link.bandwidth * 1e3 * units_per_byte, "latency": link.latency}
            for link in topology.links]


def transfer_spec(t: Transfer, units: int) -> dict[str, Any]:
    return {"src": t.src, "dst": t.dst, "chunks": list(t.chunks), "route": list(t.route), "units": units,
            "channel": t.channel, "after": list(t.after), "not_before_us": t.not_before_us, "exchange": t.exchange,
            "group": t.group}


def schedule_spec(topology: Topology, schedule: Schedule, size_bytes: int,
                  step_overhead_us: float = 0.0) -> dict[str, Any]:
    """The oracle's input for ``schedule`` run at ``size_bytes``.

    As in the simulator, a transfer moves ``len(chunks) * chunk_bytes`` bytes
    with ``chunk_bytes = collective.chunk_bytes(size)`` (size / (N c), or
    size / c for Broadcast and Reduce). With ``pieces = size / chunk_bytes``
    and a unit of 1/pieces byte, that is exactly ``len(chunks) * size`` units.
    """
    assert isinstance(size_bytes, int), "whole bytes, so that every message is a whole number of units"
    chunk_bytes = schedule.collective.chunk_bytes(size_bytes)
    pieces = round(size_bytes / chunk_bytes)
    assert math.isclose(size_bytes / pieces, chunk_bytes, rel_tol=1e-12)
    return {"links": link_spec(topology, pieces), "step_overhead_us": step_overhead_us,
            "switch_model": topology.switch_model.value,
            "transfers": [transfer_spec(t, len(t.chunks) * size_bytes) for t in schedule.transfers]}


def assert_agrees(oracle: Oracle, topology: Topology, schedule: Schedule, size_bytes: int,
                  step_overhead_us: float = 0.0) -> tuple[float, float]:
    """Simulate and replay ``schedule``; makespans (and every commit time) within 0.5% of the makespan."""
    result = simulate(topology, schedule, size_bytes, SimOptions(step_overhead_us=step_overhead_us))
    assert result.correct, result.error
    assert result.time_us is not None
    answer = oracle(schedule_spec(topology, schedule, size_bytes, step_overhead_us))
    ours, theirs = result.time_us, answer["makespan_us"]
    assert ours == pytest.approx(theirs, rel=REL_TOL), (
        f"{schedule.name} on {topology.name}: simulator {ours:.6f} us, SimGrid {theirs:.6f} us "
        f"({(ours - theirs) / theirs:+.3%})")
    slack = REL_TOL * theirs
    pairs = zip(result.commit_us, answer["commit_us"], strict=True)
    late = [(i, float(a), b) for i, (a, b) in enumerate(pairs) if abs(a - b) > slack]
    assert not late, f"commit times differ (transfer, simulator, SimGrid): {late[:5]}"
    return ours, theirs


# ------------------------------------------------- the oracle is not vacuous
def star(latencies: tuple[float, ...], bandwidth: float = 10.0) -> Topology:
    """GPUs around one switch; GPU g's uplink has latency ``latencies[g]``, every downlink 0.25 us."""
    links: list[Link] = []
    for g, lat in enumerate(latencies):
        links += [Link(g, "sw", bandwidth, lat, kind="switch"), Link("sw", g, bandwidth, 0.25, kind="switch")]
    return check_topology(Topology("star", len(latencies), tuple(links), switches=(Switch("sw"),)))


def two_flows(topology: Topology, second_dst: int) -> dict[str, Any]:
    """0 -> 2 with 100 kB and 1 -> ``second_dst`` with 200 kB, both at time 0, in bytes."""
    first = Transfer(0, 2, (0,), topology.shortest_path(0, 2) or ())
    second = Transfer(1, second_dst, (1,), topology.shortest_path(1, second_dst) or ())
    return {"links": link_spec(topology, 1), "transfers": [transfer_spec(first, 100_000),
                                                           transfer_spec(second, 200_000)]}


def test_oracle_shares_a_link_max_min_regardless_of_latency(oracle: Oracle) -> None:
    """Hand-computed: flows of different route latency split the shared downlink 50/50."""
    topo = star((1.0, 3.0, 1.0))  # 10 GB/s = 1e4 bytes per us everywhere
    # 0 -> 2 sends from 1.25 us alone: 2e4 bytes by 3.25 us, when 1 -> 2 joins; then 5e3 B/us each:
    # its last 8e4 bytes take 16 us (arrives 19.25), 1 -> 2 has 1.2e5 left at full rate: 12 us more.
    shared = oracle(two_flows(topo, 2))
    assert shared["arrive_us"] == pytest.approx([19.25, 31.25], rel=1e-9)
    assert shared["makespan_us"] == pytest.approx(31.25, rel=1e-9)
    # the second flow to GPU 0 instead shares nothing: 3.25 + 20 us
    apart = oracle(two_flows(topo, 0))
    assert apart["arrive_us"] == pytest.approx([11.25, 23.25], rel=1e-9)
    # the comparison's tolerance would see the difference
    assert abs(shared["makespan_us"] - apart["makespan_us"]) > 10 * REL_TOL * apart["makespan_us"]


def test_oracle_waits_as_the_schedule_says(oracle: Oracle) -> None:
    """Hand-computed: connection FIFO, read after commit, commit after readers, ``after``, ``not_before_us``.

    Every route takes 1.25 us + 1 us step overhead; 1e4 bytes per us, so 100 kB take 10 us.
    """
    topo = star((1.0, 1.0, 1.0))
    r = topo.shortest_path
    transfers = [  # (transfer, bytes); no two overlap on a link
        (Transfer(0, 1, (0,), r(0, 1) or ()), 100_000),                     # 0 -> 12.25
        (Transfer(0, 1, (1,), r(0, 1) or ()), 100_000),                     # FIFO: 12.25 -> 24.5
        (Transfer(1, 2, (0,), r(1, 2) or ()), 300_000),                     # reads 0's write: 12.25 -> 44.5
        (Transfer(2, 0, (2,), r(2, 0) or (), after=(1,)), 100_000),         # after 1: 24.5 -> 36.75
        (Transfer(2, 1, (3,), r(2, 1) or (), not_before_us=40.0), 100_000),  # 40 -> 52.25
        (Transfer(0, 1, (0,), r(0, 1) or (), channel=1, not_before_us=25.0), 100_000),  # 25 -> 37.25,
    ]  # ... but it overwrites what transfer 2 reads: it commits when that one arrives, at 44.5
    spec = {"links": link_spec(topo, 1), "step_overhead_us": 1.0,
            "transfers": [transfer_spec(t, units) for t, units in transfers]}
    answer = oracle(spec)
    assert answer["start_us"] == pytest.approx([0.0, 12.25, 12.25, 24.5, 40.0, 25.0], rel=1e-9)
    assert answer["arrive_us"] == pytest.approx([12.25, 24.5, 44.5, 36.75, 52.25, 37.25], rel=1e-9)
    assert answer["commit_us"] == pytest.approx([12.25, 24.5, 44.5, 36.75, 52.25, 44.5], rel=1e-9)
    assert answer["makespan_us"] == pytest.approx(52.25, rel=1e-9)


def test_oracle_golden_ring_allgather(oracle: Oracle) -> None:
    """The brief's golden value: ring8, 1 MiB per rank: 7 x (0.5 us + 1 MiB / 53.687 GB/s) = 140.21875 us."""
    topo = resolve_topology("ring8")
    n = topo.num_gpus
    transfers = [Transfer(r, (r + 1) % n, ((r - step) % n,), (topo.link_index[(r, (r + 1) % n)],))
                 for step in range(n - 1) for r in range(n)]
    schedule = Schedule(Collective(CollectiveKind.ALLGATHER, n), tuple(transfers), name="ring")
    answer = oracle(schedule_spec(topo, schedule, n * 2**20))
    assert answer["makespan_us"] == pytest.approx(140.21875, rel=1e-9)
    assert_agrees(oracle, topo, schedule, n * 2**20)


# ------------------------------------------------------------ the baselines
# (topology, size, root of Broadcast/Reduce, step overhead): one with switches only inside a machine,
# one without switches, two multi-machine ones with NICs (direct IB links; NIC switches and an IB fabric)
SHIPPED = [("dgx1", 4 * 2**20, 0, 0.0), ("dgx-a100", 3_000_000, 3, 0.5), ("ndv2x2", 4 * 2**20, 0, 0.0),
           ("dgx-a100x2", 4 * 2**20, 5, 1.0)]


@functools.cache
def _topology(name: str) -> Topology:
    return resolve_topology(name)


def _baseline_cases() -> list[Any]:
    cases = []
    for name, size, root, overhead in SHIPPED:
        topo = _topology(name)
        for kind in CollectiveKind:
            for algorithm in applicable_baselines(topo, kind, root=root):
                cases.append(pytest.param(name, kind, algorithm, size, root, overhead,
                                          id=f"{name}-{kind.value}-{algorithm}",
                                          marks=[pytest.mark.slow] if len(topo.machines) > 1 else []))
    return cases


BASELINE_CASES = _baseline_cases()


def test_every_collective_has_baselines_on_the_shipped_topologies() -> None:
    """Guards the parametrization: each topology contributes every collective."""
    for name, *_ in SHIPPED:
        kinds = {case.values[1] for case in BASELINE_CASES if case.values[0] == name}
        assert kinds == set(CollectiveKind), name


@pytest.mark.parametrize(("name", "kind", "algorithm", "size", "root", "overhead"), BASELINE_CASES)
def test_baseline_matches_simgrid(oracle: Oracle, name: str, kind: CollectiveKind, algorithm: str, size: int,
                                  root: int, overhead: float) -> None:
    topo = _topology(name)
    schedule = baseline(topo, kind, algorithm, root=root, size_bytes=size, step_overhead_us=overhead)
    assert_agrees(oracle, topo, schedule, size, overhead)


@pytest.mark.parametrize("machines", [5, 8])
def test_tree_allreduce_on_nccls_trees_matches_simgrid(oracle: Oracle, machines: int) -> None:
    """The tree baseline on more than 2 machines, where its trees are NCCL's (trees.cc: the second one shifted
    on an odd count, mirrored on an even one), on leaf switches of 2 GPUs under a slower spine."""
    from taccl_py.library.grids import switch_tree

    topo = switch_tree(machines, 2, 20.0, 0.5, uplink_bandwidth=5.0, uplink_latency=1.5)
    size = 3 * 2**20
    assert_agrees(oracle, topo, baseline(topo, CollectiveKind.ALLREDUCE, "tree", size_bytes=size), size, 0.4)


# ----------------------------------------------------------- random schedules
RANDOM = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
sizes = st.integers(1_000, 20_000_000)
overheads = st.sampled_from([0.0, 0.0, 0.7])


@pytest.mark.slow
@RANDOM
@given(data=st.data(), size=sizes, overhead=overheads)
def test_random_allgathers_match_simgrid(oracle: Oracle, data: st.DataObject, size: int,
                                         overhead: float) -> None:
    """Random spanning-tree Allgathers on random switched topologies: many transfers share links."""
    topo = data.draw(topologies(max_gpus=6, min_switches=1, max_switches=3), label="topology")
    schedule = data.draw(spanning_tree_allgathers(topo), label="schedule")
    if data.draw(st.booleans(), label="extra waits"):
        schedule = data.draw(with_waits(schedule), label="waits")
    assert_agrees(oracle, topo, schedule, size, overhead)


@pytest.mark.slow
@RANDOM
@given(data=st.data(), size=sizes, overhead=overheads)
def test_random_reductions_match_simgrid(oracle: Oracle, data: st.DataObject, size: int,
                                         overhead: float) -> None:
    """Random in-tree ReduceScatters and Reduces (commits of reductions into one copy serialise)."""
    topo = data.draw(topologies(max_gpus=6, max_switches=3), label="topology")
    kind = data.draw(st.sampled_from([CollectiveKind.REDUCESCATTER, CollectiveKind.REDUCE]), label="kind")
    schedule = data.draw(spanning_tree_reductions(topo, kind), label="schedule")
    if data.draw(st.booleans(), label="extra waits"):
        schedule = data.draw(with_waits(schedule), label="waits")
    assert_agrees(oracle, topo, schedule, size, overhead)


# ------------------------------------------------- multicast and in-network reduction (network groups)
def _group_cases() -> list[tuple[str, Topology, Schedule, int]]:
    """Network groups: SimGrid sends each group as one communication over the union of its members' links."""
    from taccl_py.library.grids import switch_star, switch_tree
    from taccl_py.schedule import Op

    tree = switch_tree(2, 2, 10.0, 1.0, uplink_bandwidth=5.0, uplink_latency=2.0, multicast=True, reduce=True)
    star4 = switch_star(4, 10.0, 1.0, multicast=True, reduce=True)

    def route(topo: Topology, s: int, d: int) -> tuple[int, ...]:
        r = topo.gpu_route(s, d)
        assert r is not None
        return r

    def allgather(topo: Topology) -> list[Transfer]:
        n = topo.num_gpus
        return [Transfer(r, d, (r,), route(topo, r, d), group=r) for r in range(n) for d in range(n) if d != r]

    nvls = [Transfer(s, b, (b,), route(star4, s, b), Op.REDUCE, group=b) for b in range(4) for s in range(4)
            if s != b]
    nvls += [Transfer(b, d, (b,), route(star4, b, d), group=4 + b) for b in range(4) for d in range(4) if d != b]
    sharp = [Transfer(s, d, (c,), route(tree, s, d), Op.REDUCE, channel=c, group=c) for c in range(4)
             for s in range(4) for d in range(4) if s != d]
    mixed = [*allgather(tree)[:3], Transfer(1, 3, (1,), route(tree, 1, 3)), Transfer(2, 0, (2,), route(tree, 2, 0))]
    mixed += allgather(tree)[3:]
    return [("tree multicast allgather", tree, Schedule(Collective(CollectiveKind.ALLGATHER, 4),
                                                         tuple(allgather(tree))), 4 * 10**6),
            ("star nvls allreduce", star4, Schedule(Collective(CollectiveKind.ALLREDUCE, 4), tuple(nvls)), 4 * 10**6),
            ("tree sharp allreduce", tree, Schedule(Collective(CollectiveKind.ALLREDUCE, 4), tuple(sharp)),
             4 * 10**6),
            ("tree multicast and unicast", tree, Schedule(Collective(CollectiveKind.ALLGATHER, 4), tuple(mixed)),
             4 * 10**6)]


@pytest.mark.parametrize("case", range(len(_group_cases())),
                         ids=[name for name, *_ in _group_cases()])
def test_network_groups_match_simgrid(oracle: Oracle, case: int) -> None:
    _, topo, schedule, size = _group_cases()[case]
    assert schedule.uses_switch_offload
    assert_agrees(oracle, topo, schedule, size)
    assert_agrees(oracle, topo, schedule, size, step_overhead_us=0.5)


def _synthesized_switch_cases() -> list[tuple[str, Topology, Schedule]]:
    """Schedules the synthesizer routes through the switches (taccl_py/synthesis/multicast.py) on the two-level tree."""
    from taccl_py.library.grids import switch_tree
    from taccl_py.synthesis import SynthesisOptions
    from taccl_py.synthesis.multicast import one_group_allreduce, split_by_latency, switch_candidates
    from taccl_py.synthesis.options import Run
    from taccl_py.synthesis.routes import prepare

    tree = switch_tree(2, 2, 10.0, 1.0, uplink_bandwidth=5.0, uplink_latency=2.0, multicast=True, reduce=True)
    cases = []
    for kind in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
        run_ = Run.start(SynthesisOptions(chunk_factors=(2,)), None)
        found = switch_candidates(run_, prepare(run_, tree, kind, 4 * 10**6), 4 * 10**6)
        trees = next(c for c in found.choices if "trees" in c.label)
        cases.append((f"synthesized {kind.value} trees", tree, trees.schedule))
    whole = one_group_allreduce(tree)
    assert whole is not None
    cut = split_by_latency(tree, whole.transfers)
    assert cut is not None
    cases.append(("one-group allreduce split by latency", tree, whole.with_transfers(cut)))
    return cases


@pytest.mark.parametrize("case", range(4), ids=["ag trees", "rs trees", "ar trees", "ar one group split"])
def test_synthesized_switch_trees_match_simgrid(oracle: Oracle, case: int) -> None:
    _, topo, schedule = _synthesized_switch_cases()[case]
    assert schedule.uses_switch_offload
    assert_agrees(oracle, topo, schedule, 4 * 10**6)
