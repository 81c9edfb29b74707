"""The Topology model: validation of hand-built topologies and the queries other stages rely on."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings

from taccl_py.errors import TopologyError
from taccl_py.library import dgx1, dgx2, dgx2_cluster, ndv2_cluster
from taccl_py.testing import topologies
from taccl_py.topology import Link, Switch, Topology, check_topology


def pair(u: int | str, v: int | str, bandwidth: float = 10.0, latency: float = 1.0) -> tuple[Link, Link]:
    return Link(u, v, bandwidth, latency), Link(v, u, bandwidth, latency)


def line(n: int) -> tuple[Link, ...]:
    links: list[Link] = []
    for g in range(n - 1):
        links += pair(g, g + 1)
    return tuple(links)


def star(n: int) -> Topology:
    links: list[Link] = []
    for g in range(n):
        links += pair(g, "sw", 20.0, 0.5)
    return Topology("star", n, tuple(links), switches=(Switch("sw"),))


# ------------------------------------------------------------------ validation
def test_valid_topology_is_returned_unchanged() -> None:
    topology = Topology("line3", 3, line(3))
    assert check_topology(topology) is topology


@pytest.mark.parametrize(("topology", "field", "words"), [
    (Topology("t", 2, (*line(2), Link(0, "ghost", 1.0, 0.0))), "links[2].dst", "unknown vertex 'ghost'"),
    (Topology("t", 2, (*line(2), Link(5, 0, 1.0, 0.0))), "links[2].src", "GPU ids are 0..1"),
    (Topology("t", 2, (*line(2), Link(-1, 0, 1.0, 0.0))), "links[2].src", "GPU ids are 0..1"),
    (Topology("t", 2, (*line(2), Link(0, 1, 3.0, 0.0))), "links[2]", "duplicates links[0]"),
    (Topology("t", 2, (Link(0, 1, 0.0, 0.0), Link(1, 0, 1.0, 0.0))), "links[0].bandwidth", "must be > 0"),
    (Topology("t", 2, (Link(0, 1, -5.0, 0.0), Link(1, 0, 1.0, 0.0))), "links[0].bandwidth", "(got -5)"),
    (Topology("t", 2, (Link(0, 1, 1.0, -0.1), Link(1, 0, 1.0, 0.0))), "links[0].latency", "must be >= 0"),
    (Topology("t", 2, (Link(0, 0, 1.0, 0.0), *line(2))), "links[0]", "self-loop"),
    (Topology("t", 3, line(2)), "links", "GPU 0 cannot reach GPU 2"),
    (Topology("t", 2, (Link(0, 1, 1.0, 0.0),)), "links", "GPU 1 cannot reach GPU 0"),
    (Topology("t", 0, ()), "gpus", "must be >= 1"),
    (Topology("t", 2, line(2), machines=((0,), (0, 1))), "machines[1][0]", "already in machines[0]"),
    (Topology("t", 2, line(2), machines=((0,),)), "machines", "do not include GPU 1"),
    (Topology("t", 2, line(2), machines=((0, 2),)), "machines[0][1]", "GPU id in 0..1"),
    (Topology("t", 2, line(2), switches=(Switch("a"), Switch("a"))), "switches[1].name", "duplicates"),
])
def test_each_inconsistency_is_named(topology: Topology, field: str, words: str) -> None:
    with pytest.raises(TopologyError) as info:
        check_topology(topology, where="mytopo.json")
    message = str(info.value)
    assert message.startswith(f"mytopo.json: {field} "), message
    assert words in message
    assert info.value.field == field and info.value.where == "mytopo.json"
    assert "\n" not in message


def test_a_gpu_reached_only_through_a_switch_is_connected() -> None:
    topology = star(4)
    assert check_topology(topology) is topology
    assert all(topology.gpu_route(s, d) is not None for s in topology.gpus for d in topology.gpus if s != d)


def test_a_dangling_switch_is_allowed_but_gpus_must_connect() -> None:
    topology = Topology("t", 2, line(2), switches=(Switch("unused"),))
    assert check_topology(topology) is topology


# --------------------------------------------------------------------- queries
def test_vertices_and_ids_put_gpus_first() -> None:
    topology = star(3)
    assert topology.vertices == (0, 1, 2, "sw")
    assert topology.vertex_id["sw"] == 3
    assert topology.is_gpu(2) and not topology.is_gpu("sw") and not topology.is_gpu(3)
    assert not topology.is_gpu(True)


def test_gpu_route_goes_through_switches_only() -> None:
    topology = star(3)
    route = topology.gpu_route(0, 2)
    assert route is not None
    assert topology.route_vertices(route) == (0, "sw", 2)
    assert topology.route_latency(route) == pytest.approx(1.0)
    assert topology.route_bandwidth(route) == 20.0
    # on a line, 0 -> 2 would relay through GPU 1: no single-transfer route
    assert Topology("line3", 3, line(3)).gpu_route(0, 2) is None
    assert Topology("line3", 3, line(3)).shortest_path(0, 2) is not None



@settings(max_examples=40, deadline=None)
@given(topologies(max_gpus=7))
def test_relay_routes_are_the_shortest_paths_found_once_per_source(topology: Topology) -> None:
    """relay_route answers from one search per source what shortest_path searches for per pair."""
    for src in topology.gpus:
        for dst in topology.gpus:
            if src != dst:
                assert topology.relay_route(src, dst) == topology.shortest_path(src, dst, through_gpus=True)
    line3 = Topology("line3", 3, line(3))
    relayed = line3.relay_route(0, 2)
    assert relayed is not None and line3.route_vertices(relayed) == (0, 1, 2)
    assert ndv2_cluster(2).relay_route(0, 15) == ndv2_cluster(2).shortest_path(0, 15)

def test_route_from_vertices_names_the_missing_link() -> None:
    topology = star(3)
    assert topology.route_from_vertices([0, "sw", 1]) == (topology.link_index[(0, "sw")],
                                                           topology.link_index[("sw", 1)])
    with pytest.raises(TopologyError, match="no link 0 -> 1"):
        topology.route_from_vertices([0, 1])


def test_injection_and_ejection_bandwidth_of_dgx1() -> None:
    topology = dgx1()
    assert all(topology.injection_bandwidth(g) == 150.0 for g in topology.gpus)
    assert all(topology.ejection_bandwidth(g) == 150.0 for g in topology.gpus)
    assert topology.gpu_neighbors(0) == (1, 2, 3, 4)


def test_machines_and_machine_of() -> None:
    topology = ndv2_cluster(2)
    assert topology.num_machines == 2
    assert topology.machine_of[7] == 0 and topology.machine_of[8] == 1
    single = Topology("line2", 2, line(2))
    assert single.num_machines == 2 and single.machine_of == {0: 0, 1: 1}


def test_reversed_turns_every_link_around() -> None:
    topology = dgx2_cluster(2)
    back = topology.reversed()
    assert len(back.links) == len(topology.links)
    for link, rev in zip(topology.links, back.links, strict=True):
        assert (rev.src, rev.dst, rev.bandwidth, rev.latency) == (link.dst, link.src, link.bandwidth, link.latency)
    # ingress and egress swap: odd GPUs send 137.5 GB/s, so they receive it in the reverse
    assert back.ejection_bandwidth(1) == topology.injection_bandwidth(1) == 137.5


def test_to_networkx_keeps_link_attributes() -> None:
    graph = dgx2().to_networkx()
    assert graph.number_of_nodes() == 17 and graph.number_of_edges() == 32
    assert graph.edges[0, "nvswitch"]["bandwidth"] == 125.0
    assert graph.nodes[0]["gpu"] and not graph.nodes["nvswitch"]["gpu"]


def test_summary_counts_links_by_kind() -> None:
    summary = ndv2_cluster(2).summary()
    assert summary["gpus"] == 16 and summary["links"] == 66
    assert summary["link_kinds"]["ib"]["count"] == 2
    assert summary["link_kinds"]["nvlink"]["min_bandwidth"] == 25.0


@settings(max_examples=40)
@given(topologies(max_gpus=6, max_switches=2))
def test_every_random_topology_is_valid_and_strongly_connected(topology: Topology) -> None:
    assert check_topology(topology) is topology
    graph = topology.to_networkx()
    reach = nx.descendants(graph, 0) | {0}
    assert set(topology.gpus) <= reach


@settings(max_examples=40, deadline=None)
@given(topology=topologies(max_gpus=8, max_switches=3))
def test_routes_from_a_gpu_are_its_routes_one_by_one(topology: Topology) -> None:
    """The routes from one GPU to every other, built sharing their beginnings, are those found for each pair
    alone, relaying through GPUs or not (ties included)."""
    for through_gpus in (False, True):
        for s in topology.gpus:
            routes = topology.gpu_routes_from(s, through_gpus=through_gpus)
            for d in topology.gpus:
                alone = topology.shortest_path(s, d, through_gpus=through_gpus) if d != s else None
                assert routes.get(d) == alone


@settings(max_examples=40, deadline=None)
@given(topology=topologies(max_gpus=8, max_switches=3))
def test_routes_are_shortest_by_latency_then_hops(topology: Topology) -> None:
    """Every route from a GPU has the least latency, then the fewest links, of any path (through switches only,
    or relaying through GPUs too): against a plain relaxation of every link until nothing improves."""
    ids = topology.vertex_id
    for through_gpus in (False, True):
        for s in topology.gpus:
            reach: dict[int, tuple[float, int]] = {ids[s]: (0.0, 0)}
            changed = True
            while changed:
                changed = False
                for link in topology.links:
                    u, v = ids[link.src], ids[link.dst]
                    if u not in reach or (u != ids[s] and u < topology.num_gpus and not through_gpus):
                        continue
                    found = (reach[u][0] + link.latency, reach[u][1] + 1)
                    if v not in reach or found < reach[v]:
                        reach[v] = found
                        changed = True
            routes = topology.gpu_routes_from(s, through_gpus=through_gpus)
            assert set(routes) == {g for g in topology.gpus if g != s and g in reach}
            for g, route in routes.items():
                assert (sum(topology.links[i].latency for i in route), len(route)) == reach[g]  # summed as found


def test_a_route_found_first_gives_way_to_one_as_fast_with_fewer_links() -> None:
    """GPU 0 reaches GPU 1 in 2 us by three links (found first: its switches are nearer) and by two: the route
    takes the two."""
    links = (Link(0, "a", 100.0, 0.5), Link("a", "b", 100.0, 0.5), Link("b", 1, 100.0, 1.0),
             Link(0, "c", 100.0, 1.5), Link("c", 1, 100.0, 0.5), Link(1, "a", 100.0, 0.5), Link("a", 0, 100.0, 0.5))
    topology = Topology("tie", 2, links, (Switch("a"), Switch("b"), Switch("c")))
    route = topology.gpu_route(0, 1)
    assert route is not None and topology.route_vertices(route) == (0, "c", 1)
