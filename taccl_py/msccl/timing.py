"""simulate_program: how long an MSCCL program takes on a topology (the fluid link model).

Every threadblock is a sequential process. A transmission runs once its
threadblock reaches it and its waits are met; a send-type step (``s``, and the
sending half of ``rcs``/``rrs``/``rrcs``) then waits the route latency, moves
``cnt`` chunks through the links (shared max-min fairly with every other flow,
:class:`taccl_py.fluid.FluidNetwork`) and completes when the data arrives. The
event loop is the schedule simulator's (:mod:`taccl_py.event_kernel`); with
store-and-forward switches a send crosses its route hop by hop
(:mod:`taccl_py.store_forward`), as a schedule's transfer does.
Sends are buffered like NCCL's FIFOs: they never wait for the receiver. A
receive completes as soon as its threadblock reaches it and the matching send
has arrived; ``cpy``, ``re`` and ``nop`` take no time. A schedule and its
lowering therefore take the same time, because a schedule's connection
``(src, dst, channel)`` is a FIFO too (under a runtime model across machines, up to
the order in which sends ready at the same time are posted by the proxies:
:func:`taccl_py.runtime.proxy_posts`).

One chunk is ``size_bytes / nchunksperloop`` bytes, where ``size_bytes`` is the
nccl-tests size (Allgather output, ReduceScatter input, Alltoall per-rank
buffer, Allreduce/Broadcast buffer).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.endpoint import EndpointMode
from taccl_py.errors import InputError, TopologyError
from taccl_py.event_kernel import EventKernel
from taccl_py.msccl.ir import Program
from taccl_py.msccl.machine import Machine, build_machine
from taccl_py.msccl.report import VerifyReport
from taccl_py.msccl.verify import verify_program
from taccl_py.runtime import post_instant
from taccl_py.simulator import SimOptions, SimResult
from taccl_py.store_forward import LegPlan
from taccl_py.topology import Route, Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["FAST_MIN_STEPS", "TimedRun", "critical_path", "failed_result", "fast_timing_error", "simulate_program",
           "timed_collective", "timed_result"]

def simulate_program(program: Program, topology: Topology, size_bytes: float,
                     options: SimOptions | None = None) -> SimResult:
    """Verify ``program`` and time it for an nccl-tests ``size_bytes`` on ``topology``.

    ``correct`` is the verifier's verdict (valid and right result); ``time_us``
    is set only when it is correct (``notes["time_us"]`` holds the makespan of
    a valid but wrong program). Per communication (send step) the result has
    start, arrival and receive-completion times; ``critical_path`` lists
    transmission ids (``notes["transmissions"]`` describes them).

    Raises :class:`TopologyError` when the rank count differs or two ranks
    that communicate have no route through switches only.
    """
    options = options or SimOptions()
    collective = timed_collective(program, topology, size_bytes)
    if program.num_steps >= FAST_MIN_STEPS and fast_timing_error(topology, options) is None:
        from taccl_py.msccl.arrays import program_arrays
        from taccl_py.msccl.fast_timing import simulate_arrays

        arrays = program_arrays(program)
        if arrays is not None:
            return simulate_arrays(arrays, topology, size_bytes, options)
    report = verify_program(program)
    if not report.valid:
        return failed_result(collective, size_bytes, topology, report, f"invalid program: {report.errors[0]}")
    machine = build_machine(program)
    timing = _Timing(machine, topology, size_bytes / program.nchunksperloop, options)
    timing.run()  # a valid program raises no fault: a wrong one still runs to its end
    sends = [t.node for t in machine.nodes if t.type.sends]
    run = TimedRun(np.array(timing.start_at), np.array(timing.done_at), np.array(timing.cause, np.int64),
                   tuple(timing.net.busy_us), tuple(timing.net.bytes_carried), np.array(sends, np.int64),
                   np.array([machine.matching_recv.get(s, -1) for s in sends], np.int64), machine.describe)
    return timed_result(program, topology, size_bytes, options, collective, report, run)


FAST_MIN_STEPS = 50_000
"""From this many steps :func:`simulate_program` runs compiled (:mod:`taccl_py.msccl.fast_timing`), same result."""


def fast_timing_error(topology: Topology, options: SimOptions) -> str | None:
    """Why the compiled timing does not cover this run (None: it does): the options ``fast_sim`` covers."""
    if replace(options, step_overhead_us=0.0, costs=None, endpoint=EndpointMode.GPU) != SimOptions():
        return "simulator options other than the step overhead and a runtime's costs are timed in Python only"
    if getattr(topology, "store_and_forward", False):
        return "store-and-forward switches are timed in Python only"
    return None


def timed_collective(program: Program, topology: Topology, size_bytes: float) -> Collective:
    """The collective a program is timed as; raises on what cannot be timed (no collective, GPU count, size)."""
    kind = program.kind
    if kind is None:
        raise InputError(f"coll={program.coll!r} has no size convention to time it with", where=program.source)
    if program.ngpus != topology.num_gpus:
        raise TopologyError(f"the program has ngpus={program.ngpus} but topology {topology.name!r} has "
                            f"{topology.num_gpus} GPUs", where=program.source or "program")
    if not size_bytes > 0:
        raise InputError(f"size must be > 0 bytes (got {size_bytes})", where="--size")
    return _collective(program, kind)


def failed_result(collective: Collective, size_bytes: float, topology: Topology, report: VerifyReport,
                  message: str) -> SimResult:
    """The result of a program that cannot be timed: ``message`` and the verifier's first errors."""
    links = len(topology.links)
    empty = np.zeros(0)
    return SimResult(correct=False, error=message, time_us=None, size_bytes=size_bytes, collective=collective,
                     start_us=empty, arrive_us=empty, commit_us=empty, link_busy_us=(0.0,) * links,
                     link_bytes=(0.0,) * links, critical_path=(), notes={"errors": [str(e) for e in
                                                                                    report.errors[:10]]})


