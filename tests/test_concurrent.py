"""Concurrent collectives (issue 11, part 4): several schedules at once on one topology.

Hand-made topology: two GPUs joined by two disjoint switch planes, ``a`` and ``b``.
An Allgather routed over plane a and a ReduceScatter over plane b never meet, so
the makespan is the slower one's time alone; on one shared plane they split the
bandwidth and the times are computed by hand. Each collective's correctness is
judged on its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import only_json, run
from hypothesis import given, settings
from hypothesis import strategies as st

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.concurrent import endpoint_bytes, merged_transfers, simulate_concurrent
from taccl_py.errors import InputError
from taccl_py.library.grids import switch_star
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import simulate
from taccl_py.topology import Link, Switch, Topology

AG, RS = CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER


def two_planes(bandwidth_a: float = 10.0, bandwidth_b: float = 10.0, latency: float = 1.0) -> Topology:
    """GPU 0 and GPU 1, each linked both ways to switch ``a`` and to switch ``b``."""
    links = []
    for plane, bw in (("a", bandwidth_a), ("b", bandwidth_b)):
        for g in (0, 1):
            links += [Link(g, plane, bw, latency), Link(plane, g, bw, latency)]
    return Topology("two-planes", 2, tuple(links), (Switch("a"), Switch("b")))


def route(topo: Topology, src: int, plane: str, dst: int) -> tuple[int, ...]:
    index = topo.link_index
    return (index[(src, plane)], index[(plane, dst)])


def allgather(topo: Topology, plane: str) -> Schedule:
    ts = (Transfer(0, 1, (0,), route(topo, 0, plane, 1)), Transfer(1, 0, (1,), route(topo, 1, plane, 0)))
    return Schedule(Collective(AG, 2), ts, name=f"ag-{plane}")


def reducescatter(topo: Topology, plane: str) -> Schedule:
    ts = (Transfer(0, 1, (1,), route(topo, 0, plane, 1), Op.REDUCE),
          Transfer(1, 0, (0,), route(topo, 1, plane, 0), Op.REDUCE))
    return Schedule(Collective(RS, 2), ts, name=f"rs-{plane}")


def test_disjoint_links_makespan_is_the_slower_one() -> None:
    """Plane a at 10 GB/s, plane b at 4 GB/s, 20 kB: AG alone 2 + 1 = 3 us, RS alone 2 + 2.5 = 4.5 us."""
    topo = two_planes(10.0, 4.0)
    ag, rs = allgather(topo, "a"), reducescatter(topo, "b")
    result = simulate_concurrent(topo, [(ag, 20_000), (rs, 20_000)])
    assert result.correct
    assert [p.alone_us for p in result.parts] == pytest.approx([3.0, 4.5])
    assert [p.time_us for p in result.parts] == pytest.approx([3.0, 4.5])
    assert result.makespan_us == pytest.approx(4.5)
    assert [p.slowdown for p in result.parts] == pytest.approx([1.0, 1.0])


def test_shared_links_split_the_bandwidth() -> None:
    """Both on plane a: every link carries one AG and one RS chunk of 10 kB at 5 GB/s each: 2 + 2 = 4 us."""
    topo = two_planes()
    result = simulate_concurrent(topo, [(allgather(topo, "a"), 20_000), (reducescatter(topo, "a"), 20_000)])
    assert result.correct
    assert [p.time_us for p in result.parts] == pytest.approx([4.0, 4.0])
    assert result.makespan_us == pytest.approx(4.0)
    assert [p.slowdown for p in result.parts] == pytest.approx([4 / 3, 4 / 3])
    injected, ejected = endpoint_bytes(topo, result.link_bytes)
    assert injected == pytest.approx(40_000) and ejected == pytest.approx(40_000)


def test_sizes_may_differ() -> None:
    """An AG of 40 kB next to an RS of 20 kB on one plane: 10 kB of RS shares, then AG's rest alone.

    Both get 5 GB/s until the RS chunks (10 kB) finish at 2 + 2 = 4 us; AG has 10 kB of its 20 kB left at 10 GB/s:
    1 us more, 5 us.
    """
    topo = two_planes()
    result = simulate_concurrent(topo, [(allgather(topo, "a"), 40_000), (reducescatter(topo, "a"), 20_000)])
    assert [p.time_us for p in result.parts] == pytest.approx([5.0, 4.0])
    assert result.makespan_us == pytest.approx(5.0)


def test_each_part_judged_separately() -> None:
    """A ReduceScatter that never sends block 0 is wrong; the Allgather next to it is still right."""
    topo = two_planes()
    broken = Schedule(Collective(RS, 2), (Transfer(0, 1, (1,), route(topo, 0, "b", 1), Op.REDUCE),), name="broken")
    result = simulate_concurrent(topo, [(allgather(topo, "a"), 20_000), (broken, 20_000)])
    assert not result.correct and result.makespan_us is None
    ag, rs = result.parts
    assert ag.correct and ag.error is None and ag.alone_us == pytest.approx(3.0)
    assert not rs.correct and rs.error is not None and "block 0" in rs.error


def test_merged_program_keeps_parts_apart() -> None:
    """Chunks, channels, ``after`` indices and group numbers of the second part move past the first's."""
    topo = switch_star(3, multicast=True)
    ag = Schedule(Collective(AG, 3), tuple(
        Transfer(s, d, (s,), topo.gpu_route(s, d) or (), group=s) for s in range(3) for d in range(3) if d != s))
    rs = Schedule(Collective(RS, 3), (Transfer(0, 1, (1,), topo.gpu_route(0, 1) or (), Op.REDUCE, channel=1,
                                               after=()),
                                      Transfer(1, 2, (2,), topo.gpu_route(1, 2) or (), Op.REDUCE, after=(0,))))
    merged, bases = merged_transfers([ag, rs])
    assert bases == [0, 6]
    second = merged[6:]
    assert [t.chunks for t in second] == [(4,), (5,)]  # AG has 3 chunks
    assert [t.channel for t in second] == [2, 1]  # AG uses one channel
    assert second[1].after == (6,)
    assert len({t.group for t in merged[:6]}) == 3 and all(t.group is None for t in second)


