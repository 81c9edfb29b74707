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
from functools import cached_property
from typing import Protocol

import numpy as np

from taccl_py.errors import InputError
from taccl_py.msccl.ir import DIALECTS, Buffer, Program, StepType
from taccl_py.msccl.machine import RECEIVING, Machine, Transmission, build_machine
from taccl_py.msccl.report import DATA_RULES, FATAL_RULES, VerifyReport, Violation
from taccl_py.msccl.rules import check_rules
from taccl_py.msccl.semantics import DataSpec, Garbage, Value, reduce_values

__all__ = ["FAST_MIN_STEPS", "Checks", "PythonChecks", "VerifyReport", "Violation", "checked_dialect", "checked_report",
           "data_spec", "execute_program", "find_deadlock", "race_budget", "verify_program"]

WARNING_RULES = frozenset({"dependency-flag", "never-selected", "rarely-selected"})
"""Reported in ``notes``: legal for the runtime but probably not what the author meant."""


_MAX_DATA_ERRORS = 20

_RACE_SEARCH_FACTOR = 64
_RACE_SEARCH_BASE = 10_000_000
"""The race check's searches may visit this many transmissions in all (factor x program size + base)."""

_MAX_SYMBOLIC_CONTRIBUTIONS = 1_000_000
"""Above this many (rank x input chunk) contributions the data result is not checked (the Python execution)."""

FAST_MAX_SYMBOLIC_CONTRIBUTIONS = 16_000_000
"""The same for the compiled execution (:mod:`taccl_py.msccl.fast_execute`), whose contribution sets are ids and
rows of 64-bit words (memory linear in the program): an Allreduce on 1,024 ranks with 1,024 chunks each
(1,048,576) is checked there; a program it finds wrong is explained by the Python execution, within its limit."""


FAST_MIN_STEPS = 50_000
"""From this many steps :func:`verify_program` runs the compiled checks (:mod:`taccl_py.msccl.fast_verify`)."""


class Checks(Protocol):
    """The checks that run the program: deadlock freedom, then the data result in one buffer mode."""

    def deadlock(self) -> Violation | None: ...

    def execute(self, in_place: bool) -> Outcome: ...


class PythonChecks:
    """:class:`Checks` on the Python machine (:func:`build_machine`, made once)."""

    def __init__(self, program: Program) -> None:
        self.program = program

    @cached_property
    def machine(self) -> Machine:
        return build_machine(self.program)

    def deadlock(self) -> Violation | None:
        return find_deadlock(self.machine)

    def execute(self, in_place: bool, limit: int | None = None) -> Outcome:
        """``limit``: the most contributions executed (default the Python execution's own)."""
        return execute_program(self.machine, in_place, limit)


def verify_program(program: Program, dialect: str | None = None) -> VerifyReport:
    """Check ``program`` against ``dialect`` (``v1``/``v2``; detected when None) and execute it.

    ``valid``: no rule is broken and no threadblock can hang; ``correct``:
    valid, race-free and every rank ends with the collective's result. From
    :data:`FAST_MIN_STEPS` steps the same checks run compiled, with the same
    report (:func:`taccl_py.msccl.fast_verify.verify_arrays`).
    """
    dialect = checked_dialect(program, dialect)
    if program.num_steps >= FAST_MIN_STEPS:
        from taccl_py.msccl.arrays import program_arrays
        from taccl_py.msccl.fast_verify import verify_arrays

        arrays = program_arrays(program)
        if arrays is not None:
            return verify_arrays(arrays, dialect)
    return checked_report(program, dialect, check_rules(program, dialect), PythonChecks(program))


def checked_dialect(program: Program, dialect: str | None) -> str:
    """``dialect``, or the program's own when None; an unknown one is an :class:`InputError`."""
    dialect = dialect or program.detected_dialect
    if dialect not in DIALECTS:
        raise InputError(f"unknown dialect {dialect!r} (choose v1 or v2)", where="--dialect")
    return dialect


