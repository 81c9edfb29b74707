"""Scaling: simulate, synthesize and verify versus GPU count (issue 18), wall time and peak memory per stage.

Every stage is the user's command (``taccl simulate|synthesize|verify``) run in a fresh process
under a wrapper that reports its wall time and peak RSS. Topologies: DGX A100 clusters on the default
leaf-spine fabric (``taccl topo generate dgx-a100 -k N/8``: 20-machine scalable units, no translation
symmetry: the compiled simulator runs every transfer), the same machines on rail IB switches
(``--fabric rail``), whose NCCL rings repeat every two machines (one representative per orbit), and a
plain ring for the one-ring rows. The XML stages write the ring Allgather baseline as MSCCL
XML (``taccl baseline -a ring -o``, default channels and one channel) and verify and time the one-channel file.
A stage that runs out of its time budget at N GPUs is not run at larger N (the table says so), except the
synthesize rows (and the verify of their file), which run again from 256 GPUs, where synthesize takes the rail streams. The fitted growth is the least-squares slope k of
log(wall) against log(N) over the sizes that ran (time ~ N^k).

Run: ``.venv/bin/python benchmarks/run.py --only scaling`` (quick: 8 and 32 GPUs, 30 s per stage;
``--full``: up to 4096, 600 s per stage; ``TACCL_SCALING_TIMEOUT=S`` sets the budget). ``python benchmarks/bench_scaling.py --tiny`` is the
seconds-long mode the test suite runs.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NAME, TITLE, ORDER = "scaling", "Scaling to thousands of GPUs", 15

_TAccl = str(Path(sys.executable).with_name("taccl"))
_WRAPPER = (
    "import json, resource, subprocess, sys, time\n"
    "start = time.perf_counter()\n"
    "try:\n"
    "    done = subprocess.run(sys.argv[2:], capture_output=True, text=True, timeout=float(sys.argv[1]))\n"
    "    code, out, err = done.returncode, done.stdout, done.stderr\n"
    "except subprocess.TimeoutExpired:\n"
    "    code, out, err = 'timeout', '', ''\n"
    "wall = time.perf_counter() - start\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
    "last = [line for line in err.splitlines() if line.strip()][-1:]\n"
    "print(json.dumps({'exit': code, 'wall_s': wall, 'peak_rss_mib': peak, 'stdout': out[-2000:],\n"
    "                  'error': last[0][:400] if last and code != 0 else ''}))\n"
)

STAGES = ("simulate ring (NCCL channels)", "simulate ring (NCCL channels, rail)", "simulate ring (1 channel)",
          "simulate tree AR", "simulate direct AG", "simulate direct A2A", "simulate direct A2A (one switch)",
          "synthesize AG", "synthesize AR", "verify AG XML",
          "write ring AG XML", "write ring AG XML (1 channel)", "verify ring AG XML (1 channel)",
          "simulate ring AG XML (1 channel)")

_NEEDS = {"verify AG XML": ("ag", "synthesize"), "verify ring AG XML (1 channel)": ("ring1", "write"),
          "simulate ring AG XML (1 channel)": ("ring1", "write")}
"""Stages that read a file an earlier stage of the same GPU count wrote: (file, what writes it)."""

_RESUMES_AT = {"synthesize AG": 256, "synthesize AR": 256, "verify AG XML": 256}
"""Stages that run again from this GPU count even after a timeout below it: there `synthesize` changes method
(rail streams, taccl_py/synthesis/multidim.py RAIL_GPUS) and gets faster."""


def _measure(command: list[str], timeout_s: float) -> dict[str, Any]:
    """Run ``command`` in a fresh wrapper process; its wall time, peak RSS and exit status."""
    done = subprocess.run([sys.executable, "-c", _WRAPPER, str(timeout_s), *command], capture_output=True,
                          text=True, check=False, env=dict(os.environ, TERM="dumb"))
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    time_us = None
    if row["exit"] == 0 and row["stdout"].lstrip().startswith("{"):
        try:
            time_us = json.loads(row["stdout"]).get("time_us")
        except json.JSONDecodeError:
            time_us = None
    row["time_us"] = time_us
    del row["stdout"]
    if not row.get("error"):
        row.pop("error", None)
    return row


def _topology(gpus: int, workdir: Path, kind: str) -> Path:
    """``kind``: ring, leaf-spine (DGX A100 machines, the default fabric), rail or single (one InfiniBand switch)."""
    path = workdir / f"{kind}{gpus}.json"
    if not path.exists():
        spec = (["ring", "-n", str(gpus)] if kind == "ring" else ["dgx-a100"] if gpus == 8
                else ["dgx-a100", "-k", str(gpus // 8), "--fabric", kind])
        subprocess.run([_TAccl, "topo", "generate", *spec, "-o", str(path)], check=True, capture_output=True)
    return path


def _command(stage: str, topo: Path, rail: Path, ring: Path, xml: Path, single: Path) -> list[str]:
    sim = [_TAccl, "simulate", "-s", "1GB", "--json"]
    ring1 = xml.with_name("ring1.xml")
    write = [_TAccl, "baseline", "-t", str(topo), "-c", "allgather", "-s", "1GB", "-a", "ring", "--json"]
    return {
        "simulate ring (NCCL channels)": [*sim, "-t", str(topo), "-c", "allgather", "--algorithm", "ring"],
        "simulate ring (NCCL channels, rail)": [*sim, "-t", str(rail), "-c", "allgather", "--algorithm", "ring"],
        "simulate ring (1 channel)": [*sim, "-t", str(ring), "-c", "allgather", "--algorithm", "ring",
                                      "--channels", "1"],
        "simulate tree AR": [*sim, "-t", str(topo), "-c", "allreduce", "--algorithm", "tree"],
        "simulate direct AG": [*sim, "-t", str(topo), "-c", "allgather", "--algorithm", "direct"],
        "simulate direct A2A": [*sim, "-t", str(topo), "-c", "alltoall", "--algorithm", "direct"],
        "simulate direct A2A (one switch)": [*sim, "-t", str(single), "-c", "alltoall", "--algorithm", "direct"],
        "synthesize AG": [_TAccl, "synthesize", "-t", str(topo), "-c", "allgather", "-s", "1GB", "-o", str(xml)],
        "synthesize AR": [_TAccl, "synthesize", "-t", str(topo), "-c", "allreduce", "-s", "1GB", "-o",
                          str(xml.with_name("ar.xml"))],
        "verify AG XML": [_TAccl, "verify", str(xml)],
        "write ring AG XML": [*write, "-o", str(xml.with_name("ring.xml"))],
        "write ring AG XML (1 channel)": [*write, "--channels", "1", "-o", str(ring1)],
        "verify ring AG XML (1 channel)": [_TAccl, "verify", str(ring1), "--json"],
        "simulate ring AG XML (1 channel)": [*sim, "-t", str(topo), "-a", str(ring1)],
    }[stage]


def measure(sizes: list[int], stages: tuple[str, ...], timeout_s: float) -> list[dict[str, Any]]:
    """One row per (stage, GPU count); after a stage fails or times out, larger counts are marked not run."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="taccl-scaling-") as tmp:
        workdir = Path(tmp)
        stopped: dict[str, str] = {}
        for gpus in sizes:
            topo, rail = _topology(gpus, workdir, "leaf-spine"), _topology(gpus, workdir, "rail")
            single = _topology(gpus, workdir, "single")
            ring = _topology(gpus, workdir, "ring")
            xml = workdir / f"ag{gpus}.xml"
            for old in workdir.glob("ring*.xml"):  # each GPU count's XML stages read the file written at it
                old.unlink()
            for stage in stages:
                if stage in stopped and gpus == _RESUMES_AT.get(stage):
                    del stopped[stage]
                if stage in stopped:
                    rows.append({"stage": stage, "gpus": gpus, "exit": "not run", "why": stopped[stage]})
                    continue
                needs = _NEEDS.get(stage)
                wanted = xml if needs and needs[0] == "ag" else xml.with_name(f"{needs[0]}.xml") if needs else None
                if needs and wanted is not None and not wanted.exists():
                    rows.append({"stage": stage, "gpus": gpus, "exit": "not run", "why": f"no XML from {needs[1]}"})
                    continue
                command = _command(stage, topo, rail, ring, xml, single)
                row = {"stage": stage, "gpus": gpus, **_measure(command, timeout_s)}
                rows.append(row)
                if row["exit"] != 0:
                    stopped[stage] = f"{row['exit']} at {gpus} GPUs"
    return rows


