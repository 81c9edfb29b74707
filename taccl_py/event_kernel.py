"""The event kernel under the schedule simulator and the XML timing: one heap, one loop, transfers through the network.

A client (``simulator._Run``, ``msccl.timing._Timing``) subclasses :class:`EventKernel`,
fills the per-transfer arrays (``resources``, ``latency_us``, ``num_bytes``, indexed by
transfer id) and implements three steps: :meth:`~EventKernel.start` (what happens at
time 0), :meth:`~EventKernel.arrive` (a transfer's bytes are all at the receiver) and
:meth:`~EventKernel.wake` (a timer it set came up). It drives transfers with
:meth:`~EventKernel.send` and timers with :meth:`~EventKernel.wake_at`.

A transfer first waits its latency (an :attr:`Event.ENTER` event), then its bytes
enter the fluid network (:class:`taccl_py.fluid.FluidNetwork`), where they share
every resource they use max-min fairly; when they are delivered it arrives. A
transfer with no bytes never enters the network: it arrives when its latency has
passed. (One with no latency goes straight into the network.)

Events live in one heap keyed by ``(time, seq)``: ``seq`` counts pushes, so events
at the same time come out in the order they were queued (FIFO ties, as SimPy's
core). Events closer than :data:`BATCH_HORIZON` to the first one are handled as one
batch at the first one's time, and the network's rates are re-solved once after each
batch, not after each event (see :func:`batch_end`).

A flow group (flows on the same resources, which get one rate) has at most one
live :attr:`Event.FINISH` event, for its member that finishes first; its state is
a :class:`~taccl_py.fluid.Finish`. A rate change that brings the finish earlier queues a new event
(the old one becomes void); one that delays it marks the queued event
:attr:`~taccl_py.fluid.Finish.LATE`, and the event moves to the actual finish when it comes up.

A transfer may be one leg of a longer journey (:class:`Relays`: store-and-forward
switches make every link of a route a leg of its own). When a leg's bytes are
delivered, the kernel sends each leg that waits for it (once every leg it waits for
is delivered) and calls :meth:`~EventKernel.arrive` for the client transfers the leg
completes; without relays every transfer completes itself.

A step that finds the schedule or program wrong raises :class:`Fault`; it ends the
run (the link accounting is closed at the time reached) and the client turns it
into its verdict. Nothing here knows about chunks, ranks or threadblocks.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from taccl_py.fluid import Finish, FlowGroup, FluidNetwork, binding_resources
from taccl_py.tolerances import SAME_INSTANT_REL

__all__ = ["BATCH_HORIZON", "Event", "EventKernel", "Fault", "Finish", "Relays", "batch_end"]

BATCH_HORIZON = SAME_INSTANT_REL
"""Relative width of a batch: events within ``BATCH_HORIZON * max(1, |now|)`` us of ``now`` run together."""


def batch_end(now: float) -> float:
    """The last time that belongs to the batch starting at ``now``.

    Floating-point sums make transfers that finish "together" finish a few
    ulps apart; handling them as one batch gives every one the same time and
    lets the network re-solve once for all of them.
    """
    return now + BATCH_HORIZON * max(1.0, abs(now))


class Fault(Exception):
    """A step found the schedule or program wrong; the message says what. Never leaves the simulator."""


class Event(IntEnum):
    """What a queued event does when it comes up."""

    ENTER = 0
    """A transfer's latency has passed: its bytes enter the network (or it arrives, if it has none)."""
    FINISH = 1
    """A flow group's first member has delivered its bytes (if the event is still the group's live one)."""
    TIMER = 2
    """A timer the client set: :meth:`EventKernel.wake`."""


@dataclass
class Relays:
    """Transfers relayed leg by leg, indexed like the kernel's per-transfer arrays (see the module doc).

    ``following[i]``: the legs that wait for leg i's bytes; ``waiting[i]``: how many legs leg i
    still waits for (a leg no other waits for is sent by the client, and its count is unused);
    ``completes[i]``: the client transfers that arrive when leg i's bytes are delivered.
    ``waiting`` counts down during a run, so a :class:`Relays` serves one run.
    """

    following: Sequence[tuple[int, ...]]
    waiting: list[int]
    completes: Sequence[tuple[int, ...]]


_ENTER, _TIMER = Event.ENTER, Event.TIMER  # module constants: an Enum attribute lookup is slow on the hot path

_Entry = tuple[float, int, int, int, FlowGroup | None]
"""A queued event: (time, seq, Event, transfer, flow group of a FINISH event)."""


