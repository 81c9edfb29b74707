"""Calibrated predictions: a baseline, schedule or MSCCL program timed with a runtime model's protocol costs.

The runtime (NCCL, MSCCL) picks a protocol per size from its own cost model; here the
protocol is the one the simulator finds fastest under the topology's
:class:`~taccl_py.runtime.RuntimeModel` (an XML file keeps the ``proto`` it names). NCCL's
ring Allgather, ReduceScatter and Allreduce move a buffer in chunk loops
(:func:`taccl_py.runtime.nccl_ring_pieces`), so the calibrated ring baselines are emitted
with that many pieces per channel; pipelined baselines (trees, chains) pick their depth
with the protocol's per-step latency. Nothing here changes the raw-link model: without a
runtime model (or with ``--ideal``) every caller keeps :func:`taccl_py.simulator.simulate`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from taccl_py.collectives import CollectiveKind
from taccl_py.compact import CompactSchedule, compact
from taccl_py.errors import NotApplicable
from taccl_py.fast_sim import runs_compiled
from taccl_py.harness import OverlappedHost
from taccl_py.runtime import (
    NVLS_ALGORITHMS,
    NVLS_ONE_PHASE_KINDS,
    PROTOCOLS,
    SIMPLE_BUFFER_BYTES,
    Protocol,
    RuntimeModel,
    TransferCosts,
    gpus_per_machine,
    nccl_channels,
    nccl_nvls_pieces,
    nccl_ring_pieces,
    nccl_tree_pieces,
    simple_step_latency,
    widest_gpu_link,
)
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimOptions, SimResult
from taccl_py.symmetry import SYMMETRIC_MIN_GPUS, SymmetricSchedule
from taccl_py.topology import Topology
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["NCCL_ALGORITHMS", "P2P_LL_THRESHOLD_BYTES", "P2P_PROTOCOLS", "Prediction", "allowed_protocols",
           "best_protocol", "host_channels", "kept_protocols", "load_floor_us", "model_protocols", "nccl_algorithms",
           "nccl_protocols", "nvls_chunk_steps", "overlapped_time_us", "predict_baseline", "predict_nccl",
           "predict_program", "predict_schedule", "protocol_floor_us", "ring_step_latencies", "tree_chunk_steps",
           "tree_step_costs"]

_PIECED_RINGS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE)
_TUNED_ALGORITHMS = frozenset({"tree", *NVLS_ALGORITHMS})
"""NCCL's algorithms whose per-step latencies carry the proxy's post overhead (no posts), with the rings of
:data:`_PIECED_RINGS` (their floor, :func:`ring_step_latencies`)."""

NCCL_ALGORITHMS: dict[CollectiveKind, tuple[str, ...]] = {
    CollectiveKind.ALLREDUCE: ("ring", "tree", "nvls", "nvls-tree"),
    CollectiveKind.ALLGATHER: ("ring", "nvls"),
    CollectiveKind.REDUCESCATTER: ("ring", "nvls"),
    CollectiveKind.ALLTOALL: ("direct",),
    CollectiveKind.BROADCAST: ("ring",),
    CollectiveKind.REDUCE: ("ring",),
}
"""What NCCL itself runs per collective (without CollNet): rings and trees, NVLink SHARP where the NVSwitches
reduce and multicast (its ``nvls`` algorithm on one machine, for Allgather and ReduceScatter too since NCCL 2.19;
``nvls-tree`` across machines; Simple only), and point-to-point sends for Alltoall."""


@dataclass(frozen=True)
class Prediction:
    """A calibrated simulation: the result under the chosen protocol, and the schedule it ran."""

    sim: SimResult
    """The simulation; for a :class:`~taccl_py.symmetry.SymmetricSchedule` its per-transfer times are one per
    representative (``sim.notes["times_per"]``), its makespan and link figures the full schedule's."""
    protocol: Protocol
    schedule: Schedule | CompactSchedule | SymmetricSchedule | None
    """What ran: a large ring as arrays (:class:`~taccl_py.compact.CompactSchedule`) or, from
    :data:`~taccl_py.symmetry.SYMMETRIC_MIN_GPUS` GPUs on a translation-symmetric topology, as representatives
    (:class:`~taccl_py.symmetry.SymmetricSchedule`); None for a program."""
    times_us: dict[str, float | None]
    """Per protocol tried, its time (None when incorrect)."""


def _better(a: SimResult, b: SimResult | None) -> bool:
    if b is None or b.time_us is None:
        return True
    return a.time_us is not None and a.time_us < b.time_us


PRUNE_MIN_TRANSFERS = 100_000
"""From this many transfers a protocol is not simulated when its lower bound is already above the best time found
(:func:`protocol_floor_us`): the three protocols' runs of a 1,024-GPU ring would cost minutes."""
PRUNE_MIN_GPUS = 64
"""From this many GPUs protocols are pruned so whatever the transfer count: across machines a schedule's transfers
over the network wait for the proxies' posts, and at 128 GPUs each protocol's run of NCCL's Alltoall (16,256
transfers) took 10-11 s in the compiled kernel while posts were made one transfer at a time (the whole `taccl
simulate` at 1 GB takes 2.0 s since they are made per instant: :func:`taccl_py.runtime.proxy_posts`)."""


def protocol_floor_us(costs: TransferCosts, bandwidth_bound_us: float) -> float:
    """A lower bound on any schedule's time under ``costs``: the launch, plus the raw-link bandwidth bound
    (bytes over the binding cut at the full link rates) at the largest share of a link any class reaches."""
    return costs.launch_us + bandwidth_bound_us / max(costs.fraction.values())


