"""Unit tests of each encoding on hand-checkable instances (a line of 3 GPUs, a 4-ring, a star switch)."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from solver_models._backend import IntegerProgram, SolverConfig, solve_integer_program, solve_lp
from solver_models.arborescence import min_arborescence
from solver_models.logical import build_logical_graph
from solver_models.ordering import Task, arrival_order, list_order, pipeline_order
from solver_models.routing import assign_pieces, path_columns, tree_columns
from solver_models.scheduling import schedule_tasks
from solver_models.symmetry import find_symmetry, offset_permutation, trivial_symmetry
from taccl_py.errors import Infeasible, SolverTimeout
from taccl_py.library import resolve_topology
from taccl_py.sketch import Sketch, derive_sketch
from taccl_py.topology import Link, Switch, Topology, check_topology


def line3(bw: float = 10.0) -> Topology:
    links = [Link(0, 1, bw, 1.0), Link(1, 0, bw, 1.0), Link(1, 2, bw, 1.0), Link(2, 1, bw, 1.0)]
    return check_topology(Topology("line3", 3, tuple(links)))


def ring4(bw: float = 10.0) -> Topology:
    links = []
    for i in range(4):
        links += [Link(i, (i + 1) % 4, bw, 1.0), Link((i + 1) % 4, i, bw, 1.0)]
    return check_topology(Topology("ring4", 4, tuple(links)))


def star(n: int = 4, bw: float = 10.0) -> Topology:
    links = []
    for g in range(n):
        links += [Link(g, "sw", bw, 0.5), Link("sw", g, bw, 0.5)]
    return check_topology(Topology(f"star{n}", n, tuple(links), switches=(Switch("sw"),)))


# ------------------------------------------------------------------ arborescence
@given(st.integers(2, 9), st.integers(0, 2**32 - 1), st.floats(0.0, 0.6))
def test_min_arborescence_matches_networkx(n: int, seed: int, sparsity: float) -> None:
    rng = np.random.default_rng(seed)
    cost = rng.integers(1, 30, size=(n, n)).astype(float)
    cost[rng.random((n, n)) < sparsity] = np.inf
    root = int(rng.integers(0, n))
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    for u in range(n):
        for v in range(n):
            if u != v and v != root and np.isfinite(cost[u, v]):
                graph.add_edge(u, v, weight=cost[u, v])
    try:
        reference = nx.minimum_spanning_arborescence(graph)
        expected: float | None = sum(d["weight"] for _, _, d in reference.edges(data=True))
    except nx.NetworkXException:
        expected = None
    try:
        parent = min_arborescence(cost, root)
    except Infeasible:
        assert expected is None
        return
    assert expected is not None
    assert sum(cost[parent[v], v] for v in range(n) if v != root) == pytest.approx(expected)
    for v in range(n):  # every vertex reaches the root without a cycle
        seen = set()
        while v != root:
            assert v not in seen
            seen.add(v)
            v = int(parent[v])


# ---------------------------------------------------------------------- symmetry
def test_symmetry_of_a_ring_is_its_rotations() -> None:
    sym = find_symmetry(ring4())
    assert sym.order == 4 and sym.reps == (0,)
    for gpu, (rep, g) in enumerate(sym.image_of):
        assert sym.perms[g][rep] == gpu


def test_symmetry_of_reference_instances() -> None:
    assert find_symmetry(resolve_topology("ndv2x2")).order == 2  # the machine swap only
    dgx2x2 = find_symmetry(resolve_topology("dgx2x2"))
    assert dgx2x2.order == 16 and len(dgx2x2.reps) == 2  # odd and even GPUs differ
    assert find_symmetry(resolve_topology("dgx-a100x4")).order == 32


def test_symmetry_acts_freely_and_preserves_links() -> None:
    topo = resolve_topology("dgx2x2")
    sym = find_symmetry(topo)
    for p in sym.perms[1:]:
        assert all(p[v] != v for v in range(topo.num_gpus))
    for lp in sym.link_perms:
        for li, image in enumerate(lp):
            a, b = topo.links[li], topo.links[image]
            assert (a.bandwidth, a.latency, a.kind) == (b.bandwidth, b.latency, b.kind)


def test_taccl_offsets_and_rejection_of_a_non_symmetry() -> None:
    assert offset_permutation(8, 2, 4) == [2, 3, 0, 1, 6, 7, 4, 5]
    topo = resolve_topology("ndv2x2")
    assert find_symmetry(topo, offsets=[(8, 16)]).order == 2
    assert find_symmetry(topo, offsets=[(1, 8)]).order == 1  # rotating DGX-1 GPUs is no automorphism
    assert trivial_symmetry(topo).reps == tuple(range(16))


# ------------------------------------------------------------------ logical graph
def test_logical_graph_line_and_star() -> None:
    assert set(build_logical_graph(line3(), derive_sketch()).edges) == {(0, 1), (1, 0), (1, 2), (2, 1)}
    graph = build_logical_graph(star(4), derive_sketch())
    assert len(graph.edges) == 12 and all(len(r) == 2 for r in graph.routes)


def test_direct_sketch_on_a_switch_is_infeasible_and_says_why() -> None:
    with pytest.raises(Infeasible, match="cannot reach"):
        build_logical_graph(star(3), Sketch(intranode="direct"))


# ------------------------------------------------------------------------ routing
@pytest.mark.parametrize(("topo", "ratio"), [(line3(), 2.0), (ring4(), 1.5), (star(4), 3.0)])
def test_tree_lp_reaches_the_cut_bound(topo: Topology, ratio: float) -> None:
    """Line of 3: S={0,1} sends 2 blocks over one link; 4-ring: 3 GPUs feed the 4th over 2 links;
    star of 4: 3 blocks into one GPU's down-link. Time per byte of a GPU's block = ratio / B."""
    graph = build_logical_graph(topo, derive_sketch())
    pool = tree_columns(topo, graph, find_symmetry(topo))
    assert pool.lp_time_per_byte_us * 10e3 == pytest.approx(ratio)


@pytest.mark.parametrize("solver", ["cpsat", "cbc"])
def test_integer_master_covers_every_piece(solver: str) -> None:
    topo = ring4()
    graph = build_logical_graph(topo, derive_sketch())
    pool = tree_columns(topo, graph, find_symmetry(topo))
    plan = assign_pieces(pool, 4, 1e6, SolverConfig(solver=solver, time_limit_s=10))
    assert set(plan.assignment) == {(g, -1) for g in range(4)}
    assert all(sum(a.count for a in choice) == 4 for choice in plan.assignment.values())
    stats = plan.stats[1]
    assert stats.objective is not None and stats.objective >= 1.5 * 4e6 / 10e3 - 1e-6


@pytest.mark.slow
def test_integer_master_without_a_solution_in_time_falls_back_to_rounding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import solver_models.routing as routing

    topo = resolve_topology("dgx1")
    graph = build_logical_graph(topo, derive_sketch())
    pool = tree_columns(topo, graph, find_symmetry(topo))
    solved = assign_pieces(pool, 6, 1e6, SolverConfig(time_limit_s=10))

    def no_solution(*_: object, **__: object) -> None:
        raise SolverTimeout("routing integer master: CP-SAT found no solution within 0 s")

    monkeypatch.setattr(routing, "solve_integer_program", no_solution)
    plan = assign_pieces(pool, 6, 1e6, SolverConfig(time_limit_s=10))
    assert set(plan.assignment) == {(g, -1) for g in range(8)}
    assert all(sum(a.count for a in choice) == 6 for choice in plan.assignment.values())
    stats = plan.stats[1]
    assert stats.status == "work limit" and stats.stopped_by == "work limit" and "rounded" in stats.note
    # the rounding is feasible, so never better than the optimum, and its objective is what the split costs:
    # the busiest physical link's bytes over its bandwidth plus the slowest route used
    assert solved.stats[1].objective is not None and stats.objective is not None
    assert stats.objective >= solved.stats[1].objective - 1e-6
    load: dict[int, float] = {}
    slowest = 0.0
    for choice in plan.assignment.values():
        for a in choice:
            perm = pool.symmetry.perms[a.perm]
            for e in a.column.edges:
                u, v = graph.edges[e]
                for li in graph.routes[graph.index[(perm[u], perm[v])]]:
                    load[li] = load.get(li, 0.0) + a.count * 1e6 / (topo.links[li].bandwidth * 1e3)
            slowest = max(slowest, a.column.path_time_us(graph, 1e6))
    assert stats.objective == pytest.approx(max(load.values()) + slowest, rel=1e-9)


def test_paths_for_alltoall_on_a_line() -> None:
    topo = line3()
    graph = build_logical_graph(topo, derive_sketch())
    pool = path_columns(topo, graph, find_symmetry(topo))
    hops = {c: [len(col.edges) for col in cols] for c, cols in pool.columns.items()}
    assert hops[(0, 2)] == [2] and hops[(0, 1)] == [1]


def test_lp_and_milp_backends() -> None:
    lp = solve_lp([1.0, 1.0], [([(0, 1.0), (1, 2.0)], ">=", 4.0)], [0.0, 0.0], [10.0, 10.0])
    assert lp.objective == pytest.approx(2.0)
    for solver in ("cpsat", "cbc"):
        program = IntegerProgram()
        x = program.var("x", 0, 10, integer=True, cost=3.0)
        y = program.var("y", 0, 10, integer=True, cost=2.0)
        program.add([(x, 2.0), (y, 3.0)], ">=", 7.0, "demand")
        values, stats = solve_integer_program(program, SolverConfig(solver=solver, time_limit_s=5), "test")
        assert 2 * values[0] + 3 * values[1] >= 7 - 1e-9
        # candidates: x=0,y=3 costs 6; x=1,y=2 costs 7; x=2,y=1 costs 8
        assert stats.objective == pytest.approx(6.0)
        assert stats.status == "optimal"


# ----------------------------------------------------------------- ordering
def _chain_tasks() -> list[Task]:
    # chunk 0 goes 0 -> 1 -> 2 on a line; chunk 1 goes 2 -> 1 -> 0
    return [Task(0, 1, (0,), (0,), 1.0, 1e4, 10.0, -1, (1, 0, 0, 0)),
            Task(1, 2, (0,), (2,), 1.0, 1e4, 10.0, 0, (1, 0, 0, 0)),
            Task(2, 1, (1,), (3,), 1.0, 1e4, 10.0, -1, (1, 0, 0, 2)),
            Task(1, 0, (1,), (1,), 1.0, 1e4, 10.0, 2, (1, 0, 0, 2))]


@pytest.mark.parametrize("rule", [arrival_order, list_order])
def test_orderings_respect_data_dependencies(rule: object) -> None:
    tasks = _chain_tasks()
    timing = rule(tasks, 4)  # type: ignore[operator]
    for i, t in enumerate(tasks):
        if t.pred >= 0:
            assert timing.start_us[i] >= timing.arrive_us[t.pred] - 1e-9
    assert timing.makespan_us == pytest.approx(2 * (1.0 + 1.0))


def test_pipeline_order_goes_piece_by_piece() -> None:
    order = pipeline_order(_chain_tasks()).order(_chain_tasks())
    assert order.index(0) < order.index(1) and order.index(2) < order.index(3)


def test_cpsat_schedule_merges_latency_bound_messages() -> None:
    # two contiguous tiny chunks on one connection: one message saves a latency
    tasks = [Task(0, 1, (0,), (0,), 5.0, 10.0, 10.0, -1, (1, 0, 0, 0)),
             Task(0, 1, (1,), (0,), 5.0, 10.0, 10.0, -1, (1, 0, 1, 0))]
    hint = arrival_order(tasks, 1)
    solved, stats = schedule_tasks(tasks, 1, hint, SolverConfig(time_limit_s=5), allow_merge=True)
    assert solved.group == [0, 0]
    assert solved.makespan_us < hint.makespan_us
    assert stats.status == "optimal"


# ----------------------------------------------------------------- budgets
def test_column_generation_stops_on_its_round_budget_and_says_so() -> None:
    from solver_models.routing import ColumnBudget

    topo = resolve_topology("mi250x2")
    graph = build_logical_graph(topo, derive_sketch())
    symmetry = find_symmetry(topo, allowed=frozenset(graph.edges))
    pool = tree_columns(topo, graph, symmetry, budget=ColumnBudget(max_rounds=2))
    assert pool.stats.iterations == 2 and pool.stats.stopped_by == "work limit"
    assert pool.stats.status == "work limit"
    again = tree_columns(topo, graph, symmetry, budget=ColumnBudget(max_rounds=2))
    assert again.columns == pool.columns and again.lp_time_per_byte_us == pool.lp_time_per_byte_us
    # a pricing-work budget that allows no pricing round stops after the first master LP
    tight = tree_columns(topo, graph, symmetry, budget=ColumnBudget(work_limit=1e-9))
    assert tight.stats.iterations == 1 and tight.stats.stopped_by == "work limit"


def _latency_bound_tasks(n: int) -> list[Task]:
    """``n`` GPUs on a star, each sending its chunk to every other GPU through the switch."""
    tasks = []
    for src in range(n):
        for dst in range(n):
            if src != dst:
                tasks.append(Task(src, dst, (src,), (src, n + dst), 2.0, 1e3, 10.0, -1, (1, 0, 0, src)))
    return tasks


def _partition(items: int = 40) -> IntegerProgram:
    """Split random weights into two near-equal halves: CP-SAT finds good splits fast but proves slowly."""
    rng = np.random.default_rng(7)
    weights = [float(w) for w in rng.integers(10**5, 10**6, size=items)]
    program = IntegerProgram()
    xs = [program.var(f"x{i}", 0, 1, integer=True) for i in range(items)]
    z = program.var("z", 0, math.inf, integer=True, cost=1.0)
    program.add([*((x, w) for x, w in zip(xs, weights, strict=True)), (z, -1.0)], "<=", 0.0, "left")
    program.add([*((x, -w) for x, w in zip(xs, weights, strict=True)), (z, -1.0)], "<=", -sum(weights), "right")
    return program


def test_cpsat_stops_on_deterministic_work_with_the_same_answer_every_time() -> None:
    config = SolverConfig(time_limit_s=600, work_limit=0.02)
    first, stats = solve_integer_program(_partition(), config, "partition")
    second, again = solve_integer_program(_partition(), config, "partition")
    assert stats.status == "feasible" and stats.stopped_by == "work limit"
    assert first == second and stats.objective == again.objective and stats.bound == again.bound


def test_scheduling_names_the_clock_when_it_stops_the_solve() -> None:
    tasks = _latency_bound_tasks(6)
    hint = arrival_order(tasks, 12)
    solved, stats = schedule_tasks(tasks, 12, hint, SolverConfig(time_limit_s=600, work_limit=1.0), allow_merge=True)
    assert stats.status == "optimal" and stats.stopped_by == ""
    assert solved.makespan_us < hint.makespan_us
    # a wall clock far below the work budget: the guard stops it, and the stats say so
    _, guarded = schedule_tasks(tasks, 12, hint, SolverConfig(time_limit_s=1e-6, work_limit=1e6), allow_merge=True)
    assert guarded.stopped_by == "time limit"


def test_cbc_runs_on_a_node_budget() -> None:
    program = IntegerProgram()
    x = program.var("x", 0, 10, integer=True, cost=3.0)
    y = program.var("y", 0, 10, integer=True, cost=2.0)
    program.add([(x, 2.0), (y, 3.0)], ">=", 7.0, "demand")
    values, stats = solve_integer_program(program, SolverConfig(solver="cbc", time_limit_s=30, max_nodes=1), "test")
    assert 2 * values[0] + 3 * values[1] >= 7 - 1e-9 and stats.stopped_by in ("", "work limit")


@pytest.mark.slow
def test_only_the_backend_imports_a_solver_library() -> None:
    """README and ``_backend.py`` say it: every ortools/pulp import is in ``solver_models/_backend.py``."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    offenders = []
    for path in sorted([*(root / "taccl_py").rglob("*.py"), *(root / "solver_models").rglob("*.py")]):
        if path.name == "_backend.py" and path.parent.name == "solver_models":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(root)}:{node.lineno}" for name in names
                          if name.split(".")[0] in ("ortools", "pulp")]
    assert offenders == []


def test_an_unknown_solver_is_bad_input() -> None:
    from solver_models._backend import check_solver
    from taccl_py.errors import InputError

    check_solver("cpsat")
    check_solver("cbc")
    with pytest.raises(InputError, match="solver 'bogus' is not available") as info:
        check_solver("bogus")
    assert info.value.exit_status == 2
