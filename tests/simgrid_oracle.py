"""Independent timing oracle: replays a schedule in SimGrid and prints its makespan.

Run by Debian's ``/usr/bin/python3`` (which has ``python3-simgrid``), not by the
project's venv, and imports nothing from taccl_py: it re-derives the schedule
semantics on its own and lets SimGrid share the link bandwidth. Input on stdin,
one JSON object::

    {"links": [{"capacity": units per us, "latency": us}, ...],
     "step_overhead_us": 0.0,
     "transfers": [{"src": 0, "dst": 1, "chunks": [3], "route": [link ids], "units": 1000,
                    "channel": 0, "after": [], "not_before_us": null, "exchange": null}, ...]}

Sizes are whole numbers of a unit the caller picks (a byte, or 1/N byte so that
every chunk is a whole number of units: ``Comm.sendto_async`` takes integers,
and pipelined schedules are chaotic enough that rounding a message by 1e-8 of
itself can move a makespan by 0.1%); capacities are in the same unit.
Output on stdout: ``{"makespan_us": ..., "start_us": [...], "arrive_us": [...],
"commit_us": [...]}`` or ``{"error": ...}`` (exit status 1).

Semantics (those documented in taccl_py.schedule, re-implemented here): a
transfer starts once every earlier transfer (in list order) writing one of its
chunks at its source has committed, the previous transfer on its connection
(src, dst, channel) has arrived, its ``after`` transfers have committed and
``not_before_us`` has passed; it then waits its route latency (plus the step
overhead) and sends its bytes over its route; it commits once it has arrived,
every earlier writer of its chunks at the destination has committed and every
earlier reader of them there has arrived. Inside an exchange (consecutive
transfers with the same ``exchange`` number) every read counts as earlier
than every write.

A network group (consecutive transfers with the same ``group`` number, an
optional key) is one multicast or in-network reduction: it counts as an
exchange (unless its members already lie in one), starts when every member
may start, sends one SimGrid communication over the union of its members'
links once the shortest member latency has passed, and each member arrives
when that communication ends plus the difference between the largest
latency of a member to its receiver and that shortest one.

With ``"switch_model": "store-and-forward"`` in the spec, a transfer crosses
its route hop by hop: hop h waits link h's latency (the first hop also the
step overhead), then sends one SimGrid communication over link h alone; hop
h + 1 starts when it ends, and the transfer arrives when its last hop ends. A
group then sends one communication per link of the union of its members'
routes: a link leaving a sender once the step overhead has passed after the
group starts, any other link once every link before it in some member's route
has ended (each after its own latency); a member arrives when the last link of
its route ends.

SimGrid details:

* CM02 weighs a flow's bandwidth share by its route latency (RTT
  unfairness), so every link has latency 0 and the oracle waits out each
  transfer's latency itself before sending: that leaves plain max-min sharing.
* Time unit: 1 simulated second = 1 us, so capacities are in units per us.
* One controller actor drives everything (timers and ``Comm.wait_any_for``);
  every distinct route gets its own pair of hosts so the route is exactly the
  given list of links.
"""

from __future__ import annotations

import heapq
import json
import sys
from typing import Any

from simgrid import Actor, Comm, Engine, LinkInRoute, NetZone, this_actor

_START, _SEND, _DELIVER, _HOP = 0, 1, 2, 3
"""Timer kinds: ``not_before_us`` has passed / the latency is over and the bytes go out / a group member's
receiver gets the bytes / a hop's latency is over (store-and-forward)."""


