"""Shared test helpers: small hand-built topologies and the one schedule round-trip oracle.

Every producer of schedules (the baselines, the synthesizer, hand-written
schedules, MSCCL XML loaded from a file) is judged by the same contract,
:func:`round_trip` for a :class:`Schedule` and :func:`xml_round_trip` for a
loaded program: lower to MSCCL XML, write, load back unchanged, verify valid
and correct, and take the simulator's time when timed from the XML.
"""

from __future__ import annotations

import pytest

from taccl_py.msccl import lower_schedule, parse_program, simulate_program, verify_program, write_xml
from taccl_py.msccl.ir import Program
from taccl_py.schedule import Schedule
from taccl_py.simulator import SimResult, simulate
from taccl_py.topology import Link, Switch, Topology, check_topology

__all__ = ["ROUND_TRIP_SIZE", "ring", "round_trip", "star", "xml_round_trip"]

ROUND_TRIP_SIZE = 1 << 20
"""Buffer size (bytes) the round trip times a schedule at unless told otherwise."""

XML_TIME_REL = 0.01
"""How close (relative) the XML's simulated time must be to the schedule's: the lowering may split a
transfer into threadblock steps whose fluid shares differ by rounding, never by more than this."""


def ring(n: int, bandwidth: float = 50 * 2**30 / 1e9, latency: float = 0.5) -> Topology:
    """A bidirectional ring of ``n`` GPUs; bandwidth in GB/s, latency in us (ASTRA-sim's golden ring by default)."""
    links: dict[tuple[int, int], Link] = {}
    for i in range(n):
        j = (i + 1) % n
        links.setdefault((i, j), Link(i, j, bandwidth, latency))
        links.setdefault((j, i), Link(j, i, bandwidth, latency))
    return check_topology(Topology(f"ring{n}", n, tuple(links.values())))


def star(n: int, bandwidth: float = 10.0, latency: float = 1.0, switch: str = "sw") -> Topology:
    """``n`` GPUs on one switch; bandwidth in GB/s, latency in us."""
    links = []
    for g in range(n):
        links += [Link(g, switch, bandwidth, latency), Link(switch, g, bandwidth, latency)]
    return check_topology(Topology(f"star{n}", n, tuple(links), switches=(Switch(switch),)))


def xml_round_trip(program: Program, topology: Topology, size_bytes: int = ROUND_TRIP_SIZE, *,
                   dialect: str = "v2") -> SimResult:
    """Write, load back unchanged, verify valid and correct, and time: returns the XML's simulated result."""
    text = write_xml(program, dialect)
    loaded = parse_program(text, where="round-trip.xml")
    assert loaded == program
    report = verify_program(loaded, dialect)
    assert report.valid and report.correct, [str(e) for e in report.errors[:5]]
    timed = simulate_program(loaded, topology, size_bytes)
    assert timed.correct and timed.time_us is not None and timed.time_us > 0, timed.error
    return timed


def round_trip(schedule: Schedule, topology: Topology, size_bytes: int = ROUND_TRIP_SIZE, *,
               time_rel: float = XML_TIME_REL, **options: object) -> Program:
    """Simulate, lower, write, load back, verify and time: the contract of every schedule producer.

    The schedule must be correct in the simulator; its XML must verify and (for one instance) take the
    schedule's simulated time within ``time_rel``. ``options`` go to :func:`lower_schedule` (``dialect``,
    ``instances``...; ``timing`` is the schedule's simulation at ``size_bytes`` unless given, ``timing=None``
    lowers by the schedule's structure alone).
    """
    expected = simulate(topology, schedule, size_bytes)
    assert expected.correct and expected.time_us is not None, expected.error
    dialect = str(options.get("dialect", "v2"))
    options.setdefault("timing", expected)  # as `taccl synthesize -o` lowers: with the times at its size
    program = lower_schedule(schedule, topology, **options)  # type: ignore[arg-type]
    timed = xml_round_trip(program, topology, size_bytes, dialect=dialect)
    if options.get("instances", 1) == 1:
        assert timed.time_us == pytest.approx(expected.time_us, rel=time_rel)
    return program
