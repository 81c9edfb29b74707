"""The schedule IR every producer emits and every judge reads.

A :class:`Schedule` is a collective plus an ordered tuple of :class:`Transfer`.
The tuple order is the *program order*; a transfer's id is its index. Semantics
(what the simulator, the lowering and the SimGrid oracle all implement):

* A transfer moves ``chunks`` (sent as one message) from GPU ``src`` to GPU
  ``dst`` along ``route`` (link indices through switches only; a relay through
  another GPU is two transfers). ``op`` is ``copy`` (the destination's copy is
  replaced) or ``reduce`` (the contributions are combined into it).
* It **starts** when every earlier transfer (in program order) that writes one
  of its chunks at ``src`` has committed, the previous transfer on the same
  connection ``(src, dst, channel)`` has arrived, every transfer listed in
  ``after`` has committed, and ``not_before_us`` has passed. The data is read
  when it starts.
* It then waits the route latency, moves its bytes with the bandwidth it gets
  (links are shared max-min fairly) and **arrives**.
* It **commits** (writes at ``dst``) once it has arrived, every earlier writer
  of the same chunk at ``dst`` has committed and every earlier reader of it
  there has arrived.
* An **exchange** is a run of consecutive transfers with the same ``exchange``
  number: inside it every read comes before every write. Each member reads
  its chunks as they were before the exchange (it does not wait for, or see,
  the other members' writes), and a member's write also waits for the
  arrival of every member that reads that chunk there. This is how one
  message round in which ranks both send and receive the same chunks (a
  one-shot Allreduce, a pairwise swap) is written; in MSCCL the receiver
  takes such data after its own sends of that chunk have completed.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from taccl_py.collectives import Collective, parse_collective
from taccl_py.errors import InputError, ScheduleError, TopologyError
from taccl_py.limits import MAX_CHUNK_COPIES, MAX_CHUNK_FACTOR, MAX_GPUS, MAX_START_US, limit_text
from taccl_py.topology import Route, Topology

__all__ = ["Op", "Schedule", "Transfer", "check_route", "exchange_blocks", "group_error", "load_schedule", "network_groups",
           "read_tag", "save_schedule", "schedule_from_dict", "schedule_to_dict"]

SCHEDULE_FORMAT = "taccl_py-schedule/1"


class Op(StrEnum):
    COPY = "copy"
    REDUCE = "reduce"


@dataclass(frozen=True, slots=True)
class Transfer:
    """Chunks sent from GPU ``src`` to GPU ``dst`` as one message along ``route``."""

    src: int
    dst: int
    chunks: tuple[int, ...]
    route: Route
    op: Op = Op.COPY
    channel: int = 0
    after: tuple[int, ...] = ()
    not_before_us: float | None = None
    exchange: int | None = None
    """Exchange number: consecutive transfers sharing one read before any of them writes (see the module)."""
    group: int | None = None
    """Network group number: consecutive transfers forming one multicast or in-network reduction (see the module)."""


def read_tag(t: Transfer) -> tuple[str, int] | None:
    """What makes ``t``'s reads come before its neighbours' writes: its exchange, else its network group, else None."""
    if t.exchange is not None:
        return ("exchange", t.exchange)
    if t.group is not None:
        return ("group", t.group)
    return None


def network_groups(transfers: Sequence[Transfer]) -> list[tuple[int, int]]:
    """``(first, end)`` ranges of program order that form one network group (one member or more)."""
    out: list[tuple[int, int]] = []
    i, n = 0, len(transfers)
    while i < n:
        tag = transfers[i].group
        if tag is None:
            i += 1
            continue
        end = i + 1
        while end < n and transfers[end].group == tag:
            end += 1
        out.append((i, end))
        i = end
    return out


def exchange_blocks(transfers: Sequence[Transfer]) -> list[tuple[int, int]]:
    """``(first, end)`` ranges of program order whose reads all precede their writes.

    A transfer outside any exchange is a range of its own; an exchange (a run of
    consecutive transfers with the same ``exchange`` number) is one range, and
    so is a network group outside an exchange.
    """
    blocks: list[tuple[int, int]] = []
    i, n = 0, len(transfers)
    while i < n:
        tag = read_tag(transfers[i])
        end = i + 1
        if tag is not None:
            while end < n and read_tag(transfers[end]) == tag:
                end += 1
        blocks.append((i, end))
        i = end
    return blocks


@dataclass(frozen=True)
class Schedule:
    """An algorithm for one collective on one topology, in program order."""

    collective: Collective
    transfers: tuple[Transfer, ...]
    name: str = ""
    topology: str = ""
    notes: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return len(self.transfers)

    @property
    def num_channels(self) -> int:
        return 1 + max((t.channel for t in self.transfers), default=0)

    @property
    def uses_switch_offload(self) -> bool:
        """True when a network group has several members (so a switch multicasts or reduces)."""
        return any(end - first > 1 for first, end in network_groups(self.transfers))

    def with_transfers(self, transfers: Iterable[Transfer]) -> Schedule:
        return replace(self, transfers=tuple(transfers))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_checked"}  # not the memo (and its topology)

    def structural_error(self, topology: Topology) -> str | None:
        """First reason the schedule cannot run on ``topology`` at all, or None. Found once for the topology it was
        last asked about (the schedule is immutable): a fit simulates the same baseline hundreds of times."""
        checked = self.__dict__.get("_checked")
        if checked is not None and checked[0] is topology:
            return checked[1]
        problem = self._structural_error(topology)
        object.__setattr__(self, "_checked", (topology, problem))
        return problem

    def _structural_error(self, topology: Topology) -> str | None:
        n = self.collective.num_ranks
        if n != topology.num_gpus:
            return f"collective has {n} ranks but topology {topology.name!r} has {topology.num_gpus} GPUs"
        num_chunks = self.collective.num_chunks
        links = topology.links
        count = len(self.transfers)
        closed: set[int] = set()  # exchanges that have ended
        closed_groups: set[int] = set()
        previous: int | None = None
        previous_group: int | None = None
        route_checks: dict[Route, tuple[object, object, str | None]] = {}  # each distinct route checked once
        for i, t in enumerate(self.transfers):
            if t.exchange != previous:
                if previous is not None:
                    closed.add(previous)
                if t.exchange in closed:
                    return f"transfer {i}: exchange {t.exchange} is not one run of consecutive transfers"
                previous = t.exchange
            if t.group != previous_group:
                if previous_group is not None:
                    closed_groups.add(previous_group)
                if t.group in closed_groups:
                    return f"transfer {i}: group {t.group} is not one run of consecutive transfers"
                previous_group = t.group
            if not (0 <= t.src < n and 0 <= t.dst < n):
                return f"transfer {i}: ranks {t.src} -> {t.dst} out of range 0..{n - 1}"
            if t.src == t.dst:
                return f"transfer {i}: sends from rank {t.src} to itself"
            if not t.chunks:
                return f"transfer {i}: carries no chunk"
            for c in t.chunks:
                if not 0 <= c < num_chunks:
                    return f"transfer {i}: chunk {c} out of range 0..{num_chunks - 1}"
            if len(set(t.chunks)) != len(t.chunks):
                return f"transfer {i}: lists a chunk twice"
            if t.channel < 0:
                return f"transfer {i}: negative channel {t.channel}"
            for a in t.after:
                if a == i:
                    return f"transfer {i}: 'after' refers to itself (a transfer cannot wait for its own commit)"
                if not 0 <= a < count:
                    return f"transfer {i}: 'after' names transfer {a}, which does not exist"
            checked = route_checks.get(t.route)
            if checked is None:
                checked = route_checks[t.route] = check_route(topology, t.route)
            start, end, problem = checked
            if start is None:  # empty, or its first link does not exist
                return f"transfer {i}: {problem}"
            if start != t.src:
                link = links[t.route[0]]
                return f"transfer {i}: route is not connected at hop 0 ({t.src!r} then link {link.src!r}->{link.dst!r})"
            if problem:
                return f"transfer {i}: {problem}"
            if end != t.dst:
                return f"transfer {i}: route ends at {end!r}, not at rank {t.dst}"
        sound: set[tuple[object, ...]] = set()  # member shapes already checked: each piece of a block repeats them
        for first, end in network_groups(self.transfers):
            members = self.transfers[first:end]
            head = members[0]
            shape = tuple((t.src, t.dst, t.route, t.op, t.exchange) for t in members)
            if shape in sound and all(t.chunks == head.chunks for t in members):
                continue  # group_error's verdict rests on the shape and on the members carrying the same chunks
            problem = group_error(topology, self.transfers, first, end)
            if problem:
                return problem
            sound.add(shape)
        return None


def check_route(topology: Topology, route: Route) -> tuple[object, object, str | None]:
    """(where ``route`` starts, where it ends, the first problem after hop 0's start) of one route, worded as
    :meth:`Schedule.structural_error` words it.

    The start is None when the route is empty or its first link does not exist (the problem then says so); a
    transfer's own check adds its sender against the start and its receiver against the end.
    """
    links = topology.links
    if not route:
        return None, None, "empty route"
    if not 0 <= route[0] < len(links):
        return None, None, f"route names link {route[0]}, which does not exist"
    at: object = links[route[0]].src
    start = at
    for k, li in enumerate(route):
        if not 0 <= li < len(links):
            return start, None, f"route names link {li}, which does not exist"
        link = links[li]
        if link.src != at:
            return start, None, f"route is not connected at hop {k} ({at!r} then link {link.src!r}->{link.dst!r})"
        at = link.dst
        if k < len(route) - 1 and topology.is_gpu(at):
            return start, None, f"route passes through GPU {at}; relaying through a GPU takes two transfers"
    return start, at, None


def group_error(topology: Topology, transfers: Sequence[Transfer], first: int, end: int) -> str | None:
    """Why ``transfers[first:end]`` (one network group, routes already checked) cannot run, or None.

    The members' routes must carry one stream per link: every sender injects
    once (one first link) and reaches each vertex by one link; every receiver
    takes its data in once (one last link); a link carries exactly the member
    pairs (sender, receiver) of the senders upstream of it and the receivers
    downstream of it. A switch where data branches must be multicast-capable;
    one where data from different links joins must be reduce-capable.
    """
    members = transfers[first:end]
    head = members[0]
    tag = f"transfer {first}: group {head.group}"
    links = topology.links
    pairs: set[tuple[int, int]] = set()
    for k, t in enumerate(members):
        if t.chunks != head.chunks:
            return f"{tag}: member {first + k} carries chunks {list(t.chunks)}, not {list(head.chunks)} as the first"
        if t.op is not head.op:
            return f"{tag}: members mix ops {head.op.value} and {t.op.value}"
        if t.exchange != head.exchange:
            return f"{tag}: members lie in different exchanges"
        if (t.src, t.dst) in pairs:
            return f"{tag}: two members send from rank {t.src} to rank {t.dst}"
        pairs.add((t.src, t.dst))
    senders = {t.src for t in members}
    if len(senders) > 1 and head.op is not Op.REDUCE:
        return (f"{tag}: {len(senders)} senders combine in the network, so the receivers must add the result "
                "(op reduce), not copy it")
    first_link: dict[int, int] = {}
    last_link: dict[int, int] = {}
    entered: dict[tuple[int, object], int] = {}  # (sender, vertex) -> the link its data enters by
    left: dict[tuple[int, object], int] = {}  # (receiver, vertex) -> the link its data leaves by
    on_link: dict[int, list[tuple[int, int]]] = {}
    for t in members:
        if first_link.setdefault(t.src, t.route[0]) != t.route[0]:
            return f"{tag}: rank {t.src} injects on two links; a sender sends its data into the network once"
        if last_link.setdefault(t.dst, t.route[-1]) != t.route[-1]:
            return f"{tag}: rank {t.dst} receives on two links; a receiver takes the result in once"
        for li in t.route:
            link = links[li]
            if entered.setdefault((t.src, link.dst), li) != li:
                return (f"{tag}: rank {t.src}'s data reaches {link.dst!r} by two links; a sender's routes must "
                        "form a tree")
            if left.setdefault((t.dst, link.src), li) != li:
                return (f"{tag}: data for rank {t.dst} leaves {link.src!r} by two links; a receiver's routes "
                        "must form a tree")
            on_link.setdefault(li, []).append((t.src, t.dst))
    for li, used in on_link.items():
        up = {s for s, _ in used}
        down = {d for _, d in used}
        expected = len(up) * len(down) - len(up & down)
        if len(used) != expected:
            link = links[li]
            return (f"{tag}: link {link.src!r}->{link.dst!r} would carry different data for different receivers "
                    f"(senders {sorted(up)}, receivers {sorted(down)}, but {len(used)} of the {expected} "
                    "sender-receiver pairs)")
    out_of: dict[object, dict[int, set[int]]] = {}  # vertex -> incoming link -> outgoing links
    for t in members:
        for a, b in zip(t.route, t.route[1:], strict=False):
            out_of.setdefault(links[a].dst, {}).setdefault(a, set()).add(b)
    switches = topology.switch_by_name
    for vertex, flows in out_of.items():
        switch = switches.get(vertex) if isinstance(vertex, str) else None
        branches = any(len(outs) > 1 for outs in flows.values())
        joins: dict[int, set[int]] = {}
        for a, outs in flows.items():
            for b in outs:
                joins.setdefault(b, set()).add(a)
        merges = any(len(ins) > 1 for ins in joins.values())
        if branches and not (switch is not None and switch.multicast):
            return (f"{tag}: replicates data at {vertex!r}, which is not multicast-capable (its switch 'multicast' "
                    f"flag is off in topology {topology.name!r})")
        if merges and not (switch is not None and switch.reduce):
            return (f"{tag}: combines data at {vertex!r}, which cannot reduce in the network (its switch 'reduce' "
                    f"flag is off in topology {topology.name!r})")
    return None


# ----------------------------------------------------------------------- JSON
def schedule_to_dict(schedule: Schedule, topology: Topology) -> dict[str, Any]:
    """JSON form: routes as vertex lists so a file reads without the link table."""
    col = schedule.collective
    transfers = []
    for t in schedule.transfers:
        entry: dict[str, Any] = {"src": t.src, "dst": t.dst, "chunks": list(t.chunks),
                                 "route": list(topology.route_vertices(t.route))}
        if t.op is not Op.COPY:
            entry["op"] = t.op.value
        if t.channel:
            entry["channel"] = t.channel
        if t.after:
            entry["after"] = list(t.after)
        if t.not_before_us is not None:
            entry["not_before_us"] = t.not_before_us
        if t.exchange is not None:
            entry["exchange"] = t.exchange
        if t.group is not None:
            entry["group"] = t.group
        transfers.append(entry)
    return {
        "format": SCHEDULE_FORMAT,
        "name": schedule.name,
        "topology": schedule.topology or topology.name,
        "collective": {"kind": col.kind.value, "ranks": col.num_ranks, "chunk_factor": col.chunk_factor,
                       "root": col.root},
        "notes": dict(schedule.notes),
        "transfers": transfers,
    }


def schedule_from_dict(data: Any, topology: Topology, *, where: str = "<schedule>") -> Schedule:
    """Parse and structurally check a schedule; raise :class:`ScheduleError` with file and field."""
    def fail(field_name: str, message: str) -> ScheduleError:
        return ScheduleError(message, where=where, field=field_name)

    if not isinstance(data, dict):
        raise fail("", "top level must be a JSON object")
    if data.get("format") != SCHEDULE_FORMAT:
        raise fail("format", f"must be {SCHEDULE_FORMAT!r} (got {data.get('format')!r})")
    col = data.get("collective")
    if not isinstance(col, dict):
        raise fail("collective", "must be an object with kind, ranks, chunk_factor")
    try:
        kind = parse_collective(str(col.get("kind")))
    except InputError as exc:
        raise fail("collective.kind", exc.detail) from None
    try:
        collective = Collective(kind, _int(col.get("ranks", 0)), _int(col.get("chunk_factor", 1)),
                                _int(col.get("root", 0)))
    except (TypeError, ValueError) as exc:
        raise fail("collective", str(exc)) from None
    _check_collective_limits(collective, fail)
    raw = data.get("transfers")
    if not isinstance(raw, list):
        raise fail("transfers", "must be a list")
    transfers = []
    for i, entry in enumerate(raw):
        f = f"transfers[{i}]"
        if not isinstance(entry, dict):
            raise fail(f, "must be an object")
        try:
            route_vertices = entry["route"]
            if not isinstance(route_vertices, list):
                raise fail(f"{f}.route", "must be a list of vertices")
            route = topology.route_from_vertices(route_vertices)
            transfers.append(Transfer(
                src=_int(entry["src"]), dst=_int(entry["dst"]),
                chunks=tuple(_int(c) for c in entry["chunks"]), route=route,
                op=Op(entry.get("op", "copy")), channel=_int(entry.get("channel", 0)),
                after=tuple(_int(a) for a in entry.get("after", [])),
                not_before_us=_start_time(entry.get("not_before_us")),
                exchange=None if entry.get("exchange") is None else _int(entry["exchange"]),
                group=None if entry.get("group") is None else _int(entry["group"]),
            ))
        except KeyError as exc:
            raise fail(f"{f}.{exc.args[0]}", "is missing") from None
        except TopologyError as exc:
            raise fail(f"{f}.route", exc.detail) from None
        except (TypeError, ValueError) as exc:
            raise fail(f, f"has a malformed field: {exc}") from None
    notes = data.get("notes", {})
    schedule = Schedule(collective, tuple(transfers), name=str(data.get("name", "")),
                        topology=str(data.get("topology", "")), notes=notes if isinstance(notes, dict) else {})
    problem = schedule.structural_error(topology)
    if problem:
        numbered = re.match(r"transfer (\d+): (.*)", problem)
        if numbered:
            raise fail(f"transfers[{numbered.group(1)}]", numbered.group(2))
        raise fail("transfers", problem)
    return schedule


def _check_collective_limits(collective: Collective, fail: Callable[[str, str], ScheduleError]) -> None:
    """Ranks, chunk factor and (rank, chunk) pairs within :mod:`taccl_py.limits`, before anything is allocated."""
    if collective.num_ranks > MAX_GPUS:
        raise fail("collective.ranks", f"is {collective.num_ranks}; {limit_text('MAX_GPUS', MAX_GPUS)}")
    if collective.chunk_factor > MAX_CHUNK_FACTOR:
        raise fail("collective.chunk_factor",
                   f"is {collective.chunk_factor}; {limit_text('MAX_CHUNK_FACTOR', MAX_CHUNK_FACTOR)}")
    copies = collective.num_ranks * collective.num_chunks
    if copies > MAX_CHUNK_COPIES:
        raise fail("collective", f"tracks {copies:,} (rank, chunk) pairs ({collective.num_ranks} ranks x "
                                 f"{collective.num_chunks:,} chunks); {limit_text('MAX_CHUNK_COPIES', MAX_CHUNK_COPIES)}")


def _start_time(x: Any) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or not 0 <= x <= MAX_START_US:
        raise ValueError(f"not_before_us must be a number in 0..{MAX_START_US:g} us (MAX_START_US), got {x!r}")
    return float(x)


def _int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"expected an integer, got {x!r}")
    return x


def save_schedule(schedule: Schedule, topology: Topology, path: str | os.PathLike[str]) -> None:
    from taccl_py.topology_io import atomic_write_text

    atomic_write_text(path, json.dumps(schedule_to_dict(schedule, topology), separators=(",", ":")) + "\n")


def load_schedule(path: str | os.PathLike[str], topology: Topology) -> Schedule:
    from taccl_py.inputs import read_json_file

    data = read_json_file(path, ScheduleError, what="schedule file")
    return schedule_from_dict(data, topology, where=str(path))


def renumber(transfers: Sequence[Transfer], order: Sequence[int]) -> list[Transfer]:
    """Reorder transfers (``order`` lists old ids in new program order), remapping ``after``."""
    new_id = {old: new for new, old in enumerate(order)}
    return [replace(transfers[old], after=tuple(new_id[a] for a in transfers[old].after)) for old in order]