def test_one_part_equals_simulate() -> None:
    topo = two_planes()
    ag = allgather(topo, "a")
    result = simulate_concurrent(topo, [(ag, 20_000)])
    assert result.makespan_us == pytest.approx(simulate(topo, ag, 20_000).time_us)


def test_no_part_is_an_error() -> None:
    with pytest.raises(InputError):
        simulate_concurrent(two_planes(), [])


@settings(max_examples=25, deadline=None)
@given(st.floats(1.0, 100.0), st.floats(1.0, 100.0), st.integers(2, 10**7), st.integers(2, 10**7),
       st.floats(0.0, 5.0))
def test_disjoint_makespan_property(bw_a: float, bw_b: float, size_ag: int, size_rs: int, latency: float) -> None:
    """On disjoint planes each part takes its time alone and the makespan is the larger."""
    topo = two_planes(bw_a, bw_b, latency)
    ag, rs = allgather(topo, "a"), reducescatter(topo, "b")
    result = simulate_concurrent(topo, [(ag, size_ag), (rs, size_rs)])
    alone = [simulate(topo, ag, size_ag).time_us, simulate(topo, rs, size_rs).time_us]
    assert result.correct
    assert [p.time_us for p in result.parts] == pytest.approx(alone, rel=1e-9)
    assert result.makespan_us == pytest.approx(max(t for t in alone if t is not None), rel=1e-9)