def load_floor_us(topology: Topology, schedule: Schedule | CompactSchedule, size_bytes: float,
                  options: SimOptions) -> float:
    """A lower bound on ``schedule``'s time under ``options``: the launch, plus the busiest link's bytes at the rate
    the costs give it (every transfer's bytes cross each link of its route). Tighter than :func:`protocol_floor_us`
    where the schedule loads a link beyond the collective's bound (NCCL's Alltoall, a direct Allgather). A schedule
    with exchanges or network groups (whose members share links) gets the launch alone."""
    costs = options.costs
    launch = costs.launch_us if costs is not None else 0.0
    if isinstance(schedule, CompactSchedule):
        routes, route_of = schedule.routes, schedule.route
        chunks_per = np.diff(schedule.chunk_ptr)
    else:
        if any(t.exchange is not None or t.group is not None for t in schedule.transfers):
            return launch
        index: dict[tuple[int, ...], int] = {}
        route_of = np.fromiter((index.setdefault(t.route, len(index)) for t in schedule.transfers), dtype=np.int64,
                               count=len(schedule.transfers))
        routes = tuple(index)
        chunks_per = np.fromiter((len(t.chunks) for t in schedule.transfers), dtype=np.int64,
                                 count=len(schedule.transfers))
    chunks_on_route = np.bincount(route_of, weights=chunks_per, minlength=len(routes))
    links = np.fromiter((li for r in routes for li in dict.fromkeys(r)), dtype=np.int64)
    distinct = np.fromiter((len(dict.fromkeys(r)) for r in routes), dtype=np.int64, count=len(routes))
    load = np.bincount(links, weights=np.repeat(chunks_on_route, distinct),
                       minlength=len(topology.links)) * schedule.collective.chunk_bytes(size_bytes)
    capacity = np.asarray(costs.link_capacity_us(topology) if costs is not None else
                          [gbps_to_bytes_per_us(link.bandwidth) for link in topology.links], dtype=np.float64)
    used = load > 0
    busiest = float((load[used] / capacity[used]).max()) if used.any() else 0.0
    return launch + busiest


def _job_floor(topology: Topology, size_bytes: float, job: tuple[_Timed, SimOptions]) -> float:
    """:func:`load_floor_us` of a prepared protocol's run (its schedule and options)."""
    schedule, options = job
    assert not isinstance(schedule, SymmetricSchedule)
    return load_floor_us(topology, schedule, size_bytes, options)


def _floors(topology: Topology, kind: CollectiveKind, size_bytes: float, root: int,
            costs_of: Callable[[Protocol], TransferCosts], protocols: tuple[Protocol, ...]) -> dict[Protocol, float]:
    from taccl_py.bounds import lower_bound

    bandwidth_us = lower_bound(topology, kind, size_bytes, root=root).bandwidth_us
    return {p: protocol_floor_us(costs_of(p), bandwidth_us) for p in protocols}


def symmetric_ring_baseline(topology: Topology, kind: CollectiveKind, channels: int | None, pieces: int = 1, *,
                            shift: int | None = None) -> SymmetricSchedule | None:
    """The ring baseline (``pieces`` per channel) as representatives of its rank-translation orbits, when the
    topology and the rings have such a symmetry and the representatives simulate it exactly; else None.

    ``shift``: the translation the caller already found for these rings (no search again)."""
    from taccl_py.baselines import ring_plan
    from taccl_py.baselines.ring import ring_representatives, symmetric_ring
    from taccl_py.symmetry import symmetry_error

    if kind not in _PIECED_RINGS or (channels is not None and not 1 <= channels <= 64):
        return None
    try:
        plan = ring_plan(topology, channels)
        sym = symmetric_ring(topology, plan, kind, pieces) if shift is None else ring_representatives(
            kind, plan, shift, topology.name, pieces)
    except NotApplicable:
        return None
    if sym is None or symmetry_error(sym, topology) is not None:
        return None
    return sym


def _simulate(topology: Topology, schedule: Schedule | CompactSchedule | SymmetricSchedule, size_bytes: float,
              options: SimOptions) -> SimResult:
    """Through the compiled kernel where the schedule is large enough for it to pay, a symmetric ring through its
    representatives (the same times)."""
    from taccl_py.fast_sim import simulate_compact, simulate_large
    from taccl_py.symmetry import simulate_symmetric

    if isinstance(schedule, SymmetricSchedule):  # the times per representative (Prediction.sim)
        return simulate_symmetric(topology, schedule, size_bytes, options, expand_times=False)
    if isinstance(schedule, CompactSchedule):
        return simulate_compact(topology, schedule, size_bytes, options)
    return simulate_large(topology, schedule, size_bytes, options)


_Timed = Schedule | CompactSchedule | SymmetricSchedule


