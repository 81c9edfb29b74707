"""Static rules: what the runtime parsers enforce and what they silently get wrong.

Each check returns :class:`Violation` records naming rank, threadblock (its
``id``) and step (its position). Nothing here executes the program; see
:mod:`taccl_py.msccl.machine` for pairing, dependencies and deadlocks.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator

from taccl_py.msccl.ir import (
    DIALECTS,
    INT8_MAX,
    INT16_MAX,
    MAX_CHANNELS,
    MAX_CHILDREN,
    MAX_COUNT,
    MAX_NODES_PER_RANK,
    MAX_REDUCE_FUSION,
    MAX_TBS_PER_CHANNEL,
    PROTOCOLS,
    Buffer,
    Dialect,
    Gpu,
    Program,
    Step,
    StepType,
    Threadblock,
)
from taccl_py.msccl.report import Violation
from taccl_py.msccl.selection import (
    DEFAULT_TYPE_SIZE,
    band_sizes,
    runtime_selection,
    size_multiplier,
    smallest_selected_size,
)

__all__ = ["SELECTION_RULES", "check_header_rules", "check_rules"]

SELECTION_RULES = frozenset({"never-selected", "rarely-selected"})
"""Warnings (reported in ``notes``): the runtime falls back to its own algorithm at most sizes of the band."""

_MAX_PER_RULE = 20

Report = Callable[[str, str], Violation]
"""Builds a violation located at one step: ``report(rule, message)``."""


def check_rules(program: Program, dialect: str) -> list[Violation]:
    """Every static rule of ``dialect`` broken by ``program`` (at most 20 reports per rule)."""
    return _capped(_all_checks(program, DIALECTS[dialect]))


def check_header_rules(program: Program, dialect: str) -> list[Violation]:
    """:func:`check_rules` of a program whose GPUs, threadblocks, steps and connections break no rule.

    Only the tokenizer's findings and ``<algo>`` (its attributes and GPU count) are read.
    """
    return _capped(_header_checks(program, DIALECTS[dialect]))


def _capped(violations: Iterator[Violation]) -> list[Violation]:
    found: list[Violation] = []
    per_rule: Counter[str] = Counter()
    for v in violations:
        per_rule[v.rule] += 1
        if per_rule[v.rule] <= _MAX_PER_RULE:
            found.append(v)
    for rule, count in per_rule.items():
        if count > _MAX_PER_RULE:
            found.append(Violation(rule, f"... and {count - _MAX_PER_RULE} more violation(s) of this rule"))
    return found


def _all_checks(program: Program, spec: Dialect) -> Iterator[Violation]:
    yield from _header_checks(program, spec)
    yield from _check_gpus(program, spec)
    for gpu in program.gpus:
        yield from _check_threadblocks(program, spec, gpu)
        for tb in gpu.threadblocks:
            yield from _check_steps(program, spec, gpu, tb)
    yield from _check_connections(program)


def _header_checks(program: Program, spec: Dialect) -> Iterator[Violation]:
    for issue in program.source_issues:
        yield Violation(issue.rule, f"line {issue.line}: {issue.message}")
    yield from _check_algo(program, spec)
    yield from _check_selection(program, spec)


# ---------------------------------------------------------------------- algo
def _check_algo(program: Program, spec: Dialect) -> Iterator[Violation]:
    present = set(program.attributes)
    for name in spec.required_algo_attributes:
        if name not in present:
            extra = " (a v1 file: msccl-executor and RCCL need outofplace, minBytes and maxBytes)" if (
                spec.name == "v2" and name in ("outofplace", "minBytes", "maxBytes")) else ""
            yield Violation("missing-attribute", f"<algo> has no {name!r} attribute, which the {spec.name} "
                            f"parser requires{extra}")
    if program.coll not in spec.coll_names:
        hint = ""
        if program.coll == "reduce_scatter" and spec.name == "v2":
            hint = " (v2 spells it 'reducescatter')"
        elif program.coll == "reducescatter" and spec.name == "v1":
            hint = " (v1 spells it 'reduce_scatter')"
        yield Violation("unknown-collective", f"coll={program.coll!r} is not a collective of the {spec.name} "
                        f"parser{hint}")
    if program.proto not in PROTOCOLS:
        yield Violation("protocol", f"proto={program.proto!r} must be one of Simple, LL, LL128 (case-sensitive)")
    if program.nthreads is not None and (program.nthreads <= 0 or program.nthreads % 32):
        yield Violation("algo-attribute", f"nthreads={program.nthreads} must be a positive multiple of 32")
    if program.ngpus < 1:
        yield Violation("algo-attribute", f"ngpus={program.ngpus} must be >= 1")
    if program.nchunksperloop < 1:
        yield Violation("algo-attribute", f"nchunksperloop={program.nchunksperloop} must be >= 1")
    if not 1 <= program.nchannels <= MAX_CHANNELS:
        yield Violation("algo-attribute", f"nchannels={program.nchannels} must be in 1..{MAX_CHANNELS}")
    if spec.name == "v2" and program.outofplace is not None and not program.inplace and not program.outofplace:
        yield Violation("mode", "inplace=0 and outofplace=0: the runtime never selects this algorithm")
    lo, hi = program.min_bytes, program.max_bytes
    if lo is not None and hi is not None:
        if lo < 0 or hi < 0:
            yield Violation("size-range", f"minBytes={lo} and maxBytes={hi} must be >= 0")
        elif hi and lo > hi:
            yield Violation("size-range", f"minBytes={lo} > maxBytes={hi}: the runtime never selects this algorithm")
    if len(program.gpus) > MAX_CHILDREN:
        yield Violation("children-limit", f"<algo> has {len(program.gpus)} <gpu> children; the tokenizer keeps at "
                        f"most {MAX_CHILDREN}")


def _check_selection(program: Program, spec: Dialect) -> Iterator[Violation]:
    """Warn when the runtime's size rule picks the file at none, or fewer than half, of its band's power-of-two
    sizes (``count x sizeMultiplier`` must be a multiple of ``nchunksperloop``; 4-byte elements)."""
    c = program.nchunksperloop
    lo, hi = program.min_bytes, program.max_bytes
    if c < 1 or program.ngpus < 1 or (lo is not None and lo < 0) or (hi is not None and hi < 0):
        return
    sizes = band_sizes(program, spec.name)
    if not sizes:
        return
    picked = [size for size in sizes if runtime_selection(program, size, DEFAULT_TYPE_SIZE, spec.name).selected]
    if len(picked) * 2 >= len(sizes):
        return
    band = f"{sizes[0]}..{sizes[-1]} bytes" + (" (no upper limit; checked to 4 GiB)" if not hi else "")
    smallest = smallest_selected_size(program, DEFAULT_TYPE_SIZE, spec.name)
    if picked:
        yield Violation("rarely-selected", f"the runtime picks this file at only {len(picked)} of the {len(sizes)} "
                        f"power-of-two sizes of its band {band}, from {picked[0]} bytes on (count x sizeMultiplier "
                        f"must be a multiple of nchunksperloop={c}; 4-byte elements); at the others it silently "
                        "runs its own algorithm")
        return
    if smallest is not None:
        where = f"the smallest power-of-two size it would be picked at is {smallest} bytes, outside the band"
    else:
        odd = c // math.gcd(c, size_multiplier(program.coll, program.ngpus))
        while odd % 2 == 0:
            odd //= 2
        where = (f"it is picked at no power-of-two size: nchunksperloop={c} keeps the odd factor {odd} after "
                 "sizeMultiplier, and a power-of-two size holds a power-of-two element count")
    yield Violation("never-selected", f"the runtime never picks this file at a power-of-two size of its band "
                    f"{band} (count x sizeMultiplier must be a multiple of nchunksperloop={c}; 4-byte elements): "
                    f"{where}; it silently runs its own algorithm instead")


# ---------------------------------------------------------------------- gpus
def _check_gpus(program: Program, spec: Dialect) -> Iterator[Violation]:
    n = program.ngpus
    if len(program.gpus) != n:
        yield Violation("gpu-ids", f"ngpus={n} but the file has {len(program.gpus)} <gpu> element(s)")
    seen: set[int] = set()
    for gpu in program.gpus:
        if not 0 <= gpu.id < n:
            yield Violation("gpu-ids", f"<gpu id={gpu.id}> is not a rank in 0..{n - 1}", rank=gpu.id)
        elif gpu.id in seen:
            yield Violation("gpu-ids", f"two <gpu> elements have id {gpu.id}", rank=gpu.id)
        seen.add(gpu.id)
        for attr in ("i_chunks", "o_chunks", "s_chunks"):
            if getattr(gpu, attr) < 0:
                yield Violation("chunk-count", f"{attr}={getattr(gpu, attr)} must be >= 0", rank=gpu.id)
        c = program.nchunksperloop
        if spec.chunk_count_check:
            i_mult = n if program.coll == "allgather" else 1
            o_mult = n if program.coll == "reduce_scatter" else 1
            if gpu.i_chunks and gpu.i_chunks * i_mult != c:
                yield Violation("chunk-count", f"i_chunks={gpu.i_chunks}{f' x ngpus={n}' if i_mult > 1 else ''} "
                                f"must equal nchunksperloop={c} (v1 parser check)", rank=gpu.id)
            if gpu.o_chunks and gpu.o_chunks * o_mult != c:
                yield Violation("chunk-count", f"o_chunks={gpu.o_chunks}{f' x ngpus={n}' if o_mult > 1 else ''} "
                                f"must equal nchunksperloop={c} (v1 parser check)", rank=gpu.id)
        nodes = 1 + len(program.gpus) + len(gpu.threadblocks) + sum(len(tb.steps) for tb in gpu.threadblocks)
        if nodes > MAX_NODES_PER_RANK:
            yield Violation("node-limit", f"the runtime stores {nodes} XML nodes for this rank (at most "
                            f"{MAX_NODES_PER_RANK}: 1 + ngpus + its tbs + its steps)", rank=gpu.id)
        if len(gpu.threadblocks) > MAX_CHILDREN:
            yield Violation("children-limit", f"{len(gpu.threadblocks)} <tb> children (at most {MAX_CHILDREN})",
                            rank=gpu.id)


# -------------------------------------------------------------- threadblocks
def _check_threadblocks(program: Program, spec: Dialect, gpu: Gpu) -> Iterator[Violation]:
    r = gpu.id
    ids = Counter(tb.id for tb in gpu.threadblocks)
    for tb in gpu.threadblocks:
        if tb.id < 0:
            yield Violation("tb-ids", f"tb id {tb.id} must be >= 0", rank=r, tb=tb.id)
        elif tb.id >= spec.max_threadblocks:
            yield Violation("tb-limit", f"tb id {tb.id}: the {spec.name} runtime allows at most "
                            f"{spec.max_threadblocks} threadblocks per GPU", rank=r, tb=tb.id)
        if ids[tb.id] > 1:
            yield Violation("tb-ids", f"tb id {tb.id} is used by {ids[tb.id]} threadblocks", rank=r, tb=tb.id)
            ids[tb.id] = 1  # report once
        for role, peer in (("send", tb.send), ("recv", tb.recv)):
            if peer < -1 or peer == r or peer >= program.ngpus:
                why = "is the GPU itself" if peer == r else f"is not -1 or a rank in 0..{program.ngpus - 1}"
                yield Violation("peer", f"{role}={peer} {why}", rank=r, tb=tb.id)
        if not 0 <= tb.chan < MAX_CHANNELS:
            yield Violation("channel", f"chan={tb.chan} must be in 0..{MAX_CHANNELS - 1}", rank=r, tb=tb.id)
        elif tb.chan >= program.nchannels:
            yield Violation("channel", f"chan={tb.chan} is not below nchannels={program.nchannels}", rank=r,
                            tb=tb.id)
        if len(tb.steps) > spec.max_steps:
            yield Violation("step-limit", f"{len(tb.steps)} steps; the {spec.name} runtime allows at most "
                            f"{spec.max_steps} per threadblock", rank=r, tb=tb.id)
    present = sorted(i for i in ids if i >= 0)
    if present and present != list(range(len(present))):
        missing = next(i for i in range(len(present) + 1) if i not in ids)
        yield Violation("tb-ids", f"tb ids must be contiguous from 0; id {missing} is missing", rank=r)
    for role in ("send", "recv"):
        owners: dict[tuple[int, int], int] = {}
        per_channel: Counter[int] = Counter()
        for tb in gpu.threadblocks:
            peer = tb.send if role == "send" else tb.recv
            if peer < 0:
                continue
            per_channel[tb.chan] += 1
            key = (tb.chan, peer)
            if key in owners:
                yield Violation("duplicate-connection", f"tb {owners[key]} and tb {tb.id} both {role} "
                                f"{'to' if role == 'send' else 'from'} rank {peer} on channel {tb.chan}; one "
                                "connection per peer and channel", rank=r, tb=tb.id)
            else:
                owners[key] = tb.id
        for chan, count in sorted(per_channel.items()):
            if count > MAX_TBS_PER_CHANNEL:
                yield Violation("channel-peers", f"{count} threadblocks {role} on channel {chan} (at most "
                                f"{MAX_TBS_PER_CHANNEL})", rank=r)


# --------------------------------------------------------------------- steps
def _check_steps(program: Program, spec: Dialect, gpu: Gpu, tb: Threadblock) -> Iterator[Violation]:
    r, t = gpu.id, tb.id
    tbs_by_id = {x.id: x for x in gpu.threadblocks}
    pending_nop = False
    chain: tuple[Buffer, int, Buffer] | None = None
    chain_cnt = 0
    total_re = 0
    steps = tb.steps
    for pos, st in enumerate(steps):
        v = _reporter(r, t, pos)
        if st.index != pos:
            yield v("step-index", f"s={st.index} but the step is at position {pos}; dependencies count "
                    "positions, so s must equal the position")
        if st.hasdep not in (0, 1):
            yield v("hasdep", f"hasdep={st.hasdep} must be 0 or 1")
        if not -INT16_MAX - 1 <= st.srcoff <= INT16_MAX or not -INT16_MAX - 1 <= st.dstoff <= INT16_MAX:
            yield v("field-width", f"srcoff={st.srcoff}/dstoff={st.dstoff} do not fit the runtime's 16-bit fields")
        if st.depid > INT8_MAX or not -INT16_MAX - 1 <= st.deps <= INT16_MAX:
            yield v("field-width", f"depid={st.depid} must fit 8 bits (<= {INT8_MAX}) and deps={st.deps} 16 bits")
        if st.depid >= 0:
            yield from _check_dependency(st.depid, st.deps, tb, tbs_by_id, v)
        if st.type is StepType.NOP:
            if st.depid < 0:
                yield v("nop", "a nop without a dependency (depid=-1) shifts the runtime's step counter")
            pending_nop = True
            if pos == len(steps) - 1 or all(s.type is StepType.NOP for s in steps[pos + 1:]):
                yield v("nop", "a nop must be followed by a non-nop step that inherits its dependency")
            continue
        if st.type is StepType.RECV_REDUCE_ALIAS:
            yield v("ra-step", "type 'ra' is not a v2 step type and the v1 kernel exits the threadblock on it")
            pending_nop = False
            continue
        continuing = (st.type is StepType.REDUCE and chain == (st.dstbuf, st.dstoff, st.srcbuf) and st.depid < 0)
        if continuing and st.cnt != chain_cnt:
            yield v("re-fusion", f"this 're' fuses with the previous one (same dst and src buffer, no depid) but "
                    f"has cnt={st.cnt} instead of {chain_cnt}; the runtime uses the last cnt for all")
        if pending_nop and not continuing and st.depid < 0:
            yield v("dependency-carrier", "a step after nop(s) must itself have a dependency (depid >= 0); "
                    "the runtime rejects it otherwise")
        if not continuing:
            pending_nop = False
        if st.type is StepType.REDUCE:
            total_re += 1
            chain = None if (st.hasdep or total_re == MAX_REDUCE_FUSION) else (st.dstbuf, st.dstoff, st.srcbuf)
            chain_cnt = st.cnt
        else:
            chain = None
        if not 0 <= st.cnt < MAX_COUNT:
            yield v("count", f"cnt={st.cnt} must be in 0..{MAX_COUNT - 1}")
        elif st.cnt < 1:
            yield v("count", "cnt=0 on a data step moves nothing")
        if st.type.sends and tb.send < 0:
            yield v("missing-peer", f"a '{st.type.value}' step sends but the tb has send=-1")
        if st.type.receives and tb.recv < 0:
            yield v("missing-peer", f"a '{st.type.value}' step receives but the tb has recv=-1")
        yield from _check_offsets(gpu, st, v)


def _reporter(rank: int, tb: int, pos: int) -> Report:
    def report(rule: str, message: str) -> Violation:
        return Violation(rule, message, rank=rank, tb=tb, step=pos)

    return report


def _check_dependency(depid: int, deps: int, tb: Threadblock, tbs_by_id: dict[int, Threadblock],
                      make: Report) -> Iterator[Violation]:
    target = tbs_by_id.get(depid)
    if target is None:
        yield make("dangling-dependency", f"depid={depid} names no threadblock of this GPU (the wait never ends)")
    elif target is tb:
        yield make("dangling-dependency", f"depid={depid} is the step's own threadblock")
    elif not 0 <= deps < len(target.steps):
        yield make("dangling-dependency", f"deps={deps} is not a step of tb {depid} (it has "
                   f"{len(target.steps)})")
    elif target.steps[deps].hasdep != 1:
        later = any(s.hasdep == 1 for s in target.steps[deps + 1:])
        rule = "dependency-flag" if later else "dangling-dependency"
        tail = (" (a later step of that tb sets it, so the wait ends later than intended)" if later else
                "; nothing sets that flag, so the wait never ends")
        yield make(rule, f"waits for tb {depid} step {deps}, which has hasdep=0{tail}")


def _check_offsets(gpu: Gpu, st: Step, make: Report) -> Iterator[Violation]:
    kind = st.type
    # what the runtime range-checks (start offsets only; never the src of rrc)
    runtime_src = kind in (StepType.SEND, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND,
                           StepType.COPY, StepType.REDUCE)
    for used, buffer, offset, role, runtime in (
            (kind.reads_src, st.srcbuf, st.srcoff, "src", runtime_src),
            (kind.writes_dst, st.dstbuf, st.dstoff, "dst", kind.writes_dst)):
        if not used:
            continue
        size = gpu.chunks(buffer)
        if offset < 0 or offset + max(st.cnt, 1) > size:
            checked = "" if runtime else " (the runtime parser does not check this one)"
            yield make("offset-range", f"{role} {buffer.value}[{offset}..{offset + st.cnt}) is outside the "
                       f"{buffer.value} buffer of {size} chunk(s){checked}")


# --------------------------------------------------------------- connections
def _check_connections(program: Program) -> Iterator[Violation]:
    """Each send connection has its receive twin, and their steps pair up in order with equal counts."""
    by_rank: dict[int, Gpu] = {}
    for gpu in program.gpus:
        by_rank.setdefault(gpu.id, gpu)
    receivers: dict[tuple[int, int, int], Threadblock] = {}
    senders: dict[tuple[int, int, int], tuple[int, Threadblock]] = {}
    for gpu in by_rank.values():
        for tb in gpu.threadblocks:
            if tb.recv >= 0:
                receivers.setdefault((tb.recv, gpu.id, tb.chan), tb)
            if tb.send >= 0:
                senders.setdefault((gpu.id, tb.send, tb.chan), (gpu.id, tb))
    matched: set[tuple[int, int, int]] = set()
    for key, (rank, tb) in senders.items():
        src, dst, chan = key
        twin = receivers.get(key)
        if twin is None:
            if any(s.type.sends for s in tb.steps) or dst in by_rank:
                yield Violation("unmatched-connection", f"sends to rank {dst} on channel {chan} but rank {dst} has "
                                f"no threadblock with recv={src} on channel {chan}", rank=rank, tb=tb.id)
            continue
        matched.add(key)
        sends = [(p, s) for p, s in enumerate(tb.steps) if s.type.sends]
        recvs = [(p, s) for p, s in enumerate(twin.steps) if s.type.receives]
        for (ps, s), (pr, rcv) in zip(sends, recvs, strict=False):
            if s.cnt != rcv.cnt:
                yield Violation("count-mismatch", f"send step {ps} (cnt={s.cnt}) to rank {dst} pairs with rank {dst}'s "
                                f"tb {twin.id} step {pr}, which receives cnt={rcv.cnt}", rank=rank, tb=tb.id, step=ps)
        if len(sends) != len(recvs):
            yield Violation("step-count-mismatch", f"{len(sends)} send step(s) to rank {dst} on channel {chan} but "
                            f"rank {dst}'s tb {twin.id} has {len(recvs)} receive step(s) from rank {src}",
                            rank=rank, tb=tb.id)
    for key, tb in receivers.items():
        if key not in matched:
            src, dst, chan = key
            yield Violation("unmatched-connection", f"receives from rank {src} on channel {chan} but rank {src} has "
                            f"no threadblock with send={dst} on channel {chan}", rank=dst, tb=tb.id)
