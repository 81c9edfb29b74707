"""verify_program: static rules, deadlock freedom and the data result of an MSCCL program.

The program is checked against one dialect's parser rules and the rules the
parsers do not check (:mod:`taccl_py.msccl.rules`), then executed on symbolic
data in an order the runtime could take (:mod:`taccl_py.msccl.machine`): every
buffer slot holds the set of contributions it combines. Two accesses to one
slot that no chain of threadblock order, dependency or send/receive orders
are reported as a data race, since the runtime may run them either way. At the
end every rank's output is compared with the collective's definition, for each
buffer mode (in-place, out-of-place) the program declares.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taccl_py.errors import InputError
from taccl_py.msccl.ir import DIALECTS, Buffer, Program, StepType
from taccl_py.msccl.machine import Machine, Transmission, build_machine
from taccl_py.msccl.report import DATA_RULES, FATAL_RULES, VerifyReport, Violation
from taccl_py.msccl.rules import check_rules
from taccl_py.msccl.semantics import DataSpec, Garbage, Value, reduce_values

__all__ = ["VerifyReport", "Violation", "execute_program", "find_deadlock", "verify_program"]

WARNING_RULES = frozenset({"dependency-flag", "never-selected", "rarely-selected"})
"""Reported in ``notes``: legal for the runtime but probably not what the author meant."""

_RACE_CHECK_LIMIT = 60_000_000
"""Above this many (transmission x threadblock) entries the race check is skipped (memory)."""

_MAX_DATA_ERRORS = 20

_MAX_SYMBOLIC_CONTRIBUTIONS = 1_000_000
"""Above this many (rank x input chunk) contributions the data result is not checked."""


def verify_program(program: Program, dialect: str | None = None) -> VerifyReport:
    """Check ``program`` against ``dialect`` (``v1``/``v2``; detected when None) and execute it.

    ``valid``: no rule is broken and no threadblock can hang; ``correct``:
    valid, race-free and every rank ends with the collective's result.
    """
    dialect = dialect or program.detected_dialect
    if dialect not in DIALECTS:
        raise InputError(f"unknown dialect {dialect!r} (choose v1 or v2)", where="--dialect")
    found = check_rules(program, dialect)
    notes = [str(v) for v in found if v.rule in WARNING_RULES]
    errors = [v for v in found if v.rule not in WARNING_RULES]
    modes: list[str] = []
    if not any(v.rule in FATAL_RULES for v in errors):
        machine = build_machine(program)
        deadlock = find_deadlock(machine)
        if deadlock is not None:
            errors.append(deadlock)
        else:
            for in_place in _modes(program, dialect):
                modes.append("inplace" if in_place else "outofplace")
                outcome = execute_program(machine, in_place)
                errors.extend(outcome.errors)
                notes.extend(outcome.notes)
    else:
        notes.append("execution skipped: the program breaks a rule that makes running it meaningless")
    valid = not any(v.rule not in DATA_RULES for v in errors)
    correct = valid and not errors and bool(modes)
    return VerifyReport(valid=valid, correct=correct, errors=tuple(errors), dialect=dialect, modes=tuple(modes),
                        notes=tuple(dict.fromkeys(notes)))


def _modes(program: Program, dialect: str) -> list[bool]:
    """Buffer modes the runtime may call the program in (True: in-place)."""
    if dialect == "v2" and program.outofplace is not None:
        modes = [m for m, flag in ((True, program.inplace), (False, program.outofplace)) if flag]
        return modes or [bool(program.inplace)]
    return [bool(program.inplace)]


# ------------------------------------------------------------------ deadlock
def find_deadlock(machine: Machine) -> Violation | None:
    """A violation describing why some transmissions can never run (a wait cycle or an unmet wait)."""
    _, stuck = machine.topological_order()
    if not stuck:
        return None
    stuck_set = set(stuck)
    blocked = [n for n in stuck if n in machine.blocked]
    if blocked:
        node = blocked[0]
        t = machine.nodes[node]
        return Violation("deadlock", f"{len(stuck)} step(s) never run: {machine.describe(node)} "
                         f"{machine.blocked[node]}", rank=t.rank, tb=machine.tbs[t.tb][1].id, step=t.first)
    cycle = _cycle(machine, stuck[0], stuck_set)
    t = machine.nodes[cycle[0]]
    chain = " <- ".join(machine.describe(n) for n in cycle[:6]) + (" <- ..." if len(cycle) > 6 else "")
    return Violation("deadlock", f"{len(stuck)} step(s) never run; they wait on each other in a cycle: {chain}",
                     rank=t.rank, tb=machine.tbs[t.tb][1].id, step=t.first)


def _cycle(machine: Machine, start: int, stuck: set[int]) -> list[int]:
    seen: dict[int, int] = {}
    path: list[int] = []
    node = start
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = next(p for p in machine.preds[node] if p in stuck)
    return path[seen[node]:]


# ----------------------------------------------------------------- execution
@dataclass(frozen=True)
class Outcome:
    """Data errors (wrong result, races) found by executing one buffer mode."""

    errors: tuple[Violation, ...]
    notes: tuple[str, ...]
    memory: dict[tuple[int, Buffer, int], Value]


def execute_program(machine: Machine, in_place: bool) -> Outcome:
    """Run a deadlock-free program on symbolic data in one buffer mode and check the result."""
    program = machine.program
    kind = program.kind
    if kind is None:
        return Outcome((Violation("unchecked-collective", f"coll={program.coll!r} has no definition to check the "
                                  "result against"),), (), {})
    spec = DataSpec(kind, program.ngpus, program.nchunksperloop, in_place, program.root)
    problem = spec.problem()
    if problem:
        return Outcome((Violation("wrong-result", problem),), (), {})
    if spec.ngpus * max(spec.input_chunks, 1) > _MAX_SYMBOLIC_CONTRIBUTIONS:
        return Outcome((Violation("unchecked-collective", f"{spec.ngpus} ranks x {spec.input_chunks} chunks is too "
                                  "large to execute symbolically"),), (), {})
    run = _Execution(machine, spec)
    run.run()
    return Outcome(tuple(run.errors + run.check_result()), tuple(run.notes), run.memory)


class _Execution:
    """Symbolic execution with happens-before bookkeeping (vector clocks over threadblocks)."""

    def __init__(self, machine: Machine, spec: DataSpec) -> None:
        self.machine = machine
        self.spec = spec
        self.memory: dict[tuple[int, Buffer, int], Value] = {}
        self.payload: dict[int, tuple[Value, ...]] = {}
        self.errors: list[Violation] = []
        self.notes: list[str] = []
        self.races = 0
        for rank in range(spec.ngpus):
            for buffer, offset, value in spec.initial(rank):
                self.memory[(rank, buffer, offset)] = value
        num_tbs = len(machine.tbs)
        self.track = len(machine.nodes) * max(num_tbs, 1) <= _RACE_CHECK_LIMIT
        if not self.track:
            self.notes.append("data-race check skipped: the program is too large for it")
        longest = max((len(n) for n in machine.tb_nodes), default=0)
        dtype = np.int16 if longest < 32000 else np.int32
        self.clock = np.zeros((len(machine.nodes), num_tbs), dtype=dtype) if self.track else None
        self.last_write: dict[tuple[int, Buffer, int], int] = {}
        self.readers: dict[tuple[int, Buffer, int], list[int]] = {}

    def run(self) -> None:
        order, _ = self.machine.topological_order()
        for node in order:
            if self.clock is not None:
                preds = self.machine.preds[node]
                if preds:
                    self.clock[node] = self.clock[list(preds)].max(axis=0)
                t = self.machine.nodes[node]
                self.clock[node, t.tb] = t.seq + 1
            self._step(self.machine.nodes[node])

    # -- memory with race detection
    def _where(self, t: Transmission) -> str:
        return self.machine.describe(t.node)

    def _ordered(self, earlier: int, later: int) -> bool:
        if earlier == later or self.clock is None:
            return True
        e = self.machine.nodes[earlier]
        return int(self.clock[later, e.tb]) > e.seq

    def _race(self, t: Transmission, other: int, slot: tuple[int, Buffer, int], what: str) -> None:
        self.races += 1
        if self.races > _MAX_DATA_ERRORS:
            return
        _, buffer, offset = slot
        self.errors.append(Violation(
            "data-race", f"{what} of {buffer.value}[{offset}] is not ordered with {self.machine.describe(other)} "
            "(no dependency, threadblock order or send/receive chain between them)",
            rank=t.rank, tb=self.machine.tbs[t.tb][1].id, step=t.first))

    def read(self, t: Transmission, buffer: Buffer, offset: int, count: int) -> list[Value]:
        values: list[Value] = []
        for k in range(count):
            b, o = self.spec.canonical(t.rank, buffer, offset + k)
            slot = (t.rank, b, o)
            w = self.last_write.get(slot)
            if w is not None and not self._ordered(w, t.node):
                self._race(t, w, slot, "read")
            self.readers.setdefault(slot, []).append(t.node)
            value = self.memory.get(slot)
            if value is None:
                value = Garbage(f"{self._where(t)} reads {buffer.value}[{offset + k}] before anything wrote it")
            values.append(value)
        return values

    def write(self, t: Transmission, buffer: Buffer, offset: int, values: list[Value] | tuple[Value, ...]) -> None:
        for k, value in enumerate(values):
            b, o = self.spec.canonical(t.rank, buffer, offset + k)
            slot = (t.rank, b, o)
            w = self.last_write.get(slot)
            if w is not None and not self._ordered(w, t.node):
                self._race(t, w, slot, "write")
            for r in self.readers.pop(slot, ()):
                if not self._ordered(r, t.node):
                    self._race(t, r, slot, "write")
                    break
            self.last_write[slot] = t.node
            self.memory[slot] = value

    def _step(self, t: Transmission) -> None:
        kind = t.type
        where = self._where(t)
        received: tuple[Value, ...] = ()
        if kind.receives:
            sender = self.machine.matching_send[t.node]
            received = self.payload.pop(sender, ())
            if len(received) != t.count:
                received = tuple(received[:t.count]) + tuple(
                    Garbage(f"{where} receives more than was sent") for _ in range(t.count - len(received)))
        out: list[Value] | tuple[Value, ...] | None = None
        if kind is StepType.SEND:
            out = self.read(t, t.srcbuf, t.srcoffs[0], t.count)
        elif kind is StepType.RECV:
            self.write(t, t.dstbuf, t.dstoff, received)
        elif kind is StepType.RECV_COPY_SEND:
            self.write(t, t.dstbuf, t.dstoff, received)
            out = received
        elif kind in (StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_COPY_SEND):
            local = self.read(t, t.srcbuf, t.srcoffs[0], t.count)
            combined = [reduce_values(a, b, where, self.spec.input_chunks) for a, b in zip(received, local, strict=True)]
            if kind is not StepType.RECV_REDUCE_SEND:
                self.write(t, t.dstbuf, t.dstoff, combined)
            if kind is not StepType.RECV_REDUCE_COPY:
                out = combined
        elif kind is StepType.COPY:
            self.write(t, t.dstbuf, t.dstoff, self.read(t, t.srcbuf, t.srcoffs[0], t.count))
        elif kind is StepType.REDUCE:
            acc = self.read(t, t.dstbuf, t.dstoff, t.count)
            for off in t.srcoffs:
                acc = [reduce_values(a, b, where, self.spec.input_chunks)
                       for a, b in zip(acc, self.read(t, t.srcbuf, off, t.count), strict=True)]
            self.write(t, t.dstbuf, t.dstoff, acc)
        if out is not None:
            self.payload[t.node] = tuple(out)

    # -- post-condition
    def check_result(self) -> list[Violation]:
        spec = self.spec
        errors: list[Violation] = []
        wrong = 0
        mode = "in-place" if spec.in_place else "out-of-place"
        for rank in range(spec.ngpus):
            for offset, want in spec.expected(rank):
                b, o = spec.canonical(rank, Buffer.OUTPUT, offset)
                have = self.memory.get((rank, b, o))
                if have == want:
                    continue
                wrong += 1
                if wrong > _MAX_DATA_ERRORS:
                    continue
                if have is None:
                    why = "was never written"
                elif isinstance(have, Garbage):
                    why = f"holds garbage: {have.reason}"
                elif spec.kind.value in ("allreduce", "reducescatter", "reduce") and have & want == have:
                    why = f"is missing {spec.describe(want & ~have)}"
                else:
                    why = f"holds {spec.describe(have)} instead of {spec.describe(want)}"
                errors.append(Violation("wrong-result", f"{mode}: output chunk {offset} {why}", rank=rank))
        if wrong > _MAX_DATA_ERRORS:
            errors.append(Violation("wrong-result", f"{mode}: ... {wrong - _MAX_DATA_ERRORS} more wrong output "
                                    "chunk(s)"))
        return errors
