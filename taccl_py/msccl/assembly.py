"""Lowered operations -> Program: dependencies, nops, channels, threadblock ids and limits.

The lowering produces :class:`LoweredOp` records (one MSCCL step each) grouped
by threadblock and ordered, with dependencies on other operations of the same
rank. Here they become XML: dependencies already implied by threadblock order
or by another dependency are dropped, the rest become ``depid``/``deps`` (one
per step, extra ones on ``nop`` steps before it) with ``hasdep`` on their
targets; connections get channels (a ring of paired threadblocks shares one,
two connections between the same ranks never do, at most 32 threadblocks send
and 32 receive per channel); threadblocks get ids (dependency targets first,
since ``depid`` is 8 bits). Every dialect limit is checked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from taccl_py.errors import LoweringError
from taccl_py.msccl.ir import (
    DIALECTS,
    INT8_MAX,
    INT16_MAX,
    MAX_CHANNELS,
    MAX_NODES_PER_RANK,
    MAX_TBS_PER_CHANNEL,
    Buffer,
    Gpu,
    Step,
    StepType,
    Threadblock,
)
from taccl_py.msccl.layout import Location

__all__ = ["Assembly", "Connection", "LoweredOp", "TbKey", "assemble"]

Connection = tuple[int, int, int, int]
"""(src rank, dst rank, schedule channel, segment)."""


_NO_CONNECTION = (-1, -1, -1, -1)


@dataclass(frozen=True)
class TbKey:
    """A threadblock before it has an id: its rank, the connections it sends on / receives from."""

    rank: int
    send: Connection | None
    recv: Connection | None
    local: int = 0
    """Index among a rank's local (copy-only) threadblocks."""

    def sort_key(self) -> tuple[int, Connection, Connection, int]:
        return (self.rank, self.send or _NO_CONNECTION, self.recv or _NO_CONNECTION, self.local)


class LoweredOp(NamedTuple):
    """One step of threadblock ``tb`` (what it waits for is kept beside it, by op id; a named tuple for speed)."""

    id: int
    tb: TbKey
    type: StepType
    src: Location
    dst: Location
    cnt: int


@dataclass
class Assembly:
    """The result: GPUs ready for a Program, or what went wrong.

    ``overflowing``: threadblocks over the step limit (to split);
    ``deadlocked``: the waits (threadblock order, dependencies, each receive
    after its send) form a cycle, so the program would hang.
    """

    gpus: tuple[Gpu, ...]
    nchannels: int
    overflowing: list[TbKey]
    deadlocked: bool = False


FAST_MIN_OPS = 50_000
"""From this many operations the dependencies are pruned by :mod:`taccl_py.msccl.fast_prune` (same result)."""


