"""The runtime's size rule for picking an algorithm file (msccl-executor / RCCL, and the v1 fork)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from taccl_py.msccl.ir import Program
from taccl_py.msccl.selection import band_sizes, falls_back, runtime_selection, smallest_selected_size


def _program(coll: str, ngpus: int, nchunks: int, lo: int | None = 0, hi: int | None = 0) -> Program:
    return Program(name="x", coll=coll, ngpus=ngpus, nchunksperloop=nchunks, nchannels=1, proto="Simple",
                   inplace=1, gpus=(), outofplace=0 if lo is not None else None, min_bytes=lo, max_bytes=hi)


def test_allreduce_with_an_odd_factor_is_never_picked_at_power_of_two_sizes() -> None:
    program = _program("allreduce", 16, 768)
    assert all(not runtime_selection(program, 1 << k).selected for k in range(0, 40))
    assert smallest_selected_size(program) is None
    assert "multiple of nchunksperloop=768" in runtime_selection(program, 1 << 30).reason


def test_allgather_count_is_per_rank() -> None:
    program = _program("allgather", 16, 16 * 64)
    picked = runtime_selection(program, 1 << 30)
    assert picked.selected and picked.count == (1 << 30) // (16 * 4)
    # 64 KB of float on 16 ranks: 1024 elements per rank, 16384 in all: a multiple of 1024
    assert runtime_selection(program, 64 << 10).selected
    assert not runtime_selection(program, 2 << 10).selected  # 512 elements in all
    assert smallest_selected_size(program) == 4 << 10


def test_v2_band_is_inclusive_and_zero_is_unlimited() -> None:
    program = _program("allreduce", 8, 8, lo=1 << 20, hi=1 << 21)
    assert runtime_selection(program, 1 << 21).selected
    assert not runtime_selection(program, 1 << 22).selected
    assert not runtime_selection(program, 1 << 19).selected
    assert band_sizes(program) == [1 << 20, 1 << 21]


def test_v1_upper_end_is_exclusive_and_defaults_to_128_mib() -> None:
    program = _program("allreduce", 8, 8, lo=None, hi=None)
    assert runtime_selection(program, 64 << 20, dialect="v1").selected
    assert not runtime_selection(program, 128 << 20, dialect="v1").selected


@given(st.integers(1, 64), st.integers(0, 12), st.integers(0, 36), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from(["allreduce", "allgather", "reducescatter", "alltoall", "broadcast"]))
def test_rule_matches_the_runtime_arithmetic(ngpus: int, log_chunks: int, log_size: int, type_size: int,
                                             coll: str) -> None:
    nchunks = ngpus * (1 << log_chunks) if coll != "broadcast" else 1 << log_chunks
    program = _program(coll, ngpus, nchunks)
    size = 1 << log_size
    multiplier = ngpus if coll in ("allgather", "reducescatter", "alltoall") else 1
    decision = runtime_selection(program, size, type_size)
    # the runtime's own arithmetic, written independently
    if size % (type_size * multiplier):
        assert not decision.selected
        return
    count = size // (type_size * multiplier)
    expected = count > 0 and (count * multiplier) % nchunks == 0
    assert decision.selected == expected
    assert (decision in falls_back(program, [size], type_size)) == (not expected)


def test_a_program_without_band_attributes_uses_the_v1_rule() -> None:
    program = replace(_program("allgather", 4, 4), outofplace=None, min_bytes=None, max_bytes=None)
    assert program.detected_dialect == "v1"
    assert not runtime_selection(program, 1 << 30).selected