def checked_report(program: Program, dialect: str, found: list[Violation], checks: Checks) -> VerifyReport:
    """The report of a program whose static rules found ``found``; ``checks`` run it when nothing fatal was found.

    ``program`` is read for its ``<algo>`` attributes only.
    """
    notes = [str(v) for v in found if v.rule in WARNING_RULES]
    errors = [v for v in found if v.rule not in WARNING_RULES]
    modes: list[str] = []
    if not any(v.rule in FATAL_RULES for v in errors):
        deadlock = checks.deadlock()
        if deadlock is not None:
            errors.append(deadlock)
        else:
            for in_place in _modes(program, dialect):
                modes.append("inplace" if in_place else "outofplace")
                outcome = checks.execute(in_place)
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
    racy_slots: frozenset[tuple[int, Buffer, int]] = frozenset()
    """Every (rank, buffer, offset) with two unordered conflicting accesses (errors list at most 20)."""


def execute_program(machine: Machine, in_place: bool, limit: int | None = None) -> Outcome:
    """Run a deadlock-free program on symbolic data in one buffer mode and check the result (``limit``: as
    :func:`data_spec`'s)."""
    spec = data_spec(machine.program, in_place, limit)
    if not isinstance(spec, DataSpec):
        return spec
    run = _Execution(machine, spec)
    run.run()
    errors = run.errors + run.check_result()
    if run.race_check_skipped:
        errors.append(Violation("unchecked-races", run.race_check_skipped))
    return Outcome(tuple(errors), tuple(run.notes), run.memory, frozenset(run.racy_slots))


def data_spec(program: Program, in_place: bool, limit: int | None = None) -> DataSpec | Outcome:
    """What the result must be in one buffer mode, or the outcome when it cannot be checked (read: ``<algo>``;
    ``limit``: the most contributions, ranks x input chunks, the execution checks; default the Python one's)."""
    kind = program.kind
    if kind is None:
        return Outcome((Violation("unchecked-collective", f"coll={program.coll!r} has no definition to check the "
                                  "result against"),), (), {})
    spec = DataSpec(kind, program.ngpus, program.nchunksperloop, in_place, program.root)
    problem = spec.problem()
    if problem:
        return Outcome((Violation("wrong-result", problem),), (), {})
    if spec.ngpus * max(spec.input_chunks, 1) > (_MAX_SYMBOLIC_CONTRIBUTIONS if limit is None else limit):
        return Outcome((Violation("unchecked-collective", f"{spec.ngpus} ranks x {spec.input_chunks} chunks is too "
                                  "large to execute symbolically"),), (), {})
    return spec


def race_budget(steps: int) -> int:
    """Transmissions the race check's searches may visit in all, for a machine of ``steps`` transmissions."""
    return _RACE_SEARCH_FACTOR * steps + _RACE_SEARCH_BASE


