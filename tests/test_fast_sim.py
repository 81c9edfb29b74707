"""The compiled simulator (taccl_py.fast_sim, fast_kernel) against the Python one: the same result, exactly.

Every start, arrival and commit time, link figure, critical path, verdict and message must be
identical (not close: the kernel does the same floating-point operations in the same order).
Schedules: every baseline on small shipped topologies, random spanning-tree Allgathers and
reductions with random waits on random topologies, random symmetric schedules, random
mutations (faults, deadlocks, broken structure), and the ring baselines built as arrays.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cli_runner import only_json, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_symmetry import _cases as symmetric_cases

from taccl_py.baselines import applicable_baselines, baseline, ring_plan
from taccl_py.baselines.direct import direct_schedule
from taccl_py.baselines.ring_compact import ring_compact
from taccl_py.collectives import CollectiveKind
from taccl_py.compact import compact, compact_error
from taccl_py.fast_sim import fast_error, simulate_compact, simulate_large
from taccl_py.library import resolve_topology
from taccl_py.library.grids import switch_star
from taccl_py.schedule import Op, Schedule, Transfer
from taccl_py.simulator import SimOptions, SimResult, simulate
from taccl_py.symmetry import SymmetricSchedule, expand
from taccl_py.testing import spanning_tree_allgathers, spanning_tree_reductions, topologies, with_waits
from taccl_py.topology import Endpoint, Topology


def _same(a: SimResult, b: SimResult) -> None:
    assert (a.correct, a.error, a.time_us) == (b.correct, b.error, b.time_us)
    for field in ("start_us", "arrive_us", "commit_us"):
        assert np.array_equal(getattr(a, field), getattr(b, field), equal_nan=True), field
    assert a.link_busy_us == b.link_busy_us
    assert a.link_bytes == b.link_bytes
    assert a.critical_path == b.critical_path
    assert a.stuck == b.stuck


def _both(topology: Topology, schedule: Schedule, size: float, overhead: float = 0.0) -> SimResult:
    options = SimOptions(step_overhead_us=overhead)
    full = simulate(topology, schedule, size, options)
    fast = simulate_compact(topology, compact(schedule), size, options)
    _same(full, fast)
    return fast


@pytest.mark.parametrize("name", [pytest.param("dgx-a100x2", marks=pytest.mark.slow),
                                  pytest.param("ndv2x2", marks=pytest.mark.slow), "ring8"])
def test_every_baseline_times_exactly_as_in_python(name: str) -> None:
    topo = resolve_topology(name)
    for kind in CollectiveKind:
        for algorithm in applicable_baselines(topo, kind):
            schedule = baseline(topo, kind, algorithm, size_bytes=2**26)
            if any(t.exchange is not None or t.group is not None for t in schedule.transfers):
                continue  # exchanges and network groups stay in Python
            for size in (1000, 2**26):
                assert _both(topo, schedule, size, overhead=0.5 if size == 1000 else 0.0).correct


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_schedules_time_exactly_as_in_python(data: st.DataObject) -> None:
    topo = data.draw(topologies(max_gpus=6))
    kind = data.draw(st.sampled_from(["allgather", "reducescatter", "reduce"]))
    schedule = data.draw(spanning_tree_allgathers(topo) if kind == "allgather" else
                         spanning_tree_reductions(topo, CollectiveKind(kind)))
    if data.draw(st.booleans()):
        schedule = data.draw(with_waits(schedule))
    size = data.draw(st.sampled_from([0, 1000, 3 * 2**20]))
    _both(topo, schedule, size, overhead=data.draw(st.sampled_from([0.0, 0.25])))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_compact_form_gives_back_every_transfer(data: st.DataObject) -> None:
    """compact() column by column: each transfer comes back whole (chunks, route, op, channel, waits), and the
    arrays have the kernel's types."""
    topo = data.draw(topologies(max_gpus=6))
    kind = data.draw(st.sampled_from(["allgather", "reducescatter"]))
    schedule = data.draw(spanning_tree_allgathers(topo) if kind == "allgather" else
                         spanning_tree_reductions(topo, CollectiveKind(kind)))
    schedule = data.draw(with_waits(schedule))
    transfers = list(schedule.transfers)
    if data.draw(st.booleans()) and len(transfers) > 1:  # a transfer carrying several chunks, on another channel
        first = transfers[0]
        extra = tuple(c for c in range(schedule.collective.num_chunks) if c not in first.chunks)[:2]
        transfers[0] = replace(first, chunks=first.chunks + extra, channel=3)
    schedule = schedule.with_transfers(transfers)
    arrays = compact(schedule)
    assert arrays.to_schedule().transfers == schedule.transfers
    assert (arrays.src.dtype, arrays.chunks.dtype, arrays.chunk_ptr.dtype, arrays.reduce.dtype) == (
        np.int32, np.int32, np.int64, np.bool_)
    assert len(arrays.routes) == len({t.route for t in schedule.transfers})
    assert (arrays.after is None) == all(not t.after for t in schedule.transfers)
    assert (arrays.not_before_us is None) == all(t.not_before_us is None for t in schedule.transfers)


