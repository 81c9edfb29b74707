"""The compiled XML layer against the Python one: the same programs, reports, times and bytes.

The compiled reader, rules scan, machine, execution with its race check, timing and writer
(``taccl_py.msccl.xml_scan``, ``fast_rules``, ``fast_machine``, ``fast_execute``,
``fast_timing``, ``fast_writer``) must give exactly what the Python code gives: the same
Program or loader error, the same VerifyReport (verdict, every message, notes), the same
SimResult (every start, arrival and commit time, link figure and critical path, compared
with ``==``) and the same XML bytes. Checked on the test vectors (valid and broken), random
local programs with races, lowered random schedules and mutations of them that break rules,
hang or race, and on random edits of XML text.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_msccl_races import drop_dependency, local_programs, swap_steps

from taccl_py.collectives import CollectiveKind
from taccl_py.errors import LoweringError, XmlLoadError
from taccl_py.msccl import Program, Step, StepType, lower_schedule, parse_program, write_xml
from taccl_py.msccl import timing as timing_module
from taccl_py.msccl import verify as verify_module
from taccl_py.msccl import writer as writer_module
from taccl_py.msccl.arrays import BUFFER_CODE, TYPE_CODE, program_arrays
from taccl_py.msccl.fast_execute import CLEAN
from taccl_py.msccl.fast_machine import build, order
from taccl_py.msccl.fast_rules import body_flagged
from taccl_py.msccl.fast_timing import simulate_arrays
from taccl_py.msccl.fast_verify import FastChecks, verify_arrays
from taccl_py.msccl.ir import Buffer
from taccl_py.msccl.machine import build_machine
from taccl_py.msccl.report import FATAL_RULES
from taccl_py.msccl.rules import check_header_rules, check_rules
from taccl_py.msccl.verify import PythonChecks, checked_report
from taccl_py.msccl.xml_scan import arrays_from_bytes
from taccl_py.simulator import SimOptions, SimResult
from taccl_py.testing import spanning_tree_allgathers, spanning_tree_reductions, topologies
from taccl_py.topology import Link, Switch, Topology, check_topology

VECTORS = Path(__file__).parent / "vectors" / "msccl"
FILES = sorted(VECTORS.glob("*.xml")) + sorted((VECTORS / "broken").glob("*.xml"))


def star(n: int) -> Topology:
    links: list[Link] = []
    for g in range(n):
        links += [Link(g, "sw", 100.0, 0.7), Link("sw", g, 100.0, 0.7)]
    return check_topology(Topology(f"star{n}", n, tuple(links), switches=(Switch("sw"),)))


def python_report(program: Program, dialect: str) -> object:
    return checked_report(program, dialect, check_rules(program, dialect), PythonChecks(program))


def same_results(a: SimResult, b: SimResult) -> None:
    for name in ("start_us", "arrive_us", "commit_us"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    assert (a.correct, a.error, a.time_us, a.link_busy_us, a.link_bytes, a.critical_path, a.notes) == (
        b.correct, b.error, b.time_us, b.link_busy_us, b.link_bytes, b.critical_path, b.notes)


def agrees(program: Program, topo: Topology | None = None, size: float = 2**20) -> None:
    """Every compiled stage gives what the Python one gives on ``program`` (both dialects; timed on ``topo``)."""
    arrays = program_arrays(program)
    assert arrays is not None
    assert arrays.program() is program
    for dialect in ("v1", "v2"):
        want = python_report(program, dialect)
        assert verify_arrays(program_arrays(program), dialect) == want  # type: ignore[arg-type]
        if not body_flagged(arrays, dialect) and not program.source_issues:
            assert check_rules(program, dialect) == check_header_rules(program, dialect)
    fatal = any(v.rule in FATAL_RULES for v in check_rules(program, program.detected_dialect))
    if not fatal:
        machine, fast = build_machine(program), build(arrays)
        assert fast.nodes.shape[1] == len(machine.nodes)
        for t in machine.nodes:
            row = tuple(int(x) for x in fast.nodes[:, t.node])
            assert row == (t.rank, t.tb, t.seq, TYPE_CODE[t.type], t.first, t.last, t.count, BUFFER_CODE[t.srcbuf],
                           BUFFER_CODE[t.dstbuf], t.dstoff, -1 if t.publish is None else t.publish)
            assert tuple(fast.srcoffs[fast.so_ptr[t.node]:fast.so_ptr[t.node + 1]]) == t.srcoffs
            assert tuple(fast.preds[fast.pred_ptr[t.node]:fast.pred_ptr[t.node + 1]]) == machine.preds[t.node]
            assert fast.match_send[t.node] == machine.matching_send.get(t.node, -1)
            assert bool(fast.blocked[t.node]) == (t.node in machine.blocked)
        runs, size_run = order(fast)
        ran, stuck = machine.topological_order()
        assert list(runs[:size_run]) == ran and len(runs) - size_run == len(stuck)
        if not stuck:  # the compiled execution is clean exactly when the Python one finds nothing
            checks, python = FastChecks(arrays), PythonChecks(program)
            for in_place in (True, False):
                from taccl_py.msccl import fast_execute

                outcome = python.execute(in_place)
                spec = verify_module.data_spec(program, in_place)
                if isinstance(spec, verify_module.DataSpec):
                    of_rank, index = checks._threadblocks
                    status, _ = fast_execute.execute(checks.machine, runs, spec, of_rank, index,
                                                     verify_module.race_budget(len(machine.nodes)))
                    assert (status == CLEAN) == (not outcome.errors), (status, outcome.errors[:2])
    if topo is not None and program.kind is not None and program.ngpus == topo.num_gpus:
        for options in (SimOptions(), SimOptions(step_overhead_us=0.5)):
            try:
                want_sim = timing_module.simulate_program(program, topo, size, options)
            except Exception as exc:  # the same error either way
                with pytest.raises(type(exc), match=None) as caught:
                    simulate_arrays(arrays, topo, size, options)
                assert str(caught.value) == str(exc)
                continue
            same_results(simulate_arrays(program_arrays(program), topo, size, options), want_sim)  # type: ignore[arg-type]
    texts = []
    for threshold in (10**12, 0):
        writer_module.FAST_MIN_STEPS = threshold
        for dialect in ("v1", "v2"):
            try:
                texts.append(write_xml(program, dialect))
            except LoweringError as exc:
                texts.append(f"error: {exc}")
    assert texts[:2] == texts[2:]


@pytest.fixture(autouse=True)
def _python_below(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python paths stay Python in this module (the compiled ones are called directly)."""
    monkeypatch.setattr(verify_module, "FAST_MIN_STEPS", 10**12)
    monkeypatch.setattr(timing_module, "FAST_MIN_STEPS", 10**12)
    monkeypatch.setattr(writer_module, "FAST_MIN_STEPS", 10**12)


