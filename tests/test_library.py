"""The topology library: shipped files, name resolution, hardware facts and generator properties."""

from __future__ import annotations

import math
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.errors import TopologyError
from taccl_py.library import (
    SHIPPED_NAMES,
    Fabric,
    describe_topology,
    dgx1,
    dgx2_cluster,
    dgx_a100_cluster,
    dgx_h100,
    dgx_h100_cluster,
    fully_connected,
    hypercube,
    list_families,
    list_topologies,
    mesh,
    mi250_cluster,
    ndv2,
    ndv2_cluster,
    resolve_topology,
    ring,
    switch_star,
    topology_by_name,
    torus,
)
from taccl_py.library.describe import format_gpu_ranges
from taccl_py.library.export import BEGIN_MARKER, END_MARKER, expected_files, main, update_readme
from taccl_py.topology import Topology, Vertex
from taccl_py.topology_io import save_topology

REPO = Path(__file__).resolve().parent.parent
TOPOLOGIES = REPO / "topologies"


# ------------------------------------------------------------------ shipped files
@pytest.mark.parametrize(("file_name", "text"), sorted(expected_files().items()))
def test_shipped_file_equals_the_generator_byte_for_byte(file_name: str, text: str) -> None:
    path = TOPOLOGIES / file_name
    assert path.exists(), f"run: python -m taccl_py.library.export topologies/ (missing {file_name})"
    assert path.read_text(encoding="utf-8") == text, "run: python -m taccl_py.library.export topologies/"


def test_readme_catalogue_is_current_and_lists_every_file() -> None:
    readme = (TOPOLOGIES / "README.md").read_text(encoding="utf-8")
    assert update_readme(readme) == readme
    for info in list_topologies():
        assert f"`{info.name}.json`" in readme and info.source in readme


def test_no_stray_topology_files() -> None:
    shipped = {f"{name}.json" for name in SHIPPED_NAMES}
    assert {p.name for p in TOPOLOGIES.glob("*.json")} == shipped


def test_export_writes_then_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "README.md").write_text(f"# mine\n\nkept text\n\n{BEGIN_MARKER}\nold\n{END_MARKER}\n\ntail kept\n")
    assert main([str(tmp_path)]) == 0
    assert main([str(tmp_path), "--check"]) == 0
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("# mine\n\nkept text\n") and readme.endswith("\n\ntail kept\n")
    assert "\nold\n" not in readme
    (tmp_path / "dgx1.json").write_text("{}\n")
    capsys.readouterr()
    assert main([str(tmp_path), "--check"]) == 1
    assert "dgx1.json: differs" in capsys.readouterr().err


def test_list_topologies_matches_the_files() -> None:
    infos = list_topologies()
    assert [i.name for i in infos] == list(SHIPPED_NAMES)
    by_name = {i.name: i for i in infos}
    assert by_name["dgx-a100x4"].gpus == 32 and by_name["dgx-a100x4"].machines == 4
    assert by_name["gb200-nvl72"].gpus == 72
    assert all(i.source and i.description for i in infos)
    assert {f.pattern.split("xK")[0] for f in list_families()} >= {"ndv2", "dgx2", "dgx-a100", "dgx-h100", "mi250"}


# --------------------------------------------------------------------- resolution
@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_every_shipped_name_resolves_to_its_file(name: str) -> None:
    topology = resolve_topology(name)
    assert topology.name == name
    assert resolve_topology(str(TOPOLOGIES / f"{name}.json")) == topology


