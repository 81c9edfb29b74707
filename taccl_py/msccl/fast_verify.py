"""verify_program for programs of millions of steps: the same checks, compiled, with the same report.

:func:`verify_arrays` runs every check :func:`taccl_py.msccl.verify.verify_program` runs, in
the same order, on :class:`ProgramArrays`: the static rules (:mod:`taccl_py.msccl.fast_rules`),
the deadlock check (:mod:`taccl_py.msccl.fast_machine`: the machine and its topological order)
and, per buffer mode, the execution with its data-race check (:mod:`taccl_py.msccl.fast_execute`).
The compiled checks decide whether there is anything to report; where there is (a broken rule, a
transmission that never runs, a race, a wrong result, the race check's budget spent), the Python
check of that stage runs on the program's objects and gives the report, so every verdict and
message is the Python verifier's, word for word. A correct program never builds the objects.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from taccl_py.msccl import fast_execute, fast_machine
from taccl_py.msccl.arrays import G_ID, ProgramArrays
from taccl_py.msccl.fast_rules import rules_found
from taccl_py.msccl.report import VerifyReport, Violation
from taccl_py.msccl.semantics import DataSpec
from taccl_py.msccl.verify import (
    FAST_MAX_SYMBOLIC_CONTRIBUTIONS,
    Outcome,
    PythonChecks,
    checked_dialect,
    checked_report,
    data_spec,
    race_budget,
)

__all__ = ["FastChecks", "verify_arrays"]


class FastChecks:
    """:class:`taccl_py.msccl.verify.Checks` on the compiled machine; the Python ones describe what they find."""

    def __init__(self, arrays: ProgramArrays) -> None:
        self.arrays = arrays

    @cached_property
    def machine(self) -> fast_machine.FastMachine:
        return fast_machine.build(self.arrays)

    @cached_property
    def order(self) -> tuple[np.ndarray, int]:
        return fast_machine.order(self.machine)

    @cached_property
    def python(self) -> PythonChecks:
        return PythonChecks(self.arrays.program())

    def deadlock(self) -> Violation | None:
        out, size = self.order
        if size == len(out):
            return None
        return self.python.deadlock()

    @cached_property
    def _threadblocks(self) -> tuple[np.ndarray, np.ndarray]:
        """(threadblocks per rank, each threadblock's index among its rank's), as ``_HappensBefore`` counts them."""
        arrays = self.arrays
        per_gpu = np.diff(arrays.gpu_tb)
        of_rank = np.zeros(arrays.ngpus, np.int64)
        of_rank[arrays.gpus[G_ID]] = per_gpu
        index = np.arange(arrays.num_threadblocks, dtype=np.int64) - np.repeat(arrays.gpu_tb[:-1], per_gpu)
        return of_rank, index

    def execute(self, in_place: bool) -> Outcome:
        spec = data_spec(self.arrays.header, in_place, FAST_MAX_SYMBOLIC_CONTRIBUTIONS)
        if not isinstance(spec, DataSpec):
            return spec
        out, size = self.order
        of_rank, index = self._threadblocks
        status, _ = fast_execute.execute(self.machine, out[:size], spec, of_rank, index,
                                         race_budget(self.machine.nodes.shape[1]))
        if status == fast_execute.CLEAN:
            return Outcome((), (), {})
        # the Python execution describes what the compiled one found, within the same limit (a wrong program of
        # 1M to 16M contributions is wrong, not unknown)
        return self.python.execute(in_place, FAST_MAX_SYMBOLIC_CONTRIBUTIONS)


def verify_arrays(arrays: ProgramArrays, dialect: str | None = None) -> VerifyReport:
    """:func:`taccl_py.msccl.verify.verify_program` of the program ``arrays`` holds (the same report)."""
    dialect = checked_dialect(arrays.header, dialect)
    found = rules_found(arrays, dialect)
    return checked_report(arrays.header, dialect, found, FastChecks(arrays))