# ------------------------------------------------------------------ files
def _vector_topology(ngpus: int) -> Topology:
    return star(ngpus)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_vectors_read_verify_time_and_write_alike(path: Path) -> None:
    data = path.read_bytes()
    try:
        want = parse_program(data, where=str(path))
    except XmlLoadError as exc:
        with pytest.raises(XmlLoadError) as caught:
            arrays_from_bytes(data, where=str(path))
        assert (str(caught.value), caught.value.rule) == (str(exc), exc.rule)
        return
    got = arrays_from_bytes(data, where=str(path)).program()
    assert got == want and got.source_issues == want.source_issues and got.attributes == want.attributes
    assert [s.line for g in got.gpus for tb in g.threadblocks for s in tb.steps] == [
        s.line for g in want.gpus for tb in g.threadblocks for s in tb.steps]
    agrees(want, _vector_topology(want.ngpus))


_EDITS = ('\t', '  ', "'", "&amp;", "<?xml version=\"1.0\"?>", "<!-- c -->", "<!-- a -- b -->", "\r", ">", "<",
          '"', "=", " x=\"1\"", " id=\"7\"", "<foo/>", "</tb>", "<step/>", "é", "\ufeff", "-", "99999999999")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(FILES) - 1), edits=st.lists(st.tuples(st.floats(0, 1), st.sampled_from(_EDITS),
                                                                          st.booleans()), min_size=1, max_size=3))