def test_compact_refuses_exchanges_and_network_groups_naming_the_transfer() -> None:
    schedule = baseline(resolve_topology("ring8"), "allgather", "ring")
    grouped = schedule.with_transfers([*schedule.transfers[:2], replace(schedule.transfers[2], group=0),
                                       *schedule.transfers[3:]])
    with pytest.raises(ValueError, match=r"^transfer 2: exchanges and network groups have no compact form$"):
        compact(grouped)
    assert len(compact(schedule.with_transfers([]))) == 0


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_broken_schedules_fail_as_in_python(data: st.DataObject) -> None:
    """Dropped, duplicated, retargeted or reordered transfers: the same fault, deadlock or post-condition."""
    topo = resolve_topology("dgx-a100x2")
    kind = data.draw(st.sampled_from(["allgather", "allreduce", "reducescatter", "alltoall"]))
    schedule = baseline(topo, kind, "ring" if kind != "alltoall" else "direct")
    transfers = list(schedule.transfers)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(transfers) - 1))
        how = data.draw(st.sampled_from(["drop", "twice", "swap", "wait", "op"]))
        t = transfers[i]
        if how == "drop":
            del transfers[i]
        elif how == "twice":
            transfers.insert(data.draw(st.integers(0, len(transfers))), t)
        elif how == "swap" and i + 1 < len(transfers):
            transfers[i], transfers[i + 1] = transfers[i + 1], t
        elif how == "wait":
            j = data.draw(st.integers(0, len(transfers) - 1))
            if j != i:
                transfers[i] = Transfer(t.src, t.dst, t.chunks, t.route, t.op, t.channel, (j,))
        else:
            transfers[i] = Transfer(t.src, t.dst, t.chunks, t.route,
                                    Op.COPY if t.op is Op.REDUCE else Op.REDUCE, t.channel)
    _both(topo, schedule.with_transfers(transfers), 2**20)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(symmetric_cases(), st.sampled_from([1.0, 4096.0, 2.0**20]), st.sampled_from([0.0, 1.5]))
def test_random_symmetric_schedules_time_exactly_as_in_python(case: tuple[Topology, SymmetricSchedule],
                                                              size: float, overhead: float) -> None:
    """The symmetric schedules of test_symmetry, expanded (valid or not): the kernel gives Python's result."""
    topo, sym = case
    _both(topo, expand(sym, topo), size, overhead)


def test_structural_errors_are_worded_as_in_python() -> None:
    topo = resolve_topology("dgx-a100x2")
    good = baseline(topo, "allgather", "ring")
    t = good.transfers[5]
    other = good.transfers[200].route
    for bad in (Transfer(t.src, t.src, t.chunks, t.route), Transfer(t.src, 99, t.chunks, t.route),
                Transfer(t.src, t.dst, (), t.route), Transfer(t.src, t.dst, (10_000,), t.route),
                Transfer(t.src, t.dst, (1, 1), t.route), Transfer(t.src, t.dst, t.chunks, t.route, channel=-1),
                Transfer(t.src, t.dst, t.chunks, t.route, after=(5,)), Transfer(t.src, t.dst, t.chunks, t.route,
                                                                                after=(10**6,)),
                Transfer(t.src, t.dst, t.chunks, ()), Transfer(t.src, t.dst, t.chunks, other),
                Transfer(t.src, t.dst, t.chunks, (len(topo.links),)), Transfer(t.src, t.dst, t.chunks, t.route[:1])):
        transfers = list(good.transfers)
        transfers[5] = bad
        broken = good.with_transfers(transfers)
        want = broken.structural_error(topo)
        assert want is not None
        assert compact_error(compact(broken), topo) == want
        assert simulate_compact(topo, compact(broken), 2**20).error == want


