"""Every input format reads its file through the one helper in ``taccl_py/inputs.py``: same failures, same lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from taccl_py.chakra.trace import decode_trace
from taccl_py.errors import (
    InputError,
    ProfileInputError,
    ScheduleError,
    SketchError,
    TopologyError,
    XmlLoadError,
)
from taccl_py.library import resolve_topology
from taccl_py.library.astra import load_astra_yaml
from taccl_py.msccl import load_program
from taccl_py.profiler.measurements import read_measurements_csv
from taccl_py.schedule import load_schedule
from taccl_py.sketch import load_sketch
from taccl_py.taccl_profile import load_taccl_profile
from taccl_py.topology_io import load_topology

READERS: list[tuple[str, Callable[[Path], Any], type[InputError]]] = [
    ("topology", load_topology, TopologyError),
    ("astra", load_astra_yaml, TopologyError),
    ("csv", read_measurements_csv, ProfileInputError),
    ("sketch", load_sketch, SketchError),
    ("schedule", lambda p: load_schedule(p, resolve_topology("ring8")), ScheduleError),
    ("taccl-profile", load_taccl_profile, SketchError),
    ("msccl-xml", load_program, XmlLoadError),
    ("chakra", decode_trace, InputError),
]


@pytest.mark.parametrize(("name", "read", "error"), READERS, ids=[r[0] for r in READERS])
def test_missing_files_and_directories_are_one_line_naming_the_file(name: str, read: Callable[[Path], Any],
                                                                   error: type[InputError], tmp_path: Path) -> None:
    missing = tmp_path / "absent.input"
    with pytest.raises(error) as info:
        read(missing)
    assert str(info.value) == f"{missing}: no such file"
    with pytest.raises(error) as info:
        read(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{tmp_path}: is a directory, not a ") and "\n" not in message
