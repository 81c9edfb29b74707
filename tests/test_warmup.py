"""``taccl_py.warmup``: the warm-up reaches every compiled entry point (so no benchmark row pays a compile)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ENTRY_POINTS = {
    "taccl_py.fast_kernel": ["build_dependencies", "run"],
    "taccl_py.msccl.fast_prune": ["_prune"],
    "taccl_py.msccl.fast_writer": ["_render"],
    "taccl_py.msccl.xml_scan": ["_scan"],
    "taccl_py.msccl.fast_rules": ["_body_flagged"],
    "taccl_py.msccl.fast_machine": ["_transmissions", "_graph", "_order"],
    "taccl_py.msccl.fast_execute": ["_execute"],
    "taccl_py.msccl.fast_timing": ["run"],
}

_PROBE = """
import importlib, json, sys
from numba.core.registry import CPUDispatcher
from taccl_py.warmup import compile_kernels
compile_kernels()
entries = json.loads(sys.argv[1])
found = {}
for module, names in entries.items():
    mod = importlib.import_module(module)
    for name in names:
        obj = getattr(mod, name)
        found[f"{module}.{name}"] = len(obj.signatures) if isinstance(obj, CPUDispatcher) else -1
print(json.dumps(found))
"""


@pytest.mark.slow
def test_the_warm_up_compiles_every_entry_point() -> None:
    """In a fresh process (no kernel compiled yet in it), one warm-up gives every entry point its signature."""
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(ENTRY_POINTS)], capture_output=True, text=True,
                          check=True, timeout=600)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {f"{m}.{n}": 1 for m, names in ENTRY_POINTS.items() for n in names}