@pytest.mark.parametrize("name", ["dgx-a100x2", "ring8", "dgx-a100x2-forestcoll"])
def test_rings_built_as_arrays_are_the_ring_baselines(name: str) -> None:
    topo = resolve_topology(name)
    plan = ring_plan(topo, None)
    for kind in (CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE):
        arrays = ring_compact(kind, plan, topo.name)
        full = baseline(topo, kind, "ring")
        rebuilt = arrays.to_schedule()
        assert rebuilt.transfers == full.transfers
        assert (rebuilt.collective, rebuilt.notes) == (full.collective, full.notes)
        _same(simulate(topo, full, 2**30), simulate_compact(topo, arrays, 2**30))
        pieced = ring_compact(kind, plan, topo.name, pieces=3).to_schedule()  # NCCL's pieces per channel
        want = baseline(topo, kind, "ring", chunk_factor=3 * plan.channels)
        assert pieced.transfers == want.transfers
        assert (pieced.collective, pieced.notes) == (want.collective, want.notes)


def test_what_the_kernel_does_not_cover_is_simulated_in_python() -> None:
    topo = resolve_topology("dgx-a100x2")
    schedule = baseline(topo, "allgather", "ring")
    arrays = compact(schedule)
    assert fast_error(arrays, topo) is None
    with_memory = topo.with_endpoints(Endpoint(1555.0, None, None))
    assert "memory" in (fast_error(arrays, with_memory) or "")
    _same(simulate(with_memory, schedule, 2**20), simulate_compact(with_memory, arrays, 2**20))
    one_shot = baseline(topo, "allreduce", "oneshot")  # exchanges: never compacted
    assert any(t.exchange is not None for t in one_shot.transfers)
    with pytest.raises(ValueError, match="exchanges"):
        compact(one_shot)
    _same(simulate(topo, one_shot, 2**20), simulate_large(topo, one_shot, 2**20))


def test_large_schedules_go_through_the_kernel(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """simulate_large and the CLI take the kernel from FAST_MIN_TRANSFERS on; the figures do not change."""
    import taccl_py.fast_sim as fast_sim

    calls: list[int] = []
    real = fast_sim.simulate_compact

    def counting(*args: object, **kwargs: object) -> SimResult:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    topo = resolve_topology("dgx-a100x2")
    command = ["--ideal", "simulate", "-t", "dgx-a100x2", "-c", "allreduce", "-s", "64MB", "-a", "ring", "--json"]
    code, out, _ = run(command, capsys)
    before = only_json(out)
    monkeypatch.setattr(fast_sim, "FAST_MIN_TRANSFERS", 1)
    monkeypatch.setattr(fast_sim, "simulate_compact", counting)
    schedule = baseline(topo, "allgather", "direct")
    _same(simulate(topo, schedule, 2**20), simulate_large(topo, schedule, 2**20))
    assert calls == [1]
    code, out, _ = run(command, capsys)
    assert code == 0 and calls == [1, 1]
    after = only_json(out)
    assert after == before and math.isfinite(after["time_us"])


@pytest.mark.parametrize("protocol", ["Simple", "LL", "LL128"])
def test_a_runtime_models_costs_go_through_the_kernel_with_the_same_times(protocol: str) -> None:
    """Per-route latency, link capacities at the protocol's share and the launch time: identical in both."""
    topo = resolve_topology("dgx-a100x2")
    model = topo.runtime
    assert model is not None
    for kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE):
        costs = model.costs(protocol, kind, topo)
        schedule = baseline(topo, kind, "ring")
        options = SimOptions(costs=costs)
        assert fast_error(compact(schedule), topo, options) is None
        full = simulate(topo, schedule, 2**26, options)
        _same(full, simulate_compact(topo, compact(schedule), 2**26, options))
        assert full.time_us is not None and full.time_us > simulate(topo, schedule, 2**26).time_us + costs.launch_us


