"""The benchmark entry point: ``make bench`` (quick) and ``make bench-full``.

Run: ``.venv/bin/python benchmarks/run.py [--full] [--only NAME ...] [--render]``. Runs every benchmark
module (see benchmarks/README.md), stores raw JSON in benchmarks/results/, then regenerates RESULTS.md,
the pictures in benchmarks/figures/ and the README's headline block. ``--render`` only re-renders from the
stored JSON. Progress goes to stderr (a live line on a terminal).
"""

from __future__ import annotations

import argparse
import sys
import time

from harness import discover, render_readme, render_results, run_benchmark
from rich.console import Console

README_FIGURE = "figures/sweep-dgx-a100x2-allreduce.png"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="every case (the committed RESULTS.md); default quick")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks (others keep their "
                                                                   "stored results)")
    parser.add_argument("--render", action="store_true", help="do not measure: render from results/*.json")
    args = parser.parse_args()
    benchmarks = discover()
    names = {b.name for b in benchmarks}
    unknown = set(args.only or ()) - names
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {sorted(unknown)}; known: {sorted(names)}")
    console = Console(stderr=True, highlight=False)
    started = time.perf_counter()
    if not args.render:
        command = "make bench-full" if args.full else "make bench"
        if args.only:
            command = f".venv/bin/python benchmarks/run.py{' --full' if args.full else ''} --only {' '.join(args.only)}"
        from taccl_py.warmup import compile_kernels

        with console.status("compiling the numba kernels (once after an install)", spinner="dots") \
                if console.is_terminal else _Quiet():
            console.print(f"compiled kernels ready in {compile_kernels():.0f} s (counted in no benchmark)", markup=False)
        for bench in benchmarks:
            if args.only and bench.name not in args.only:
                continue
            with console.status(f"[bold]{bench.title}[/bold] ({'full' if args.full else 'quick'})",
                                spinner="dots") if console.is_terminal else _Quiet():
                envelope = run_benchmark(bench, not args.full, command)
            console.print(f"{bench.title}: {envelope['wall_s']:.0f} s", markup=False)
    render_results(benchmarks)
    render_readme(benchmarks, README_FIGURE)
    console.print(f"wrote benchmarks/RESULTS.md and the README headline in {time.perf_counter() - started:.0f} s",
                  markup=False)


class _Quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    sys.exit(main())
