"""Chakra execution traces: the schema is Chakra's, files decode with it, and the decoded graph is exactly
the schedule's transfers and dependencies (or the MSCCL program's transmissions and waits).

The dependency check is independent of the exporter: the expected happens-before edges are derived here
from the schedule's rules (every earlier writer and reader of a chunk, every earlier message on a
connection), the decoded edges are the traces' data and control dependencies plus send -> receive of each
tag, and the two transitive closures over the transfers' events must be equal.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taccl_py.baselines import applicable_baselines, baseline
from taccl_py.baselines.hierarchical import hierarchical_schedule
from taccl_py.chakra import (
    attr_value,
    chakra_classes,
    compile_proto,
    decode_trace,
    program_traces,
    schedule_traces,
    write_traces,
)
from taccl_py.chakra.schema import SchemaError
from taccl_py.chakra.trace import read_varint, write_varint
from taccl_py.cli.main import main
from taccl_py.collectives import CollectiveKind
from taccl_py.errors import InputError
from taccl_py.library import AstraDimension, AstraKind, astra_topology, resolve_topology
from taccl_py.msccl import lower_schedule
from taccl_py.msccl.machine import build_machine
from taccl_py.schedule import Op, Schedule, Transfer, save_schedule
from taccl_py.testing import spanning_tree_allgathers, spanning_tree_reductions, topologies
from taccl_py.topology import Topology

K = CollectiveKind
SIZE = 1 << 20


# --------------------------------------------------------------------- schema
CHAKRA_NODE_FIELDS = {  # mlcommons/chakra schema/protobuf/et_def.proto: name -> (number, type, repeated)
    "id": (1, "uint64", False), "name": (2, "string", False), "type": (3, "enum", False),
    "ctrl_deps": (4, "uint64", True), "data_deps": (5, "uint64", True), "start_time_micros": (6, "uint64", False),
    "duration_micros": (7, "uint64", False), "inputs": (8, "message", False), "outputs": (9, "message", False),
    "attr": (10, "message", True),
}
CHAKRA_ATTR_FIELDS = {"name": 1, "doc_string": 2, "double_val": 3, "double_list": 4, "float_val": 5,
                      "int32_val": 7, "int64_val": 9, "int64_list": 10, "uint32_val": 11, "uint64_val": 13,
                      "sint64_val": 17, "fixed64_val": 21, "bool_val": 27, "bool_list": 28, "string_val": 29,
                      "string_list": 30, "bytes_val": 31, "bytes_list": 32}
CHAKRA_NODE_TYPES = {"INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3,
                     "COMP_NODE": 4, "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7,
                     "STORAGE_NODE": 8, "BATCH_NODE": 9, "CHECKPOINT_NODE": 10}
_TYPE_NAMES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 8: "bool", 9: "string",
               11: "message", 12: "bytes", 13: "uint32", 14: "enum"}


def test_the_schema_has_chakras_field_numbers() -> None:
    classes = chakra_classes()
    node = classes["Node"].DESCRIPTOR
    for name, (number, kind, repeated) in CHAKRA_NODE_FIELDS.items():
        field = node.fields_by_name[name]
        assert (field.number, _TYPE_NAMES[field.type], _repeated(field)) == (number, kind, repeated), name
    attribute = classes["AttributeProto"].DESCRIPTOR
    for name, number in CHAKRA_ATTR_FIELDS.items():
        assert attribute.fields_by_name[name].number == number, name
    assert {f.name for f in attribute.oneofs_by_name["value"].fields} == {
        f.name for f in attribute.fields if f.number >= 3}
    assert classes["NodeType"] == CHAKRA_NODE_TYPES
    assert classes["CollectiveCommType"]["REDUCE_SCATTER"] == 7 and classes["CollectiveCommType"]["BARRIER"] == 9
    meta = classes["GlobalMetadata"].DESCRIPTOR
    assert (meta.fields_by_name["version"].number, meta.fields_by_name["attr"].number) == (1, 2)
    assert node.file.package == "ChakraProtoMsg"


def _repeated(field: Any) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf >= 6; older versions only have label
    return bool(flag) if flag is not None else field.label == field.LABEL_REPEATED


def _key(tag: int, wire: int) -> bytes:
    return write_varint(tag << 3 | wire)


def test_wire_format_by_hand() -> None:
    """A Node encoded field by field (protobuf wire format) decodes to what was written, and back."""
    name = b"send t0"
    attr_name = b"comm_src"
    attribute = _key(1, 2) + write_varint(len(attr_name)) + attr_name + _key(7, 0) + write_varint(3)
    data = (_key(1, 0) + write_varint(300) + _key(2, 2) + write_varint(len(name)) + name + _key(3, 0)
            + write_varint(5) + _key(5, 2) + write_varint(2) + bytes([1, 2]) + _key(10, 2)
            + write_varint(len(attribute)) + attribute)
    node = chakra_classes()["Node"].FromString(data)
    assert (node.id, node.name, node.type, list(node.data_deps)) == (300, "send t0", 5, [1, 2])
    assert attr_value(node, "comm_src") == 3
    assert node.SerializeToString() == data


@given(st.integers(0, 2**63))
def test_varints_round_trip(value: int) -> None:
    encoded = write_varint(value)
    assert read_varint(encoded + b"\x00", 0) == (value, len(encoded))


@pytest.mark.parametrize(("text", "words"), [
    ('syntax = "proto2";', "only proto3"),
    ('syntax = "proto3"; message A { map<string, int32> m = 1; }', "line 1: 'map' is not supported"),
    ('syntax = "proto3";\nmessage A {\n  Missing x = 1;\n}', "unknown type 'Missing'"),
    ('syntax = "proto3"; message A { int32 x = 1 [packed=false]; }', "field options are not supported"),
    ('syntax = "proto3"; service S {}', "'service' is not supported at the top level"),
    ('syntax = "proto3"; message A { int32 x = ; }', "expected a number"),
])
def test_the_schema_reader_refuses_what_it_does_not_understand(text: str, words: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(words)):
        compile_proto(text)


def test_optional_and_nested_types() -> None:
    fdp = compile_proto('syntax = "proto3"; package p; message A { message B { int32 v = 1; } '
                        'enum E { X = 0; Y = 1; } optional B b = 1; E e = 2; repeated A kids = 3; }')
    a = fdp.message_type[0]
    assert [f.type_name for f in a.field] == [".p.A.B", ".p.A.E", ".p.A"]
    assert a.field[0].proto3_optional and a.oneof_decl[0].name == "_b"


# ---------------------------------------------------------- schedule -> traces
def _decode_dir(directory: Path, prefix: str, ranks: int) -> list[list[Any]]:
    out = []
    for r in range(ranks):
        meta, nodes = decode_trace(directory / f"{prefix}.{r}.et")
        assert meta.version == "0.0.4" and attr_value(meta, "rank") == r and attr_value(meta, "ranks") == ranks
        assert [n.id for n in nodes] == list(range(len(nodes)))
        out.append(nodes)
    return out


def _closure(succ: dict[Any, set[Any]], nodes: list[Any]) -> dict[Any, int]:
    """Reachability bitsets (over ``nodes``' positions) of an acyclic graph."""
    index = {v: k for k, v in enumerate(nodes)}
    order: list[Any] = []
    seen: set[Any] = set()
    for start in nodes:
        if start in seen:
            continue
        stack = [(start, iter(sorted(succ.get(start, ()), key=str)))]
        seen.add(start)
        while stack:
            v, children = stack[-1]
            child = next(children, None)
            if child is None:
                order.append(v)
                stack.pop()
            elif child not in seen:
                seen.add(child)
                stack.append((child, iter(sorted(succ.get(child, ()), key=str))))
    reach: dict[Any, int] = {}
    for v in order:  # children first
        bits = 0
        for w in succ.get(v, ()):
            bits |= reach[w] | (1 << index[w])
        reach[v] = bits
    return reach


def _expected_edges(schedule: Schedule) -> dict[Any, set[Any]]:
    """The schedule's rules, every earlier transfer checked (no shortcut)."""
    succ: dict[Any, set[Any]] = {}
    ts = schedule.transfers

    def edge(a: Any, b: Any) -> None:
        succ.setdefault(a, set()).add(b)

    for i, t in enumerate(ts):
        edge(("send", i), ("recv", i))
        edge(("recv", i), ("commit", i))
        for j in range(i):
            u = ts[j]
            overlap = bool(set(u.chunks) & set(t.chunks))
            if u.dst == t.src and overlap:
                edge(("commit", j), ("send", i))  # read after write at the sender
            if (u.src, u.dst, u.channel) == (t.src, t.dst, t.channel):
                edge(("send", j), ("send", i))  # a connection is a FIFO
                edge(("recv", j), ("recv", i))
            if u.dst == t.dst and overlap:
                edge(("commit", j), ("recv", i))  # write after write
            if u.src == t.dst and overlap:
                edge(("send", j), ("recv", i))  # write after read
        for j in t.after:
            edge(("commit", j) if ts[j].dst == t.src else ("send", j), ("send", i))
    return succ


def _decoded_edges(per_rank: list[list[Any]]) -> tuple[dict[Any, set[Any]], dict[Any, Any]]:
    """Edges over (rank, node id) plus send -> receive of every tag, and the event each node stands for
    (a copy's receive is also its commit)."""
    succ: dict[Any, set[Any]] = {}
    event: dict[Any, Any] = {}
    sends: dict[int, Any] = {}
    recvs: dict[int, Any] = {}
    for rank, nodes in enumerate(per_rank):
        for node in nodes:
            me = (rank, node.id)
            for dep in (*node.data_deps, *node.ctrl_deps):
                succ.setdefault((rank, dep), set()).add(me)
            transfer = attr_value(node, "taccl_transfer")
            if node.type == 5:
                event[me] = ("send", transfer)
                sends[attr_value(node, "comm_tag")] = me
            elif node.type == 6:
                event[me] = ("recv", transfer)
                recvs[attr_value(node, "comm_tag")] = me
            elif transfer is not None:
                event[me] = ("commit", transfer)
    assert sorted(sends) == sorted(recvs)
    for tag, node in sends.items():
        succ.setdefault(node, set()).add(recvs[tag])
    return succ, event


def _merged(schedule: Schedule, e: Any) -> Any:
    """A copy commits when it is received: its commit event is its receive event."""
    kind, i = e
    return ("recv", i) if kind == "commit" and schedule.transfers[i].op is Op.COPY else e


def check_traces(schedule: Schedule, directory: Path, size: float) -> None:
    """The decoded traces hold exactly the schedule's transfers, sizes and dependencies."""
    n = schedule.collective.num_ranks
    traces = schedule_traces(schedule, size)
    write_traces(traces, directory, "x")
    per_rank = _decode_dir(directory, "x", n)
    chunk_bytes = schedule.collective.chunk_bytes(size)
    seen: set[tuple[str, int]] = set()
    reduces = 0
    for rank, nodes in enumerate(per_rank):
        for node in nodes:
            transfer = attr_value(node, "taccl_transfer")
            if node.type in (5, 6):
                kind = "send" if node.type == 5 else "recv"
                assert (kind, transfer) not in seen
                seen.add((kind, transfer))
                t = schedule.transfers[transfer]
                assert rank == (t.src if kind == "send" else t.dst)
                assert (attr_value(node, "comm_src"), attr_value(node, "comm_dst")) == (t.src, t.dst)
                assert attr_value(node, "comm_tag") == transfer
                assert attr_value(node, "taccl_chunks") == list(t.chunks)
                assert attr_value(node, "comm_size") == math.ceil(len(t.chunks) * chunk_bytes - 1e-9)  # rounded up
                assert attr_value(node, "is_cpu_op") is False
            elif transfer is not None:
                assert node.type == 4 and schedule.transfers[transfer].op is Op.REDUCE
                assert rank == schedule.transfers[transfer].dst
                reduces += 1
    assert len(seen) == 2 * len(schedule.transfers)
    assert reduces == sum(1 for t in schedule.transfers if t.op is Op.REDUCE)
    # the happens-before relation over the transfers' events, expected vs decoded
    expected: dict[Any, set[Any]] = {}
    for a, targets in _expected_edges(schedule).items():
        for b in targets:
            if _merged(schedule, a) != _merged(schedule, b):
                expected.setdefault(_merged(schedule, a), set()).add(_merged(schedule, b))
    events = sorted({_merged(schedule, (k, i)) for i in range(len(schedule.transfers))
                     for k in ("send", "recv", "commit")}, key=str)
    want = _closure(expected, events)
    decoded, event = _decoded_edges(per_rank)
    assert sorted(event.values(), key=str) == events
    nodes = sorted(set(decoded) | {v for vs in decoded.values() for v in vs} | set(event), key=str)
    got = _closure(decoded, nodes)
    node_of = {e: v for v, e in event.items()}
    for e in events:
        reached = {event[v] for k, v in enumerate(nodes) if v in event and got.get(node_of[e], 0) >> k & 1}
        assert reached == {events[k] for k in range(len(events)) if want.get(e, 0) >> k & 1}, e


def _baseline_schedules(topology: Topology, kind: CollectiveKind) -> list[Schedule]:
    return [baseline(topology, kind, name, size_bytes=SIZE) for name in applicable_baselines(topology, kind)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", [K.ALLGATHER, K.REDUCESCATTER, K.ALLREDUCE, K.ALLTOALL, K.BROADCAST])
def test_baselines_export_exactly(kind: CollectiveKind, tmp_path: Path) -> None:
    topology = resolve_topology("ring8")
    for k, schedule in enumerate(_baseline_schedules(topology, kind)):
        check_traces(schedule, tmp_path / f"{k}", SIZE)


def test_hierarchical_export_exactly(tmp_path: Path) -> None:
    topology = astra_topology([AstraDimension(AstraKind.RING, 3, 100.0, 500.0),
                               AstraDimension(AstraKind.SWITCH, 2, 50.0, 1000.0)])
    for k, kind in enumerate((K.ALLREDUCE, K.ALLGATHER)):
        schedule = hierarchical_schedule(topology, kind, algorithms=["biring", "direct"], splits=2, balanced=True)
        check_traces(schedule, tmp_path / str(k), 3 << 20)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), reduce=st.booleans())
