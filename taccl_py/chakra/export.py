"""Schedules and MSCCL programs as Chakra execution traces, one file per rank, for ASTRA-sim 2.0 to replay.

From a schedule, every transfer ``i`` becomes a ``COMM_SEND_NODE`` on its source rank and a ``COMM_RECV_NODE``
on its destination, both with ``comm_src``, ``comm_dst``, ``comm_size`` (bytes) and ``comm_tag = i`` (so ASTRA-sim
pairs them), plus ``taccl_transfer`` and ``taccl_chunks``; a reduction adds a ``COMP_NODE`` after the receive (the
local reduce, ``tensor_size`` bytes, no modelled time). The schedule's rules (:mod:`taccl_py.schedule`) become
per-rank dependencies:

* a send data-depends on the last node of its rank that wrote each of its chunks (read after write);
* a receive data-depends on the last writer of each of its chunks on its rank and on the sends of that chunk
  since then (write after write, write after read);
* sends, and receives, of one connection ``(src, dst, channel)`` follow each other (control dependencies: the
  connection is a FIFO);
* ``after = j`` becomes a control dependency on transfer j's node on the same rank: its commit when j writes
  there, its send when j leaves from there (what the MSCCL lowering does too); a j that touches neither rank
  cannot be expressed per rank and is refused;
* ``not_before_us = t`` hangs the send on a ``COMP_NODE`` of ``ceil(t)`` microseconds with no dependency.

From an MSCCL program, every runtime transmission (``msccl.machine``) becomes the nodes of its step type (``s``:
send; ``r``: receive; ``rcs``: receive then send; ``rrc``: receive then reduce; ``rrs``/``rrcs``: receive,
reduce, send; ``cpy``/``re``: a local ``COMP_NODE``), and its local predecessors (the threadblock's previous
step and its ``depid``/``deps`` waits) become control dependencies; the tag is the send's transmission number.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from taccl_py.chakra.trace import Attr, TraceNode, encode_trace
from taccl_py.collectives import CollectiveKind
from taccl_py.errors import InputError
from taccl_py.schedule import Op, Schedule
from taccl_py.tolerances import CEIL_SLACK
from taccl_py.topology_io import atomic_write_bytes

__all__ = ["RankTrace", "program_traces", "schedule_traces", "trace_path", "write_traces"]

_COMM_TYPES = {CollectiveKind.ALLREDUCE: 0, CollectiveKind.REDUCE: 1, CollectiveKind.ALLGATHER: 2,
               CollectiveKind.BROADCAST: 5, CollectiveKind.ALLTOALL: 6, CollectiveKind.REDUCESCATTER: 7}
"""Chakra's CollectiveCommType numbers, recorded in the metadata."""


@dataclass(frozen=True)
class RankTrace:
    """Everything one rank's file holds."""

    rank: int
    metadata: tuple[Attr, ...]
    nodes: tuple[TraceNode, ...]

    def encode(self) -> bytes:
        return encode_trace(self.nodes, self.metadata)


def _metadata(kind: CollectiveKind | None, ranks: int, rank: int, size_bytes: float, source: str,
              chunks: int, name: str) -> tuple[Attr, ...]:
    attrs: list[Attr] = [("schema", "string_val", "Chakra execution trace of a collective algorithm, "
                                                  "written by taccl_py"),
                         ("source", "string_val", source), ("algorithm", "string_val", name),
                         ("rank", "int64_val", rank), ("ranks", "int64_val", ranks),
                         ("size_bytes", "int64_val", int(size_bytes)), ("chunks", "int64_val", chunks)]
    if kind is not None:
        attrs += [("collective", "string_val", kind.value), ("comm_type", "int64_val", _COMM_TYPES[kind])]
    return tuple(attrs)


def _comm_attrs(src: int, dst: int, size: int, tag: int, transfer: int, chunks: Sequence[int]) -> tuple[Attr, ...]:
    return (("is_cpu_op", "bool_val", False), ("comm_src", "int32_val", src), ("comm_dst", "int32_val", dst),
            ("comm_size", "int64_val", size), ("comm_tag", "int32_val", tag),
            ("taccl_transfer", "int64_val", transfer), ("taccl_chunks", "int64_list", list(chunks)))


class _RankBuilder:
    """Appends nodes to one rank's trace with sequential ids."""

    def __init__(self) -> None:
        self.nodes: list[TraceNode] = []

    def add(self, name: str, kind: str, *, data: Sequence[int] = (), ctrl: Sequence[int] = (), duration: int = 0,
            attrs: tuple[Attr, ...] = ()) -> int:
        node_id = len(self.nodes)
        data_deps = tuple(sorted(set(data)))
        ctrl_deps = tuple(sorted(set(ctrl) - set(data_deps)))
        self.nodes.append(TraceNode(node_id, name, kind, data_deps, ctrl_deps, duration, attrs))
        return node_id


