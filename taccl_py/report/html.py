"""The report as one self-contained HTML page: tables, and pictures inlined as data URIs (no script, no
external file), so it can be mailed or attached as it is."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from taccl_py import __version__
from taccl_py.report.content import CollectiveResult, Picture, Report
from taccl_py.sweep.summary import PointSummary
from taccl_py.tolerances import BETTER_REL
from taccl_py.units import format_bytes

__all__ = ["render_html"]

_CSS = """
body { font-family: -apple-system, "Segoe UI", "DejaVu Sans", Arial, sans-serif; margin: 2em auto;
       max-width: 1180px; padding: 0 1.2em; color: #1d1d28; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.meta { color: #555; font-size: 0.92em; } code { background: #f3f3f7; padding: 0 0.25em; border-radius: 3px; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #d4d4de; padding: 0.28em 0.6em; text-align: right; }
th { background: #eef0f6; } td.l, th.l { text-align: left; }
tr.lost td { background: #fff3f0; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #e4e4ec; }
figcaption { color: #555; font-size: 0.9em; margin-top: 0.3em; }
.fail { color: #a31515; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _picture(picture: Picture) -> str:
    data = base64.b64encode(picture.data).decode("ascii")
    return (f'<figure><img src="data:{picture.mime};base64,{data}" alt="{_e(picture.title)}">'
            f"<figcaption>{_e(picture.caption)}</figcaption></figure>")


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1,
           row_classes: Sequence[str] | None = None) -> str:
    head = "".join(f'<th class="{"l" if k < left else ""}">{_e(c)}</th>' for k, c in enumerate(columns))
    body = []
    for n, row in enumerate(rows):
        cls = f' class="{row_classes[n]}"' if row_classes and row_classes[n] else ""
        cells = "".join(f'<td class="{"l" if k < left else ""}">{_e(v)}</td>' for k, v in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if any(columns) else ""
    return f"<table>{thead}<tbody>{''.join(body)}</tbody></table>"


def _summary(report: Report) -> str:
    rows = []
    for section in report.collectives:
        timed = [p for p in section.points if p.efficiency is not None]
        if not timed:
            rows.append([section.collective, "-", "-", "-", "-", "-"])
            continue
        largest = timed[-1]
        speedups = [p.speedup_vs_best_baseline for p in timed if p.speedup_vs_best_baseline is not None]
        wins = sum(1 for s in speedups if s > 1 + BETTER_REL)
        rows.append([section.collective, f"{_num(largest.algbw(largest.time_us))} GB/s at "
                     f"{format_bytes(largest.size_bytes)}", _pct(largest.efficiency),
                     f"{_pct(min(p.efficiency or 0 for p in timed))} - {_pct(max(p.efficiency or 0 for p in timed))}",
                     f"{wins} of {len(speedups)} sizes", f"{_num(max(speedups), 3)}x" if speedups else "-"])
    return _table(["collective", "taccl algbw, largest size", "efficiency there", "efficiency over the range",
                   "faster than every baseline", "best speedup"], rows)


def _topology(report: Report) -> str:
    d = report.description
    machines = f"{len(d.machines)} x {len(d.machines[0])} GPUs" if d.machines else "none declared"
    rows = [["GPUs", str(d.gpus)], ["machines", machines],
            ["switch vertices", ", ".join(f"{s.count} {s.kind}" for s in d.switches) or "none"],
            ["directed links", str(d.links)]]
    for k in d.link_kinds:
        bandwidth = f"{k.min_bandwidth:g}" if k.min_bandwidth == k.max_bandwidth else \
            f"{k.min_bandwidth:g}-{k.max_bandwidth:g}"
        latency = f"{k.min_latency:g}" if k.min_latency == k.max_latency else f"{k.min_latency:g}-{k.max_latency:g}"
        rows.append([f"{k.kind} links", f"{k.count} x {bandwidth} GB/s, {latency} us"])
    source = f'<p class="meta">Source: {_e(d.source)}</p>' if d.source else ""
    return _table(["", ""], rows) + source + _picture(report.topology_picture)  # a two-column list, no header


def _point_row(p: PointSummary, seconds: float | None, names: Sequence[str]) -> list[str]:
    cells = [format_bytes(p.size_bytes), _num(p.algbw(p.time_us)), p.algorithm or "-",
             _num(p.algbw(p.synthesized_time_us))]
    cells += [_num(p.algbw(p.baselines_us.get(name))) for name in names]
    cells += [_num(p.algbw(p.bound_us)), _pct(p.efficiency),
              "-" if p.speedup_vs_best_baseline is None else f"{p.speedup_vs_best_baseline:.3g}x",
              "-" if seconds is None else f"{seconds:.1f}"]
    return cells


def _collective(report: Report, section: CollectiveResult) -> str:
    names = sorted({name for p in section.points for name in p.baselines_us})
    columns = ["size", "taccl algbw", "algorithm", "synthesized algbw", *[f"{n} algbw" for n in names],
               "bound algbw", "efficiency", "speedup vs best baseline", "synthesis s"]
    rows = [_point_row(p, s, names) for p, s in zip(section.points, section.synthesis_s, strict=True)]
    lost = ["lost" if p.errors else "" for p in section.points]
    request = report.request
    o = request.options
    again = (f"taccl synthesize -t {request.topology} -c {section.collective} -s SIZE --time-limit "
             f"{o.time_limit_s:g} --threads {o.threads} --seed {o.seed}")
    return (f'<h2 id="{_e(section.collective)}">{_e(section.collective)}</h2>' + _picture(section.chart)
            + _table(columns, rows, left=1, row_classes=lost)
            + f'<p class="meta">algbw in GB/s (1e9 bytes per second). "taccl algbw" is what <code>taccl '
              f'synthesize</code> returns (the fastest baseline when it beats the synthesized algorithm, named in '
              f'"algorithm"); "synthesized algbw" is the synthesizer\'s own best. One row again: '
              f"<code>{_e(again)}</code></p>")


def render_html(report: Report) -> str:
    """The page (UTF-8 text); the same report gives the same page."""
    request = report.request
    topology = report.topology
    title = f"taccl_py report: {topology.name}"
    sizes = f"{format_bytes(request.sizes[0])} to {format_bytes(request.sizes[-1])} ({len(request.sizes)} sizes)"
    o = request.options
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{_e(", ".join(request.collectives))} on {_e(topology.name)} ({topology.num_gpus} GPUs), '
        f"{_e(sizes)}; solver budget {o.time_limit_s:g} s per size, {o.threads} thread(s), seed {o.seed}, "
        f"routing solver {_e(o.solver)}. Made by taccl_py {_e(__version__)}"
        + (f" with <code>{_e(request.command)}</code>" if request.command else "") + ".</p>",
        "<h2>Summary</h2>", _summary(report),
        '<p class="meta">Efficiency = lower bound / time (1.0 is optimal); times come from taccl_py\'s fluid '
        "simulator (alpha-beta links, max-min sharing, checked against SimGrid), sizes follow nccl-tests "
        "(K/M/G binary).</p>",
        f"<h2>Topology</h2>{_topology(report)}",
    ]
    parts += [_collective(report, section) for section in report.collectives]
    if report.timeline is not None:
        parts += [f"<h2>Timeline of one algorithm</h2>{_picture(report.timeline)}"]
    elif report.timeline_note:
        parts += [f'<h2>Timeline of one algorithm</h2><p class="meta">No timeline: {_e(report.timeline_note)}</p>']
    if report.failures:
        items = "".join(f"<li>{_e(f)}</li>" for f in report.failures)
        parts += [f'<h2 class="fail">Jobs that failed</h2><ul class="fail">{items}</ul>']
    parts += ["</body></html>"]
    return "\n".join(parts) + "\n"
