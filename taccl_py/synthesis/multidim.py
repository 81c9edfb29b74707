"""The multi-dimensional shortcut: skip the solver stages when a hierarchical schedule is provably near the bound.

On a topology with dimensions (ASTRA-sim networks, tori, DGX clusters) the load-balanced hierarchical
baseline ``hier-lb`` is planned with an event model whose makespan the simulator reproduces exactly on
symmetric networks whose dimensions run ring, bidirectional-ring or direct phases
(:mod:`taccl_py.baselines.dimension_pipeline`). Its efficiency against the lower bound says how much any
algorithm could still gain: at 90% at most 11%. The routing, ordering and scheduling stages rarely find
that on such networks, and at hundreds of GPUs they take minutes (1,024 NPUs: symmetry 30 s, routing
40 s, ordering 30 s, for a schedule 5.7x the bound). So :func:`hierarchical_shortcut` plans ``hier-lb``
first (milliseconds to seconds) and, when its modelled efficiency reaches :data:`SKIP_EFFICIENCY`
(:data:`LARGE_SKIP_EFFICIENCY` above :data:`LARGE_GPUS` GPUs), the synthesizer goes straight to the
baseline comparison, which simulates it. On GPUs grouped in machines (the DGX clusters) the threshold is
:data:`MACHINES_SKIP_EFFICIENCY`: there the synthesizer's streamed candidates
(:mod:`taccl_py.synthesis.streams`) pace the NICs and drain the pipeline, which ``hier-lb`` does not
(``dgx-a100x4-forestcoll`` Allgather 1 GB: ``hier-lb`` 96.0% of the bound, the solver stages 99.8% in about
20 s), so the shortcut ends the search only within 1% of the bound; below that the solver stages run and
the faster schedule is kept (the baselines, ``hier-lb`` among them, are ranked with the candidates as
always). On networks without machines (ASTRA-sim's) the solver stages reached about half the bound where
``hier-lb`` is above 90% (``[Ring 2, FullyConnected 8, Switch 4]`` at 1 GB: 2,214 against 1,096 us for
Allgather, after 30-70 s), so the 90% threshold stays there. Above :data:`LARGE_GPUS` GPUs that comparison simulates one
hierarchical baseline only: the flat ones (ring, direct, recursive doubling, one-shot trees) send across
every dimension from every GPU and take minutes each to simulate there, and a 1,024-GPU hierarchical
schedule itself takes 70 to 100 s of CPU and 5 to 12 GB. Of ``hier`` and ``hier-lb`` the one whose model
makespan is lower is simulated; on ASTRA-sim networks whose dimensions run ring, bidirectional-ring or
direct phases the model is the simulator's time (tested), so the other one is not faster. Where the
GPUs declare endpoint limits (memory, channels) the plan's model does not see them, so up to
:data:`LARGE_GPUS` GPUs the shortcut is not taken and the synthesizer runs (``SynthesisOptions.endpoint_aware``).
"""

from __future__ import annotations

from dataclasses import dataclass

from taccl_py.bounds import lower_bound
from taccl_py.collectives import CollectiveKind
from taccl_py.synthesis.options import SynthesisOptions
from taccl_py.synthesis.streams import streams_apply
from taccl_py.topology import Topology

__all__ = ["LARGE_GPUS", "LARGE_SKIP_EFFICIENCY", "MACHINES_SKIP_EFFICIENCY", "RAIL_GPUS", "RERUN_MAX_GPUS",
           "SKIP_EFFICIENCY", "Shortcut", "hierarchical_shortcut", "rail_path", "skip_efficiency"]

SKIP_EFFICIENCY = 0.9
"""Modelled efficiency of ``hier-lb`` from which the solver stages are skipped (networks without machines)."""
LARGE_SKIP_EFFICIENCY = 0.8
"""The same above :data:`LARGE_GPUS` GPUs, where the solver stages take minutes."""
LARGE_GPUS = 256
"""Above this many GPUs the lower threshold applies and only hierarchical baselines are compared."""
MACHINES_SKIP_EFFICIENCY = 0.99
"""The same (up to :data:`LARGE_GPUS` GPUs) where the synthesizer's streamed candidates apply: GPUs grouped in
machines, Allgather, ReduceScatter or Allreduce."""


def skip_efficiency(topology: Topology, kind: CollectiveKind) -> float:
    """The modelled efficiency of ``hier-lb`` from which the solver stages are skipped on ``topology``."""
    if topology.num_gpus > LARGE_GPUS:
        return LARGE_SKIP_EFFICIENCY
    return MACHINES_SKIP_EFFICIENCY if streams_apply(topology, kind) else SKIP_EFFICIENCY