@dataclass(frozen=True)
class TimedRun:
    """What one timing run gives, per transmission (start, done, cause: the one whose completion readied it),
    per resource (busy time, bytes), and the send-type transmissions with the receive each one feeds (-1)."""

    start_at: np.ndarray
    done_at: np.ndarray
    cause: np.ndarray
    busy_us: tuple[float, ...]
    bytes_carried: tuple[float, ...]
    sends: np.ndarray
    recvs: np.ndarray
    describe: Callable[[int], str]


def critical_path(done_at: np.ndarray, cause: np.ndarray) -> list[int]:
    """From the last transmission to finish (the first of those at the same time), back along the causes."""
    finished = ~np.isnan(done_at)
    if not finished.any():
        return []
    latest = np.where(finished, done_at, -np.inf)
    node = int(np.flatnonzero(latest == latest.max())[0])
    path: list[int] = []
    while node >= 0 and len(path) < len(done_at):
        path.append(node)
        node = int(cause[node])
    return path[::-1]


def timed_result(program: Program, topology: Topology, size_bytes: float, options: SimOptions,
                 collective: Collective, report: VerifyReport, run: TimedRun) -> SimResult:
    """The SimResult of a timed run (``program`` is read for its ``<algo>`` attributes only)."""
    links = len(topology.links)
    unfinished = np.flatnonzero(np.isnan(run.done_at))
    if len(unfinished):
        return failed_result(collective, size_bytes, topology, report,
                             f"{len(unfinished)} step(s) never finish, e.g. {run.describe(int(unfinished[0]))}")
    makespan = (float(run.done_at.max()) if len(run.done_at) else 0.0) + (
        options.costs.launch_us if options.costs is not None else 0.0)
    start = run.start_at[run.sends]
    arrive = run.done_at[run.sends]
    commit = np.where(run.recvs >= 0, run.done_at[np.maximum(run.recvs, 0)], math.nan) if len(run.sends) else \
        np.zeros(0)
    path = critical_path(run.done_at, run.cause)
    notes: dict[str, Any] = {"transmissions": [run.describe(i) for i in path],
                             "chunk_bytes": size_bytes / program.nchunksperloop}
    if options.costs is not None:
        if options.costs.protocol.value != program.proto:
            raise InputError(f"the program's proto is {program.proto!r} but the costs given are for "
                             f"{options.costs.protocol.value!r}", where=program.source or "program")
        notes["proto"] = program.proto
    lo, hi = program.min_bytes, program.max_bytes
    if lo is not None and (size_bytes < lo or (hi and size_bytes > hi)):
        notes["outside_size_range"] = f"the runtime selects this program only for {lo}..{hi or 'any'} bytes"
    error = None if report.correct else str(report.errors[0]) if report.errors else "result not checked"
    if not report.correct:
        notes["time_us"] = makespan
    return SimResult(correct=report.correct, error=error, time_us=makespan if report.correct else None,
                     size_bytes=size_bytes, collective=collective, start_us=start, arrive_us=arrive,
                     commit_us=commit, link_busy_us=run.busy_us[:links], link_bytes=run.bytes_carried[:links],
                     critical_path=tuple(path), notes=notes)


def _collective(program: Program, kind: CollectiveKind) -> Collective:
    n, c = program.ngpus, program.nchunksperloop
    if kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
        factor = c
    else:
        factor = c // n if c % n == 0 and c >= n else 1
    return Collective(kind, n, max(factor, 1))


