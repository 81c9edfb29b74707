"""The topology JSON format: canonical round trips and one clear error per kind of mistake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from taccl_py.errors import TopologyError
from taccl_py.library import SHIPPED_NAMES, topology_by_name
from taccl_py.testing import topologies
from taccl_py.topology import Link, Switch, Topology
from taccl_py.topology_io import (
    atomic_write_text,
    dumps_topology,
    load_topology,
    save_topology,
    topology_from_dict,
    topology_to_dict,
)


def shipped(name: str) -> Topology:
    topology = topology_by_name(name)
    assert topology is not None
    return topology


@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_every_shipped_topology_round_trips(name: str, tmp_path: Path) -> None:
    topology = shipped(name)
    path = tmp_path / f"{name}.json"
    save_topology(topology, path)
    text = path.read_text(encoding="utf-8")
    again = load_topology(path)
    assert again == topology
    save_topology(again, path)
    assert path.read_text(encoding="utf-8") == text  # the file text is reproduced byte for byte
    assert json.loads(text)["gpus"] == topology.num_gpus


@settings(max_examples=40)
@given(topologies(max_gpus=6, max_switches=2))
def test_random_topologies_round_trip(topology: Topology) -> None:
    assert topology_from_dict(json.loads(dumps_topology(topology))) == topology


def test_bidirectional_pairs_are_merged_and_expanded() -> None:
    data = topology_to_dict(shipped("dgx-a100"))
    assert all(entry.get("bidirectional") for entry in data["links"])
    assert len(data["links"]) == 8
    assert data["switches"] == [{"name": "nvswitch", "kind": "nvswitch"}]
    one_way = topology_to_dict(shipped("ndv2x2"))["links"][-2:]
    assert one_way == [{"src": 0, "dst": 9, "bandwidth": 12.5, "latency": 1.3, "kind": "ib"},
                       {"src": 8, "dst": 1, "bandwidth": 12.5, "latency": 1.3, "kind": "ib"}]


def test_switch_flags_and_provenance_survive() -> None:
    links = (Link(0, "sw", 10.0, 0.5, "nvlink", {"fit": "nccl-tests", "r2": 0.99}),
             Link("sw", 0, 10.0, 0.5), Link(1, "sw", 10.0, 0.5), Link("sw", 1, 10.0, 0.5))
    topology = Topology("flags", 2, links, switches=(Switch("sw", "nvswitch", multicast=True, reduce=True),),
                        source="test")
    again = topology_from_dict(json.loads(dumps_topology(topology)))
    assert again == topology
    assert again.switches[0].multicast and again.switches[0].reduce
    assert again.links[0].provenance == {"fit": "nccl-tests", "r2": 0.99}


def test_defaults_for_optional_fields(tmp_path: Path) -> None:
    path = tmp_path / "minimal.json"
    path.write_text('{"gpus": 2, "links": [{"src": 0, "dst": 1, "bandwidth": 5, "bidirectional": true}]}')
    topology = load_topology(path)
    assert topology.name == "minimal" and topology.source == "" and topology.machines == ()
    assert topology.links[0].latency == 0.0 and topology.links[0].kind == "nvlink"


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    atomic_write_text(target, "one\n")
    atomic_write_text(target, "two\n")
    assert target.read_text() == "two\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def _base() -> dict[str, Any]:
    return {"name": "bad", "gpus": 2, "switches": [{"name": "sw", "kind": "nvswitch"}],
            "links": [{"src": 0, "dst": "sw", "bandwidth": 10, "latency": 0.5, "bidirectional": True},
                      {"src": 1, "dst": "sw", "bandwidth": 10, "latency": 0.5, "bidirectional": True}]}


def _with(path: str, value: Any) -> dict[str, Any]:
    """``_base()`` with one field changed (``path`` like ``links.1.bandwidth``; value ``...`` deletes)."""
    data = _base()
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value is ...:
        del node[key]
    elif isinstance(node, list) and key == len(node):
        node.append(value)
    else:
        node[key] = value
    return data


BAD_FILES: list[tuple[str, dict[str, Any] | str, str, str]] = [
    # (case, content, field the message names, words in the message)
    ("unknown vertex", _with("links.1.dst", "nvs9"), "links[1].dst", "unknown vertex 'nvs9'"),
    ("GPU id too large", _with("links.1.src", 2), "links[1].src", "is GPU 2 but GPU ids are 0..1"),
    ("negative GPU id", _with("links.1.src", -1), "links[1].src", "GPU ids are 0..1"),
    ("duplicate link", _with("links.2", {"src": "sw", "dst": 1, "bandwidth": 3}), "links[2]",
     "duplicates links[1] ('sw' -> 1)"),
    ("zero bandwidth", _with("links.1.bandwidth", 0), "links[1].bandwidth", "must be > 0 (got 0)"),
    ("negative bandwidth", _with("links.1.bandwidth", -5), "links[1].bandwidth", "must be > 0 (got -5)"),
    ("negative latency", _with("links.0.latency", -0.5), "links[0].latency", "must be >= 0 (got -0.5)"),
    ("unreachable GPU", _with("gpus", 3), "links", "GPU 0 cannot reach GPU 2"),
    ("one-way GPU", _with("links.1.bidirectional", False), "links", "cannot reach GPU 1"),
    ("self loop", _with("links.1.dst", 1), "links[1]", "self-loop"),
    ("bandwidth a string", _with("links.0.bandwidth", "fast"), "links[0].bandwidth",
     "must be a number (got a string 'fast')"),
    ("latency a boolean", _with("links.0.latency", True), "links[0].latency", "must be a number"),
    ("gpus a string", _with("gpus", "8"), "gpus", "must be an integer (got a string '8')"),
    ("gpus zero", _with("gpus", 0), "gpus", "must be >= 1 (got 0)"),
    ("links not a list", _with("links", {"src": 0}), "links", "must be a list (got an object)"),
    ("link not an object", _with("links.0", [0, "sw"]), "links[0]", "must be an object (got a list)"),
    ("vertex a float", _with("links.0.src", 0.5), "links[0].src", "must be a GPU id or a switch name"),
    ("kind a number", _with("links.0.kind", 3), "links[0].kind", "must be a string"),
    ("bidirectional a string", _with("links.0.bidirectional", "yes"), "links[0].bidirectional",
     "must be true or false"),
    ("switch without name", _with("switches.0.name", ...), "switches[0].name", "must be a non-empty string"),
    ("switch multicast a string", _with("switches.0.multicast", "no"), "switches[0].multicast",
     "must be true or false"),
    ("switches not a list", _with("switches", "sw"), "switches", "must be a list"),
    ("missing gpus", _with("gpus", ...), "gpus", "is missing"),
    ("missing links", _with("links", ...), "links", "is missing"),
    ("missing bandwidth", _with("links.0.bandwidth", ...), "links[0].bandwidth", "is missing"),
    ("missing src", _with("links.1.src", ...), "links[1].src", "is missing"),
    ("unknown link field", _with("links.0.speed", 3), "links[0]", "unknown field 'speed'"),
    ("machines overlap", _with("machines", [[0, 1], [1]]), "machines[1][0]", "already in machines[0]"),
    ("machines incomplete", _with("machines", [[0]]), "machines", "do not include GPU 1"),
    ("machines not lists", _with("machines", [0, 1]), "machines", "must be a list of lists"),
    ("name a number", _with("name", 7), "name", "must be a string"),
    ("malformed JSON", '{"gpus": 2, "links": [', "", "not valid JSON"),
    ("top level a list", "[1, 2]", "", "top level must be a JSON object (got a list)"),
    ("unknown top-level field", _with("nodes", 3), "", "unknown field 'nodes'"),
]


@pytest.mark.parametrize(("case", "content", "field", "words"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_each_error_names_file_and_field(case: str, content: dict[str, Any] | str, field: str, words: str,
                                         tmp_path: Path) -> None:
    path = tmp_path / "mytopo.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    message = str(info.value)
    prefix = f"{path}: {field} " if field else f"{path}: "
    assert message.startswith(prefix), message
    assert words in message, message
    assert "\n" not in message
    assert info.value.exit_status == 2


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="no such file"):
        load_topology(tmp_path / "nope.json")


def test_not_utf8_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology(path)