def fitted_growth(rows: list[dict[str, Any]], stage: str, last: int = 4) -> float | None:
    """Least-squares k of wall ~ N^k over the stage's ``last`` largest completed GPU counts (None with fewer than 2).

    The largest counts only: at a few GPUs the wall time is the command's start-up (imports, about a second).
    """
    done = sorted((r for r in rows if r["stage"] == stage and r["exit"] == 0), key=lambda r: r["gpus"])[-last:]
    points = [(math.log(r["gpus"]), math.log(r["wall_s"])) for r in done]
    if len(points) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else None


def run(quick: bool) -> dict[str, Any]:
    """Quick: 8 and 32 GPUs (below the compiled paths' thresholds), 30 s per stage; full: 8..4096, 600 s
    (``TACCL_SCALING_TIMEOUT`` overrides the budget). ``TACCL_SCALING_STAGES="a;b"`` and
    ``TACCL_SCALING_GPUS=256,512`` re-measure only those cells of the stored full table; the others are kept,
    each with the date it was measured."""
    sizes = [8, 32] if quick else [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    timeout_s = float(os.environ.get("TACCL_SCALING_TIMEOUT", 30.0 if quick else 600.0))
    stages = [s for s in os.environ.get("TACCL_SCALING_STAGES", "").split(";") if s]
    gpus = [int(n) for n in os.environ.get("TACCL_SCALING_GPUS", "").split(",") if n]
    if not (stages or gpus):
        return {"sizes": sizes, "timeout_s": timeout_s, "rows": measure(sizes, STAGES, timeout_s)}
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise SystemExit(f"TACCL_SCALING_STAGES: unknown stage(s) {unknown}; known: {list(STAGES)}")
    return remeasure(stages or list(STAGES), gpus or sizes, timeout_s)


def remeasure(stages: list[str], gpus: list[int], timeout_s: float) -> dict[str, Any]:
    """The stored table with the cells (stage, GPU count) of ``stages`` x ``gpus`` measured again (a stage that
    reads a file, such as verify, needs the stage that writes it in ``stages`` too)."""
    from harness import load_envelope

    envelope = load_envelope(NAME)
    if envelope is None:
        raise SystemExit("no stored scaling results to update: run the whole benchmark first")
    old = envelope["data"]
    order = tuple(s for s in STAGES if s in stages)
    when = time.strftime("%Y-%m-%d %H:%M")
    fresh = [dict(r, measured=when) for r in measure(sorted(gpus), order, timeout_s)]
    done = {(r["stage"], r["gpus"]) for r in fresh}
    # a re-measured stage's "not run" cells said why in the old run (a timeout below): that no longer holds
    kept = [{**r, "measured": r.get("measured", envelope["date"])} for r in old["rows"]
            if (r["stage"], r["gpus"]) not in done and not (r["stage"] in order and r["exit"] == "not run")]
    rows = sorted(kept + fresh, key=lambda r: (STAGES.index(r["stage"]), r["gpus"]))
    update = {"when": when, "stages": list(order), "gpus": sorted(gpus), "timeout_s": timeout_s,
              "load_average": os.getloadavg()[0]}
    covered = {(s, n) for s in order for n in gpus}  # earlier updates whose cells were all measured again go
    earlier = [u for u in old.get("updates", []) if not {(s, n) for s in u["stages"] for n in u["gpus"]} <= covered]
    return {**old, "rows": rows, "updates": [*earlier, update],
            "full_run": old.get("full_run", envelope["date"])}


def run_tiny() -> dict[str, Any]:
    """Seconds-long: 8 and 16 GPUs, the simulate stages (the test suite runs it so the module never rots)."""
    return {"sizes": [8, 16], "timeout_s": 120.0, "rows": measure([8, 16], STAGES[:3], 120.0)}


def render(data: dict[str, Any], figures: Path) -> str:
    lines = [f"Budget {data['timeout_s']:.0f} s per stage; DGX A100 machines on the default leaf-spine fabric "
             "(`taccl topo generate dgx-a100 -k N/8`; one machine at 8), the rail row on rail switches "
             "(`--fabric rail`), the one-switch row on one InfiniBand switch (`--fabric single`), 1 GB buffers; the one-channel ring rows run on `taccl topo generate ring -n N`. "
             "Wall s / peak RSS MiB per stage, the whole command in a fresh process; `-` not run. Growth: time ~ n^k "
             "fitted over the four largest GPU counts that completed. The simulate rows on DGX A100 machines run under "
             "their calibrated runtime model (`dgx-a100`, the default of `taccl simulate`: each protocol NCCL may "
             "choose, a ring of 100,000 transfers or more, and from the re-measure of 2026-11-28 02:52 on any "
             "algorithm on 64 GPUs or more, skipping those whose floor (the protocol's, then its prepared run's "
             "load floor) is above the best time found; "
             "NCCL's ring in its chunk loops); the one-channel ring rows (no runtime model in the file) on the "
             "raw-link model. Rail and one-channel ring rows from 256 GPUs on use the representative simulation "
             "(the rail rows under the runtime model; from the re-measure of 2026-11-28 12:50 on, NCCL's Alltoall "
             "on one InfiniBand switch (`--fabric single`) too, whose transfers wait for the proxies' posts: "
             "docs/runtime.md, \"The proxy's posts across machines\"); every other simulate row "
             "runs every transfer, in the compiled simulator from 100,000 transfers (from 1,000 where transfers wait "
             "for proxy posts: the direct Allgather and Alltoall), and a ring that cannot fit in the memory available is refused before it is built "
             "(docs/simulator.md); the protocols the compiled simulator runs go side by side on the 2 CPUs "
             "(docs/simulator.md, \"Protocols side by side\", from the re-measure of 2026-11-28 00:56 on), and "
             "`synthesize` starts the reference ring and the protocol choice ahead on the rail-stream path "
             "(docs/synthesis.md); synthesize and verify run as they are. A failed stage's error line is listed "
             "below the table. The ring XML rows: "
             "`taccl baseline -a ring -o` writes the ring Allgather (with NCCL's channels, or as many as the runtime's "
             "limits allow, halving from there; and with `--channels 1`), then `taccl verify` and `taccl simulate -a` "
             "(calibrated runtime model, the file's `proto`) read the one-channel file; from 50,000 steps (files from "
             "4 MiB) the checks, the timing and the writer run compiled (docs/msccl.md, \"Performance\").", "",
             "| stage | " + " | ".join(str(n) for n in data["sizes"]) + " | growth |",
             "|---|" + "---|" * (len(data["sizes"]) + 1)]
    stages = [s for s in STAGES if any(r["stage"] == s for r in data["rows"])]
    for stage in stages:
        k = fitted_growth(data["rows"], stage)
        cells = []
        for n in data["sizes"]:
            row = next((r for r in data["rows"] if r["stage"] == stage and r["gpus"] == n), None)
            if row is None or row["exit"] == "not run":
                cells.append("-")
            elif row["exit"] != 0:
                cells.append(f"{row['exit']} ({row['wall_s']:.0f} s)")
            else:
                cells.append(f"{row['wall_s']:.1f} s / {row['peak_rss_mib']:.0f}")
        lines.append(f"| {stage} | " + " | ".join(cells) + f" | {'-' if k is None else f'n^{k:.2f}'} |")
    for u in data.get("updates", []):
        lines += ["", f"Re-measured {u['when']} (budget {u['timeout_s']:.0f} s, load average "
                      f"{u['load_average']:.2f} when it ended): {', '.join(u['stages'])} at "
                      f"{', '.join(str(n) for n in u['gpus'])} GPUs, with `TACCL_SCALING_TIMEOUT={u['timeout_s']:g} "
                      f"TACCL_SCALING_STAGES=\"{';'.join(u['stages'])}\" "
                      f"TACCL_SCALING_GPUS={','.join(str(n) for n in u['gpus'])} .venv/bin/python benchmarks/run.py "
                      f"--full --only scaling`; the other cells are from the full run of {data.get('full_run', 'before')}."]
    stopped = sorted({f"{r['stage']}: {r['why']}" for r in data["rows"] if r["exit"] == "not run"})
    if stopped:
        lines += ["", "Not run: " + "; ".join(stopped) + "."]
    failed = [f"{r['stage']} at {r['gpus']} GPUs (exit {r['exit']}): `{r['error']}`" for r in data["rows"]
              if r.get("error")]
    if failed:
        lines += ["", "Failed: " + "; ".join(failed) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    data = run_tiny() if "--tiny" in sys.argv else run("--full" not in sys.argv)
    print(render(data, Path(".")))
