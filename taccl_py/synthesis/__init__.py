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
6. :mod:`~taccl_py.synthesis.candidates` ``rank_choices``: the best of each factor
   and the NCCL-style baselines in order of preference (a file the runtime selects
   at the size first, then the fastest; a faster baseline is returned instead,
   and the report says so); the rest are fallbacks if the first cannot be written.

Every solver stage stops on a deterministic budget (:class:`WorkBudget`), so
identical inputs give identical results on any machine; the wall clock
(``SynthesisOptions.time_limit_s``) is only an outer guard, and
``SynthesisResult.time_limit_hit`` says when it ended a stage.
"""

from taccl_py.synthesis.candidates import Candidate, Choice
from taccl_py.synthesis.options import STAGES, ProgressFn, SynthesisOptions, WorkBudget
from taccl_py.synthesis.pipeline import SynthesisResult, synthesize

__all__ = ["STAGES", "Candidate", "Choice", "ProgressFn", "SynthesisOptions", "SynthesisResult", "WorkBudget", "synthesize"]