class _HappensBefore:
    """Does one transmission complete before another starts on every run? Exact, in linear memory.

    The race check only asks whether an earlier access (in the execution's
    topological order) happens before the transmission being executed. Most
    answers are immediate: the same threadblock, a direct wait, or a chain of
    the rank's own waits (vector clocks over the rank's threadblocks, made
    only when first needed: orderings between a rank's steps are mostly its
    own dependencies). The rest search backwards from the later transmission
    over the whole happens-before graph. A search never enters a transmission that cannot follow the
    earlier one (the topological order puts it before, or its level or
    height rules it out) and stops at the earlier one's threadblock (its
    position there decides). A search that finds nothing is a race. The
    searches share a budget of visited transmissions (a multiple of the
    program's size); once it is spent, ``exhausted`` is set and every further
    question is answered "ordered" (the check is then incomplete, and the
    verifier says so).
    """

    def __init__(self, machine: Machine, order: list[int]) -> None:
        self.machine = machine
        self.order = order
        self.position = [0] * len(machine.nodes)
        for i, node in enumerate(order):
            self.position[node] = i
        self.searches = 0
        self.budget = race_budget(len(machine.nodes))
        self.exhausted = False

    @cached_property
    def _labels(self) -> tuple[list[int], list[int]]:
        """Per transmission: the longest chain of waits below it (level) and above it (height).

        If A happens before B, A's level is below B's and its height above
        B's: a search for A never needs to enter a transmission failing that.
        Computed on the first search only (most programs need none).
        """
        preds = self.machine.preds
        level = [0] * len(preds)
        for node in self.order:
            best = 0
            for p in preds[node]:
                if level[p] > best:
                    best = level[p]
            level[node] = best + 1
        height = [1] * len(preds)
        for node in reversed(self.order):
            h = height[node] + 1
            for p in preds[node]:
                if height[p] < h:
                    height[p] = h
        return level, height

    def ordered(self, earlier: int, later: int) -> bool:
        if earlier == later:
            return True
        nodes = self.machine.nodes
        e, t = nodes[earlier], nodes[later]
        if e.tb == t.tb:
            return e.seq < t.seq
        if earlier in self.machine.preds[later]:
            return True
        if self.exhausted:
            return True
        local, index = self._local_clocks
        if e.rank == t.rank and local[later][index[e.tb]] > e.seq:
            return True
        self.searches += 1
        found, visited = self._search(earlier, later)
        self.budget -= visited
        if self.budget < 0:
            self.exhausted = True
        return found

    @cached_property
    def _local_clocks(self) -> tuple[list[np.ndarray], list[int]]:
        """Per transmission, how many transmissions of each threadblock of its rank precede it through the
        rank's own waits (threadblock order and dependencies; receives' senders are not followed).

        (clocks, index of each threadblock among its rank's). A transmission
        without dependencies shares its predecessor's clock (its own entry is
        implied by its position), so arrays are made only where dependencies
        join threadblocks. Computed on the first question the quick answers
        cannot settle.
        """
        machine = self.machine
        nodes, preds = machine.nodes, machine.preds
        index = [0] * len(machine.tbs)
        sizes: dict[int, int] = {}
        for g, (rank, _) in enumerate(machine.tbs):
            index[g] = sizes.get(rank, 0)
            sizes[rank] = index[g] + 1
        dtype = np.int16 if max((len(tb) for tb in machine.tb_nodes), default=0) < 32000 else np.int32
        empty = {rank: np.zeros(size, dtype=dtype) for rank, size in sizes.items()}
        clocks: list[np.ndarray] = [empty[t.rank] for t in nodes]
        for node in self.order:
            t = nodes[node]
            ps = preds[node]
            first = 1 if t.seq else 0
            clock = clocks[node - 1] if t.seq else clocks[node]
            fresh = False
            for p in ps[first:]:
                q = nodes[p]
                if q.rank != t.rank:
                    continue
                if not fresh:
                    clock = clock.copy()
                    fresh = True
                np.maximum(clock, clocks[p], out=clock)
                g = index[q.tb]
                if clock[g] <= q.seq:
                    clock[g] = q.seq + 1
            clocks[node] = clock
        return clocks, index

    def _search(self, earlier: int, later: int) -> tuple[bool, int]:
        """(found ``earlier`` behind ``later``, transmissions visited)."""
        nodes, preds, position = self.machine.nodes, self.machine.preds, self.position
        level, height = self._labels
        e = nodes[earlier]
        tb, seq = e.tb, e.seq
        floor, low, high = position[earlier], level[earlier], height[earlier]
        stack = [later]
        seen = {later}
        while stack:
            for p in preds[stack.pop()]:
                if p in seen:
                    continue
                seen.add(p)
                q = nodes[p]
                if q.tb == tb:
                    if q.seq >= seq:
                        return True, len(seen)
                    continue  # before ``earlier`` in its threadblock: nothing it waits for follows it
                if position[p] > floor and level[p] > low and height[p] < high:
                    stack.append(p)
        return False, len(seen)