@pytest.mark.parametrize(("spec", "name"), [
    ("DGX1", "dgx1"), ("  dgx_a100 ", "dgx-a100"), ("NVL72", "gb200-nvl72"), ("gb200", "gb200-nvl72"),
    ("DGX-A100X16", "dgx-a100x16"), ("dgxa100x2", "dgx-a100x2"), ("dgx-h100x3-rail", "dgx-h100x3-rail"),
    ("dgx-a100x2-forestcoll", "dgx-a100x2-forestcoll"), ("dgx-a100x2-leaf-spine", "dgx-a100x2"), ("dgx-a100x5-single", "dgx-a100x5-single"),
    ("ndv2x3", "ndv2x3"), ("dgx2x5", "dgx2x5"), ("mi250x3", "mi250x3"), ("dgx-h100-nvls", "dgx-h100-nvls"),
    ("dgx-h100x2-nvls", "dgx-h100x2-nvls"), ("gb200-nvl72-nvls", "gb200-nvl72-nvls"),
])
def test_names_are_case_insensitive_with_aliases_and_families(spec: str, name: str) -> None:
    assert resolve_topology(spec).name == name


@pytest.mark.parametrize(("spec", "words"), [
    ("dgx3", "did you mean dgx2, dgx1"),
    ("dgx-a10x4", "did you mean dgx-a100x4"),
    ("zzzz", "`taccl topo list` shows the names"),
    ("ndv2x1", "K must be an integer >= 2 (got 1; use 'ndv2' for one machine)"),
    ("dgx-a100x0", "K must be an integer >= 2"),
    ("ndv2x2-rail", "applies only to dgx-a100xK and dgx-h100xK"),
    ("dgx-a100x2-nvls", "applies only to dgx-h100"),
    ("dgx-a100x999999", "limit is"),
    ("", "is empty"),
    ("nowhere/x.json", "no such file"),
    ("missing.yaml", "no such file"),
])
def test_bad_names_raise_clear_errors(spec: str, words: str) -> None:
    with pytest.raises(TopologyError) as info:
        resolve_topology(spec)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_a_plain_file_name_in_the_working_directory_resolves(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    save_topology(ring(5, 10.0, 1.0, name="mine"), tmp_path / "myring")
    monkeypatch.chdir(tmp_path)
    assert resolve_topology("myring").name == "mine"


def test_topology_by_name_is_none_for_unknown_names() -> None:
    assert topology_by_name("not-a-machine") is None


# ---------------------------------------------------------------- hardware facts
def nvlinks_of(topology: Topology, gpu: int, per_link: float = 25.0) -> float:
    return topology.injection_bandwidth(gpu) / per_link


def test_dgx1_every_gpu_has_six_nvlinks_of_25_gbps() -> None:
    topology = dgx1()
    assert len(topology.links) == 32
    for g in topology.gpus:
        assert nvlinks_of(topology, g) == 6 and topology.ejection_bandwidth(g) == 150.0
    two_links = {(lk.src, lk.dst) for lk in topology.links if lk.bandwidth == 50.0 and lk.src < lk.dst}  # type: ignore[operator]
    assert two_links == {(0, 1), (0, 4), (1, 3), (2, 3), (2, 6), (4, 5), (5, 7), (6, 7)}
    assert {lk.latency for lk in topology.links} == {0.7}
    assert ndv2().links == topology.links


@pytest.mark.parametrize(("name", "gpus", "per_gpu", "latency"), [
    ("dgx2", 16, 125.0, 0.35), ("dgx-a100", 8, 300.0, 0.35), ("dgx-h100", 8, 450.0, 0.35),
    ("gb200-nvl72", 72, 900.0, 0.35),
])
def test_nvswitch_machines(name: str, gpus: int, per_gpu: float, latency: float) -> None:
    topology = resolve_topology(name)
    assert topology.num_gpus == gpus and [s.kind for s in topology.switches] == ["nvswitch"]
    for g in topology.gpus:
        assert topology.injection_bandwidth(g) == per_gpu == topology.ejection_bandwidth(g)
        route = topology.gpu_route(g, (g + 1) % gpus)
        assert route is not None and topology.route_latency(route) == pytest.approx(2 * latency)
    assert not topology.switches[0].multicast


def test_nvls_flags_the_switch() -> None:
    switch = dgx_h100(nvls=True).switches[0]
    assert switch.multicast and switch.reduce


def test_mi250_every_gcd_has_seven_xgmi_links() -> None:
    topology = resolve_topology("mi250")
    assert len(topology.links) == 56
    for g in topology.gpus:
        assert topology.injection_bandwidth(g) == 350.0 == topology.ejection_bandwidth(g)
    assert topology.links[topology.link_index[(0, 1)]].bandwidth == 200.0
    assert topology.links[topology.link_index[(11, 15)]].bandwidth == 100.0


def test_ring8_is_the_golden_instance() -> None:
    topology = resolve_topology("ring8")
    assert {lk.bandwidth for lk in topology.links} == {50 * 2**30 / 1e9}
    assert {lk.latency for lk in topology.links} == {0.5}
    assert len(topology.links) == 16


# ------------------------------------------------------ REFERENCE.md instances
def test_ndv2x2_is_reference_1a() -> None:
    topology = resolve_topology("ndv2x2")
    inter = [lk for lk in topology.links if topology.machine_of[lk.src] != topology.machine_of[lk.dst]]  # type: ignore[index]
    assert [(lk.src, lk.dst, lk.bandwidth, lk.latency) for lk in inter] == [(0, 9, 12.5, 1.3), (8, 1, 12.5, 1.3)]
    assert topology.switches == () and topology.num_gpus == 16


def test_ndv2x4_is_reference_1b() -> None:
    topology = resolve_topology("ndv2x4")
    assert [s.name for s in topology.switches] == ["ib"]
    ib = [(lk.src, lk.dst) for lk in topology.links if lk.kind == "ib"]
    assert ib == [(x, y) for m in range(4) for x, y in ((8 * m, "ib"), ("ib", 8 * m + 1))]
    assert {(lk.bandwidth, lk.latency) for lk in topology.links if lk.kind == "ib"} == {(12.5, 1.3)}


def test_dgx2x2_is_reference_1c() -> None:
    topology = resolve_topology("dgx2x2")
    ib = [(lk.src, lk.dst) for lk in topology.links if lk.kind == "ib"]
    assert sorted(ib) == sorted([(2 * k + 1, 16 + 2 * k) for k in range(8)] +
                                [(16 + 2 * k + 1, 2 * k) for k in range(8)])
    assert {(lk.bandwidth, lk.latency) for lk in topology.links if lk.kind == "ib"} == {(12.5, 2.6)}
    for g in topology.gpus:
        assert topology.ejection_bandwidth(g) == (137.5 if g % 2 == 0 else 125.0)


def machine_vertices(topology: Topology, m: int) -> set[Vertex]:
    """GPUs of machine m and its own switches (named ``m<m>.``)."""
    return {*topology.machines[m], *(s.name for s in topology.switches if s.name.startswith(f"m{m}."))}


def bandwidth_into(topology: Topology, vertices: set[Vertex]) -> float:
    return sum(lk.bandwidth for lk in topology.links if lk.dst in vertices and lk.src not in vertices)


def allgather_cut_bound(topology: Topology) -> float:
    """Allgather algbw bound (GB/s) over the cuts 'everything but one GPU / GPU pair / machine'.

    For S = V minus a set R: algbw <= N * B_in(R) / |S intersect GPUs| (REFERENCE section 0).
    """
    n = topology.num_gpus
    candidates: list[set[Vertex]] = [{g} for g in topology.gpus]
    candidates += [{g, g + 1} for g in range(0, n - 1, 2)]
    candidates += [machine_vertices(topology, m) for m in range(len(topology.machines))
                   if len(topology.machines) > 1]
    return min(n * bandwidth_into(topology, r) / (n - sum(1 for v in r if topology.is_gpu(v)))
               for r in candidates)


@pytest.mark.parametrize(("name", "bound"), [
    ("dgx1", 171.43), ("ndv2x2", 25.0), ("ndv2x4", 16.67), ("dgx2x2", 129.03),
    ("dgx-a100", 342.86), ("dgx-a100x2", 346.67), ("dgx-a100x4", 266.67), ("dgx-a100x8", 228.57),
    ("dgx-h100", 514.29), ("dgx-h100x2", 533.33), ("dgx-h100x4", 516.13), ("dgx-h100x8", 457.14),
    ("mi250", 342.86), ("mi250x2", 354.13), ("mi250x4", 341.33), ("mi250x8", 292.57), ("gb200-nvl72", 912.68),
])
def test_reference_allgather_bounds_follow_from_the_topologies(name: str, bound: float) -> None:
    assert allgather_cut_bound(resolve_topology(name)) == pytest.approx(bound, abs=0.006)


def test_a100_cluster_routes_follow_the_fabric() -> None:
    default = dgx_a100_cluster(2)  # the DGX SuperPOD leaf-spine: every GPU reaches every GPU through the IB
    assert default.name == "dgx-a100x2"
    same_rail = default.gpu_route(0, 8)
    assert same_rail is not None and default.route_latency(same_rail) == pytest.approx(2.6)
    assert default.route_vertices(same_rail) == (0, "m0.nic0", "su0.leaf0", "m1.nic0", 8)
    across = default.gpu_route(7, 8)  # the step a plain 16-GPU ring takes between the machines
    assert across is not None
    assert default.route_vertices(across) == (7, "m0.nic7", "su0.leaf7", "spine", "su0.leaf0", "m1.nic0", 8)
    assert default.route_latency(across) == pytest.approx(4.2)
    forest = dgx_a100_cluster(2, "forestcoll")
    assert forest.name == "dgx-a100x2-forestcoll"
    same_parity = forest.gpu_route(0, 10)
    assert same_parity is not None
    assert forest.route_vertices(same_parity) == (0, "m0.nic0", "ib0", "m1.nic2", 10)
    assert forest.route_latency(same_parity) == pytest.approx(2.6)
    assert forest.gpu_route(0, 9) is None  # odd NICs are on ib1: relay over the NVSwitch
    single = dgx_a100_cluster(2, "single")
    assert single.gpu_route(0, 9) is not None
    rail = dgx_a100_cluster(2, Fabric.RAIL)
    assert rail.gpu_route(0, 10) is None and rail.gpu_route(3, 11) is not None


def test_dgx2_cluster_shares_each_nic_between_two_gpus() -> None:
    topology = dgx2_cluster(3)
    nic = "m0.nic2"
    assert [(lk.src, lk.dst) for lk in topology.links if nic in (lk.src, lk.dst)] == [
        (5, nic), (nic, 4), (nic, "rail2"), ("rail2", nic)]
    route = topology.gpu_route(5, 16 + 4)
    assert route is not None and topology.route_latency(route) == pytest.approx(2.6)


# ------------------------------------------------------------ generator properties
def assert_connected(topology: Topology) -> None:
    """Independent of check_topology: all GPUs lie in one strongly connected component."""
    graph = topology.to_networkx()
    component = next(c for c in nx.strongly_connected_components(graph) if 0 in c)
    assert set(topology.gpus) <= component


def ring_links(size: int) -> int:
    return 0 if size == 1 else 2 if size == 2 else 2 * size


@settings(max_examples=25)
@given(st.integers(2, 40), st.floats(0.5, 500), st.floats(0, 5))
def test_ring_fully_connected_and_switch(n: int, bandwidth: float, latency: float) -> None:
    r = ring(n, bandwidth, latency)
    assert_connected(r)
    assert len(r.links) == ring_links(n) and r.num_gpus == n
    assert all(r.injection_bandwidth(g) == pytest.approx(bandwidth * min(2, n - 1)) for g in r.gpus)
    fc = fully_connected(n, bandwidth, latency)
    assert len(fc.links) == n * (n - 1)
    assert all(fc.ejection_bandwidth(g) == pytest.approx(bandwidth * (n - 1)) for g in fc.gpus)
    star = switch_star(n, bandwidth, latency)
    assert_connected(fc)
    assert_connected(star)
    assert len(star.links) == 2 * n and len(star.switches) == 1
    route = star.gpu_route(0, n - 1)
    assert route is not None and star.route_latency(route) == pytest.approx(2 * latency)


@settings(max_examples=30)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3).filter(lambda d: math.prod(d) >= 2))
def test_torus_and_mesh_link_counts_and_degrees(dims: list[int]) -> None:
    n = math.prod(dims)
    t = torus(dims, 10.0, 1.0)
    m = mesh(dims, 10.0, 1.0)
    assert_connected(t)
    assert_connected(m)
    assert t.num_gpus == m.num_gpus == n
    assert len(t.links) == sum(n // s * ring_links(s) for s in dims)
    assert len(m.links) == sum(n // s * 2 * (s - 1) for s in dims)
    torus_degree = sum(min(2, s - 1) for s in dims)
    assert all(t.injection_bandwidth(g) == 10.0 * torus_degree for g in t.gpus)
    corner_degree = sum(1 for s in dims if s > 1)
    assert m.injection_bandwidth(0) == 10.0 * corner_degree
    assert {lk.kind for lk in t.links} <= {f"dim{k}" for k in range(len(dims))}


@settings(max_examples=8)
@given(st.integers(1, 7))
def test_hypercube(d: int) -> None:
    h = hypercube(d, 20.0, 0.1)
    assert_connected(h)
    assert h.num_gpus == 2**d and len(h.links) == 2**d * d
    assert all(h.injection_bandwidth(g) == 20.0 * d for g in h.gpus)
    assert h.gpu_neighbors(0) == tuple(1 << k for k in range(d))


@settings(max_examples=15)
@given(st.integers(2, 9))
def test_ndv2_and_dgx2_clusters(k: int) -> None:
    nd = ndv2_cluster(k)
    assert nd.num_gpus == 8 * k and len(nd.machines) == k
    assert len(nd.links) == 32 * k + (2 if k == 2 else 2 * k)
    for g in nd.gpus:
        local = g % 8
        assert nd.injection_bandwidth(g) == 150.0 + (12.5 if local == 0 else 0.0)
        assert nd.ejection_bandwidth(g) == 150.0 + (12.5 if local == 1 else 0.0)
    d2 = dgx2_cluster(k)
    assert_connected(nd)
    assert_connected(d2)
    assert d2.num_gpus == 16 * k
    for g in d2.gpus:
        assert d2.injection_bandwidth(g) == 125.0 + (12.5 if g % 2 else 0.0)
        assert d2.ejection_bandwidth(g) == 125.0 + (0.0 if g % 2 else 12.5)
    if k > 2:
        assert sum(1 for s in d2.switches if s.kind == "nic") == 8 * k
        assert sorted(s.name for s in d2.switches if s.kind == "ib") == sorted(f"rail{b}" for b in range(8))


@pytest.mark.slow
@settings(max_examples=20)
@given(st.integers(2, 12), st.sampled_from(list(Fabric)), st.booleans())
def test_a100_and_h100_clusters(k: int, fabric: Fabric, h100: bool) -> None:
    topology = dgx_h100_cluster(k, fabric) if h100 else dgx_a100_cluster(k, fabric)
    assert_connected(topology)
    nvswitch, nic = (450.0, 50.0) if h100 else (300.0, 25.0)
    unit = 32 if h100 else 20  # machines per DGX SuperPOD scalable unit
    leaves = 8 * -(-k // unit)
    ib_switches = {Fabric.FORESTCOLL: 2, Fabric.SINGLE: 1, Fabric.RAIL: 8, Fabric.LEAF_SPINE: leaves + 1}[fabric]
    assert topology.num_gpus == 8 * k
    assert len(topology.switches) == 9 * k + ib_switches
    assert len(topology.links) == 48 * k + (2 * leaves if fabric is Fabric.LEAF_SPINE else 0)
    assert [(d.kind.value, d.size) for d in topology.dimensions] == [("switch", 8), ("switch", k)]
    for g in topology.gpus:
        kinds = {topology.links[i].kind: topology.links[i].bandwidth for i in topology.links_from(g)}
        assert kinds == {"nvlink": nvswitch, "nic": nic}
        assert topology.ejection_bandwidth(g) == nvswitch + nic
        assert topology.gpu_route(g, (g + 8) % (8 * k)) is not None  # the same rail, one machine on
    for s in topology.switches:
        if s.kind != "ib":
            continue
        if fabric is not Fabric.LEAF_SPINE:
            assert len(topology.links_to(s.name)) == 8 * k // ib_switches
        elif s.name == "spine":
            assert len(topology.links_to(s.name)) == leaves
        else:  # a leaf: its unit's NICs of one rail, and the spine; its uplink carries all of its downlinks
            down = [topology.links[i] for i in topology.links_to(s.name) if topology.links[i].src != "spine"]
            up = topology.links[topology.link_index[(s.name, "spine")]]
            assert up.bandwidth == pytest.approx(sum(link.bandwidth for link in down))
    if fabric is not Fabric.FORESTCOLL and fabric is not Fabric.RAIL:
        assert all(topology.gpu_route(a, b) is not None for a in range(8) for b in range(8, 16))


@settings(max_examples=10)
@given(st.integers(2, 8))
def test_mi250_cluster(k: int) -> None:
    topology = mi250_cluster(k)
    assert_connected(topology)
    assert topology.num_gpus == 16 * k and len(topology.links) == 56 * k + 32 * k
    assert all(topology.injection_bandwidth(g) == 366.0 for g in topology.gpus)
    route = topology.gpu_route(0, 16 * k - 1)
    assert route is not None and topology.route_latency(route) == pytest.approx(2.6)


@pytest.mark.parametrize(("call", "words"), [
    (lambda: ring(1), "ring: gpus must be >= 2 (got 1)"),
    (lambda: ring(4, -1.0), "ring: bandwidth must be > 0 (got -1)"),
    (lambda: ring(4, 1.0, -2.0), "ring: latency must be >= 0 (got -2)"),
    (lambda: ring(4, float("nan")), "bandwidth must be a finite number"),
    (lambda: fully_connected(3000), "limit is"),
    (lambda: torus([]), "torus: dims must be a non-empty list"),
    (lambda: torus([1, 1]), "at least 2 GPUs"),
    (lambda: mesh([4, 0]), "mesh: dims[1] must be >= 1 (got 0)"),
    (lambda: hypercube(0), "hypercube: dimension must be >= 1 (got 0)"),
    (lambda: hypercube(True), "must be an integer"),
    (lambda: dgx_a100_cluster(2, "fat-tree"), "unknown fabric 'fat-tree' (choose one of: leaf-spine, forestcoll"),
    (lambda: mi250_cluster(1), "use 'mi250' for one machine"),
])
def test_generator_arguments_are_checked(call: object, words: str) -> None:
    with pytest.raises(TopologyError) as info:
        call()  # type: ignore[operator]
    assert words in str(info.value)


# -------------------------------------------------------------------- describe
def test_describe_groups_gpus_by_bandwidth() -> None:
    description = describe_topology(resolve_topology("ndv2x2"))
    groups = {format_gpu_ranges(g.gpus): (g.out_GBps, g.in_GBps) for g in description.gpu_bandwidth}
    assert groups == {"0,8": (162.5, 150.0), "1,9": (150.0, 162.5), "2-7,10-15": (150.0, 150.0)}
    data = description.to_json()
    assert data["link_kinds"]["ib"] == {"count": 2, "min_bandwidth_GBps": 12.5, "max_bandwidth_GBps": 12.5,
                                        "min_latency_us": 1.3, "max_latency_us": 1.3}
    assert data["switches"] == 0 and len(data["in_GBps"]) == 16


def test_format_gpu_ranges() -> None:
    assert format_gpu_ranges([]) == ""
    assert format_gpu_ranges([3]) == "3"
    assert format_gpu_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
