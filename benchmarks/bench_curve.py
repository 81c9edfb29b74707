"""The whole curve: every shipped multi-machine topology, AG/RS/AR/A2A, 1 KB to 4 GB in powers of 4.

A benchmark module of benchmarks/harness.py (section "The whole curve"). Each point is the whole
``taccl synthesize -t T -c C -s S -o FILE.xml --threads 1`` command, run in-process through the same
per-size function the CLI runs (``taccl_py.cli.synth_cmd._synthesize_band``: synthesize, compare with
every baseline, lower, verify, write the XML), two points at a time in worker processes through the
sweep job runner (``taccl_py.sweep.run_jobs``, the runner of ``taccl sweep --jobs 2``). Per point it
keeps what the command reports: the time of what it wrote (synthesized, or a baseline when one is
faster), the synthesizer's own best candidate, every baseline's time, the bound, and the command's wall
time (``wall_s``: from the start of the size to its report, Python's start-up not included) with its
stages. The XML files go to a temporary directory and are deleted after each point.

``make bench-full`` runs the full grid (every topology x 4 collectives x 12 sizes, several hours on 2
shared cores); ``make bench`` a quick subset. Set ``TACCL_CURVE_RESUME=FILE.jsonl`` to keep every finished
point in FILE as it finishes and resume an interrupted run from it (delete the file when the code changes).
Set ``TACCL_CURVE_TOPOLOGIES=ndv2x2,dgx-a100x2`` to run the full size range on those topologies only: the
stored rows of the other topologies (``results/curve.json``) are kept, with the date they were measured, and
the section says which topologies were measured when and which shipped ones are not measured yet.
``TACCL_CURVE_JOBS=1`` runs one point at a time.

"Never slower than the best baseline" compares what was written with the fastest baseline whose file the
runtime can load and would select at the size: a baseline the lowering refuses (``hier-lb`` with more splits than
MSCCL has channels or XML nodes) counts with the time of the file ``synthesize -o`` would write for it (the same
baseline with fewer splits, ``xml_fallbacks`` of the JSON), one whose file the runtime would skip at the size
(``baselines_unselected``: its ``nchunksperloop`` does not divide the element count) with the form rebuilt with
counts it selects, if any (``baselines_rebuilt_us``); the section also lists where that differs from the fastest
baseline.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from taccl_py.collectives import CollectiveKind
from taccl_py.units import format_bytes

NAME, TITLE, ORDER = "curve", "The whole curve", 25
KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE, CollectiveKind.ALLTOALL)
FULL_SIZES = tuple(4**k * 1024 for k in range(12))  # 1 KB ... 4 GB
QUICK = (("dgx-a100x2-forestcoll",), (1024, 1 << 20, 1 << 26))
TIME_LIMIT_S = 60.0
JOBS = int(os.environ.get("TACCL_CURVE_JOBS", "2"))
"""Points at a time (worker processes); ``TACCL_CURVE_JOBS=1`` keeps a shared machine to one process."""
FIGURE = "curve-efficiency.png"


def shipped() -> tuple[str, ...]:
    """Every shipped multi-machine topology."""
    from taccl_py.library import list_topologies

    return tuple(t.name for t in list_topologies() if t.machines > 1)


def chosen_topologies(quick: bool) -> tuple[str, ...]:
    """The topologies of this run: ``TACCL_CURVE_TOPOLOGIES`` if set, else the quick pick or every shipped one."""
    named = tuple(n.strip() for n in os.environ.get("TACCL_CURVE_TOPOLOGIES", "").split(",") if n.strip())
    return named or (QUICK[0] if quick else shipped())


def grid(quick: bool) -> list[tuple[str, CollectiveKind, int]]:
    """(topology, collective, size) of every point, in topology, collective, size order."""
    sizes = FULL_SIZES if not quick or os.environ.get("TACCL_CURVE_TOPOLOGIES") else QUICK[1]
    return [(name, kind, size) for name in chosen_topologies(quick) for kind in KINDS for size in sizes]


def curve_point(payload: tuple[str, str, int, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One point: the whole ``synthesize -o`` body; the XML is deleted afterwards (a job function: module level)."""
    from taccl_py.cli.synth_cmd import SOLVE_SHARE, _Band, _synthesize_band
    from taccl_py.library import resolve_topology
    from taccl_py.synthesis import SynthesisOptions, WorkBudget

    name, kind_name, size, directory = payload
    kind = CollectiveKind(kind_name)
    topology = resolve_topology(name)
    options = SynthesisOptions(time_limit_s=TIME_LIMIT_S * SOLVE_SHARE, threads=1, seed=0,
                               budget=WorkBudget.for_time_limit(TIME_LIMIT_S))
    xml = Path(directory) / f"{name}-{kind_name}-{size}.xml"
    band = _Band(topology, kind, size, options, 0, xml, 0, 0, "v2", 1, "Simple", None, TIME_LIMIT_S)
    row, _ = _synthesize_band(band)
    xml.unlink(missing_ok=True)
    synthesized = min((c["time_us"] for c in row["candidates"] if c["time_us"] is not None
                       and not str(c["label"]).startswith("baseline")), default=None)
    result = {"topology": name, "gpus": topology.num_gpus, "collective": kind_name, "size": size,
              "correct": row["correct"], "xml_verified": row.get("xml_verified"), "time_us": row["time_us"],
              "algorithm": row["algorithm"], "chunk_factor": row["chunk_factor"],
              "synthesized_us": synthesized, "baselines_us": row["baselines_us"], "bound_us": row["bound_us"],
              "efficiency": row["efficiency"], "selected_at_size": row["selection"].get("selected_at_size"),
              "time_limit_hit": row["time_limit_hit"],
              "xml_refused": [{"algorithm": r["algorithm"], "time_us": r["time_us"]} for r in row["xml_refused"]],
              "xml_fallbacks": [{"algorithm": f["algorithm"], "time_us": f["time_us"]} for f in row["xml_fallbacks"]],
              "baselines_unselected": row["baselines_unselected"], "baselines_rebuilt_us": row["baselines_rebuilt_us"]}
    measured = {"wall_s": row["wall_s"], "synthesis_s": row["synthesis_s"], "stages_s": row["stages_s"]}
    return result, measured


