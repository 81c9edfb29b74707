"""Fidelity against published nccl-tests runs (issue 17): predicted busbw versus published busbw at every size.

Each case is a published run under ``tests/data/nccl_tests/`` (sources in its ``manifest.json`` and
README), predicted with the calibrated runtime model its topology carries (``taccl_py/fidelity.py``):
what NCCL runs at that size (the fastest of its algorithms and protocols under the model).
Calibration cases are the rows the runtime figures were fitted on; every other case is held out.
Targets: within 10 % at sizes >= 1 MB, within 25 % below. Simulated figures do not depend on the machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import harness  # same directory

HERE = Path(__file__).parent

NAME, TITLE, ORDER = "fidelity", "Fidelity against published nccl-tests runs", 90
FIGURE = "fidelity-curves.png"
MIN_FIGURE_ROWS = 6
"""Cases with at least this many rows are drawn (a curve, not one or two points)."""

FIXTURES = HERE.parent / "tests" / "data" / "nccl_tests"


def run(quick: bool) -> dict[str, Any]:
    """Every row of every case (quick mode too: the cases are few)."""
    from taccl_py.fidelity import (
        LARGE_TARGET,
        SMALL_TARGET,
        harness_hosts,
        harness_offsets,
        load_cases,
        predict_case,
    )

    cases = []
    for case in load_cases(FIXTURES):
        harness.note(f"fidelity: {case.name}")
        rows = predict_case(case, FIXTURES)
        cases.append({"name": case.name, "url": case.url, "role": case.role, "note": case.note,
                      "hardware": case.hardware, "harness": case.harness, "topology": case.topology,
                      "ranks": case.ranks, "collective": case.collective, "rows": [r.as_dict() for r in rows],
                      "algorithms": None if case.algorithms is None else list(case.algorithms),
                      "protocols": None if case.protocols is None else [p.value for p in case.protocols],
                      "run": " ".join([case.source.name, case.collective, *sorted(f"{k}={v}" for k, v in
                                                                                  case.select.items())])})
    return {"cases": cases, "large_target": LARGE_TARGET, "small_target": SMALL_TARGET,
            "harness_offsets": harness_offsets(FIXTURES),
            "harness_hosts": {name: {"host_us": host.host_us, "per_channel_us": host.per_channel_us}
                              for name, host in harness_hosts(FIXTURES).items()}}


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n:,}"


def _allowed(case: dict[str, Any]) -> str:
    """The algorithms and protocols the case is predicted among (what its run allowed, or is taken to have run: the
    note says which); empty for NCCL's own choice among all."""
    named = [f"{what} {', '.join(values)}" for what, values in (("algorithms", case.get("algorithms")),
                                                                ("protocols", case.get("protocols"))) if values]
    return f", predicted among {' and '.join(named)} (see the note)" if named else ""


def _verdict(rows: list[dict[str, Any]]) -> str:
    missed = [r for r in rows if not r["met"]]
    return "met" if rows and not missed else f"not met ({len(missed)} of {len(rows)} rows)"