def test_random_schedules_export_exactly(data: st.DataObject, reduce: bool, tmp_path_factory: Any) -> None:
    topology = data.draw(topologies(max_gpus=5), label="topology")
    if reduce:
        schedule = data.draw(spanning_tree_reductions(topology, K.REDUCESCATTER), label="schedule")
    else:
        schedule = data.draw(spanning_tree_allgathers(topology), label="schedule")
    # an `after` on a transfer of the same sender (the synthesizer staggers channels so)
    ts = list(schedule.transfers)
    for i in range(1, len(ts)):
        if data.draw(st.booleans(), label=f"after {i}"):
            same = [j for j in range(i) if ts[j].src == ts[i].src or ts[j].dst == ts[i].src]
            if same:
                ts[i] = Transfer(**{**_fields(ts[i]), "after": (data.draw(st.sampled_from(same)),)})
    check_traces(schedule.with_transfers(ts), tmp_path_factory.mktemp("et"), 12345.0)


def _fields(t: Transfer) -> dict[str, Any]:
    return {"src": t.src, "dst": t.dst, "chunks": t.chunks, "route": t.route, "op": t.op, "channel": t.channel,
            "after": t.after, "not_before_us": t.not_before_us}


def test_not_before_becomes_a_timed_compute_node(tmp_path: Path) -> None:
    topology = resolve_topology("ring8")
    schedule = baseline(topology, K.ALLGATHER, "ring", channels=1)
    first = schedule.transfers[0]
    delayed = schedule.with_transfers([Transfer(**{**_fields(first), "not_before_us": 2.5}),
                                       *schedule.transfers[1:]])
    traces = schedule_traces(delayed, SIZE)
    node = next(n for n in traces[first.src].nodes if n.kind == "COMP_NODE")
    send = next(n for n in traces[first.src].nodes if n.kind == "COMM_SEND_NODE")
    assert node.duration_micros == 3 and node.id in send.ctrl_deps


