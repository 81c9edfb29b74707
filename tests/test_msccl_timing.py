"""simulate_program: the fluid link model applied to threadblocks, against hand-computed times."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ring, star

from taccl_py.errors import InputError, TopologyError
from taccl_py.msccl import load_program, parse_program, simulate_program
from taccl_py.simulator import SimOptions
from taccl_py.topology import Link, Topology, check_topology

VECTORS = Path(__file__).parent / "vectors" / "msccl"
RING4 = VECTORS / "azure-allgather-ring-n4-ch1-i1-simple.xml"


def test_msccl_tools_ring_takes_the_ring_formula() -> None:
    size = 4 * 3_000_000
    result = simulate_program(load_program(RING4), ring(4, 25.0, 0.7), size)
    assert result.correct and result.error is None
    assert result.time_us == pytest.approx(3 * (0.7 + size / 4 / 25e3), rel=1e-12)
    assert result.algbw_GBps == pytest.approx(size / result.time_us / 1e3)
    assert result.busbw_GBps == pytest.approx(result.algbw_GBps * 3 / 4)
    assert len(result.start_us) == len(result.arrive_us) == len(result.commit_us) == 12  # one per send step
    assert result.critical_path and result.notes["chunk_bytes"] == size / 4


def test_step_overhead_is_paid_per_send() -> None:
    size = 4 * 3_000_000
    base = simulate_program(load_program(RING4), ring(4, 25.0, 0.7), size)
    slow = simulate_program(load_program(RING4), ring(4, 25.0, 0.7), size, SimOptions(step_overhead_us=2.0))
    assert slow.time_us == pytest.approx(base.time_us + 3 * 2.0)


def test_allpairs_shares_the_switch_ports_max_min() -> None:
    """8 ranks each send their block to 7 peers at once: every up-port carries 7 flows."""
    program = load_program(VECTORS / "azure-allgather-allpairs-n8-i1-ll.xml")
    size = 8 * 1_000_000
    result = simulate_program(program, star(8, bandwidth=10.0, latency=1.0), size)
    # 2 us of latency (two hops), then 7 x 1 MB through one 10 GB/s port
    assert result.time_us == pytest.approx(2.0 + 7 * 1_000_000 / 10e3, rel=1e-9)
    assert max(result.link_utilisation(star(8))) == pytest.approx(7e6 / (10e3 * result.time_us))


def test_rank_count_and_routes_must_match_the_topology() -> None:
    program = load_program(RING4)
    with pytest.raises(TopologyError, match="ngpus=4 but topology 'star5' has 5 GPUs"):
        simulate_program(program, star(5), 1 << 20)
    # 4 GPUs in a line 0-1-2-3: rank 3 sends to rank 0 in the ring, but they are not connected
    links = tuple(Link(a, b, 10.0, 1.0) for i in range(3) for a, b in ((i, i + 1), (i + 1, i)))
    line = check_topology(Topology("line4", 4, links))
    with pytest.raises(TopologyError, match="ranks 3 and 0 communicate"):
        simulate_program(program, line, 1 << 20)
    with pytest.raises(InputError, match="size"):
        simulate_program(program, ring(4, 1.0, 1.0), 0)


def test_invalid_and_incorrect_programs() -> None:
    text = RING4.read_text()
    hang = text.replace('<step s="0" type="s" srcbuf="o" srcoff="0"', '<step s="0" type="r" srcbuf="o" srcoff="0"', 1)
    result = simulate_program(parse_program(hang), ring(4, 1.0, 1.0), 1 << 20)
    assert not result.correct and result.time_us is None and "invalid program" in (result.error or "")
    wrong = text.replace('type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1"',
                         'type="r" srcbuf="o" srcoff="2" dstbuf="o" dstoff="2"', 1)
    result = simulate_program(parse_program(wrong), ring(4, 1.0, 1.0), 1 << 20)
    assert not result.correct and result.time_us is None and "wrong-result" in (result.error or "")
    assert result.notes["time_us"] > 0  # it still ran: the time is there for who wants it


def test_size_outside_the_selection_range_is_noted() -> None:
    program = load_program(VECTORS / "rccl-allgather-8n-0-1kb.xml")
    result = simulate_program(program, star(8), 1 << 20)
    assert result.correct and "outside_size_range" in result.notes
    assert "outside_size_range" not in simulate_program(program, star(8), 512).notes