def test_a_ring_too_large_for_memory_is_refused_with_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A full simulation that cannot fit in the memory available: exit 2, one line naming the topology and the
    way out, instead of the system killing the process; with enough memory the same command runs."""
    from taccl_py import fast_sim
    from taccl_py.baselines.ring_compact import large_ring_arrays
    from taccl_py.errors import InputError
    from taccl_py.library.grids import ring

    topo = ring(320)  # 102,080 transfers with one channel: the compiled path
    path = tmp_path / "ring320.json"
    assert run(["topo", "generate", "ring", "-n", "320", "-o", str(path)], capsys)[0] == 0
    monkeypatch.setattr(fast_sim, "_available_memory_bytes", lambda: 10 * 2**20)
    message = fast_sim.full_simulation_error(topo.num_gpus * (topo.num_gpus - 1))
    assert message is not None and "102,080 transfers" in message and "at least 15.6MB" in message
    assert "than the 10MB available" in message
    with pytest.raises(InputError, match="fewer channels"):
        large_ring_arrays(topo, CollectiveKind.ALLGATHER, "ring", 1)
    import taccl_py.cli.sim_cmd as sim_cmd

    monkeypatch.setattr(sim_cmd, "SYMMETRIC_MIN_GPUS", 10**6)  # as on a fabric without the ring's symmetry
    code, out, err = run(["--ideal", "simulate", "-t", str(path), "-c", "allgather", "-s", "1GB", "-a", "ring",
                          "--channels", "1"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "ring320" in err and "102,080 transfers" in err and "Traceback" not in err
    code, out, err = run(["simulate", "-t", "dgx-a100x64", "-c", "allreduce", "-s", "1GB", "-a", "ring"], capsys)
    assert code == 2 and "dgx-a100x64" in err and "ring allreduce on" in err  # calibrated: no symmetry to use
    assert fast_sim.full_simulation_error(1000) is None  # 160 KB fits in 10 MiB
    monkeypatch.setattr(fast_sim, "_available_memory_bytes", lambda: None)  # unknown: never refused
    arrays = large_ring_arrays(topo, CollectiveKind.ALLGATHER, "ring", 1)
    assert arrays is not None and len(arrays) == 320 * 319


def test_available_memory_is_capped_by_the_cgroup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """MemAvailable, capped by the cgroup v2 limit a container or batch job sets; unknown without either."""
    from taccl_py import fast_sim

    files = {"/proc/meminfo": "MemTotal: 100 kB\nMemAvailable:   2048 kB\n", "/sys/fs/cgroup/memory.max": "1500000\n",
             "/sys/fs/cgroup/memory.current": "1000000\n"}
    real = fast_sim._read_int

    def read(path: str, field_name: str | None = None) -> int | None:
        if path not in files:
            return None
        copy = tmp_path / "file"
        copy.write_text(files[path])
        return real(str(copy), field_name)

    monkeypatch.setattr(fast_sim, "_read_int", read)
    assert fast_sim._available_memory_bytes() == 500_000  # the cgroup's 0.5 MB left, below MemAvailable's 2 MiB
    files["/sys/fs/cgroup/memory.max"] = "max\n"
    assert fast_sim._available_memory_bytes() == 2048 * 1024
    del files["/proc/meminfo"]
    assert fast_sim._available_memory_bytes() is None


def test_posted_transfers_take_the_kernel_from_fewer_transfers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a runtime's proxy posts the Python simulator re-solves at nearly every start, so the kernel takes
    schedules from POSTED_MIN_TRANSFERS transfers (not FAST_MIN_TRANSFERS), with the same result, even before it
    is ready (:func:`kernel_ready`)."""
    from taccl_py import fast_sim
    from taccl_py.runtime import Protocol

    monkeypatch.setattr(fast_sim, "kernel_ready", lambda _transfers=0: False)

    topo = resolve_topology("dgx-a100x4")
    assert topo.runtime is not None
    schedule = baseline(topo, "allgather", "ring")
    assert fast_sim.POSTED_MIN_TRANSFERS <= len(schedule.transfers) < fast_sim.FAST_MIN_TRANSFERS
    costs = topo.runtime.costs(Protocol.SIMPLE, CollectiveKind.ALLGATHER, topo)
    assert costs.post_us > 0 and any(costs.posts(topo, t.route) for t in schedule.transfers)
    posted = simulate_large(topo, schedule, 2**26, SimOptions(costs=costs))
    assert posted.notes.get("simulator") == "compiled"
    _same(simulate(topo, schedule, 2**26, SimOptions(costs=costs)), posted)
    unposted = SimOptions(costs=replace(costs, post_us=0.0))
    assert simulate_large(topo, schedule, 2**26, unposted).notes.get("simulator") != "compiled"