class _Execution:
    """Symbolic execution of a deadlock-free program, checking every access for races on the way.

    Races: each slot remembers its last write and the reads since; a read
    must happen after the last write, a write after the last write and every
    read since. By transitivity that orders every two conflicting accesses
    of the slot, so no other pair needs checking.
    """

    def __init__(self, machine: Machine, spec: DataSpec) -> None:
        self.machine = machine
        self.spec = spec
        self.memory: dict[tuple[int, Buffer, int], Value] = {}
        self.payload: dict[int, tuple[Value, ...]] = {}
        self.errors: list[Violation] = []
        self.notes: list[str] = []
        self.races = 0
        self.racy_slots: set[tuple[int, Buffer, int]] = set()
        self.race_check_skipped: str | None = None
        for rank in range(spec.ngpus):
            for buffer, offset, value in spec.initial(rank):
                self.memory[(rank, buffer, offset)] = value
        self.order, _ = machine.topological_order()
        self.happens_before = _HappensBefore(machine, self.order)
        self.last_write: dict[tuple[int, Buffer, int], int] = {}
        self.readers: dict[tuple[int, Buffer, int], list[int]] = {}

    def run(self) -> None:
        for node in self.order:
            self._step(self.machine.nodes[node])
        if self.happens_before.exhausted:
            self.race_check_skipped = (
                f"the data-race check stopped after {self.happens_before.searches} searches (it visited more than "
                f"{_RACE_SEARCH_FACTOR} x {len(self.machine.nodes)} + {_RACE_SEARCH_BASE} steps); races after that "
                "point are not ruled out")

    # -- memory with race detection
    def _where(self, t: Transmission) -> str:
        return self.machine.describe(t.node)

    def _ordered(self, earlier: int, later: int) -> bool:
        return self.happens_before.ordered(earlier, later)

    def _race(self, t: Transmission, other: int, slot: tuple[int, Buffer, int], what: str) -> None:
        self.races += 1
        self.racy_slots.add(slot)
        if self.races > _MAX_DATA_ERRORS:
            return
        _, buffer, offset = slot
        self.errors.append(Violation(
            "data-race", f"{what} of {buffer.value}[{offset}] is not ordered with {self.machine.describe(other)} "
            "(no dependency, threadblock order or send/receive chain between them)",
            rank=t.rank, tb=self.machine.tbs[t.tb][1].id, step=t.first))

    def read(self, t: Transmission, buffer: Buffer, offset: int, count: int) -> list[Value]:
        values: list[Value] = []
        rank, node = t.rank, t.node
        b, shift = self.spec.alias(rank, buffer)
        memory, last_write, readers = self.memory, self.last_write, self.readers
        for k in range(offset, offset + count):
            slot = (rank, b, k + shift)
            w = last_write.get(slot)
            if w is not None and w != node and not self._ordered(w, node):
                self._race(t, w, slot, "read")
            seen = readers.get(slot)
            if seen is None:
                readers[slot] = [node]
            else:
                seen.append(node)
            value = memory.get(slot)
            if value is None:
                value = Garbage(f"{self._where(t)} reads {buffer.value}[{k}] before anything wrote it")
            values.append(value)
        return values

    def write(self, t: Transmission, buffer: Buffer, offset: int, values: list[Value] | tuple[Value, ...]) -> None:
        rank, node = t.rank, t.node
        b, shift = self.spec.alias(rank, buffer)
        memory, last_write, readers = self.memory, self.last_write, self.readers
        for k, value in enumerate(values, offset + shift):
            slot = (rank, b, k)
            w = last_write.get(slot)
            if w is not None and w != node and not self._ordered(w, node):
                self._race(t, w, slot, "write")
            for r in readers.pop(slot, ()):
                if r != node and not self._ordered(r, node):
                    self._race(t, r, slot, "write")
                    break
            last_write[slot] = node
            memory[slot] = value

    def _reduce(self, t: Transmission, a: list[Value] | tuple[Value, ...], b: list[Value]) -> list[Value]:
        out: list[Value] = []
        for x, y in zip(a, b, strict=True):
            if type(x) is int and type(y) is int and not x & y:
                out.append(x | y)
            else:
                out.append(reduce_values(x, y, self._where(t), self.spec.input_chunks))
        return out

    def _step(self, t: Transmission) -> None:
        kind = t.type
        received: tuple[Value, ...] = ()
        if kind in RECEIVING:
            sender = self.machine.matching_send[t.node]
            received = self.payload.pop(sender, ())
            if len(received) != t.count:
                where = self._where(t)
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
            combined = self._reduce(t, received, self.read(t, t.srcbuf, t.srcoffs[0], t.count))
            if kind is not StepType.RECV_REDUCE_SEND:
                self.write(t, t.dstbuf, t.dstoff, combined)
            if kind is not StepType.RECV_REDUCE_COPY:
                out = combined
        elif kind is StepType.COPY:
            self.write(t, t.dstbuf, t.dstoff, self.read(t, t.srcbuf, t.srcoffs[0], t.count))
        elif kind is StepType.REDUCE:
            acc = self.read(t, t.dstbuf, t.dstoff, t.count)
            for off in t.srcoffs:
                acc = self._reduce(t, acc, self.read(t, t.srcbuf, off, t.count))
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
