"""Store-and-forward switches: every link of a transfer's route becomes a leg of its own for the event kernel.

With cut-through switches (the default) a transfer is one flow: it waits its
route's latency, then its bytes cross every link of the route at once at the
max-min rate of the route. With store-and-forward switches
(:attr:`taccl_py.topology.SwitchModel.STORE_AND_FORWARD`) a transfer crosses its
route hop by hop: leg h waits link h's latency, then moves the whole message over
link h alone (a fluid flow of its own, sharing that link max-min with every other
flow on it), and leg h + 1 starts when leg h's bytes have all arrived. Unloaded, a
transfer of b bytes on links with latencies a_h and bandwidths B_h takes
sum_h (a_h + b / B_h), against sum_h a_h + b / min_h B_h with cut-through.

:class:`LegPlan` turns a client's transfers into the kernel's arrays and
:class:`~taccl_py.event_kernel.Relays`: a client transfer keeps its id for its first
leg (so the client still sends it by its own id), later legs get ids after the
client's, and the kernel calls the client's ``arrive`` with the transfer's id when
its last leg is delivered. Endpoint resources (a GPU's memory and channels,
:mod:`taccl_py.endpoint`) go with the leg that touches that GPU: the sender's with
the first leg, the receiver's with the last.

A network group (a switch multicast or in-network reduction, one flow over a tree
of links with cut-through) becomes one leg per link of the tree: a link's leg
starts when the legs of every link feeding it (in some member's route) are
delivered, or when the group starts for a link leaving a sender; a member arrives
when the last link of its route is delivered. The group's own id is a leg without
bytes or links whose latency is the step overhead and which every first link waits for.
"""

from __future__ import annotations

from collections.abc import Sequence

from taccl_py.event_kernel import Relays

__all__ = ["LegPlan", "Side"]

Side = tuple[tuple[int, float], ...]
"""Endpoint resources at one end of a transfer: (resource index, weight) pairs."""