def _bytes_of(chunks: int, chunk_bytes: float) -> int:
    return math.ceil(chunks * chunk_bytes - CEIL_SLACK)


def schedule_traces(schedule: Schedule, size_bytes: float, *, element_bytes: int = 4) -> list[RankTrace]:
    """One trace per rank for ``schedule`` at an nccl-tests ``size_bytes`` (see the module doc).

    ``element_bytes`` sets the ``num_ops`` of a reduction's compute node (one add per element).
    Raises :class:`InputError` for an ``after`` that no per-rank dependency can express.
    """
    if not size_bytes > 0:
        raise InputError(f"must be > 0 bytes (got {size_bytes!r})", where="--size")
    if schedule.uses_switch_offload:
        raise InputError("uses switch multicast or in-network reduction (network groups), which Chakra's "
                         "point-to-point send/receive nodes cannot express", where=schedule.name or "schedule")
    collective = schedule.collective
    n = collective.num_ranks
    chunk_bytes = collective.chunk_bytes(size_bytes)
    ranks = [_RankBuilder() for _ in range(n)]
    writer: list[dict[int, int]] = [{} for _ in range(n)]
    readers: list[dict[int, list[int]]] = [{} for _ in range(n)]
    last_send: dict[tuple[int, int, int], int] = {}
    last_recv: dict[tuple[int, int, int], int] = {}
    delays: list[dict[int, int]] = [{} for _ in range(n)]
    send_node: list[int] = []
    commit_node: list[int] = []
    for i, t in enumerate(schedule.transfers):
        size = _bytes_of(len(t.chunks), chunk_bytes)
        attrs = _comm_attrs(t.src, t.dst, size, i, i, t.chunks)
        ctrl = [last_send[key] for key in [(t.src, t.dst, t.channel)] if key in last_send]
        for j in t.after:
            before = schedule.transfers[j]
            if before.dst == t.src:
                ctrl.append(commit_node[j])
            elif before.src == t.src:
                ctrl.append(send_node[j])
            else:
                raise InputError(f"transfer {i} ({t.src} -> {t.dst}) waits for transfer {j} ({before.src} -> "
                                 f"{before.dst}), which touches neither rank {t.src}'s data nor its sends; a Chakra "
                                 "trace holds per-rank dependencies only", where="after")
        if t.not_before_us is not None and t.not_before_us > 0:
            micros = math.ceil(t.not_before_us - CEIL_SLACK)
            if micros not in delays[t.src]:
                delays[t.src][micros] = ranks[t.src].add(f"wait {micros} us", "COMP_NODE", duration=micros,
                                                         attrs=(("is_cpu_op", "bool_val", False),))
            ctrl.append(delays[t.src][micros])
        data = [writer[t.src][c] for c in t.chunks if c in writer[t.src]]
        send = ranks[t.src].add(f"send t{i} {t.src}->{t.dst}", "COMM_SEND_NODE", data=data, ctrl=ctrl, attrs=attrs)
        last_send[(t.src, t.dst, t.channel)] = send
        for c in t.chunks:
            readers[t.src].setdefault(c, []).append(send)
        key = (t.src, t.dst, t.channel)
        data = [writer[t.dst][c] for c in t.chunks if c in writer[t.dst]]
        data += [r for c in t.chunks for r in readers[t.dst].get(c, [])]
        recv = ranks[t.dst].add(f"recv t{i} {t.src}->{t.dst}", "COMM_RECV_NODE", data=data,
                                ctrl=[last_recv[key]] if key in last_recv else [], attrs=attrs)
        last_recv[key] = recv
        commit = recv
        if t.op is Op.REDUCE:
            commit = ranks[t.dst].add(f"reduce t{i}", "COMP_NODE", data=[recv], attrs=(
                ("is_cpu_op", "bool_val", False), ("tensor_size", "uint64_val", size),
                ("num_ops", "int64_val", size // element_bytes), ("taccl_transfer", "int64_val", i)))
        for c in t.chunks:
            writer[t.dst][c] = commit
            readers[t.dst][c] = []
        send_node.append(send)
        commit_node.append(commit)
    source = f"schedule {schedule.name or 'unnamed'} on {schedule.topology or 'its topology'}"
    return [RankTrace(r, _metadata(collective.kind, n, r, size_bytes, source, collective.num_chunks, schedule.name),
                      tuple(ranks[r].nodes)) for r in range(n)]


def program_traces(program: object, size_bytes: float, *, element_bytes: int = 4) -> list[RankTrace]:
    """One trace per rank for an MSCCL program (``taccl_py.msccl.Program``) at an nccl-tests ``size_bytes``.

    Raises :class:`InputError` when the program does not pass the verifier's structural rules (its
    transmissions and their waits are then not well defined).
    """
    from taccl_py.msccl import Program, verify_program
    from taccl_py.msccl.machine import build_machine

    assert isinstance(program, Program)
    if not size_bytes > 0:
        raise InputError(f"must be > 0 bytes (got {size_bytes!r})", where="--size")
    report = verify_program(program)
    if not report.valid:
        first = report.errors[0] if report.errors else "invalid program"
        raise InputError(f"is not a valid MSCCL program: {first}", where=program.source or "program")
    machine = build_machine(program)
    chunk_bytes = size_bytes / program.nchunksperloop
    n = program.ngpus
    ranks = [_RankBuilder() for _ in range(n)]
    done: dict[int, int] = {}
    """transmission -> its last Chakra node (completion)."""
    order, stuck = machine.topological_order()
    if stuck:
        raise InputError(f"can deadlock ({machine.describe(stuck[0])} never runs)", where=program.source or "program")
    local_order = sorted(range(len(machine.nodes)), key=lambda k: (machine.nodes[k].rank, machine.nodes[k].tb,
                                                                   machine.nodes[k].seq))
    position = {node: k for k, node in enumerate(order)}
    local_order.sort(key=lambda k: position[k])  # every local predecessor is emitted before its successor
    for k in local_order:
        t = machine.nodes[k]
        builder = ranks[t.rank]
        tb = machine.tbs[t.tb][1]
        preds = [done[p] for p in machine.preds[k] if machine.nodes[p].rank == t.rank]
        size = _bytes_of(t.count, chunk_bytes)
        kind = t.type.value
        last = -1
        if t.type.receives:
            send = machine.matching_send.get(k, -1)
            attrs = _comm_attrs(tb.recv, t.rank, size, send, send, ())
            last = builder.add(f"{kind} t{k} recv from {tb.recv}", "COMM_RECV_NODE", ctrl=preds, attrs=attrs)
            preds = [last]
        if kind in ("rrc", "rrs", "rrcs", "cpy", "re"):
            last = builder.add(f"{kind} t{k} {'copy' if kind == 'cpy' else 'reduce'}", "COMP_NODE",
                               data=preds if t.type.receives else (), ctrl=() if t.type.receives else preds,
                               attrs=(("is_cpu_op", "bool_val", False), ("tensor_size", "uint64_val", size),
                                      ("num_ops", "int64_val", 0 if kind == "cpy" else size // element_bytes)))
            preds = [last]
        if t.type.sends:
            attrs = _comm_attrs(t.rank, tb.send, size, k, k, ())
            data = preds if t.type.receives else ()
            last = builder.add(f"{kind} t{k} send to {tb.send}", "COMM_SEND_NODE", data=data,
                               ctrl=() if t.type.receives else preds, attrs=attrs)
        if last < 0:  # a step that moves nothing (the parser folds nops away; kept so every step has a node)
            last = builder.add(f"{kind} t{k}", "COMP_NODE", ctrl=preds, attrs=(("is_cpu_op", "bool_val", False),))
        done[k] = last
    source = f"MSCCL program {program.name or program.source or ''}".strip()
    return [RankTrace(r, _metadata(program.kind, n, r, size_bytes, source, program.nchunksperloop, program.name or ""),
                      tuple(ranks[r].nodes)) for r in range(n)]


def trace_path(directory: str | os.PathLike[str], prefix: str, rank: int) -> Path:
    """``DIR/PREFIX.RANK.et``, the names ASTRA-sim's ``--workload-configuration=DIR/PREFIX`` reads."""
    return Path(directory) / f"{prefix}.{rank}.et"


def write_traces(traces: Sequence[RankTrace], directory: str | os.PathLike[str], prefix: str) -> list[Path]:
    """Encode every trace first, then write each file atomically; returns the paths."""
    if not prefix or "/" in prefix or os.sep in prefix:
        raise InputError(f"must be a plain file name prefix (got {prefix!r})", where="--prefix")
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise InputError("exists and is not a directory", where=str(target))
    encoded = [(trace_path(target, prefix, t.rank), t.encode()) for t in traces]
    try:
        target.mkdir(parents=True, exist_ok=True)
        for path, data in encoded:
            atomic_write_bytes(path, data)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", where=str(target)) from None
    return [path for path, _ in encoded]
