"""Link classes, the re-calibration rule, and the measurements CSV round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from taccl_py.errors import ProfileInputError
from taccl_py.profiler.calibration import LinkFit, link_class, link_classes, recalibrate, topology_from_fits
from taccl_py.profiler.fit import Observation, fit_alpha_beta
from taccl_py.profiler.fitting import samples_to_fits
from taccl_py.profiler.measurements import Sample, dumps_measurements_csv, parse_measurements_csv
from taccl_py.topology import Link, Switch, Topology, check_topology

SIZES = [1 << k for k in range(10, 27)]


def _fit(alpha: float, bw: float, label: str = "x", pairs: tuple[tuple[int, int], ...] = ((0, 1),)) -> LinkFit:
    obs = [Observation(s, alpha + s / (bw * 1e3)) for s in SIZES]
    return LinkFit(label, fit_alpha_beta(obs), pairs, ("m.csv",), "t = alpha + size/B")


def _star() -> Topology:
    """3 GPUs on one switch; GPU 0's uplink is faster than its downlinks."""
    links = [Link(0, "sw", 200.0, 0.5), Link("sw", 0, 100.0, 0.5)]
    for g in (1, 2):
        links += [Link(g, "sw", 100.0, 0.5), Link("sw", g, 100.0, 0.5)]
    return check_topology(Topology("star", 3, tuple(links), switches=(Switch("sw"),)))


def test_link_classes_name_the_route_signature() -> None:
    topology = _star()
    assert link_class(topology, 0, 1) == "nvlink 200GB/s > nvlink 100GB/s"
    assert link_class(topology, 1, 2) == "nvlink 100GB/s > nvlink 100GB/s"
    classes = link_classes(topology)
    assert classes["nvlink 200GB/s > nvlink 100GB/s"] == ((0, 1), (0, 2))
    assert len(classes["nvlink 100GB/s > nvlink 100GB/s"]) == 4


def test_recalibration_sets_the_bottleneck_and_raises_slower_links_only() -> None:
    topology = _star()
    new, warnings = recalibrate(topology, [(_fit(3.0, 150.0), [(0, 1)])], note="test")
    assert warnings == ()
    up, down = new.links[new.link_index[(0, "sw")]], new.links[new.link_index[("sw", 1)]]
    assert up.bandwidth == 200.0  # above the measured 150: not the bottleneck, left alone
    assert down.bandwidth == pytest.approx(150.0)  # the bottleneck takes the measured bandwidth
    assert up.latency + down.latency == pytest.approx(3.0)  # 0.5 + 0.5 scaled to alpha
    assert new.route_bandwidth(new.gpu_route(0, 1) or ()) == pytest.approx(150.0)
    untouched = new.links[new.link_index[(2, "sw")]]
    assert untouched == topology.links[topology.link_index[(2, "sw")]] and untouched.provenance is None
    assert new.source == "test"

    faster, _ = recalibrate(topology, [(_fit(1.0, 300.0), [(0, 1)])], note="test")
    assert {faster.links[faster.link_index[e]].bandwidth for e in ((0, "sw"), ("sw", 1))} == {300.0}


def test_zero_latencies_are_split_evenly() -> None:
    links = (Link(0, "sw", 100.0, 0.0), Link("sw", 1, 100.0, 0.0), Link(1, "sw", 100.0, 0.0),
             Link("sw", 0, 100.0, 0.0))
    topology = check_topology(Topology("z", 2, links, switches=(Switch("sw"),)))
    new, _ = recalibrate(topology, [(_fit(4.0, 80.0), [(0, 1)])], note="n")
    assert [new.links[i].latency for i in new.gpu_route(0, 1) or ()] == pytest.approx([2.0, 2.0])


def test_conflicting_fits_on_shared_links_keep_the_first_and_say_so() -> None:
    topology = _star()
    targets = [(_fit(3.0, 90.0, "a"), [(1, 0)]), (_fit(5.0, 60.0, "b"), [(2, 0)])]  # both use sw -> 0
    new, warnings = recalibrate(topology, targets, note="n")
    assert new.links[new.link_index[("sw", 0)]].bandwidth == pytest.approx(90.0)
    assert len(warnings) == 1 and warnings[0].startswith("b: 1 link update(s) conflict")


def test_pair_fits_need_connected_pairs() -> None:
    fits = [_fit(2.0, 10.0, "0->1", ((0, 1),)), _fit(2.0, 10.0, "2->3", ((2, 3),))]
    with pytest.raises(ProfileInputError, match="do not make a usable topology"):
        topology_from_fits(fits, name="t", source="s", where="m.csv")
    ok = topology_from_fits([*fits, _fit(2.0, 10.0, "1->2", ((1, 2),))], name="t", source="s")
    assert len(ok.links) == 6 and ok.num_gpus == 4


def test_class_grouping_pools_pairs_and_targets_every_pair_of_the_class() -> None:
    topology = _star()
    rng = np.random.default_rng(5)
    samples = [Sample(s, d, size, (1.5 + size / 120e3) * (1 + rng.normal(0, 0.005)), k)
               for s, d in ((1, 2), (2, 1)) for size in SIZES for k in range(3)]
    results, warnings = samples_to_fits(samples, files=["m.csv"], group="class", base=topology)
    ((link_fit, targets),) = results
    assert link_fit.label == "nvlink 100GB/s > nvlink 100GB/s" and link_fit.pairs == ((1, 2), (2, 1))
    assert sorted(targets) == [(1, 0), (1, 2), (2, 0), (2, 1)]  # unmeasured pairs of the class too
    assert link_fit.fit.num_samples == 2 * len(SIZES)  # repeats reduced to their median
    assert link_fit.fit.bandwidth_gbps == pytest.approx(120.0, rel=0.01) and not warnings


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), st.integers(1, 1 << 40),
                          st.floats(1e-3, 1e7, allow_nan=False), st.integers(0, 1000)), min_size=1, max_size=30))
def test_csv_round_trip(rows: list[tuple[int, int, int, float, int]]) -> None:
    samples = [Sample(s, d, b, t, r) for s, d, b, t, r in rows if s != d]
    if not samples:
        return
    text = dumps_measurements_csv(samples, comments=["made by a test"])
    back = parse_measurements_csv(text, where="m.csv")
    assert [(x.src, x.dst, x.size_bytes, x.repeat) for x in back] == [
        (x.src, x.dst, x.size_bytes, x.repeat) for x in samples]
    for x, y in zip(back, samples, strict=True):
        assert x.time_us == pytest.approx(y.time_us, abs=5e-5, rel=1e-9)
    assert back[0].origin == "m.csv: line 3"


def test_csv_columns_in_any_order_and_repeat_optional(tmp_path: Path) -> None:
    back = parse_measurements_csv("time_us, bytes ,dst,src\n4.5,1024,1,0\n", where="m.csv")
    assert back == (Sample(0, 1, 1024, 4.5, 0, "m.csv: line 2"),)
    with pytest.raises(ProfileInputError, match=r"m\.csv: line 1: unknown column 'note'"):
        parse_measurements_csv("src,dst,bytes,time_us,note\n0,1,1024,4.5,x\n", where="m.csv")
    with pytest.raises(ProfileInputError, match=r"m\.csv: line 2: time_us must be a positive number"):
        parse_measurements_csv("src,dst,bytes,time_us\n0,1,1024,-4.5\n", where="m.csv")
    with pytest.raises(ProfileInputError, match=r"m\.csv: has a header but no measurement rows"):
        parse_measurements_csv("src,dst,bytes,time_us\n# nothing\n", where="m.csv")