def run(quick: bool) -> dict[str, Any]:
    from harness import note

    from taccl_py.sweep import Job, make_backend, run_jobs
    from taccl_py.sweep.store import ResultsFile

    points = grid(quick)
    sizes = sorted({size for _, _, size in points})
    resume = os.environ.get("TACCL_CURVE_RESUME")
    resumed = _resumed_points(resume, {f"{name}|{kind.value}|{size}|tl={TIME_LIMIT_S:g}" for name, kind, size in points})
    with tempfile.TemporaryDirectory(prefix="taccl-curve-") as directory:
        jobs = [Job(f"{name}|{kind.value}|{size}|tl={TIME_LIMIT_S:g}", (name, kind.value, size, directory),
                    {"topology": name, "collective": kind.value, "size_bytes": size}) for name, kind, size in points]

        def progress(done: int, total: int, record: Any) -> None:
            if record is not None and record.result is not None:
                note(f"{done}/{total} " + _fmt_row({**record.result, **record.measured}))

        records = run_jobs(curve_point, jobs, make_backend(JOBS, None),
                           sink=ResultsFile(resume) if resume else None, progress=progress)
    rows, failed = [], []
    for record in records:
        if record.result is None:
            failed.append({"key": record.key, "error": record.error})
        else:
            rows.append({**record.result, **record.measured})
    carried = _carried_rows({name for name, _, _ in points}) if os.environ.get("TACCL_CURVE_TOPOLOGIES") else []
    return {"rows": [*rows, *carried], "failed": failed, "time_limit_s": TIME_LIMIT_S, "jobs": JOBS, "sizes": sizes,
            "resumed": resumed,
            "shipped": list(shipped()), "environment": {k: v for k, v in os.environ.items()
                                                       if k in ("TACCL_CURVE_TOPOLOGIES", "TACCL_CURVE_JOBS")}}