class _Timing(EventKernel):
    """The XML timing on the event kernel: transmissions become ready, sends become transfers, transfers arrive.

    Transmission ids are the kernel's transfer ids; only send-type ones have
    resources, latency and bytes. Steps: :meth:`ready` (every predecessor is
    done), :meth:`arrive` (a send's data is there) and :meth:`complete`. Under a
    runtime model across machines a send over the network also waits for the
    proxies to post it (:func:`taccl_py.runtime.proxy_posts`).
    """

    __slots__ = ("cause", "done_at", "machine", "pending", "post_us", "posted", "posting", "sends", "start_at",
                 "succs", "to_post", "topology")

    def __init__(self, machine: Machine, topology: Topology, chunk_bytes: float, options: SimOptions) -> None:
        self.machine = machine
        self.topology = topology
        n = len(machine.nodes)
        self.start_at = [math.nan] * n
        self.done_at = [math.nan] * n
        self.cause = [-1] * n
        self.pending = [len(p) for p in machine.preds]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for node, preds in enumerate(machine.preds):
            for p in preds:
                self.succs[p].append(node)
        self.sends = [t.type.sends for t in machine.nodes]
        routes: list[Route] = []
        latency: list[float] = []
        num_bytes: list[float] = []
        costs = options.costs  # the runtime's costs of the program's protocol (taccl_py.runtime), if any
        self.post_us = 0.0 if costs is None else costs.post_us
        self.posting: list[tuple[int, int] | None] = [None] * n
        """Per send over the network under a runtime model that posts: (its rank, the peer)."""
        self.posted = [0.0] * topology.num_gpus
        """Per rank: when its proxy has posted everything asked of it so far."""
        self.to_post: list[int] = []
        """Sends ready in this instant that wait for the proxies' posts (:meth:`end_batch`)."""
        for node, t in enumerate(machine.nodes):
            if t.type.sends:
                peer = machine.tbs[t.tb][1].send
                route = topology.gpu_route(t.rank, peer)
                if not route:  # the verifier rejects a send to itself, so no route means none through switches
                    raise TopologyError(f"ranks {t.rank} and {peer} communicate but topology {topology.name!r} has "
                                        "no route between them through switches only", where="topology")
                if costs is not None and costs.posts(topology, route):
                    self.posting[node] = (t.rank, peer)
                routes.append(route)
                hop = topology.route_latency(route) if costs is None else costs.route_latency_us(topology, route)
                latency.append(hop + options.step_overhead_us)
            else:
                routes.append(())
                latency.append(0.0)
            num_bytes.append(t.count * chunk_bytes)
        capacities = [gbps_to_bytes_per_us(link.bandwidth) for link in topology.links] if costs is None else \
            costs.link_capacity_us(topology)  # the protocol's share of each link (taccl_py.runtime)
        if topology.store_and_forward:  # every send crosses its route leg by leg (taccl_py.store_forward)
            if costs is not None:
                raise InputError("a runtime model (protocol costs) and store-and-forward switches are not simulated "
                                 "together; use --ideal or cut-through switches", where="topology")
            plan = LegPlan(n, [link.latency for link in topology.links])
            for node, route in enumerate(routes):
                plan.relay(node, route, options.step_overhead_us if route else 0.0, num_bytes[node])
            super().__init__(capacities, plan.resources, plan.latency_us, plan.num_bytes, plan.weights, plan.relays())
        else:
            super().__init__(capacities, routes, latency, num_bytes)

    def start(self) -> None:
        """Transmissions that wait for nothing are ready at time 0 (chosen before any runs: running one releases others)."""
        blocked = self.machine.blocked
        for node in [node for node, pending in enumerate(self.pending) if pending == 0 and node not in blocked]:
            self.ready(node, 0.0)

    def ready(self, node: int, now: float) -> None:
        """All predecessors are done: start the send (once posted) or complete at once."""
        self.start_at[node] = now
        if self.sends[node]:
            if self.posting[node] is None:
                self.send(node, now)
            else:  # its proxies post it at the end of the instant (taccl_py.runtime.proxy_posts)
                self.to_post.append(node)
        else:
            self.complete(node, now)

    def end_batch(self, now: float) -> None:
        """The proxies post the sends that became ready in this instant, in node order."""
        if self.to_post:
            for node, start in post_instant(self.to_post, self._posted_pair, self.posted, now, self.post_us):
                self.send_at(node, start)

    def _posted_pair(self, node: int) -> tuple[int, int]:
        """(rank, peer) of a send the proxies post."""
        pair = self.posting[node]
        assert pair is not None
        return pair

    def arrive(self, transfer: int, now: float) -> None:
        """A send's data is at the receiver: the send is done."""
        self.complete(transfer, now)

    def complete(self, node: int, now: float) -> None:
        """``node`` is done at ``now``: its successors whose predecessors are all done run (receives at once)."""
        pending, succs, sends, done_at, start_at, cause = (self.pending, self.succs, self.sends, self.done_at,
                                                          self.start_at, self.cause)
        stack = [node]
        done_at[node] = now
        while stack:
            done = stack.pop()
            for s in succs[done]:
                pending[s] -= 1
                if pending[s] == 0:
                    cause[s] = done
                    start_at[s] = now
                    if sends[s]:
                        self.ready(s, now)
                    else:
                        done_at[s] = now
                        stack.append(s)
