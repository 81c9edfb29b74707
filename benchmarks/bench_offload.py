"""Switch multicast and in-network reduction (issue 11): the offload baselines against the unicast ones.

Run: ``.venv/bin/python benchmarks/run.py --only offload`` (or as part of ``make bench``).

Cases, all at 1 GB (2^30 bytes), simulated times (machine-independent):

* multicast Allgather on ``fat-tree188`` (the multicast paper's testbed shape) against the best
  unicast baseline: endpoint bytes (injected, and injected + ejected, per GPU, over M) and the time
  against the (multicast) bound; the paper's claim is half the endpoint traffic;
* NVLS Allreduce on ``dgx-h100-nvls`` against the ring: time, efficiency against the NVLS-aware bound,
  busbw gain;
* SHARP Allreduce on ``dgx-h100x4-nvls-sharp`` against the best unicast baseline.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

NAME, TITLE, ORDER = "offload", "Switch multicast and in-network reduction", 60
SIZE = 2**30

CASES = (("fat-tree188", "allgather", "multicast"), ("dgx-h100-nvls", "allreduce", "nvls"),
         ("dgx-h100x4-nvls-sharp", "allreduce", "sharp"))


def _endpoint_bytes(topology: Any, result: Any) -> tuple[float, float]:
    """Bytes on GPU -> anything links (injected) and anything -> GPU links (ejected), summed over GPUs."""
    out = sum(b for b, link in zip(result.link_bytes, topology.links, strict=True) if topology.is_gpu(link.src))
    into = sum(b for b, link in zip(result.link_bytes, topology.links, strict=True) if topology.is_gpu(link.dst))
    return out, into


def run(quick: bool) -> dict[str, Any]:
    from taccl_py.baselines import applicable_baselines, baseline
    from taccl_py.baselines.offload import OFFLOAD_ALGORITHMS
    from taccl_py.bounds import lower_bound
    from taccl_py.library import resolve_topology
    from taccl_py.simulator import simulate

    rows = []
    for name, kind, offload in CASES:
        topo = resolve_topology(name)
        bound = lower_bound(topo, kind, SIZE)
        unicast_bound = lower_bound(topo, kind, SIZE, offload=False)
        entries = {}
        names = [a for a in applicable_baselines(topo, kind) if a not in OFFLOAD_ALGORITHMS or a == offload]
        if quick or topo.num_gpus > 64:  # the direct and one-shot baselines are slow to build at 188 GPUs
            names = [a for a in names if a in ("ring", "hier", offload)]
        for algorithm in names:
            started = time.perf_counter()
            schedule = baseline(topo, kind, algorithm, size_bytes=SIZE)
            result = simulate(topo, schedule, SIZE)
            out, into = _endpoint_bytes(topo, result)
            entries[algorithm] = {"time_us": result.time_us, "correct": result.correct,
                                  "busbw_GBps": result.busbw_GBps, "injected_bytes": out, "ejected_bytes": into,
                                  "transfers": len(schedule), "wall_s": time.perf_counter() - started}
        rows.append({"topology": name, "gpus": topo.num_gpus, "collective": kind, "offload": offload,
                     "bound_us": bound.bound_us, "assumes": bound.assumes, "unicast_bound_us": unicast_bound.bound_us,
                     "baselines": entries})
    return {"size_bytes": SIZE, "rows": rows}


def render(data: dict[str, Any], figures: Path) -> str:
    size = data["size_bytes"]
    lines = ["Simulated at 1 GB (2^30 bytes); efficiency = bound / time with the capability-aware bound "
             "(`taccl bound`), unicast bound = `taccl bound --unicast`. Endpoint bytes are per GPU, over the "
             "buffer size M: injected (GPU -> network) and injected + ejected.", "",
             "| topology | collective | algorithm | time us | efficiency | busbw GB/s | injected / M per GPU | "
             "endpoint / M per GPU |", "|---|---|---|---|---|---|---|---|"]
    notes = []
    for row in data["rows"]:
        n = row["gpus"]
        timed = {a: e for a, e in row["baselines"].items() if e["time_us"] is not None}
        for algorithm, e in row["baselines"].items():
            t = e["time_us"]
            eff = f"{row['bound_us'] / t:.3f}" if t else "-"
            lines.append(f"| {row['topology']} ({n} GPUs) | {row['collective']} | {algorithm} | "
                         f"{t:,.2f} | {eff} | {e['busbw_GBps']:.2f} | {e['injected_bytes'] / n / size:.4f} | "
                         f"{(e['injected_bytes'] + e['ejected_bytes']) / n / size:.4f} |")
        offload = timed.get(row["offload"])
        unicast = {a: e for a, e in timed.items() if a != row["offload"]}
        if offload and unicast:
            best_name = min(unicast, key=lambda a: unicast[a]["time_us"])
            best = unicast[best_name]
            ratio = (best["injected_bytes"] + best["ejected_bytes"]) / (offload["injected_bytes"]
                                                                         + offload["ejected_bytes"])
            notes.append(f"* {row['topology']}: {row['offload']} {offload['time_us']:,.2f} us against the best "
                         f"unicast baseline ({best_name}) {best['time_us']:,.2f} us; endpoint traffic "
                         f"{ratio:.2f}x less; busbw {offload['busbw_GBps'] / best['busbw_GBps']:.2f}x; bound "
                         f"{row['bound_us']:,.2f} us ({row['assumes']}), unicast bound "
                         f"{row['unicast_bound_us']:,.2f} us.")
    return "\n".join([*lines, "", *notes]) + "\n"