def _by_protocol(topology: Topology, order: tuple[Protocol, ...], floors: dict[Protocol, float], size_bytes: float,
                 prepare: Callable[[Protocol], tuple[_Timed, SimOptions]],
                 stop: threading.Event | None = None,
                 job_floor: Callable[[tuple[_Timed, SimOptions]], float] | None = None
                 ) -> list[tuple[Protocol, _Timed, SimResult]]:
    """Each protocol of ``order`` prepared and simulated, unless its floor is at or above the best time found
    before it (``floors`` empty: none skipped), or, once prepared, the floor ``job_floor`` gives what it prepared
    (:func:`load_floor_us`, for runs the compiled kernel takes); what ran, in order.

    Runs the compiled kernel takes go side by side (the kernel releases the GIL) while there are CPUs
    (:func:`taccl_py.threads.available_cpus`) and memory (a snapshot: :func:`~taccl_py.fast_sim.full_simulation_error`
    of their :func:`~taccl_py.fast_sim.full_simulation_bytes` summed) for them: the next protocols not yet skipped are prepared and start, in threads, with the
    first, which runs in this one. One a loop would have skipped once the first's time was known is dropped, its
    error too, so what comes back (or is raised) is what one loop gives. ``stop`` set: raises
    :class:`~taccl_py.threads.Cancelled` before the next runs start (work started ahead that is no longer wanted)."""
    from taccl_py.fast_sim import full_simulation_bytes, full_simulation_error, runs_compiled
    from taccl_py.threads import Cancelled, available_cpus, in_background

    ran: list[tuple[Protocol, _Timed, SimResult]] = []
    best: float | None = None
    prepared: dict[Protocol, tuple[_Timed, SimOptions]] = {}

    prepared_floor: dict[Protocol, float] = {}

    def kernel(job: tuple[_Timed, SimOptions]) -> bool:
        return not isinstance(job[0], SymmetricSchedule) and runs_compiled(topology, job[0], job[1])

    def skipped(p: Protocol, job: tuple[_Timed, SimOptions] | None = None) -> bool:
        if not floors or best is None:
            return False
        if floors[p] >= best:
            return True
        if job is None or job_floor is None:
            return False
        if p not in prepared_floor:
            prepared_floor[p] = job_floor(job) if kernel(job) else -math.inf
        return prepared_floor[p] >= best

    def simulate(job: tuple[_Timed, SimOptions]) -> SimResult:
        return _simulate(topology, job[0], size_bytes, job[1])

    def footprint(job: tuple[_Timed, SimOptions]) -> int:
        return 0 if isinstance(job[0], SymmetricSchedule) else full_simulation_bytes(job[0])

    width = min(available_cpus(), len(order))
    i = 0
    while i < len(order):
        p = order[i]
        i += 1
        if skipped(p):
            continue
        if stop is not None and stop.is_set():
            raise Cancelled("the prediction is no longer wanted")
        first = prepared.pop(p) if p in prepared else prepare(p)
        if skipped(p, first):
            continue
        wave: list[tuple[Protocol, tuple[_Timed, SimOptions]]] = [(p, first)]
        used = [len(first[0]), footprint(first)] if width > 1 and kernel(first) else [0, 0]
        if used[0] and full_simulation_error(width * used[0], width * used[1]) is None:
            while len(wave) < width and i < len(order):
                q = order[i]
                if skipped(q):
                    i += 1
                    continue
                try:
                    job = prepare(q)
                except Exception:  # prepared again in its turn, if a loop gets there
                    break
                if skipped(q, job):
                    i += 1
                    continue
                if not kernel(job) or full_simulation_error(used[0] + len(job[0]), used[1] + footprint(job)):
                    prepared[q] = job  # runs in its turn
                    break
                used = [used[0] + len(job[0]), used[1] + footprint(job)]
                wave.append((q, job))
                i += 1
        alongside = [in_background(partial(simulate, job)) for _, job in wave[1:]]
        outcomes: list[SimResult | BaseException] = [simulate(first)]
        for future in alongside:
            error = future.exception()
            outcomes.append(future.result() if error is None else error)
        for (q, job), outcome in zip(wave, outcomes, strict=True):
            if skipped(q, job):  # known only now: a loop would not have run it
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            ran.append((q, job[0], outcome))
            if outcome.time_us is not None and (best is None or outcome.time_us < best):
                best = outcome.time_us
    return ran


def _nvls_protocols(protocols: tuple[Protocol, ...], topology: Topology) -> tuple[Protocol, ...]:
    """The protocols of ``protocols`` NCCL's NVLS runs with (Simple only); none is :class:`NotApplicable`."""
    kept = tuple(p for p in protocols if p in nccl_protocols(CollectiveKind.ALLREDUCE, "nvls"))
    if not kept:
        raise NotApplicable("NCCL's NVLS runs the Simple protocol only", where=topology.name)
    return kept