def test_edited_text_reads_alike(index: int, edits: list[tuple[float, str, bool]]) -> None:
    """Random insertions and deletions in XML text: the same program, or the same error, either way."""
    text = FILES[index].read_text()
    for where, piece, delete in edits:
        at = int(where * len(text))
        text = text[:at] + text[at + len(piece):] if delete else text[:at] + piece + text[at:]
    data = text.encode("utf-8")
    try:
        want = parse_program(data, where="edited.xml")
    except XmlLoadError as exc:
        with pytest.raises(XmlLoadError) as caught:
            arrays_from_bytes(data, where="edited.xml")
        assert (str(caught.value), caught.value.rule) == (str(exc), exc.rule)
        return
    got = arrays_from_bytes(data, where="edited.xml").program()
    assert got == want and got.source_issues == want.source_issues and got.attributes == want.attributes
    assert got.line == want.line and [g.line for g in got.gpus] == [g.line for g in want.gpus]


# ------------------------------------------------------------------ random programs
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=local_programs())
def test_random_local_programs_with_races_agree(program: Program) -> None:
    agrees(program)


def _mutate(program: Program, rng: random.Random) -> Program:
    """One random edit of a step or threadblock field: what breaks a rule, hangs or races."""
    where = [(gi, ti, si) for gi, g in enumerate(program.gpus) for ti, tb in enumerate(g.threadblocks)
             for si in range(len(tb.steps))]
    gi, ti, si = rng.choice(where)
    gpu = program.gpus[gi]
    tb = gpu.threadblocks[ti]
    st_ = tb.steps[si]
    choice = rng.randrange(12)
    steps = list(tb.steps)
    if choice == 0:
        steps[si] = replace(st_, type=rng.choice(list(StepType)))
    elif choice == 1:
        steps[si] = replace(st_, srcoff=st_.srcoff + rng.choice([-1, 1, 50]))
    elif choice == 2:
        steps[si] = replace(st_, dstbuf=rng.choice(list(Buffer)))
    elif choice == 3:
        steps[si] = replace(st_, cnt=rng.choice([0, 2, 72]))
    elif choice == 4:
        steps[si] = replace(st_, depid=rng.randrange(-1, len(gpu.threadblocks) + 1), deps=rng.randrange(-1, 4))
    elif choice == 5:
        steps[si] = replace(st_, hasdep=1 - st_.hasdep)
    elif choice == 6:
        del steps[si]
        steps = [replace(s, index=k) for k, s in enumerate(steps)]
    elif choice == 7:
        steps.insert(si, Step(si, StepType.NOP, Buffer.INPUT, -1, Buffer.OUTPUT, -1, 0, rng.randrange(-1, 3),
                              rng.randrange(0, 3), 0))
        steps = [replace(s, index=k) for k, s in enumerate(steps)]
    elif choice == 8:
        steps[si] = replace(st_, index=st_.index + 1)
    elif choice == 9 and si + 1 < len(steps):
        steps[si], steps[si + 1] = replace(steps[si + 1], index=si), replace(st_, index=si + 1)
    elif choice == 10:
        tbs = list(gpu.threadblocks)
        tbs[ti] = replace(tb, chan=rng.randrange(0, 3), steps=tuple(steps))
        gpus = list(program.gpus)
        gpus[gi] = replace(gpu, threadblocks=tuple(tbs))
        return replace(program, gpus=tuple(gpus))
    else:
        steps[si] = replace(st_, type=StepType.REDUCE if st_.type is StepType.COPY else st_.type)
    tbs = list(gpu.threadblocks)
    tbs[ti] = replace(tb, steps=tuple(steps))
    gpus = list(program.gpus)
    gpus[gi] = replace(gpu, threadblocks=tuple(tbs))
    return replace(program, gpus=tuple(gpus))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=topologies(min_gpus=2, max_gpus=5), data=st.data(), seed=st.integers(0, 2**16))