# ------------------------------------------------------------------ the commands
def test_simulate_cli_concurrent_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``-c allgather+reducescatter -a multicast+nvls`` on a fat tree with multicast and reduce switches: every GPU
    injects M in all (M/N for the Allgather, (N-1)/N M for the ReduceScatter), the unicast pair 2 (N-1)/N M."""
    n, size = 8, 2**20
    code, out, _ = run(["simulate", "-t", "fat-tree8-sharp", "-c", "allgather+reducescatter", "-s", str(size),
                        "-a", "multicast+nvls", "--json"], capsys)
    data = only_json(out)
    assert code == 0 and data["correct"]
    assert [p["collective"] for p in data["collectives"]] == ["allgather", "reducescatter"]
    assert [p["algorithm"] for p in data["collectives"]] == ["multicast", "nvls"]
    assert data["makespan_us"] == pytest.approx(max(p["time_us"] for p in data["collectives"]))
    assert data["injected_bytes"] == pytest.approx(n * size)
    code, out, _ = run(["simulate", "-t", "fat-tree8-sharp", "-c", "ag+rs", "-s", str(size), "-a", "ring+ring",
                        "--json"], capsys)
    unicast = only_json(out)
    assert unicast["injected_bytes"] == pytest.approx(2 * (n - 1) * size)
    assert unicast["makespan_us"] > data["makespan_us"]


def test_simulate_cli_concurrent_default_is_best_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["simulate", "-t", "ring8", "-c", "allgather+allreduce", "-s", "1MB"], capsys)
    assert code == 0
    assert "best: " in out and "makespan" in out


def test_simulate_cli_concurrent_schedule_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "ag.json"
    code, _, _ = run(["baseline", "-t", "ring8", "-c", "allgather", "-s", "1MB", "-a", "ring", "--schedule-out",
                      str(path)], capsys)
    assert code == 0
    code, out, _ = run(["simulate", "-t", "ring8", "-c", "allgather+reducescatter", "-s", "1MB", "-a",
                        f"{path}+ring", "--json"], capsys)
    assert code == 0 and only_json(out)["correct"]


@pytest.mark.parametrize(("args", "where"), [
    (["-c", "allgather+", "-a", "ring+ring"], "--collective"),
    (["-c", "allgather+reducescatter", "-a", "ring"], "--algorithm"),
    (["-c", "allgather+reducescatter", "-a", "ring+x.xml"], "--algorithm"),
    (["-c", "allgather+reducescatter", "-a", "ring+ring", "--plot", "p.png"], "--plot"),
])
def test_simulate_cli_concurrent_errors(capsys: pytest.CaptureFixture[str], args: list[str], where: str) -> None:
    code, out, err = run(["simulate", "-t", "ring8", "-s", "1MB", *args], capsys)
    assert code == 2 and where in err and "Traceback" not in err and not out


@pytest.mark.slow
def test_synthesize_cli_concurrent_picks_the_joint_best(capsys: pytest.CaptureFixture[str]) -> None:
    """On fat-tree8-sharp, direct is fastest alone for both, but multicast + in-switch reduction wins together (the
    offload baselines or the synthesizer's own trees through the switches), at the joint bound."""
    code, out, _ = run(["synthesize", "-t", "fat-tree8-sharp", "-c", "allgather+reducescatter", "-s", "16MB",
                        "--time-limit", "5", "--json"], capsys)
    data = only_json(out)
    assert code == 0 and data["correct"]
    ag, rs = (p["algorithm"] for p in data["collectives"])
    assert "multicast" in ag and ("nvls" in rs or "reduction trees" in rs)
    assert data["makespan_us"] == min(c["makespan_us"] for c in data["combinations"] if c["makespan_us"])
    assert data["makespan_efficiency"] == pytest.approx(data["makespan_bound_us"] / data["makespan_us"])
    assert data["makespan_efficiency"] > 0.99


def test_synthesize_cli_concurrent_o_is_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """With several collectives -o names a directory (one file per collective): an XML file name is refused up
    front, and so are the single-collective outputs."""
    code, out, err = run(["synthesize", "-t", "ring8", "-c", "allgather+reducescatter", "-s", "1MB", "-o",
                          str(tmp_path / "x.xml")], capsys)
    assert code == 2 and "-o" in err and "must be a directory" in err and not out
    assert not (tmp_path / "x.xml").exists()
    code, out, err = run(["synthesize", "-t", "ring8", "-c", "allgather+reducescatter", "-s", "1MB",
                          "--schedule-out", str(tmp_path / "x.json")], capsys)
    assert code == 2 and "--schedule-out" in err and "-o DIR" in err and not out
