"""Terminal output a person can read: tables never cut a number at 80 columns, one number style per column,
singular nouns, and a progress line only when someone watches a long run."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console, Group
from rich.text import Text

from taccl_py.cli import common
from taccl_py.cli.common import (
    FittedTable,
    column_decimals,
    make_table,
    plural,
    progress_enabled,
    progress_line,
)

TACCL = str(Path(sys.executable).parent / "taccl")
TOKEN = re.compile(r"[^\s│┃┏┓┗┛┡┩┠┨━─┳┻╇╈┼┬┴╋└┘┌┐]+")


def render(renderable: object, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), highlight=False, soft_wrap=True, color_system=None)
    console.print(renderable)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def tokens(text: str) -> set[str]:
    return set(TOKEN.findall(text))


def table_lines(text: str) -> list[str]:
    """The lines drawn by tables (borders, headers, rows); titles and notes are prose the terminal wraps."""
    return [line for line in text.splitlines() if line[:1] in set("┏┃┡│└")]


def command_output(*args: str, columns: int = 80) -> str:
    done = subprocess.run([TACCL, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr
    return done.stdout


# ------------------------------------------------------------------ the real sweep tables at 80 columns
@pytest.mark.slow
@pytest.mark.parametrize("command", [
    ["baseline", "-t", "ring8", "-c", "allreduce", "-s", "1KB:4GB"],
    ["baseline", "-t", "ndv2", "-c", "allgather", "-s", "1KB:1GB"],
    ["simulate", "-t", "ring8", "-c", "allgather", "-s", "1KB:4GB", "-a", "ring"],
    ["bound", "-t", "dgx-a100x2", "-c", "allreduce", "-s", "1KB:4GB"],
])
def test_sweep_tables_keep_every_number_whole_at_80_columns(command: list[str]) -> None:
    text = command_output(*command)
    data = json.loads(command_output(*command, "--json"))
    assert "…" not in text
    assert all(len(line) <= 80 for line in table_lines(text)), max(table_lines(text), key=len)
    seen = tokens(text)
    for row in data["rows"]:
        assert str(row["size_bytes"]) in seen, row["size_bytes"]
        entries = row.get("baselines", [row])
        for entry in entries:
            for key in ("time_us", "algbw_GBps", "busbw_GBps"):
                if entry.get(key) is not None:
                    assert f"{entry[key]:.2f}" in seen, (key, entry[key])
        assert f"{row['bound_us']:.2f}" in seen


def test_a_table_that_fits_is_one_table_and_one_that_does_not_is_split_with_a_note() -> None:
    rows = [[2**k, 1.5 * 10 ** (k % 7), 0.001 * k, 12345678.9] for k in range(10, 33)]
    columns = ["size (B)", "time (us)", "algbw (GB/s)", "bound (us)"]
    wide = render(make_table("t", columns, rows), 160)
    assert wide.count("┏") == 1 and "split" not in wide
    narrow = render(make_table("t", columns * 3, [r * 3 for r in rows]), 80)
    assert narrow.count("┏") >= 2 and "(split into" in narrow and "(continued, 2/" in narrow
    assert all(len(line) <= 80 for line in table_lines(narrow))


@pytest.mark.slow
@settings(max_examples=60)
@given(rows=st.integers(1, 12).flatmap(lambda width: st.lists(
    st.lists(st.one_of(st.floats(1e-4, 1e12), st.integers(0, 2**42), st.none()), min_size=width, max_size=width),
    min_size=1, max_size=12)), width=st.integers(60, 120))
def test_random_tables_never_cut_a_number(rows: list[list[float | int | None]], width: int) -> None:
    columns = [f"column {k} (us)" for k in range(len(rows[0]))]
    table = FittedTable("random", columns, rows)
    text = render(table, width)
    seen = tokens(text)
    assert "…" not in text
    for row in table.rows:
        for cell in row:
            assert cell in seen, (cell, text)
    if max(table.width_of([0, k]) for k in range(len(columns))) <= width:
        assert all(len(line) <= width for line in table_lines(text))


def test_one_number_style_per_column() -> None:
    table = FittedTable("t", ["size", "time us", "eff"], [[1024, 7.0234, 0.285], [1 << 30, 17500.5, 1.0],
                                                          [1 << 31, 123456789.25, 0.05]])
    assert [row[1] for row in table.rows] == ["7.02", "17,500.50", "123,456,789.25"]
    assert [row[2] for row in table.rows] == ["0.285", "1.000", "0.050"]
    assert [row[0] for row in table.rows] == ["1024", "1073741824", "2147483648"]  # sizes stay plain integers
    assert column_decimals([0.0001]) == 3 and column_decimals([250.0, 3.0]) == 2 and column_decimals([]) == 2
    assert column_decimals([250.0, 1e6]) == 1 and column_decimals([43059.0]) == 0


def test_singular_and_plural() -> None:
    assert plural(1, "machine") == "1 machine" and plural(2, "machine") == "2 machines"
    assert plural(1, "switch vertex", "switch vertices") == "1 switch vertex"
    assert plural(0, "GPU") == "0 GPUs"


# ------------------------------------------------------------------ progress
def test_progress_line_is_silent_for_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not progress_enabled(as_json=True)
    monkeypatch.setattr(common, "out_console", Console(file=io.StringIO()))  # stdout redirected to a file
    assert not progress_enabled(as_json=False)
    with progress_line(False) as say:
        say("nothing shows")


def test_progress_line_waits_before_showing(monkeypatch: pytest.MonkeyPatch) -> None:
    line = common._DelayedLine()
    line.update("simulating ring: size 3/12 (4KB)")
    assert isinstance(line.__rich__(), Group)  # nothing during the first seconds
    monkeypatch.setattr(common, "PROGRESS_DELAY_S", 0.0)
    shown = line.__rich__()
    assert isinstance(shown, Text) and shown.plain.startswith("simulating ring: size 3/12 (4KB)")
    assert shown.plain.endswith(" s")


def test_progress_line_runs_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=80)
    monkeypatch.setattr(common, "err_console", console)
    monkeypatch.setattr(common, "PROGRESS_DELAY_S", 0.0)
    with progress_line(True) as say:
        say("simulating tree: size 1/2 (1KB)")
    assert isinstance(console.file, io.StringIO)
    assert "simulating tree: size 1/2 (1KB)" in console.file.getvalue()