class Hops:
    """Store-and-forward: every transfer (and group) as hops over single links, each waiting for those before it.

    A transfer's optional ``src_extra`` / ``dst_extra`` (resource ids, one entry per unit of weight, as in
    ``route``) join its first / last hop's SimGrid route: a GPU's memory or channels.
    """

    def __init__(self, transfers: list[dict[str, Any]], links_spec: list[dict[str, Any]], overhead: float,
                 units: list[int], members: dict[int, list[int]]) -> None:
        self.route: list[tuple[int, ...] | None] = []  # None: a group's start (the step overhead, no bytes)
        self.latency: list[float] = []
        self.units: list[int] = []
        self.then: list[list[int]] = []  # hops that wait for this one
        self.waits: list[int] = []
        self.arrives: list[list[int]] = []  # transfers that arrive when this hop ends
        self.first: dict[int, int] = {}  # transfer (or group leader) -> the hop begin() starts
        in_group = {k for group in members.values() for k in group}
        for i, t in enumerate(transfers):
            if i in members:
                self._group(i, [transfers[k] for k in members[i]], members[i], links_spec, overhead, units[i])
            elif i not in in_group:
                previous = -1
                last = len(t["route"]) - 1
                for h, k in enumerate(t["route"]):
                    extra = (t.get("src_extra") or []) * (h == 0) + (t.get("dst_extra") or []) * (h == last)
                    hop = self._new((k, *extra), float(links_spec[k]["latency"]) + (overhead if h == 0 else 0.0),
                                    units[i])
                    if h == 0:
                        self.first[i] = hop
                    else:
                        self.then[previous].append(hop)
                        self.waits[hop] = 1
                    previous = hop
                self.arrives[previous].append(i)

    def _new(self, route: tuple[int, ...] | None, latency: float, units: int) -> int:
        self.route.append(route)
        self.latency.append(latency)
        self.units.append(units)
        self.then.append([])
        self.waits.append(0)
        self.arrives.append([])
        return len(self.route) - 1

    def _group(self, leader: int, group_transfers: list[dict[str, Any]], group: list[int],
               links_spec: list[dict[str, Any]], overhead: float, units: int) -> None:
        start = self.first[leader] = self._new(None, overhead, 0)
        extra: dict[int, dict[int, int]] = {}  # link -> resource -> how often its route lists it
        for t in group_transfers:
            route = t["route"]
            for k, more in ((route[0], t.get("src_extra") or []), (route[-1], t.get("dst_extra") or [])):
                mine = extra.setdefault(k, {})
                for r in set(more):
                    mine[r] = max(mine.get(r, 0), more.count(r))
        hop_of: dict[int, int] = {}
        for t in group_transfers:
            for k in t["route"]:
                if k not in hop_of:
                    listed = [r for r, times in extra.get(k, {}).items() for _ in range(times)]
                    hop_of[k] = self._new((k, *listed), float(links_spec[k]["latency"]), units)
        before: dict[int, set[int]] = {k: set() for k in hop_of}
        for t in group_transfers:
            route = t["route"]
            for h, k in enumerate(route):
                before[k].add(route[h - 1] if h else -1)  # -1: the group's start
        for k, earlier in before.items():
            hop = hop_of[k]
            self.waits[hop] = len(earlier)
            for e in sorted(earlier):
                self.then[start if e < 0 else hop_of[e]].append(hop)
        for t, k in zip(group_transfers, group, strict=True):
            self.arrives[hop_of[t["route"][-1]]].append(k)


def _tag(t: dict[str, Any]) -> tuple[str, int] | None:
    """The read-before-write block a transfer belongs to: its exchange, else its group."""
    if t.get("exchange") is not None:
        return ("exchange", t["exchange"])
    if t.get("group") is not None:
        return ("group", t["group"])
    return None

_TIE = 1e-12
"""Relative slack under which two instants count as the same (timers fire together)."""


class Dependencies:
    """Who waits for whom: counts per transfer and, per transfer, who to tell when it arrives or commits."""

    def __init__(self, transfers: list[dict[str, Any]]) -> None:
        count = len(transfers)
        start_on_commit: list[set[int]] = [set() for _ in range(count)]
        start_on_arrive: list[set[int]] = [set() for _ in range(count)]
        commit_on_commit: list[set[int]] = [set() for _ in range(count)]
        commit_on_arrive: list[set[int]] = [set() for _ in range(count)]
        writer: dict[tuple[int, int], int] = {}
        readers: dict[tuple[int, int], list[int]] = {}
        last_on_connection: dict[tuple[int, int, int], int] = {}
        def read(i: int) -> None:
            t = transfers[i]
            start_on_commit[i].update(t.get("after") or ())
            for c in t["chunks"]:
                key = (t["src"], c)
                if key in writer:
                    start_on_commit[i].add(writer[key])
                readers.setdefault(key, []).append(i)

        for i, t in enumerate(transfers):
            tag = _tag(t)
            if tag is None:
                read(i)
            elif i == 0 or _tag(transfers[i - 1]) != tag:  # an exchange: all its reads come first
                j = i
                while j < count and _tag(transfers[j]) == tag:
                    read(j)
                    j += 1
            for c in t["chunks"]:
                key = (t["dst"], c)
                if key in writer:
                    commit_on_commit[i].add(writer[key])
                commit_on_arrive[i].update(readers.pop(key, ()))
                writer[key] = i
            connection = (t["src"], t["dst"], t.get("channel", 0))
            if connection in last_on_connection:
                start_on_arrive[i].add(last_on_connection[connection])
            last_on_connection[connection] = i
        self.start_waits = [len(start_on_commit[i]) + len(start_on_arrive[i]) for i in range(count)]
        self.commit_waits = [1 + len(commit_on_commit[i]) + len(commit_on_arrive[i]) for i in range(count)]
        self.arrive_starts: list[list[int]] = [[] for _ in range(count)]
        self.arrive_commits: list[list[int]] = [[] for _ in range(count)]
        self.commit_starts: list[list[int]] = [[] for _ in range(count)]
        self.commit_commits: list[list[int]] = [[] for _ in range(count)]
        for i in range(count):
            for j in start_on_commit[i]:
                self.commit_starts[j].append(i)
            for j in start_on_arrive[i]:
                self.arrive_starts[j].append(i)
            for j in commit_on_commit[i]:
                self.commit_commits[j].append(i)
            for j in commit_on_arrive[i]:
                self.arrive_commits[j].append(i)