def test_an_after_on_other_ranks_is_refused() -> None:
    topology = resolve_topology("ring8")
    schedule = baseline(topology, K.ALLGATHER, "ring", channels=1)
    ts = list(schedule.transfers)
    far = next(j for j, u in enumerate(ts) if ts[-1].src not in (u.src, u.dst))
    ts[-1] = Transfer(**{**_fields(ts[-1]), "after": (far,)})
    with pytest.raises(InputError, match="per-rank dependencies only"):
        schedule_traces(schedule.with_transfers(ts), SIZE)


# ----------------------------------------------------------- program -> traces
@pytest.mark.parametrize(("name", "kind", "algorithm"), [("ring8", K.ALLREDUCE, "ring"),
                                                         ("dgx-a100", K.ALLGATHER, "direct"),
                                                         ("ring8", K.BROADCAST, "ring")])
def test_programs_export_their_transmissions_and_waits(name: str, kind: CollectiveKind, algorithm: str,
                                                       tmp_path: Path) -> None:
    topology = resolve_topology(name)
    program = lower_schedule(baseline(topology, kind, algorithm, size_bytes=SIZE), topology)
    write_traces(program_traces(program, SIZE), tmp_path, "p")
    per_rank = _decode_dir(tmp_path, "p", program.ngpus)
    machine = build_machine(program)
    nodes_of: dict[int, list[Any]] = {}
    for rank, nodes in enumerate(per_rank):
        for node in nodes:
            match = re.match(r"^\w+ t(\d+) ", node.name)
            assert match, node.name
            k = int(match.group(1))
            assert machine.nodes[k].rank == rank
            nodes_of.setdefault(k, []).append(node)
    assert sorted(nodes_of) == list(range(len(machine.nodes)))
    chunk = SIZE / program.nchunksperloop
    for k, nodes in nodes_of.items():
        t = machine.nodes[k]
        first, last = min(nodes, key=lambda n: n.id), max(nodes, key=lambda n: n.id)
        local = {max(nodes_of[p], key=lambda n: n.id).id for p in machine.preds[k] if machine.nodes[p].rank == t.rank}
        assert set(first.data_deps) | set(first.ctrl_deps) == local, machine.describe(k)
        kinds = [n.type for n in sorted(nodes, key=lambda n: n.id)]
        expected = ([6] if t.type.receives else []) + ([4] if t.type.value in ("rrc", "rrs", "rrcs", "cpy", "re")
                                                      else []) + ([5] if t.type.sends else [])
        assert kinds == expected, machine.describe(k)
        for node in nodes:
            if node.type == 5:
                assert attr_value(node, "comm_tag") == k
            if node.type == 6:
                assert attr_value(node, "comm_tag") == machine.matching_send[k]
            if node.type in (5, 6):
                assert attr_value(node, "comm_size") == math.ceil(t.count * chunk - 1e-9)
        assert last.id >= first.id


