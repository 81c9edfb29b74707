"""What orders a schedule's transfers (the start/arrive/commit rules of :mod:`taccl_py.schedule`).

For each transfer: the transfers whose commit its start waits for (the last
writer of each chunk it reads at the sender, and ``after``), its predecessor on
its connection (whose arrival it waits for), and, at the receiver, the earlier
writers whose commit and the earlier readers whose arrival its commit waits
for. Inside an exchange every read counts as earlier than every write.
Together these are a graph over *events* (each transfer's start, arrival
and commit); :meth:`ScheduleOrder.waits` answers "does event X wait for event
Y", i.e. is Y reachable from X, which the lowering uses to place steps where
they delay nothing.

The answer is exact. Two labels computed once in linear time refute most
queries at once: the *level* (longest chain of waits below an event) and the
*height* (longest chain of waits above it); if X waits for Y then X's level is
above Y's and X's height below Y's. The rest is a search from X that never
enters an event failing the same test, and that stops at any event of Y's own
connection (starts and arrivals on one connection are totally ordered).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from taccl_py.schedule import Schedule, exchange_blocks

__all__ = ["ARRIVE", "COMMIT", "INITIAL", "START", "ScheduleOrder", "analyze"]

START, ARRIVE, COMMIT = 0, 1, 2
INITIAL = -1
"""Stands for "the value the rank held before the first transfer" in writer sets."""


@dataclass(frozen=True)
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
    dependents: list[set[int]]
    """Transfers whose start or commit waits for this transfer's commit."""
    forward_after: bool
    connection_id: list[int]
    """Index of the transfer's connection (src, dst, channel), in order of first use."""
    connection_pos: list[int]
    """Position of the transfer on its connection."""

    @cached_property
    def after_write(self) -> list[dict[int, tuple[tuple[int, ...], int]]]:
        """Per transfer, per chunk it writes: (readers until the next write, next writer or -1) at the receiver."""
        transfers = self.schedule.transfers
        num_chunks = self.schedule.collective.num_chunks
        accesses: dict[int, list[tuple[int, bool]]] = {}  # slot -> (transfer, writes?) in program order
        for first, end in exchange_blocks(transfers):  # inside an exchange every read comes first
            for i in range(first, end):
                t = transfers[i]
                for c in t.chunks:
                    accesses.setdefault(t.src * num_chunks + c, []).append((i, False))
            for i in range(first, end):
                t = transfers[i]
                for c in t.chunks:
                    accesses.setdefault(t.dst * num_chunks + c, []).append((i, True))
        out: list[dict[int, tuple[tuple[int, ...], int]]] = [{} for _ in transfers]
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
                out[i][chunk] = (tuple(later_readers), next_writer)
        return out

    def waits(self, event_from: tuple[int, int], event_to: tuple[int, int]) -> bool:
        """True if ``event_from`` (transfer, START/ARRIVE/COMMIT) waits for ``event_to``, directly or not."""
        source = 3 * event_from[0] + event_from[1]
        target = 3 * event_to[0] + event_to[1]
        if source == target or self._follows_on_connection(event_from, event_to):
            return True
        labels = self._labels
        if labels is None:
            return self._search(source, target, None)
        level, height = labels
        if level[source] <= level[target] or height[source] >= height[target]:
            return False
        return self._search(source, target, labels)

    def surely_waits(self, event_from: tuple[int, int], event_to: tuple[int, int], budget: int = 256) -> bool:
        """True only if ``event_from`` waits for ``event_to``; False also when that is not found in ``budget`` steps.

        For callers to whom a wrong False costs only efficiency (a step or a
        threadblock more), never correctness: the search is bounded. It goes
        deepest first (lowest level), and for a commit target it also stops
        at any event that waits for that commit directly (the start of a
        reader of the write, or later on the reader's connection; a later
        writer's commit).
        """
        source = 3 * event_from[0] + event_from[1]
        target = 3 * event_to[0] + event_to[1]
        if source == target or self._follows_on_connection(event_from, event_to):
            return True
        labels = self._labels
        if labels is None:
            return self._search(source, target, None)
        level, height = labels
        level_to, height_to = level[target], height[target]
        if level[source] <= level_to or height[source] >= height_to:
            return False
        target_t, target_kind = divmod(target, 3)
        conn_id, conn_pos = self.connection_id, self.connection_pos
        stops: dict[int, int] = {}  # connection -> first position (2 x index + kind) that waits for the target
        events = {target}
        if target_kind == COMMIT:
            transfers = self.schedule.transfers
            for d in self.dependents[target_t]:
                if target_t in self.raw[d] or target_t in transfers[d].after:
                    c, pos = conn_id[d], 2 * conn_pos[d] + START
                    if stops.get(c, pos + 1) > pos:
                        stops[c] = pos
                else:
                    events.add(3 * d + COMMIT)
        else:
            stops[conn_id[target_t]] = 2 * conn_pos[target_t] + target_kind
        stack = [source]
        seen = {source}
        while stack and budget > 0:
            budget -= 1
            for p in sorted(self._preds(stack.pop()), key=level.__getitem__, reverse=True):
                if p in events:
                    return True
                if p in seen:
                    continue
                seen.add(p)
                if level[p] <= level_to or height[p] >= height_to:
                    continue
                t, kind = divmod(p, 3)
                if kind != COMMIT:
                    first = stops.get(conn_id[t])
                    if first is not None and 2 * conn_pos[t] + kind >= first:
                        return True
                stack.append(p)
        return False

    def _follows_on_connection(self, event_from: tuple[int, int], event_to: tuple[int, int]) -> bool:
        """``event_to`` is the start or arrival of a transfer on ``event_from``'s connection, and ``event_from`` a later
        event there (a later transfer's, or a later one of the same transfer's): a connection delivers in order, so
        the answer needs no search (the searches would find it at their first step)."""
        if event_to[1] == COMMIT:
            return False
        t_from, t_to = event_from[0], event_to[0]
        if self.connection_id[t_from] != self.connection_id[t_to]:
            return False
        return (self.connection_pos[t_from], event_from[1]) > (self.connection_pos[t_to], event_to[1])

    def _search(self, source: int, target: int, labels: tuple[list[int], list[int]] | None) -> bool:
        """Depth-first search from ``source`` over events that could still reach ``target``."""
        target_t, target_kind = divmod(target, 3)
        chain = self.connection_id[target_t] if target_kind != COMMIT else -1
        chain_pos = 2 * self.connection_pos[target_t] + target_kind
        level_to, height_to = (labels[0][target], labels[1][target]) if labels is not None else (0, 0)
        conn_id, conn_pos = self.connection_id, self.connection_pos
        preds = self._preds
        stack = [source]
        seen = {source}
        while stack:
            for p in preds(stack.pop()):
                if p == target:
                    return True
                if p in seen:
                    continue
                seen.add(p)
                if labels is not None and (labels[0][p] <= level_to or labels[1][p] >= height_to):
                    continue
                t, kind = divmod(p, 3)
                if kind != COMMIT and conn_id[t] == chain:
                    if 2 * conn_pos[t] + kind >= chain_pos:
                        return True
                    continue  # an earlier event of the target's connection cannot reach it
                stack.append(p)
        return False

    def _preds(self, event: int) -> list[int]:
        """Events ``event`` waits for directly."""
        t, kind = divmod(event, 3)
        if kind == ARRIVE:
            return [3 * t]
        if kind == START:
            out = [3 * w + COMMIT for w in self.raw[t] if w >= 0]
            out += [3 * a + COMMIT for a in self.schedule.transfers[t].after]
            prev = self.connection_prev[t]
            if prev >= 0:
                out.append(3 * prev + ARRIVE)
            return out
        out = [3 * t + ARRIVE]
        out += [3 * w + COMMIT for w in self.waw[t] if w >= 0]
        out += [3 * x + ARRIVE for x in self.war[t]]
        return out

    @cached_property
    def _labels(self) -> tuple[list[int], list[int]] | None:
        """(level, height) of every event, or None when the waits form a cycle (then the search is plain)."""
        return self._sorted_labels() if self.forward_after else self._forward_labels()

    def _sorted_labels(self) -> tuple[list[int], list[int]] | None:
        """Levels and heights along a topological sort of the events (None if there is a cycle)."""
        n = 3 * len(self.schedule.transfers)
        order = self._topological_order(n)
        if order is None:
            return None
        level = [0] * n
        for e in order:
            level[e] = 1 + max((level[p] for p in self._preds(e)), default=0)
        height = [1] * n
        for e in reversed(order):
            h = height[e] + 1
            for p in self._preds(e):
                if height[p] < h:
                    height[p] = h
        return level, height

    def _forward_labels(self) -> tuple[list[int], list[int]]:
        """Levels and heights when every wait points to an earlier transfer: program order is topological.

        (Not so with an ``after`` pointing forward or an exchange: then ``_sorted_labels``.)
        """
        transfers = self.schedule.transfers
        raw, waw, war, prev_of = self.raw, self.waw, self.war, self.connection_prev
        count = len(transfers)
        level = [0] * (3 * count)
        for t in range(count):
            s = 0
            for w in raw[t]:
                if w >= 0 and level[3 * w + 2] > s:
                    s = level[3 * w + 2]
            for a in transfers[t].after:
                if level[3 * a + 2] > s:
                    s = level[3 * a + 2]
            p = prev_of[t]
            if p >= 0 and level[3 * p + 1] > s:
                s = level[3 * p + 1]
            level[3 * t] = s + 1
            c = s + 2
            level[3 * t + 1] = c
            for w in waw[t]:
                if w >= 0 and level[3 * w + 2] > c:
                    c = level[3 * w + 2]
            for x in war[t]:
                if level[3 * x + 1] > c:
                    c = level[3 * x + 1]
            level[3 * t + 2] = c + 1
        height = [1] * (3 * count)
        for t in range(count - 1, -1, -1):
            h = height[3 * t + 2] + 1  # what the commit waits for
            if height[3 * t + 1] < h:
                height[3 * t + 1] = h
            for w in waw[t]:
                if w >= 0 and height[3 * w + 2] < h:
                    height[3 * w + 2] = h
            for x in war[t]:
                if height[3 * x + 1] < h:
                    height[3 * x + 1] = h
            h = height[3 * t + 1] + 1  # what the arrival waits for: the start
            if height[3 * t] < h:
                height[3 * t] = h
            h = height[3 * t] + 1  # what the start waits for
            for w in raw[t]:
                if w >= 0 and height[3 * w + 2] < h:
                    height[3 * w + 2] = h
            for a in transfers[t].after:
                if height[3 * a + 2] < h:
                    height[3 * a + 2] = h
            p = prev_of[t]
            if p >= 0 and height[3 * p + 1] < h:
                height[3 * p + 1] = h
        return level, height

    def _topological_order(self, n: int) -> list[int] | None:
        """Events so that each comes after those it waits for (``after`` may point forward), or None."""
        indegree = [0] * n
        succs: list[list[int]] = [[] for _ in range(n)]
        for e in range(n):
            for p in self._preds(e):
                succs[p].append(e)
                indegree[e] += 1
        ready = [e for e in range(n) if not indegree[e]]
        order: list[int] = []
        while ready:
            e = ready.pop()
            order.append(e)
            for s in succs[e]:
                indegree[s] -= 1
                if not indegree[s]:
                    ready.append(s)
        return order if len(order) == n else None


