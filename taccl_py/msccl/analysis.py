"""What orders a schedule's transfers (the start/arrive/commit rules of :mod:`taccl_py.schedule`).

For each transfer: the transfers whose commit its start waits for (the last
writer of each chunk it reads at the sender, and ``after``), its predecessor on
its connection (whose arrival it waits for), and, at the receiver, the earlier
writers whose commit and the earlier readers whose arrival its commit waits
for. Inside an exchange every read counts as earlier than every write. :meth:`ScheduleOrder.waits` answers "does event X wait for event Y" by a
bounded search, which the lowering uses to place steps where they delay
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from taccl_py.schedule import Schedule

__all__ = ["ARRIVE", "COMMIT", "INITIAL", "START", "ScheduleOrder", "analyze"]

START, ARRIVE, COMMIT = 0, 1, 2
INITIAL = -1
"""Stands for "the value the rank held before the first transfer" in writer sets."""

_SEARCH_LIMIT = 600


@dataclass
class ScheduleOrder:
    """Per-transfer orderings of a schedule (indices are transfer ids; INITIAL marks the initial value)."""

    schedule: Schedule
    raw: list[tuple[int, ...]]
    """Last writer (per chunk) at the sender before the transfer reads: its start waits for their commit."""
    waw: list[tuple[int, ...]]
    """Last writer (per chunk) at the receiver: the transfer's commit waits for their commit."""
    war: list[tuple[int, ...]]
    """Readers at the receiver since that write: the transfer's commit waits for their arrival."""
    connection_prev: list[int]
    after_write: list[dict[int, tuple[tuple[int, ...], int]]]
    """Per transfer, per chunk it writes: (readers until the next write, next writer or -1) at the receiver."""
    dependents: list[set[int]]
    """Transfers whose start or commit waits for this transfer's commit."""
    forward_after: bool

    def waits(self, event_from: tuple[int, int], event_to: tuple[int, int]) -> bool:
        """True if ``event_from`` (transfer, START/ARRIVE/COMMIT) provably waits for ``event_to``.

        A bounded search: False may also mean "not found within the budget".
        """
        target_t = event_to[0]
        if event_from == event_to:
            return True
        stack = [event_from]
        seen = {event_from}
        transfers = self.schedule.transfers
        while stack and len(seen) < _SEARCH_LIMIT:
            t, kind = stack.pop()
            if kind == START:
                nxt = [(w, COMMIT) for w in self.raw[t] if w >= 0]
                nxt += [(a, COMMIT) for a in transfers[t].after]
                if self.connection_prev[t] >= 0:
                    nxt.append((self.connection_prev[t], ARRIVE))
            elif kind == ARRIVE:
                nxt = [(t, START)]
            else:
                nxt = [(t, ARRIVE)] + [(w, COMMIT) for w in self.waw[t] if w >= 0] + [(x, ARRIVE)
                                                                                      for x in self.war[t]]
            for event in nxt:
                if event == event_to:
                    return True
                if event in seen or (not self.forward_after and event[0] < target_t):
                    continue
                seen.add(event)
                stack.append(event)
        return False


def analyze(schedule: Schedule) -> ScheduleOrder:
    """Orderings of every transfer, in one pass over the program order."""
    n = len(schedule.transfers)
    num_chunks = schedule.collective.num_chunks
    last_writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    last_on_connection: dict[tuple[int, int, int], int] = {}
    raw: list[tuple[int, ...]] = []
    waw: list[tuple[int, ...]] = []
    war: list[tuple[int, ...]] = []
    connection_prev: list[int] = []
    accesses: dict[int, list[tuple[int, bool]]] = {}  # slot -> (transfer, writes?) in program order
    transfers = schedule.transfers
    raw_of: dict[int, tuple[int, ...]] = {}

    def read(i: int) -> tuple[int, ...]:
        t = transfers[i]
        r: dict[int, None] = {}
        for c in t.chunks:
            key = t.src * num_chunks + c
            r[last_writer.get(key, INITIAL)] = None
            readers.setdefault(key, []).append(i)
            accesses.setdefault(key, []).append((i, False))
        return tuple(r)

    for i, t in enumerate(transfers):
        dst_base = t.dst * num_chunks
        if t.exchange is None:
            raw.append(read(i))
        else:  # an exchange: every member reads before any member writes
            if i == 0 or transfers[i - 1].exchange != t.exchange:
                end = i
                while end < n and transfers[end].exchange == t.exchange:
                    raw_of[end] = read(end)
                    end += 1
            raw.append(raw_of.pop(i))
        w: dict[int, None] = {}
        x: dict[int, None] = {}
        for c in t.chunks:
            key = dst_base + c
            w[last_writer.get(key, INITIAL)] = None
            for reader in readers.pop(key, ()):
                x[reader] = None
            last_writer[key] = i
            accesses.setdefault(key, []).append((i, True))
        waw.append(tuple(w))
        war.append(tuple(x))
        conn = (t.src, t.dst, t.channel)
        connection_prev.append(last_on_connection.get(conn, -1))
        last_on_connection[conn] = i
    after_write: list[dict[int, tuple[tuple[int, ...], int]]] = [{} for _ in range(n)]
    for key, seq in accesses.items():
        chunk = key % num_chunks
        for pos, (i, writes) in enumerate(seq):
            if not writes:
                continue
            later_readers: list[int] = []
            next_writer = -1
            for j, writes_next in seq[pos + 1:]:
                if writes_next:
                    next_writer = j
                    break
                later_readers.append(j)
            after_write[i][chunk] = (tuple(later_readers), next_writer)
    dependents: list[set[int]] = [set() for _ in range(n)]
    for i, t in enumerate(schedule.transfers):
        for w_ in raw[i]:
            if w_ >= 0:
                dependents[w_].add(i)
        for a in t.after:
            dependents[a].add(i)
        for w_ in waw[i]:
            if w_ >= 0:
                dependents[w_].add(i)
    # an exchange member's commit can wait for a later member's arrival: no pruning by index then
    forward = any(t.exchange is not None or any(a > i for a in t.after) for i, t in enumerate(transfers))
    return ScheduleOrder(schedule, raw, waw, war, connection_prev, after_write, dependents, forward)
