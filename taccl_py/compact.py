"""A schedule as arrays: the form millions of transfers take without one Python object each.

A :class:`CompactSchedule` holds what :class:`taccl_py.schedule.Schedule` holds for
schedules without exchanges or network groups, column by column (numpy arrays
indexed by transfer id, in program order): ``src``, ``dst``, ``channel``, ``reduce``
(True for ``op`` reduce), the chunks as a CSR list (``chunk_ptr``, ``chunks``), each
route as an index into a table of distinct routes (``route``; ``routes[k]`` is a
tuple of link indices), ``after`` as a CSR list and ``not_before_us`` (NaN: none).
Its semantics are the schedule's (docs/simulator.md); :func:`compact` converts a
schedule, :meth:`CompactSchedule.transfer` gives one transfer back, and
:mod:`taccl_py.fast_sim` simulates it.

A 1,024-GPU ring Allgather with 8 channels (8.4 million transfers) takes about
240 MB in this form instead of several GB of ``Transfer`` objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from taccl_py.collectives import Collective
from taccl_py.schedule import Op, Schedule, Transfer, check_route
from taccl_py.topology import Topology

__all__ = ["CompactSchedule", "compact", "compact_error"]


@dataclass(frozen=True, eq=False)
class CompactSchedule:
    """A schedule without exchanges or network groups, as arrays (see the module)."""

    collective: Collective
    src: np.ndarray
    dst: np.ndarray
    channel: np.ndarray
    reduce: np.ndarray
    chunk_ptr: np.ndarray
    chunks: np.ndarray
    route: np.ndarray
    routes: tuple[tuple[int, ...], ...]
    after_ptr: np.ndarray | None = None
    after: np.ndarray | None = None
    not_before_us: np.ndarray | None = None
    name: str = ""
    topology: str = ""
    notes: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.src)

    def transfer(self, i: int) -> Transfer:
        """Transfer ``i`` as a :class:`Transfer` (for messages and checks)."""
        chunks = tuple(int(c) for c in self.chunks[self.chunk_ptr[i]:self.chunk_ptr[i + 1]])
        after: tuple[int, ...] = ()
        if self.after_ptr is not None and self.after is not None:
            after = tuple(int(a) for a in self.after[self.after_ptr[i]:self.after_ptr[i + 1]])
        nb = None if self.not_before_us is None or math.isnan(self.not_before_us[i]) else \
            float(self.not_before_us[i])
        return Transfer(int(self.src[i]), int(self.dst[i]), chunks, self.routes[int(self.route[i])],
                        Op.REDUCE if self.reduce[i] else Op.COPY, int(self.channel[i]), after, nb)

    def to_schedule(self) -> Schedule:
        """The same schedule as :class:`Schedule` (small cases: one object per transfer)."""
        return Schedule(self.collective, tuple(self.transfer(i) for i in range(len(self))), name=self.name,
                        topology=self.topology, notes=dict(self.notes))


def compact(schedule: Schedule) -> CompactSchedule:
    """``schedule`` as arrays; it must have no exchanges or network groups (``ValueError`` otherwise).

    Built a column at a time (one pass over the transfers per field, then one array each), about twice as quick
    as filling the arrays transfer by transfer (130,048 transfers: 0.075 s against 0.16).
    """
    transfers = schedule.transfers
    for i, t in enumerate(transfers):
        if t.exchange is not None or t.group is not None:
            raise ValueError(f"transfer {i}: exchanges and network groups have no compact form")
    src = np.array([t.src for t in transfers], np.int32)
    dst = np.array([t.dst for t in transfers], np.int32)
    channel = np.array([t.channel for t in transfers], np.int32)
    reduce = np.array([t.op is Op.REDUCE for t in transfers], np.bool_)
    route_id: dict[tuple[int, ...], int] = {}
    route = np.array([route_id.setdefault(t.route, len(route_id)) for t in transfers], np.int32)
    chunk_ptr = _offsets([len(t.chunks) for t in transfers])
    chunks = np.fromiter(chain.from_iterable(t.chunks for t in transfers), np.int32, int(chunk_ptr[-1]))
    after_ptr = _offsets([len(t.after) for t in transfers])
    after = np.fromiter(chain.from_iterable(t.after for t in transfers), np.int32, int(after_ptr[-1]))
    not_before = [t.not_before_us for t in transfers]
    timed = any(v is not None for v in not_before)
    return CompactSchedule(schedule.collective, src, dst, channel, reduce, chunk_ptr, chunks, route,
                           tuple(route_id), after_ptr if len(after) else None, after if len(after) else None,
                           np.array([math.nan if v is None else v for v in not_before], np.float64) if timed else None,
                           name=schedule.name, topology=schedule.topology, notes=dict(schedule.notes))


def _offsets(counts: list[int]) -> np.ndarray:
    """The CSR offsets of rows of ``counts`` items: 0, then the running totals (int64, one more than the rows)."""
    out = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def compact_error(schedule: CompactSchedule, topology: Topology) -> str | None:
    """The first reason the schedule cannot run on ``topology`` (as :meth:`Schedule.structural_error` words it).

    Checked column by column: the first failing transfer of each check is found
    with array operations, and the earliest of them is reported with the
    message the transfer-by-transfer check gives it.
    """
    coll = schedule.collective
    n = coll.num_ranks
    if n != topology.num_gpus:
        return f"collective has {n} ranks but topology {topology.name!r} has {topology.num_gpus} GPUs"
    count = len(schedule)
    if count == 0:
        return None
    nchunks = coll.num_chunks
    found: list[tuple[int, int, str]] = []  # (transfer, order of the check inside it, message)

    def first(bad: np.ndarray, order: int, message: Any) -> None:
        hit = np.flatnonzero(bad)
        if len(hit):
            i = int(hit[0])
            found.append((i, order, message(i)))

    src, dst = schedule.src, schedule.dst
    first((src < 0) | (src >= n) | (dst < 0) | (dst >= n), 0,
          lambda i: f"transfer {i}: ranks {src[i]} -> {dst[i]} out of range 0..{n - 1}")
    first(src == dst, 1, lambda i: f"transfer {i}: sends from rank {src[i]} to itself")
    ptr = schedule.chunk_ptr
    first(ptr[1:] == ptr[:-1], 2, lambda i: f"transfer {i}: carries no chunk")
    bad_chunk = np.flatnonzero((schedule.chunks < 0) | (schedule.chunks >= nchunks))
    if len(bad_chunk):
        k = int(bad_chunk[0])
        i = int(np.searchsorted(ptr, k, side="right")) - 1
        found.append((i, 3, f"transfer {i}: chunk {schedule.chunks[k]} out of range 0..{nchunks - 1}"))
    multi = np.flatnonzero(ptr[1:] - ptr[:-1] > 1) if len(schedule.chunks) > count else np.zeros(0, np.int64)
    for m in multi:
        part = schedule.chunks[ptr[m]:ptr[m + 1]]
        if len(np.unique(part)) != len(part):
            found.append((int(m), 4, f"transfer {m}: lists a chunk twice"))
            break
    first(schedule.channel < 0, 5, lambda i: f"transfer {i}: negative channel {schedule.channel[i]}")
    if schedule.after is not None and schedule.after_ptr is not None:
        owner = np.repeat(np.arange(count), np.diff(schedule.after_ptr))
        a = schedule.after
        bad = np.flatnonzero((a == owner) | (a < 0) | (a >= count))
        if len(bad):
            k = int(bad[0])
            i = int(owner[k])
            found.append((i, 6, f"transfer {i}: 'after' refers to itself (a transfer cannot wait for its own commit)"
                          if a[k] == i else f"transfer {i}: 'after' names transfer {a[k]}, which does not exist"))
    # routes: each distinct route checked once, then its ends against every transfer's ranks
    checks = [check_route(topology, route) for route in schedule.routes]
    route = schedule.route

    def per_route(values: list[int]) -> np.ndarray:
        return np.array(values, np.int32)[route]

    def gpu(v: object) -> int:
        return v if isinstance(v, int) and not isinstance(v, bool) else -1

    known = np.array([s is not None for s, _, _ in checks])[route]
    moved = known & (per_route([gpu(s) for s, _, _ in checks]) != src)  # hop 0 leaves another vertex
    first(moved, 8, lambda i: f"transfer {i}: route is not connected at hop 0 ({int(src[i])!r} then link "
          f"{topology.links[schedule.routes[int(route[i])][0]].src!r}->"
          f"{topology.links[schedule.routes[int(route[i])][0]].dst!r})")
    problem = np.array([p is not None for _, _, p in checks])[route]
    first(problem & ~moved, 8, lambda i: f"transfer {i}: {checks[int(route[i])][2]}")
    ok = ~problem & ~moved
    del problem, moved, known
    ok &= per_route([gpu(e) for _, e, _ in checks]) != dst
    first(ok, 8, lambda i: f"transfer {i}: route ends at {checks[int(route[i])][1]!r}, not at rank {dst[i]}")
    if not found:
        return None
    return min(found)[2]
