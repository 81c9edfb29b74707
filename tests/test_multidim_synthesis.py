"""Synthesis on multi-dimensional networks: the shortcut to ``hier-lb`` near the bound, and never slower than
the hierarchical baselines."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import baseline
from taccl_py.bounds import lower_bound
from taccl_py.collectives import CollectiveKind
from taccl_py.library import AstraDimension, AstraKind, astra_topology, resolve_topology
from taccl_py.simulator import simulate
from taccl_py.synthesis import SynthesisOptions, synthesize
from taccl_py.synthesis.multidim import (
    MACHINES_SKIP_EFFICIENCY,
    SKIP_EFFICIENCY,
    hierarchical_shortcut,
    skip_efficiency,
)
from taccl_py.topology import Topology

K = CollectiveKind
GB = 1 << 30
KINDS = (K.ALLGATHER, K.REDUCESCATTER, K.ALLREDUCE)
QUICK = SynthesisOptions(time_limit_s=10)


def ring_switch() -> Topology:
    """Issue 10's ``[Ring 4, Switch 4]``, bw [200, 50] GB/s, lat [500, 2000] ns."""
    return astra_topology([AstraDimension(AstraKind.RING, 4, 200.0, 500.0),
                           AstraDimension(AstraKind.SWITCH, 4, 50.0, 2000.0)])


def _best_hierarchical(topology: Topology, kind: CollectiveKind, size: float) -> float:
    times = []
    for name in ("hier", "hier-lb"):
        sim = simulate(topology, baseline(topology, kind, name, size_bytes=size), size)
        assert sim.correct and sim.time_us is not None
        times.append(sim.time_us)
    return min(times)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_the_shortcut_returns_hier_lb_near_the_bound(kind: CollectiveKind) -> None:
    """At 1 GB on [Ring 4, Switch 4] ``hier-lb`` is modelled within 90% of the bound: the solver stages are
    skipped, and what is returned is simulated, correct, >= 90% of the bound and the fastest baseline."""
    topology = ring_switch()
    result = synthesize(topology, kind, GB, QUICK)
    assert result.sim.correct and result.sim.time_us is not None
    assert any(n.startswith("multi-dimensional shortcut") for n in result.notes), result.notes
    assert result.synthesized is None and result.candidates == () and result.stats == ()
    assert result.stages_s["routing"] == 0.0 and result.stages_s["baselines"] > 0.0
    bound = lower_bound(topology, kind, GB).bound_us
    assert bound / result.sim.time_us >= SKIP_EFFICIENCY
    assert result.sim.time_us == pytest.approx(min(t for t in result.baselines.values() if t is not None))
    assert result.sim.time_us <= _best_hierarchical(topology, kind, GB) * (1 + 1e-9)


def test_the_shortcut_is_not_taken_far_from_the_bound_or_when_switched_off() -> None:
    topology = ring_switch()
    assert hierarchical_shortcut(topology, K.ALLREDUCE, GB, QUICK) is not None
    # 1 KB: latency dominates, the hierarchical schedule is far from the bound
    assert hierarchical_shortcut(topology, K.ALLREDUCE, 1024, QUICK) is None
    assert hierarchical_shortcut(topology, K.ALLREDUCE, GB, replace(QUICK, multidim_shortcut=False)) is None
    # without the baseline comparison there is nothing to return
    assert hierarchical_shortcut(topology, K.ALLREDUCE, GB, replace(QUICK, compare_baselines=False)) is None
    # no dimensions, or a collective the hierarchical baselines do not run
    assert hierarchical_shortcut(resolve_topology("ring8"), K.ALLREDUCE, GB, QUICK) is None
    assert hierarchical_shortcut(topology, K.ALLTOALL, GB, QUICK) is None


def test_on_machines_the_shortcut_ends_the_search_only_near_the_bound() -> None:
    """Where the streamed candidates apply (GPUs in machines), hier-lb must be modelled within 1% of the bound:
    dgx-a100x2 Allgather 1 GB (98.5%) runs the solver stages, Allreduce 1 GB on dgx-a100x4-forestcoll (99.4%)
    does not; the same network without its machines takes the shortcut at 90% as before."""
    cluster = resolve_topology("dgx-a100x2")
    assert skip_efficiency(cluster, K.ALLGATHER) == MACHINES_SKIP_EFFICIENCY == 0.99
    assert skip_efficiency(cluster, K.ALLTOALL) == SKIP_EFFICIENCY  # no streamed candidates for Alltoall
    assert skip_efficiency(ring_switch(), K.ALLGATHER) == SKIP_EFFICIENCY
    assert hierarchical_shortcut(cluster, K.ALLGATHER, GB, QUICK) is None
    flat = replace(cluster, machines=())
    shortcut = hierarchical_shortcut(flat, K.ALLGATHER, GB, QUICK)
    assert shortcut is not None and SKIP_EFFICIENCY <= shortcut.efficiency < MACHINES_SKIP_EFFICIENCY
    near = hierarchical_shortcut(resolve_topology("dgx-a100x4-forestcoll"), K.ALLREDUCE, GB, QUICK)
    assert near is not None and near.efficiency >= MACHINES_SKIP_EFFICIENCY


def test_the_shortcut_note_names_its_figures() -> None:
    shortcut = hierarchical_shortcut(ring_switch(), K.ALLGATHER, GB, QUICK)
    assert shortcut is not None and shortcut.baselines is None
    assert shortcut.efficiency >= SKIP_EFFICIENCY
    note = shortcut.note(16)
    assert f"{100 * shortcut.efficiency:.1f}% of the bound" in note and "--no-multidim-shortcut" in note


@st.composite
def small_networks(draw: st.DrawFn) -> Topology:
    dims = [AstraDimension(draw(st.sampled_from(list(AstraKind))), draw(st.integers(2, 3)),
                           draw(st.sampled_from([50.0, 100.0, 200.0])), draw(st.sampled_from([50.0, 500.0, 2000.0])))
            for _ in range(2)]
    return astra_topology(dims)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=small_networks(), kind=st.sampled_from(KINDS), size=st.sampled_from([4096, 1 << 20, 64 << 20]))
def test_never_slower_than_the_best_hierarchical_baseline(topology: Topology, kind: CollectiveKind,
                                                          size: int) -> None:
    """On random small 2-D networks, shortcut or not, synthesis is at least as fast as ``hier`` and
    ``hier-lb`` tuned for the size."""
    result = synthesize(topology, kind, size, QUICK)
    assert result.sim.correct and result.sim.time_us is not None
    assert result.sim.time_us <= _best_hierarchical(topology, kind, size) * (1 + 1e-9)
    assert result.sim.time_us >= lower_bound(topology, kind, size).bound_us * (1 - 1e-9)
