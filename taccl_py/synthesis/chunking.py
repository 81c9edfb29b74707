"""Stage 3: the chunk factors (pieces per GPU block) worth trying."""

from __future__ import annotations

from taccl_py.collectives import CollectiveKind
from taccl_py.synthesis.options import SynthesisOptions
from taccl_py.synthesis.routes import Prepared
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["auto_chunk_factors", "chunk_factors", "steps_per_rank"]

_CANDIDATE_FACTORS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def steps_per_rank(kind: CollectiveKind, num_gpus: int, chunk_factor: int) -> int:
    """Rough count of MSCCL steps (sends + receives) a rank gets; runtimes cap the nodes per rank."""
    per_piece = {CollectiveKind.ALLREDUCE: 4 * (num_gpus - 1), CollectiveKind.ALLTOALL: 4 * (num_gpus - 1),
                 CollectiveKind.BROADCAST: 2, CollectiveKind.REDUCE: 2}.get(kind, 2 * (num_gpus - 1))
    return per_piece * chunk_factor


def auto_chunk_factors(kind: CollectiveKind, num_gpus: int, size_bytes: float, latency_us: float,
                       bandwidth_GBps: float, max_steps_per_rank: int) -> tuple[int, ...]:
    """Chunk factors worth trying: more pieces pipeline better until latency per piece dominates
    or the runtime's per-rank step budget runs out. Largest first."""
    rooted = kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
    per_gpu = size_bytes if rooted else size_bytes / num_gpus
    factors = [1]
    for c in _CANDIDATE_FACTORS:
        piece = per_gpu / c
        # a piece should take several link latencies to send, or pipelining costs more than it saves
        if piece / gbps_to_bytes_per_us(bandwidth_GBps) < 2 * latency_us:
            break
        if steps_per_rank(kind, num_gpus, c) > max_steps_per_rank:
            break
        factors.append(c)
    picked = [c for c in factors if c & (c - 1) == 0] if len(factors) > 4 else factors
    if factors[-1] not in picked:
        picked.append(factors[-1])
    return tuple(reversed(picked[-3:]))


def chunk_factors(options: SynthesisOptions, prepared: Prepared) -> tuple[int, ...]:
    """The factors to try, largest first: the options', else the sketch's, else chosen from the size."""
    if options.chunk_factors:
        return options.chunk_factors
    if prepared.sketch.chunk_factor:
        return (prepared.sketch.chunk_factor,)
    links = prepared.topology.links
    min_latency = min(link.latency for link in links)
    mean_bw = sum(link.bandwidth for link in links) / len(links)
    return auto_chunk_factors(prepared.kind, prepared.num_gpus, prepared.size_bytes, max(min_latency, 1e-3), mean_bw,
                              options.max_steps_per_rank)