def test_lowered_programs_and_their_breakages_agree(topo: Topology, data: st.DataObject, seed: int) -> None:
    kind = data.draw(st.sampled_from([CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER,
                                      CollectiveKind.REDUCE]))
    if kind is CollectiveKind.ALLGATHER:
        schedule = data.draw(spanning_tree_allgathers(topo))
    else:
        schedule = data.draw(spanning_tree_reductions(topo, kind))
    program = lower_schedule(schedule, topo)
    agrees(program, topo)
    rng = random.Random(seed)
    for mutate in (drop_dependency, swap_steps):
        broken = mutate(program, rng)
        if broken is not None:
            agrees(broken, topo)
    agrees(_mutate(program, rng), topo)


# ------------------------------------------------------------------ whole paths
def test_large_programs_take_the_compiled_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """From the thresholds on, verify_program and simulate_program give the compiled results (and they are right)."""
    from taccl_py.baselines import baseline
    from taccl_py.library import resolve_topology

    topo = resolve_topology("dgx-a100")
    program = lower_schedule(baseline(topo, CollectiveKind.ALLREDUCE, "ring"), topo)
    want_report = verify_module.verify_program(program)
    want_sim = timing_module.simulate_program(program, topo, 2**20)
    calls: list[str] = []
    monkeypatch.setattr(verify_module, "FAST_MIN_STEPS", 1)
    monkeypatch.setattr(timing_module, "FAST_MIN_STEPS", 1)
    import taccl_py.msccl.fast_verify as fast_verify

    real = fast_verify.verify_arrays
    monkeypatch.setattr(fast_verify, "verify_arrays", lambda *a, **k: calls.append("verify") or real(*a, **k))
    assert verify_module.verify_program(program) == want_report and calls == ["verify"]
    same_results(timing_module.simulate_program(program, topo, 2**20), want_sim)
    assert want_report.correct and want_sim.correct


def test_an_exhausted_race_check_is_unknown_on_the_compiled_path_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no search budget the compiled check stops where the Python one does: verdict unknown, same message."""
    from test_msccl_verify import round_trip_program

    program = parse_program(round_trip_program())
    assert verify_arrays(program_arrays(program)).verdict == "correct"  # type: ignore[arg-type]
    monkeypatch.setattr(verify_module, "_RACE_SEARCH_FACTOR", 0)
    monkeypatch.setattr(verify_module, "_RACE_SEARCH_BASE", 0)
    want = python_report(program, "v2")
    got = verify_arrays(program_arrays(program), "v2")  # type: ignore[arg-type]
    assert got == want
    assert got.verdict == "unknown" and got.rules == {"unchecked-races"}


def test_a_wrong_program_past_the_python_execution_limit_is_incorrect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the Python execution's contribution limit and the compiled one's, a wrong program is reported
    incorrect with the Python message (not ``unknown``: the compiled execution ran it and found it wrong)."""
    from taccl_py.baselines import baseline
    from taccl_py.library import resolve_topology

    topo = resolve_topology("dgx-a100")
    program = lower_schedule(baseline(topo, CollectiveKind.ALLGATHER, "ring"), topo)
    gpu = program.gpus[1]
    tb = gpu.threadblocks[0]
    k = next(i for i, step in enumerate(tb.steps) if step.type is StepType.RECV)
    steps = list(tb.steps)
    steps[k] = replace(steps[k], dstoff=(steps[k].dstoff + 1) % program.nchunksperloop)
    gpus = list(program.gpus)
    gpus[1] = replace(gpu, threadblocks=(replace(tb, steps=tuple(steps)), *gpu.threadblocks[1:]))
    broken = replace(program, gpus=tuple(gpus))
    want = python_report(broken, "v2")
    assert want.verdict == "incorrect"
    monkeypatch.setattr(verify_module, "_MAX_SYMBOLIC_CONTRIBUTIONS", 1)  # the program is past the Python limit
    assert python_report(broken, "v2").verdict == "unknown"  # which alone could not execute it
    assert verify_arrays(program_arrays(broken), "v2") == want  # type: ignore[arg-type]


