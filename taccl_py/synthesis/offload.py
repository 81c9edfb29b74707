"""Synthesis with the switches: in-switch reduction schedules whose pipeline depth the synthesizer searches.

Where the topology's switches reduce in the network, the NVLS, SHARP and
NVLSTree Allreduce (and the NVLS ReduceScatter) are candidates next to the
synthesized unicast schedules; :func:`compare_baselines` times them at the depth
the baseline picks from the size. Their phases (reduce into the switch, across
the machines for SHARP and NVLSTree, multicast back out) overlap only across
pieces of a block, so the depth matters (on GB200 NVL72 at 256 MB, 3 pieces per
block are 33% slower than 16; NVLSTree on 2 x DGX H100 at 4 MB, 1 piece 11%
slower than 4). This stage searches it: from
the baseline's depth, doubling while the simulated time improves (halving when
doubling does not help), within :data:`MAX_TRANSFERS` transfers and half the
time limit (it runs before the unicast stages, which get the rest). The winner enters the ranking as a ``tuned`` choice. A multicast
Allgather or Broadcast is one fluid flow per block over its tree, which pieces
cannot speed up: it is left to the baseline.

The schedules use network groups, so they can be written as schedule JSON only
(``--schedule-out``), never as MSCCL XML.
"""

from __future__ import annotations

from taccl_py.baselines.common import NotApplicable
from taccl_py.baselines.offload import offload_schedule
from taccl_py.collectives import CollectiveKind
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimResult, simulate
from taccl_py.synthesis.candidates import Candidate, Choice
from taccl_py.synthesis.options import Run
from taccl_py.topology import Topology

__all__ = ["MAX_TRANSFERS", "PIPELINED", "tuned_offload"]

PIPELINED = {CollectiveKind.ALLREDUCE: ("nvls", "sharp", "nvls-tree"), CollectiveKind.REDUCESCATTER: ("nvls",)}
"""The in-switch reduction schedules whose depth is searched, per collective."""

MAX_TRANSFERS = 250_000
"""A deeper schedule than this is not tried (its simulation would cost more than it can gain)."""

_MAX_DOUBLINGS = 4


def _timed(run: Run, topology: Topology, name: str, kind: CollectiveKind, size_bytes: float, root: int,
           pieces: int) -> tuple[Schedule, SimResult] | None:
    """The schedule with ``pieces`` per block and its simulated time; None when it cannot be built or is too big."""
    try:
        schedule = offload_schedule(topology, kind, name, root=root, chunk_factor=pieces)
    except NotApplicable:
        return None
    if len(schedule) > MAX_TRANSFERS:
        return None
    run.report("simulating", chunk_factor=pieces, ordering=f"{name} pipelined", transfers=len(schedule))
    with run.stage("simulate"):
        sim = simulate(topology, schedule, size_bytes, run.sim_options)
    return schedule, sim


def _time(sim: SimResult) -> float:
    assert sim.time_us is not None
    return sim.time_us


def tuned_offload(run: Run, topology: Topology, kind: CollectiveKind, size_bytes: float,
                  root: int) -> tuple[list[Choice], list[str]]:
    """For each in-switch reduction schedule that runs here: the best pipeline depth found, as a choice.

    Only a depth faster than the baseline's own is returned (the baseline is already ranked).
    """
    choices: list[Choice] = []
    notes: list[str] = []
    for name in PIPELINED.get(kind, ()):
        try:
            start = offload_schedule(topology, kind, name, root=root, size_bytes=size_bytes)
        except NotApplicable:
            continue
        pieces = start.collective.chunk_factor
        with run.stage("simulate"):
            first = simulate(topology, start, size_bytes, run.sim_options)
        if first.time_us is None:
            continue
        best: tuple[int, Schedule, SimResult] = (pieces, start, first)
        tried = {pieces}
        for direction in (2.0, 0.5):
            current = pieces
            for _ in range(_MAX_DOUBLINGS):
                nxt = max(1, int(current * direction))
                if nxt in tried or run.out_of_time() or run.elapsed_s() > run.options.time_limit_s / 2:
                    break
                tried.add(nxt)
                timed = _timed(run, topology, name, kind, size_bytes, root, nxt)
                if timed is None or timed[1].time_us is None or timed[1].time_us >= _time(best[2]):
                    break
                best = (nxt, timed[0], timed[1])
                current = nxt
            if best[0] != pieces:  # doubling helped: no need to try fewer pieces
                break
        depth, schedule, sim = best
        if depth == pieces:
            continue
        time_us = _time(sim)
        per_block = f"{depth} piece{'s' if depth > 1 else ''} per block"
        label = f"{name} pipelined ({per_block})"
        notes.append(f"{name}: {per_block} ({time_us:.4g} us) beat the baseline's {pieces} "
                     f"({first.time_us:.4g} us); searched {sorted(tried)}")
        candidate = Candidate(label=label, chunk_factor=depth, time_us=sim.time_us, transfers=len(schedule),
                              note="in-switch reduction, pipeline depth searched", tuned=True)
        choices.append(Choice(schedule, sim, candidate))
    return choices, notes
