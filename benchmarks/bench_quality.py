"""Bandwidth quality to the bound at 1 GB: issue 16's targets (the "Bandwidth quality at 1 GB" section).

A benchmark module of benchmarks/harness.py: ``.venv/bin/python benchmarks/run.py --full --only quality``
measures it and re-renders RESULTS.md. Each row is ``synthesize`` in-process with the options of
``taccl synthesize -t T -c C -s 1GB --time-limit L`` (baselines compared, the faster one kept), timed by
our simulator; efficiency = ``taccl bound`` / time. The instances and their goals:

* 2xDGX-2 Allgather >= 99.5% of the bound (TE-CCL reports 129.03 GB/s, the bound);
* DGX-A100 x4 and x8 (ForestColl's model) Allgather >= 99%;
* DGX-A100 x4 and x8 Allreduce >= 97%, x16 (128 GPUs) >= 95%.

Alone, ``.venv/bin/python benchmarks/bench_quality.py [--only TEXT]`` prints the rows.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_synthesis import GB, Target, run_target

from taccl_py.collectives import CollectiveKind
from taccl_py.units import format_bytes

NAME, TITLE, ORDER = "quality", "Bandwidth quality at 1 GB", 21


def targets(quick: bool) -> Iterator[Target]:
    """Issue 16 part 5; quick mode leaves out the 64- and 128-GPU instances (about 6 minutes together)."""
    ag, ar = CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE
    machines = (4,) if quick else (4, 8)
    yield Target("quality", "dgx2x2", ag, GB, ">= 99.5% of the bound", 60, min_efficiency=0.995,
                 reference="TE-CCL 129.03 GB/s (the bound)")
    for k in machines:
        yield Target("quality", f"dgx-a100x{k}-forestcoll", ag, GB, ">= 99% of the bound", 60, min_efficiency=0.99,
                     reference="ForestColl reaches the bound")
    for k in machines:
        yield Target("quality", f"dgx-a100x{k}-forestcoll", ar, GB, ">= 97% of the bound", 60, min_efficiency=0.97)
    if not quick:
        yield Target("quality", "dgx-a100x16-forestcoll", ar, GB, ">= 95% of the bound", 290, min_efficiency=0.95)


def command(r: dict[str, Any], time_limit_s: float) -> str:
    """The CLI command the row stands for."""
    return (f"taccl synthesize -t {r['topology']} -c {r['collective']} -s {format_bytes(int(r['size']))} "
            f"--time-limit {time_limit_s:g}")


def run(quick: bool) -> dict[str, Any]:
    from harness import note

    rows = []
    for t in targets(quick):
        row = run_target(t)
        row["command"] = command(row, t.time_limit_s)
        rows.append(row)
        note(_fmt_row(row))
    return {"rows": rows}


def _fmt_row(r: dict[str, Any]) -> str:
    return (f"| {r['topology']} ({r['gpus']}) | {r['collective']} | {format_bytes(int(r['size']))} "
            f"| {r['algbw_GBps']:.2f} | {r['bound_algbw_GBps']:.2f} | {100 * r['efficiency']:.2f}% | {r['goal']} "
            f"| {'met' if r['met'] else '**not met**'} | {r['algorithm']}, chunk factor {r['chunk_factor']} "
            f"| {r['synthesis_s']:.1f} | `{r['command']}` |")


def render(data: dict[str, Any], figures: Path) -> str:
    rows = data["rows"]
    met = sum(1 for r in rows if r["met"])
    lines = [f"Issue 16's bandwidth targets at 1 GB: {met} of {len(rows)} met. algbw = size / time (GB/s of 1e9 "
             "bytes, 1GB = 2^30 bytes); efficiency = bound / time, both from our simulator and `taccl bound`; "
             "written = what the command keeps (the synthesized schedule, or a baseline when one is faster); "
             "seconds = synthesis wall time (solve and simulate every candidate, no XML lowering), under the "
             "load given above.", "",
             "| topology (GPUs) | collective | size | algbw | bound algbw | efficiency | target | result | written "
             "| synthesis s | command |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_fmt_row(r) for r in rows]
    return "\n".join(lines) + "\n"


def headline(data: dict[str, Any]) -> list[list[str]]:
    rows = data["rows"]
    if not rows:
        return []
    met = sum(1 for r in rows if r["met"])
    lowest = min(rows, key=lambda r: r["efficiency"])
    return [["Bandwidth quality at 1 GB (2xDGX-2, DGX-A100 x4-x16 Allgather/Allreduce)",
             f"{met} of {len(rows)} targets met; lowest {100 * lowest['efficiency']:.1f}% of the bound "
             f"({lowest['topology']} {lowest['collective']})", ""]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="leave out the 64- and 128-GPU instances")
    parser.add_argument("--only", help="run targets whose topology contains this text")
    args = parser.parse_args()
    for t in targets(args.quick):
        if args.only and args.only not in t.topology:
            continue
        row = run_target(t)
        row["command"] = command(row, t.time_limit_s)
        print(_fmt_row(row), flush=True)
    print("done (benchmarks/run.py --full --only quality stores and renders the results)", file=sys.stderr)


if __name__ == "__main__":
    main()