def _resumed_points(path: str | None, keys: set[str]) -> int:
    """How many of this run's points the resume file already holds (measured by an earlier run, read back; a
    line cut by an interrupted run is repaired as the runner does)."""
    from taccl_py.sweep.store import ResultsFile

    if not path:
        return 0
    return sum(1 for key, record in ResultsFile(path).load().items() if key in keys and record.result is not None)


def _carried_rows(measured: set[str]) -> list[dict[str, Any]]:
    """The stored rows of the topologies this run does not measure, each with the date it was measured."""
    from harness import load_envelope

    envelope = load_envelope(NAME)
    if envelope is None:
        return []
    return [{**row, "measured": row.get("measured", envelope["date"])} for row in envelope["data"]["rows"]
            if row["topology"] not in measured]


# ------------------------------------------------------------------ rendering
def best_baseline(row: dict[str, Any]) -> tuple[str | None, float | None]:
    """The fastest correct baseline of a point (name, time)."""
    times = {k: v for k, v in row["baselines_us"].items() if v is not None}
    if not times:
        return None, None
    name = min(sorted(times), key=lambda k: times[k])
    return name, times[name]


def best_writable_baseline(row: dict[str, Any]) -> tuple[str | None, float | None]:
    """The fastest baseline whose file the runtime can load and would select at the size (name, time): a baseline
    the lowering refused counts with its fewer-splits file (``xml_fallbacks``), one whose file the runtime would
    skip at the size (``baselines_unselected``) with its rebuilt selectable form if there is one
    (``baselines_rebuilt_us``); rows measured before those were recorded: the fastest one."""
    refused = {r["algorithm"].removeprefix("baseline ") for r in row.get("xml_refused", ())}
    refused |= set(row.get("baselines_unselected", ()))
    times = {k: v for k, v in row["baselines_us"].items() if v is not None and k not in refused}
    times.update(row.get("baselines_rebuilt_us", {}))
    times.update({f["algorithm"].removeprefix("baseline "): f["time_us"] for f in row.get("xml_fallbacks", ())
                  if f["time_us"] is not None})
    if not times:
        return None, None
    name = min(sorted(times), key=lambda k: times[k])
    return name, times[name]


def _fmt_row(r: dict[str, Any]) -> str:
    name, base = best_writable_baseline(r)
    fastest, fastest_us = best_baseline(r)
    vs = f"{base / r['time_us']:.2f}x" if base and r["time_us"] else "-"
    eff = f"{100 * r['efficiency']:.1f}%" if r["efficiency"] else "-"
    unloadable = f" (fastest {fastest} {_us(fastest_us)}: no file)" if fastest_us is not None and base is not None \
        and fastest_us < base else ""
    return (f"| {format_bytes(r['size'])} | {_us(r['time_us'])} | {r['algorithm']} | {_us(r['synthesized_us'])} "
            f"| {name or '-'} {_us(base)}{unloadable} | {_us(r['bound_us'])} | {eff} | {vs} | {r['wall_s']:.1f} |")


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def _slower_than_baseline(r: dict[str, Any], *, writable: bool = True) -> bool:
    """Slower than the fastest baseline the runtime can load (``writable``) or than the fastest one at all."""
    _, base = best_writable_baseline(r) if writable else best_baseline(r)
    return base is not None and r["time_us"] is not None and r["time_us"] > base * (1 + 1e-9)