def predict_schedule(topology: Topology, schedule: Schedule, size_bytes: float, model: RuntimeModel, *,
                     protocols: tuple[Protocol, ...] = PROTOCOLS, step_overhead_us: float = 0.0,
                     stop: threading.Event | None = None) -> Prediction:
    """``schedule`` under each protocol; the fastest wins (ties: the earlier in ``protocols``). ``stop``: as
    :func:`_by_protocol` (a prediction started ahead of its need). ``protocols`` are kept to those the model's runs
    allow (:func:`model_protocols`) unless it allows none of them (then they are timed as asked).

    Across machines a transfer over the network starts once the proxies have posted it (the simulator's
    :func:`taccl_py.runtime.proxy_posts`). A schedule of :data:`PRUNE_MIN_TRANSFERS` or more, or on
    :data:`PRUNE_MIN_GPUS` GPUs or more, skips a protocol whose floor is above the best time found (it is then missing
    from ``times_us``). NCCL's NVLS (a schedule whose
    notes name the ``nvls`` or ``nvls-tree`` algorithm) runs Simple only, with NVLS's costs (:meth:`RuntimeModel.costs`)
    and without proxy posts, as :func:`predict_baseline` times it.
    """
    kind = schedule.collective.kind
    protocols = model_protocols(model, kind, protocols) or protocols  # one the model's runs exclude: as asked
    noted = schedule.notes.get("algorithm")
    algorithm = noted if isinstance(noted, str) and noted in NVLS_ALGORITHMS else None
    if algorithm is not None:  # NCCL's NVLS or NVLSTree (a baseline's schedule file): Simple only, NVLS's costs
        protocols = _nvls_protocols(protocols, topology)
    costs = {p: model.costs(p, kind, topology, algorithm=algorithm, size_bytes=size_bytes) for p in protocols}
    if algorithm is not None:  # as predict_baseline times it: its latencies carry the proxy's cost
        costs = {p: replace(c, post_us=0.0) for p, c in costs.items()}
    order = protocols
    floors: dict[Protocol, float] = {}
    if (len(schedule.transfers) >= PRUNE_MIN_TRANSFERS or topology.num_gpus >= PRUNE_MIN_GPUS) and len(protocols) > 1:
        floors = _floors(topology, kind, size_bytes, schedule.collective.root, costs.__getitem__, protocols)
        order = tuple(sorted(protocols, key=floors.__getitem__))
    options = {p: SimOptions(step_overhead_us=step_overhead_us, costs=costs[p]) for p in protocols}
    timed: Schedule | CompactSchedule = schedule
    if all(runs_compiled(topology, schedule, o) for o in options.values()):  # its arrays once, not per protocol
        timed = compact(schedule)
    best: SimResult | None = None
    chosen = order[0]
    times: dict[str, float | None] = {}
    for p, _, sim in _by_protocol(topology, order, floors, size_bytes, lambda p: (timed, options[p]), stop,
                                  job_floor=partial(_job_floor, topology, size_bytes)):
        times[p.value] = sim.time_us
        if best is None or _better(sim, best) or (
                sim.time_us == best.time_us and protocols.index(p) < protocols.index(chosen)):
            best, chosen = sim, p
    assert best is not None
    return Prediction(best, chosen, schedule, {p.value: times[p.value] for p in protocols if p.value in times})


