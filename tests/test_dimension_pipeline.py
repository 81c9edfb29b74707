"""The event model of the dimensions (hand-computed cases), the order-mix LP and the split orders."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.baselines.dimension_pipeline import PhaseWork, order_mix, orders_for_splits, run_pipeline


def _fifo(split: int, phase: int) -> tuple[float, ...]:
    return ()


def _one(dim: int, latency: float, work: float) -> PhaseWork:
    return PhaseWork(dim, ((latency, work),))


# ------------------------------------------------------------- hand-computed
def test_one_slot_runs_phases_one_after_another() -> None:
    """Two phases of 1 us latency and 10 us of bytes on one dimension: 11 + 11."""
    result = run_pipeline([[_one(0, 1.0, 10.0)], [_one(0, 1.0, 10.0)]], {0: 1}, _fifo)
    assert result.makespan_us == pytest.approx(22.0)
    assert [(r.split, r.slot, r.start_us) for r in result.program] == [(0, 0, 0.0), (1, 0, 11.0)]
    assert result.busy_us[0] == pytest.approx(20.0)


def test_two_slots_share_the_dimension() -> None:
    """Both start at 0, wait 1 us, then move at half the rate each: 1 + 2 x 10 = 21."""
    result = run_pipeline([[_one(0, 1.0, 10.0)], [_one(0, 1.0, 10.0)]], {0: 2}, _fifo)
    assert result.makespan_us == pytest.approx(21.0)
    assert [(r.split, r.slot, r.start_us) for r in result.program] == [(0, 0, 0.0), (1, 1, 0.0)]


def test_processor_sharing_lets_the_shorter_phase_finish_first() -> None:
    """Bytes of 10 and 4 us from t = 1: the short one ends at 1 + 2 x 4 = 9, the long one alone 6 us later."""
    result = run_pipeline([[_one(0, 1.0, 10.0)], [_one(0, 1.0, 4.0)]], {0: 2}, _fifo)
    assert result.makespan_us == pytest.approx(15.0)


def test_a_second_slot_hides_latency_behind_bytes() -> None:
    """Two splits, each 2 us of bytes on dimension 0, then 4 us of latency and 4 us of bytes on dimension 1.
    With one slot dimension 1 waits out both latencies in turn (18 us); with two the second split's latency
    passes while the first one moves its bytes (14 us)."""
    work = [[_one(0, 0.0, 2.0), _one(1, 4.0, 4.0)], [_one(0, 0.0, 2.0), _one(1, 4.0, 4.0)]]
    one = run_pipeline(work, {0: 1, 1: 1}, _fifo)
    # split 0: dim 0 [0, 2], dim 1 latency [2, 6] bytes [6, 10]; split 1: dim 0 [2, 4], dim 1 [10, 18]
    assert one.makespan_us == pytest.approx(18.0)
    two = run_pipeline(work, {0: 1, 1: 2}, _fifo)
    # split 1 starts on slot 1 at 4, waits until 8 while split 0 moves alone (6..8 at full rate: 2 of 4 us);
    # from 8 both share: split 0's last 2 us take 4 (ends 12), then split 1 has 4 - 2 = 2 left alone: 14
    assert two.makespan_us == pytest.approx(14.0)
    assert [(r.split, r.phase, r.slot, r.start_us) for r in two.program] == [
        (0, 0, 0, 0.0), (1, 0, 0, 2.0), (0, 1, 0, 2.0), (1, 1, 1, 4.0)]


def test_steps_of_a_phase_each_wait_their_latency() -> None:
    result = run_pipeline([[PhaseWork(0, ((1.0, 3.0), (2.0, 5.0)))]], {0: 1}, _fifo)
    assert result.makespan_us == pytest.approx(1 + 3 + 2 + 5)


def test_priority_decides_which_waiting_phase_goes_first() -> None:
    work = [[_one(0, 0.0, 3.0)], [_one(0, 0.0, 5.0)]]
    later_first = run_pipeline(work, {0: 1}, lambda s, k: (float(-s),))
    assert [r.split for r in later_first.program] == [1, 0]
    assert later_first.program[1].start_us == pytest.approx(5.0)


# ------------------------------------------------------------------ the mix
def test_order_mix_balances_two_dimensions() -> None:
    """A loads (2, 1), B loads (1, 3): 2x + (1 - x) = x + 3(1 - x) at x = 2/3, both 5/3."""
    mix = order_mix({(0, 1): {0: 2.0, 1: 1.0}, (1, 0): {0: 1.0, 1: 3.0}})
    assert mix[(0, 1)] == pytest.approx(2 / 3) and mix[(1, 0)] == pytest.approx(1 / 3)


def test_order_mix_drops_dominated_orders() -> None:
    mix = order_mix({(0, 1): {0: 1.0, 1: 1.0}, (1, 0): {0: 2.0, 1: 2.0}})
    assert mix == {(0, 1): pytest.approx(1.0)}


def test_split_orders_interleave_the_mix() -> None:
    loads = {(0, 1): {0: 2.0, 1: 1.0}, (1, 0): {0: 1.0, 1: 3.0}}
    assert orders_for_splits({(0, 1): 2 / 3, (1, 0): 1 / 3}, 3, loads) == ((0, 1), (1, 0), (0, 1))


def test_split_orders_round_to_the_least_loaded_whole_splits() -> None:
    """Half a split of an expensive order would overload dimension 1: the rounding leaves it out."""
    loads = {(0, 1): {0: 1.0, 1: 1.0}, (1, 0): {0: 1.0, 1: 9.0}}
    assert orders_for_splits({(0, 1): 0.75, (1, 0): 0.25}, 2, loads) == ((0, 1), (0, 1))


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(st.integers(1, 20), min_size=1, max_size=5), splits=st.integers(1, 64))
def test_split_orders_keep_the_proportions(weights: list[int], splits: int) -> None:
    orders = [tuple(range(k, k + 2)) for k in range(len(weights))]
    total = sum(weights)
    mix = {o: w / total for o, w in zip(orders, weights, strict=True)}
    loads = {o: {0: 1.0} for o in orders}  # every rounding loads the one dimension alike
    out = orders_for_splits(mix, splits, loads)
    assert len(out) == splits
    for o in orders:
        assert abs(out.count(o) - mix[o] * splits) < 1 + 1e-9
        for prefix in range(1, splits + 1):  # interleaved: no order runs ahead of its share by a split or more
            assert out[:prefix].count(o) <= out.count(o) * prefix / splits + 1 + 1e-9
