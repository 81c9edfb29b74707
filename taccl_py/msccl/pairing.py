"""Which connections share a threadblock, and how their steps interleave and fuse.

Where a rank receives chunks from ``q`` and forwards exactly those chunks to
``p`` on the same channel (rings, chains, trees), the receiving connection
``q -> r`` and the sending connection ``r -> p`` can be served by one
threadblock, and a receive followed by the forward of the same chunks fuses
into one step (``rcs``; ``rrcs``/``rrs`` for reductions). This module decides

* which (receive peer, send peer) pairs a rank gets per channel
  (:func:`choose_pairs`: the pairs through which most messages flow straight
  on, each connection in at most one pair);
* how a pair's two FIFOs interleave in the threadblock (:func:`merge`): a
  receive and a send are placed in an order that makes nothing wait that the
  schedule does not already make wait, judged by :class:`ScheduleOrder`;
  a pair that cannot be interleaved so is dropped;
* which fused reductions keep their result (:func:`dead_after`: ``rrs`` when
  the reduced value is only forwarded, ``rrcs`` when it is still needed);
* which receives must not write in their threadblock (:func:`deferred_receives`):
  a threadblock takes its steps in order, so a receive whose write waits for
  other writers or readers of its chunks would hold back the threadblock's
  next step, which the schedule does not make wait for that write; such a
  receive lands in scratch and is applied elsewhere (see the lowering).

Everything here is a pure function of the schedule's order and buffer layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from taccl_py.msccl.analysis import ARRIVE, COMMIT, START, ScheduleOrder
from taccl_py.msccl.layout import BufferLayout, is_contiguous
from taccl_py.schedule import Op
from taccl_py.tolerances import SAME_INSTANT_REL

__all__ = ["Item", "Pair", "Precedence", "choose_pairs", "dead_after", "deferred_receives", "delays_nothing", "fusable",
           "merge"]

Pair = tuple[int, int, int, int]
"""(rank, channel, receive peer, send peer): the rank's threadblock serving ``recv peer -> rank -> send peer``."""


class Item(NamedTuple):
    """One entry of a threadblock's order: a receive (transfer id), a send, or both fused (a named tuple: one per
    transfer side, so it must be cheap to make)."""

    recv: int = -1
    send: int = -1

    @property
    def fused(self) -> bool:
        return self.recv >= 0 and self.send >= 0


