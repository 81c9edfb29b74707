"""Training-step workloads: the file format, hand-computed overlaps, and ``taccl workload simulate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import only_json, run

from taccl_py.collectives import Collective, CollectiveKind
from taccl_py.endpoint import EndpointMode
from taccl_py.errors import InputError
from taccl_py.library.grids import switch_star
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import simulate
from taccl_py.topology import Endpoint
from taccl_py.workload import workload_from_dict
from taccl_py.workload_sim import _merge, _minus, simulate_step

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "workloads"


def kernel(node_id: str, us: float, gbps: float, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "compute", "duration_us": us, "memory_bandwidth": gbps, **extra}


def collective(node_id: str, kind: str = "broadcast", size: int | str = 1_000_000, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "collective", "kind": kind, "size": size, **extra}


def two_gpus(op: Op = Op.COPY) -> tuple[Any, Schedule]:
    """GPU 0 -> GPU 1 through a switch, 100 GB/s, no latency; one transfer of the whole buffer."""
    topo = switch_star(2, 100, 0.0)
    kind, root = (CollectiveKind.REDUCE, 1) if op is Op.REDUCE else (CollectiveKind.BROADCAST, 0)
    route = topo.route_from_vertices([0, "switch", 1])
    return topo, Schedule(Collective(kind, 2, 1, root), (Transfer(0, 1, (0,), route, op),))


# ------------------------------------------------------------------ hand-computed
def test_a_kernel_and_a_collective_share_memory() -> None:
    """100 GB/s of memory; a 10 us kernel drawing 80 GB/s (800 kB) and a 1 MB copy share it 50/50 until
    the kernel ends at 16 us (it has moved 800 kB); the copy then has 200 kB left at 100 GB/s: 18 us."""
    topo, schedule = two_gpus()
    wl = workload_from_dict({"nodes": [kernel("k", 10, 80), collective("c")]})
    limited = topo.with_endpoints(Endpoint(100.0))
    result = simulate_step(limited, wl, [None, schedule])
    assert [(n.start_us, n.end_us) for n in result.nodes] == [(0.0, 16.0), (0.0, 18.0)]
    assert result.step_time_us == 18.0
    assert result.exposed_communication_us == pytest.approx(2.0)
    assert result.injected_bytes == 1e6
    memory = {r.name: r for r in result.resources}["gpu0.memory"]
    assert memory.bytes == pytest.approx(1.8e6) and memory.intervals == ((0.0, 18.0),)
    # without memory limits both take what they take alone
    free = simulate_step(topo, wl, [None, schedule])
    assert [(n.start_us, n.end_us) for n in free.nodes] == [(0.0, 10.0), (0.0, 10.0)]
    assert free.exposed_communication_us == 0.0


def test_a_reducing_collective_uses_three_times_the_memory_unless_an_engine_runs_it() -> None:
    """The kernel (80 GB/s cap) and a reduce (weight 3 at GPU 1) on 100 GB/s: x + 3x = 100, x = 25.
    The kernel's 800 kB take 32 us; the reduce has 200 kB left, then alone at 100/3 GB/s: 6 us more.
    The engine reads the local contribution and writes the result once: weight 2, x = 100/3 each."""
    topo, schedule = two_gpus(Op.REDUCE)
    wl = workload_from_dict({"nodes": [kernel("k", 10, 80), collective("c", "reduce")]})
    limited = topo.with_endpoints(Endpoint(100.0))
    gpu = simulate_step(limited, wl, [None, schedule])
    assert [n.end_us for n in gpu.nodes] == pytest.approx([32.0, 38.0])
    engine = simulate_step(limited, wl, [None, schedule], EndpointMode.ENGINE)
    # 100/3 GB/s each: the kernel ends at 24 us, the reduce has 200 kB left at 50 GB/s: 4 us more
    assert [n.end_us for n in engine.nodes] == pytest.approx([24.0, 28.0])


def test_streams_and_dependencies_order_the_nodes() -> None:
    topo, schedule = two_gpus()
    wl = workload_from_dict({"nodes": [kernel("a", 5, 0), kernel("b", 7, 0), collective("c", after=["a"]),
                                       collective("d"), kernel("e", 1, 0, stream="other", after=["d"])]})
    result = simulate_step(topo, wl, [None, None, schedule, schedule, None])
    times = {n.id: (n.start_us, n.end_us) for n in result.nodes}
    assert times == {"a": (0.0, 5.0), "b": (5.0, 12.0), "c": (5.0, 15.0), "d": (15.0, 25.0), "e": (25.0, 26.0)}
    assert result.compute_us == 13.0 and result.communication_us == 20.0
    assert result.exposed_communication_us == pytest.approx(13.0)  # 12..25 with only communication


def test_a_lone_collective_takes_what_the_simulator_says() -> None:
    topo = switch_star(4, 100, 0.5)
    from taccl_py.baselines import baseline

    schedule = baseline(topo, "allreduce", "ring", size_bytes=2**24)
    wl = workload_from_dict({"nodes": [collective("ar", "allreduce", "16MB")]})
    for limited in (topo, topo.with_endpoints(Endpoint(150.0))):
        alone = simulate(limited, schedule, 2**24).time_us
        assert simulate_step(limited, wl, [schedule]).step_time_us == pytest.approx(alone, rel=1e-12)


def test_interval_arithmetic() -> None:
    assert _merge([(3, 4), (0, 1), (0.5, 2), (5, 5)]) == [(0, 2), (3, 4)]
    assert _minus([(0, 10)], [(1, 2), (4, 6)]) == 7
    assert _minus([(0, 2), (5, 8)], [(1, 6)]) == 3
    assert _minus([(0, 1)], []) == 1


# ------------------------------------------------------------------ the format
@pytest.mark.parametrize("nodes,message", [
    ([kernel("a", 1, 0, after=["b"]), kernel("b", 1, 0, after=["a"], stream="s")],
     "nodes dependency cycle: 'a' -> 'b' -> 'a'"),
    ([kernel("a", 1, 0, after=["zz"])], "nodes[0].after names unknown node 'zz'"),
    ([kernel("a", 1, 0), kernel("a", 1, 0)], "nodes[1].id duplicates nodes[0] ('a')"),
    ([kernel("a", 0, 0)], "nodes[0].duration_us must be a number in (0, 1e+09] us (got 0)"),
    ([collective("c", "allfoo")], "nodes[0].kind: unknown collective 'allfoo'"),
    ([collective("c", group=[0, 1])], "nodes[0].group is [0, 1]; only \"all\""),
    ([collective("c", algorithm="x.xml")], "nodes[0].algorithm MSCCL XML files are not supported"),
    ([{"id": "a", "type": "gpu"}], "nodes[0].type must be \"compute\" or \"collective\""),
    ([kernel("a", 1, 0, size=3)], "nodes[0].size unknown field for a compute node"),
])
def test_bad_workloads_are_rejected_with_one_line(nodes: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(InputError) as info:
        workload_from_dict({"nodes": nodes}, where="step.json")
    assert str(info.value).startswith(f"step.json: {message}"), str(info.value)


def test_cli_rejects_a_cycle_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "step.json"
    path.write_text(json.dumps({"nodes": [collective("c", after=["k"]), kernel("k", 1, 0, after=["c"])]}))
    code, out, err = run(["workload", "simulate", str(path), "-t", "ring8"], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"taccl: error: {path}: nodes dependency cycle: 'c' -> 'k' -> 'c'"]


# ------------------------------------------------------------------ the command on the examples
def test_cli_runs_the_overlap_example_in_both_modes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["workload", "simulate", str(EXAMPLES / "allreduce_overlap.json"), "-t", "dgx-a100x2",
                          "--memory-bandwidth", "1555", "--endpoint", "both", "--json"], capsys)
    assert code == 0, err
    data = only_json(out)
    gpu, engine = data["modes"]
    assert (gpu["endpoint"], engine["endpoint"]) == ("gpu", "engine")
    assert engine["step_time_us"] < gpu["step_time_us"]
    assert data["engine_speedup"] == pytest.approx(gpu["step_time_us"] / engine["step_time_us"])
    assert gpu["memory_bytes_per_network_byte"] == {"gpu": pytest.approx(3.0), "engine": pytest.approx(16 / 15)}
    assert {r["kind"] for r in gpu["resources"]} == {"compute", "memory", "links"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50_dp.json", "fsdp_gpt_layers.json"])
def test_cli_runs_the_training_examples(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["workload", "simulate", str(EXAMPLES / name), "-t", "dgx-a100x2", "--memory-bandwidth",
                          "1555", "--endpoint", "both"], capsys)
    assert code == 0, err
    assert "engine vs gpu-driven: step time speedup" in out


def test_examples_are_what_the_generator_writes(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    setattr(module, "HERE", tmp_path)  # noqa: B010  (a module attribute mypy cannot see)
    module.write("resnet50_dp.json", module.resnet50())
    module.write("fsdp_gpt_layers.json", module.fsdp_gpt())
    for name in ("resnet50_dp.json", "fsdp_gpt_layers.json"):
        assert (tmp_path / name).read_text() == (EXAMPLES / name).read_text()