def predict_baseline(topology: Topology, kind: CollectiveKind, algorithm: str, size_bytes: int, model: RuntimeModel,
                     *, channels: int | None = None, root: int = 0, step_overhead_us: float = 0.0,
                     protocols: tuple[Protocol, ...] = PROTOCOLS, representatives: bool = True) -> Prediction:
    """The NCCL-style ``algorithm`` for ``kind`` at ``size_bytes``, built and timed per protocol.

    From :data:`~taccl_py.symmetry.SYMMETRIC_MIN_GPUS` GPUs a ring whose topology and rings are invariant under a
    rank translation is simulated through its representatives, in NCCL's pieces too, and so is the direct baseline
    where the topology and its routes are (:func:`~taccl_py.baselines.direct.symmetric_direct`; ``schedule`` is then
    the :class:`~taccl_py.symmetry.SymmetricSchedule`; ``representatives`` False: never, as a timeline needs the
    full run); otherwise a large ring (:func:`~taccl_py.baselines.ring_compact.large_ring_arrays`) is built as arrays
    and simulated by the compiled kernel (``schedule`` is then the arrays). A ring of
    :data:`PRUNE_MIN_TRANSFERS` or more, and any algorithm on :data:`PRUNE_MIN_GPUS` GPUs or more, skips a protocol
    whose floor (:func:`protocol_floor_us`) is above the best time found (missing from ``times_us``).
    Across machines the transfers over the network wait for the proxies to post them (at the end of each instant,
    receives first, each in program order: for NCCL's Alltoall, its group's rounds, peer ``r + d`` and ``r - d``
    in round ``d``; :func:`taccl_py.runtime.proxy_posts`), except those of
    NCCL's Allgather, ReduceScatter and Allreduce rings, its tree and NVLS, which carry that cost as tuning.cc
    does, in their per-step latencies (the ring's floor, :func:`ring_step_latencies`; the network latencies
    fitted on NCCL's runs).
    ``protocols`` are further kept to the model's own (:attr:`~taccl_py.runtime.RuntimeModel.protocols`, its runs'
    NCCL_PROTO), except for Alltoall (NCCL's point-to-point sends).
    Raises :class:`NotApplicable` as :func:`taccl_py.baselines.baseline` does, for ``nvls`` without Simple among
    ``protocols`` (NCCL runs NVLS with Simple only), and when the model allows none of ``protocols``.
    """
    from taccl_py.baselines import BUILT_WITHOUT_STEP_OVERHEAD, baseline
    from taccl_py.baselines.oneshot import SIMULATED_UP_TO
    from taccl_py.baselines.ring_compact import large_ring_arrays

    runs = model_protocols(model, kind, protocols)
    if not runs and protocols:
        assert model.protocols is not None
        raise NotApplicable(f"the runtime model's runs allow {', '.join(p.value for p in model.protocols)} "
                            f"(its NCCL_PROTO), not {', '.join(p.value for p in protocols)}")
    protocols = runs
    if algorithm in NVLS_ALGORITHMS and model.protocols is not None and Protocol.SIMPLE not in model.protocols:
        raise NotApplicable(f"NCCL's NVLS runs Simple only, and the runtime model's runs allow "
                            f"{', '.join(p.value for p in model.protocols)} (its NCCL_PROTO)", where=topology.name)
    if algorithm in NVLS_ALGORITHMS:
        protocols = _nvls_protocols(protocols, topology)

    def costs_of(p: Protocol) -> TransferCosts:
        return model.costs(p, kind, topology, algorithm=algorithm, size_bytes=size_bytes)

    pieced = algorithm == "ring" and kind in _PIECED_RINGS
    symmetric = pieced and representatives and topology.num_gpus >= SYMMETRIC_MIN_GPUS
    plain: Schedule | CompactSchedule | SymmetricSchedule | None = symmetric_ring_baseline(
        topology, kind, channels) if symmetric else None
    direct: SymmetricSchedule | None = None  # the direct baseline's representatives, where it has them
    if algorithm == "direct" and representatives and topology.num_gpus >= SYMMETRIC_MIN_GPUS:
        from taccl_py.baselines.direct import symmetric_direct

        direct = symmetric_direct(topology, kind, channels=channels or 1)
    if pieced and plain is None:
        plain = large_ring_arrays(topology, kind, algorithm, channels)
    large = plain is not None and len(plain) >= PRUNE_MIN_TRANSFERS
    # the one schedule of a baseline built without step overhead, kept for every protocol (baseline()'s memo
    # keeps small ones only: a SHARP Allreduce on 128 GPUs is 475,136 transfers)
    built: list[Schedule] = []
    pruned = (large or topology.num_gpus >= PRUNE_MIN_GPUS) and len(protocols) > 1
    floors = _floors(topology, kind, size_bytes, root, costs_of, protocols) if pruned else {}
    order = tuple(sorted(protocols, key=floors.__getitem__)) if pruned else protocols

    def prepare(p: Protocol) -> tuple[_Timed, SimOptions]:
        nonlocal plain
        costs = costs_of(p)
        if pieced or algorithm in _TUNED_ALGORITHMS:
            costs = replace(costs, post_us=0.0)
        hop = max(costs.hop_latency_us.values())
        schedule: Schedule | CompactSchedule | SymmetricSchedule
        if pieced:
            if plain is None:
                plain = baseline(topology, kind, "ring", channels=channels, root=root, size_bytes=size_bytes)
            count = int(plain.notes.get("channels") or 1)
            pieces = nccl_ring_pieces(p, size_bytes, topology.num_gpus, count, model.simple_buffer_bytes)
            in_pieces = symmetric_ring_baseline(topology, kind, channels, pieces, shift=plain.shift) \
                if pieces > 1 and isinstance(plain, SymmetricSchedule) else None
            if pieces == 1:
                schedule = plain
            elif in_pieces is not None:  # its representatives in pieces: the same rings, translated
                schedule = in_pieces
            else:  # a large ring in pieces is built as arrays too
                pieced_arrays = large_ring_arrays(topology, kind, algorithm, channels, pieces) if large else None
                schedule = pieced_arrays if pieced_arrays is not None else baseline(
                    topology, kind, "ring", channels=channels, root=root, chunk_factor=count * pieces,
                    size_bytes=size_bytes)
            costs = replace(costs, hop_latency_us=ring_step_latencies(
                topology, costs, size_bytes, pieces, model.channels, kind, model.net_overhead_us,
                simple_buffer_bytes=model.simple_buffer_bytes))
        else:
            pieces_nvls = nvls_chunk_steps(topology, kind, size_bytes) if algorithm in NVLS_ALGORITHMS else None
            pieces_tree = None
            if algorithm == "tree" and p is Protocol.SIMPLE:
                pieces_tree = tree_chunk_steps(topology, kind, size_bytes, model.channels, root, channels,
                                               simple_buffer_bytes=model.simple_buffer_bytes)
                costs = tree_step_costs(topology, costs, kind, pieces_tree)
            options = SimOptions(step_overhead_us=step_overhead_us, costs=costs)
            if algorithm == "oneshot" and kind is CollectiveKind.ALLREDUCE \
                    and topology.num_gpus <= SIMULATED_UP_TO:  # where the baseline's own choice simulates
                return _fastest_oneshot_allreduce(topology, channels, root, size_bytes, options), options
            if direct is not None:
                return direct, options
            if built:
                return built[0], options
            schedule = baseline(topology, kind, algorithm, channels=channels, root=root, size_bytes=size_bytes,
                                step_overhead_us=step_overhead_us + hop, chunk_factor=pieces_nvls,
                                pieces=pieces_tree)
            if algorithm in BUILT_WITHOUT_STEP_OVERHEAD:
                built.append(schedule)
        return schedule, SimOptions(step_overhead_us=step_overhead_us, costs=costs)

    best: Prediction | None = None
    times: dict[str, float | None] = {}
    job_floor = partial(_job_floor, topology, size_bytes)
    for p, kept, sim in _by_protocol(topology, order, floors, size_bytes, prepare, job_floor=job_floor):
        times[p.value] = sim.time_us
        if best is None or _better(sim, best.sim) or (
                sim.time_us == best.sim.time_us and protocols.index(p) < protocols.index(best.protocol)):
            best = Prediction(sim, p, kept, times)
    if best is None:
        raise NotApplicable("no protocol to try")
    return Prediction(best.sim, best.protocol, best.schedule,
                      {p.value: times[p.value] for p in protocols if p.value in times})


def _fastest_oneshot_allreduce(topology: Topology, channels: int | None, root: int, size_bytes: float,
                               options: SimOptions) -> Schedule:
    """The ``oneshot`` Allreduce form that is fastest under ``options``' runtime costs at ``size_bytes``.

    The baseline picks its form on the raw-link model; under a runtime's costs (proxy posts, per-step latencies)
    another may win: on two DGX A100s at 16 KB the form the raw links prefer (rotated) takes 22.4 us, the
    hierarchical one 19.9.
    Ties keep the forms' order (:data:`~taccl_py.baselines.oneshot.ALLREDUCE_FORMS`); up to
    :data:`~taccl_py.baselines.oneshot.SIMULATED_UP_TO` GPUs, as the baseline simulates its own choice."""
    from taccl_py.baselines import baseline
    from taccl_py.baselines.oneshot import ALLREDUCE_FORMS

    best: tuple[float, Schedule] | None = None
    for form in ALLREDUCE_FORMS:
        try:
            schedule = baseline(topology, CollectiveKind.ALLREDUCE, "oneshot", channels=channels, root=root,
                                size_bytes=size_bytes, form=form)
        except NotApplicable:
            continue
        sim = _simulate(topology, schedule, size_bytes, options)
        if sim.time_us is not None and (best is None or sim.time_us < best[0]):
            best = (sim.time_us, schedule)
    if best is None:  # no form runs here: the baseline says why
        return baseline(topology, CollectiveKind.ALLREDUCE, "oneshot", channels=channels, root=root,
                        size_bytes=size_bytes)
    return best[1]