# ------------------------------------------------------------------------ CLI
def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(args)
    out, err = capsys.readouterr()
    return (done.value.code if isinstance(done.value.code, int) else 0), out, err


def test_cli_exports_a_schedule_json_and_an_xml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology = resolve_topology("ring8")
    schedule = baseline(topology, K.ALLREDUCE, "ring", channels=1)
    save_schedule(schedule, topology, tmp_path / "ar.json")
    code, out, err = run(["export", "chakra", str(tmp_path / "ar.json"), "-t", "ring8", "-s", "1MB", "-o",
                          str(tmp_path / "et"), "--json"], capsys)
    assert code == 0 and err == ""
    assert '"ranks": 8' in out and sorted(p.name for p in (tmp_path / "et").iterdir()) == [
        f"ar.{r}.et" for r in sorted(range(8), key=str)]
    program_path = tmp_path / "ar.xml"
    from taccl_py.msccl import write_schedule_xml

    write_schedule_xml(schedule, topology, program_path)
    code, out, err = run(["export", "chakra", str(program_path), "-s", "1MB", "-o", str(tmp_path / "et2"),
                          "--prefix", "ring"], capsys)
    assert code == 0 and "wrote 8 Chakra traces" in out and (tmp_path / "et2" / "ring.7.et").exists()


