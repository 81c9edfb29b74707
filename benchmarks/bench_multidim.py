"""Multi-dimensional (ASTRA-sim 2.0) networks: the best hierarchical baseline against the bound and `taccl synthesize`.

A benchmark module of benchmarks/harness.py: ``.venv/bin/python benchmarks/run.py --full --only multidim``
(raw figures in ``benchmarks/results/multidim.json``, the table in ``benchmarks/results/multidim.md``). For
each network of issue 10 (plus a 4-D one) and Allgather, ReduceScatter and Allreduce at 1 MB, 32 MB and
1 GB: the hierarchical baselines ``hier`` (ASTRA-sim's dimension order) and ``hier-lb`` (Themis-style
balanced orders), each with the parameters it chose for the size, the lower bound, and ``synthesize`` with
its default options (what it returns, which may be a baseline, and its best own candidate). Every time is
our simulator's on the schedule. Quick mode (``make bench``): 1 GB only, no synthesis.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from taccl_py.baselines import baseline
from taccl_py.bounds import lower_bound
from taccl_py.collectives import CollectiveKind
from taccl_py.library import AstraDimension, AstraKind, astra_topology
from taccl_py.simulator import simulate
from taccl_py.synthesis import SynthesisOptions, synthesize
from taccl_py.topology import Topology
from taccl_py.units import format_bytes

NAME, TITLE, ORDER = "multidim", "Multi-dimensional networks", 50
MB, GB = 2**20, 2**30
TIME_LIMIT_S = 60.0
KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE)

NETWORKS: dict[str, tuple[AstraDimension, ...]] = {
    "ring4-switch4": (AstraDimension(AstraKind.RING, 4, 200.0, 500.0),
                      AstraDimension(AstraKind.SWITCH, 4, 50.0, 2000.0)),
    "ring2-fc8-switch4": (AstraDimension(AstraKind.RING, 2, 200.0, 50.0),
                          AstraDimension(AstraKind.FULLY_CONNECTED, 8, 100.0, 500.0),
                          AstraDimension(AstraKind.SWITCH, 4, 50.0, 2000.0)),
    "ring2-fc4-ring4-switch2": (AstraDimension(AstraKind.RING, 2, 200.0, 50.0),
                                AstraDimension(AstraKind.FULLY_CONNECTED, 4, 100.0, 500.0),
                                AstraDimension(AstraKind.RING, 4, 50.0, 1000.0),
                                AstraDimension(AstraKind.SWITCH, 2, 25.0, 2000.0)),
}
"""Issue 10's two ASTRA-sim networks (bandwidth GB/s of 2^30 bytes, latency ns) and a 4-D one of 64 NPUs."""


def _hierarchical(topology: Topology, kind: CollectiveKind, size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("hier", "hier-lb"):
        started = time.perf_counter()
        schedule = baseline(topology, kind, name, size_bytes=size)
        built = time.perf_counter() - started
        sim = simulate(topology, schedule, size)
        out[name] = {"correct": sim.correct, "time_us": sim.time_us, "parameters": schedule.notes["parameters"],
                     "description": schedule.notes["description"], "transfers": len(schedule),
                     "build_s": round(built, 3)}
    return out


def _measure(network: str, kind: CollectiveKind, size: int, *, synthesis: bool, time_limit: float
             ) -> dict[str, Any]:
    topology = astra_topology(NETWORKS[network], name=network)
    bound = lower_bound(topology, kind, size)
    hier = _hierarchical(topology, kind, size)
    best_name = min((n for n in hier if hier[n]["time_us"] is not None), key=lambda n: hier[n]["time_us"])
    row: dict[str, Any] = {"network": network, "npus": topology.num_gpus, "collective": kind.value, "size": size,
                           "bound_us": bound.bound_us, "bound_reason": bound.explanation, "hierarchical": hier,
                           "best_hierarchical": best_name,
                           "best_hierarchical_efficiency": bound.bound_us / hier[best_name]["time_us"]}
    if synthesis:
        started = time.perf_counter()
        result = synthesize(topology, kind, size, SynthesisOptions(time_limit_s=time_limit))
        row["synthesize"] = {"time_us": result.sim.time_us, "chosen": result.chosen,
                             "own_time_us": result.synthesized.time_us if result.synthesized else None,
                             "efficiency": bound.bound_us / result.sim.time_us if result.sim.time_us else None,
                             "wall_s": round(time.perf_counter() - started, 1),
                             "baselines_us": result.baselines}
    return row


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def run(quick: bool) -> dict[str, Any]:
    from harness import note

    sizes = (GB,) if quick else (MB, 32 * MB, GB)
    rows = []
    for network in NETWORKS:
        for kind in KINDS:
            for size in sizes:
                row = _measure(network, kind, size, synthesis=not quick, time_limit=TIME_LIMIT_S)
                rows.append(row)
                note(f"{network} {kind.value} {format_bytes(size)}: bound {row['bound_us']:.1f}, best hierarchical "
                     f"{row['hierarchical'][row['best_hierarchical']]['time_us']:.1f}")
    return {"rows": rows, "synthesis": not quick, "time_limit_s": TIME_LIMIT_S}


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def render(data: dict[str, Any], figures: Path) -> str:
    rows = data["rows"]
    lines = ["Times in us by our simulator (fluid model, cut-through switches); sizes binary (1GB = 2^30 B); "
             "efficiency = bound / time. `hier`: ASTRA-sim's dimension order; `hier-lb`: Themis-style balanced "
             "orders; each with the parameters it chose (algorithm per dimension; splits). `synthesize`: what "
             f"the command returns with default options ({data['time_limit_s']:g} s limit; it falls back to the "
             "best baseline, hierarchical ones included, when that is faster), and in brackets its best own "
             "candidate." + ("" if data["synthesis"] else " Quick mode: no synthesis."), "",
             "| network (NPUs) | collective | size | bound | hier | hier-lb | best hier. eff. | synthesize "
             "(own) | synth. eff. | synth. s | hier-lb parameters |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        h, lb = r["hierarchical"]["hier"], r["hierarchical"]["hier-lb"]
        synth = r.get("synthesize")
        synth_cell = "-" if synth is None else f"{_us(synth['time_us'])} ({_us(synth['own_time_us'])})"
        synth_eff = "-" if synth is None or synth["efficiency"] is None else f"{100 * synth['efficiency']:.1f}%"
        lines.append(f"| {r['network']} ({r['npus']}) | {r['collective']} | {format_bytes(r['size'])} "
                     f"| {_us(r['bound_us'])} | {_us(h['time_us'])} | {_us(lb['time_us'])} "
                     f"| {100 * r['best_hierarchical_efficiency']:.1f}% | {synth_cell} | {synth_eff} "
                     f"| {'-' if synth is None else synth['wall_s']} | {lb['description'].replace('|', '/')} |")
    lines += ["", "Bounds (the reason for the 1 GB row of each network and collective; the proof of the Allreduce "
              "bound and how tight it is: docs/simulator.md):", ""]
    lines += [f"- {r['network']} {r['collective']}: {r['bound_reason']}" for r in rows if r["size"] == GB]
    return "\n".join(lines) + "\n"