def _intra_class(topology: Topology) -> str:
    """The link class within a machine whose per-step latency NCCL charges: NVLink where GPUs have it, else PCI."""
    return "nvlink" if widest_gpu_link(topology, "nvlink") is not None else "pci"


def ring_step_latencies(topology: Topology, costs: TransferCosts, size_bytes: float, pieces: int,
                        runtime_channels: int, kind: CollectiveKind, net_overhead_us: float, *,
                        simple_buffer_bytes: int = SIMPLE_BUFFER_BYTES) -> dict[str, float]:
    """Per link class, the per-step latency a transfer of the calibrated ring carries (its share of the hop).

    The ring pays ``nsteps x`` a hop latency once per collective, as tuning.cc charges it: the chunk loops
    overlap in the connection's NCCL_STEPS slots and each of the ring's ``pieces`` carries ``1 / pieces`` of
    it. Across machines the network's latency is charged on ``nInterSteps`` of the ``nsteps`` only
    (``baseLat + (nsteps - nInterSteps) x intraLat + nInterSteps x interLat``, tuning.cc's form): a ring's
    connection over the network sends every step, but its steps are in flight together and the chain of data
    waits on the network once per crossing. ``nInterSteps`` counts the crossings of the longest chain: a ring
    through ``m`` machines crosses the network ``m`` times per turn, and a block's chain goes round all but one
    of its links once (Allgather, ReduceScatter: ``m``) or twice (Allreduce: ``2 m``, ``2 m - 1`` with 2 GPUs a
    machine; tuning.cc counts ``m - 1`` for the first two). The network's transfers therefore carry ``intraLat
    + (interLat - intraLat) x nInterSteps / nsteps``, which gives that sum over the ring's serial steps. A ring
    across machines steps no faster than its proxies post, ``net_overhead_us`` a step within a machine (three
    times it with Simple: ``intraLat = max(intraLat, netOverhead)`` of tuning.cc, NCCL 2.19 on), a bound on the
    rate of its pipelined loops, not on one step's latency: the steps of ``pieces`` loops pay it on all but one loop's
    share (``intraLat + (netOverhead - intraLat) x (1 - 1 / pieces)`` when the overhead is larger), so a
    one-loop ring pays its NVLink hops.
    A Simple step over the network also pipelines its slices through the NIC
    (:func:`taccl_py.runtime.simple_step_latency`): it hides that latency behind the slices after its first,
    computed for NCCL's own ``runtime_channels`` channels, each moving ``size / (ranks x channels x loops)``
    per step at the NIC's rate x the share / ``runtime_channels`` (the baseline's channel count only shapes
    the simulated schedule; ``simple_buffer_bytes``, NCCL_BUFFSIZE, sets the loops).
    """
    hops = dict(costs.hop_latency_us)
    n = max(topology.num_gpus, 1)
    machines = len(topology.machines)
    net = hops.get("net")
    if net is not None and machines > 1:
        floor = net_overhead_us * (3 if costs.protocol is Protocol.SIMPLE else 1)
        hops = {c: v if c == "net" else v + max(0.0, floor - v) * (1.0 - 1.0 / pieces) for c, v in hops.items()}
        nsteps = 2 * (n - 1) if kind is CollectiveKind.ALLREDUCE else n - 1
        # an Allreduce chain skips the two links into its block's owner: both within a machine from 3 GPUs on
        inter = (2 * machines - (1 if gpus_per_machine(topology) == 2 else 0)) if kind is CollectiveKind.ALLREDUCE \
            else machines
        intra = hops.get(_intra_class(topology), net)
        net = intra + (net - intra) * min(inter, nsteps) / nsteps
    out = {c: v / pieces for c, v in hops.items()}
    if net is None:
        return out
    out["net"] = net / pieces
    if costs.protocol is not Protocol.SIMPLE:
        return out
    channels = max(runtime_channels, 1)
    loops = nccl_ring_pieces(Protocol.SIMPLE, size_bytes, n, channels, simple_buffer_bytes)
    chunk = size_bytes / (n * channels * loops)
    widest = widest_gpu_link(topology, "net")
    rate = 0.0 if widest is None else gbps_to_bytes_per_us(widest) * costs.fraction["net"] / channels
    out["net"] = simple_step_latency(net, chunk, rate, simple_buffer_bytes) / pieces
    return out


TREE_TRANSFER_BUDGET = 500_000
"""Most transfers the calibrated Simple tree is simulated in: on large topologies it takes fewer chunk steps than
NCCL's (:func:`tree_chunk_steps`), never fewer than the 32 of the alpha-beta pipeline it had before."""


