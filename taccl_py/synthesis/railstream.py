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

__all__ = ["DEFAULT_STREAMS", "GROUP_MACHINES", "RAIL_KINDS", "SINGLE_LEVEL_MACHINES", "far_groups",
           "rail_stream_applies",
           "rail_stream_schedule", "rail_variants"]

DEFAULT_STREAMS = 2
"""Rail messages in flight per GPU: more hide the route latency better (a gap of about alpha / (streams x
message time) per message), fewer let the blocks arrive sooner one after another."""

SINGLE_LEVEL_MACHINES = 32
"""Up to this many machines every rail message goes straight to its machine (one far group); above, a GPU's
rail peers (a threadblock to send to each and one to receive from each) and its chain threadblocks would be more
threadblocks that others wait for than MSCCL's 8-bit ``depid`` can name (128: 64 machines need 126 for the rails
alone), so the machines form far groups (:func:`far_groups`)."""


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


CHAIN_STEPS = 56
"""Chain steps per threadblock (MSCCL v2 allows 64; the rest is room for dependency ``nop`` steps)."""


class _Chains:
    """The chains inside the machines: a block travels L-1 hops between local GPUs, ``stride`` apart.

    Every chain of one call starts on a different GPU of the machine, so each connection carries one hop of each
    at a time, and a GPU receives, then forwards (the lowering fuses the two into one step). The calls go round
    *lanes* (a stride coprime with L and a channel: the threadblocks of a connection hold at most 64 steps in
    MSCCL, and a channel has one threadblock per peer), a lane by where the blocks come from relative to the
    machine, so that an Allreduce's reduction and gathering of the same blocks share a lane (the lowering fuses a
    receive only where whatever else waits for it is on its connections). A chain's first hop waits for the last
    hop of the lane's previous call into its first GPU (an ``after`` on the same rank): a threadblock then serves
    the lane's calls in one order.
    """

    def __init__(self, local: int, machines: int, routes: _Routes, phases: int, sources: list[int],
                 out: list[Transfer]) -> None:
        self.local, self.n, self.routes, self.out = local, local * machines, routes, out
        self.strides = [x for x in range(1, local) if math.gcd(x, local) == 1] or [1]
        self.per_lane = max(1, CHAIN_STEPS // (local * phases))  # source machines per threadblock
        self.channels = -(-machines // (self.per_lane * len(self.strides)))
        self.rank = {source: q for q, source in enumerate(sources)}
        self.last_in: dict[tuple[int, int], list[int]] = {}  # per lane, per GPU: the last chain hop into it
        self.any_last_in = [-1] * self.n  # per GPU: the last chain hop into it, any lane

    def lane(self, source: int) -> tuple[int, int]:
        """(stride, channel) of the calls whose blocks come from the machine ``source`` (a lane key) places away:
        consecutive in the reduction's order, so that its calls take the lanes one after another."""
        tb = self.rank[source] // self.per_lane
        return self.strides[tb % len(self.strides)], tb // len(self.strides)

    def run(self, op: Op, block_of: list[int], source: int) -> list[int]:
        """Allgather (copy): GPU g sends ``block_of[g]`` round its machine; ReduceScatter (reduce): the machine
        reduces ``block_of[g]`` onto GPU g. Returns, per GPU, the last hop it sent (-1: none)."""
        local, out = self.local, self.out
        stride, channel = self.lane(source)
        last_in = self.last_in.setdefault((stride, channel), [-1] * self.n)
        last_out = [-1] * self.n
        gather = op is Op.COPY
        ends: list[tuple[int, int]] = []
        hops = range(1, local) if gather else range(local - 1, 0, -1)
        for step, hop in enumerate(hops):
            for g in range(self.n):
                m, j = divmod(g, local)
                if gather:  # down the machine by the stride, as the reductions go
                    src, dst = m * local + (j - (hop - 1) * stride) % local, m * local + (j - hop * stride) % local
                else:
                    src, dst = m * local + (j + hop * stride) % local, m * local + (j + (hop - 1) * stride) % local
                # the lane's previous call, else (a lane's first call) the previous call of any lane: the
                # reductions, all ready at once, take the lanes in order instead of sharing the GPUs' links
                before = last_in[src] if last_in[src] >= 0 else self.any_last_in[src]
                after = (before,) if step == 0 and before >= 0 else ()
                if step == local - 2:
                    ends.append((dst, len(out)))
                last_out[src] = len(out)
                out.append(Transfer(src, dst, (block_of[g],), self.routes(src, dst), op, channel, after))
        for dst, index in ends:
            last_in[dst] = self.any_last_in[dst] = index
        return last_out


def _rail(g: int, dst: int, block: int, streams: int, first: int, routes: _Routes, op: Op, sent: list[int],
          out: list[Transfer], chained: int = -1) -> None:
    """GPU g's next group message: on stream k mod ``streams`` (channels ``first``..), after its stream's previous
    one (and after ``chained``, a chain hop it sent, when >= 0)."""
    k = len(sent)
    after = (sent[k - streams],) if k >= streams else ()
    if chained >= 0:
        after = (*after, chained)
    sent.append(len(out))
    out.append(Transfer(g, dst, (block,), routes(g, dst), op, first + k % streams, after))


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

    def source(self, df: int, dg: int) -> int:
        """Lane key of the blocks of the machine df groups on and dg machines back in the group."""
        return (df % self.groups) * self.size + dg % self.size

    @cached_property
    def all(self) -> list[tuple[int, int, int]]:
        """(f, g, i) of every GPU, in GPU order."""
        return [self.coords(x) for x in range(self.n)]


def _allgather(grid: _Grid, chains: _Chains, streams: int, routes: _Routes, out: list[Transfer]) -> None:
    """Append the Allgather's transfers to ``out`` (chunk = block = rank; ``after`` indexes ``out``)."""
    n, far, size = grid.n, grid.groups, grid.size
    first = chains.channels  # the rail channels follow the chains'
    chains.run(Op.COPY, list(range(n)), grid.source(0, 0))  # each machine's own blocks
    sent: list[list[int]] = [[] for _ in range(n)]  # the schedule index of each GPU's group messages
    for r in range(size):
        if r <= size - 2:  # own block to the group's machine r + 1 ahead
            for x in range(n):
                f, g, i = grid.coords(x)
                _rail(x, grid.gpu(f, g + r + 1, i), x, streams, first, routes, Op.COPY, sent[x], out)
        for x in range(n):  # the block of the machine r behind (own at r = 0) to the same machine of every other group
            f, g, i = grid.coords(x)
            block = grid.gpu(f, g - r, i)
            for df in range(1, far):
                dst = grid.gpu(f + df, g, i)
                out.append(Transfer(x, dst, (block,), routes(x, dst), Op.COPY, first + streams))
        for df in range(1, far):  # what arrived goes round the machine
            chains.run(Op.COPY, [grid.gpu(f - df, g - r, i) for f, g, i in grid.all], grid.source(-df, r))
        if r <= size - 2:
            chains.run(Op.COPY, [grid.gpu(f, g - r - 1, i) for f, g, i in grid.all], grid.source(0, r + 1))


def _reducescatter(grid: _Grid, chains: _Chains, streams: int, routes: _Routes, out: list[Transfer]) -> None:
    """Append the ReduceScatter's transfers: the mirror image of :func:`_allgather` (chains reduce each block onto
    its rail GPU before it leaves the machine, messages reduce into their destination, rounds in reverse)."""
    n, far, size = grid.n, grid.groups, grid.size
    first = chains.channels
    sent: list[list[int]] = [[] for _ in range(n)]
    for r in range(size - 1, -1, -1):
        # reduce over the machine what leaves it this round; remember each GPU's last hop out per call
        far_out = [chains.run(Op.REDUCE, [grid.gpu(f + df, g - r, i) for f, g, i in grid.all], grid.source(df, r))
                   if df else [] for df in range(far)]
        group_out = chains.run(Op.REDUCE, [grid.gpu(f, g - r - 1, i) for f, g, i in grid.all],
                               grid.source(0, r + 1)) if r <= size - 2 else []
        for x in range(n):
            f, g, i = grid.coords(x)
            for df in range(1, far):
                dst, block = grid.gpu(f + df, g, i), grid.gpu(f + df, g - r, i)
                after = (far_out[df][x],) if far_out[df][x] >= 0 else ()
                out.append(Transfer(x, dst, (block,), routes(x, dst), Op.REDUCE, first + streams, after))
        if r <= size - 2:  # after x's last chain hop out: its threadblock forwards that one before the last receive
            for x in range(n):
                f, g, i = grid.coords(x)
                block = grid.gpu(f, g - r - 1, i)
                _rail(x, block, block, streams, first, routes, Op.REDUCE, sent[x], out, group_out[x])
    chains.run(Op.REDUCE, list(range(n)), grid.source(0, 0))  # each machine's own blocks last


GROUP_MACHINES = 16
"""Machines per far group at most (:func:`far_groups`): larger groups pipeline better (measured at 64 machines:
95.8% of the bound with 4 groups of 16 against 92.8% with 8 of 8), smaller ones give a GPU fewer rail peers."""


def far_groups(machines: int) -> int:
    """The default number of far groups: the fewest that divide ``machines`` into groups of at most
    :data:`GROUP_MACHINES`."""
    return next(d for d in range(1, machines + 1) if machines % d == 0 and machines // d <= GROUP_MACHINES)


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
    sources = [x for r in range(grid.size - 1, -1, -1)  # the reduction's order of calls
               for x in [grid.source(df, r) for df in range(1, groups)] + ([grid.source(0, r + 1)]
                                                                            if r <= grid.size - 2 else [])]
    sources.append(grid.source(0, 0))
    chains = _Chains(local, machines, routes, 2 if kind is CollectiveKind.ALLREDUCE else 1, sources, transfers)
    if kind is not CollectiveKind.ALLGATHER:
        _reducescatter(grid, chains, streams, routes, transfers)
    if kind is not CollectiveKind.REDUCESCATTER:
        _allgather(grid, chains, streams, routes, transfers)
    name = "rail-stream"
    return Schedule(Collective(kind, topology.num_gpus, 1), tuple(transfers), name=name, topology=topology.name,
                    notes={"algorithm": name, "channels": chains.channels + streams + (groups > 1), "pieces": 1,
                           "parameters": {"streams": streams, "groups": groups, "local": local, "machines": machines},
                           "description": f"rail streams ({streams} per GPU, {groups} far groups of "
                                          f"{grid.size} machines) across {machines} machines, chains of {local} "
                                          "GPUs inside each"})
