"""MSCCL XML: the program IR, lowering from schedules, writer, loader, verifier and timing.

>>> from taccl_py.msccl import load_program, verify_program
>>> report = verify_program(load_program("ring.xml"))          # doctest: +SKIP
>>> report.valid, report.correct                               # doctest: +SKIP
(True, True)

Nothing here imports solver code: the XML layer judges what the synthesizer
produces, it does not depend on it.
"""

from taccl_py.msccl.ir import Buffer, Gpu, Program, Step, StepType, Threadblock
from taccl_py.msccl.loader import XmlLoadError, load_program, parse_program
from taccl_py.msccl.lowering import LoweringOptions, lower_schedule, write_schedule_xml
from taccl_py.msccl.report import VerifyReport, Violation
from taccl_py.msccl.timing import simulate_program
from taccl_py.msccl.verify import verify_program
from taccl_py.msccl.writer import save_xml, write_xml

__all__ = [
    "Buffer",
    "Gpu",
    "LoweringOptions",
    "Program",
    "Step",
    "StepType",
    "Threadblock",
    "VerifyReport",
    "Violation",
    "XmlLoadError",
    "load_program",
    "lower_schedule",
    "parse_program",
    "save_xml",
    "simulate_program",
    "verify_program",
    "write_schedule_xml",
    "write_xml",
]
