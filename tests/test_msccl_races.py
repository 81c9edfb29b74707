"""The data-race check: per slot, consecutive accesses, clocks kept only while needed.

Checked against the old all-pairs check (``msccl_race_oracle``): on random
small programs both find races in exactly the same slots; on lowered programs
with an injected race (a dependency removed, two steps reordered) the check
finds it, and nothing on the untouched programs.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from msccl_race_oracle import racy_slots

from taccl_py.collectives import CollectiveKind
from taccl_py.msccl import Gpu, Program, Step, StepType, Threadblock, lower_schedule, verify_program
from taccl_py.msccl.ir import Buffer
from taccl_py.msccl.machine import build_machine
from taccl_py.msccl.report import UNCHECKED_RULES
from taccl_py.msccl.rules import check_rules
from taccl_py.msccl.verify import execute_program, find_deadlock
from taccl_py.testing import spanning_tree_allgathers, spanning_tree_reductions, topologies
from taccl_py.topology import Topology

BUFFERS = (Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH)


def runnable(program: Program) -> bool:
    """No fatal rule and no deadlock: the program can be executed (races may remain)."""
    found = check_rules(program, program.detected_dialect)
    from taccl_py.msccl.report import FATAL_RULES

    return not any(v.rule in FATAL_RULES for v in found) and find_deadlock(build_machine(program)) is None


def agree(program: Program) -> set[tuple[int, Buffer, int]]:
    """The verifier's racy slots equal the oracle's in every buffer mode; returns them (in-place mode)."""
    machine = build_machine(program)
    found: set[tuple[int, Buffer, int]] = set()
    for in_place in (True, False):
        outcome = execute_program(machine, in_place)
        assert not any(e.rule in UNCHECKED_RULES for e in outcome.errors)
        assert set(outcome.racy_slots) == racy_slots(machine, in_place)
        if in_place:
            found = set(outcome.racy_slots)
    return found


# ------------------------------------------------------------------ random programs
@st.composite
def local_programs(draw: st.DrawFn) -> Program:
    """Allgather-shaped programs of copies and reductions between random slots, with random dependencies.

    Threadblocks only wait for steps of threadblocks with smaller ids (no
    deadlock); every dependency target publishes a flag. Many accesses are
    unordered, some are ordered through chains of dependencies.
    """
    ngpus = draw(st.integers(1, 2))
    chunks = ngpus * draw(st.integers(1, 3))
    scratch = draw(st.integers(0, 3))
    gpus = []
    for rank in range(ngpus):
        num_tbs = draw(st.integers(1, 4))
        lengths = [draw(st.integers(1, 4)) for _ in range(num_tbs)]
        raw: list[list[list[int]]] = []  # per tb, per step: [type, srcbuf, srcoff, dstbuf, dstoff, depid, deps]
        for g in range(num_tbs):
            steps = []
            for _ in range(lengths[g]):
                kind = draw(st.sampled_from([0, 1]))  # cpy, re
                src = draw(st.sampled_from([1, 2] if scratch else [1]))
                dst = draw(st.sampled_from([1, 2] if scratch else [1]))
                size = {1: chunks, 2: scratch}
                dep = draw(st.integers(-1, g - 1)) if g else -1
                deps = draw(st.integers(0, lengths[dep] - 1)) if dep >= 0 else -1
                steps.append([kind, src, draw(st.integers(0, size[src] - 1)), dst, draw(st.integers(0, size[dst] - 1)),
                              dep, deps])
            raw.append(steps)
        flagged = {(s[5], s[6]) for steps in raw for s in steps if s[5] >= 0}
        tbs = []
        for g, steps in enumerate(raw):
            out = []
            for pos, (kind, src, soff, dst, doff, dep, deps) in enumerate(steps):
                out.append(Step(pos, StepType.COPY if kind == 0 else StepType.REDUCE, BUFFERS[src], soff, BUFFERS[dst],
                                doff, 1, dep, deps, int((g, pos) in flagged)))
            tbs.append(Threadblock(g, -1, -1, 0, tuple(out)))
        gpus.append(Gpu(rank, 0, chunks, scratch, tuple(tbs)))
    return Program(name="random", coll="allgather", ngpus=ngpus, nchunksperloop=chunks, nchannels=1,
                   proto="Simple", inplace=1, gpus=tuple(gpus), outofplace=1, min_bytes=0, max_bytes=0)


@settings(max_examples=150)
@given(program=local_programs())
def test_random_local_programs_agree_with_the_all_pairs_oracle(program: Program) -> None:
    assume(runnable(program))
    agree(program)


def lowered(topo: Topology, schedule: object) -> Program:
    return lower_schedule(schedule, topo)  # type: ignore[arg-type]


def drop_dependency(program: Program, rng: random.Random) -> Program | None:
    """The program with one dependency (a ``depid`` of a non-nop step) removed; None if there is none."""
    where = [(gi, ti, si) for gi, g in enumerate(program.gpus) for ti, tb in enumerate(g.threadblocks)
             for si, s in enumerate(tb.steps) if s.depid >= 0 and s.type is not StepType.NOP
             and (si == 0 or tb.steps[si - 1].type is not StepType.NOP)]
    if not where:
        return None
    gi, ti, si = rng.choice(where)
    return _edit(program, gi, ti, lambda steps: [*steps[:si], replace(steps[si], depid=-1, deps=-1), *steps[si + 1:]])


def swap_steps(program: Program, rng: random.Random) -> Program | None:
    """The program with a flagged step and the next one exchanged, the flag staying at its position.

    Dependencies wait for a step *position* (the runtime's step counter), so
    whoever waited for the flagged step now waits for its neighbour: the bug
    of reordering steps without renumbering the dependencies on them.
    """
    where = [(gi, ti, si) for gi, g in enumerate(program.gpus) for ti, tb in enumerate(g.threadblocks)
             for si in range(len(tb.steps) - 1) if tb.steps[si].hasdep
             and StepType.NOP not in (tb.steps[si].type, tb.steps[si + 1].type)]
    if not where:
        return None
    gi, ti, si = rng.choice(where)

    def swap(steps: list[Step]) -> list[Step]:
        a, b = steps[si], steps[si + 1]
        return [*steps[:si], replace(b, index=si, hasdep=a.hasdep), replace(a, index=si + 1, hasdep=b.hasdep),
                *steps[si + 2:]]

    return _edit(program, gi, ti, swap)


def _edit(program: Program, gi: int, ti: int, change: object) -> Program:
    gpu = program.gpus[gi]
    tb = gpu.threadblocks[ti]
    steps = change(list(tb.steps))  # type: ignore[operator]
    tbs = list(gpu.threadblocks)
    tbs[ti] = replace(tb, steps=tuple(steps))
    gpus = list(program.gpus)
    gpus[gi] = replace(gpu, threadblocks=tuple(tbs))
    return replace(program, gpus=tuple(gpus))


@settings(max_examples=30)
@given(topo=topologies(min_gpus=2, max_gpus=6), data=st.data(), seed=st.integers(0, 2**16))
def test_lowered_programs_with_injected_races_agree_with_the_oracle(topo: Topology, data: st.DataObject,
                                                                     seed: int) -> None:
    kind = data.draw(st.sampled_from([CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER]))
    if kind is CollectiveKind.ALLGATHER:
        schedule = data.draw(spanning_tree_allgathers(topo))
    else:
        schedule = data.draw(spanning_tree_reductions(topo, kind))
    program = lowered(topo, schedule)
    assert agree(program) == set()
    rng = random.Random(seed)
    for mutate in (drop_dependency, swap_steps):
        broken = mutate(program, rng)
        if broken is not None and runnable(broken):
            agree(broken)


# ------------------------------------------------------------------ large lowered programs
@pytest.mark.slow
@pytest.mark.parametrize("name", ["dgx-a100x2", "dgx-a100x4"])
def test_injected_races_are_caught_in_large_lowered_programs(name: str) -> None:
    """Dependencies removed from programs of thousands of steps: the check finds what the oracle finds."""
    from taccl_py.baselines import baseline
    from taccl_py.library import resolve_topology

    topo = resolve_topology(name)
    program = lower_schedule(baseline(topo, CollectiveKind.ALLREDUCE, "tree", size_bytes=2**20), topo)
    assert program.num_steps > 4000
    report = verify_program(program)
    assert report.correct and report.verdict == "correct"
    rng = random.Random(7)
    caught = 0
    for _ in range(4):
        broken = drop_dependency(program, rng)
        assert broken is not None
        if not runnable(broken):
            continue
        found = agree(broken)
        if found:
            caught += 1
            assert "data-race" in verify_program(broken).rules
    assert caught >= 1


@pytest.mark.slow
def test_reordered_receives_race_with_their_readers() -> None:
    """Moving a receive after a copy that reads what it writes is a race (or a wrong result) the check sees."""
    from taccl_py.baselines import baseline
    from taccl_py.library import resolve_topology

    topo = resolve_topology("dgx-a100x2")
    program = lower_schedule(baseline(topo, CollectiveKind.ALLREDUCE, "tree", size_bytes=2**20), topo)
    rng = random.Random(3)
    seen_race = False
    for _ in range(3):
        broken = swap_steps(program, rng)
        if broken is None or not runnable(broken):
            continue
        found = agree(broken)
        report = verify_program(broken)
        assert not report.correct or not found
        seen_race |= bool(found)
    assert seen_race
