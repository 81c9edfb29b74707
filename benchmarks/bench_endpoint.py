"""GPU endpoints and overlapped training steps (the "Endpoint and training steps" section of RESULTS.md; issue 12).

A benchmark module of benchmarks/harness.py. Three measurements on ``dgx-a100x2`` with every GPU's memory
at an A100 40GB's 1,555 GB/s (HBM2, NVIDIA's A100 datasheet):

* an Allreduce overlapped with a memory-bound kernel (``examples/workloads/allreduce_overlap.json``, and
  the same with the ring baseline): network utilization and step time, GPU-driven vs ACE engine mode;
* the example training steps (ResNet-50 data parallel, FSDP over GPT-2 XL layers): step-time speedup of
  the engine, next to ACE's published 1.44x network utilization and 1.41x ResNet-50 iteration time;
* the endpoint model's cost: simulating the bench_simulator ring Allgather (128 GPUs) with and without
  declared memory, best of three runs each (target: within 1.5x).

Alone: ``.venv/bin/python benchmarks/bench_endpoint.py [--quick]`` prints the section.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

NAME, TITLE, ORDER = "endpoint", "Endpoint and training steps", 60
ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "examples" / "workloads"
A100_HBM_GBPS = 1555.0
ACE_UTILIZATION, ACE_RESNET = 1.44, 1.41
COST_TARGET = 1.5


def _step(topology: Any, path: Path, algorithm: str | None = None) -> dict[str, Any]:
    """Both endpoint modes of one workload (its collectives' algorithm replaced when given)."""
    from taccl_py.cli.workload_cmd import build_schedules
    from taccl_py.endpoint import EndpointMode
    from taccl_py.workload import CollectiveNode, Workload, load_workload
    from taccl_py.workload_sim import simulate_step

    wl = load_workload(path)
    if algorithm is not None:
        nodes = tuple(CollectiveNode(n.id, n.kind, n.size_bytes, algorithm, n.channels, n.stream, n.after)
                      if isinstance(n, CollectiveNode) else n for n in wl.nodes)
        wl = Workload(wl.name, wl.source, nodes, wl.path)
    schedules = build_schedules(topology, wl)
    out: dict[str, Any] = {"workload": wl.name, "algorithm": algorithm or "as in the file",
                           "collectives": sum(isinstance(n, CollectiveNode) for n in wl.nodes),
                           "computes": sum(not isinstance(n, CollectiveNode) for n in wl.nodes)}
    for mode in EndpointMode:
        started = time.perf_counter()
        result = simulate_step(topology, wl, schedules, mode)
        out[mode.value] = {**result.summary(), "wall_s": time.perf_counter() - started}
    out["speedup"] = out["gpu"]["step_time_us"] / out["engine"]["step_time_us"]
    out["utilization_ratio"] = out["engine"]["network_utilization"] / out["gpu"]["network_utilization"]
    return out


def _cost(quick: bool) -> dict[str, Any]:
    """Simulation time of a large ring Allgather without and with declared memory (both modes)."""
    from taccl_py.baselines import baseline
    from taccl_py.endpoint import EndpointMode
    from taccl_py.library import resolve_topology
    from taccl_py.simulator import SimOptions, simulate
    from taccl_py.topology import Endpoint

    name = "dgx-a100x16-forestcoll"
    topology = resolve_topology(name)
    size = 2**30
    schedule = baseline(topology, "allgather", "ring", channels=1, size_bytes=size)
    limited = topology.with_endpoints(Endpoint(A100_HBM_GBPS))
    runs = {"none": (topology, EndpointMode.GPU), "gpu": (limited, EndpointMode.GPU),
            "engine": (limited, EndpointMode.ENGINE)}
    out: dict[str, Any] = {"topology": name, "transfers": len(schedule), "repeats": 1 if quick else 3}
    for key, (topo, mode) in runs.items():
        best = None
        for _ in range(out["repeats"]):
            started = time.perf_counter()
            result = simulate(topo, schedule, size, SimOptions(endpoint=mode))
            took = time.perf_counter() - started
            best = took if best is None else min(best, took)
        out[key] = {"simulate_s": best, "time_us": result.time_us}
    out["ratio"] = max(out["gpu"]["simulate_s"], out["engine"]["simulate_s"]) / out["none"]["simulate_s"]
    return out


def run(quick: bool) -> dict[str, Any]:
    from harness import note

    from taccl_py.library import resolve_topology
    from taccl_py.topology import Endpoint

    topology = resolve_topology("dgx-a100x2").with_endpoints(Endpoint(A100_HBM_GBPS))
    overlap = [_step(topology, WORKLOADS / "allreduce_overlap.json"),
               _step(topology, WORKLOADS / "allreduce_overlap.json", "ring")]
    training = [_step(topology, WORKLOADS / "resnet50_dp.json")]
    if not quick:
        training.append(_step(topology, WORKLOADS / "fsdp_gpt_layers.json"))
    for row in overlap + training:
        note(f"{row['workload']} ({row['algorithm']}): speedup {row['speedup']:.3f}, "
             f"utilization x{row['utilization_ratio']:.3f}")
    cost = _cost(quick)
    note(f"endpoint cost: x{cost['ratio']:.2f}")
    return {"memory_GBps": A100_HBM_GBPS, "overlap": overlap, "training": training, "cost": cost}


def _row(r: dict[str, Any]) -> str:
    g, e = r["gpu"], r["engine"]
    return (f"| {r['workload']} | {r['algorithm']} | {g['step_time_us'] / 1e3:.3f} | {e['step_time_us'] / 1e3:.3f} "
            f"| **{r['speedup']:.3f}x** | {g['network_utilization']:.3f} | {e['network_utilization']:.3f} "
            f"| {r['utilization_ratio']:.3f}x | {g['exposed_communication_us'] / 1e3:.3f} "
            f"| {e['exposed_communication_us'] / 1e3:.3f} |")


def render(data: dict[str, Any], figures: Path) -> str:
    cost = data["cost"]
    lines = [f"`dgx-a100x2` (16 A100s) with every GPU's memory at {data['memory_GBps']:,.0f} GB/s (A100 40GB HBM2). "
             "GPU-driven collectives touch 3 memory bytes per network byte in a ring Allreduce (send 1, reduce 3, "
             "copy 1), the ACE engine N/(N-1) = 1.067; compute kernels draw the memory bandwidth their workload file "
             "gives. `taccl workload simulate FILE -t dgx-a100x2 --memory-bandwidth 1555 --endpoint both` prints the "
             "same figures (docs/workloads.md).", "",
             "| workload | algorithm | step ms (gpu) | step ms (engine) | engine speedup | net. util. (gpu) "
             "| net. util. (engine) | util. ratio | exposed comm. ms (gpu) | exposed comm. ms (engine) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row(r) for r in data["overlap"] + data["training"]]
    resnet = next((r for r in data["training"] if r["workload"].startswith("resnet50")), None)
    rows = data["overlap"] + data["training"]
    best_util = max(r["utilization_ratio"] for r in rows)
    best_speedup = max(r["speedup"] for r in rows)
    reproduced = best_util >= ACE_UTILIZATION and resnet is not None and resnet["speedup"] >= ACE_RESNET
    lines += ["", f"ACE reports {ACE_UTILIZATION}x effective network utilization and {ACE_RESNET}x ResNet-50 "
                  f"iteration time on average. Here: utilization ratio at most {best_util:.3f}x, step-time speedup "
                  f"at most {best_speedup:.3f}x"
                  + (f", ResNet-50 {resnet['speedup']:.3f}x" if resnet else "") + ". "
                  + ("ACE's figures are reproduced." if reproduced else
                     "**ACE's 1.44x / 1.41x are not reproduced** by this model: max-min sharing serves the "
                     "collectives' low-rate transfers in full and lets the compute kernels absorb the memory "
                     "contention, so the engine gives the memory back to compute (shorter steps) rather than "
                     "raising network utilization; and in these workloads communication is a small part of the "
                     "step (dgx-a100x2 has 200 GB/s of IB per machine)."), "",
              f"Endpoint model cost: simulating the ring Allgather on {cost['topology']} ({cost['transfers']:,} "
              f"transfers, 1GB, best of {cost['repeats']}): {cost['none']['simulate_s']:.2f} s without declared "
              f"memory, {cost['gpu']['simulate_s']:.2f} s GPU-driven and {cost['engine']['simulate_s']:.2f} s "
              f"engine with it: **{cost['ratio']:.2f}x** (target within {COST_TARGET}x: "
              f"{'met' if cost['ratio'] <= COST_TARGET else '**not met**'})."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    data = run(args.quick)
    print(render(data, ROOT / "benchmarks" / "figures"))
    print(json.dumps(data["cost"]))


if __name__ == "__main__":
    main()
