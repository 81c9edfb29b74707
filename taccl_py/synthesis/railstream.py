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
  (m, j) -> (m, j-1) -> ... -> (m, j-L+1) as soon as it is there: L-1 one-block transfers on the same
  connection pairs, which the lowering fuses into receive-copy-send steps (one XML step per block received).

A rank then holds about N + 2(K-1) steps, and N x (N-1) transfers move the data (one per block received).
ReduceScatter is the mirror image built directly (chains that reduce towards the rail GPU, then the rail messages
as reductions, in rotation); Allreduce is that ReduceScatter followed by the Allgather. The schedule is
generated from one machine's pattern, translated over the machines (every machine runs the same program up
to the shift of its machine index), so its construction costs a few microseconds per transfer; routes are the
topology's own (:meth:`~taccl_py.topology.Topology.gpu_route`). The simulator judges it like any other schedule.
"""

from __future__ import annotations

import math
from functools import cached_property

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.errors import NotApplicable
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.topology import Route, Topology

__all__ = ["DEFAULT_STREAMS", "RAIL_KINDS", "SINGLE_LEVEL_MACHINES", "far_groups", "rail_stream_applies",
           "rail_stream_schedule", "rail_variants"]

DEFAULT_STREAMS = 2
"""Rail messages in flight per GPU: more hide the route latency better (a gap of about alpha / (streams x
message time) per message), fewer let the blocks arrive sooner one after another."""

SINGLE_LEVEL_MACHINES = 64
"""Up to this many machines every rail message goes straight to its machine (one far group); above, a GPU's
rail peers would be more threadblocks that others wait for than MSCCL's 8-bit ``depid`` can name (128), so the
machines form far groups (:func:`far_groups`)."""


def rail_variants(machines: int) -> tuple[tuple[int, int], ...]:
    """(streams, far groups) the synthesizer builds and simulates: one and two streams straight to every machine
    up to :data:`SINGLE_LEVEL_MACHINES` (one measured best on 16 machines, two on 32), one stream in far groups
    above (the only form MSCCL can load there)."""
    if machines <= SINGLE_LEVEL_MACHINES:
        return ((1, 1), (2, 1))
    return ((1, far_groups(machines)),)


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


class _Chains:
    """The chains inside the machines: a block travels L-1 hops between consecutive local GPUs.

    Every chain of one call starts on a different GPU of the machine, so each connection carries one hop of each
    at a time, and a GPU receives, then forwards (the lowering fuses the two into one step). A chain's first hop
    waits for the last hop into its first GPU of the previous call (an ``after`` on the same rank): a threadblock
    then serves the whole chain connection in one order, receive-and-forward steps fused, which the lowering
    only accepts when nothing waits that the schedule does not make wait.
    """

    def __init__(self, local: int, machines: int, routes: _Routes, op: Op, out: list[Transfer]) -> None:
        self.local, self.n, self.routes, self.op, self.out = local, local * machines, routes, op, out
        self.last_in = [-1] * self.n  # per GPU: the last chain hop into it (the previous call's end)
        self.last_out = [-1] * self.n  # per GPU: the last chain hop it sent

    def run(self, block_of: list[int]) -> None:
        """Allgather: GPU g sends ``block_of[g]`` round its machine; ReduceScatter: the machine reduces
        ``block_of[g]`` onto GPU g (the chain ends there)."""
        local, out = self.local, self.out
        gather = self.op is Op.COPY
        ends: list[tuple[int, int]] = []
        hops = range(1, local) if gather else range(local - 1, 0, -1)
        for step, hop in enumerate(hops):
            for g in range(self.n):
                m, j = divmod(g, local)
                if gather:  # down the machine, as the reductions go: an Allreduce's two phases share connections
                    src, dst = m * local + (j - hop + 1) % local, m * local + (j - hop) % local
                else:
                    src, dst = m * local + (j + hop) % local, m * local + (j + hop - 1) % local
                after = (self.last_in[src],) if step == 0 and self.last_in[src] >= 0 else ()
                if step == local - 2:
                    ends.append((dst, len(out)))
                self.last_out[src] = len(out)
                out.append(Transfer(src, dst, (block_of[g],), self.routes(src, dst), self.op, 0, after))
        for dst, index in ends:
            self.last_in[dst] = index


def _rail(g: int, dst: int, block: int, streams: int, routes: _Routes, op: Op, sent: list[int],
          out: list[Transfer], chained: int = -1) -> None:
    """GPU g's next group message: on stream k mod ``streams`` (channels 1..), after its stream's previous one
    (and after ``chained``, a chain hop it sent, when >= 0)."""
    k = len(sent)
    after = (sent[k - streams],) if k >= streams else ()
    if chained >= 0:
        after = (*after, chained)
    sent.append(len(out))
    out.append(Transfer(g, dst, (block,), routes(g, dst), op, 1 + k % streams, after))


class _Grid:
    """GPU ids by (far group f, machine g in the group, local GPU i): machine f * G + g."""

    def __init__(self, local: int, machines: int, groups: int) -> None:
        self.local, self.groups, self.size = local, groups, machines // groups
        self.n = local * machines

    def coords(self, x: int) -> tuple[int, int, int]:
        m, i = divmod(x, self.local)
        f, g = divmod(m, self.size)
        return f, g, i

    def gpu(self, f: int, g: int, i: int) -> int:
        return ((f % self.groups) * self.size + g % self.size) * self.local + i

    @cached_property
    def all(self) -> list[tuple[int, int, int]]:
        """(f, g, i) of every GPU, in GPU order."""
        return [self.coords(x) for x in range(self.n)]


def _allgather(grid: _Grid, streams: int, routes: _Routes, out: list[Transfer]) -> None:
    """Append the Allgather's transfers to ``out`` (chunk = block = rank; ``after`` indexes ``out``)."""
    n, far, size = grid.n, grid.groups, grid.size
    chains = _Chains(grid.local, n // grid.local, routes, Op.COPY, out)
    chains.run(list(range(n)))  # each machine's own blocks
    sent: list[list[int]] = [[] for _ in range(n)]  # the schedule index of each GPU's group messages
    for r in range(size):
        if r <= size - 2:  # own block to the group's machine r + 1 ahead
            for x in range(n):
                f, g, i = grid.coords(x)
                _rail(x, grid.gpu(f, g + r + 1, i), x, streams, routes, Op.COPY, sent[x], out)
        for x in range(n):  # the block of the machine r behind (own at r = 0) to the same machine of every other group
            f, g, i = grid.coords(x)
            block = grid.gpu(f, g - r, i)
            for df in range(1, far):
                dst = grid.gpu(f + df, g, i)
                out.append(Transfer(x, dst, (block,), routes(x, dst), Op.COPY, 1 + streams))
        for df in range(1, far):  # what arrived goes round the machine
            chains.run([grid.gpu(f - df, g - r, i) for f, g, i in grid.all])
        if r <= size - 2:
            chains.run([grid.gpu(f, g - r - 1, i) for f, g, i in grid.all])


def _reducescatter(grid: _Grid, streams: int, routes: _Routes, out: list[Transfer]) -> None:
    """Append the ReduceScatter's transfers: the mirror image of :func:`_allgather` (chains reduce each block onto
    its rail GPU before it leaves the machine, messages reduce into their destination, rounds in reverse)."""
    n, far, size = grid.n, grid.groups, grid.size
    chains = _Chains(grid.local, n // grid.local, routes, Op.REDUCE, out)
    sent: list[list[int]] = [[] for _ in range(n)]
    for r in range(size - 1, -1, -1):
        for df in range(1, far):  # reduce over the machine what leaves it this round
            chains.run([grid.gpu(f + df, g - r, i) for f, g, i in grid.all])
        if r <= size - 2:
            chains.run([grid.gpu(f, g - r - 1, i) for f, g, i in grid.all])
        for x in range(n):
            f, g, i = grid.coords(x)
            for df in range(1, far):
                dst, block = grid.gpu(f + df, g, i), grid.gpu(f + df, g - r, i)
                out.append(Transfer(x, dst, (block,), routes(x, dst), Op.REDUCE, 1 + streams))
        if r <= size - 2:  # after x's last chain hop out: its threadblock forwards that one before the last receive
            for x in range(n):
                f, g, i = grid.coords(x)
                block = grid.gpu(f, g - r - 1, i)
                _rail(x, block, block, streams, routes, Op.REDUCE, sent[x], out, chains.last_out[x])
    chains.run(list(range(n)))  # each machine's own blocks last


def far_groups(machines: int) -> int:
    """The default number of far groups: the largest divisor of ``machines`` at most its square root."""
    return max(d for d in range(1, math.isqrt(machines) + 1) if machines % d == 0)


def rail_stream_schedule(topology: Topology, kind: CollectiveKind, streams: int = DEFAULT_STREAMS,
                         groups: int = 1) -> Schedule:
    """The rail-stream schedule of ``kind`` on a cluster of machines (see the module doc); chunk factor 1.

    ``groups``: far groups F (a divisor of the machine count; 1: every rail message goes straight to its
    machine); ``streams``: group messages in flight per GPU.
    """
    if kind not in RAIL_KINDS:
        raise NotApplicable(f"{kind.value} has no rail-stream schedule", where=topology.name)
    local, machines = _shape(topology)
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise NotApplicable(f"must be an integer >= 1 (got {streams!r})", where="streams")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 or machines % groups:
        raise NotApplicable(f"must divide the {machines} machines (got {groups!r})", where="groups")
    grid = _Grid(local, machines, groups)
    streams = max(1, min(streams, grid.size - 1))
    routes = _Routes(topology)
    transfers: list[Transfer] = []
    if kind is not CollectiveKind.ALLGATHER:
        _reducescatter(grid, streams, routes, transfers)
    if kind is not CollectiveKind.REDUCESCATTER:
        _allgather(grid, streams, routes, transfers)
    name = "rail-stream"
    return Schedule(Collective(kind, topology.num_gpus, 1), tuple(transfers), name=name, topology=topology.name,
                    notes={"algorithm": name, "channels": 2 + streams, "pieces": 1,
                           "parameters": {"streams": streams, "groups": groups, "local": local, "machines": machines},
                           "description": f"rail streams ({streams} per GPU, {groups} far groups of "
                                          f"{grid.size} machines) across {machines} machines, chains of {local} "
                                          "GPUs inside each"})
