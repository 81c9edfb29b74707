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

from collections import deque
from dataclasses import dataclass

from taccl_py.msccl.ir import MAX_REDUCE_FUSION, Buffer, Program, StepType, Threadblock

__all__ = ["Machine", "Transmission", "build_machine"]


@dataclass(frozen=True, slots=True)
class Transmission:
    """One instruction of the runtime. ``first``/``last`` are the XML positions it covers."""

    node: int
    rank: int
    tb: int
    """Global threadblock index (position in ``Machine.tbs``)."""
    seq: int
    type: StepType
    first: int
    last: int
    count: int
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
        """(nodes in a runnable order, nodes that can never run). Deterministic."""
        n = len(self.nodes)
        indegree = [len(p) for p in self.preds]
        succs: list[list[int]] = [[] for _ in range(n)]
        for node, preds in enumerate(self.preds):
            for p in preds:
                succs[p].append(node)
        ready = deque(i for i in range(n) if indegree[i] == 0 and i not in self.blocked)
        order: list[int] = []
        while ready:
            node = ready.popleft()
            order.append(node)
            for s in succs[node]:
                indegree[s] -= 1
                if indegree[s] == 0 and s not in self.blocked:
                    ready.append(s)
        done = set(order)
        return order, [i for i in range(n) if i not in done]

    def describe(self, node: int) -> str:
        t = self.nodes[node]
        tb_id = self.tbs[t.tb][1].id
        return f"rank {t.rank} tb {tb_id} step {t.first} ({t.type.value})"


@dataclass
class _Pending:
    """A transmission being assembled from steps (``re`` chains grow it)."""

    type: StepType
    first: int
    last: int
    count: int
    srcbuf: Buffer
    srcoffs: list[int]
    dstbuf: Buffer
    dstoff: int
    waits: tuple[tuple[int, int], ...]
    hasdep: int


def _transmissions(rank: int, tb_index: int, tb: Threadblock, first_node: int) -> list[Transmission]:
    """Emulate the runtime parser and the kernel's step counter for one threadblock."""
    all_deps: list[tuple[int, int]] = []
    pointer = 0
    chain: tuple[Buffer, int, Buffer] | None = None
    total_re = 0
    pending: list[_Pending] = []
    for pos, st in enumerate(tb.steps):
        if st.depid >= 0:
            all_deps.append((st.depid, st.deps))
        if st.type is StepType.NOP:
            continue
        continuing = (st.type is StepType.REDUCE and chain == (st.dstbuf, st.dstoff, st.srcbuf) and st.depid < 0
                      and pending)
        if continuing:
            last = pending[-1]
            last.last, last.count, last.hasdep = pos, st.cnt, st.hasdep
            last.srcoffs.append(st.srcoff)
        else:
            pending.append(_Pending(st.type, pos, pos, st.cnt, st.srcbuf, [st.srcoff], st.dstbuf, st.dstoff,
                                    tuple(all_deps[pointer:]), st.hasdep))
            pointer = len(all_deps)
        if st.type is StepType.REDUCE:
            total_re += 1
            chain = None if (st.hasdep or total_re == MAX_REDUCE_FUSION) else (st.dstbuf, st.dstoff, st.srcbuf)
        else:
            chain = None
    out: list[Transmission] = []
    counter = 0
    for seq, p in enumerate(pending):
        if p.waits:
            counter += len(p.waits) - 1
        if p.type is StepType.REDUCE:
            counter += len(p.srcoffs) - 1
        out.append(Transmission(node=first_node + seq, rank=rank, tb=tb_index, seq=seq, type=p.type, first=p.first,
                                last=p.last, count=p.count, srcbuf=p.srcbuf, srcoffs=tuple(p.srcoffs),
                                dstbuf=p.dstbuf, dstoff=p.dstoff, waits=p.waits,
                                publish=counter if p.hasdep else None))
        counter += 1
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
            tb_nodes.append(tuple(t.node for t in trans))

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
        sends = [n for n in tb_nodes[g_send] if nodes[n].type.sends]
        recvs = [n for n in tb_nodes[g_recv] if nodes[n].type.receives]
        for s, r in zip(sends, recvs, strict=False):
            matching_send[r] = s
            matching_recv[s] = r

    published = [[(n, flag) for n in tb_nodes[g] if (flag := nodes[n].publish) is not None]
                 for g in range(len(tbs))]
    preds: list[tuple[int, ...]] = []
    blocked: dict[int, str] = {}
    for t in nodes:
        p: list[int] = []
        if t.seq > 0:
            p.append(tb_nodes[t.tb][t.seq - 1])
        for depid, deps in t.waits:
            target = index_of.get((t.rank, depid))
            if target is None:
                blocked[t.node] = f"waits for tb {depid}, which does not exist on rank {t.rank}"
                continue
            satisfier = next((n for n, flag in published[target] if flag >= deps), None)
            if satisfier is None:
                blocked[t.node] = (f"waits for tb {depid} to pass step {deps}, but no step of that tb at or after "
                                   f"it has hasdep=1")
                continue
            p.append(satisfier)
        if t.type.receives:
            sender = matching_send.get(t.node)
            if sender is None:
                tb = tbs[t.tb][1]
                blocked[t.node] = f"receives from rank {tb.recv} on channel {tb.chan} but no send matches it"
            else:
                p.append(sender)
        preds.append(tuple(dict.fromkeys(p)))
    return Machine(program=program, tbs=tuple(tbs), nodes=tuple(nodes), tb_nodes=tuple(tb_nodes),
                   preds=tuple(preds), blocked=blocked, matching_send=matching_send, matching_recv=matching_recv)