def _summary(rows: list[dict[str, Any]], failed: list[dict[str, Any]], data: dict[str, Any]) -> list[str]:
    ok = [r for r in rows if r["correct"] and r["time_us"]]
    slower = [r for r in ok if _slower_than_baseline(r)]
    unloadable = [r for r in ok if _slower_than_baseline(r, writable=False) and not _slower_than_baseline(r)]
    carried: dict[str, list[str]] = {}
    for r in rows:
        if "measured" in r:
            carried.setdefault(r["measured"], [])
            if r["topology"] not in carried[r["measured"]]:
                carried[r["measured"]].append(r["topology"])
    synthesized = [r for r in ok if r["algorithm"] == "synthesized"]
    walls = sorted(r["wall_s"] for r in rows)
    effs = sorted(r["efficiency"] for r in ok if r["efficiency"])
    topologies = sorted({r["topology"] for r in rows})
    lines = [f"{len(rows)} points: {len(topologies)} topologies x {len({r['collective'] for r in rows})} "
             f"collectives x {len(data['sizes'])} sizes ({format_bytes(data['sizes'][0])} to "
             f"{format_bytes(data['sizes'][-1])} in powers of 4), each the whole `taccl synthesize -o` command "
             f"(--time-limit {data['time_limit_s']:g}, 1 solver thread, {data['jobs']} "
             f"point{'' if data['jobs'] == 1 else 's'} at a time). "
             f"{len(ok)} correct and written"
             + (f"; the topologies cover {len(topologies)} of the {len(data['shipped'])} shipped multi-machine ones "
                f"(not yet measured: {', '.join(n for n in data['shipped'] if n not in topologies)})"
                if "shipped" in data and len(topologies) < len(data["shipped"]) else "")
             + (f", {len(failed)} failed: " + "; ".join(f"{f['key']}: {f['error']}" for f in failed) if failed
                else "") + ".",
             "",
             *([f"This run measured {', '.join(sorted({r['topology'] for r in rows if 'measured' not in r}))} "
                f"(with {' '.join(f'{k}={v}' for k, v in sorted(data.get('environment', {}).items()))}); rows of "
                + "; ".join(f"{', '.join(names)} are carried over from the run of {date}"
                            for date, names in sorted(carried.items())) + " (not re-measured).", ""]
               if carried else []),
             *([f"{data['resumed']} of this run's points were read back from its resume file (TACCL_CURVE_RESUME): "
                "they were measured by an earlier run, interrupted or partial, and keep its wall times.", ""]
               if data.get("resumed") else []),
             f"* Never slower than the best baseline the runtime can load: {len(ok) - len(slower)} of {len(ok)} points"
             + ("" if not slower else " (slower at " + _points(slower) + ")") + ".",
             f"* Slower than a faster baseline that cannot be written as a loadable MSCCL file the runtime selects "
             f"at the size (hier-lb past the runtime's channel or XML-node limits: its fewer-splits file is the one "
             f"compared; a file whose nchunksperloop does not divide the size: its form rebuilt with selectable "
             f"counts is): {len(unloadable)} points" + (f" ({_points(unloadable)})" if unloadable else "") + ".",
             f"* The synthesized algorithm was written at {len(synthesized)} points; a faster baseline at "
             f"{len(ok) - len(synthesized)}.",
             f"* Efficiency (bound / time): median {100 * _median(effs):.1f}%, lowest {100 * effs[0]:.1f}%."
             if effs else "* Efficiency: no correct point.",
             f"* Whole-command wall time: median {_median(walls):.1f} s, largest {walls[-1]:.1f} s "
             f"(under the load given above)." if walls else "",
             ""]
    return lines


def _points(rows: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['topology']} {r['collective']} {format_bytes(r['size'])}" for r in rows)


