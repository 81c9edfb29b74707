"""Multi-dimensional (ASTRA-sim 2.0) networks: the best hierarchical baseline against the bound and `taccl synthesize`.

Run: ``.venv/bin/python benchmarks/bench_multidim.py [--quick] [--no-synthesis] [--time-limit S]``. For each
network of issue 10 (plus a 4-D one) and Allgather, ReduceScatter and Allreduce at 1 MB, 32 MB and 1 GB:
the hierarchical baselines ``hier`` (ASTRA-sim's dimension order) and ``hier-lb`` (Themis-style balanced
orders), each with the parameters it chose for the size, the lower bound, and ``synthesize`` with its
default options (what it returns, which may be a baseline, and its best own candidate). Every time is our
simulator's on the schedule. Raw figures go to ``benchmarks/results/multidim.json``, a table to
``benchmarks/results/multidim.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from bench_simulator import cpu_model  # same directory: run as a script

from taccl_py.baselines import baseline
from taccl_py.bounds import lower_bound
from taccl_py.collectives import CollectiveKind
from taccl_py.library import AstraDimension, AstraKind, astra_topology
from taccl_py.simulator import simulate
from taccl_py.synthesis import SynthesisOptions, synthesize
from taccl_py.topology import Topology
from taccl_py.units import format_bytes

HERE = Path(__file__).parent
MB, GB = 2**20, 2**30
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


def run(network: str, kind: CollectiveKind, size: int, synthesis: bool, time_limit: float) -> dict[str, Any]:
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


def render(rows: list[dict[str, Any]], command: str) -> str:
    lines = ["# Multi-dimensional networks: hierarchical baselines, bound, synthesis", "",
             f"Measured on {cpu_model()} ({os.cpu_count()} CPUs, shared with other jobs), Python "
             f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}, with:", "", f"    {command}", "",
             "Times in us by our simulator (fluid model, cut-through switches); sizes binary (1GB = 2^30 B); "
             "efficiency = bound / time. `hier`: ASTRA-sim's dimension order; `hier-lb`: Themis-style balanced "
             "orders; each with the parameters it chose (algorithm per dimension; splits). `synthesize`: what "
             "the command returns with default options (it falls back to the best baseline, hierarchical ones "
             "included, when that is faster), and in brackets its best own candidate.", "",
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
                     f"| {'-' if synth is None else synth['wall_s']} | {lb['description']} |")
    lines += ["", "Bounds (the reason for the 1 GB row of each network and collective):", ""]
    for r in rows:
        if r["size"] == GB:
            lines.append(f"- {r['network']} {r['collective']}: {r['bound_reason']}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1 GB only")
    parser.add_argument("--no-synthesis", action="store_true", help="baselines and bounds only")
    parser.add_argument("--time-limit", type=float, default=60.0, help="synthesize --time-limit (s)")
    parser.add_argument("--only", help="networks whose name contains this text")
    args = parser.parse_args()
    sizes = (GB,) if args.quick else (MB, 32 * MB, GB)
    rows = []
    for network in NETWORKS:
        if args.only and args.only not in network:
            continue
        for kind in KINDS:
            for size in sizes:
                row = run(network, kind, size, not args.no_synthesis, args.time_limit)
                rows.append(row)
                synth = row.get("synthesize") or {}
                print(f"{network} {kind.value} {format_bytes(size)}: bound {row['bound_us']:.1f}, hier "
                      f"{row['hierarchical']['hier']['time_us']:.1f}, hier-lb "
                      f"{row['hierarchical']['hier-lb']['time_us']:.1f}, synthesize {synth.get('time_us')} "
                      f"({synth.get('chosen')}, own {synth.get('own_time_us')}, {synth.get('wall_s')} s)", flush=True)
    flags = " ".join(f for f, on in (("--quick", args.quick), ("--no-synthesis", args.no_synthesis)) if on)
    command = f".venv/bin/python benchmarks/bench_multidim.py {flags}".rstrip()
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "multidim.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1) + "\n")
    (HERE / "results" / "multidim.md").write_text(render(rows, command))
    print("done", file=sys.stderr)


if __name__ == "__main__":
    main()