def _units(t: dict[str, Any]) -> int:
    units = t["units"]
    if isinstance(units, bool) or not isinstance(units, int) or units < 0:
        raise ValueError(f"units must be a whole number >= 0 (got {units!r})")
    return units


def replay(spec: dict[str, Any]) -> dict[str, Any]:
    """Build the platform, run the schedule, return the timings."""
    links_spec = spec["links"]
    transfers = spec["transfers"]
    overhead = float(spec.get("step_overhead_us", 0.0))
    count = len(transfers)
    deps = Dependencies(transfers)
    units = [_units(t) for t in transfers]
    latency = [sum(float(links_spec[k]["latency"]) for k in t["route"]) + overhead for t in transfers]
    routes = [tuple(t["route"]) for t in transfers]
    leader = list(range(count))  # a group's first member sends for the group
    members: dict[int, list[int]] = {}
    delay = [0.0] * count  # a group member's arrival after the group's communication ends
    i = 0
    while i < count:
        tag = transfers[i].get("group")
        j = i + 1
        if tag is not None:
            while j < count and transfers[j].get("group") == tag:
                j += 1
            group = list(range(i, j))
            members[i] = group
            union: list[int] = []
            for k in group:
                leader[k] = i
                union.extend(x for x in transfers[k]["route"] if x not in union)
            shortest = min(latency[k] for k in group)
            for k in group:
                longest = max(latency[m] for m in group if transfers[m]["dst"] == transfers[k]["dst"])
                delay[k] = longest - shortest
            routes[i] = tuple(union)
            latency[i] = shortest
        i = j
    waiting = {first: len(group) for first, group in members.items()}
    hops = Hops(transfers, links_spec, overhead, units, members) if spec.get("switch_model") == "store-and-forward" \
        else None

    engine = Engine(["simgrid_oracle", "--cfg=network/model:CM02", "--cfg=network/TCP-gamma:0",
                     "--cfg=network/crosstraffic:0", "--cfg=network/weight-S:0",
                     "--log=root.thresh:critical"])
    zone = NetZone.create_full_zone("fabric")
    links = []
    for k, link in enumerate(links_spec):
        created = zone.create_link(f"link{k}", float(link["capacity"]))
        created.set_latency(0.0)
        links.append(created)
    endpoints: dict[tuple[int, ...], tuple[Any, Any]] = {}
    needed = [routes[i] for i in range(count) if leader[i] == i] if hops is None else \
        [r for r in hops.route if r is not None]
    for route in needed:
        if route not in endpoints:
            m = len(endpoints)
            src, dst = zone.create_host(f"r{m}.src", 1.0), zone.create_host(f"r{m}.dst", 1.0)
            in_route = [LinkInRoute(links[k]) for k in route]
            zone.add_route(src.netpoint, dst.netpoint, None, None, in_route, False)
            endpoints[route] = (src, dst)
    controller = zone.create_host("controller", 1.0)
    zone.seal()

    start_us: list[float | None] = [None] * count
    arrive_us: list[float | None] = [None] * count
    commit_us: list[float | None] = [None] * count

    def run() -> None:
        timers: list[tuple[float, int, int, int]] = []
        serial = 0
        active: list[Any] = []
        active_ids: list[int] = []
        start_waits, commit_waits = list(deps.start_waits), list(deps.commit_waits)

        def timer(at: float, kind: int, i: int) -> None:
            nonlocal serial
            serial += 1
            heapq.heappush(timers, (at, serial, kind, i))

        def send(i: int) -> None:
            src, dst = endpoints[routes[i]]
            active.append(Comm.sendto_async(src, dst, units[i]))
            active_ids.append(i)

        def start_hop(hop: int, now: float) -> None:
            assert hops is not None
            if hops.latency[hop] > 0:
                timer(now + hops.latency[hop], _HOP, hop)
            else:
                send_hop(hop, now)

        def send_hop(hop: int, now: float) -> None:
            assert hops is not None
            route = hops.route[hop]
            if route is None:
                hop_done(hop, now)
                return
            src, dst = endpoints[route]
            active.append(Comm.sendto_async(src, dst, hops.units[hop]))
            active_ids.append(hop)

        def hop_done(hop: int, now: float) -> None:
            assert hops is not None
            for nxt in hops.then[hop]:
                hops.waits[nxt] -= 1
                if not hops.waits[nxt]:
                    start_hop(nxt, now)
            for k in hops.arrives[hop]:
                arrive(k, now)

        def begin(i: int, now: float) -> None:
            if i in members or leader[i] != i:  # a group member: the group starts with its last member
                first = leader[i]
                waiting[first] -= 1
                if waiting[first]:
                    return
                for k in members[first]:
                    start_us[k] = now
                i = first
            start_us[i] = now
            if hops is not None:
                start_hop(hops.first[i], now)
            elif latency[i] > 0:
                timer(now + latency[i], _SEND, i)
            else:
                send(i)

        def may_start(i: int, now: float) -> None:
            not_before = transfers[i].get("not_before_us")
            if not_before is not None and not_before > now:
                timer(float(not_before), _START, i)
            else:
                begin(i, now)

        def fire(until: float) -> None:
            """Handle every timer due by ``until`` (now)."""
            now = Engine.clock
            while timers and timers[0][0] <= until:
                _, _, kind, i = heapq.heappop(timers)
                if kind == _START:
                    begin(i, now)
                elif kind == _DELIVER:
                    arrive(i, now)
                elif kind == _HOP:
                    send_hop(i, now)
                else:
                    send(i)

        def arrive(i: int, now: float) -> None:
            arrive_us[i] = now
            for j in deps.arrive_starts[i]:
                start_waits[j] -= 1
                if not start_waits[j]:
                    may_start(j, now)
            commit_waits[i] -= 1
            ready = [] if commit_waits[i] else [i]
            for j in deps.arrive_commits[i]:
                commit_waits[j] -= 1
                if not commit_waits[j]:
                    ready.append(j)
            while ready:  # a commit releases commits: a work list, not recursion
                k = ready.pop()
                commit_us[k] = now
                for j in deps.commit_starts[k]:
                    start_waits[j] -= 1
                    if not start_waits[j]:
                        may_start(j, now)
                for j in deps.commit_commits[k]:
                    commit_waits[j] -= 1
                    if not commit_waits[j]:
                        ready.append(j)

        for i in range(count):
            if not start_waits[i]:
                may_start(i, 0.0)
        while True:
            now = Engine.clock
            fire(now + _TIE * max(1.0, now))
            if active:
                if timers:
                    due = timers[0][0]
                    index = Comm.wait_any_for(active, max(0.0, due - now))
                    if index < 0:  # timed out: the first timer is due, whatever the clock's rounding
                        fire(due + _TIE * max(1.0, due))
                        continue
                else:
                    index = Comm.wait_any(active)
                i = active_ids[index]
                active[index], active_ids[index] = active[-1], active_ids[-1]
                active.pop()
                active_ids.pop()
                if hops is not None:
                    hop_done(i, Engine.clock)
                elif i in members:
                    for k in members[i]:
                        if delay[k] > 0:
                            timer(Engine.clock + delay[k], _DELIVER, k)
                        else:
                            arrive(k, Engine.clock)
                else:
                    arrive(i, Engine.clock)
            elif timers:
                due = timers[0][0]
                this_actor.sleep_until(due)
                fire(due + _TIE * max(1.0, due))
            else:
                break

    Actor.create("controller", controller, run)
    engine.run()
    stuck = [i for i in range(count) if commit_us[i] is None]
    if stuck:
        return {"error": f"deadlock: {len(stuck)} transfer(s) never commit", "stuck": stuck[:20]}
    return {"makespan_us": max((c for c in commit_us if c is not None), default=0.0), "start_us": start_us,
            "arrive_us": arrive_us, "commit_us": commit_us}


def main() -> int:
    try:
        result = replay(json.load(sys.stdin))
    except (KeyError, TypeError, ValueError) as exc:
        result = {"error": f"bad spec: {exc!r}"}
    json.dump(result, sys.stdout)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
