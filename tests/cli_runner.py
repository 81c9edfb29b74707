"""Running ``taccl`` in-process from tests (imported by the CLI test modules)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from taccl_py.cli.main import main


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``taccl ARGS`` in-process: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as done:
        main(args)
    out, err = capsys.readouterr()
    code = done.value.code
    return (code if isinstance(code, int) else 0), out, err


def only_json(out: str) -> dict[str, Any]:
    """stdout holds exactly one JSON object."""
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    data = json.loads(lines[0])
    assert isinstance(data, dict)
    return data
