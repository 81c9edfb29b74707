"""Stage 3: the chunk factors (pieces per GPU block) worth trying.

Two rules bound them. The runtimes accept at most 4096 XML nodes per rank, and
more pieces mean more steps. And a runtime runs an algorithm file only for a
call whose element count (size / element bytes) is a multiple of the file's
``nchunksperloop`` (see :mod:`taccl_py.msccl.selection`); a factor that breaks
this at the synthesized size yields a file the runtime never picks there, so
such factors are dropped whenever a factor that keeps the rule exists.
"""

from __future__ import annotations

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.msccl.selection import kind_multiplier
from taccl_py.schedule import Transfer
from taccl_py.synthesis.options import SynthesisOptions
from taccl_py.synthesis.routes import Prepared
from taccl_py.units import gbps_to_bytes_per_us

__all__ = ["auto_chunk_factors", "chunk_factors", "chunks_per_loop", "min_nodes_per_rank", "selectable_at",
           "steps_per_rank"]

_CANDIDATE_FACTORS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
_ROOTED = (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)


def steps_per_rank(kind: CollectiveKind, num_gpus: int, chunk_factor: int) -> int:
    """Rough count of MSCCL steps (sends + receives) a rank gets; runtimes cap the nodes per rank."""
    per_piece = {CollectiveKind.ALLREDUCE: 4 * (num_gpus - 1), CollectiveKind.ALLTOALL: 4 * (num_gpus - 1),
                 CollectiveKind.BROADCAST: 2, CollectiveKind.REDUCE: 2}.get(kind, 2 * (num_gpus - 1))
    return per_piece * chunk_factor


def chunks_per_loop(collective: Collective, instances: int = 1) -> int:
    """The ``nchunksperloop`` of the XML a schedule of ``collective`` lowers to with ``instances`` copies."""
    base = collective.num_ranks * collective.chunk_factor if collective.kind is CollectiveKind.ALLTOALL \
        else collective.num_chunks
    return base * instances


def selectable_at(collective: Collective, size_bytes: float, element_bytes: int, instances: int = 1) -> bool:
    """Would a runtime pick the lowered file for a call of ``size_bytes`` of ``element_bytes``-byte elements?

    The v2 rule: the per-rank element count is whole and ``count x sizeMultiplier``
    (the call's total element count) is a multiple of ``nchunksperloop``.
    """
    size = int(size_bytes)
    per_element = element_bytes * kind_multiplier(collective.kind, collective.num_ranks)
    if size != size_bytes or size <= 0 or size % per_element:
        return False
    return (size // element_bytes) % chunks_per_loop(collective, instances) == 0


def min_nodes_per_rank(transfers: tuple[Transfer, ...], num_ranks: int, instances: int = 1) -> int:
    """A lower bound on the XML nodes (1 + ngpus + threadblocks + steps) of the busiest rank.

    Each transfer is a send step on its source and a receive step on its
    destination (one fused step at best), once per instance, and a rank has at
    least one threadblock; anything above the runtimes' 4096 can never be written.
    """
    sends = [0] * num_ranks
    recvs = [0] * num_ranks
    for t in transfers:
        sends[t.src] += 1
        recvs[t.dst] += 1
    busiest = max(max(s, r) for s, r in zip(sends, recvs, strict=True))
    return 1 + num_ranks + 1 + busiest * instances


def auto_chunk_factors(kind: CollectiveKind, num_gpus: int, size_bytes: float, latency_us: float,
                       bandwidth_GBps: float, max_steps_per_rank: int, *, element_bytes: int = 4,
                       instances: int = 1) -> tuple[int, ...]:
    """Chunk factors worth trying, largest first.

    More pieces pipeline better until latency per piece dominates or the
    runtime's per-rank node budget runs out (1 + ngpus + the estimated steps).
    Of those, only factors whose file the runtime would select at this size are
    kept (if any is); then powers of two and the largest, at most three.
    """
    rooted = kind in _ROOTED
    per_gpu = size_bytes if rooted else size_bytes / num_gpus
    factors = [1]
    for c in _CANDIDATE_FACTORS:
        piece = per_gpu / c
        # a piece should take several link latencies to send, or pipelining costs more than it saves
        if piece / gbps_to_bytes_per_us(bandwidth_GBps) < 2 * latency_us:
            break
        if 1 + num_gpus + steps_per_rank(kind, num_gpus, c) * instances > max_steps_per_rank:
            break
        factors.append(c)
    selectable = [c for c in factors
                  if selectable_at(Collective(kind, num_gpus, c), size_bytes, element_bytes, instances)]
    factors = selectable or factors
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
    if options.endpoint_aware and prepared.topology.has_endpoint_limits:  # pieces move at what memory allows
        from taccl_py.synthesis.endpoint import effective_bandwidth

        mean_bw = effective_bandwidth(prepared.topology, prepared.kind, options.endpoint, mean_bw)
    return auto_chunk_factors(prepared.kind, prepared.num_gpus, prepared.size_bytes, max(min_latency, 1e-3), mean_bw,
                              options.max_steps_per_rank, element_bytes=options.element_bytes,
                              instances=options.instances)

