"""A drawing of a topology: GPUs grouped by machine, switches drawn as switches, links with bandwidths.

Layout (deterministic, no randomness): machines are boxes on a grid. Inside a machine, GPUs sit in a row
when they only talk through switches (DGX-style), or on an ellipse when they have direct links (so
GPU-GPU links show as chords); switches serving one machine sit in its box (those that also lead out of
the machine, NICs, on the bottom row below their GPUs); switches shared by machines sit in rows under
the grid, one row per hop distance from the GPUs. A topology without machines is laid out by networkx's
spring layout (seeded, started from a circle; a ring stays a circle). Links are drawn once per connected pair, coloured by kind, wider when faster,
with their bandwidth (GB/s per direction) written on them when there are few enough to read.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyBboxPatch

from taccl_py.plots._files import new_figure
from taccl_py.topology import Topology, Vertex

__all__ = ["topology_figure"]

_KIND_COLOURS = {"nvlink": "#3f8f00", "xgmi": "#c0392b", "pcie": "#7f7f7f", "nic": "#e67e22", "ib": "#2e6fb5",
                 "ethernet": "#8e44ad"}
_SWITCH_COLOURS = {"nvswitch": "#4d4d4d", "nic": "#e67e22", "ib": "#2e6fb5", "pcie": "#7f7f7f"}
_GPU_COLOUR = "#6a3d9a"
_BOX_W_MIN, _BOX_H, _GAP = 4.0, 3.4, 0.9


@dataclass(frozen=True)
class _Pair:
    """Both directions between two vertices: bandwidths (GB/s) and the link kind."""

    u: Vertex
    v: Vertex
    bandwidths: tuple[float, ...]
    kind: str


def _pairs(topology: Topology) -> list[_Pair]:
    by_pair: dict[tuple[int, int], list[int]] = defaultdict(list)
    ids = topology.vertex_id
    for i, link in enumerate(topology.links):
        a, b = ids[link.src], ids[link.dst]
        by_pair[(min(a, b), max(a, b))].append(i)
    vertices = topology.vertices
    out = []
    for (a, b), links in sorted(by_pair.items()):
        bandwidths = tuple(sorted({topology.links[i].bandwidth for i in links}, reverse=True))
        out.append(_Pair(vertices[a], vertices[b], bandwidths, topology.links[links[0]].kind))
    return out


def _neighbours(topology: Topology) -> dict[Vertex, set[Vertex]]:
    near: dict[Vertex, set[Vertex]] = defaultdict(set)
    for link in topology.links:
        near[link.src].add(link.dst)
        near[link.dst].add(link.src)
    return near


def _spread(count: int, left: float, right: float) -> list[float]:
    if count == 1:
        return [(left + right) / 2]
    return [left + (right - left) * k / (count - 1) for k in range(count)]


def _centred(count: int, left: float, right: float) -> list[float]:
    """``count`` positions centred in equal slots of [left, right]."""
    return [left + (right - left) * (k + 0.5) / count for k in range(count)]


def _mean_x(vertices: Sequence[Vertex], pos: dict[Vertex, tuple[float, float]]) -> float:
    xs = [pos[v][0] for v in vertices if v in pos]
    return sum(xs) / len(xs) if xs else math.inf


def _machine_layout(topology: Topology) -> tuple[dict[Vertex, tuple[float, float]], list[tuple[float, float, float,
                                                                                                 float, str]]]:
    """Positions of every vertex and the machine boxes (x, y, width, height, label)."""
    near = _neighbours(topology)
    gpu_machine: dict[Vertex, int] = dict(topology.machine_of.items())
    machines = topology.machines
    home: dict[str, int | None] = {}
    for switch in topology.switches:
        gpu_machines = {gpu_machine[v] for v in near[switch.name] if v in gpu_machine}
        home[switch.name] = next(iter(gpu_machines)) if len(gpu_machines) == 1 else None
    per_machine = max(len(m) for m in machines)
    width = max(_BOX_W_MIN, 0.62 * per_machine + 0.8)
    leads_out = {s.name for s in topology.switches if home[s.name] is not None and any(
        gpu_machine.get(v, home[s.name]) != home[s.name] or (v not in gpu_machine and home.get(str(v)) != home[s.name])
        for v in near[s.name])}
    box_h = _BOX_H if leads_out else _BOX_H - 1.2  # no NIC row: a shorter box
    # GPUs wired straight to GPUs of other machines (DGX-2 pairs, NDv2's IB): stack the machines so that
    # those links run between facing GPU rows instead of along them
    facing = any(link.src in gpu_machine and link.dst in gpu_machine and gpu_machine[link.src] !=
                 gpu_machine[link.dst] for link in topology.links) and len(machines) <= 4
    cols = 1 if facing else len(machines) if len(machines) <= 4 else math.ceil(math.sqrt(len(machines)))
    pos: dict[Vertex, tuple[float, float]] = {}
    boxes = []
    for m, members in enumerate(machines):
        x0, y0 = (m % cols) * (width + _GAP), -(m // cols) * (box_h + _GAP)
        boxes.append((x0, y0, width, box_h, f"machine {m}"))
        local = [s.name for s in topology.switches if home[s.name] == m]
        direct = any(topology.is_gpu(v) and v in members for g in members for v in near[g])
        has_edge_row = any(s in leads_out for s in local)
        if direct:  # GPUs on an ellipse, so GPU-GPU links are visible chords
            cx, cy = x0 + width / 2, y0 + box_h / 2 + (0.3 if has_edge_row else -0.05)
            rx, ry = width / 2 - 0.45, box_h / 2 - (0.75 if has_edge_row else 0.5)
            for k, g in enumerate(members):
                angle = math.pi / 2 - 2 * math.pi * k / len(members)
                pos[g] = (cx + rx * math.cos(angle), cy + ry * math.sin(angle))
            core_y = cy
        else:  # GPUs in a row on top (at the bottom to face the next stacked machine), switches between
            low = facing and m % 2 == 0 and not has_edge_row
            for g, x in zip(members, _spread(len(members), x0 + 0.5, x0 + width - 0.5), strict=True):
                pos[g] = (x, y0 + 0.55 if low else y0 + box_h - 0.65)
            core_y = y0 + box_h / 2 - 0.1 if has_edge_row else y0 + (box_h - 0.75 if low else 0.75)
        core = [s for s in local if s not in leads_out]
        for s, x in zip(core, _centred(len(core), x0, x0 + width), strict=True):
            pos[s] = (x, core_y)
        edge = sorted((s for s in local if s in leads_out), key=lambda s: (_mean_x(sorted(
            (v for v in near[s] if topology.is_gpu(v)), key=int), pos), s))
        for s, x in zip(edge, _spread(len(edge), x0 + 0.5, x0 + width - 0.5), strict=True):
            pos[s] = (x, y0 + 0.45)
    shared = [s.name for s in topology.switches if home[s.name] is None]
    tier: dict[str, int] = {}
    frontier: set[Vertex] = set(pos)
    depth = 0
    while len(tier) < len(shared) and frontier:
        depth += 1
        frontier = {w for v in frontier for w in near[v] if w in shared and str(w) not in tier}
        for w in frontier:
            tier[str(w)] = depth
    grid_w = min(cols, len(machines)) * (width + _GAP) - _GAP
    grid_bottom = -((len(machines) - 1) // cols) * (box_h + _GAP)
    for t in sorted(set(tier.values()) | ({0} if len(tier) < len(shared) else set())):
        row = [s for s in shared if tier.get(s, 0) == t]
        row.sort(key=lambda s: (_mean_x(sorted(near[s], key=str), pos), s))
        for s, x in zip(row, _centred(len(row), 0.0, grid_w), strict=True):
            pos[s] = (x, grid_bottom - 1.3 * (t or max(tier.values(), default=0) + 1))
    return pos, boxes


def _flat_layout(topology: Topology) -> dict[Vertex, tuple[float, float]]:
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(topology.vertices)
    graph.add_edges_from((link.src, link.dst) for link in topology.links)
    circle = nx.circular_layout(graph)
    ring_like = all(d == 2 for _, d in graph.degree())
    # spring_layout stays in numpy below 500 vertices (scipy above, which is not a dependency)
    raw = circle if ring_like or graph.number_of_nodes() >= 500 else nx.spring_layout(graph, pos=circle, seed=0,
                                                                                      iterations=100)
    scale = max(4.0, math.sqrt(topology.num_gpus) * 1.6)
    return {v: (float(raw[v][0]) * scale, float(raw[v][1]) * scale) for v in topology.vertices}


def _bandwidth_text(bandwidths: tuple[float, ...]) -> str:
    return "/".join(f"{b:g}" for b in bandwidths)


def _draw_links(axes: Axes, topology: Topology, pos: dict[Vertex, tuple[float, float]]) -> list[Line2D]:
    pairs = _pairs(topology)
    all_bw = [link.bandwidth for link in topology.links]
    low, high = min(all_bw), max(all_bw)
    kinds = sorted({link.kind for link in topology.links})
    colour = {k: _KIND_COLOURS.get(k, f"C{n % 10}") for n, k in enumerate(kinds)}

    def width(bandwidth: float) -> float:
        return 0.7 if high == low else 0.6 + 2.4 * math.log(bandwidth / low) / math.log(high / low)

    segments = [(pos[p.u], pos[p.v]) for p in pairs]
    axes.add_collection(LineCollection(segments, colors=[colour[p.kind] for p in pairs],
                                       linewidths=[width(p.bandwidths[0]) for p in pairs], alpha=0.75, zorder=1))
    if len(pairs) <= 48:
        for p in pairs:  # 38% of the way along, so chords crossing in the middle keep their labels apart
            (x0, y0), (x1, y1) = pos[p.u], pos[p.v]
            axes.text(x0 + 0.38 * (x1 - x0), y0 + 0.38 * (y1 - y0), _bandwidth_text(p.bandwidths), fontsize=6.5, ha="center",
                      va="center", color=colour[p.kind], zorder=4,
                      bbox={"boxstyle": "round,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    handles = []
    for k in kinds:
        links = [link for link in topology.links if link.kind == k]
        bws = sorted({link.bandwidth for link in links})
        lats = sorted({link.latency for link in links})
        bw_text = f"{bws[0]:g}" if len(bws) == 1 else f"{bws[0]:g}-{bws[-1]:g}"
        lat_text = f"{lats[0]:g}" if len(lats) == 1 else f"{lats[0]:g}-{lats[-1]:g}"
        handles.append(Line2D([], [], color=colour[k], linewidth=width(bws[-1]),
                              label=f"{k} link: {bw_text} GB/s, {lat_text} us ({len(links)} directed)"))
    return handles


def _draw_vertices(axes: Axes, topology: Topology, pos: dict[Vertex, tuple[float, float]]) -> list[Line2D]:
    gpus = list(topology.gpus)
    size = 150 if topology.num_gpus <= 32 else 70 if topology.num_gpus <= 128 else 20
    axes.scatter([pos[g][0] for g in gpus], [pos[g][1] for g in gpus], s=size, marker="o", color=_GPU_COLOUR,
                 edgecolors="white", linewidths=0.6, zorder=3)
    if topology.num_gpus <= 64:
        for g in gpus:
            axes.text(pos[g][0], pos[g][1], str(g), fontsize=6 if g >= 10 else 7, color="white", ha="center",
                      va="center", zorder=5)
    handles = [Line2D([], [], marker="o", linestyle="", color=_GPU_COLOUR, markersize=8,
                      label=f"GPU ({topology.num_gpus}, labelled by rank)")]
    kinds = sorted({s.kind for s in topology.switches})
    for n, kind in enumerate(kinds):
        members = [s for s in topology.switches if s.kind == kind]
        colour = _SWITCH_COLOURS.get(kind, f"C{(n + 4) % 10}")
        axes.scatter([pos[s.name][0] for s in members], [pos[s.name][1] for s in members], s=size * 1.3,
                     marker="s", color=colour, edgecolors="black", linewidths=0.6, zorder=3)
        flags = ", ".join(f for f, on in (("multicast", any(s.multicast for s in members)),
                                          ("in-network reduce", any(s.reduce for s in members))) if on)
        handles.append(Line2D([], [], marker="s", linestyle="", color=colour, markeredgecolor="black",
                              markersize=8, label=f"{kind} switch ({len(members)}){f'; {flags}' if flags else ''}"))
    if len(topology.switches) <= 24:
        for s in topology.switches:
            axes.annotate(s.name, pos[s.name], xytext=(0, -9), textcoords="offset points", fontsize=6,
                          ha="center", va="top", zorder=5)
    return handles


def topology_figure(topology: Topology) -> Figure:
    """The topology as a picture (see the module docstring for the layout)."""
    grouped = bool(topology.machines)
    pos, boxes = _machine_layout(topology) if grouped else (_flat_layout(topology), [])
    xs = [p[0] for p in pos.values()] + [b[0] for b in boxes] + [b[0] + b[2] for b in boxes]
    ys = [p[1] for p in pos.values()] + [b[1] for b in boxes] + [b[1] + b[3] for b in boxes]
    span_x, span_y = max(xs) - min(xs) + 1.0, max(ys) - min(ys) + 1.0
    scale = min(1.0, 18.0 / span_x, 16.0 / span_y) * 0.8
    legend_rows = math.ceil((len({link.kind for link in topology.links}) + 1 + len({s.kind for s in
                                                                                 topology.switches})) / 2)
    figure = new_figure(max(8.0, span_x * scale + 0.5), max(4.0, span_y * scale + 1.4 + 0.2 * legend_rows))
    axes = figure.subplots(1, 1)
    for x, y, w, h, label in boxes:
        axes.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.15",
                                     facecolor="#f3f3f7", edgecolor="#9a9aae", linewidth=1.0, zorder=0))
        axes.text(x + 0.1, y + h - 0.1, label, fontsize=7, color="#55556a", ha="left", va="top", zorder=5)
    handles = _draw_links(axes, topology, pos)
    handles += _draw_vertices(axes, topology, pos)
    axes.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    axes.set_ylim(min(ys) - 0.6, max(ys) + 0.4)
    axes.set_aspect("equal")
    axes.set_axis_off()
    machines = f"{len(topology.machines)} machine{'s' if len(topology.machines) != 1 else ''}" if grouped else \
        "no machines declared"
    axes.set_title(f"{topology.name}: {topology.num_gpus} GPUs, {machines}, {len(topology.switches)} switch "
                   f"vertices, {len(topology.links)} directed links\n(links labelled with GB/s per direction, "
                   "1 GB = 1e9 B)", fontsize=10)
    figure.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return figure
