"""A small append-only builder that turns generator loops into a frozen, validated Topology.

Generators add switches and links in a fixed order, so the same arguments
always give the same link list (and so byte-identical JSON). A link added
with ``both=True`` is followed immediately by its reverse, which the JSON
writer merges into one ``"bidirectional": true`` entry.
"""

from __future__ import annotations

from collections.abc import Iterable

from taccl_py.errors import TopologyError
from taccl_py.topology import Dimension, Link, Switch, Topology, Vertex, check_topology

__all__ = ["MAX_LINKS", "TopologyBuilder", "check_link_budget"]

MAX_LINKS = 2_000_000
"""Refuse to build topologies with more directed links than this (a typo, not a cluster)."""


def check_link_budget(name: str, num_links: int) -> None:
    """Raise :class:`TopologyError` before building when a generator would exceed :data:`MAX_LINKS`."""
    if num_links > MAX_LINKS:
        raise TopologyError(f"would have {num_links} directed links; the limit is {MAX_LINKS}", where=name)


class TopologyBuilder:
    """Collect switches and links, reject duplicates, and build a checked :class:`Topology`."""

    def __init__(self, name: str, num_gpus: int) -> None:
        self.name = name
        self.num_gpus = num_gpus
        self._switches: list[Switch] = []
        self._switch_names: set[str] = set()
        self._links: list[Link] = []
        self._pairs: set[tuple[Vertex, Vertex]] = set()

    def add_switch(self, name: str, kind: str = "switch", *, multicast: bool = False,
                   reduce: bool = False) -> str:
        """Declare a switch (or NIC) vertex and return its name."""
        if name in self._switch_names:
            raise TopologyError(f"duplicates switch name {name!r}", where=self.name, field="switches")
        self._switch_names.add(name)
        self._switches.append(Switch(name=name, kind=kind, multicast=multicast, reduce=reduce))
        return name

    def has_link(self, src: Vertex, dst: Vertex) -> bool:
        return (src, dst) in self._pairs

    def link(self, src: Vertex, dst: Vertex, bandwidth: float, latency: float, kind: str, *,
             both: bool = True) -> None:
        """Add ``src -> dst`` (and ``dst -> src`` right after it when ``both``)."""
        ends = [(src, dst), (dst, src)] if both else [(src, dst)]
        check_link_budget(self.name, len(self._links) + len(ends))
        for u, v in ends:
            if (u, v) in self._pairs:
                raise TopologyError(f"duplicates the link {u!r} -> {v!r}", where=self.name, field="links")
            self._pairs.add((u, v))
            self._links.append(Link(src=u, dst=v, bandwidth=float(bandwidth), latency=float(latency),
                                    kind=kind))

    def build(self, *, source: str, machines: Iterable[Iterable[int]] = (),
              dimensions: Iterable[Dimension] = ()) -> Topology:
        """The frozen topology, checked with :func:`~taccl_py.topology.check_topology`."""
        topology = Topology(name=self.name, num_gpus=self.num_gpus, links=tuple(self._links),
                            switches=tuple(self._switches), machines=tuple(tuple(m) for m in machines),
                            source=source, dimensions=tuple(dimensions))
        return check_topology(topology, where=self.name)
