"""Profile links: fit per-link latency (alpha) and bandwidth from measurements into a topology.

Stages, each a module with frozen dataclasses between them:

* :mod:`~taccl_py.profiler.nccl_tests` reads nccl-tests logs and models their
  timings per link; :mod:`~taccl_py.profiler.measurements` reads and writes
  point-to-point CSVs;
* :mod:`~taccl_py.profiler.fit` fits ``time = a alpha + b bytes / B``;
* :mod:`~taccl_py.profiler.calibration` turns fits into topology links (new
  topologies, or re-calibrated ones); :mod:`~taccl_py.profiler.fitting` drives
  ``taccl profile fit``;
* :mod:`~taccl_py.profiler.live` measures ping-pongs with ``torch.distributed``;
* :mod:`~taccl_py.profiler.report` makes the table and the plot.
"""

from __future__ import annotations

from taccl_py.profiler.calibration import LinkFit, link_class, link_classes, recalibrate, topology_from_fits
from taccl_py.profiler.fit import AlphaBetaFit, FitPoint, Observation, fit_alpha_beta
from taccl_py.profiler.fitting import FitOutcome, FitRequest, fit_measurements
from taccl_py.profiler.measurements import Sample, read_measurements_csv, write_measurements_csv
from taccl_py.profiler.nccl_tests import NcclTestsRun, parse_nccl_tests_log

__all__ = [
    "AlphaBetaFit",
    "FitOutcome",
    "FitPoint",
    "FitRequest",
    "LinkFit",
    "NcclTestsRun",
    "Observation",
    "Sample",
    "fit_alpha_beta",
    "fit_measurements",
    "link_class",
    "link_classes",
    "parse_nccl_tests_log",
    "read_measurements_csv",
    "recalibrate",
    "topology_from_fits",
    "write_measurements_csv",
]