def analyze(schedule: Schedule) -> ScheduleOrder:
    """Orderings of every transfer, in one pass over the program order."""
    transfers = schedule.transfers
    n = len(transfers)
    num_chunks = schedule.collective.num_chunks
    last_writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    last_on_connection: dict[tuple[int, int, int], int] = {}
    connection_ids: dict[tuple[int, int, int], int] = {}
    connection_id: list[int] = []
    connection_pos: list[int] = []
    connection_len: list[int] = []
    raw: list[tuple[int, ...]] = []
    waw: list[tuple[int, ...]] = []
    war: list[tuple[int, ...]] = []
    connection_prev: list[int] = []
    dependents: list[set[int]] = [set() for _ in range(n)]

    def read(i: int) -> tuple[int, ...]:
        """Last writers of what transfer ``i`` reads at its sender; it joins the readers there."""
        t = transfers[i]
        base = t.src * num_chunks
        if len(t.chunks) == 1:
            key = base + t.chunks[0]
            seen = readers.get(key)
            if seen is None:
                readers[key] = [i]
            else:
                seen.append(i)
            return (last_writer.get(key, INITIAL),)
        rs: dict[int, None] = {}
        for c in t.chunks:
            key = base + c
            rs[last_writer.get(key, INITIAL)] = None
            readers.setdefault(key, []).append(i)
        return tuple(rs)

    exchange_reads: dict[int, tuple[int, ...]] = {}
    for i, t in enumerate(transfers):
        if t.exchange is None:
            r = read(i)
        else:  # an exchange: every member reads before any member writes
            if i not in exchange_reads:
                end = i
                while end < n and transfers[end].exchange == t.exchange:
                    exchange_reads[end] = read(end)
                    end += 1
            r = exchange_reads.pop(i)
        dst_base = t.dst * num_chunks
        chunks = t.chunks
        if len(chunks) == 1:
            key = dst_base + chunks[0]
            w: tuple[int, ...] = (last_writer.get(key, INITIAL),)
            x: tuple[int, ...] = tuple(readers.pop(key, ()))
            last_writer[key] = i
        else:
            ws: dict[int, None] = {}
            xs: dict[int, None] = {}
            for c in chunks:
                key = dst_base + c
                ws[last_writer.get(key, INITIAL)] = None
                for reader in readers.pop(key, ()):
                    xs[reader] = None
                last_writer[key] = i
            w, x = tuple(ws), tuple(xs)
        raw.append(r)
        waw.append(w)
        war.append(x)
        for v in r:
            if v >= 0:
                dependents[v].add(i)
        for v in w:
            if v >= 0:
                dependents[v].add(i)
        for a in t.after:
            dependents[a].add(i)
        conn = (t.src, t.dst, t.channel)
        connection_prev.append(last_on_connection.get(conn, -1))
        last_on_connection[conn] = i
        cid = connection_ids.get(conn)
        if cid is None:
            cid = connection_ids[conn] = len(connection_len)
            connection_len.append(0)
        connection_id.append(cid)
        connection_pos.append(connection_len[cid])
        connection_len[cid] += 1
    # an exchange member's commit can wait for a later member's arrival: program order is not topological then
    forward = any(t.exchange is not None or any(a > i for a in t.after) for i, t in enumerate(transfers))
    return ScheduleOrder(schedule, raw, waw, war, connection_prev, dependents, forward, connection_id,
                         connection_pos)
