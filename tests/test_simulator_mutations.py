"""Mutating a correct schedule is always caught by the simulator, by the check that must fire.

Every mutation is chosen so it *must* break the schedule. The simulator's data
semantics are those of program order (a transfer reads what the last earlier
writer left at its source and writes after every earlier writer at its
destination), so the effect of a mutation is known from the schedule alone:

* drop: a transfer that is the only writer of a (rank, chunk) the
  post-condition needs (copy collectives), or the reduction that completes
  such a pair (its contributions then never arrive there);
* early send: a copy moved before the first transfer that delivers its chunk
  to its sender (which did not hold it initially) reads nothing;
* double reduce: a reduction repeated right after itself adds the same
  contributions to the same place a second time;
* foreign chunk: a transfer that also carries a chunk its sender never holds.

Baselines have no ``after`` edges, so no mutation can deadlock; the helpers
still remap ``after`` so they stay general.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.baselines import ALGORITHMS, applicable_baselines, baseline
from taccl_py.collectives import CollectiveKind
from taccl_py.library import resolve_topology
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import SimResult, simulate
from taccl_py.testing import topologies
from taccl_py.topology import Topology

COPY_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.ALLTOALL, CollectiveKind.BROADCAST)
REDUCE_KINDS = (CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE, CollectiveKind.REDUCE)
SIZES = (4096, 1 << 20)

Case = tuple[Topology, Schedule, int]


# ------------------------------------------------------------------ schedule edits
def writers(schedule: Schedule) -> dict[tuple[int, int], list[int]]:
    """(rank, chunk) -> ids of the transfers writing it, in program order."""
    found: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, t in enumerate(schedule.transfers):
        for c in t.chunks:
            found[(t.dst, c)].append(i)
    return found


def held_initially(schedule: Schedule) -> set[tuple[int, int]]:
    return {(rank, chunk) for rank, chunk, _ in schedule.collective.initial()}


def dropped(schedule: Schedule, i: int) -> Schedule:
    """Without transfer i (``after`` ids renumbered)."""
    out = []
    for k, t in enumerate(schedule.transfers):
        if k != i:
            out.append(replace(t, after=tuple(a - (a > i) for a in t.after if a != i)))
    return schedule.with_transfers(out)


def moved(schedule: Schedule, i: int, to: int) -> Schedule:
    """Transfer i moved to position ``to`` (< i), the transfers in between shifted by one."""
    order = list(range(len(schedule.transfers)))
    order.insert(to, order.pop(i))
    new_id = {old: new for new, old in enumerate(order)}
    ts = schedule.transfers
    return schedule.with_transfers(replace(ts[old], after=tuple(new_id[a] for a in ts[old].after)) for old in order)


def inserted(schedule: Schedule, at: int, transfer: Transfer) -> Schedule:
    """``transfer`` inserted at position ``at``."""
    out = [replace(t, after=tuple(a + (a >= at) for a in t.after)) for t in schedule.transfers]
    out.insert(at, transfer)
    return schedule.with_transfers(out)


def described(t: Transfer, i: int) -> str:
    """How the simulator names a transfer in its messages."""
    return f"transfer {i} (rank {t.src} -> rank {t.dst}, chunks {list(t.chunks)})"


def judged(topology: Topology, schedule: Schedule, size: int) -> SimResult:
    """Simulate a mutant: it must be reported incorrect, untimed, with a message."""
    result = simulate(topology, schedule, size)
    assert not result.correct
    assert result.time_us is None and result.algbw_GBps is None
    assert result.error
    return result


# -------------------------------------------------------------------- candidates
def drop_candidates(schedule: Schedule) -> list[int]:
    """Transfers whose removal must leave a required (rank, chunk) incomplete."""
    col = schedule.collective
    required = set(col.required())
    initial = held_initially(schedule)
    who = writers(schedule)
    found = []
    for i, t in enumerate(schedule.transfers):
        for c in t.chunks:
            key = (t.dst, c)
            if key not in required:
                continue
            if col.is_reduction:
                # the last writer: whatever the pair held before it lacks the contributions it added
                if t.op is Op.REDUCE and who[key][-1] == i:
                    found.append(i)
                    break
            elif key not in initial and who[key] == [i]:
                found.append(i)  # nothing else ever brings the chunk there
                break
    return found


def early_send_candidates(schedule: Schedule) -> list[tuple[int, int]]:
    """(transfer, first delivery of one of its chunks to its sender) for chunks the sender lacked at first."""
    initial = held_initially(schedule)
    who = writers(schedule)
    found = []
    for i, t in enumerate(schedule.transfers):
        for c in t.chunks:
            if (t.src, c) not in initial:
                first = who[(t.src, c)][0]
                assert first < i  # the schedule is correct: the chunk arrived before it was sent on
                found.append((i, first))
                break
    return found


def foreign_chunks(schedule: Schedule, rank: int) -> list[int]:
    """Chunks ``rank`` never holds: not at the start, and no transfer writes them there."""
    held = {c for r, c in held_initially(schedule) if r == rank}
    held |= {c for t in schedule.transfers if t.dst == rank for c in t.chunks}
    return [c for c in range(schedule.collective.num_chunks) if c not in held]


# ---------------------------------------------------------------------- strategy
@st.composite
def correct_baselines(draw: st.DrawFn, kinds: tuple[CollectiveKind, ...], algorithms: tuple[str, ...] = ALGORITHMS,
                      min_gpus: int = 2) -> Case:
    """A baseline (one of ``algorithms``) of one of ``kinds`` on a random topology, checked correct."""
    topology = draw(topologies(min_gpus=min_gpus, max_gpus=6), label="topology")
    kind = draw(st.sampled_from(kinds), label="kind")
    root = draw(st.integers(0, topology.num_gpus - 1), label="root")
    names = [a for a in applicable_baselines(topology, kind, root=root) if a in algorithms]
    assert names, f"no baseline of {algorithms} runs {kind.value} on {topology.name}"
    algorithm = draw(st.sampled_from(names), label="algorithm")
    channels = draw(st.sampled_from([None, 1, 2]), label="channels")
    size = draw(st.sampled_from(SIZES), label="size")
    schedule = baseline(topology, kind, algorithm, channels=channels, root=root, size_bytes=size)
    result = simulate(topology, schedule, size)
    assert result.correct, f"the unmutated {algorithm} {kind.value} is already wrong: {result.error}"
    return topology, schedule, size


# ------------------------------------------------------------------ the mutations
DROP_COPY = re.compile(r"does not hold|post-condition violated: rank \d+ never receives")
DROP_REDUCE = re.compile(r"post-condition violated: rank \d+ ends with .+ missing the contribution of rank\(s\) \[")


def check_drop(case: Case, i: int) -> None:
    topology, schedule, size = case
    result = judged(topology, dropped(schedule, i), size)
    pattern = DROP_REDUCE if schedule.collective.is_reduction else DROP_COPY
    assert pattern.search(result.error or ""), result.error


def check_early_send(case: Case, i: int, first: int) -> None:
    topology, schedule, size = case
    t = schedule.transfers[i]
    result = judged(topology, moved(schedule, i, first), size)
    error = result.error or ""
    # the moved transfer (now at position `first`) is the one that fails, reading nothing
    assert error.startswith(described(t, first) + " starts at"), error
    assert f"but rank {t.src} does not hold chunk" in error


def check_double_reduce(case: Case, i: int) -> None:
    topology, schedule, size = case
    t = schedule.transfers[i]
    assert t.op is Op.REDUCE
    result = judged(topology, inserted(schedule, i + 1, t), size)
    error = result.error or ""
    assert error.startswith(described(t, i + 1) + " reduces the contribution of rank(s) ["), error
    assert f"at rank {t.dst} a second time" in error


def check_foreign_chunk(case: Case, i: int, chunk: int) -> None:
    topology, schedule, size = case
    t = schedule.transfers[i]
    mutant = replace(t, chunks=(chunk, *t.chunks))
    result = judged(topology, schedule.with_transfers((*schedule.transfers[:i], mutant, *schedule.transfers[i + 1:])),
                    size)
    error = result.error or ""
    assert error.startswith(described(mutant, i) + " starts at"), error
    assert error.endswith(f"but rank {t.src} does not hold {schedule.collective.describe_chunk(chunk)}"), error


# ------------------------------------------------------------- properties (random)
@pytest.mark.slow
@settings(max_examples=250)
@given(case=correct_baselines(COPY_KINDS + REDUCE_KINDS), data=st.data())
def test_dropping_a_transfer_is_caught(case: Case, data: st.DataObject) -> None:
    candidates = drop_candidates(case[1])
    assert candidates, "a correct schedule always has a transfer it cannot do without"
    check_drop(case, data.draw(st.sampled_from(candidates), label="dropped"))


@pytest.mark.slow
@settings(max_examples=250)
@given(case=correct_baselines((CollectiveKind.ALLGATHER, CollectiveKind.BROADCAST), ("ring", "tree", "rd"),
                              min_gpus=3), data=st.data())
def test_sending_a_chunk_before_it_arrives_is_caught(case: Case, data: st.DataObject) -> None:
    """Rings, trees and recursive doubling forward what they received (from 3 GPUs on); move one forward early."""
    candidates = early_send_candidates(case[1])
    assert candidates, "a ring, tree or rd on 3+ GPUs forwards received chunks"
    i, first = data.draw(st.sampled_from(candidates), label="moved")
    check_early_send(case, i, first)


@pytest.mark.slow
@settings(max_examples=250)
@given(case=correct_baselines(REDUCE_KINDS), data=st.data())
def test_reducing_a_contribution_twice_is_caught(case: Case, data: st.DataObject) -> None:
    reductions = [i for i, t in enumerate(case[1].transfers) if t.op is Op.REDUCE]
    assert reductions
    check_double_reduce(case, data.draw(st.sampled_from(reductions), label="repeated"))


@pytest.mark.slow
@settings(max_examples=250)
@given(case=correct_baselines((CollectiveKind.ALLTOALL,)), data=st.data())
def test_sending_a_chunk_never_held_is_caught(case: Case, data: st.DataObject) -> None:
    """All-to-all: rank s never holds what rank a sends to rank b (s not in {a, b}, and not a relay of it)."""
    schedule = case[1]
    i = data.draw(st.integers(0, len(schedule.transfers) - 1), label="transfer")
    foreign = foreign_chunks(schedule, schedule.transfers[i].src)
    assert foreign  # at least every other rank's piece for itself, which is never sent
    check_foreign_chunk(case, i, data.draw(st.sampled_from(foreign), label="chunk"))


# ---------------------------------------------------------- shipped, every candidate
SHIPPED = ("ring8", "dgx-a100", "ndv2x2")


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("kind,algorithm", [("allgather", "ring"), ("allgather", "rd"), ("allreduce", "ring"),
                                            ("allreduce", "tree"), ("broadcast", "tree"), ("reducescatter", "ring")])
def test_mutations_of_shipped_baselines(name: str, kind: str, algorithm: str) -> None:
    """The same mutations on real machines, at the first, middle and last candidate."""
    topology = resolve_topology(name)
    schedule = baseline(topology, kind, algorithm, size_bytes=1 << 20)
    case = (topology, schedule, 1 << 20)
    assert simulate(topology, schedule, 1 << 20).correct

    def spread(items: list[int]) -> list[int]:
        assert items
        return sorted({items[0], items[len(items) // 2], items[-1]})

    for i in spread(drop_candidates(schedule)):
        check_drop(case, i)
    if schedule.collective.is_reduction:
        for i in spread([i for i, t in enumerate(schedule.transfers) if t.op is Op.REDUCE]):
            check_double_reduce(case, i)
    else:
        early = early_send_candidates(schedule)
        for k in spread(list(range(len(early)))):
            check_early_send(case, *early[k])


def test_dropping_a_redundant_transfer_is_not_an_error() -> None:
    """The candidate rule matters: a second delivery of a chunk can go without breaking anything."""
    topology = resolve_topology("dgx-a100")
    schedule = baseline(topology, "allgather", "direct")
    extra = schedule.transfers[0]
    doubled = inserted(schedule, len(schedule.transfers), extra)  # deliver the same chunk once more, at the end
    assert simulate(topology, doubled, 1 << 20).correct
    last = len(doubled.transfers) - 1
    assert last not in drop_candidates(doubled) and 0 not in drop_candidates(doubled)
    assert simulate(topology, dropped(doubled, 0), 1 << 20).correct
