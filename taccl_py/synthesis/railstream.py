"""Rail streams: Allgather, ReduceScatter and Allreduce for clusters of machines joined rail by rail, at any scale.

On a cluster of K machines of L GPUs each (dimensions ``[L, K]``: GPU ``m * L + i`` is local GPU i of machine m,
one NIC per GPU, a DGX A100 / H100 cluster) the binding cut of Allgather is the NICs: each must carry (K-1)/K of
its rail's share. The load-balanced hierarchical baseline (``hier-lb``) reaches it only with many dataset splits,
and lowered to MSCCL XML its second phase sends each GPU's rail blocks, a strided set of K chunks, to every local
peer: from 128 machines on no split count of it fits MSCCL's 4,096 XML nodes per rank (1 + ngpus +
threadblocks + steps) or its 64 steps per threadblock. The rail-stream schedule moves the same data in one-block
messages that the lowering fuses:

* **across machines (the rails)**: GPU (m, i) sends its block to (m + k + 1, i) as its k-th message, for k = 0 ..
  K-2, on ``streams`` chained streams (message k waits for message k - streams of the same GPU: an ``after`` on
  the same sender, which MSCCL writes as a dependency), so every NIC carries ``streams`` flows at a time, every
  machine receives from one machine per message index (a rotation: no hot spot in the fabric), and blocks arrive
  one after another instead of all at the end;
* **inside a machine (a chain)**: each block (the GPU's own and each one received over its rail) travels
  (m, j) -> (m, j+1) -> ... -> (m, j+L-1) as soon as it is there: L-1 one-block transfers on the same
  connection pairs, which the lowering fuses into receive-copy-send steps (one XML step per block received).

A rank then holds about N + 2(K-1) steps, and N x (N-1) transfers move the data (one per block received).
ReduceScatter is the mirror image built directly (chains that reduce towards the rail GPU, then the rail messages
as reductions, in rotation); Allreduce is that ReduceScatter followed by the Allgather. The schedule is
generated from one machine's pattern, translated over the machines (every machine runs the same program up
to the shift of its machine index), so its construction costs a few microseconds per transfer; routes are the
topology's own (:meth:`~taccl_py.topology.Topology.gpu_route`). The simulator judges it like any other schedule.
"""

from __future__ import annotations

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import NotApplicable
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.topology import Route, Topology

__all__ = ["DEFAULT_STREAMS", "RAIL_KINDS", "STREAM_CHOICES", "rail_stream_applies", "rail_stream_schedule"]

DEFAULT_STREAMS = 2
"""Rail messages in flight per GPU: more hide the route latency better (a gap of about alpha / (streams x
message time) per message), fewer let the blocks arrive sooner one after another."""

STREAM_CHOICES = (1, 2)
"""The stream counts the synthesizer builds and simulates (measured best: 1 on 16 machines, 2 from 32 on)."""

RAIL_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE)


def _shape(topology: Topology) -> tuple[int, int]:
    """(L local GPUs, K machines), or NotApplicable."""
    dims = topology.dimensions
    if len(dims) != 2 or dims[0].size < 2 or dims[1].size < 2 or not topology.machines:
        raise NotApplicable("needs a cluster of machines (dimensions [GPUs per machine, machines])",
                            where=topology.name)
    local, machines = dims[0].size, dims[1].size
    if local * machines != topology.num_gpus or len(topology.machines) != machines or any(
            tuple(members) != tuple(range(m * local, (m + 1) * local)) for m, members in enumerate(topology.machines)):
        raise NotApplicable("machine m must hold GPUs m*L .. m*L+L-1", where=topology.name)
    return local, machines


def rail_stream_applies(topology: Topology, kind: CollectiveKind) -> str | None:
    """None when :func:`rail_stream_schedule` can build ``kind`` on ``topology``, else why not."""
    if kind not in RAIL_KINDS:
        return f"{kind.value} has no rail-stream schedule"
    try:
        _shape(topology)
    except NotApplicable as exc:
        return str(exc)
    return None