def _prune(ops: Sequence[LoweredOp], tb_order: dict[TbKey, list[int]], op_deps: Sequence[Sequence[int]],
           matches: Sequence[tuple[int, int]]) -> tuple[list[list[int]], list[TbKey], bool]:
    """Per op, the dependencies not implied by threadblock order or by another kept dependency.

    A dependency is dropped when it is reachable from the op's predecessor
    in its threadblock or from another of its dependencies (then any order of
    considering them keeps the same set). Reachability within a rank comes
    from vector clocks over threadblocks (positions known complete),
    propagated in a topological order; an op without kept dependencies
    shares its predecessor's clock. Also returns the threadblocks where a
    step waits for a later step of its own (to split), and whether the waits,
    with each receive after its matching send (``matches``: send op, receive
    op), contain a cycle.
    """
    n = len(ops)
    keys = list(tb_order)
    if n >= FAST_MIN_OPS:  # the same, compiled (taccl_py.msccl.fast_prune)
        from taccl_py.msccl.fast_prune import prune

        kept_lists, back, cycle = prune(n, list(tb_order.values()), [k.rank for k in keys],
                                        [k.sort_key() for k in keys], op_deps, matches)
        return kept_lists, [keys[g] for g in back], cycle
    tb_of = [0] * n
    position = [0] * n
    prev = [-1] * n
    for g, ids in enumerate(tb_order.values()):
        last = -1
        for k, op_id in enumerate(ids):
            tb_of[op_id] = g
            position[op_id] = k
            prev[op_id] = last
            last = op_id
    direct: list[list[int]] = []
    backwards: dict[TbKey, None] = {}
    for op_id in range(n):
        ds = op_deps[op_id]
        own = tb_of[op_id]
        if len(ds) < 2:
            if not ds:
                direct.append([])
                continue
            d = ds[0]
            if tb_of[d] != own:
                direct.append([d])
                continue
        best: dict[int, int] = {}
        for d in ds:
            g = tb_of[d]
            if g == own:
                if position[d] > position[op_id]:
                    backwards[keys[own]] = None
                continue
            if g not in best or position[d] > position[best[g]]:
                best[g] = d
        direct.append(list(best.values()))
    # topological order (Kahn) over threadblock order, dependencies and send -> receive
    follower = [-1] * n
    for ids in tb_order.values():
        for k in range(len(ids) - 1):
            follower[ids[k]] = ids[k + 1]
    indegree = [len(direct[i]) + (prev[i] >= 0) for i in range(n)]
    succs: dict[int, list[int]] = {}
    for op_id in range(n):
        for d in direct[op_id]:
            succs.setdefault(d, []).append(op_id)
    for send, recv in matches:
        succs.setdefault(send, []).append(recv)
        indegree[recv] += 1
    # clocks: per rank, one int32 entry per threadblock of the rank (its local index), -1 = nothing known
    local = [0] * len(keys)
    per_rank: dict[int, int] = {}
    for g, key in enumerate(keys):
        local[g] = per_rank.get(key.rank, 0)
        per_rank[key.rank] = local[g] + 1
    empty = {rank: np.full(size, -1, dtype=np.int32) for rank, size in per_rank.items()}
    clock: list[np.ndarray] = [empty[keys[tb_of[i]].rank] for i in range(n)]
    """Positions known complete per threadblock of the rank; an op's own entry may be stale (it is implied)."""
    topo_index = [-1] * n
    kept: list[list[int]] = [[] for _ in range(n)]
    ready = [i for i in range(n) if not indegree[i]]
    done = 0
    while ready:
        op_id = ready.pop()
        topo_index[op_id] = done
        done += 1
        deps = direct[op_id]
        p = prev[op_id]
        base = clock[p] if p >= 0 else clock[op_id]
        if deps:
            chosen = []
            fresh = False
            for d in (sorted(deps, key=topo_index.__getitem__, reverse=True) if len(deps) > 1 else deps):
                g = local[tb_of[d]]
                if base[g] >= position[d]:
                    continue
                chosen.append(d)
                if not fresh:
                    base = base.copy()
                    fresh = True
                np.maximum(base, clock[d], out=base)
                if base[g] < position[d]:
                    base[g] = position[d]
            if len(chosen) > 1:
                chosen.sort(key=lambda d: (keys[tb_of[d]].sort_key(), position[d]))
            kept[op_id] = chosen
        clock[op_id] = base
        f = follower[op_id]
        if f >= 0:
            indegree[f] -= 1
            if not indegree[f]:
                ready.append(f)
        for s in succs.get(op_id, ()):
            indegree[s] -= 1
            if not indegree[s]:
                ready.append(s)
    for op_id in range(n):  # a cycle: keep what is there (the program is not used)
        if topo_index[op_id] < 0:
            kept[op_id] = sorted(direct[op_id], key=lambda d: (keys[tb_of[d]].sort_key(), position[d]))
    return kept, list(backwards), done < n