def test_a_ready_kernel_takes_schedules_from_fewer_transfers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the kernel is loaded (or in numba's cache), simulate_large takes it from WARM_MIN_TRANSFERS on, with the
    same result; not before it is ready, and never below that."""
    from taccl_py import fast_sim

    topo = resolve_topology("dgx-a100x2")
    schedule = baseline(topo, "allreduce", "tree")
    assert fast_sim.WARM_MIN_TRANSFERS <= len(schedule.transfers) < fast_sim.FAST_MIN_TRANSFERS
    simulate_compact(topo, compact(schedule), 2**20)  # the kernel, loaded or compiled
    assert fast_sim.kernel_ready()
    ready = simulate_large(topo, schedule, 2**26)
    assert ready.notes.get("simulator") == "compiled"
    _same(simulate(topo, schedule, 2**26), ready)
    small = baseline(resolve_topology("dgx-a100"), "allreduce", "ring")
    assert len(small.transfers) < fast_sim.WARM_MIN_TRANSFERS
    assert simulate_large(resolve_topology("dgx-a100"), small, 2**26).notes.get("simulator") != "compiled"
    monkeypatch.setattr(fast_sim, "kernel_ready", lambda _transfers=0: False)
    assert simulate_large(topo, schedule, 2**26).notes.get("simulator") != "compiled"


@pytest.mark.slow
def test_kernel_ready_reads_numbas_cache_without_compiling(tmp_path: Path) -> None:
    """A new process finds the kernel an earlier one compiled (numba's cache, read through its internals: this
    checks they still say what kernel_ready takes them to say), and not in an empty cache."""
    import os
    import subprocess
    import sys

    from taccl_py import fast_sim

    topo = resolve_topology("dgx-a100")
    simulate_compact(topo, compact(baseline(topo, "allreduce", "ring")), 2**20)  # compiled, so cached, here
    probe = ("from taccl_py import fast_kernel, fast_sim; loaded = bool(fast_kernel.run.signatures); "
             "print(loaded, fast_sim.kernel_ready(fast_sim.LOAD_MIN_TRANSFERS), bool(fast_kernel.run.signatures))")

    def ask(**env: str) -> str:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                              env={**os.environ, **env}, timeout=120)
        return done.stdout.strip()

    assert fast_sim.kernel_ready()
    assert ask() == "False True False"  # ready, from the cache, and nothing compiled or loaded to say so
    assert ask(NUMBA_CACHE_DIR=str(tmp_path)) == "False False False"


@pytest.mark.slow
def test_a_process_loads_the_cached_kernel_once_small_runs_add_up() -> None:
    """A new process keeps small runs in Python (loading the kernel costs more than one of them) until it has
    simulated LOAD_MIN_TRANSFERS transfers the kernel covers; then it loads the kernel from numba's cache and runs
    the rest compiled, with the same times. Runs below WARM_MIN_TRANSFERS, or the kernel cannot run, do not count."""
    import subprocess
    import sys

    topo = resolve_topology("dgx-a100x2")
    simulate_compact(topo, compact(baseline(topo, "allreduce", "tree")), 2**20)  # compiled, so cached, here
    probe = """
import json
from dataclasses import replace
from taccl_py import fast_sim
from taccl_py.baselines import baseline
from taccl_py.library import resolve_topology
from taccl_py.topology import SwitchModel
topo = resolve_topology("dgx-a100x2")
tree = baseline(topo, "allreduce", "tree")
small = baseline(resolve_topology("dgx-a100"), "allreduce", "ring")
for _ in range(50):
    fast_sim.simulate_large(resolve_topology("dgx-a100"), small, 2**20)
relayed = replace(topo, switch_model=SwitchModel.STORE_AND_FORWARD)  # the kernel does not run it: not counted
for _ in range(2):
    fast_sim.simulate_large(relayed, tree, 2**20)
ways = [fast_sim.simulate_large(topo, tree, 2**20).notes.get("simulator", "python") for _ in range(8)]
print(json.dumps([len(tree.transfers), fast_sim.LOAD_MIN_TRANSFERS, ways,
                  fast_sim.simulate_large(topo, tree, 2**26).time_us]))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    count, load_from, ways, time_us = json.loads(done.stdout)
    python_runs = -(-load_from // count) - 1  # then the next run, with these, reaches LOAD_MIN_TRANSFERS
    assert 1 < python_runs < len(ways)
    assert ways == ["python"] * python_runs + ["compiled"] * (len(ways) - python_runs)
    assert time_us == simulate(topo, baseline(topo, "allreduce", "tree"), 2**26).time_us


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["Simple", "LL", "LL128"])
def test_direct_allgather_with_posts_is_the_same_compiled(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The case the posted threshold is for: a direct Allgather across 4 machines, whose transfers start one proxy
    post after another; every per-transfer time equal in Python and compiled, and with waits added too."""
    from taccl_py import fast_sim

    topo = resolve_topology("dgx-a100x4")
    assert topo.runtime is not None
    schedule = baseline(topo, "allgather", "direct")
    costs = topo.runtime.costs(protocol, CollectiveKind.ALLGATHER, topo)
    assert costs.post_us > 0
    monkeypatch.setattr(fast_sim, "POSTED_MIN_TRANSFERS", len(schedule.transfers) // 2)
    options = SimOptions(costs=costs)
    compiled = simulate_large(topo, schedule, 2**24, options)
    assert compiled.notes.get("simulator") == "compiled"
    _same(simulate(topo, schedule, 2**24, options), compiled)
    waited = Schedule(schedule.collective, tuple(replace(t, after=(i - 7,)) if i >= 7 and i % 5 == 0 else t
                                                 for i, t in enumerate(schedule.transfers)))
    waited_compiled = simulate_large(topo, waited, 2**24, options)
    assert waited_compiled.notes.get("simulator") == "compiled" and waited_compiled.correct
    _same(simulate(topo, waited, 2**24, options), waited_compiled)


def test_resources_that_cannot_bind_change_no_time_in_either_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """NCCL's Alltoall across two DGX A100s under its runtime costs: the NICs' cables and the spines cannot limit a
    rate (:func:`taccl_py.fluid.binding_resources`), so both simulators skip them; told every resource binds, they
    give the same times (to rounding) and the same link accounts."""
    from taccl_py import event_kernel, fast_sim
    from taccl_py.fluid import binding_resources

    topo = resolve_topology("dgx-a100x2")
    assert topo.runtime is not None
    schedule = baseline(topo, CollectiveKind.ALLTOALL, "direct")
    costs = topo.runtime.costs("Simple", CollectiveKind.ALLTOALL, topo)
    options = SimOptions(costs=costs)
    binding = binding_resources(costs.link_capacity_us(topo), [t.route for t in schedule.transfers])
    skipped = {topo.links[r].kind for r, b in enumerate(binding) if not b}
    assert skipped == {"ib"} and sum(binding) == 32 + 32  # NVLink and the GPUs' NIC ports, both ways
    told = simulate(topo, schedule, 2**24, options)
    _same(told, simulate_compact(topo, compact(schedule), 2**24, options))

    def every_one_binds(capacities: list[float], routes: object) -> list[bool]:
        return [True] * len(capacities)

    monkeypatch.setattr(event_kernel, "binding_resources", every_one_binds)
    monkeypatch.setattr(fast_sim, "binding_resources", every_one_binds)
    untold = simulate(topo, schedule, 2**24, options)
    _same(untold, simulate_compact(topo, compact(schedule), 2**24, options))
    assert told.correct and told.time_us == pytest.approx(untold.time_us, rel=1e-12)
    assert np.allclose(told.commit_us, untold.commit_us, rtol=1e-12, atol=0)
    assert told.link_bytes == untold.link_bytes
    assert told.link_busy_us == pytest.approx(untold.link_busy_us, rel=1e-12)


@pytest.mark.parametrize("per_slot", [0, 10**9], ids=["touched pairs", "every pair"])
def test_an_alltoalls_pairs_numbered_either_way_time_and_fail_as_in_python(per_slot: int,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An Alltoall's n^2 chunks on each of n ranks: the kernel numbers only the (rank, chunk) pairs the run can
    touch (its reads, its writes, the start, the post-condition) or all of them; the same times either way, and a
    dropped transfer and a chunk its sender never holds fail with Python's message."""
    from taccl_py import fast_sim

    monkeypatch.setattr(fast_sim, "DENSE_KEYS_PER_SLOT", per_slot)
    topo = resolve_topology("dgx-a100x2")
    schedule = baseline(topo, CollectiveKind.ALLTOALL, "direct")
    arrays = compact(schedule)
    coll = schedule.collective
    keys = fast_sim._key_space(arrays)
    assert (keys.live is not None) == (per_slot == 0)
    c = coll.chunk_factor
    if keys.live is not None:  # each rank's 16 chunks at the start, and the 15 it receives (its own one it keeps)
        assert keys.size == 16 * (16 + 15) * c
    else:
        assert keys.size == 16 * coll.num_chunks
    assert _both(topo, schedule, 2**20).correct
    transfers = list(schedule.transfers)
    dropped = _both(topo, schedule.with_transfers(transfers[:5] + transfers[6:]), 2**20)
    assert dropped.error is not None and "never receives" in dropped.error
    t = transfers[5]
    stranger = next(x for x in range(coll.num_chunks)
                    if x // (16 * coll.chunk_factor) not in (t.src, t.dst) and (x // coll.chunk_factor) % 16 != t.src)
    transfers[5] = replace(t, chunks=(stranger,))
    missing = _both(topo, schedule.with_transfers(transfers), 2**20)
    assert missing.error is not None and "does not hold" in missing.error


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0, 2.5, 2.5, 7.0]), st.integers(0, 2), st.integers(0, 5),
                          st.booleans()), max_size=60))
