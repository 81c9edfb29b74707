"""Compile every numba kernel once, or load it from numba's cache, on a small instance.

The first run after an install compiles the simulator's and the XML layer's kernels (30 to 90 s of
CPU); numba caches them next to the modules. ``benchmarks/run.py`` calls :func:`compile_kernels`
before it measures, so no benchmark row pays that once-only cost, and a deployment can pay it at
build time: ``python -m taccl_py.warmup``. The instances are one-ring Allgathers on rings just above
the sizes from which the commands take the compiled paths (320 GPUs for the simulator, 160 for the
XML layer), so the kernels are compiled for exactly the argument types the commands use.
"""

from __future__ import annotations

import time

from taccl_py.baselines import baseline
from taccl_py.collectives import CollectiveKind
from taccl_py.fast_sim import FAST_MIN_TRANSFERS, simulate_large
from taccl_py.library.grids import ring
from taccl_py.msccl import lower_schedule, simulate_program, verify_program, write_xml
from taccl_py.msccl.assembly import FAST_MIN_OPS
from taccl_py.msccl.verify import FAST_MIN_STEPS
from taccl_py.msccl.xml_scan import arrays_from_bytes
from taccl_py.simulator import SimOptions

__all__ = ["compile_kernels"]

SIMULATOR_GPUS = 320
"""A one-ring Allgather on this many GPUs has 102,080 transfers, above the compiled simulator's threshold."""
XML_GPUS = 160
"""Its MSCCL program on this many has 50,880 steps, above the compiled XML layer's thresholds."""


def compile_kernels() -> float:
    """Run the simulator, the lowering, the writer, the reader, the verifier and the XML timing once through their
    compiled paths; the wall seconds it took (a few when cached, about a minute when compiling)."""
    started = time.perf_counter()
    topology = ring(SIMULATOR_GPUS)
    schedule = baseline(topology, CollectiveKind.ALLGATHER, "ring")
    if len(schedule.transfers) < FAST_MIN_TRANSFERS:
        raise AssertionError("the warm-up ring no longer reaches the compiled simulator")
    simulate_large(topology, schedule, 2**30, SimOptions())
    topology = ring(XML_GPUS)
    schedule = baseline(topology, CollectiveKind.ALLGATHER, "ring")
    program = lower_schedule(schedule, topology)
    if program.num_steps < max(FAST_MIN_STEPS, FAST_MIN_OPS):
        raise AssertionError("the warm-up program no longer reaches the compiled XML layer")
    arrays_from_bytes(write_xml(program).encode(), where="warm-up")
    verify_program(program)
    simulate_program(program, topology, 2**30)
    return time.perf_counter() - started


if __name__ == "__main__":
    print(f"compiled kernels ready in {compile_kernels():.1f} s")