def assemble(ops: Sequence[LoweredOp], tb_order: dict[TbKey, list[int]], op_deps: Sequence[Sequence[int]],
             matches: Sequence[tuple[int, int]], ngpus: int, dialect: str, preferred_channel: dict[Connection, int],
             buffer_sizes: tuple[int, int], scratch: Sequence[int]) -> Assembly:
    """Turn ordered operations into GPUs with threadblocks and steps (see the module docstring).

    ``ops[i].id == i``; ``op_deps[i]`` lists the ops (of the same rank) that
    op ``i`` must wait for; ``matches`` pairs each send-type op with the
    receive-type op that takes its data.
    """
    spec = DIALECTS[dialect]
    op_by_id = ops
    _check_nodes(ngpus, {key: len(ids) for key, ids in tb_order.items()}, "at least ")
    deps, backwards, deadlocked = _prune(ops, tb_order, op_deps, matches)
    if backwards:
        single = [k for k in backwards if k.send is None or k.recv is None]
        if single:
            raise LoweringError(f"rank {single[0].rank}: a transfer must wait for a later transfer of the same "
                                "connection (an 'after' pointing forward?); MSCCL connections are FIFO")
        return Assembly((), 0, backwards)

    # steps per threadblock with nops; remember where each op lands
    xml_pos: dict[int, int] = {}
    targets: set[int] = set()
    layouts: dict[TbKey, list[tuple[StepType, int, list[int]]]] = {}
    overflowing: list[TbKey] = []
    for key, ids in tb_order.items():
        rows: list[tuple[StepType, int, list[int]]] = []
        for op_id in ids:
            ds = deps[op_id]
            for d in ds[:-1]:
                rows.append((StepType.NOP, -1, [d]))
                targets.add(d)
            xml_pos[op_id] = len(rows)
            rows.append((op_by_id[op_id].type, op_id, ds[-1:]))
            if ds:
                targets.add(ds[-1])
        layouts[key] = rows
        if len(rows) > spec.max_steps:
            overflowing.append(key)
    if overflowing:
        return Assembly((), 0, overflowing)
    _check_nodes(ngpus, {key: len(rows) for key, rows in layouts.items()}, "")

    channel_of, conflicts = _assign_channels(list(tb_order), preferred_channel)
    if conflicts:
        return Assembly((), 0, conflicts)
    tb_channel = {key: (channel_of[key.send] if key.send else channel_of[key.recv] if key.recv else 0)
                  for key in tb_order}
    target_tbs = {op_by_id[t].tb for t in targets}

    by_rank: dict[int, list[TbKey]] = defaultdict(list)
    for key in tb_order:
        by_rank[key.rank].append(key)
    tb_id: dict[TbKey, int] = {}
    for rank, keys in by_rank.items():
        keys.sort(key=lambda k: (k not in target_tbs, tb_channel[k], _peer(k.send, 1), _peer(k.recv, 0),
                                 k.sort_key()))
        if len(keys) > spec.max_threadblocks:
            raise LoweringError(f"rank {rank} needs {len(keys)} threadblocks; the {dialect} runtime allows at most "
                                f"{spec.max_threadblocks} per GPU")
        for i, key in enumerate(keys):
            tb_id[key] = i
            if key in target_tbs and i > INT8_MAX:
                raise LoweringError(f"rank {rank} has more than {INT8_MAX + 1} threadblocks that others wait for; "
                                    "depid is an 8-bit field in the runtime")

    gpus = []
    i_chunks, o_chunks = buffer_sizes
    for rank in range(ngpus):
        tbs = []
        for key in by_rank.get(rank, []):
            steps = []
            for pos, (kind, op_id, ds) in enumerate(layouts[key]):
                depid, dstep = (tb_id[op_by_id[ds[0]].tb], xml_pos[ds[0]]) if ds else (-1, -1)
                hasdep = 1 if op_id >= 0 and op_id in targets else 0
                if kind is StepType.NOP:
                    steps.append(Step(pos, kind, Buffer.INPUT, -1, Buffer.OUTPUT, -1, 0, depid, dstep, 0))
                    continue
                _, _, _, (srcbuf, srcoff), (dstbuf, dstoff), cnt = op_by_id[op_id]
                if srcoff > INT16_MAX or dstoff > INT16_MAX:
                    raise LoweringError(f"rank {rank} needs buffer offset {max(srcoff, dstoff)}; the runtime stores "
                                        "offsets in 16 bits (at most 32767 chunks per buffer)")
                steps.append(Step(pos, kind, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, dstep, hasdep))
            tbs.append(Threadblock(tb_id[key], _peer(key.send, 1), _peer(key.recv, 0), tb_channel[key],
                                   tuple(steps)))
        tbs.sort(key=lambda tb: tb.id)
        gpus.append(Gpu(rank, i_chunks, o_chunks, scratch[rank], tuple(tbs)))
    nchannels = 1 + max(tb_channel.values(), default=0)
    return Assembly(tuple(gpus), nchannels, [], deadlocked)


