"""Hypothesis strategies for property-testing schedules in your own code.

``from taccl_py.testing import topologies`` needs the ``hypothesis`` package
(installed with the ``test`` extra). Every topology drawn validates: GPUs are
strongly connected, bandwidths are positive, latencies non-negative.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from taccl_py.topology import Link, Switch, Topology, check_topology

__all__ = ["topologies"]


@st.composite
def topologies(draw: Any, min_gpus: int = 2, max_gpus: int = 8, max_switches: int = 2,
               min_switches: int = 0, bandwidths: tuple[float, float] = (1.0, 100.0),
               latencies: tuple[float, float] = (0.0, 5.0)) -> Topology:
    """Random connected topologies, with and without switches.

    GPUs are joined by a backbone (a bidirectional ring, or a star through a
    switch) so that every GPU reaches every other; random extra directed links
    between GPUs and switches are then added.
    """
    n = draw(st.integers(min_gpus, max_gpus), label="gpus")
    num_switches = draw(st.integers(min_switches, max_switches), label="switches")
    switches = tuple(Switch(f"sw{k}") for k in range(num_switches))
    bw = st.sampled_from([bandwidths[0], bandwidths[1], (bandwidths[0] + bandwidths[1]) / 2]) | st.floats(
        bandwidths[0], bandwidths[1], allow_nan=False, allow_infinity=False)
    lat = st.sampled_from([latencies[0], latencies[1]]) | st.floats(latencies[0], latencies[1], allow_nan=False)
    links: dict[tuple[Any, Any], Link] = {}

    def add(u: Any, v: Any) -> None:
        if u != v and (u, v) not in links:
            links[(u, v)] = Link(u, v, draw(bw), draw(lat), kind="nvlink" if isinstance(v, int)
                                 and isinstance(u, int) else "switch")

    backbone_switch = num_switches > 0 and draw(st.booleans(), label="star backbone")
    if backbone_switch:
        for g in range(n):
            add(g, "sw0")
            add("sw0", g)
    else:
        for g in range(n):
            add(g, (g + 1) % n)
            add((g + 1) % n, g)
    vertices: list[Any] = [*range(n), *(s.name for s in switches)]
    for name in [s.name for s in switches]:
        # every switch is reachable and can reach back, so it never dangles
        g = draw(st.integers(0, n - 1))
        add(g, name)
        add(name, draw(st.integers(0, n - 1)))
    extra = draw(st.lists(st.tuples(st.sampled_from(vertices), st.sampled_from(vertices)), max_size=2 * n))
    for u, v in extra:
        add(u, v)
    return check_topology(Topology(name=f"random{n}", num_gpus=n, links=tuple(links.values()),
                                   switches=switches, source="hypothesis"))