def render(data: dict[str, Any], figures: Path) -> str:
    offsets = data.get("harness_offsets", {})
    hosts = data.get("harness_hosts", {})
    lines = [
        "Predicted busbw (what NCCL runs under the calibrated runtime model: the fastest of its algorithms "
        "and protocols at that size, `taccl_py/predict.py`, among those a case names: what its run allowed, its "
        "NCCL_ALGO and NCCL_PROTO, or what it is known or taken to have run, as its note says) against the busbw of published nccl-tests runs "
        "(a log's out-of-place time; a table's published figure). Targets: within "
        f"{data['large_target']:.0%} at sizes >= 1 MB, within {data['small_target']:.0%} below. "
        "Calibration rows are what the runtime figures were fitted on (`taccl profile fit --runtime`, "
        "commands in `tests/data/nccl_tests/README.md`); held-out rows were not used by any fit. Runs made "
        "with `all_reduce_perf -g 8` (one process launching every GPU) carry their host's cost, fitted with "
        "one-GPU-per-rank rows, which tell it from NCCL's own: added to the model's launch ("
        + ", ".join(f"{name} {value:.2f} us" for name, value in sorted(offsets.items()) if name != "per-rank")
        + ")" + ("" if not hosts else ", or overlapping the GPUs' work, a row taking the longer of the GPUs' time "
                 "and the host's per collective and per channel NCCL's choice runs on ("
                 + ", ".join(f"{name} {h['host_us']:.2f} us + {h['per_channel_us']:.4f} us per channel"
                             for name, h in sorted(hosts.items())) + ")")
        + " (the case's `harness`; `one-process` is the Azure A100 host's, used for -g 8 runs of hosts "
        "whose own cost is not measured). Bounds and the "
        "published-comparison tables elsewhere stay on the raw-link model (`taccl --ideal`).",
        "",
    ]
    summary = ["| case | hardware | role | rows | met >= 1 MB | met < 1 MB | worst error | target |",
               "|---|---|---|---|---|---|---|---|"]
    body: list[str] = []
    for case in data["cases"]:
        rows = case["rows"]
        large = [r for r in rows if r["size_bytes"] >= 1 << 20]
        small = [r for r in rows if r["size_bytes"] < 1 << 20]
        errors = [abs(r["error"]) for r in rows if r["error"] is not None]
        worst = f"{max(errors):.1%}" if errors else "-"
        summary.append(f"| [{case['name']}]({case['url']}) | {case['hardware']} | {case['role']} | {len(rows)} | "
                       f"{sum(r['met'] for r in large)} of {len(large)} | {sum(r['met'] for r in small)} of "
                       f"{len(small)} | {worst} | {_verdict(rows)} |")
        body += ["", f"### {case['name']}", "",
                 f"{case['ranks']} ranks, {case['collective']}, topology `{case['topology']}`, harness "
                 f"{case['harness']}{_allowed(case)}; source: {case['url']}." + (f" {case['note']}." if case["note"] else ""), "",
                 "| size (B) | published busbw | predicted busbw | algorithm | proto | error | target met | "
                 "in-place busbw |",
                 "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            pred = "-" if r["predicted_busbw_GBps"] is None else f"{r['predicted_busbw_GBps']:.2f}"
            err = "-" if r["error"] is None else f"{r['error']:+.1%}"
            body.append(f"| {_size(r['size_bytes'])} | {r['published_busbw_GBps']:.2f} | {pred} | "
                        f"{r['algorithm'] or '-'} | {r['proto'] or '-'} | {err} | {'yes' if r['met'] else 'no'} | "
                        f"{_in_place(r)} |")
    curves = [c for c in data["cases"] if len(c["rows"]) >= MIN_FIGURE_ROWS]
    if curves:
        _figure(curves, figures / FIGURE)
        lines += [f"![predicted and published busbw per cited run](figures/{FIGURE})", "",
                  "Published busbw (dots) and predicted (line) of every cited run with at least "
                  f"{MIN_FIGURE_ROWS} rows; the shaded band is the target around the published figure "
                  "(10 % from 1 MB, 25 % below); hollow rings: a log's in-place busbw where it lies off that "
                  "band (the run's own spread).", ""]
    totals = [f"{role} rows within target: {met} of {count}"
              for role in ("held-out", "calibration") for met, count in [_within(data, role)]]
    return "\n".join([*lines, "; ".join(totals) + ".", "", _self_check(data), "", *summary, *body])


def _in_place(row: dict[str, Any]) -> str:
    """A row's in-place busbw, and how far it is from the out-of-place one when no prediction can be within the
    row's target of both."""
    if row.get("in_place_busbw_GBps") is None:
        return "-"
    text = f"{row['in_place_busbw_GBps']:.2f}"
    return text + (f" ({row['run_spread']:+.1%}: the run disagrees with itself)" if row["run_disagrees"] else "")


def _self_check(data: dict[str, Any]) -> str:
    """How many missed rows the run measured twice (a log's out-of-place and in-place times), and what the in-place
    time says of them: too far apart from the out-of-place one for any prediction to be within the target of both;
    within target of the prediction and off the out-of-place one's band (the run's spread is part of the miss);
    missed against both; or within target of it with the two times within each other's band (borderline)."""
    twice = [(case["name"], r) for case in data["cases"] for r in case["rows"]
             if not r["met"] and r.get("in_place_busbw_GBps") is not None]
    apart = [(name, r) for name, r in twice if r["run_disagrees"]]
    near = [r for _, r in twice if r["met_in_place_only"]]
    rest = [r for _, r in twice if not r["run_disagrees"] and not r["met_in_place_only"]]
    both = [r for r in rest if r["in_place_error"] is None or abs(r["in_place_error"]) > r["target"]]
    listed = "; ".join(f"{name} at {_size(r['size_bytes'])} ({r['run_spread']:+.1%})" for name, r in apart)
    return (f"Missed rows a log measured twice (out-of-place, as judged, and in place): {len(twice)}. In "
            f"{len(apart)} of them the run's own two times are too far apart for any prediction to be within the "
            "row's target of both (a warm-up or a disturbed iteration; the in-place busbw is in each case's "
            "table)" + (f": {listed}" if apart else "") + f". {len(near)} others are within the target of the "
            "in-place time, which lies off the out-of-place one's band (the run's spread is part of the miss). Of the "
            f"other {len(rest)}, {len(both)} miss against both of the run's times and {len(rest) - len(both)} are "
            "borderline (within target of the in-place time, the two times within each other's band).")


def _figure(cases: list[dict[str, Any]], path: Path) -> None:
    """Small multiples: per case, published busbw against size (dots), the prediction (line), the target band."""
    from taccl_py.fidelity import FidelityRow
    from taccl_py.plots import save_figure
    from taccl_py.plots.fidelity import fidelity_figure

    panels = [(case["name"] if case["role"] in case["name"] else f"{case['name']} ({case['role']})",
               [FidelityRow(r["size_bytes"], r["published_busbw_GBps"], r["predicted_busbw_GBps"], r["algorithm"],
                            r["proto"], in_place_busbw=r.get("in_place_busbw_GBps")) for r in case["rows"]])
              for case in cases]
    save_figure(fidelity_figure(panels), path)


def _within(data: dict[str, Any], role: str) -> tuple[int, int]:
    """Rows of the cases of ``role`` within their target, and all rows of them."""
    rows = [r for case in data["cases"] if case["role"] == role for r in case["rows"]]
    return sum(r["met"] for r in rows), len(rows)


def headline(data: dict[str, Any]) -> list[list[str]]:
    """README row: held-out rows within target, and cases met in full (a run split by rows or sizes is several
    cases: its calibration and held-out parts)."""
    cases = data["cases"]
    met, count = _within(data, "held-out")
    whole = sum(1 for c in cases if c["rows"] and all(r["met"] for r in c["rows"]))
    runs = len({c.get("run", c["name"]) for c in cases})
    return [[f"Calibrated predictions against {len(cases)} cases of {runs} cited nccl-tests runs",
             f"{met} of {count} held-out rows within target ({data['large_target']:.0%} "
             f"from 1 MB, {data['small_target']:.0%} below); {whole} of {len(cases)} cases within it at every size",
             ""]]