@pytest.mark.parametrize(("args", "words"), [
    (["export", "chakra", "{d}/s.json", "-s", "1MB", "-o", "{d}/et"], "--topology: is needed to read a schedule JSON"),
    (["export", "chakra", "{d}/s.json", "-t", "ring8", "-s", "1KB:1MB", "-o", "{d}/et"], "needs a single size"),
    (["export", "chakra", "{d}/missing.xml", "-s", "1MB", "-o", "{d}/et"], "missing.xml"),
    (["export", "chakra", "{d}/s.json", "-t", "ring8", "-s", "1MB", "-o", "{d}/s.json"], "is not a directory"),
])
def test_cli_errors_are_one_line(args: list[str], words: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    topology = resolve_topology("ring8")
    save_schedule(baseline(topology, K.ALLGATHER, "ring", channels=1), topology, tmp_path / "s.json")
    code, out, err = run([a.format(d=tmp_path) for a in args], capsys)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1 and out == ""
    assert not (tmp_path / "et").exists()


@pytest.mark.slow
def test_synthesize_writes_chakra_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["synthesize", "-t", "ring8", "-c", "allgather", "-s", "1MB", "--chakra",
                        str(tmp_path / "et"), "--time-limit", "10"], capsys)
    assert code == 0 and err == ""
    per_rank = _decode_dir(tmp_path / "et", "allgather-ring8", 8)
    assert all(any(n.type == 5 for n in nodes) for nodes in per_rank)