def _check_nodes(ngpus: int, steps: dict[TbKey, int], qualifier: str) -> None:
    """Raise when a rank needs more XML nodes (1 + ngpus + threadblocks + steps) than the runtime parser stores.

    Called before the costly stages: with the operations alone (nops only add
    steps, and a later attempt only unpairs or splits threadblocks, so no
    attempt could fit; ``qualifier`` "at least ") and again once the nops are
    known.
    """
    nodes = [1 + ngpus] * ngpus
    for key, count in steps.items():
        nodes[key.rank] += 1 + count
    for rank, count in enumerate(nodes):
        if count > MAX_NODES_PER_RANK:
            raise LoweringError(f"rank {rank} needs {qualifier}{count} XML nodes; the runtime parser stores at most "
                                f"{MAX_NODES_PER_RANK} per rank (1 + ngpus + threadblocks + steps)",
                                over=max(nodes) / MAX_NODES_PER_RANK)


def _peer(conn: Connection | None, end: int) -> int:
    return -1 if conn is None else conn[end]


def _assign_channels(keys: list[TbKey], preferred: dict[Connection, int]) -> tuple[dict[Connection, int],
                                                                                  list[TbKey]]:
    """A channel per connection: paired threadblocks share it; two connections of one rank pair never do.

    Returns the channels, or the paired threadblocks to split when pairing
    ties two connections between the same ranks to one channel.
    """
    parent: dict[Connection, Connection] = {}

    def find(c: Connection) -> Connection:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    for key in keys:
        for conn in (key.send, key.recv):
            if conn is not None:
                parent.setdefault(conn, conn)
        if key.send is not None and key.recv is not None:
            a, b = find(key.send), find(key.recv)
            if a != b:
                parent[max(a, b)] = min(a, b)
    components: dict[Connection, list[Connection]] = defaultdict(list)
    for conn in parent:
        components[find(conn)].append(conn)
    used_pair: dict[tuple[int, int], set[int]] = defaultdict(set)
    sending: dict[tuple[int, int], int] = defaultdict(int)
    receiving: dict[tuple[int, int], int] = defaultdict(int)
    channel: dict[Connection, int] = {}
    conflicts = []
    for members in components.values():
        if len({(c[0], c[1]) for c in members}) < len(members):
            conflicts += [k for k in keys if k.send in members and k.recv is not None]
    if conflicts:
        return {}, conflicts
    for root in sorted(components, key=lambda c: (preferred.get(c, c[2]), c)):
        members = sorted(components[root])
        wish = min(preferred.get(c, c[2]) for c in members)
        order = ([wish] if 0 <= wish < MAX_CHANNELS else []) + [c for c in range(MAX_CHANNELS) if c != wish]
        for ch in order:
            if any(ch in used_pair[(c[0], c[1])] for c in members):
                continue
            if any(sending[(c[0], ch)] >= MAX_TBS_PER_CHANNEL or receiving[(c[1], ch)] >= MAX_TBS_PER_CHANNEL
                   for c in members):
                continue
            break
        else:
            raise LoweringError(f"connections {members[0][0]}->{members[0][1]} need a channel but all "
                                f"{MAX_CHANNELS} are taken (one connection per peer and channel, at most "
                                f"{MAX_TBS_PER_CHANNEL} peers per channel)")
        for c in members:
            channel[c] = ch
            used_pair[(c[0], c[1])].add(ch)
            sending[(c[0], ch)] += 1
            receiving[(c[1], ch)] += 1
    return channel, []