def test_pruning_the_event_queue_keeps_its_live_events_in_order(events: list[tuple[float, int, int, bool]]) -> None:
    """Events pushed with their kind and group, finish events made void by a later one of their group (or by the
    group emptying): pruning drops exactly the void ones and the rest come off in (time, seq) order, as they
    would have."""
    from numba.typed import List

    from taccl_py import fast_kernel as fk

    queue = List([np.empty((4, 5))])
    cnt = np.zeros(24, np.int64)
    cnt[fk.EVENTS] = 1
    gi = np.zeros((11, 6), np.int64)
    pushed = []
    for time, kind, group, emptied in events:
        seq = fk.event_push(queue, cnt, time, kind, 100 + group, group)
        pushed.append((time, seq, kind, 100 + group, group))
        if kind == fk._FINISH:
            gi[fk.GI_EVENT, group] = 0 if emptied else seq
    live = sorted(e for e in pushed if e[2] != fk._FINISH or gi[fk.GI_EVENT, e[4]] == e[1])
    fk._prune_queue(queue, cnt, gi)
    assert cnt[fk._QN] == len(live)
    assert [fk.event_pop(queue, cnt) for _ in live] == live


@pytest.mark.parametrize(("kind", "algorithm", "costed"), [("allgather", "oneshot", True),
                                                            ("allreduce", "tree", False)])
