"""Sweeps that scale out: independent jobs run in this process, on local cores, or on a Ray cluster.

* :mod:`~taccl_py.sweep.runner`: the job loop (one code path for every backend) and the job records.
* :mod:`~taccl_py.sweep.backends`: in-process, local process pool, Ray.
* :mod:`~taccl_py.sweep.store`: the JSON-lines results file that a rerun resumes from.
* :mod:`~taccl_py.sweep.grid`: topologies x collectives x sizes x tasks as jobs, and the job function.
"""

from taccl_py.sweep.backends import InlineBackend, ProcessBackend, RayBackend, make_backend
from taccl_py.sweep.grid import SweepJob, SweepOptions, SweepTask, grid_jobs, run_sweep_job, thin_sizes
from taccl_py.sweep.runner import Backend, Job, JobRecord, execute_job, run_jobs
from taccl_py.sweep.store import ResultsFile

__all__ = ["Backend", "InlineBackend", "Job", "JobRecord", "ProcessBackend", "RayBackend", "ResultsFile",
           "SweepJob", "SweepOptions", "SweepTask", "execute_job", "grid_jobs", "make_backend", "run_jobs",
           "run_sweep_job", "thin_sizes"]
