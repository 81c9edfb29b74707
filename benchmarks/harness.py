"""The benchmark harness: run benchmark modules, keep their raw JSON, render RESULTS.md and the README block.

A benchmark module (``benchmarks/bench_<name>.py``) defines ``NAME``, ``TITLE``, ``ORDER``,
``run(quick: bool) -> dict`` (the raw, JSON-serializable measurements) and
``render(data: dict, figures: Path) -> str`` (the markdown body of its section; it may write pictures into
``figures`` and link them as ``figures/<file>``), and optionally ``headline(data) -> list[list[str]]`` (rows
of the README's headline table: instance, result, synthesis). The harness stores ``results/<NAME>.json``
(the data in an envelope: mode, command, date, machine, packages, wall time) and ``results/<NAME>.md``
(the rendered section); RESULTS.md is every ``results/*.md`` section, ordered by ``ORDER``, under a header
naming the machine and the packages. A section written by other means (a script that writes its own
``results/<name>.md``) is included as it is. See benchmarks/README.md.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
FIGURES_DIR = HERE / "figures"
RESULTS_MD = HERE / "RESULTS.md"
README = HERE.parent / "README.md"
README_START, README_END = "<!-- bench:headline:start -->", "<!-- bench:headline:end -->"
PACKAGES = ("taccl_py", "ortools", "pulp", "numpy", "networkx", "matplotlib", "ray")
_FOREIGN_ORDER = 100
_CONSOLE = Console(stderr=True, highlight=False)


def note(text: str) -> None:
    """A progress line (one finished case) on a terminal; nothing when stderr is a pipe or a file."""
    if _CONSOLE.is_terminal:
        _CONSOLE.print(text, markup=False, soft_wrap=True)


@dataclass(frozen=True)
class Benchmark:
    """A benchmark module seen through the protocol."""

    name: str
    title: str
    order: int
    module: ModuleType

    @property
    def run(self) -> Callable[[bool], dict[str, Any]]:
        return self.module.run  # type: ignore[no-any-return]

    @property
    def render(self) -> Callable[[dict[str, Any], Path], str]:
        return self.module.render  # type: ignore[no-any-return]

    @property
    def headline(self) -> Callable[[dict[str, Any]], list[list[str]]] | None:
        return getattr(self.module, "headline", None)


_PROTOCOL = re.compile(r"^def run\(.*^def render\(|^def render\(.*^def run\(", re.S | re.M)


def discover() -> list[Benchmark]:
    """Every ``bench_*.py`` that follows the protocol, in ``ORDER``. A script that does not define ``run`` and
    ``render`` at top level is not imported at all (it may write its own ``results/NAME.md``)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    found = []
    for path in sorted(HERE.glob("bench_*.py")):
        if not _PROTOCOL.search(path.read_text(encoding="utf-8")):
            continue
        module = importlib.import_module(path.stem)
        if all(hasattr(module, attr) for attr in ("NAME", "TITLE", "run", "render")):
            found.append(Benchmark(module.NAME, module.TITLE, int(getattr(module, "ORDER", _FOREIGN_ORDER)), module))
    return sorted(found, key=lambda b: (b.order, b.name))


# ------------------------------------------------------------------ provenance
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def packages() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def machine() -> dict[str, Any]:
    return {"cpu_model": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(terse=True), "packages": packages(), "load_average": os.getloadavg()[0]}


# ------------------------------------------------------------------ run and store
def run_benchmark(bench: Benchmark, quick: bool, command: str) -> dict[str, Any]:
    """Run one benchmark and store its envelope in results/<name>.json."""
    started_at = time.strftime("%Y-%m-%d %H:%M")
    before = machine()
    started = time.perf_counter()
    data = bench.run(quick)
    envelope = {"benchmark": bench.name, "title": bench.title, "mode": "quick" if quick else "full",
                "command": command, "date": started_at, "machine": before,
                "load_average_after": os.getloadavg()[0], "wall_s": round(time.perf_counter() - started, 1),
                "data": data}
    RESULTS_DIR.mkdir(exist_ok=True)
    _write(RESULTS_DIR / f"{bench.name}.json", json.dumps(envelope, indent=1, sort_keys=True) + "\n")
    return envelope


def load_envelope(name: str) -> dict[str, Any] | None:
    path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        return None
    envelope: dict[str, Any] = json.loads(path.read_text())
    return envelope if "data" in envelope else None


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ------------------------------------------------------------------ render
def render_section(bench: Benchmark, envelope: dict[str, Any]) -> str:
    """results/<name>.md: the heading, where and how it was measured, the module's body."""
    FIGURES_DIR.mkdir(exist_ok=True)
    body = bench.render(envelope["data"], FIGURES_DIR).strip("\n")
    m = envelope["machine"]
    provenance = (f"Measured {envelope['date']} ({envelope['mode']} mode, {envelope['wall_s']:.0f} s) on "
                  f"{m['cpu_model']} ({m['cpus']} CPUs), load average {m['load_average']:.2f} before and "
                  f"{envelope['load_average_after']:.2f} after, with `{envelope['command']}`.")
    return f"## {bench.title}\n\n{provenance}\n\n{body}\n"


def _section_order(path: Path, known: dict[str, int]) -> tuple[int, str]:
    return known.get(path.stem, _FOREIGN_ORDER), path.stem


def render_results(benchmarks: list[Benchmark]) -> str:
    """RESULTS.md from results/*.md (rendering those of protocol modules again from their JSON first)."""
    for bench in benchmarks:
        envelope = load_envelope(bench.name)
        if envelope is not None:
            _write(RESULTS_DIR / f"{bench.name}.md", render_section(bench, envelope))
    known = {b.name: b.order for b in benchmarks}
    sections = sorted(RESULTS_DIR.glob("*.md"), key=lambda p: _section_order(p, known))
    latest = max((e for e in (load_envelope(b.name) for b in benchmarks) if e), key=lambda e: e["date"],
                 default=None)
    header = ["# Benchmark results", "",
              "Generated by `make bench` (quick mode: `.venv/bin/python benchmarks/run.py`) or `make bench-full` "
              "(`benchmarks/run.py --full`) from the raw measurements in `benchmarks/results/*.json`; do not edit "
              "by hand (`benchmarks/run.py --render` rewrites it). How to add a section: benchmarks/README.md.",
              ""]
    if latest is not None:
        m = latest["machine"]
        versions = ", ".join(f"{k} {v}" for k, v in sorted(m["packages"].items()))
        header += [f"Latest run: {latest['date']} on {m['cpu_model']} ({m['cpus']} CPUs), {m['platform']}, Python "
                   f"{m['python']}; {versions}. Figures are wall times on a machine that may be shared: see each "
                   "section's load averages.", ""]
    text = "\n".join(header) + "\n" + "\n".join(p.read_text().strip("\n") + "\n" for p in sections)
    _write(RESULTS_MD, text)
    return text


def render_readme(benchmarks: list[Benchmark], figure: str | None) -> None:
    """Rewrite the README's marked headline block: a table from every module's headline(), one picture."""
    rows: list[list[str]] = []
    for bench in benchmarks:
        envelope = load_envelope(bench.name)
        if envelope is not None and bench.headline is not None:
            rows += bench.headline(envelope["data"])
    lines = [README_START, "", "| instance | result | synthesis |", "|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    if figure and (HERE / figure).exists():
        lines += ["", f"![algbw versus size](benchmarks/{figure})"]
    lines += ["", README_END]
    text = README.read_text()
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{README}: the markers {README_START} ... {README_END} are missing")
    _write(README, pattern.sub(lambda _m: "\n".join(lines), text))
