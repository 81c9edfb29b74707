"""ASTRA-sim multi-dimensional networks: the generator, its routes and the network-YAML importer."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.cli.main import main
from taccl_py.errors import TopologyError
from taccl_py.library import (
    AstraDimension,
    AstraKind,
    astra_route,
    astra_topology,
    load_astra_yaml,
    parse_astra_dims,
    resolve_topology,
    ring8,
    torus,
)
from taccl_py.library.astra import astra_dimensions_of, dumps_astra_network, save_astra_yaml
from taccl_py.library.grids import mesh
from taccl_py.topology import DimensionKind, Topology
from taccl_py.topology_io import load_topology, save_topology

VECTORS = Path(__file__).resolve().parent / "vectors" / "astra"
GIB = 2**30 / 1e9  # ASTRA-sim GB/s -> GB/s of 1e9 bytes

EXAMPLE_DIMS = (AstraDimension(AstraKind.RING, 2, 200.0, 50.0),
                AstraDimension(AstraKind.FULLY_CONNECTED, 8, 100.0, 500.0),
                AstraDimension(AstraKind.SWITCH, 4, 50.0, 2000.0))


def link_set(topology: Topology) -> set[tuple[object, object, float, float]]:
    return {(lk.src, lk.dst, lk.bandwidth, lk.latency) for lk in topology.links}


# --------------------------------------------------------------- the YAML files
def test_the_64_npu_example() -> None:
    topology = load_astra_yaml(VECTORS / "ring_fc_switch_64npus.yml")
    assert topology.name == "ring_fc_switch_64npus"
    assert topology.num_gpus == 64
    assert [s.name for s in topology.switches] == [f"dim2.switch{j}" for j in range(16)]
    counts = {kind: sum(1 for lk in topology.links if lk.kind == kind)
              for kind in ("dim0-ring", "dim1-fullyconnected", "dim2-switch")}
    assert counts == {"dim0-ring": 32 * 2, "dim1-fullyconnected": 8 * 56, "dim2-switch": 16 * 8}
    figures = {lk.kind: (lk.bandwidth, lk.latency) for lk in topology.links}
    assert figures["dim0-ring"] == pytest.approx((200 * GIB, 0.05))
    assert figures["dim1-fullyconnected"] == pytest.approx((100 * GIB, 0.5))
    assert figures["dim2-switch"] == pytest.approx((50 * GIB, 2.0))
    for g in topology.gpus:
        assert topology.injection_bandwidth(g) == pytest.approx((200 + 7 * 100 + 50) * GIB)
    assert topology == astra_topology(EXAMPLE_DIMS, name=topology.name, source=topology.source)
    assert "Ring(2, 200 GB/s, 50 ns)" in topology.source


def test_the_one_dimensional_ring_is_the_golden_ring() -> None:
    topology = load_astra_yaml(VECTORS / "ring_8npus.yml")
    assert topology.num_gpus == 8 and len(topology.links) == 16
    assert link_set(topology) == link_set(ring8())
    assert {lk.bandwidth for lk in topology.links} == {53.6870912}


def test_the_switch_example_and_resolve_by_path() -> None:
    path = VECTORS / "switch_8npus.yml"
    topology = resolve_topology(str(path))
    assert topology.num_gpus == 8 and [s.name for s in topology.switches] == ["dim0.switch0"]
    route = topology.gpu_route(0, 7)
    assert route is not None and topology.route_latency(route) == pytest.approx(2 * 0.93625)


def test_astra_torus_matches_the_grid_torus() -> None:
    dim = AstraDimension(AstraKind.RING, 4, 50.0, 500.0)
    astra = astra_topology([dim, dim])
    grid = torus([4, 4], dim.bandwidth_GBps, dim.latency_us)
    assert link_set(astra) == link_set(grid)


# --------------------------------------------------------------------- routes
def test_route_follows_dimension_order_as_astra_sim() -> None:
    topology = astra_topology(EXAMPLE_DIMS)
    # NPU 47 has address [1, 7, 2] (ASTRA-sim's own example)
    vertices = astra_route(EXAMPLE_DIMS, 0, 47)
    assert vertices == (0, 1, 15, "dim2.switch15", 47)
    route = topology.route_from_vertices(vertices)
    assert topology.route_latency(route) == pytest.approx(0.05 + 0.5 + 2.0 + 2.0)


@pytest.mark.parametrize(("dst", "expected"), [
    (3, (0, 1, 2, 3)), (5, (0, 7, 6, 5)), (4, (0, 1, 2, 3, 4)), (7, (0, 7)),
])
def test_ring_takes_the_shorter_side_clockwise_on_ties(dst: int, expected: tuple[int, ...]) -> None:
    assert astra_route([AstraDimension(AstraKind.RING, 8, 50.0, 500.0)], 0, dst) == expected


def test_route_checks_npu_ids() -> None:
    with pytest.raises(TopologyError, match=r"dst must be an NPU id in 0\.\.63"):
        astra_route(EXAMPLE_DIMS, 0, 64)


dimension = st.builds(AstraDimension, st.sampled_from(list(AstraKind)), st.integers(2, 5),
                      st.sampled_from([25.0, 50.0, 200.0]), st.sampled_from([0.0, 50.0, 500.0]))


def expected_links(dims: list[AstraDimension]) -> int:
    total = math.prod(d.npus for d in dims)
    per_group = {AstraKind.RING: lambda n: 2 if n == 2 else 2 * n,
                 AstraKind.FULLY_CONNECTED: lambda n: n * (n - 1),
                 AstraKind.SWITCH: lambda n: 2 * n}
    return sum(total // d.npus * per_group[d.kind](d.npus) for d in dims)


def out_bandwidth(dims: list[AstraDimension]) -> float:
    degree = {AstraKind.RING: lambda n: min(2, n - 1), AstraKind.FULLY_CONNECTED: lambda n: n - 1,
              AstraKind.SWITCH: lambda n: 1}
    return sum(degree[d.kind](d.npus) * d.bandwidth_GBps for d in dims)


@settings(max_examples=30)
@given(st.lists(dimension, min_size=1, max_size=3), st.data())
def test_random_multi_dimensional_networks(dims: list[AstraDimension], data: st.DataObject) -> None:
    topology = astra_topology(dims)  # validated and connected, or it raises
    graph = topology.to_networkx()
    assert set(topology.gpus) <= next(c for c in nx.strongly_connected_components(graph) if 0 in c)
    total = math.prod(d.npus for d in dims)
    assert topology.num_gpus == total
    assert len(topology.links) == expected_links(dims)
    switches = sum(total // d.npus for d in dims if d.kind is AstraKind.SWITCH)
    assert len(topology.switches) == switches
    for g in topology.gpus:
        assert topology.injection_bandwidth(g) == pytest.approx(out_bandwidth(dims))
    src = data.draw(st.integers(0, total - 1), label="src")
    dst = data.draw(st.integers(0, total - 1).filter(lambda x: x != src), label="dst")
    vertices = astra_route(dims, src, dst)
    route = topology.route_from_vertices(vertices)  # every hop is a link
    assert vertices[0] == src and vertices[-1] == dst
    hops = 0
    latency = 0.0
    a, b = src, dst
    for d in dims:
        x, y = a % d.npus, b % d.npus
        a, b = a // d.npus, b // d.npus
        if x == y:
            continue
        n = {AstraKind.RING: min((y - x) % d.npus, (x - y) % d.npus), AstraKind.FULLY_CONNECTED: 1,
             AstraKind.SWITCH: 2}[d.kind]
        hops += n
        latency += n * d.latency_us
    assert len(route) == hops
    assert topology.route_latency(route) == pytest.approx(latency)


# ------------------------------------------------------------ malformed files
BAD_YAML: list[tuple[str, str, str, str]] = [
    ("lengths differ", "topology: [ Ring, Switch ]\nnpus_count: [ 4 ]\nbandwidth: [ 1, 2 ]\nlatency: [ 1, 2 ]\n",
     "npus_count", "has 1 entries but topology has 2 (one per dimension)"),
    ("latency too long", "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 1 ]\nlatency: [ 1, 2 ]\n",
     "latency", "has 2 entries but topology has 1"),
    ("unknown kind", "topology: [ Torus ]\nnpus_count: [ 4 ]\nbandwidth: [ 1 ]\nlatency: [ 1 ]\n",
     "topology[0]", "unknown topology kind 'Torus' (expected Ring, FullyConnected or Switch)"),
    ("wrong case", "topology: [ Ring, fully_connected ]\nnpus_count: [ 2, 2 ]\nbandwidth: [ 1, 1 ]\n"
                   "latency: [ 1, 1 ]\n", "topology[1]", "ASTRA-sim spells it 'FullyConnected'"),
    ("zero bandwidth", "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 0.0 ]\nlatency: [ 1 ]\n",
     "bandwidth[0]", "must be > 0 (got 0)"),
    ("negative bandwidth", "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ -50 ]\nlatency: [ 1 ]\n",
     "bandwidth[0]", "must be > 0 (got -50)"),
    ("negative latency", "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 1 ]\nlatency: [ -1 ]\n",
     "latency[0]", "must be >= 0 (got -1)"),
    ("one npu", "topology: [ Ring, Switch ]\nnpus_count: [ 4, 1 ]\nbandwidth: [ 1, 1 ]\nlatency: [ 1, 1 ]\n",
     "npus_count[1]", "must be > 1 (got 1)"),
    ("fractional npus", "topology: [ Ring ]\nnpus_count: [ 2.5 ]\nbandwidth: [ 1 ]\nlatency: [ 1 ]\n",
     "npus_count[0]", "must be an integer (got 2.5)"),
    ("npus a string", "topology: [ Ring ]\nnpus_count: [ eight ]\nbandwidth: [ 1 ]\nlatency: [ 1 ]\n",
     "npus_count[0]", "must be an integer (got 'eight')"),
    ("bandwidth a boolean", "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ true ]\nlatency: [ 1 ]\n",
     "bandwidth[0]", "must be a finite number (got True)"),
    ("bandwidth infinite", "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ .inf ]\nlatency: [ 1 ]\n",
     "bandwidth[0]", "must be a finite number"),
    ("missing latency", "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 1 ]\n", "latency", "is missing"),
    ("scalar, not a list", "topology: Ring\nnpus_count: [ 4 ]\nbandwidth: [ 1 ]\nlatency: [ 1 ]\n",
     "topology", "must be a non-empty list, one entry per dimension (got 'Ring')"),
    ("empty list", "topology: []\nnpus_count: []\nbandwidth: []\nlatency: []\n", "topology",
     "must be a non-empty list"),
    ("a list at the top", "- Ring\n- 8\n", "", "top level must be a mapping"),
    ("empty file", "", "", "top level must be a mapping"),
    ("syntax error", "topology: [ Ring\nnpus_count: [ 4 ]\n", "", "not valid YAML"),
    ("too big", "topology: [ FullyConnected ]\nnpus_count: [ 5000 ]\nbandwidth: [ 1 ]\nlatency: [ 1 ]\n",
     "", "limit is"),
]


@pytest.mark.parametrize(("case", "text", "field", "words"), BAD_YAML, ids=[c[0] for c in BAD_YAML])
def test_malformed_yaml_names_file_and_field(case: str, text: str, field: str, words: str, tmp_path: Path) -> None:
    path = tmp_path / "network.yml"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        load_astra_yaml(path)
    message = str(info.value)
    if field:
        assert message.startswith(f"{path}: {field} "), message
    else:
        assert str(path) in message
    assert words in message, message
    assert "\n" not in message


def test_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("topology: [ Ring ]\nnpus_count: [ 4\nbandwidth: [ 1 ]\n")
    with pytest.raises(TopologyError, match=r"not valid YAML: .*\(line \d+, column \d+\)"):
        resolve_topology(str(path))


def test_extra_keys_are_ignored_as_astra_sim_does(tmp_path: Path) -> None:
    path = tmp_path / "extra.yml"
    path.write_text((VECTORS / "ring_8npus.yml").read_text() + "links_count: [ 2 ]\n")
    assert load_astra_yaml(path).num_gpus == 8


# ---------------------------------------------------------- the --dims syntax
def test_parse_astra_dims() -> None:
    assert parse_astra_dims("Ring:2:200:50, fc:8:100:500,switch:4:50:2000") == EXAMPLE_DIMS


@pytest.mark.parametrize(("text", "words"), [
    ("Ring:8:50", "must be KIND:NPUS:BANDWIDTH:LATENCY"),
    ("Torus:8:50:500", "unknown topology kind 'Torus'"),
    ("Ring:x:50:500", "NPUS must be an integer"),
    ("Ring:1:50:500", "dimension 0 npus must be > 1"),
    ("Ring:4:50:500,Switch:4:0:1", "dimension 1 bandwidth must be > 0"),
    ("Ring:4:50:-1", "dimension 0 latency must be >= 0"),
])
def test_parse_astra_dims_errors(text: str, words: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_astra_dims(text)
    assert str(info.value).startswith("--dims: ") and words in str(info.value)


def test_generator_rejects_bad_dimensions() -> None:
    with pytest.raises(TopologyError, match="dims must list at least one dimension"):
        astra_topology([])
    with pytest.raises(TopologyError, match=r"dims\[0\].npus must be > 1"):
        astra_topology([AstraDimension(AstraKind.RING, 1, 1.0, 1.0)])


# ------------------------------------------------------------ dimensions, export
def test_imported_networks_carry_their_dimensions_through_save_and_load(tmp_path: Path) -> None:
    topology = load_astra_yaml(VECTORS / "ring_fc_switch_64npus.yml")
    assert [(d.kind, d.size) for d in topology.dimensions] == [
        (DimensionKind.RING, 2), (DimensionKind.FULLY_CONNECTED, 8), (DimensionKind.SWITCH, 4)]
    save_topology(topology, tmp_path / "t.json")
    assert load_topology(tmp_path / "t.json") == topology
    text = (tmp_path / "t.json").read_text()
    assert '  "dimensions": [\n    {"kind": "ring", "size": 2},\n    {"kind": "fully-connected", "size": 8},' in text
    assert topology.dimension_group(13, 1) == (1, 3, 5, 7, 9, 11, 13, 15)
    assert topology.coordinates(13) == (1, 6, 0)


def test_generators_set_dimensions() -> None:
    assert [(d.kind.value, d.size) for d in torus([4, 2]).dimensions] == [("ring", 4), ("ring", 2)]
    assert [(d.kind.value, d.size) for d in mesh([3, 2]).dimensions] == [("line", 3), ("line", 2)]
    assert [(d.kind.value, d.size) for d in resolve_topology("dgx-h100x4").dimensions] == [("switch", 8),
                                                                                            ("switch", 4)]
    assert resolve_topology("dgx1").dimensions == ()


@pytest.mark.parametrize(("text", "field", "words"), [
    ('"dimensions": [{"kind": "ring", "size": 3}]', "dimensions", "multiply to 3 (3) but the topology has 4 GPUs"),
    ('"dimensions": [{"kind": "torus", "size": 4}]', "dimensions[0].kind", "must be one of ring, fully-connected"),
    ('"dimensions": [{"kind": "ring", "size": 0}]', "dimensions[0].size", "must be an integer >= 1 (got 0)"),
    ('"dimensions": [{"kind": "ring"}]', "dimensions[0].size", "is missing"),
    ('"dimensions": [{"kind": "ring", "size": 4, "bw": 1}]', "dimensions[0]", "has unknown field 'bw'"),
    ('"dimensions": {"kind": "ring"}', "dimensions", "must be a list"),
])
def test_bad_dimensions_in_a_file(text: str, field: str, words: str, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"gpus": 4, ' + text + ', "links": [{"src": 0, "dst": 1, "bandwidth": 1, "bidirectional": '
                    'true}, {"src": 1, "dst": 2, "bandwidth": 1, "bidirectional": true}, {"src": 2, "dst": 3, '
                    '"bandwidth": 1, "bidirectional": true}]}')
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert str(info.value) == f"{path}: {field} {words}" or (str(info.value).startswith(f"{path}: {field} ")
                                                             and words in str(info.value))


def yaml_text(kinds: list[str], npus: list[int], bandwidth: list[str], latency: list[str]) -> str:
    """An ASTRA-sim network file as its own examples are written."""
    return (f"topology: [ {', '.join(kinds)} ]\nnpus_count: [ {', '.join(map(str, npus))} ]\n"
            f"bandwidth: [ {', '.join(bandwidth)} ]\nlatency: [ {', '.join(latency)} ]\n")


decimal_text = st.builds(lambda whole, frac, digits: f"{whole}.{str(frac).zfill(digits)[:digits]}",
                         st.integers(0, 5000), st.integers(0, 999_999), st.integers(1, 6))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(dims=st.lists(st.tuples(st.sampled_from(["Ring", "FullyConnected", "Switch"]), st.integers(2, 5),
                          decimal_text.filter(lambda t: float(t) >= 0.01), decimal_text), min_size=1, max_size=4)
       .filter(lambda dims: math.prod(d[1] for d in dims) <= 128))
def test_yaml_topology_yaml_round_trip_is_exact(dims: list[tuple[str, int, str, str]], tmp_path_factory: Any) -> None:
    """Every field comes back as the file wrote it (compared as YAML values), and exporting the re-imported
    network writes the same bytes again."""
    directory = tmp_path_factory.mktemp("yaml")
    text = yaml_text([d[0] for d in dims], [d[1] for d in dims], [d[2] for d in dims], [d[3] for d in dims])
    (directory / "net.yml").write_text(text)
    topology = load_astra_yaml(directory / "net.yml")
    save_astra_yaml(topology, directory / "out.yml")
    written = (directory / "out.yml").read_text()
    assert yaml.safe_load(written) == yaml.safe_load(text)
    again = load_astra_yaml(directory / "out.yml")
    assert link_set(again) == link_set(topology) and again.dimensions == topology.dimensions
    save_astra_yaml(again, directory / "again.yml")
    assert (directory / "again.yml").read_text().splitlines()[1:] == written.splitlines()[1:]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.builds(AstraDimension, st.sampled_from(list(AstraKind)), st.integers(2, 4),
                          st.floats(1e-3, 9e5, allow_nan=False), st.floats(0, 1e7, allow_nan=False)),
                min_size=1, max_size=3))
def test_export_reproduces_any_network_exactly(dims: list[AstraDimension]) -> None:
    """Arbitrary floats: the exported numbers convert back to the very same link figures."""
    topology = astra_topology(dims)
    exported = astra_dimensions_of(topology)
    assert astra_topology(exported, name=topology.name, source=topology.source) == topology
    assert yaml.safe_load(dumps_astra_network(exported))["bandwidth"] == [d.bandwidth_gibps for d in exported]


def test_a_torus_exports_as_rings() -> None:
    topology = torus([4, 1, 2], 100.0, 0.25)
    dims = astra_dimensions_of(topology)
    assert [(d.kind, d.npus) for d in dims] == [(AstraKind.RING, 4), (AstraKind.RING, 2)]  # size 1 dropped
    assert dims[0].latency_ns == 250.0 and dims[0].bandwidth_GBps == 100.0
    assert link_set(astra_topology(dims)) == link_set(topology)


@pytest.mark.parametrize(("spec", "words"), [
    ("dgx1", "has no dimensions"),
    ("dgx-a100x2", "cannot be an ASTRA-sim Switch dimension"),
])
def test_export_refuses_what_astra_sim_cannot_express(spec: str, words: str) -> None:
    with pytest.raises(TopologyError, match=words):
        astra_dimensions_of(resolve_topology(spec))
    with pytest.raises(TopologyError, match="line dimension"):
        astra_dimensions_of(mesh([3, 3]))
    tampered = astra_topology(list(EXAMPLE_DIMS))
    links = list(tampered.links)
    links[0] = replace(links[0], bandwidth=links[0].bandwidth / 2)
    with pytest.raises(TopologyError, match="is not the ASTRA-sim network"):
        astra_dimensions_of(replace(tampered, links=tuple(links)))


def test_cli_topo_export_astra(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = VECTORS / "ring_fc_switch_64npus.yml"
    with pytest.raises(SystemExit) as done:
        main(["topo", "export-astra", str(source), "-o", str(tmp_path / "net.yml")])
    assert done.value.code in (0, None)
    assert yaml.safe_load((tmp_path / "net.yml").read_text()) == {
        key: value for key, value in yaml.safe_load(source.read_text()).items()
        if key in ("topology", "npus_count", "bandwidth", "latency")}
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(["topo", "export-astra", "dgx1", "-o", str(tmp_path / "x.yml")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "has no dimensions" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.yml").exists()