class _Routes:
    """Routes by (src, dst), found once."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology

    def __call__(self, src: int, dst: int) -> Route:
        route = self.topology.gpu_route(src, dst)
        if route is None:
            raise NotApplicable(f"no route from GPU {src} to GPU {dst} through switches", where=self.topology.name)
        return route


def _allgather(local: int, machines: int, streams: int, routes: _Routes, out: list[Transfer]) -> None:
    """Append the Allgather's transfers to ``out`` (chunk = block = rank; ``after`` indexes ``out``)."""
    n = local * machines
    shift = 1  # channel 0: the chains; channels 1 ..: the rail streams

    def chain(block_at: list[int]) -> None:
        # block_at[g]: the block GPU g injects into its machine's chain now (-1: none); L-1 hops, one per step
        for hop in range(1, local):
            for g in range(n):
                block = block_at[g]
                if block < 0:
                    continue
                m, j = divmod(g, local)
                src = m * local + (j + hop - 1) % local
                dst = m * local + (j + hop) % local
                out.append(Transfer(src, dst, (block,), routes(src, dst), Op.COPY, 0))

    chain(list(range(n)))  # each machine's own blocks
    rail_index: list[list[int]] = [[] for _ in range(n)]  # the schedule index of each GPU's rail messages
    for k in range(machines - 1):
        for g in range(n):
            m, i = divmod(g, local)
            dst = ((m + k + 1) % machines) * local + i
            sent = rail_index[g]
            after = (sent[k - streams],) if k >= streams else ()
            sent.append(len(out))
            out.append(Transfer(g, dst, (g,), routes(g, dst), Op.COPY, shift + k % streams, after))
        # the blocks that just arrived go round their machine: GPU (m, i) received (m - k - 1, i)
        chain([((g // local - k - 1) % machines) * local + g % local for g in range(n)])


def _reducescatter(local: int, machines: int, streams: int, routes: _Routes, out: list[Transfer]) -> None:
    """Append the ReduceScatter's transfers: chains reduce each block onto its rail GPU, rail messages reduce it
    onto its owner; the mirror image of :func:`_allgather`."""
    n = local * machines
    shift = 1

    def chain(block_of: list[int]) -> None:
        # block_of[g]: the block reduced onto GPU g from its machine (-1: none); the chain ends at g
        for hop in range(local - 1, 0, -1):
            for g in range(n):
                block = block_of[g]
                if block < 0:
                    continue
                m, j = divmod(g, local)
                src = m * local + (j + hop) % local
                dst = m * local + (j + hop - 1) % local
                out.append(Transfer(src, dst, (block,), routes(src, dst), Op.REDUCE, 0))

    rail_index: list[list[int]] = [[] for _ in range(n)]
    for k in range(machines - 1):
        # GPU (m, i) will send the partial of block (m + k + 1, i): reduce it over the machine first
        targets = [((g // local + k + 1) % machines) * local + g % local for g in range(n)]
        chain(targets)
        for g in range(n):
            sent = rail_index[g]
            after = (sent[k - streams],) if k >= streams else ()
            sent.append(len(out))
            dst = targets[g]
            out.append(Transfer(g, dst, (dst,), routes(g, dst), Op.REDUCE, shift + k % streams, after))
    chain(list(range(n)))  # each machine's own blocks last


def rail_stream_schedule(topology: Topology, kind: CollectiveKind, streams: int = DEFAULT_STREAMS) -> Schedule:
    """The rail-stream schedule of ``kind`` on a cluster of machines (see the module doc); chunk factor 1."""
    if kind not in RAIL_KINDS:
        raise NotApplicable(f"{kind.value} has no rail-stream schedule", where=topology.name)
    if streams < 1:
        raise NotApplicable(f"streams must be >= 1 (got {streams})", where="streams")
    local, machines = _shape(topology)
    streams = min(streams, machines - 1)
    routes = _Routes(topology)
    transfers: list[Transfer] = []
    if kind is not CollectiveKind.ALLGATHER:
        _reducescatter(local, machines, streams, routes, transfers)
    if kind is not CollectiveKind.REDUCESCATTER:
        _allgather(local, machines, streams, routes, transfers)
    name = "rail-stream"
    return Schedule(Collective(kind, topology.num_gpus, 1), tuple(transfers), name=name, topology=topology.name,
                    notes={"algorithm": name, "channels": 1 + streams, "pieces": 1,
                           "parameters": {"streams": streams, "local": local, "machines": machines},
                           "description": f"rail streams ({streams} per GPU) across {machines} machines, "
                                          f"chains of {local} GPUs inside each"})
