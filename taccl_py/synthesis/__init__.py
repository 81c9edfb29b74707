"""The synthesizer pipeline: sketch -> symmetry -> routing -> ordering -> scheduling -> Schedule.

``synthesize`` turns a topology, a collective and a size into a correct
schedule, in named stages (one module each):

1. :mod:`~taccl_py.synthesis.routes` ``prepare``: the sketch (given or derived),
   the logical graph and the symmetry group of each direction needed;
2. :mod:`~taccl_py.synthesis.routes` ``route_pools``: column generation of route
   trees (or Alltoall paths) per direction, one frozen record of the phases;
3. :mod:`~taccl_py.synthesis.chunking` ``chunk_factors``: how many pieces per GPU block;
4. :mod:`~taccl_py.synthesis.variants` ``candidate_schedules``: per factor, the
   integer routing, every ordering rule (greedy and CP-SAT) and channel layout;
5. :mod:`~taccl_py.synthesis.candidates` ``simulate_candidates``: each candidate
   simulated by the independent simulator, the fastest correct one kept;
6. :mod:`~taccl_py.synthesis.candidates` ``prefer_baseline``: a faster NCCL-style
   baseline is returned instead, and the report says so.
"""

from taccl_py.synthesis.candidates import Candidate
from taccl_py.synthesis.options import STAGES, ProgressFn, SynthesisOptions, WorkBudget
from taccl_py.synthesis.pipeline import SynthesisResult, synthesize

__all__ = ["STAGES", "Candidate", "ProgressFn", "SynthesisOptions", "SynthesisResult", "WorkBudget", "synthesize"]