def _median(values: Sequence[float]) -> float:
    return values[len(values) // 2] if values else math.nan


def render(data: dict[str, Any], figures: Path) -> str:
    """Summary, the efficiency picture, then per topology a table over collectives and sizes."""
    rows: list[dict[str, Any]] = data["rows"]
    lines = _summary(rows, data["failed"], data)
    if rows:
        _figure(rows, figures / FIGURE)
        lines += [f"![efficiency versus size on every multi-machine topology](figures/{FIGURE})", "",
                  "Efficiency = bound / time of what `synthesize` wrote (solid) and of the best NCCL-style baseline "
                  "the runtime can load (dashed), per topology and collective.", ""]
    lines += ["Per topology: time (us) of what was written and which algorithm; the synthesizer's best candidate; "
              "the fastest baseline the runtime can load (and, where a faster one cannot be written, that one with "
              "\"no file\"); the bound; efficiency = bound / time; speedup over the fastest loadable baseline; the "
              "command's wall time (s). Sizes are binary (1GB = 2^30 bytes), as nccl-tests counts them.", ""]
    for topology in sorted({r["topology"] for r in rows}, key=_topology_order):
        mine = [r for r in rows if r["topology"] == topology]
        lines += [f"<details><summary>{topology} ({mine[0]['gpus']} GPUs)</summary>", ""]
        for kind in KINDS:
            kind_rows = sorted((r for r in mine if r["collective"] == kind.value), key=lambda r: r["size"])
            if not kind_rows:
                continue
            lines += [f"**{kind.value}**", "",
                      "| size | time us | written | synthesized us | best loadable baseline us | bound us "
                      "| efficiency | vs best loadable baseline | wall s |", "|---|---|---|---|---|---|---|---|---|"]
            lines += [_fmt_row(r) for r in kind_rows]
            lines.append("")
        lines += ["</details>", ""]
    return "\n".join(lines)


def _topology_order(name: str) -> tuple[str, int, str]:
    import re

    match = re.match(r"(.*?)x(\d+)(.*)$", name)
    return (match.group(1), int(match.group(2)), match.group(3)) if match else (name, 0, "")


def _figure(rows: list[dict[str, Any]], path: Path) -> None:
    from taccl_py.plots import save_figure
    from taccl_py.plots._files import panel_grid
    from taccl_py.plots.curves import size_axis

    topologies = sorted({r["topology"] for r in rows}, key=_topology_order)
    figure, panels = panel_grid(len(topologies), 3.2, 2.5, sharey=True)
    for ax, topology in zip(panels, topologies, strict=True):
        for colour, kind in enumerate(KINDS):
            series = sorted((r for r in rows if r["topology"] == topology and r["collective"] == kind.value),
                            key=lambda r: r["size"])
            ours = [(r["size"], 100 * r["efficiency"]) for r in series if r["efficiency"]]
            base = [(r["size"], 100 * r["bound_us"] / best_writable_baseline(r)[1]) for r in series
                    if best_writable_baseline(r)[1] and r["bound_us"]]
            if ours:
                ax.plot(*zip(*ours, strict=True), color=f"C{colour}", linewidth=1.8, marker="o", markersize=3,
                        label=kind.value)
            if base:
                ax.plot(*zip(*base, strict=True), color=f"C{colour}", linewidth=1.0, linestyle="--")
        ax.set_title(topology, fontsize=9)
        ax.set_ylim(0, 105)
        ax.grid(True, alpha=0.3)
        size_axis(ax, sorted({r["size"] for r in rows})[::2])
        ax.tick_params(labelsize=7)
    panels[0].set_ylabel("efficiency %")
    panels[0].legend(fontsize=7, loc="lower right")
    save_figure(figure, path)


def headline(data: dict[str, Any]) -> list[list[str]]:
    """README row: how many points, never slower than the best loadable baseline, the median efficiency."""
    ok = [r for r in data["rows"] if r["correct"] and r["time_us"]]
    if not ok:
        return []
    slower = sum(1 for r in ok if _slower_than_baseline(r))
    effs = sorted(r["efficiency"] for r in ok if r["efficiency"])
    sizes = data["sizes"]
    return [[f"The whole curve: {len({r['topology'] for r in ok})} multi-machine topologies x AG/RS/AR/A2A x "
             f"{format_bytes(sizes[0])}-{format_bytes(sizes[-1])}",
             f"never slower than the best loadable baseline in {len(ok) - slower} of {len(ok)} points; median "
             f"efficiency {100 * _median(effs):.1f}%", f"median {_median(sorted(r['wall_s'] for r in data['rows'])):.1f} s"]]