class LegPlan:
    """The kernel's per-leg arrays for ``count`` client transfers, built transfer by transfer.

    Every id starts as a transfer that completes itself with no resources, latency or
    bytes; :meth:`single` sets one that is not relayed (a compute item, a step
    without a route), :meth:`relay` one that crosses a route hop by hop and
    :meth:`relay_group` a network group. ``hop_latency_us`` gives each
    resource that can be a hop (a link) its latency.
    """

    __slots__ = ("completes", "following", "hop_latency_us", "latency_us", "num_bytes", "resources", "waiting",
                 "weights")

    def __init__(self, count: int, hop_latency_us: Sequence[float]) -> None:
        self.hop_latency_us = hop_latency_us
        self.resources: list[tuple[int, ...]] = [()] * count
        self.latency_us: list[float] = [0.0] * count
        self.num_bytes: list[float] = [0.0] * count
        self.weights: list[tuple[float, ...] | None] = [None] * count
        self.following: list[tuple[int, ...]] = [()] * count
        self.waiting: list[int] = [0] * count
        self.completes: list[tuple[int, ...]] = [(i,) for i in range(count)]

    def _leg(self, leg: int, resources: tuple[int, ...], latency_us: float, num_bytes: float,
             weights: tuple[float, ...] | None) -> int:
        """Set leg ``leg``'s figures (a new id when ``leg`` is -1); its id."""
        if leg < 0:
            leg = len(self.resources)
            self.resources.append(resources)
            self.latency_us.append(latency_us)
            self.num_bytes.append(num_bytes)
            self.weights.append(weights)
            self.following.append(())
            self.waiting.append(0)
            self.completes.append(())
        else:
            self.resources[leg], self.latency_us[leg] = resources, latency_us
            self.num_bytes[leg], self.weights[leg] = num_bytes, weights
        return leg

    def _hop(self, leg: int, link: int, lead_us: float, num_bytes: float, side: Side) -> int:
        """A leg over ``link`` with the endpoint resources of ``side``."""
        resources = (link, *(r for r, _ in side))
        weights = None if all(w == 1.0 for _, w in side) else (1.0, *(w for _, w in side))
        return self._leg(leg, resources, self.hop_latency_us[link] + lead_us, num_bytes, weights)

    def single(self, transfer: int, resources: tuple[int, ...], latency_us: float, num_bytes: float,
               weights: tuple[float, ...] | None = None) -> None:
        """Transfer ``transfer`` is one flow on ``resources``, as with cut-through (not relayed)."""
        self._leg(transfer, resources, latency_us, num_bytes, weights)

    def relay(self, transfer: int, route: Sequence[int], lead_us: float, num_bytes: float,
              src_side: Side = (), dst_side: Side = ()) -> None:
        """Transfer ``transfer`` crosses ``route`` (link indices) hop by hop; ``lead_us`` (a step overhead) is paid
        once, with the first hop."""
        if not route:  # no link to cross: one leg on the endpoints' resources alone
            side = src_side + dst_side
            weights = None if all(w == 1.0 for _, w in side) else tuple(w for _, w in side)
            self._leg(transfer, tuple(r for r, _ in side), lead_us, num_bytes, weights)
            return
        last = len(route) - 1
        previous = -1
        for h, link in enumerate(route):
            side = (src_side if h == 0 else ()) + (dst_side if h == last else ())
            leg = self._hop(transfer if h == 0 else -1, link, lead_us if h == 0 else 0.0, num_bytes, side)
            if h:
                self.following[previous] = (leg,)
                self.waiting[leg] = 1
            previous = leg
        if last:
            self.completes[transfer] = ()
            self.completes[previous] = (transfer,)

    def relay_group(self, first: int, routes: Sequence[Sequence[int]], lead_us: float, num_bytes: float,
                    sides: Sequence[tuple[Side, Side]] | None = None) -> None:
        """The network group whose members are ``first, first + 1, ...`` with ``routes``, as one leg per tree link.

        ``sides``: per member, its (sender, receiver) endpoint resources; a resource several
        members use on one link counts once, at the largest weight.
        """
        feeds: dict[int, dict[int, None]] = {}  # link -> the links whose bytes it waits for
        starts: dict[int, None] = {}  # links that leave a sender
        ends: dict[int, list[int]] = {}  # link -> the members whose route ends on it
        extra: dict[int, dict[int, float]] = {}  # link -> endpoint resource -> weight
        for m, route in enumerate(routes):
            member_sides = sides[m] if sides is not None else ((), ())
            for h, link in enumerate(route):
                feeds.setdefault(link, {})
                if h:
                    feeds[link][route[h - 1]] = None
                else:
                    starts[link] = None
                    _merge(extra.setdefault(link, {}), member_sides[0])
            if route:
                ends.setdefault(route[-1], []).append(first + m)
                _merge(extra.setdefault(route[-1], {}), member_sides[1])
        self._leg(first, (), lead_us, 0.0, None)
        self.completes[first] = ()
        leg_of: dict[int, int] = {}
        for link in feeds:
            side = tuple(extra.get(link, {}).items())
            leg = leg_of[link] = self._hop(-1, link, 0.0, num_bytes, side)
            self.waiting[leg] = len(feeds[link]) + (link in starts)
            self.completes[leg] = tuple(ends.get(link, ()))
        self.following[first] = tuple(leg_of[link] for link in starts)
        after: dict[int, list[int]] = {}
        for link, upstream in feeds.items():
            for u in upstream:
                after.setdefault(u, []).append(leg_of[link])
        for u, legs in after.items():
            self.following[leg_of[u]] = tuple(legs)

    def relays(self) -> Relays:
        """The legs' relays for the kernel (one run's worth: the counts go down as legs are delivered)."""
        return Relays(self.following, list(self.waiting), self.completes)


def _merge(into: dict[int, float], side: Side) -> None:
    """Add ``side``'s resources to ``into``, keeping the largest weight of each."""
    for resource, weight in side:
        into[resource] = max(into.get(resource, 0.0), weight)