def tree_chunk_steps(topology: Topology, kind: CollectiveKind, size_bytes: float, runtime_channels: int,
                     root: int = 0, channels: int | None = None, *,
                     simple_buffer_bytes: int = SIMPLE_BUFFER_BYTES) -> int:
    """The chunk steps per channel in which the calibrated Simple tree is simulated: NCCL's
    (:func:`taccl_py.runtime.nccl_tree_pieces` on the runtime's channels and Simple buffer), as long as the schedule
    stays within :data:`TREE_TRANSFER_BUDGET` transfers or 32 steps (a 512-GPU tree has about 16,000 legs a step:
    NCCL's 170 steps at 1 GB took minutes and gigabytes to simulate). LL and LL128 trees keep the alpha-beta pipeline: they
    forward line by line, finer than their steps."""
    from taccl_py.baselines.common import MAX_PIECES
    from taccl_py.baselines.tree import tree_plan

    nccl = nccl_tree_pieces(size_bytes, runtime_channels, simple_buffer_bytes)
    plan = tree_plan(topology, kind, root if kind is not CollectiveKind.ALLREDUCE else 0, channels)
    legs = sum(len(ch.reduce_legs) + len(ch.bcast_legs) for ch in plan.channels)
    return min(nccl, max(MAX_PIECES, TREE_TRANSFER_BUDGET // max(legs, 1)))


def tree_step_costs(topology: Topology, costs: TransferCosts, kind: CollectiveKind, pieces: int) -> TransferCosts:
    """``costs`` for NCCL's tree simulated in ``pieces`` chunk steps per channel: the per-step latency paid once
    along the tree's path, as tuning.cc charges a tree (``2 x ((ppn - 1) x intraLat + log2i(nNodes) x
    interLat)`` for Allreduce, one phase for Broadcast and Reduce).

    A tree's chunk steps overlap in the connection's NCCL_STEPS slots, so each of a connection's ``pieces``
    transfers carries ``1 / pieces`` of the hop latency, and the rest of the path's latency, which the
    simulated pieces no longer pay, is added to the launch. With one piece nothing changes.
    """
    if pieces <= 1:
        return costs
    hops = costs.hop_latency_us
    intra_class = _intra_class(topology)
    machines = len(topology.machines)
    levels = int(math.log2(machines)) if machines > 1 else 0  # tuning.cc's log2i rounds down
    phases = 2 if kind is CollectiveKind.ALLREDUCE else 1
    path = phases * ((gpus_per_machine(topology) - 1) * hops.get(intra_class, 0.0) + levels * hops.get("net", 0.0))
    return replace(costs, hop_latency_us={c: v / pieces for c, v in hops.items()},
                   launch_us=costs.launch_us + path * (1.0 - 1.0 / pieces))


NVLS_MAX_PIECES = 64
"""NVLS is simulated in NCCL's chunk steps per block (:func:`taccl_py.runtime.nccl_nvls_pieces`), at most this many
(NCCL's own count up to 1 GB on 8 GPUs; beyond, the pipeline's fill is then a 64th of the time, not less)."""


def nvls_chunk_steps(topology: Topology, kind: CollectiveKind, size_bytes: float) -> int:
    """The chunk steps per block in which NVLS (or NVLSTree) is simulated at ``size_bytes``: NCCL's
    (:func:`taccl_py.runtime.nccl_nvls_pieces`, at most :data:`NVLS_MAX_PIECES`); 1 for one phase (one stream per
    block, :data:`taccl_py.runtime.NVLS_ONE_PHASE_KINDS`)."""
    if kind in NVLS_ONE_PHASE_KINDS:
        return 1
    return min(NVLS_MAX_PIECES, nccl_nvls_pieces(size_bytes, gpus_per_machine(topology), blocks=topology.num_gpus))


P2P_LL_THRESHOLD_BYTES = 16384
"""NCCL sends a point-to-point message of at most this many bytes with LL, a larger one with Simple
(enqueue.cc ``NCCL_P2P_LL_THRESHOLD``, default 16384)."""


def nccl_protocols(kind: CollectiveKind, algorithm: str, size_bytes: float | None = None,
                   num_ranks: int | None = None) -> tuple[Protocol, ...]:
    """The protocols NCCL runs ``algorithm`` with: Simple only for NVLS; for Alltoall (point-to-point sends of
    ``size_bytes / num_ranks`` per peer) the one its threshold picks: LL up to :data:`P2P_LL_THRESHOLD_BYTES` per
    peer, else Simple (both when the size is not given)."""
    if algorithm in NVLS_ALGORITHMS:
        return (Protocol.SIMPLE,)
    if kind is CollectiveKind.ALLTOALL:
        if size_bytes is None or not num_ranks:
            return (Protocol.LL, Protocol.SIMPLE)
        return (Protocol.LL,) if size_bytes / num_ranks <= P2P_LL_THRESHOLD_BYTES else (Protocol.SIMPLE,)
    return PROTOCOLS


P2P_PROTOCOLS: tuple[Protocol, ...] = (Protocol.LL, Protocol.SIMPLE)
"""The protocols NCCL's point-to-point sends run (enqueue.cc: LL up to its threshold, else Simple), whatever
NCCL_PROTO says: Alltoall keeps them under any restriction of the protocols."""


def kept_protocols(kind: CollectiveKind, protocols: tuple[Protocol, ...],
                   allowed: tuple[Protocol, ...] | list[Protocol] | None) -> tuple[Protocol, ...]:
    """``protocols`` kept to those ``allowed`` (a run's NCCL_PROTO; None: all), in their order; Alltoall also keeps
    :data:`P2P_PROTOCOLS` (NCCL's point-to-point sends pick their own, which NCCL_PROTO does not enter)."""
    if allowed is None:
        return protocols
    return tuple(p for p in protocols if p in allowed or (kind is CollectiveKind.ALLTOALL and p in P2P_PROTOCOLS))


def model_protocols(model: RuntimeModel, kind: CollectiveKind,
                    protocols: tuple[Protocol, ...] = PROTOCOLS) -> tuple[Protocol, ...]:
    """``protocols`` kept to those the model's runs allow (:attr:`~taccl_py.runtime.RuntimeModel.protocols`, their
    NCCL_PROTO; None: all), as :func:`kept_protocols` keeps them."""
    return kept_protocols(kind, protocols, model.protocols)


def allowed_protocols(kind: CollectiveKind, algorithm: str, size_bytes: float | None = None,
                      num_ranks: int | None = None,
                      protocols: tuple[Protocol, ...] | list[Protocol] | None = None) -> tuple[Protocol, ...]:
    """The protocols of :func:`nccl_protocols` that ``protocols`` (a run's NCCL_PROTO; None: all) allows, in NCCL's
    order (:func:`kept_protocols`); empty when none is (NVLS under ``NCCL_PROTO=LL``). Alltoall keeps its own: NCCL's
    point-to-point sends pick LL or Simple by their threshold (enqueue.cc), which NCCL_PROTO does not enter."""
    return kept_protocols(kind, nccl_protocols(kind, algorithm, size_bytes, num_ranks), protocols)


def nccl_algorithms(topology: Topology, kind: CollectiveKind) -> list[str]:
    """The algorithms of :data:`NCCL_ALGORITHMS` that can run ``kind`` on ``topology``."""
    from taccl_py.baselines import applicable_baselines

    usable = set(applicable_baselines(topology, kind))
    return [a for a in NCCL_ALGORITHMS.get(kind, ("ring",)) if a in usable]


def predict_nccl(topology: Topology, kind: CollectiveKind, size_bytes: int, model: RuntimeModel, *,
                 algorithms: tuple[str, ...] | list[str] | None = None,
                 protocols: tuple[Protocol, ...] | list[Protocol] | None = None) -> tuple[str, Prediction] | None:
    """What NCCL would run at ``size_bytes``: the fastest of its algorithms and protocols under ``model``.

    ``algorithms`` and ``protocols``: what the run allowed (its NCCL_ALGO and NCCL_PROTO); None: all of NCCL's.
    Returns (algorithm, prediction), or None when no algorithm applies or none completes.
    """
    best: tuple[str, Prediction] | None = None
    for name in nccl_algorithms(topology, kind) if algorithms is None else algorithms:
        allowed = allowed_protocols(kind, name, size_bytes, topology.num_gpus, protocols)
        if not allowed:
            continue
        try:
            pred = predict_baseline(topology, kind, name, size_bytes, model, protocols=allowed)
        except NotApplicable:
            continue
        if pred.sim.time_us is not None and (best is None or best[1].sim.time_us is None
                                              or pred.sim.time_us < best[1].sim.time_us):
            best = (name, pred)
    return best


def predict_program(program: object, topology: Topology, size_bytes: float, model: RuntimeModel) -> Prediction:
    """An MSCCL program (or its :class:`~taccl_py.msccl.arrays.ProgramArrays`) timed with the costs of the protocol
    its ``proto`` names. A ``proto`` that names none fails the program's checks, which run before any cost is read
    (the result says why; the prediction's protocol is then Simple, a placeholder)."""
    from taccl_py.msccl import simulate_program
    from taccl_py.msccl.arrays import ProgramArrays
    from taccl_py.msccl.ir import Program

    assert isinstance(program, Program | ProgramArrays)
    kind = program.kind
    assert kind is not None
    p = Protocol(program.proto) if program.proto in {q.value for q in PROTOCOLS} else Protocol.SIMPLE
    options = SimOptions(costs=model.costs(p, kind, topology))
    if isinstance(program, ProgramArrays):
        from taccl_py.msccl.fast_timing import simulate_arrays

        sim = simulate_arrays(program, topology, size_bytes, options)
    else:
        sim = simulate_program(program, topology, size_bytes, options)
    return Prediction(sim, p, None, {p.value: sim.time_us})


def host_channels(algorithm: str, kind: CollectiveKind, protocol: Protocol | str, size_bytes: float,
                  topology: Topology, model: RuntimeModel, own: int | None = None) -> int:
    """The channels a ``-g N`` host launches ``algorithm`` on: NCCL's for NCCL's own algorithms of ``kind``
    (:data:`NCCL_ALGORITHMS`, :func:`taccl_py.runtime.nccl_channels`), else the schedule's ``own`` (1 when unknown),
    as the file written from it is timed."""
    if algorithm in NCCL_ALGORITHMS.get(kind, ()):
        return nccl_channels(algorithm, protocol, size_bytes, topology.num_gpus, model.channels)
    return max(int(own or 1), 1)


def overlapped_time_us(host: OverlappedHost, gpu_us: float | None, algorithm: str, kind: CollectiveKind,
                       protocol: Protocol | str, size_bytes: float, topology: Topology,
                       model: RuntimeModel) -> float | None:
    """``algorithm`` with ``protocol`` timed ``gpu_us`` on the GPUs, as a ``-g N`` harness whose host overlaps
    their work times it: the longer of the two, the host's over :func:`host_channels`. None stays None (an
    incorrect run)."""
    if gpu_us is None:
        return None
    return host.time_us(gpu_us, host_channels(algorithm, kind, protocol, size_bytes, topology, model))


def best_protocol(topology: Topology, schedule: Schedule, size_bytes: float, model: RuntimeModel) -> Protocol:
    """The protocol under which ``schedule`` is fastest at ``size_bytes`` (what an XML for that size should name)."""
    return predict_schedule(topology, schedule, size_bytes, model).protocol