RAIL_GPUS = 256
"""From this many GPUs, on a cluster of machines (:mod:`taccl_py.synthesis.railstream`), the shortcut is always
taken and the rail-stream schedules are compared with the hierarchical baseline: the solver stages do not finish
there (Allreduce on 128 GPUs took over two minutes), and no split count of ``hier-lb`` fits the MSCCL limits from
128 machines on."""
RERUN_MAX_GPUS = 128
"""Up to this many GPUs, when the shortcut's choice cannot be written, the solver stages run after all."""


@dataclass(frozen=True)
class Shortcut:
    """Why the solver stages were skipped, and which baselines the comparison simulates (None: all)."""

    estimate_us: float
    bound_us: float
    baselines: tuple[str, ...] | None
    name: str = "hier-lb"
    """The hierarchical baseline the estimate is of."""
    rail: bool = False
    """The rail-stream schedules are compared too, and the hierarchical baseline only when its model estimate is
    below their simulated time (:data:`RAIL_GPUS`)."""

    @property
    def efficiency(self) -> float:
        return self.bound_us / self.estimate_us

    def note(self, num_gpus: int, hierarchical_simulated: bool = True) -> str:
        if self.rail:
            text = (f"multi-dimensional shortcut: from {RAIL_GPUS} GPUs on a cluster of machines the routing, "
                    "ordering and scheduling stages are skipped (`--no-multidim-shortcut` runs them) and the "
                    f"rail-stream schedules are compared with {self.name} (modelled at {self.estimate_us:.6g} us, "
                    f"{100 * self.efficiency:.1f}% of the bound)")
            if not hierarchical_simulated:
                text += ", which was not simulated: its model is slower than the rail-stream schedule simulated"
            return text
        text = (f"multi-dimensional shortcut: {self.name} is modelled at {self.estimate_us:.6g} us, "
                f"{100 * self.efficiency:.1f}% of the bound ({self.bound_us:.6g} us), so the routing, ordering "
                "and scheduling stages were skipped (`--no-multidim-shortcut` runs them)")
        if self.baselines is not None:
            text += (f"; above {LARGE_GPUS} GPUs ({num_gpus}) only {', '.join(self.baselines)} was simulated, "
                     "the faster hierarchical baseline by the model")
        return text


def _shortcut_allowed(topology: Topology, kind: CollectiveKind, options: SynthesisOptions) -> bool:
    from taccl_py.baselines.hierarchical import HIERARCHICAL_KINDS

    if not options.multidim_shortcut or kind not in HIERARCHICAL_KINDS or not topology.dimensions:
        return False
    if not options.compare_baselines:
        return False  # the comparison is what the shortcut returns
    # the plan's model knows no GPU memory: where the solver stages are affordable, run them
    return not (options.endpoint_aware and topology.has_endpoint_limits and topology.num_gpus <= LARGE_GPUS)


def rail_path(topology: Topology, kind: CollectiveKind, options: SynthesisOptions) -> bool:
    """Whether :func:`hierarchical_shortcut`, where the hierarchical plan applies, takes the rail-stream path: it
    then simulates the rail-stream schedules and compares them with the plan's baseline only (not NCCL's ring)."""
    from taccl_py.synthesis.railstream import rail_stream_applies

    return (_shortcut_allowed(topology, kind, options) and topology.num_gpus >= RAIL_GPUS
            and not topology.has_endpoint_limits and rail_stream_applies(topology, kind) is None)


def hierarchical_shortcut(topology: Topology, kind: CollectiveKind, size_bytes: float,
                          options: SynthesisOptions) -> Shortcut | None:
    """The shortcut when ``hier-lb`` is modelled near enough the bound, else None (see the module doc)."""
    from taccl_py.baselines import NotApplicable
    from taccl_py.baselines.hierarchical import hierarchical_plan

    if not _shortcut_allowed(topology, kind, options):
        return None
    try:
        plan = hierarchical_plan(topology, kind, balanced=True, size_bytes=size_bytes)
    except NotApplicable:
        return None
    if plan.estimate_us is None or plan.estimate_us <= 0:
        return None
    bound = lower_bound(topology, kind, size_bytes, root=options.root).bound_us
    large = topology.num_gpus > LARGE_GPUS
    if rail_path(topology, kind, options):
        plain = hierarchical_plan(topology, kind, balanced=False, size_bytes=size_bytes).estimate_us
        if plain is not None and plain < plan.estimate_us:
            return Shortcut(plain, bound, ("hier",), "hier", rail=True)
        return Shortcut(plan.estimate_us, bound, ("hier-lb",), rail=True)
    if bound / plan.estimate_us < skip_efficiency(topology, kind):
        return None
    if not large:
        return Shortcut(plan.estimate_us, bound, None)
    plain = hierarchical_plan(topology, kind, balanced=False, size_bytes=size_bytes).estimate_us
    if plain is not None and plain < plan.estimate_us:
        return Shortcut(plain, bound, ("hier",), "hier")
    return Shortcut(plan.estimate_us, bound, ("hier-lb",))
