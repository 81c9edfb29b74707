"""Simulate a :class:`~taccl_py.compact.CompactSchedule` with the compiled kernel: the same result, far faster.

:func:`simulate_compact` gives the :class:`~taccl_py.simulator.SimResult` that
:func:`taccl_py.simulator.simulate` gives the same schedule (times, verdict, message,
link figures, critical path), computed by :mod:`taccl_py.fast_kernel`, which runs the
same steps over arrays. It covers schedules without exchanges and network groups on
topologies without endpoint limits (GPU memory, channels); :func:`fast_error` says
why another one is not covered, and :func:`simulate_compact` then runs the Python
simulator on it. The first call in a fresh environment compiles the kernel (numba
caches it next to the module).

The post-condition is checked over arrays: a single rank's contribution is mask id
``rank + 1``, and a reduction's union always has two ranks or more, so a copy-only
collective is complete exactly where the id is its source's, a reduction where the
mask's row has every bit.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.compact import CompactSchedule, compact, compact_error
from taccl_py.endpoint import EndpointMode
from taccl_py.fluid import binding_resources
from taccl_py.gc_pause import paused_gc
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimOptions, SimResult, simulate
from taccl_py.topology import Topology
from taccl_py.units import format_bytes, gbps_to_bytes_per_us

__all__ = ["DENSE_KEYS_PER_SLOT", "FAST_MIN_TRANSFERS", "FULL_BYTES_PER_PAIR", "FULL_BYTES_PER_ROUTE",
           "FULL_BYTES_PER_TRANSFER", "LOAD_MIN_TRANSFERS", "POSTED_MIN_TRANSFERS", "WARM_MIN_TRANSFERS",
           "fast_error", "full_simulation_bytes", "full_simulation_error", "kernel_covers", "kernel_ready",
           "numbered_pairs", "runs_compiled", "simulate_compact", "simulate_large"]

FAST_MIN_TRANSFERS = 100_000
"""From this many transfers :func:`simulate_large` uses the compiled kernel (below it, Python is as quick as the
kernel's start-up: compiling it, the first time, takes about a minute of CPU; loading it from numba's cache about
half a second)."""

WARM_MIN_TRANSFERS = 500
"""Once the kernel is ready without compiling (:func:`kernel_ready`), :func:`simulate_large` uses it from this many
transfers: each run is then 2 to 6 times quicker than in Python (measured 2026-11-29, :func:`simulate` against
:func:`simulate_compact` on the ring and tree baselines of ``dgx-a100`` and ``dgx-a100x2`` under Simple's costs:
3.9 against 8.9 ms at 896 transfers, 34 against 210 ms at 3,840; at 112, 1.2 against 1.6 ms), which is what a
command running hundreds of them (``taccl profile check``, ``fit``) feels."""


POSTED_MIN_TRANSFERS = 1_000
"""With a runtime's proxy posts (a rank's transfers across machines start a post apart) the Python simulator
re-solves the rates at many more instants: from this many transfers :func:`simulate_large` uses the compiled kernel
(direct Allgather under Simple's costs at 1 GB, once the kernel is loaded: 32 GPUs, 992 transfers, 0.06 s in
Python and 0.02 s compiled; 64 GPUs, 4,032 transfers, 0.39 s and 0.04 s; measured 2026-11-28 beside a benchmark
on the other CPU. While posts were made one transfer at a time, 0.30 / 0.03 s and 7.1 / 0.5 s)."""

FULL_BYTES_PER_TRANSFER = 160
"""At least this much memory per transfer of a full compiled simulation: the schedule's arrays, the kernel's
dependency lists and state, and the result's per-transfer times (measured: about 185 bytes on a 1,024-GPU ring,
before each chunk slot carried the numbers of the two pairs it touches, 8 bytes more: `taccl simulate -t
dgx-a100x128 -c allgather -s 1GB --algorithm ring` peaked at 2,711 MiB on 2026-11-28, 2,600 in the scaling
benchmark before)."""

FULL_BYTES_PER_ROUTE = 1_000
"""And per distinct route, while the tables are built (each route's resources, latency and posts as Python lists,
the binding rule's sets: :func:`taccl_py.fluid.binding_resources`); a ring has a few routes, a direct Alltoall one
per pair of GPUs (measured: 1.4 KB per transfer, all told, on 512 GPUs, 2026-11-28)."""

FULL_BYTES_PER_PAIR = 12
"""And per (rank, chunk) pair the kernel numbers (:func:`numbered_pairs`): the dependency builder's last writer and
readers' list ends, three int32 (the mask id, int32, comes once they are freed); numbered sparsely, 8 more (the
pair's key, int64)."""


def _read_int(path: str, field_name: str | None = None) -> int | None:
    """An integer file (or the ``field_name:`` line of one, in kB), None when absent or unlimited."""
    try:
        with open(path, encoding="ascii") as f:
            if field_name is None:
                text = f.read().strip()
                return None if text == "max" else int(text)
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _available_memory_bytes() -> int | None:
    """The memory this process can still get (Linux: MemAvailable, capped by its cgroup v2 limit as containers
    and batch schedulers set it); None where unknown."""
    free = _read_int("/proc/meminfo", "MemAvailable")
    limit, used = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
    if limit is not None and used is not None:
        free = limit - used if free is None else min(free, limit - used)
    return free


def full_simulation_bytes(schedule: Schedule | CompactSchedule) -> int:
    """The memory a full compiled simulation of ``schedule`` needs at least: per transfer, distinct route and
    numbered pair."""
    if isinstance(schedule, CompactSchedule):
        transfers, routes, slots = len(schedule), len(schedule.routes), len(schedule.chunks)
    else:
        transfers, slots, distinct = len(schedule.transfers), 0, set()
        for t in schedule.transfers:
            slots += len(t.chunks)
            distinct.add(t.route)
        routes = len(distinct)
    pairs, sparse = numbered_pairs(schedule.collective, slots)
    return (transfers * FULL_BYTES_PER_TRANSFER + routes * FULL_BYTES_PER_ROUTE
            + pairs * (FULL_BYTES_PER_PAIR + (8 if sparse else 0)))


def full_simulation_error(transfers: int, need_bytes: int | None = None) -> str | None:
    """Why simulating ``transfers`` transfers in full cannot fit in memory now (None: it can, or it is unknown);
    ``need_bytes`` what that takes (:func:`full_simulation_bytes`; default: :data:`FULL_BYTES_PER_TRANSFER` each,
    as for a ring, whose routes and pairs are few)."""
    need = transfers * FULL_BYTES_PER_TRANSFER if need_bytes is None else need_bytes
    available = _available_memory_bytes()
    if available is None or need <= available:
        return None
    return (f"simulating its {transfers:,} transfers in full needs at least {format_bytes(need)} of memory, more "
            f"than the {format_bytes(max(available, 0))} available")


def _kernel_options(options: SimOptions) -> bool:
    """The options the kernel covers: a step overhead and a runtime's protocol costs (per-route latency,
    link capacities and a launch time, :class:`taccl_py.runtime.TransferCosts`)."""
    return replace(options, step_overhead_us=0.0, endpoint=EndpointMode.GPU, costs=None) == SimOptions()


def fast_error(schedule: CompactSchedule, topology: Topology, options: SimOptions | None = None) -> str | None:
    """Why the compiled kernel does not cover this run (None: it does)."""
    if options is not None and not _kernel_options(options):
        return "simulator options other than the step overhead and a runtime's costs are simulated in Python only"
    if topology.has_endpoint_limits:
        return "GPU memory or channels are declared (endpoint resources are simulated in Python only)"
    if topology.store_and_forward:
        return "store-and-forward switches (transfers relayed hop by hop are simulated in Python only)"
    if numbered_pairs(schedule.collective, len(schedule.chunks))[0] > 2**31:
        return "more (rank, chunk) pairs than the kernel indexes"
    return None


def _describe(schedule: CompactSchedule, i: int) -> str:
    t = schedule.transfer(i)
    return f"transfer {i} (rank {t.src} -> rank {t.dst}, chunks {list(t.chunks)})"


def _mask_ranks(mask: int) -> list[int]:
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def _row_int(words: np.ndarray, row: int) -> int:
    return int.from_bytes(np.ascontiguousarray(words[row]).astype("<u8").tobytes(), "little")


DENSE_KEYS_PER_SLOT = 4
"""The kernel numbers every (rank, chunk) pair (``rank * num_chunks + chunk``) unless that is more than this many per
pair a run can touch (the chunk slots' reads and writes, the collective's start and its post-condition, counted
with repeats): an Alltoall's n^2 chunks on each of its n ranks are n^3 pairs, of which a direct Alltoall touches
2 n^2 - n distinct ones (on 1,024 GPUs: 1.07 billion, 12.9 GB of the dependency builder's arrays, against 2.1
million). Then only the pairs it can touch are numbered (:class:`_Keys`)."""


@dataclass(frozen=True)
class _Keys:
    """The (rank, chunk) pairs the kernel keeps a mask id for, numbered 0..size-1: every pair, numbered by its
    key ``rank * num_chunks + chunk`` (``live`` None), or the sorted keys ``live``, each numbered by its position."""

    live: np.ndarray | None
    size: int

    def number(self, keys: np.ndarray) -> np.ndarray:
        """The numbers of ``keys`` (int64), each of which must be in the space."""
        if self.live is None:
            return keys
        at = np.searchsorted(self.live, keys)
        if len(at) and (int(at.max()) >= len(self.live) or not np.array_equal(self.live[at], keys)):
            raise ValueError("a (rank, chunk) key outside the numbered pairs")  # a bug in _key_space, not input
        return at


def _initial_keys(coll: Collective) -> tuple[np.ndarray | None, np.ndarray]:
    """``Collective.initial`` as (keys, mask id of each); keys None: every pair, in key order."""
    n, c, nc = coll.num_ranks, coll.chunk_factor, coll.num_chunks
    ranks = np.arange(n, dtype=np.int64)
    if coll.kind is CollectiveKind.ALLGATHER:
        keys = (ranks * nc + ranks * c)[:, None] + np.arange(c)
        return keys.ravel(), np.repeat(ranks + 1, c)
    if coll.kind is CollectiveKind.ALLTOALL:
        keys = (ranks * nc + ranks * n * c)[:, None] + np.arange(n * c)
        return keys.ravel(), np.repeat(ranks + 1, n * c)
    if coll.kind is CollectiveKind.BROADCAST:
        return coll.root * nc + np.arange(c, dtype=np.int64), np.full(c, coll.root + 1, np.int64)
    return None, np.repeat(ranks + 1, nc)


def _required_ranks(coll: Collective) -> np.ndarray | None:
    """The rank that must end with each chunk (None: every rank ends with every chunk)."""
    n, c, nc = coll.num_ranks, coll.chunk_factor, coll.num_chunks
    chunk = np.arange(nc, dtype=np.int64)
    if coll.kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE, CollectiveKind.BROADCAST):
        return None
    if coll.kind is CollectiveKind.ALLTOALL:
        return (chunk // c) % n
    if coll.kind is CollectiveKind.REDUCESCATTER:
        return chunk // c
    return np.full(nc, coll.root, np.int64)


def _slot_keys(schedule: CompactSchedule, ranks: np.ndarray) -> np.ndarray:
    """The key each chunk slot touches at its transfer's rank in ``ranks`` (``src``: what it reads, ``dst``: what
    it writes); built in place, one int64 per slot at a time."""
    keys = np.repeat(ranks.astype(np.int64), np.diff(schedule.chunk_ptr))
    keys *= schedule.collective.num_chunks
    keys += schedule.chunks
    return keys


def numbered_pairs(collective: Collective, slots: int) -> tuple[int, bool]:
    """How many (rank, chunk) pairs the kernel numbers for ``slots`` chunk slots of ``collective`` (at most: the
    pairs touched are counted with repeats), and whether it numbers only those (:data:`DENSE_KEYS_PER_SLOT`).

    Only an Alltoall's pairs can be far more than it touches: every other collective starts or ends with (nearly)
    every pair holding data."""
    dense = collective.num_ranks * collective.num_chunks
    if collective.kind is not CollectiveKind.ALLTOALL:
        return dense, False
    touched = 2 * slots + 2 * collective.num_chunks  # the slots' reads and writes, the start and the end
    return (dense, False) if dense <= DENSE_KEYS_PER_SLOT * touched else (touched, True)


def _key_space(schedule: CompactSchedule) -> _Keys:
    """Every pair, or the pairs the run can touch where that is far fewer (:func:`numbered_pairs`)."""
    coll = schedule.collective
    count, sparse = numbered_pairs(coll, len(schedule.chunks))
    initial, _ = _initial_keys(coll)
    required = _required_ranks(coll)
    if not sparse or initial is None or required is None:
        return _Keys(None, count)
    nc = coll.num_chunks
    live = np.unique(np.concatenate([_slot_keys(schedule, schedule.src), _slot_keys(schedule, schedule.dst), initial,
                                     required * nc + np.arange(nc, dtype=np.int64)]))
    return _Keys(live, len(live))


def _initial(schedule: CompactSchedule, keys: _Keys) -> np.ndarray:
    """Mask id per numbered (rank, chunk) pair at the start: ``Collective.initial`` as arrays."""
    state = np.zeros(keys.size, np.int32)
    where, ids = _initial_keys(schedule.collective)
    if where is None:  # every pair starts with a mask: every pair is numbered (_key_space)
        state[:] = ids
    else:
        state[keys.number(where)] = ids
    return state


def _postcondition(schedule: CompactSchedule, state: np.ndarray, words: np.ndarray, keys: _Keys) -> str | None:
    """The first (rank, chunk) of ``Collective.required`` without its complete contribution set (None: all do)."""
    coll = schedule.collective
    n, c, nc = coll.num_ranks, coll.chunk_factor, coll.num_chunks
    chunk = np.arange(nc, dtype=np.int64)
    rank_of = _required_ranks(coll)
    # every rank, every chunk, rank-major (every pair is numbered), or the rank each chunk must end at
    have = state.reshape(n, nc) if rank_of is None else state[keys.number(rank_of * nc + chunk)][None, :]
    if coll.is_reduction:
        full = np.zeros(words.shape[1], np.uint64)
        for r in range(n):
            full[r // 64] |= np.uint64(1) << np.uint64(r % 64)
        complete = np.array([i for i in np.unique(have) if i > 0 and np.array_equal(words[i], full)], np.int64)
        bad = ~np.isin(have, complete)
    else:
        if coll.kind is CollectiveKind.ALLTOALL:
            source = chunk // (n * c)
        elif coll.kind is CollectiveKind.BROADCAST:
            source = np.full(nc, coll.root, np.int64)
        else:
            source = chunk // c
        bad = have != (source + 1)[None, :]
    hit = np.flatnonzero(bad)
    if not len(hit):
        return None
    row, x = divmod(int(hit[0]), bad.shape[1])
    r = row if rank_of is None else int(rank_of[x])
    mid = int(have[row, x])
    if mid == 0:
        why = f"rank {r} never receives {coll.describe_chunk(x)}"
    elif coll.is_reduction:
        missing = _mask_ranks(coll.complete_mask(x) & ~_row_int(words, mid))
        why = (f"rank {r} ends with {coll.describe_chunk(x)} missing the contribution of "
               f"rank(s) {missing[:8]}{'...' if len(missing) > 8 else ''}")
    else:
        why = f"rank {r} ends with the wrong data for {coll.describe_chunk(x)}"
    return f"post-condition violated: {why}"


def _critical_path(commit_at: np.ndarray, start_cause: np.ndarray, commit_cause: np.ndarray) -> tuple[int, ...]:
    if not len(commit_at):
        return ()
    current = int(np.argmax(commit_at))
    path: list[int] = []
    seen: set[int] = set()
    while current >= 0 and current not in seen:
        seen.add(current)
        path.append(current)
        cause = int(commit_cause[current])
        current = cause if cause >= 0 and cause != current else int(start_cause[current])
    return tuple(reversed(path))


def _deadlock_message(schedule: CompactSchedule, start_at: np.ndarray, commit_at: np.ndarray,
                      conn_prev: np.ndarray) -> str:
    never_started = np.flatnonzero(np.isnan(start_at))
    stuck = never_started if len(never_started) else np.flatnonzero(np.isnan(commit_at))
    first = int(stuck[0])
    t = schedule.transfer(first)
    waits = [a for a in t.after if math.isnan(commit_at[a])]
    prev = int(conn_prev[first])
    if prev >= 0 and math.isnan(commit_at[prev]):
        waits.append(prev)
    detail = f"; it waits for transfer(s) {sorted(set(waits))[:5]}" if waits else ""
    return (f"deadlock: {len(stuck)} transfer(s) can never {'start' if len(never_started) else 'commit'}, "
            f"e.g. {_describe(schedule, first)}{detail}")


def _connections(schedule: CompactSchedule) -> tuple[np.ndarray, np.ndarray]:
    """(next, previous) transfer on the same (src, dst, channel) connection, in program order (-1: none)."""
    count = len(schedule)
    n = schedule.collective.num_ranks
    width = int(schedule.channel.max()) + 1 if count else 1
    key = (schedule.src.astype(np.int64) * n + schedule.dst) * width + schedule.channel
    order = np.argsort(key, kind="stable").astype(np.int32)
    key = key[order]
    same = key[1:] == key[:-1]
    del key
    nxt = np.full(count, -1, np.int32)
    prev = np.full(count, -1, np.int32)
    first, second = order[:-1][same], order[1:][same]
    nxt[first] = second
    prev[second] = first
    return nxt, prev


def simulate_compact(topology: Topology, schedule: CompactSchedule, size_bytes: float,
                     options: SimOptions | None = None) -> SimResult:
    """:func:`taccl_py.simulator.simulate` for a compact schedule (see the module)."""
    options = options or SimOptions()
    if fast_error(schedule, topology, options):
        return simulate(topology, schedule.to_schedule(), size_bytes, options)
    with paused_gc():
        return _simulate(topology, schedule, size_bytes, options)


def simulate_large(topology: Topology, schedule: Schedule, size_bytes: float,
                   options: SimOptions | None = None) -> SimResult:
    """:func:`taccl_py.simulator.simulate`, through the compiled kernel for a large schedule it covers.

    The result is the same either way; from :data:`FAST_MIN_TRANSFERS` transfers (:data:`POSTED_MIN_TRANSFERS`
    under costs with proxy posts, :data:`WARM_MIN_TRANSFERS` once the kernel is ready: :func:`kernel_ready`),
    without exchanges, network groups, endpoint limits or options other than the step overhead and a runtime's
    costs, the schedule is turned into arrays (:func:`taccl_py.compact.compact`) and run by
    :mod:`taccl_py.fast_kernel`.
    """
    options = options or SimOptions()
    compiled, covered = _kernel_choice(topology, schedule, options)
    if compiled:
        return simulate_compact(topology, compact(schedule), size_bytes, options)
    if covered:
        _in_python[0] += len(schedule.transfers)  # what the kernel would have run, once loaded
    return simulate(topology, schedule, size_bytes, options)


def runs_compiled(topology: Topology, schedule: Schedule | CompactSchedule, options: SimOptions) -> bool:
    """Whether :func:`simulate_large` (a schedule) or :func:`simulate_compact` (arrays) runs the compiled kernel."""
    if isinstance(schedule, CompactSchedule):
        return fast_error(schedule, topology, options) is None
    return _kernel_choice(topology, schedule, options)[0]


def _kernel_choice(topology: Topology, schedule: Schedule, options: SimOptions) -> tuple[bool, bool]:
    """Whether :func:`simulate_large` runs ``schedule`` in the kernel, and whether the kernel would once ready
    (it covers the run, large or of :data:`WARM_MIN_TRANSFERS` transfers or more)."""
    count = len(schedule.transfers)
    posted = options.costs is not None and options.costs.post_us > 0
    large = count >= (POSTED_MIN_TRANSFERS if posted else FAST_MIN_TRANSFERS)
    if not (large or count >= WARM_MIN_TRANSFERS) or not kernel_covers(topology, schedule, options):
        return False, False
    return large or kernel_ready(count), True


def kernel_covers(topology: Topology, schedule: Schedule, options: SimOptions) -> bool:
    """Whether the kernel can run this schedule at all, whatever its size: no exchanges or network groups, no
    endpoint limits or store-and-forward switches, no option but the step overhead and a runtime's costs."""
    return not (topology.has_endpoint_limits or topology.store_and_forward or not _kernel_options(options)
                or any(t.exchange is not None or t.group is not None for t in schedule.transfers))


LOAD_MIN_TRANSFERS = 20_000
"""Loading the kernel from numba's cache takes about half a second (numba's import with it): :func:`kernel_ready`
has it loaded for a run of this many transfers, or once this process has simulated as many in Python that the
kernel could have run (a check or fit of hundreds of small runs), not for a single small run (``taccl simulate``
of 3,840 transfers: 0.2 s in Python)."""

_in_python = [0]  # transfers simulate_large ran in Python that the kernel covers, from WARM_MIN_TRANSFERS each
_kernel_on_disk: list[bool] = []  # numba's cache, looked at once per process


def kernel_ready(transfers: int = 0) -> bool:
    """Whether the compiled simulator runs, for a run of ``transfers``, without being compiled first: it is loaded
    in this process, or an earlier one compiled it into numba's cache (any compiled run, or ``python -m
    taccl_py.warmup``) and it is worth loading (:data:`LOAD_MIN_TRANSFERS`)."""
    loaded = sys.modules.get("taccl_py.fast_kernel")
    if loaded is not None and loaded.run.signatures:
        return True
    if transfers + _in_python[0] < LOAD_MIN_TRANSFERS:
        return False
    if not _kernel_on_disk:
        from taccl_py import fast_kernel

        _kernel_on_disk.append(_in_numba_cache(fast_kernel.run))
    return _kernel_on_disk[0]


def _in_numba_cache(kernel: Any) -> bool:
    """Whether numba's cache holds a compiled version of ``kernel`` for its current source. numba has no public
    call for this: its cache index is read as numba reads it (empty when the source changed since); a numba that
    keeps it elsewhere reads as "not cached", which only keeps the Python simulator below
    :data:`FAST_MIN_TRANSFERS` (the tests check the answer is right on the numba installed)."""
    try:
        return bool(kernel._cache._cache_file._load_index())
    except Exception:  # numba's internals: any failure means "not known to be cached"
        return False


def _simulate(topology: Topology, schedule: CompactSchedule, size_bytes: float, options: SimOptions) -> SimResult:
    from taccl_py import fast_kernel

    coll = schedule.collective
    count = len(schedule)
    problem = compact_error(schedule, topology)
    links = len(topology.links)
    if problem:
        nan = np.full(count, math.nan)
        empty = (0.0,) * links
        return SimResult(correct=False, error=problem, time_us=None, size_bytes=size_bytes, collective=coll,
                         start_us=nan, arrive_us=nan.copy(), commit_us=nan.copy(), link_busy_us=empty,
                         link_bytes=empty, critical_path=())
    n = coll.num_ranks
    keys = _key_space(schedule)
    fk = fast_kernel
    no_after = np.zeros(count + 1, np.int64)
    after_ptr = schedule.after_ptr if schedule.after_ptr is not None else no_after
    after = schedule.after if schedule.after is not None else np.zeros(0, np.int32)
    cs = np.zeros((4, len(schedule.chunks)), np.int32)
    cs[fk.CS_CHUNK] = schedule.chunks
    cs[fk.CS_READ] = keys.number(_slot_keys(schedule, schedule.src))
    cs[fk.CS_WRITE] = keys.number(_slot_keys(schedule, schedule.dst))
    sp, cp, soc_ptr, soc, coc_ptr, coc, coa_ptr, coa = fk.build_dependencies(
        cs, schedule.chunk_ptr, after_ptr, after, keys.size)
    del no_after
    conn_next, conn_prev = _connections(schedule)
    t = np.empty((10, count), np.int32)
    t[fk.T_SRC], t[fk.T_DST], t[fk.T_ROUTE] = schedule.src, schedule.dst, schedule.route
    t[fk.T_SP] = sp
    t[fk.T_SP] += conn_prev >= 0
    t[fk.T_CP] = cp
    del sp, cp
    t[fk.T_NEXT] = conn_next
    del conn_next

    t[fk.T_SC] = -1
    t[fk.T_CC] = -1
    t[fk.T_RED] = schedule.reduce
    t[fk.T_ACT] = 0
    f = np.full((3, count), math.nan)
    ep = np.empty((3, count + 1), np.int32)
    ep[fk.EP_SOC] = soc_ptr
    ep[fk.EP_COC] = coc_ptr + len(soc)
    ep[fk.EP_COA] = coa_ptr + len(soc) + len(coc)
    ed = np.concatenate([soc, coc, coa]).astype(np.int32)
    del soc_ptr, coc_ptr, coa_ptr, soc, coc, coa
    overhead, costs = options.step_overhead_us, options.costs
    latency = np.array([(topology.route_latency(r) if costs is None else costs.route_latency_us(topology, r))
                        + overhead for r in schedule.routes], np.float64)
    chunk_bytes = coll.chunk_bytes(size_bytes)
    most = int(np.diff(schedule.chunk_ptr).max()) if count else 0
    bytes_by_count = np.array([k * chunk_bytes for k in range(most + 1)], np.float64)
    not_before = schedule.not_before_us if schedule.not_before_us is not None else np.zeros(0)
    capacity = np.array([gbps_to_bytes_per_us(link.bandwidth) for link in topology.links] if costs is None
                        else costs.link_capacity_us(topology), np.float64)
    launch_us = 0.0 if costs is None else costs.launch_us
    route_posts = np.array([costs is not None and costs.posts(topology, r) for r in schedule.routes], np.bool_)
    res_ptr = np.zeros(len(schedule.routes) + 1, np.int64)
    res_ptr[1:] = np.cumsum([len(r) for r in schedule.routes])
    res = np.array([li for r in schedule.routes for li in r], np.int64)
    route_count = np.bincount(schedule.route, minlength=len(schedule.routes)).astype(np.int64)
    width = (n + 63) // 64
    rows = n + 1 + max(64, min(int(schedule.reduce.sum()), 1 << 16))
    words = np.zeros((rows, width), np.uint64)
    ranks = np.arange(n)
    words[ranks + 1, ranks // 64] = np.uint64(1) << (ranks % 64).astype(np.uint64)
    state = _initial(schedule, keys)
    busy_us, carried, cnt, words, fault_time = fk.run(
        t, f, schedule.chunk_ptr, cs, ep, ed, not_before, bytes_by_count, capacity, latency, res_ptr, res,
        route_count, state, words, n, route_posts, 0.0 if costs is None else costs.post_us,
        np.zeros(max(n, topology.num_gpus)), np.array(binding_resources(capacity.tolist(), schedule.routes), np.bool_),
        fk.QUEUE_PRUNE_FROM)
    start_at, arrive_at, commit_at = f[fk.F_START], f[fk.F_ARRIVE], f[fk.F_COMMIT]
    start_cause, commit_cause = t[fk.T_SC], t[fk.T_CC]

    def result(error: str | None, path: tuple[int, ...] = (), stuck: tuple[int, ...] = ()) -> SimResult:
        return SimResult(correct=error is None, error=error,
                         time_us=(float(commit_at.max()) if count else 0.0) + launch_us if error is None else None,
                         size_bytes=size_bytes, collective=coll, start_us=start_at, arrive_us=arrive_at,
                         commit_us=commit_at, link_busy_us=tuple(float(x) for x in busy_us[:links]),
                         link_bytes=tuple(float(x) for x in carried[:links]), critical_path=path, stuck=stuck,
                         notes={"simulator": "compiled", "events": int(cnt[fk.EVENTS]) - 1,
                                "re_solves": int(cnt[fk.SOLVES]), "queue_peak": int(cnt[fk.QUEUE_PEAK]),
                                "void_events_dropped": int(cnt[fk.PRUNED])})

    fault = int(cnt[fast_kernel.FAULT_KIND])
    if fault:
        i, x = int(cnt[fast_kernel.FAULT_TRANSFER]), int(cnt[fast_kernel.FAULT_CHUNK])
        faulty = schedule.transfer(i)
        if fault == fast_kernel.FAULT_MISSING:
            return result(f"{_describe(schedule, i)} starts at {float(fault_time):.6g} us but rank {faulty.src} does "
                          f"not hold {coll.describe_chunk(x)}")
        held = _row_int(words, int(cnt[fast_kernel.FAULT_HELD]))
        mask = _row_int(words, int(cnt[fast_kernel.FAULT_MASK]))
        return result(f"{_describe(schedule, i)} reduces the contribution of rank(s) {_mask_ranks(held & mask)} into "
                      f"{coll.describe_chunk(x)} at rank {faulty.dst} a second time")
    if int(cnt[fast_kernel.COMMITTED]) < count:
        return result(_deadlock_message(schedule, start_at, commit_at, conn_prev),
                      stuck=tuple(int(i) for i in np.flatnonzero(np.isnan(commit_at))))
    problem = _postcondition(schedule, state, words, keys)
    if problem:
        return result(problem)
    return result(None, path=_critical_path(commit_at, start_cause, commit_cause))
