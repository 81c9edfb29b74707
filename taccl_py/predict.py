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

from dataclasses import dataclass, replace

from taccl_py.collectives import CollectiveKind
from taccl_py.errors import NotApplicable
from taccl_py.runtime import PROTOCOLS, Protocol, RuntimeModel, nccl_ring_pieces
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimOptions, SimResult, simulate
from taccl_py.topology import Topology

__all__ = ["Prediction", "best_protocol", "predict_baseline", "predict_program", "predict_schedule"]

_PIECED_RINGS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE)


@dataclass(frozen=True)
class Prediction:
    """A calibrated simulation: the result under the chosen protocol, and the schedule it ran."""

    sim: SimResult
    protocol: Protocol
    schedule: Schedule | None
    times_us: dict[str, float | None]
    """Per protocol tried, its time (None when incorrect)."""


def _better(a: SimResult, b: SimResult | None) -> bool:
    if b is None or b.time_us is None:
        return True
    return a.time_us is not None and a.time_us < b.time_us


def predict_schedule(topology: Topology, schedule: Schedule, size_bytes: float, model: RuntimeModel, *,
                     protocols: tuple[Protocol, ...] = PROTOCOLS, step_overhead_us: float = 0.0) -> Prediction:
    """``schedule`` under each protocol; the fastest wins (ties: the earlier in ``protocols``)."""
    best: SimResult | None = None
    chosen = protocols[0]
    times: dict[str, float | None] = {}
    for p in protocols:
        costs = model.costs(p, schedule.collective.kind, topology)
        sim = simulate(topology, schedule, size_bytes, SimOptions(step_overhead_us=step_overhead_us, costs=costs))
        times[p.value] = sim.time_us
        if _better(sim, best):
            best, chosen = sim, p
    assert best is not None
    return Prediction(best, chosen, schedule, times)


def predict_baseline(topology: Topology, kind: CollectiveKind, algorithm: str, size_bytes: int, model: RuntimeModel,
                     *, channels: int | None = None, root: int = 0, step_overhead_us: float = 0.0,
                     protocols: tuple[Protocol, ...] = PROTOCOLS) -> Prediction:
    """The NCCL-style ``algorithm`` for ``kind`` at ``size_bytes``, built and timed per protocol.

    Raises :class:`NotApplicable` as :func:`taccl_py.baselines.baseline` does.
    """
    from taccl_py.baselines import baseline

    best: Prediction | None = None
    times: dict[str, float | None] = {}
    plain: Schedule | None = None
    for p in protocols:
        costs = model.costs(p, kind, topology)
        hop = max(costs.hop_latency_us.values())
        if algorithm == "ring" and kind in _PIECED_RINGS:
            if plain is None:
                plain = baseline(topology, kind, "ring", channels=channels, root=root, size_bytes=size_bytes)
            count = int(plain.notes.get("channels") or 1)
            pieces = nccl_ring_pieces(p, size_bytes, topology.num_gpus, count)
            schedule = plain if pieces == 1 else baseline(topology, kind, "ring", channels=channels, root=root,
                                                          chunk_factor=count * pieces, size_bytes=size_bytes)
            if pieces > 1:  # the loops' step latencies overlap in the connection's NCCL_STEPS slots: the ring
                # pays nsteps x the per-hop latency once (tuning.cc), so each loop's step carries 1/pieces of it
                costs = replace(costs, hop_latency_us={c: v / pieces for c, v in costs.hop_latency_us.items()})
        else:
            schedule = baseline(topology, kind, algorithm, channels=channels, root=root, size_bytes=size_bytes,
                                step_overhead_us=step_overhead_us + hop)
        sim = simulate(topology, schedule, size_bytes, SimOptions(step_overhead_us=step_overhead_us, costs=costs))
        times[p.value] = sim.time_us
        if best is None or _better(sim, best.sim):
            best = Prediction(sim, p, schedule, times)
    if best is None:
        raise NotApplicable("no protocol to try")
    return Prediction(best.sim, best.protocol, best.schedule, times)


def predict_program(program: object, topology: Topology, size_bytes: float, model: RuntimeModel) -> Prediction:
    """An MSCCL program timed with the costs of the protocol its ``proto`` names."""
    from taccl_py.msccl import simulate_program
    from taccl_py.msccl.ir import Program

    assert isinstance(program, Program)
    kind = program.kind
    assert kind is not None
    p = Protocol(program.proto)
    sim = simulate_program(program, topology, size_bytes, SimOptions(costs=model.costs(p, kind, topology)))
    return Prediction(sim, p, None, {p.value: sim.time_us})


def best_protocol(topology: Topology, schedule: Schedule, size_bytes: float, model: RuntimeModel) -> Protocol:
    """The protocol under which ``schedule`` is fastest at ``size_bytes`` (what an XML for that size should name)."""
    return predict_schedule(topology, schedule, size_bytes, model).protocol
