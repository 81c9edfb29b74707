"""Minimum-cost spanning arborescence (Chu-Liu/Edmonds) on a dense cost matrix.

The pricing step of the tree encoding calls this hundreds of times on graphs of
up to a few hundred GPUs whose logical graph is nearly complete;
``networkx.minimum_spanning_arborescence`` takes seconds there, this numpy
version milliseconds.
"""

from __future__ import annotations

import numpy as np

from taccl_py.errors import Infeasible

__all__ = ["min_arborescence"]


def min_arborescence(cost: np.ndarray, root: int) -> np.ndarray:
    """Parent of every vertex in a minimum-cost arborescence rooted at ``root`` (-1 for the root).

    ``cost[u, v]`` is the cost of edge u -> v, ``inf`` where there is none.
    Raises :class:`Infeasible` if some vertex cannot be reached from the root.
    """
    n = cost.shape[0]
    if n == 1:
        return np.array([-1])
    c = np.array(cost, dtype=float, copy=True)
    np.fill_diagonal(c, np.inf)
    c[:, root] = np.inf
    parent = _solve(c, root)
    parent[root] = -1
    return parent


def _solve(c: np.ndarray, root: int) -> np.ndarray:
    n = c.shape[0]
    best_in = np.argmin(c, axis=0)
    best_cost = c[best_in, np.arange(n)]
    best_in[root] = -1
    finite = np.isfinite(best_cost)
    finite[root] = True
    if not finite.all():
        # ids here may be contracted cycles, so the message names no vertex
        raise Infeasible("routing: a spanning tree cannot reach every GPU over the links the sketch allows")
    cycle = _find_cycle(best_in, root)
    if cycle is None:
        return best_in
    in_cycle = np.zeros(n, dtype=bool)
    in_cycle[cycle] = True
    others = np.flatnonzero(~in_cycle)
    k = len(others)
    new_id = np.full(n, k, dtype=np.int64)  # contracted cycle gets id k
    new_id[others] = np.arange(k)
    cyc = np.asarray(cycle)
    # edges into the cycle: cost reduced by the cycle edge they would replace
    into = c[np.ix_(others, cyc)] - best_cost[cyc][None, :]
    into_arg = np.argmin(into, axis=1)
    out = c[np.ix_(cyc, others)]
    out_arg = np.argmin(out, axis=0)
    small = np.empty((k + 1, k + 1))
    small[:k, :k] = c[np.ix_(others, others)]
    small[:k, k] = into[np.arange(k), into_arg]
    small[k, :k] = out[out_arg, np.arange(k)]
    small[k, k] = np.inf
    sub = _solve(small, int(new_id[root]))
    parent = np.full(n, -1, dtype=np.int64)
    for i, v in enumerate(others):
        p = sub[i]
        if p == -1:
            continue
        parent[v] = others[p] if p < k else cyc[out_arg[i]]
    entering = sub[k]  # the outside vertex whose edge enters the cycle
    entry_vertex = cyc[into_arg[entering]]
    for v in cyc:
        parent[v] = best_in[v]
    parent[entry_vertex] = others[entering]
    return parent


def _find_cycle(parent: np.ndarray, root: int) -> list[int] | None:
    n = len(parent)
    state = np.zeros(n, dtype=np.int8)  # 0 unvisited, 1 on current walk, 2 done
    state[root] = 2
    for start in range(n):
        if state[start]:
            continue
        walk = []
        v = start
        while state[v] == 0:
            state[v] = 1
            walk.append(v)
            v = int(parent[v])
        if state[v] == 1:
            return walk[walk.index(v):]
        for w in walk:
            state[w] = 2
    return None