def test_a_run_that_prunes_its_event_queue_times_as_in_python(kind: str, algorithm: str, costed: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Two DGX A100s, runs whose re-solves leave void finish events behind (a one-shot Allgather under Simple's
    costs, the tree Allreduce on the raw links): pruned from 16 queued events on, the kernel drops them and gives
    Python's result, and the one it gives unpruned."""
    from taccl_py import fast_kernel

    topo = resolve_topology("dgx-a100x2")
    assert topo.runtime is not None
    coll = CollectiveKind(kind)
    schedule = baseline(topo, coll, algorithm)
    options = SimOptions(costs=topo.runtime.costs("Simple", coll, topo) if costed else None)
    whole = simulate_compact(topo, compact(schedule), 2**24, options)
    monkeypatch.setattr(fast_kernel, "QUEUE_PRUNE_FROM", 16)
    pruned = simulate_compact(topo, compact(schedule), 2**24, options)
    _same(simulate(topo, schedule, 2**24, options), pruned)
    _same(whole, pruned)
    assert pruned.notes["events"] == whole.notes["events"]
    assert whole.notes["void_events_dropped"] == 0 < pruned.notes["void_events_dropped"]


def test_the_memory_a_full_simulation_needs_counts_routes_and_numbered_pairs() -> None:
    """Per transfer, per distinct route (a direct Alltoall has one per pair of GPUs, a ring a few) and per
    numbered (rank, chunk) pair: an Alltoall's touched pairs, not its n^3 (1,024 GPUs: 4.2 million, not 1.1
    billion), so that the side-by-side check and the refusal see what a run takes; the same for a schedule and its
    arrays."""
    from taccl_py import fast_sim
    from taccl_py.collectives import Collective

    topo = resolve_topology("dgx-a100x2")
    a2a = baseline(topo, CollectiveKind.ALLTOALL, "direct")
    routes = len({t.route for t in a2a.transfers})
    assert routes == 240
    pairs, sparse = fast_sim.numbered_pairs(a2a.collective, 240)
    assert sparse and pairs == 2 * 240 + 2 * 256
    want = 240 * fast_sim.FULL_BYTES_PER_TRANSFER + 240 * fast_sim.FULL_BYTES_PER_ROUTE + \
        pairs * (fast_sim.FULL_BYTES_PER_PAIR + 8)
    assert fast_sim.full_simulation_bytes(a2a) == want == fast_sim.full_simulation_bytes(compact(a2a))
    star = switch_star(12)  # 4 chunk slots per transfer: dense by its 528 slots (sparse by its 132 transfers)
    pieces = direct_schedule(star, CollectiveKind.ALLTOALL, chunk_factor=4)
    dense = 12 * pieces.collective.num_chunks
    assert fast_sim.numbered_pairs(pieces.collective, 4 * 132) == (dense, False)
    assert fast_sim.numbered_pairs(pieces.collective, 132)[1]
    assert fast_sim.full_simulation_bytes(pieces) == fast_sim.full_simulation_bytes(compact(pieces)) == \
        132 * (fast_sim.FULL_BYTES_PER_TRANSFER + fast_sim.FULL_BYTES_PER_ROUTE) + dense * fast_sim.FULL_BYTES_PER_PAIR
    ring = baseline(topo, CollectiveKind.ALLGATHER, "ring")
    ring_routes = len({t.route for t in ring.transfers})
    assert ring_routes < len(ring.transfers) // 4
    assert fast_sim.numbered_pairs(ring.collective, len(ring.transfers)) == (16 * ring.collective.num_chunks, False)
    big = Collective(CollectiveKind.ALLTOALL, 1024)
    assert fast_sim.numbered_pairs(big, 1024 * 1023) == (2 * 1024 * 1023 + 2 * 1024**2, True)
    assert fast_sim.numbered_pairs(Collective(CollectiveKind.ALLTOALL, 8), 56) == (8**3, False)  # 512 <= 4 x 240


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(min_gpus=3, max_gpus=6), st.sampled_from([(1, None), (2, None), (1, 3)]), st.data())
def test_random_alltoalls_with_sparse_pairs_time_and_fail_as_in_python(topo: Topology,
                                                                      shape: tuple[int, int | None],
                                                                      data: st.DataObject) -> None:
    """Direct Alltoalls on random topologies (relayed where GPUs are not joined through switches), on 1 or 2
    channels or 3 chunks per piece, mutated (dropped, repeated or retargeted transfers, another chunk, the other
    operation, a relay added): with only the touched (rank, chunk) pairs numbered, the kernel gives Python's
    result, fault or post-condition message, to the last digit."""
    from taccl_py import fast_sim

    channels, chunk_factor = shape
    schedule = direct_schedule(topo, CollectiveKind.ALLTOALL, channels=channels, chunk_factor=chunk_factor)
    n, nc = topo.num_gpus, schedule.collective.num_chunks
    transfers = list(schedule.transfers)
    for _ in range(data.draw(st.integers(0, 3))):
        if not transfers:
            break
        i = data.draw(st.integers(0, len(transfers) - 1))
        t = transfers[i]
        how = data.draw(st.sampled_from(["drop", "twice", "chunk", "dst", "op", "relay"]))
        others = [x for x in range(n) if x not in (t.src, t.dst)]
        if how == "drop":
            del transfers[i]
        elif how == "twice":
            transfers.insert(data.draw(st.integers(0, len(transfers))), t)
        elif how == "chunk":
            transfers[i] = replace(t, chunks=(data.draw(st.integers(0, nc - 1)),))
        elif how == "op":
            transfers[i] = replace(t, op=Op.REDUCE if t.op is Op.COPY else Op.COPY)
        elif others:
            r = data.draw(st.sampled_from(others))
            there, back = topo.shortest_path(t.src, r), topo.shortest_path(r, t.dst)
            if how == "dst" and there is not None:
                transfers[i] = replace(t, dst=r, route=there)
            elif how == "relay" and there is not None and back is not None:
                transfers[i:i + 1] = [replace(t, dst=r, route=there), replace(t, src=r, route=back)]
    mutated = schedule.with_transfers(transfers)
    arrays = compact(mutated)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_sim, "DENSE_KEYS_PER_SLOT", 0)  # always the touched pairs
        assert fast_sim._key_space(arrays).live is not None
        _same(simulate(topo, mutated, 2**20), simulate_compact(topo, arrays, 2**20))


def test_a_key_outside_the_numbered_pairs_is_refused() -> None:
    """The sparse numbering looks keys up in its sorted table; a key not in it (a bug in what was numbered, never
    input) raises rather than take a neighbour's number or run past the table."""
    from taccl_py import fast_sim

    keys = fast_sim._Keys(np.array([1, 5, 9], np.int64), 3)
    assert keys.number(np.array([9, 1, 5], np.int64)).tolist() == [2, 0, 1]
    for outside in ([5, 6], [10], [0]):
        with pytest.raises(ValueError, match="outside the numbered pairs"):
            keys.number(np.array(outside, np.int64))
    assert fast_sim._Keys(None, 7).number(np.array([3], np.int64)).tolist() == [3]
