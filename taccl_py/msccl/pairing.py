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
  the reduced value is only forwarded, ``rrcs`` when it is still needed).

Everything here is a pure function of the schedule's order and buffer layout.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from taccl_py.msccl.analysis import ARRIVE, COMMIT, START, ScheduleOrder
from taccl_py.msccl.layout import BufferLayout, is_contiguous
from taccl_py.schedule import Op

__all__ = ["Item", "Pair", "choose_pairs", "dead_after", "fusable", "merge"]

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


def merge(order: ScheduleOrder, recvs: list[int], sends: list[int], layout: BufferLayout) -> tuple[Item, ...] | None:
    """Interleave a connection's receives and another's sends in one threadblock, fusing forwards.

    At each point the send head goes first if it does not wait for the
    receive head and, after a receive, already waits for that receive's
    commit; else the receive head, if it does not wait for the send head and
    whatever waits for it already waits for the previous send's arrival.
    None when neither can go (the pair must not share a threadblock).
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
                order, prev, a, conns, channel):
            item = Item(recv=a)
            i += 1
        else:
            return None
        items.append(item)
        prev = item
    return tuple(items)


def _send_after(order: ScheduleOrder, prev: Item | None, b: int) -> bool:
    """Placing send ``b`` right after ``prev`` delays nothing: b waits for prev anyway."""
    if prev is None or prev.send >= 0:
        return True
    return order.waits((b, START), (prev.recv, COMMIT))


def _recv_after(order: ScheduleOrder, prev: Item | None, a: int, conns: set[tuple[int, int]], channel: int) -> bool:
    """Placing receive ``a`` after ``prev`` delays nothing outside this threadblock."""
    if prev is None or prev.send < 0:
        return True
    b = prev.send
    transfers = order.schedule.transfers
    for d in order.dependents[a]:
        td = transfers[d]
        if td.channel == channel and (td.src, td.dst) in conns:
            continue
        event = START if (a in order.raw[d] or a in td.after) else COMMIT
        if not order.waits((d, event), (b, ARRIVE)):
            return False
    return True


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
