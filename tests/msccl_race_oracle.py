"""The old all-pairs data-race check, kept as the oracle for the verifier's per-slot check.

It builds the full happens-before relation of a program (a vector clock over
all threadblocks for every transmission, as the verifier once did) and then
compares *every* two accesses to each buffer slot, at least one a write. The
verifier instead compares each access only with the slot's last write and the
reads since, with clocks it keeps only while needed; both must find races in
exactly the same slots. Quadratic in memory: for tests only.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from taccl_py.msccl.ir import Buffer, StepType
from taccl_py.msccl.machine import Machine, Transmission
from taccl_py.msccl.semantics import DataSpec

Slot = tuple[int, Buffer, int]


def accesses(t: Transmission, spec: DataSpec) -> tuple[list[Slot], list[Slot]]:
    """(slots read, slots written) by one transmission, after in-place aliasing."""
    def slots(buffer: Buffer, offsets: tuple[int, ...] | list[int]) -> list[Slot]:
        out = []
        for off in offsets:
            for k in range(t.count):
                b, o = spec.canonical(t.rank, buffer, off + k)
                out.append((t.rank, b, o))
        return out

    kind = t.type
    reads: list[Slot] = []
    writes: list[Slot] = []
    if kind in (StepType.SEND, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_COPY_SEND,
                StepType.COPY):
        reads = slots(t.srcbuf, t.srcoffs[:1])
    if kind is StepType.REDUCE:
        reads = slots(t.dstbuf, [t.dstoff]) + slots(t.srcbuf, t.srcoffs)
    if kind in (StepType.RECV, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_COPY_SEND,
                StepType.COPY, StepType.REDUCE):
        writes = slots(t.dstbuf, [t.dstoff])
    return reads, writes


def happens_before(machine: Machine) -> np.ndarray:
    """clock[n, g]: how many transmissions of threadblock g complete before transmission n completes."""
    order, stuck = machine.topological_order()
    assert not stuck, "the oracle needs a deadlock-free program"
    clock = np.zeros((len(machine.nodes), max(len(machine.tbs), 1)), dtype=np.int32)
    for node in order:
        preds = machine.preds[node]
        if preds:
            clock[node] = clock[list(preds)].max(axis=0)
        t = machine.nodes[node]
        clock[node, t.tb] = t.seq + 1
    return clock


def racy_slots(machine: Machine, in_place: bool) -> set[Slot]:
    """Every slot with two accesses, at least one a write, that no chain orders."""
    program = machine.program
    assert program.kind is not None
    spec = DataSpec(program.kind, program.ngpus, program.nchunksperloop, in_place, program.root)
    clock = happens_before(machine)
    by_slot: dict[Slot, list[tuple[int, bool]]] = defaultdict(list)
    for t in machine.nodes:
        reads, writes = accesses(t, spec)
        for slot in reads:
            by_slot[slot].append((t.node, False))
        for slot in writes:
            by_slot[slot].append((t.node, True))

    def ordered(a: int, b: int) -> bool:
        ta, tb = machine.nodes[a], machine.nodes[b]
        return bool(clock[b, ta.tb] > ta.seq or clock[a, tb.tb] > tb.seq)

    found: set[Slot] = set()
    for slot, seq in by_slot.items():
        for i, (a, a_writes) in enumerate(seq):
            if slot in found:
                break
            for b, b_writes in seq[i + 1:]:
                if a != b and (a_writes or b_writes) and not ordered(a, b):
                    found.add(slot)
                    break
    return found