@pytest.mark.parametrize("proto", ["Simple", "LL", "LL128"])
def test_calibrated_timing_is_the_same_compiled(proto: str) -> None:
    """Under a topology's runtime model (protocol costs: route latency, link shares, launch) the times agree too."""
    from taccl_py.baselines import baseline
    from taccl_py.library import resolve_topology
    from taccl_py.runtime import Protocol

    topo = resolve_topology("dgx-a100x2")
    assert topo.runtime is not None
    program = lower_schedule(baseline(topo, CollectiveKind.ALLGATHER, "ring"), topo, proto=proto)
    options = SimOptions(costs=topo.runtime.costs(Protocol(proto), CollectiveKind.ALLGATHER, topo))
    want = timing_module.simulate_program(program, topo, 2**26, options)
    assert want.correct and want.notes["proto"] == proto
    same_results(simulate_arrays(program_arrays(program), topo, 2**26, options), want)  # type: ignore[arg-type]


def _program_groups() -> list[object]:
    from test_sim_golden import GROUPS

    return [pytest.param(group, id=group, marks=[pytest.mark.slow] if any(c.slow for c in cases) else [])
            for (section, group), cases in GROUPS.items() if section == "programs"]


@pytest.mark.parametrize("group", _program_groups())
def test_the_golden_programs_through_the_compiled_paths(group: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every recorded XML time, verdict and message of ``tests/sim_golden.py``, verified and timed compiled."""
    from test_sim_golden import GOLDEN, GROUPS, _check

    monkeypatch.setattr(verify_module, "FAST_MIN_STEPS", 0)
    monkeypatch.setattr(timing_module, "FAST_MIN_STEPS", 0)
    monkeypatch.setattr(writer_module, "FAST_MIN_STEPS", 0)
    failures = [f"{case.key}: {line}" for case in GROUPS[("programs", group)]
                for line in _check(case, GOLDEN["programs"][case.key])]
    assert not failures, "\n".join(failures[:20])


def test_xml_timing_that_prunes_its_event_queue_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-shot Allgather's XML on two DGX A100s under Simple's costs (its re-solves leave void finish events):
    pruned from 16 queued events on, the compiled XML timing drops them and still gives Python's result."""
    from taccl_py import fast_kernel
    from taccl_py.baselines import baseline
    from taccl_py.library import resolve_topology
    from taccl_py.runtime import Protocol

    topo = resolve_topology("dgx-a100x2")
    assert topo.runtime is not None
    program = lower_schedule(baseline(topo, CollectiveKind.ALLGATHER, "oneshot"), topo)
    options = SimOptions(costs=topo.runtime.costs(Protocol.SIMPLE, CollectiveKind.ALLGATHER, topo))
    want = timing_module.simulate_program(program, topo, 2**24, options)
    from taccl_py.msccl import fast_timing

    counters: list[np.ndarray] = []

    def counted(*args: object) -> tuple[object, ...]:
        out = compiled_run(*args)
        counters.append(out[-1])
        return out  # type: ignore[no-any-return]

    compiled_run = fast_timing.run
    monkeypatch.setattr(fast_timing, "run", counted)
    monkeypatch.setattr(fast_kernel, "QUEUE_PRUNE_FROM", 16)
    got = simulate_arrays(program_arrays(program), topo, 2**24, options)
    same_results(got, want)  # type: ignore[arg-type]
    assert want.correct and counters[0][fast_kernel.PRUNED] > 0