class Precedence:
    """Is one event of the schedule never earlier than another? What placing steps in order needs to know.

    True when the schedule makes the later event wait for the earlier one
    (:meth:`ScheduleOrder.surely_waits`, a bounded search), or, given the
    schedule's simulated times at the size the XML is for (``times``: start,
    arrival and commit of every transfer), when it is not earlier in them.
    Without times the answer holds at every size; with them, at that size
    (where the structure alone would leave many receives to be applied apart).
    A False only costs steps or threadblocks, never correctness.
    """

    def __init__(self, order: ScheduleOrder, times: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
        self.order = order
        self.times = times

    def __call__(self, later: tuple[int, int], earlier: tuple[int, int]) -> bool:
        if self.times is not None:
            t_later = float(self.times[later[1]][later[0]])
            t_earlier = float(self.times[earlier[1]][earlier[0]])
            return t_later >= t_earlier - SAME_INSTANT_REL * max(1.0, abs(t_earlier))
        return self.order.surely_waits(later, earlier)


def fusable(order: ScheduleOrder, a: int, b: int, layout: BufferLayout) -> bool:
    """Receive ``a`` and send ``b`` can be one rcs/rrcs/rrs step.

    ``b`` forwards exactly the chunks ``a`` delivered, on the same channel, and
    waits for nothing else; ``a`` is not part of an exchange; the chunks sit contiguously on the rank; and
    nothing outside the two connections waits for ``a``'s commit.
    """
    transfers = order.schedule.transfers
    ta, tb = transfers[a], transfers[b]
    if ta.chunks != tb.chunks or ta.dst != tb.src or ta.channel != tb.channel or ta.exchange is not None:
        return False  # an exchange member is received into scratch (see the lowering), never forwarded as it lands
    if order.raw[b] != (a,) or any(x != a for x in tb.after):
        return False
    if not is_contiguous([layout.where(ta.dst, k) for k in ta.chunks]):
        return False
    q, r, p = ta.src, ta.dst, tb.dst
    for d in order.dependents[a]:
        if d == b:
            continue
        td = transfers[d]
        if td.channel != ta.channel or (td.src, td.dst) not in ((q, r), (r, p)):
            return False
    return True


def choose_pairs(order: ScheduleOrder, layout: BufferLayout, banned: Iterable[Pair] = ()) -> frozenset[Pair]:
    """Per rank and channel, match receiving and sending peers by how many chunks flow straight through.

    Greedy by count (ties by the pair itself, so the choice is deterministic);
    each receiving and each sending connection joins at most one pair.
    """
    transfers = order.schedule.transfers
    counts: dict[Pair, int] = {}
    for b, tb in enumerate(transfers):
        raw = order.raw[b]
        if len(raw) == 1 and raw[0] >= 0 and fusable(order, raw[0], b, layout):
            key = (tb.src, tb.channel, transfers[raw[0]].src, tb.dst)
            counts[key] = counts.get(key, 0) + 1
    excluded = frozenset(banned)
    chosen: set[Pair] = set()
    used_recv: set[tuple[int, int, int]] = set()
    used_send: set[tuple[int, int, int]] = set()
    for key in sorted(counts, key=lambda k: (-counts[k], k)):
        r, ch, q, p = key
        if key in excluded or (r, ch, q) in used_recv or (r, ch, p) in used_send:
            continue
        chosen.add(key)
        used_recv.add((r, ch, q))
        used_send.add((r, ch, p))
    return frozenset(chosen)


def merge(order: ScheduleOrder, recvs: list[int], sends: list[int], layout: BufferLayout,
          precedes: Precedence | None = None) -> tuple[Item, ...] | None:
    """Interleave a connection's receives and another's sends in one threadblock, fusing forwards.

    At each point the send head goes first if it does not wait for the
    receive head and, after a receive, already waits for that receive's
    commit; else the receive head, if it does not wait for the send head and
    whatever waits for it already waits for the previous send's arrival.
    None when neither can go, or when the order found would delay something
    the schedule does not (:func:`delays_nothing`): the pair must not share a
    threadblock.
    """
    transfers = order.schedule.transfers
    items: list[Item] = []
    i = j = 0
    prev: Item | None = None
    conns = {(transfers[recvs[0]].src, transfers[recvs[0]].dst), (transfers[sends[0]].src, transfers[sends[0]].dst)}
    channel = transfers[recvs[0]].channel
    while i < len(recvs) or j < len(sends):
        a = recvs[i] if i < len(recvs) else -1
        b = sends[j] if j < len(sends) else -1
        if a >= 0 and b >= 0 and fusable(order, a, b, layout):
            item = Item(recv=a, send=b)
            i += 1
            j += 1
        elif b >= 0 and not (a >= 0 and order.waits((b, START), (a, COMMIT))) and _send_after(order, prev, b):
            item = Item(send=b)
            j += 1
        elif a >= 0 and not (b >= 0 and order.waits((a, COMMIT), (b, ARRIVE))) and _recv_after(
                order, prev, a, conns, channel, precedes):
            item = Item(recv=a)
            i += 1
        else:
            return None
        items.append(item)
        prev = item
    merged = tuple(items)
    precedes = precedes or Precedence(order)
    if not delays_nothing(order, merged, deferred_receives(order, [merged], precedes), precedes):
        return None
    return merged


def _send_after(order: ScheduleOrder, prev: Item | None, b: int) -> bool:
    """Placing send ``b`` right after ``prev`` delays nothing: b waits for prev anyway."""
    if prev is None or prev.send >= 0:
        return True
    return order.waits((b, START), (prev.recv, COMMIT))


def _recv_after(order: ScheduleOrder, prev: Item | None, a: int, conns: set[tuple[int, int]], channel: int,
                precedes: Precedence | None = None) -> bool:
    """Placing receive ``a`` after ``prev`` delays nothing outside this threadblock: by the schedule's structure,
    or, with the simulated times at the file's size (``precedes`` with times), in those times (as
    :func:`delays_nothing`, which checks the whole order afterwards, judges it)."""
    if prev is None or prev.send < 0:
        return True
    b = prev.send
    transfers = order.schedule.transfers
    timed = precedes is not None and precedes.times is not None
    for d in order.dependents[a]:
        td = transfers[d]
        if td.channel == channel and (td.src, td.dst) in conns:
            continue
        event = START if (a in order.raw[d] or a in td.after) else COMMIT
        if not order.waits((d, event), (b, ARRIVE)) and not (timed and precedes is not None
                                                             and precedes((d, event), (b, ARRIVE))):
            return False
    return True


def deferred_receives(order: ScheduleOrder, threadblocks: Iterable[Sequence[Item]],
                      precedes: Precedence) -> frozenset[int]:
    """Receives (transfer ids) whose write must leave their threadblock so it delays nothing.

    In a threadblock an item completes when its step does: a receive that
    writes in place when it *commits* (arrived, and every earlier writer and
    reader of its chunks at the rank is done), a receive into scratch when it
    *arrives*, a send or a fused step when its data arrives. The next item
    cannot run before that, which is exact only when the schedule makes it
    wait for that event anyway: a send's start, a receive's commit (or, landing
    in scratch, its arrival) must wait for it. Going backwards through each
    threadblock (the last item delays nothing), a receive-only item writes in
    place when the next item waits for its commit, or when its commit is its
    arrival and the next item waits for that; otherwise it lands in scratch
    (arrivals on one connection are in order, so a receive after it never
    waits longer than the schedule says). Sends and fused steps are placed by
    :func:`merge`, which already makes a send wait for a preceding receive.
    "Waits" is ``precedes``.
    """
    out: set[int] = set()
    for items in threadblocks:
        following: tuple[int, int] | None = None  # the event the next item's step requires
        for item in reversed(items):
            if item.send >= 0:
                following = (item.send, START)
                continue
            a = item.recv
            if following is None or _writes_in_place(order, a, following, precedes):
                following = (a, COMMIT)
            else:
                out.add(a)
                following = (a, ARRIVE)
    return frozenset(out)


def _writes_in_place(order: ScheduleOrder, a: int, following: tuple[int, int], precedes: Precedence) -> bool:
    """Receive ``a`` may commit in its threadblock before ``following``: that event waits for its commit, or for its
    arrival when it commits on arrival.

    The same answer in either order of the questions; the order only saves work, since a bounded search that
    finds nothing takes its whole budget. A send following (a forward) usually waits for the commit; a receive
    following on the same connection usually waits only for the arrival (connections deliver in order).
    """
    commit = (a, COMMIT)
    on_arrival = (a, ARRIVE)
    if following[1] == START:
        return precedes(following, commit) or (precedes(following, on_arrival)
                                               and _commits_on_arrival(order, a, precedes))
    return (precedes(following, on_arrival) and _commits_on_arrival(order, a, precedes)) or precedes(following,
                                                                                                     commit)


def delays_nothing(order: ScheduleOrder, items: Sequence[Item], deferred: frozenset[int],
                   precedes: Precedence) -> bool:
    """Running ``items`` in order in one threadblock delays no event anything outside it waits for.

    A step runs once the step before it is done, so an item may finish later
    than in the schedule: then it is *late*, bounded by the events (the
    *gates*) that made the steps before it finish, which are events of the
    schedule too. Going forwards, an item whose own event (a send's start, a
    fused step's send start, a receive's commit, or the arrival of one landing
    in scratch, ``deferred``) waits for every gate is on time, and the gates
    become its completion. A late send would shift everything after it: the
    order is refused. A late receive is harmless when every transfer outside
    the threadblock's connections that waits for its commit also waits for the
    gates; later items are gated by its completion and by the same gates.
    Whatever ends late ends by a gate, so the makespan does not grow.
    "Waits" is ``precedes``.
    """
    transfers = order.schedule.transfers
    own_connections = {order.connection_id[t] for item in items for t in item if t >= 0}
    gates: list[tuple[int, int]] = []
    for item in items:
        if item.send >= 0:
            need = (item.send, START)
            if any(not precedes(need, g) for g in gates):
                return False
            gates = [(item.send, ARRIVE)]
            continue
        a = item.recv
        own = (a, ARRIVE) if a in deferred else (a, COMMIT)
        late = [g for g in gates if not precedes(own, g)]
        if late:
            for d in order.dependents[a]:
                if order.connection_id[d] in own_connections:
                    continue  # a later item of this threadblock: gated below
                event = START if (a in order.raw[d] or a in transfers[d].after) else COMMIT
                if any(not precedes((d, event), g) for g in late):
                    return False
        gates = [*late, own]
    return True


def _commits_on_arrival(order: ScheduleOrder, a: int, precedes: Precedence) -> bool:
    """Transfer ``a`` commits when it arrives: every earlier writer and reader it waits for is done by then."""
    here = (a, ARRIVE)
    return (all(w < 0 or precedes(here, (w, COMMIT)) for w in order.waw[a])
            and all(precedes(here, (x, ARRIVE)) for x in order.war[a]))


def dead_after(order: ScheduleOrder, required: frozenset[tuple[int, int]], a: int, b: int) -> bool:
    """The reduced value ``a`` writes is read only by ``b`` and then overwritten or never needed (``rrs``)."""
    transfers = order.schedule.transfers
    ta = transfers[a]
    for k in ta.chunks:
        readers, next_writer = order.after_write[a].get(k, ((), -1))
        if readers != (b,):
            return False
        if next_writer >= 0:
            if transfers[next_writer].op is not Op.COPY:
                return False
        elif (ta.dst, k) in required:
            return False
    return True