class EventKernel:
    """Transfers through latency and a fluid network, timers, and the loop that runs them in time order.

    ``capacities`` are the network's resources in bytes per microsecond (a
    topology's links first, in link order, then any others). Per transfer id:
    ``resources`` (the resource indices its bytes use, each at most once, in any
    order: a route's links, or links plus memory), ``latency_us`` and
    ``num_bytes``; optionally ``weights`` (per transfer, None or one weight per
    resource: what the transfer uses of it per byte it moves, see
    :mod:`taccl_py.fluid`) and ``relays`` (:class:`Relays`). ``now`` is the time of
    the batch being handled.
    """

    __slots__ = ("_queue", "_seq", "latency_us", "net", "now", "num_bytes", "relays", "resources", "weights")

    def __init__(self, capacities: Sequence[float], resources: Sequence[tuple[int, ...]],
                 latency_us: Sequence[float], num_bytes: Sequence[float],
                 weights: Sequence[tuple[float, ...] | None] | None = None, relays: Relays | None = None) -> None:
        unweighted = weights is None or all(w is None for w in weights)
        self.net = FluidNetwork(capacities, binding_resources(capacities, resources) if unweighted else None)
        self.resources = resources
        self.latency_us = latency_us
        self.num_bytes = num_bytes
        self.weights: Sequence[tuple[float, ...] | None] = [None] * len(resources) if weights is None else weights
        self.relays = relays
        """Legs relayed into each other (None: every transfer is its own journey)."""
        self.now = 0.0
        self._queue: list[_Entry] = []
        self._seq = itertools.count(1)

    # ------------------------------------------------------------------ the client's steps
    def start(self) -> None:
        """Everything that happens at time 0 (before the first event)."""

    def end_batch(self, now: float) -> None:
        """After :meth:`start` and after each batch (at its time ``now``): what the client deferred to the end
        of an instant (the simulator's proxy posts: :func:`taccl_py.runtime.proxy_posts`)."""

    def arrive(self, transfer: int, now: float) -> None:
        """``transfer``'s bytes are all at the receiver."""
        raise NotImplementedError

    def wake(self, item: int, time: float) -> None:
        """A timer set with :meth:`wake_at` came up (``time`` is the one it was set for)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ what a client calls
    def send(self, transfer: int, now: float) -> None:
        """Start ``transfer`` at ``now``: its latency, then its bytes, then :meth:`arrive`."""
        latency = self.latency_us[transfer]
        if latency > 0 or not self.num_bytes[transfer] > 0:
            heapq.heappush(self._queue, (now + latency, next(self._seq), _ENTER, transfer, None))
        else:
            self.net.add(transfer, self.resources[transfer], self.num_bytes[transfer], now, self.weights[transfer])

    def send_at(self, transfer: int, start: float) -> None:
        """Start ``transfer`` at ``start`` (a later time than the batch's): its latency, then its bytes."""
        heapq.heappush(self._queue, (start + self.latency_us[transfer], next(self._seq), _ENTER, transfer, None))

    def wake_at(self, time: float, item: int) -> None:
        """Call :meth:`wake` with ``item`` at ``time``."""
        heapq.heappush(self._queue, (time, next(self._seq), _TIMER, item, None))

    def _delivered(self, leg: int, now: float) -> None:
        """With relays: ``leg``'s bytes are delivered; send the legs it was the last to hold up, complete its transfers."""
        relays = self.relays
        assert relays is not None
        waiting = relays.waiting
        for following in relays.following[leg]:
            waiting[following] -= 1
            if not waiting[following]:
                self.send(following, now)
        for transfer in relays.completes[leg]:
            self.arrive(transfer, now)

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Run :meth:`start`, then every event in time order until none is left.

        A :class:`Fault` from a step propagates; either way the network's
        busy intervals are closed at the time reached.
        """
        try:
            self.start()
            self.end_batch(self.now)
            self._loop()
        finally:
            self.net.finish_busy(self.now)

    def _loop(self) -> None:
        """Re-solve, drop dead finish events at the head, handle the next batch; until the heap is empty."""
        queue, seqs = self._queue, self._seq
        heappop, heappush = heapq.heappop, heapq.heappush
        net = self.net
        net_add, net_remove, reshare = net.add, net.remove, net.reshare
        resources, num_bytes, weights = self.resources, self.num_bytes, self.weights
        arrive = self.arrive if self.relays is None else self._delivered
        wake, end_batch = self.wake, self.end_batch
        finish_event, enter_event = Event.FINISH, Event.ENTER  # locals: the loop is the hot path
        no_event, queued, late = Finish.NONE, Finish.QUEUED, Finish.LATE

        def queue_finish(group: FlowGroup, time: float, flow: int) -> None:
            """Queue the group's one live finish event: ``flow`` finishing at ``time``."""
            seq = next(seqs)
            group.due, group.event, group.finish = time, seq, queued
            heappush(queue, (time, seq, finish_event, flow, group))

        now = self.now
        while True:
            for moved, time, flow in reshare(now):  # where rates changed, the first finish may have moved
                if moved.finish is no_event or time < moved.due:
                    queue_finish(moved, time, flow)
                elif moved.finish is queued:
                    moved.finish = late
            while queue and queue[0][2] is finish_event:  # void and late finish events must not open a batch
                time, seq, _, _, group = queue[0]
                assert group is not None
                if group.event == seq and group.finish is queued:
                    break
                heappop(queue)
                if group.event == seq:  # late: move it to the actual finish
                    time, flow = group.next_finish()
                    queue_finish(group, time, flow)
            if not queue:
                break
            now = self.now = queue[0][0]
            horizon = batch_end(now)
            while queue and queue[0][0] <= horizon:
                time, seq, kind, i, group = heappop(queue)
                if kind is finish_event:
                    assert group is not None
                    if group.event != seq:
                        continue  # void: a later event replaced it
                    if group.finish is late:
                        time, i = group.next_finish()
                        if time > horizon:
                            queue_finish(group, time, i)
                            continue
                    net_remove(i, now)
                    if group.size:  # queue the group's next member (it may finish in this same batch)
                        time, flow = group.next_finish()
                        queue_finish(group, time, flow)
                    else:
                        group.finish, group.event = no_event, 0
                    arrive(i, now)
                elif kind is enter_event:
                    if num_bytes[i] > 0:
                        net_add(i, resources[i], num_bytes[i], now, weights[i])
                    else:
                        arrive(i, time)
                else:
                    wake(i, time)
            end_batch(now)
