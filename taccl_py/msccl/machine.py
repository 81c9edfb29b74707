"""How the runtime executes a program: transmissions, their waits, and the happens-before graph.

The runtime parser turns a threadblock's steps into *transmissions*: a ``nop``
only lends its dependency to the next step, and consecutive ``re`` steps on
the same destination fuse into one. A threadblock runs its transmissions in
order; one waits for the flags it depends on (threadblock ``depid`` has
published a step counter >= ``deps``) and, if it receives, for the matching
send (the k-th send-type transmission of the peer's threadblock on that
channel). The kernel's step counter is emulated exactly, so files whose ``s``
or nops are off behave here as they would on the GPU.

The result is a static graph (every wait is satisfied by one known
transmission, the earliest that can satisfy it), which the verifier executes
on symbolic data and the timing model on the fluid network.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from taccl_py.msccl.ir import MAX_REDUCE_FUSION, Buffer, Program, StepType, Threadblock

__all__ = ["RECEIVING", "SENDING", "Machine", "Transmission", "build_machine"]

SENDING = frozenset(k for k in StepType if k.sends)
RECEIVING = frozenset(k for k in StepType if k.receives)
"""Step types that send / receive (as sets: asked once per step of large programs)."""


class Transmission(NamedTuple):
    """One instruction of the runtime. ``first``/``last`` are the XML positions it covers.

    (A named tuple: hundreds of thousands are made per large program, and a
    tuple is built several times faster than a frozen dataclass.)
    """

    node: int
    rank: int
    tb: int
    """Global threadblock index (position in ``Machine.tbs``)."""
    seq: int
    type: StepType
    first: int
    last: int
    count: int  # type: ignore[assignment]  # shadows tuple.count on purpose (the step's cnt)
    srcbuf: Buffer
    srcoffs: tuple[int, ...]
    dstbuf: Buffer
    dstoff: int
    waits: tuple[tuple[int, int], ...]
    """``(depid, deps)`` pairs: nop dependencies it inherits, then its own."""
    publish: int | None
    """The step counter it publishes when it completes (hasdep), else None."""


@dataclass(frozen=True)
class Machine:
    """Transmissions of every threadblock and the graph of what must precede what.

    ``preds[n]`` lists the nodes that complete before node ``n`` can run (its
    threadblock predecessor, the transmissions satisfying its waits and, for a
    receive, the matching send). ``blocked[n]`` explains waits that nothing
    can ever satisfy.
    """

    program: Program
    tbs: tuple[tuple[int, Threadblock], ...]
    nodes: tuple[Transmission, ...]
    tb_nodes: tuple[tuple[int, ...], ...]
    preds: tuple[tuple[int, ...], ...]
    blocked: dict[int, str]
    matching_send: dict[int, int]
    """receive-type node -> the send-type node it receives from."""
    matching_recv: dict[int, int]

    def topological_order(self) -> tuple[list[int], list[int]]:
        """(nodes in a runnable order, nodes that can never run). Deterministic; computed once."""
        return self._order

    @cached_property
    def _order(self) -> tuple[list[int], list[int]]:
        n = len(self.nodes)
        indegree = [len(p) for p in self.preds]
        # the next transmission of the same threadblock is implicit (node + 1); other waits are listed
        others: dict[int, list[int]] = {}
        nodes = self.nodes
        for node, preds in enumerate(self.preds):
            start = 1 if nodes[node].seq else 0
            for p in preds[start:]:
                waiting = others.get(p)
                if waiting is None:
                    others[p] = [node]
                else:
                    waiting.append(node)
        follower = [-1] * n
        for tb in self.tb_nodes:
            for k in range(len(tb) - 1):
                follower[tb[k]] = tb[k + 1]
        blocked = self.blocked
        order = [i for i in range(n) if not indegree[i] and i not in blocked]
        for node in order:  # the list grows while it is read: a FIFO queue
            f = follower[node]
            if f >= 0:
                indegree[f] -= 1
                if not indegree[f] and f not in blocked:
                    order.append(f)
            for s in others.get(node, ()):
                indegree[s] -= 1
                if not indegree[s] and s not in blocked:
                    order.append(s)
        if len(order) == n:
            return order, []
        done = set(order)
        return order, [i for i in range(n) if i not in done]

    def describe(self, node: int) -> str:
        t = self.nodes[node]
        tb_id = self.tbs[t.tb][1].id
        return f"rank {t.rank} tb {tb_id} step {t.first} ({t.type.value})"


def _transmissions(rank: int, tb_index: int, tb: Threadblock, first_node: int) -> list[Transmission]:
    """Emulate the runtime parser and the kernel's step counter for one threadblock.

    A ``nop`` only adds its dependency to the next step's; consecutive ``re``
    steps with the same destination and source buffer and no dependency fuse
    (up to 16, the runtime's limit). The step counter advances by one per
    transmission, plus one per inherited nop dependency and per fused ``re``;
    a flagged transmission publishes its final value.
    """
    out: list[Transmission] = []
    waits: list[tuple[int, int]] = []
    current: list[Any] | None = None  # type, first, last, count, srcbuf, srcoffs, dstbuf, dstoff, waits, hasdep
    chain: tuple[Buffer, int, Buffer] | None = None
    total_re = 0
    counter = 0
    node = first_node

    def finish(c: list[Any]) -> None:
        nonlocal counter, node
        kind, first, last, count, srcbuf, srcoffs, dstbuf, dstoff, deps, hasdep = c
        if deps:
            counter += len(deps) - 1
        if len(srcoffs) > 1:
            counter += len(srcoffs) - 1
        out.append(Transmission(node, rank, tb_index, node - first_node, kind, first, last, count, srcbuf,
                                tuple(srcoffs), dstbuf, dstoff, deps, counter if hasdep else None))
        counter += 1
        node += 1

    for pos, st in enumerate(tb.steps):
        kind = st.type
        if st.depid >= 0:
            waits.append((st.depid, st.deps))
        if kind is StepType.NOP:
            continue
        is_re = kind is StepType.REDUCE
        if not is_re:  # nothing fuses with it: a transmission of its own, made at once
            if current is not None:
                finish(current)
                current = None
            deps = tuple(waits)
            waits = []
            if len(deps) > 1:
                counter += len(deps) - 1
            out.append(Transmission(node, rank, tb_index, node - first_node, kind, pos, pos, st.cnt, st.srcbuf,
                                    (st.srcoff,), st.dstbuf, st.dstoff, deps, counter if st.hasdep else None))
            counter += 1
            node += 1
            chain = None
            continue
        if is_re and current is not None and st.depid < 0 and chain == (st.dstbuf, st.dstoff, st.srcbuf):
            current[2], current[3], current[9] = pos, st.cnt, st.hasdep
            current[5].append(st.srcoff)
        else:
            if current is not None:
                finish(current)
            current = [kind, pos, pos, st.cnt, st.srcbuf, [st.srcoff], st.dstbuf, st.dstoff, tuple(waits),
                       st.hasdep]
            waits = []
        if is_re:
            total_re += 1
            chain = None if (st.hasdep or total_re == MAX_REDUCE_FUSION) else (st.dstbuf, st.dstoff, st.srcbuf)
        else:
            chain = None
    if current is not None:
        finish(current)
    return out


def build_machine(program: Program) -> Machine:
    """Transmissions and the happens-before graph of a structurally sound program.

    Call only when the static rules found no fatal violation (unique tb ids,
    one threadblock per connection, valid peers).
    """
    tbs: list[tuple[int, Threadblock]] = []
    nodes: list[Transmission] = []
    tb_nodes: list[tuple[int, ...]] = []
    index_of: dict[tuple[int, int], int] = {}
    for gpu in program.gpus:
        for tb in gpu.threadblocks:
            g = len(tbs)
            tbs.append((gpu.id, tb))
            index_of.setdefault((gpu.id, tb.id), g)
            trans = _transmissions(gpu.id, g, tb, len(nodes))
            nodes.extend(trans)
            tb_nodes.append(tuple(range(trans[0].node, trans[0].node + len(trans))) if trans else ())

    sender_of: dict[tuple[int, int, int], int] = {}
    receiver_of: dict[tuple[int, int, int], int] = {}
    for g, (rank, tb) in enumerate(tbs):
        if tb.send >= 0:
            sender_of.setdefault((rank, tb.send, tb.chan), g)
        if tb.recv >= 0:
            receiver_of.setdefault((tb.recv, rank, tb.chan), g)
    matching_send: dict[int, int] = {}
    matching_recv: dict[int, int] = {}
    for key, g_send in sender_of.items():
        g_recv = receiver_of.get(key)
        if g_recv is None:
            continue
        sends = [n for n in tb_nodes[g_send] if nodes[n].type in SENDING]
        recvs = [n for n in tb_nodes[g_recv] if nodes[n].type in RECEIVING]
        for s, r in zip(sends, recvs, strict=False):
            matching_send[r] = s
            matching_recv[s] = r

    # per threadblock: the published counters (increasing) and their nodes, to find a wait's satisfier by bisection
    flags: list[list[int]] = []
    flag_nodes: list[list[int]] = []
    for g in range(len(tbs)):
        values: list[int] = []
        owners: list[int] = []
        for n in tb_nodes[g]:
            flag = nodes[n].publish
            if flag is not None:
                values.append(flag)
                owners.append(n)
        flags.append(values)
        flag_nodes.append(owners)
    preds: list[tuple[int, ...]] = []
    blocked: dict[int, str] = {}
    for t in nodes:
        node = t.node
        p: list[int] = [node - 1] if t.seq else []
        if t.waits:
            for depid, deps in t.waits:
                target = index_of.get((t.rank, depid))
                if target is None:
                    blocked[node] = f"waits for tb {depid}, which does not exist on rank {t.rank}"
                    continue
                k = bisect_left(flags[target], deps)
                if k == len(flags[target]):
                    blocked[node] = (f"waits for tb {depid} to pass step {deps}, but no step of that tb at or after "
                                     f"it has hasdep=1")
                    continue
                p.append(flag_nodes[target][k])
        if t.type in RECEIVING:
            sender = matching_send.get(node)
            if sender is None:
                tb = tbs[t.tb][1]
                blocked[node] = f"receives from rank {tb.recv} on channel {tb.chan} but no send matches it"
            else:
                p.append(sender)
        preds.append(tuple(p) if len(p) < 2 else tuple(dict.fromkeys(p)))
    return Machine(program=program, tbs=tuple(tbs), nodes=tuple(nodes), tb_nodes=tuple(tb_nodes),
                   preds=tuple(preds), blocked=blocked, matching_send=matching_send, matching_recv=matching_recv)
