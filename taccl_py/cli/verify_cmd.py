"""``taccl verify FILE.xml``: does an MSCCL XML file load in the runtime, run without hanging, compute the right thing.

Exit status: 0 when the file is valid and correct, 1 when it is not, 2 when it
cannot be read at all (the JSON then still reports it, as one error), 3 when it
is valid and nothing wrong was found but a check could not run (correctness
unknown: ``"verdict": "unknown"`` in the JSON).
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from taccl_py.cli.common import emit_json, err_console, json_option, out_console, sizes_from

__all__ = ["verify"]


@click.command("verify")
@click.argument("xml_file", metavar="FILE.xml", type=click.Path(dir_okay=False))
@click.option("--dialect", type=click.Choice(["v1", "v2"]), default=None,
              help="Check against the v1 (MSCCL fork) or v2 (msccl-executor, RCCL) parser; detected when omitted "
                   "(v2 needs outofplace, minBytes and maxBytes).")
@click.option("--size", "-s", "size_spec", default=None, metavar="SIZE|LO:HI",
              help="Also say whether the runtime would pick the file for a call of this nccl-tests size (4096, "
                   "1MB; LO:HI sweeps powers of two), and with which element count.")
@click.option("--type-size", type=click.IntRange(1, 16), default=4, show_default=True, metavar="BYTES",
              help="Bytes per element of the call, for --size (4: float, 2: half/bfloat16).")
@json_option
def verify(xml_file: str, dialect: str | None, size_spec: str | None, type_size: int, as_json: bool) -> None:
    """Check an MSCCL XML algorithm: parser rules, deadlocks, data races and the result on every rank."""
    from taccl_py.msccl.arrays import ProgramArrays
    from taccl_py.msccl.ir import Program
    from taccl_py.msccl.loader import XmlLoadError
    from taccl_py.msccl.verify import verify_program
    from taccl_py.msccl.xml_scan import read_program

    ctx = click.get_current_context()
    sizes = sizes_from(size_spec) if size_spec is not None else []
    try:
        program = read_program(xml_file)  # a large file as arrays, for the compiled checks
    except XmlLoadError as exc:
        if not as_json:
            raise
        emit_json({"valid": False, "correct": False, "file": xml_file, "dialect": dialect,
                   "errors": [{"rank": None, "tb": None, "step": None, "rule": exc.rule, "message": str(exc)}]})
        click.echo(f"taccl: error: {exc}", err=True)
        ctx.exit(2)
        return
    if isinstance(program, Program):
        report = verify_program(program, dialect)
    else:
        from taccl_py.msccl.fast_verify import verify_arrays

        report = verify_arrays(program, dialect)
    picks = [_selection(program.header if isinstance(program, ProgramArrays) else program, size, type_size,
                        report.dialect) for size in sizes]
    if as_json:
        extra: dict[str, Any] = {}
        if picks:
            rows = [{k: v for k, v in pick.items() if k != "text"} for pick in picks]
            extra = {"selection": rows[0]} if len(rows) == 1 else {"selections": rows}
        emit_json({"valid": report.valid, "correct": report.correct, "verdict": report.verdict, "file": xml_file,
                   "dialect": report.dialect,
                   "coll": program.coll, "ngpus": program.ngpus, "modes_checked": list(report.modes),
                   "errors": [e.to_dict() for e in report.errors], "notes": list(report.notes), **extra})
    else:
        _print_report(xml_file, program, report)
        for pick in picks:
            out_console.print(pick["text"], markup=False)
    ctx.exit(0 if report.valid and report.correct else 3 if report.verdict == "unknown" else 1)


def _selection(program: object, size: int, type_size: int, dialect: str) -> dict[str, Any]:
    """Would the runtime pick ``program`` for a call of ``size`` bytes of ``type_size``-byte elements?"""
    from taccl_py.msccl.ir import Program
    from taccl_py.msccl.selection import runtime_selection

    assert isinstance(program, Program)
    decision = runtime_selection(program, size, type_size, dialect)
    return {"size_bytes": size, "type_size": type_size, "selected": decision.selected, "count": decision.count,
            "reason": decision.reason or None, "text": f"runtime: {decision.describe()}"}


def _print_report(path: str, program: object, report: object) -> None:
    from taccl_py.msccl.arrays import ProgramArrays
    from taccl_py.msccl.ir import Program
    from taccl_py.msccl.report import VerifyReport

    assert isinstance(program, Program | ProgramArrays) and isinstance(report, VerifyReport)
    channels = f"{program.nchannels} channel{'s' if program.nchannels != 1 else ''}"
    out_console.print(f"[bold]{path}[/]: MSCCL {report.dialect} {program.coll}, {program.ngpus} GPUs, "
                      f"{program.nchunksperloop} chunks per loop, {channels}, {program.proto}, "
                      f"{program.num_threadblocks} threadblocks, {program.num_steps} steps")
    yes_no = {True: "[green]yes[/]", False: "[red]no[/]"}
    modes = f" ({', '.join(report.modes)})" if report.modes else ""
    correct = "[yellow]unknown[/]" if report.verdict == "unknown" else yes_no[report.correct]
    out_console.print(f"valid: {yes_no[report.valid]}   correct: {correct}{modes}")
    if report.errors:
        table = Table(header_style="bold")
        table.add_column("rule")
        for column in ("rank", "tb", "step"):
            table.add_column(column, justify="right")
        table.add_column("message")
        for e in report.errors:
            table.add_row(e.rule, *("-" if v is None else str(v) for v in (e.rank, e.tb, e.step)), e.message)
        out_console.print(table)
    for note in report.notes:
        err_console.print(f"note: {note}", markup=False)
