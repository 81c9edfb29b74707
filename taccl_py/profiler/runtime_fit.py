"""Calibrate a runtime model's figures from collective timings (``taccl profile fit --runtime``).

The runtime model (:mod:`taccl_py.runtime`) predicts a collective's time as what NCCL runs:
the fastest of its algorithms and protocols (:func:`taccl_py.predict.predict_nccl`), simulated
with the protocol's per-step latency, its share of each link's rate and its launch overhead.
This module fits those figures for one link class to measured times (nccl-tests rows):

* ``launch``: one offset (us) added to every protocol's launch overhead (what the harness and the
  host add per collective: ``-g 8`` in one process costs more than one GPU per MPI rank); rows marked
  per-rank (:attr:`TimedRow.offset` False) do not take it, and with them it is the other rows' harness
  cost, kept out of the fitted model;
* ``hop LL``, ``hop LL128``, ``hop Simple``: the class's per-step latency of each protocol (fitted
  when at least :data:`MIN_ROWS_PER_PROTOCOL` rows run fastest with it; otherwise the rows only bound
  it: that protocol must not beat the ones they ran);
* ``efficiency``: Simple's share of the class's link rate (LL and LL128 follow by tuning.cc's factors); when
  every row only copies (Allgather, Alltoall, Broadcast) it is the class's ``copy_efficiency``;
* ``copy efficiency``: with rows that reduce and rows that only copy, the copies' share (``copy_efficiency``),
  fitted next to the reductions' ``efficiency``;
* ``ll128 channels``: how many channels' worth of LL128 bandwidth a GPU drives (when LL128 rows exist);
* ``launch LL``: LL's own fixed cost beyond the starting model's (us), fitted when rows measured one GPU per
  process run LL with at least two different numbers of steps (an Allreduce and an Allgather at 1 KB, say):
  only then is that cost told from LL's per-step latency and from the harness's launch offset (a warning
  says so when the rows no longer do at the fitted figures).

Method: least squares on relative residuals ``(predicted - measured) / measured``. Each iteration
simulates every row under every algorithm and protocol at the current figures, with the protocol's
hop latency raised by 1 us and with its link share halved, which gives per choice a launch + latency
+ bandwidth surrogate (the bandwidth part scaling with 1 / share); Nelder-Mead minimizes the
surrogate, each row taking its fastest choice as the runtime does, within a trust region; the
step is kept when the full simulation agrees it lowers the cost, else the region shrinks. A weak
pull toward the starting figures (:data:`PRIOR_WEIGHT`) keeps figures no row constrains where
they were; figures stay in their bounds. Units: us, bytes, GB/s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from taccl_py.collectives import CollectiveKind
from taccl_py.errors import ProfileInputError
from taccl_py.harness import OverlappedHost
from taccl_py.predict import allowed_protocols, nccl_algorithms, predict_baseline, predict_nccl
from taccl_py.profiler.nccl_tests import BINARY_MODELS, binary_from_name, parse_nccl_tests_log, resolve_binary
from taccl_py.profiler.tables import is_timing_table, read_timing_table
from taccl_py.runtime import (
    LINK_CLASSES,
    NCCL_ALGORITHM_NAMES,
    NCCL_LL128_MAX_BW_PER_CHANNEL,
    PROTOCOLS,
    Protocol,
    RuntimeModel,
    link_class_of,
    nccl_channels,
    takes_copy_share,
    widest_gpu_link,
    with_figures,
)
from taccl_py.topology import Topology
from taccl_py.units import format_bytes, parse_size_bounds

__all__ = ["ALLTOALL_NET_FIGURES", "ALLTOALL_NET_FIT_METHOD", "FIT_METHOD", "HOST_FIT_METHOD", "MIN_ROWS_PER_PROTOCOL", "NVLS_FIGURES",
           "NVLS_FIT_METHOD", "NVLS_TREE_FIGURES", "NVLS_TREE_FIT_METHOD", "PRIOR_WEIGHT", "HostFit", "RuntimeFit", "RuntimeFitRow",
           "TimedRow", "default_link_class", "fit_alltoall_net", "fit_nvls", "fit_nvls_tree", "fit_overlapped_host", "fit_runtime",
           "gpu_link_class", "least_squares_offset", "read_timed_files", "read_timed_rows", "split_algorithm_qualifier", "split_size_qualifier"]


MIN_ROWS_PER_PROTOCOL = 2
"""A protocol's per-step latency is fitted only when at least this many rows run with it."""
PRIOR_WEIGHT = 1e-4
"""Weight of the pull toward the starting figures (relative to one row's squared relative residual)."""
MAX_ITERATIONS = 8
FIT_METHOD = ("least squares on relative residuals: simulated launch + latency + bandwidth surrogate per row, algorithm "
              f"and protocol, minimized by Nelder-Mead in a trust region, pull {PRIOR_WEIGHT:g} toward the starting figures")

_PARAMS = ("launch", "hop LL", "hop LL128", "hop Simple", "efficiency", "ll128 channels", "launch LL",
           "copy efficiency")
_LAUNCH_LL = 6
_COPY = 7
_HOP = {Protocol.LL: 1, Protocol.LL128: 2, Protocol.SIMPLE: 3}


@dataclass(frozen=True)
class TimedRow:
    """One measured collective: kind, size (bytes), time (us) and where it was read."""

    kind: CollectiveKind
    size_bytes: int
    time_us: float
    origin: str = ""
    offset: bool = True
    """Whether the fitted launch offset applies (False: a row of the reference harness, one GPU per process,
    whose launch costs are the model's own)."""
    algorithms: tuple[str, ...] | None = None
    """The NCCL algorithms this row's run allowed (a file's ``#ALGO`` qualifier); None: the fit's own."""
    in_place_us: float | None = None
    """The same size timed in place (a log's second time; None for a table): fits use ``time_us`` only."""
    gpus_per_thread: int = 1
    """GPUs one thread of the run launched (nccl-tests ``-g N``; 1 for a table): above 1, a host cost per collective
    the model leaves out (``taccl --launch-offset``)."""


@dataclass(frozen=True)
class RuntimeFitRow:
    """A row with the fitted prediction: what NCCL is predicted to run and the relative error."""

    row: TimedRow
    predicted_us: float
    algorithm: str
    protocol: str

    @property
    def error(self) -> float:
        return self.predicted_us / self.row.time_us - 1.0


class _RowErrors:
    """The relative errors of a fit's rows, summed up."""

    rows: tuple[RuntimeFitRow, ...]

    @property
    def rms_error(self) -> float:
        return math.sqrt(sum(r.error ** 2 for r in self.rows) / len(self.rows)) if self.rows else 0.0

    @property
    def max_error(self) -> float:
        return max((abs(r.error) for r in self.rows), default=0.0)


@dataclass(frozen=True)
class RuntimeFit(_RowErrors):
    """The fitted model, the figures (fitted or kept), the rows and how well they are described."""

    model: RuntimeModel
    link_class: str
    figures: dict[str, float]
    fitted: tuple[str, ...]
    rows: tuple[RuntimeFitRow, ...]
    iterations: int
    warnings: tuple[str, ...] = field(default=())
    method: str = FIT_METHOD

    def as_dict(self) -> dict[str, Any]:
        return {"link_class": self.link_class, "figures": {k: round(v, 6) for k, v in self.figures.items()},
                "fitted": list(self.fitted), "method": self.method, "iterations": self.iterations,
                "rows": len(self.rows), "rms_error": round(self.rms_error, 6), "max_error": round(self.max_error, 6)}


def gpu_link_class(topology: Topology) -> str:
    """The class of a GPU's own links (the first of nvlink, pci, net a GPU has): the one whose figures the model-wide
    LL128 cap (channels one GPU drives) is fitted with; a fit of another class keeps it."""
    classes = {link_class_of(link.kind) for link in topology.links if topology.is_gpu(link.src)}
    return next((c for c in ("nvlink", "pci", "net") if c in classes), "nvlink")


def crosses_link_class(topology: Topology, link_class: str) -> bool:
    """Whether a route between two GPUs (through switches) crosses a link of ``link_class``: what a fit of the
    topology's rows can tell. Every GPU's routes are looked at until one does (links may run one way only, as
    DGX-2 pairs' InfiniBand links)."""
    for src in range(topology.num_gpus):
        for route in topology.gpu_routes_from(src).values():
            if any(link_class_of(topology.links[li].kind) == link_class for li in route):
                return True
    return False


def default_link_class(topology: Topology) -> str:
    """The class a collective's time depends on most: ``net`` across machines, else the GPUs' widest class."""
    if len(topology.machines) > 1 and "net" in {link_class_of(link.kind) for link in topology.links}:
        return "net"
    return gpu_link_class(topology)


class _Problem:
    """Figures <-> model, and cached predictions of a row under one algorithm and protocol."""

    def __init__(self, topology: Topology, base: RuntimeModel, link_class: str, rows: Sequence[TimedRow],
                 allowed: Sequence[str] | None = None, protocols: Sequence[Protocol] | None = None) -> None:
        self.topology = topology
        given = None if protocols is None else tuple(protocols)
        kept = base.protocols
        self.protocols = kept if given is None else given if kept is None else tuple(p for p in given if p in kept)
        """The protocols the runs allowed (their NCCL_PROTO, kept to the base model's own); None: all of NCCL's."""
        if not (self.protocols is None or self.protocols):
            assert kept is not None and given is not None
            raise ProfileInputError(f"the runtime model fitted allows {', '.join(p.value for p in kept)} (NCCL_PROTO), "
                                    f"none of {', '.join(p.value for p in given)}", where="--protocol")
        if self.protocols is not None:  # the fitted model keeps to them: the others' figures are not fitted
            base = replace(base, protocols=self.protocols)
        self.base = base
        self.link_class = link_class
        self.rows = list(rows)
        self.base_launch = {p: base.launch_us[p] for p in PROTOCOLS}
        hops = base.hop_latency_us.get(link_class, {})
        lanes = base.channels if base.ll128_channels is None else base.ll128_channels
        self.algorithms: list[list[str]] = []
        """Per row, the NCCL algorithms it may have run (its file's ``#ALGO``, else ``allowed``, else all)."""
        for r in rows:
            own = r.algorithms if r.algorithms is not None else allowed
            names = [a for a in nccl_algorithms(topology, r.kind) if (own is None or a in own)
                     and allowed_protocols(r.kind, a, r.size_bytes, topology.num_gpus, self.protocols)]
            if not names:
                among = "" if own is None else f" among {', '.join(own)}"
                under = "" if self.protocols is None else f" with {', '.join(p.value for p in self.protocols)}"
                raise ProfileInputError(f"no NCCL algorithm{among} applies to {r.kind.value}{under} on "
                                        f"{topology.name!r}", where=r.origin or "taccl profile fit --runtime")
            self.algorithms.append(names)
        copying = [takes_copy_share(r.kind, a, link_class) for r, names in zip(rows, self.algorithms, strict=True)
                   for a in names]
        self.copy = all(copying)
        """Every row only copies: the efficiency fitted is the class's copy share (``copy_efficiency``)."""
        self.mixed = not self.copy and any(copying)
        """Rows that reduce and rows that only copy: the copies' share is fitted too (``copy efficiency``)."""
        share = base.efficiency.get(link_class, 1.0)
        copy_share = base.copy_efficiency.get(link_class, share)
        if self.copy:
            share = copy_share
        self.start = np.array([0.0, hops.get(Protocol.LL, 0.0), hops.get(Protocol.LL128, 0.0),
                               hops.get(Protocol.SIMPLE, 0.0), share, float(lanes), 0.0, copy_share])
        self.lower = np.array([-min(self.base_launch.values()), 0.0, 0.0, 0.0, 0.02, 0.5,
                               -self.base_launch[Protocol.LL], 0.02])
        self.upper = np.array([1e4, 1e3, 1e3, 1e3, 1.0, 256.0, 1e3, 1.0])
        self.scale = np.array([10.0, 1.0, 2.0, 4.0, 0.5, max(8.0, float(lanes)), 4.0, 0.5])
        widest = widest_gpu_link(topology, link_class)
        self.ll128_per_lane = 0.0 if not widest else NCCL_LL128_MAX_BW_PER_CHANNEL[CollectiveKind.ALLREDUCE] / widest
        """LL128's share per channel of the cap (Allreduce's per-channel rate over the widest link; the cap's scale)."""
        self._cache: dict[tuple[int, str, Protocol, tuple[float, ...]], float] = {}

    def model(self, x: np.ndarray, *, offset: bool = True) -> RuntimeModel:
        """The model of figures ``x``; ``offset`` False leaves the launch offset out (the harness's, not the model's)."""
        launch = {p: self.base_launch[p] + (float(x[0]) if offset else 0.0)
                  + (float(x[_LAUNCH_LL]) if p is Protocol.LL else 0.0) for p in PROTOCOLS}
        hops = {Protocol.LL: float(x[1]), Protocol.LL128: float(x[2]), Protocol.SIMPLE: float(x[3])}
        share = float(x[4])
        copy_share = share if self.copy else float(x[_COPY]) if self.mixed else None
        return with_figures(self.base, self.link_class, hop_latency_us=hops, launch_us=launch,
                            ll128_channels=float(x[5]), efficiency=None if self.copy else share,
                            copy_efficiency=copy_share)

    def time(self, i: int, algorithm: str, protocol: Protocol, x: np.ndarray) -> float:
        """Predicted time of row ``i`` with ``algorithm`` and ``protocol`` (inf when it cannot run)."""
        key = (i, algorithm, protocol, tuple(float(v) for v in x[1:]))
        if key not in self._cache:
            row = self.rows[i]
            pred = predict_baseline(self.topology, row.kind, algorithm, row.size_bytes, self.model(x),
                                    protocols=(protocol,))
            t = pred.sim.time_us
            # the launch offset is added outside the cache key: it shifts every prediction by itself
            self._cache[key] = math.inf if t is None else t - float(x[0])
        return self._cache[key] + (float(x[0]) if self.rows[i].offset else 0.0)

    def protocols_of(self, i: int, algorithm: str) -> tuple[Protocol, ...]:
        """The protocols row ``i`` may have run ``algorithm`` with (NCCL's, within the runs' NCCL_PROTO)."""
        row = self.rows[i]
        return allowed_protocols(row.kind, algorithm, row.size_bytes, self.topology.num_gpus, self.protocols)

    def choose(self, i: int, x: np.ndarray) -> tuple[str, Protocol, float]:
        """The fastest algorithm and protocol for row ``i`` under ``x`` (NCCL's choice as the model sees it)."""
        best: tuple[str, Protocol, float] | None = None
        for name in self.algorithms[i]:
            for p in self.protocols_of(i, name):
                t = self.time(i, name, p, x)
                if best is None or t < best[2]:
                    best = (name, p, t)
        assert best is not None
        return best


def fit_runtime(topology: Topology, rows: Sequence[TimedRow], *, base: RuntimeModel | None = None,
                link_class: str | None = None, fit_launch: bool = True,
                max_iterations: int = MAX_ITERATIONS, algorithms: Sequence[str] | None = None,
                harness_offset_us: float | None = None, protocols: Sequence[Protocol] | None = None) -> RuntimeFit:
    """Fit ``base``'s figures of ``link_class`` (default :func:`default_link_class`) to ``rows``.

    ``algorithms``: the NCCL algorithms the runs allowed (their ``NCCL_ALGO``); None: NCCL's own choice.
    ``protocols``: the protocols they allowed (their ``NCCL_PROTO``); None: all. The per-step latencies of the
    others (and LL's launch, and the LL128 cap, without them) are not fitted: no row can tell them.
    ``harness_offset_us``: the launch offset of the rows that take one, known (not fitted) and kept out of the
    model: their harness's host cost per collective, measured elsewhere.

    ``base`` defaults to the topology's runtime model, else NCCL's published figures with efficiency 1.

    Raises
    ------
    ProfileInputError
        No rows, a row that is not a positive time, an unknown link class, fewer than two sizes.
    """
    where = "taccl profile fit --runtime"
    if not rows:
        raise ProfileInputError("no collective timings to fit", where=where)
    _check_measured(rows, where)
    if len({r.size_bytes for r in rows}) < 2:
        raise ProfileInputError("every row has one size; the figures need several sizes (ideally 1 KB to 1 GB)",
                                where=where)
    model0 = base or topology.runtime or RuntimeModel(name="nccl", efficiency={})
    cls = link_class or default_link_class(topology)
    if cls not in LINK_CLASSES:
        raise ProfileInputError(f"unknown link class {cls!r} (nvlink, pci, net; --runtime also fits nvls, nvls-tree "
                                "and net-alltoall)", where="--class")
    if not crosses_link_class(topology, cls):
        raise ProfileInputError(f"no route between the GPUs of {topology.name!r} crosses a {cls} link, so its rows cannot "
                                f"tell the {cls} figures", where="--class")
    problem = _Problem(topology, model0, cls, rows, algorithms, protocols)
    fit_launch = fit_launch and harness_offset_us is None and any(r.offset for r in rows)
    if harness_offset_us is not None:
        problem.start[0] = harness_offset_us
    measured = np.array([r.time_us for r in rows])
    x = problem.start.copy()
    allowed = set(PROTOCOLS if problem.protocols is None else problem.protocols)
    fit_ll_launch = Protocol.LL in allowed and _ll_launch_identified(problem, x)
    fit_cap = cls == gpu_link_class(topology) and Protocol.LL128 in allowed
    free = np.array([fit_launch, Protocol.LL in allowed, Protocol.LL128 in allowed, Protocol.SIMPLE in allowed, True,
                     fit_cap, fit_ll_launch, problem.mixed])
    radius = 1.0
    iterations = 0
    cost = _true_cost(problem, x, measured)
    for iterations in range(1, max_iterations + 1):
        surrogate = _Surrogate(problem, x, measured)
        lo = np.maximum(problem.lower, x - radius * (np.abs(x) + problem.scale))
        hi = np.minimum(problem.upper, x + radius * (np.abs(x) + problem.scale))
        lo[~free], hi[~free] = x[~free], x[~free]
        starts = [x] if iterations > 1 else _starts(x, problem, free)
        candidates = [_nelder_mead(surrogate.cost, start, lo if iterations > 1 else problem.lower,
                                   hi if iterations > 1 else problem.upper, fixed=~free) for start in starts]
        trial = min(candidates, key=surrogate.cost)
        trial_cost = _true_cost(problem, trial, measured)
        if trial_cost < cost - 1e-9:
            step = float(np.max(np.abs(trial - x) / problem.scale))
            x, cost = trial, trial_cost
            if step < 1e-3:
                break
        else:
            radius /= 4
            if radius < 1e-3:
                break
    choice = [problem.choose(i, x) for i in range(len(rows))]
    fitted_rows = tuple(RuntimeFitRow(r, c[2], c[0], c[1].value) for r, c in zip(rows, choice, strict=True))
    names_of = list(_PARAMS)
    if problem.copy:  # the one share fitted is the copies'; no second one
        names_of[4], names_of[_COPY] = "copy efficiency", ""
    ll_told = fit_ll_launch and _ll_launch_identified(problem, x)
    names = tuple(names_of[j] for j in _active(choice, fit_launch, ll_told, problem.mixed) if j != 5 or fit_cap)
    counts = {p: sum(1 for c in choice if c[1] is p) for p in PROTOCOLS}
    warnings: list[str] = []
    for p in PROTOCOLS:
        if counts[p] < MIN_ROWS_PER_PROTOCOL and p in allowed:
            warnings.append(f"{counts[p]} row(s) run fastest with {p.value}: its {cls} per-step latency "
                            f"({x[_HOP[p]]:.4g} us) is only bounded by these rows (no faster than what they ran)")
    if fit_cap and counts[Protocol.LL128] < MIN_ROWS_PER_PROTOCOL:
        warnings.append(f"the LL128 bandwidth cap ({x[5]:.4g} channels) is only bounded by these rows")
    if fit_ll_launch and not ll_told:
        warnings.append(f"at the fitted figures the per-rank rows no longer run LL with two numbers of steps: LL's "
                        f"launch latency ({x[_LAUNCH_LL]:+.4g} us) is only held by the pull toward its start")
    figures = {name: float(v) for j, (name, v) in enumerate(zip(names_of, x, strict=True))
               if name and (j != _LAUNCH_LL or fit_ll_launch) and (j != _COPY or problem.mixed)}
    in_model = harness_offset_us is None and all(r.offset for r in rows)
    fit = RuntimeFit(problem.model(x, offset=in_model), cls, figures, names, fitted_rows, iterations)
    if fit.rms_error > 0.15:
        warnings.append(f"the fitted model is off by {fit.rms_error:.0%} rms on these rows (worst "
                        f"{fit.max_error:.0%}): the runtime model does not describe this run well")
    return RuntimeFit(fit.model, cls, figures, names, fitted_rows, iterations, tuple(warnings))


class _Surrogate:
    """Around ``x``: each row's time per algorithm and protocol as launch + latency + bandwidth parts.

    Per (row, algorithm, protocol) three simulations give the time at ``x``, its change for +1 us of the
    protocol's hop latency (``a``) and its bandwidth part ``b`` (the time added when the protocol's share of
    the class halves); away from ``x`` the bandwidth part scales with 1 / share, the latency part linearly.
    The row's predicted time is the fastest choice, as in the full model.
    """

    def __init__(self, problem: _Problem, x: np.ndarray, measured: np.ndarray) -> None:
        self.problem = problem
        self.x = x
        self.measured = measured
        self.terms: list[list[tuple[Protocol, float, float, float, bool]]] = []
        """Per row, per algorithm and protocol: time, latency and bandwidth parts, and whether it takes the copies'
        share (``x[_COPY]``) rather than the reductions'."""
        half = x.copy()
        half[4] /= 2  # the efficiency halves the share of LL and Simple ...
        half[_COPY] /= 2  # ... (of copies too) ...
        half[5] /= 2  # ... and, with the LL128 cap, of LL128
        for i in range(len(problem.rows)):
            options = []
            for name in problem.algorithms[i]:
                for p in problem.protocols_of(i, name):
                    t0 = problem.time(i, name, p, x)
                    if not math.isfinite(t0):
                        continue
                    bumped = x.copy()
                    bumped[_HOP[p]] += 1.0
                    a = problem.time(i, name, p, bumped) - t0
                    b = problem.time(i, name, p, half) - t0
                    copy = problem.mixed and takes_copy_share(problem.rows[i].kind, name, problem.link_class)
                    options.append((p, t0, max(a, 0.0), max(b, 0.0), copy))
            self.terms.append(options)

    def share(self, p: Protocol, v: np.ndarray, copy: bool = False) -> float:
        """The protocol's share of the class's link rate under figures ``v`` (up to the LL128 cap's scale);
        ``copy``: of a row that takes the copies' share."""
        base = float(v[_COPY] if copy else v[4])
        if p is Protocol.LL128:
            return min(0.92 * base, v[5] * self.problem.ll128_per_lane)
        return base

    def cost(self, v: np.ndarray) -> float:
        total = 0.0
        for i, options in enumerate(self.terms):
            shift = 1.0 if self.problem.rows[i].offset else 0.0
            best = math.inf
            for p, t0, a, b, copy in options:
                t = t0 + (v[0] - self.x[0]) * shift + a * (v[_HOP[p]] - self.x[_HOP[p]]) \
                    + b * (self.share(p, self.x, copy) / max(self.share(p, v, copy), 1e-9) - 1.0)
                if p is Protocol.LL:
                    t += v[_LAUNCH_LL] - self.x[_LAUNCH_LL]
                best = min(best, t)
            r = best / self.measured[i] - 1.0
            total += r * r
        prior = (v - self.problem.start) / self.problem.scale
        return total + PRIOR_WEIGHT * len(self.terms) * float(prior @ prior)


def _starts(x: np.ndarray, problem: _Problem, free: np.ndarray) -> list[np.ndarray]:
    """Starting points of the first, global search: ``x`` and variants with a lower LL128 cap and longer steps, of
    the figures ``free`` says are fitted.

    The fastest-choice structure makes the cost non-convex (a protocol that is never the fastest has no
    say); starting also where LL128 is capped, or Simple's and LL128's steps cost more, lets the search
    find a band where another protocol describes the rows.
    """
    out = []
    for lanes in (x[5], x[5] / 2, x[5] / 4) if free[5] else (x[5],):
        for simple in (x[3], 4 * x[3] + 4) if free[3] else (x[3],):
            for ll128 in (x[2], 2 * x[2] + 1) if free[2] else (x[2],):
                v = x.copy()
                v[5], v[3], v[2] = lanes, simple, ll128
                out.append(np.clip(v, problem.lower, problem.upper))
    return out


def _true_cost(problem: _Problem, x: np.ndarray, measured: np.ndarray) -> float:
    pred = np.array([problem.choose(i, x)[2] for i in range(len(problem.rows))])
    return _cost(pred / measured - 1.0, x, problem)


def _nelder_mead(f: Any, x0: np.ndarray, lo: np.ndarray, hi: np.ndarray, *, fixed: np.ndarray,
                 iterations: int = 600) -> np.ndarray:
    """Minimize ``f`` over the box [lo, hi] by Nelder-Mead on the coordinates that are not ``fixed``."""
    free = np.flatnonzero((hi > lo) & ~fixed)
    if free.size == 0:
        return x0.copy()

    def full(z: np.ndarray) -> np.ndarray:
        v = x0.copy()
        v[free] = np.clip(z, lo[free], hi[free])
        return v

    start = x0[free].astype(float)
    simplex = [start]
    for k in range(free.size):
        point = start.copy()
        span = hi[free][k] - lo[free][k]
        point[k] = point[k] + 0.25 * span if point[k] + 0.25 * span <= hi[free][k] else point[k] - 0.25 * span
        simplex.append(point)
    values = [f(full(z)) for z in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex = [simplex[k] for k in order]
        values = [values[k] for k in order]
        if abs(values[-1] - values[0]) <= 1e-12 * (1 + abs(values[0])):
            break
        centre = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centre + (centre - worst)
        fr = f(full(reflected))
        if fr < values[0]:
            expanded = centre + 2 * (centre - worst)
            fe = f(full(expanded))
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centre + 0.5 * (worst - centre)
            fc = f(full(contracted))
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0] + 0.5 * (z - simplex[0]) for z in simplex]
                values = [f(full(z)) for z in simplex]
    return full(simplex[int(np.argmin(values))])


HOST_FIT_METHOD = ("least squares on relative residuals of max(GPU time, host time) per row: the GPU time of NCCL's "
                   "choice under the fitted model, the host's host_us + per_channel_us x the channels it runs on; "
                   "non-negative linear least squares on the rows the host binds, repeated until they hold, then "
                   "Nelder-Mead on the exact cost; the per-channel cost only where the rows above their GPU time run "
                   "on two channel counts or more")


@dataclass(frozen=True)
class HostFit(_RowErrors):
    """The overlapped host cost of a harness fitted on its rows, each predicted as the longer of the GPUs' time and
    the host's (:class:`taccl_py.harness.OverlappedHost`)."""

    host: OverlappedHost
    rows: tuple[RuntimeFitRow, ...]
    host_bound: tuple[bool, ...]
    """Per row, whether the host's time is the longer (the row tells the host's cost, not the GPUs')."""
    warnings: tuple[str, ...] = ()
    per_channel_fitted: bool = True
    """Whether the rows told the cost per channel (host-bound rows on two channel counts or more); else it is 0."""
    method: str = HOST_FIT_METHOD

    def as_dict(self) -> dict[str, Any]:
        return {"host_us": round(self.host.host_us, 6), "per_channel_us": round(self.host.per_channel_us, 6),
                "per_channel_fitted": self.per_channel_fitted, "method": self.method, "rows": len(self.rows), "host_bound_rows": sum(self.host_bound),
                "rms_error": round(self.rms_error, 6), "max_error": round(self.max_error, 6)}


def fit_overlapped_host(topology: Topology, model: RuntimeModel, rows: Sequence[TimedRow], *,
                        algorithms: Sequence[str] | None = None,
                        protocols: Sequence[Protocol] | None = None) -> HostFit:
    """The host cost of the harness of ``rows`` (nccl-tests ``-g N``), overlapping the GPUs' work under ``model``.

    Each row's GPU time is NCCL's choice under ``model`` (among the row's ``#ALGO``, else ``algorithms``, and
    ``protocols``), on the channels :func:`taccl_py.runtime.nccl_channels` gives it; the row is predicted as the
    longer of that and ``host_us + per_channel_us x channels``, both fitted (at least 0).

    Raises
    ------
    ProfileInputError
        No rows, a row that is not a positive time, or one that no NCCL algorithm runs under ``model``.
    """
    where = "taccl profile fit --runtime --overlap"
    if not rows:
        raise ProfileInputError("no rows of the harness to fit its host cost on", where=where)
    _check_measured(rows, where)
    allowed = None if protocols is None else tuple(protocols)
    gpu, channels, choice = [], [], []
    for r in rows:
        own = r.algorithms if r.algorithms is not None else (tuple(algorithms) if algorithms else None)
        best = predict_nccl(topology, r.kind, r.size_bytes, model, algorithms=own, protocols=allowed)
        gpu_us = None if best is None else best[1].sim.time_us
        if best is None or gpu_us is None:
            raise ProfileInputError(f"no NCCL algorithm runs {r.kind.value} of {format_bytes(r.size_bytes)} under the "
                                    "fitted model", where=r.origin or where)
        name, pred = best
        gpu.append(float(gpu_us))
        channels.append(float(nccl_channels(name, pred.protocol, r.size_bytes, topology.num_gpus, model.channels)))
        choice.append((name, pred.protocol.value))
    g, c, m = np.array(gpu), np.array(channels), np.array([r.time_us for r in rows])

    def cost(v: np.ndarray) -> float:
        resid = np.maximum(g, v[0] + v[1] * c) / m - 1.0
        return float(resid @ resid)

    def fit(per_channel: bool) -> np.ndarray:
        x = _host_least_squares(g, c, m, per_channel=per_channel)
        hi = np.array([float(m.max()), float(m.max() / max(c.max(), 1.0)) if per_channel else 0.0])
        return min((x, _nelder_mead(cost, x, np.zeros(2), hi, fixed=np.array([False, not per_channel]))), key=cost)

    # the cost per channel is told only by rows the host binds on two channel counts or more, at the fit too
    per_channel = len(set(c[m > g].tolist())) >= 2
    x = fit(per_channel)
    if per_channel and len(set(c[x[0] + x[1] * c > g].tolist())) < 2:
        per_channel = False
        x = fit(per_channel)
    host = OverlappedHost(float(x[0]), float(x[1]))
    host_times = host.host_us + host.per_channel_us * c
    times = np.maximum(g, host_times)
    bound = tuple(bool(v) for v in host_times > g)
    warnings = []
    if not any(bound):
        warnings.append("no row is above its GPU time at the fitted figures: the harness's host cost is not told by "
                        "these rows (0 us is only the least it can be)")
    elif not per_channel:
        warnings.append("the rows above their GPU time all run on one number of channels: the host's cost per "
                        "channel is not told by them and is kept at 0")
    fitted = tuple(RuntimeFitRow(r, float(t), a, p) for r, t, (a, p) in zip(rows, times, choice, strict=True))
    return HostFit(host, fitted, bound, tuple(warnings), per_channel)


def _host_least_squares(g: np.ndarray, c: np.ndarray, m: np.ndarray, *, per_channel: bool) -> np.ndarray:
    """(host_us, per_channel_us) by non-negative least squares on the rows the host binds, repeated until they hold
    (starting from the rows measured above their GPU time); ``per_channel`` False keeps the per-channel cost at 0."""
    bound = m > g
    x = np.zeros(2)
    for _ in range(50):
        if not bound.any():
            break
        x = _nonnegative_pair(c[bound], m[bound], per_channel=per_channel)
        now = x[0] + x[1] * c > g
        if np.array_equal(now, bound):
            break
        bound = now
    return x


def _nonnegative_pair(c: np.ndarray, m: np.ndarray, *, per_channel: bool) -> np.ndarray:
    """The (a, b) >= 0 minimizing sum(((a + b c) / m - 1)^2): the unconstrained solution, else the best with one of
    them at 0 (the two-variable case of non-negative least squares)."""
    w = 1.0 / m
    per_channel = per_channel and bool(np.ptp(c) > 0)  # one channel count: the two columns are one

    def alone(column: np.ndarray) -> float:  # the best factor of one column, at least 0
        return max(0.0, float((column * w) @ np.ones_like(m) / ((column * w) @ (column * w))))

    candidates = [np.array([alone(np.ones_like(m)), 0.0])]
    if per_channel:
        candidates.append(np.array([0.0, alone(c)]))
        both, *_ = np.linalg.lstsq(np.column_stack([w, c * w]), np.ones_like(m), rcond=None)
        if (both >= 0).all():
            candidates.append(both)
    return min(candidates, key=lambda v: float(((v[0] + v[1] * c) * w - 1.0) @ ((v[0] + v[1] * c) * w - 1.0)))


NVLS_FIT_METHOD = ("least squares on relative residuals: each row simulated as the nvls baseline in NCCL's chunk steps "
                   "on the channels that hold data; NVLS's latency and the launch offset by non-negative linear least "
                   "squares for each share, the share and the half-share chunk by Nelder-Mead")
NVLS_FIGURES = ("launch", "nvls latency", "nvls efficiency", "nvls half chunk")
"""What ``--class nvls`` fits: the harness's launch offset (rows that take one), NVLS's fixed cost beyond Simple's
launch (us), its share of the NVLink rate with chunks of any size, and the chunk size (bytes) at which it
reaches half that share."""


_SWITCH_ALGORITHM_NAMES = {"nvls": "NVLS", "nvls-tree": "NVLSTree"}


def _switch_fit_model(topology: Topology, rows: Sequence[TimedRow], base: RuntimeModel | None, algorithm: str, *,
                      too_few: str, min_sizes: int, why: str, kinds: tuple[CollectiveKind, ...],
                      other_kinds: str = "") -> RuntimeModel:
    """The model a ``--class nvls`` or ``nvls-tree`` fit starts from, once its rows are checked: of ``min_sizes``
    sizes or more (else the error ``too_few``), of ``kinds`` (else the error adds ``other_kinds``), allowed to run
    ``algorithm``, which runs on ``topology`` (else the error says ``why`` not)."""
    where = f"taccl profile fit --runtime --class {algorithm}"
    name = _SWITCH_ALGORITHM_NAMES[algorithm]
    model0 = base or topology.runtime
    if model0 is None:
        raise ProfileInputError("the topology has no runtime model to calibrate", where=where)
    if not rows or len({r.size_bytes for r in rows}) < min_sizes:
        raise ProfileInputError(too_few, where=where)
    if algorithm not in nccl_algorithms(topology, CollectiveKind.ALLREDUCE):
        raise ProfileInputError(f"{name} does not run on {topology.name!r} ({why})", where=where)
    for r in rows:
        if r.kind not in kinds:
            because = f" ({other_kinds})" if other_kinds else ""
            raise ProfileInputError(f"--class {algorithm} fits {' and '.join(k.value for k in kinds)} rows, not "
                                    f"{r.kind.value}{because}", where=r.origin or where)
        if r.algorithms is not None and algorithm not in r.algorithms:
            raise ProfileInputError(f"--class {algorithm} fits rows that ran {name}, not {', '.join(r.algorithms)}",
                                    where=r.origin or where)
    return model0


def fit_nvls(topology: Topology, rows: Sequence[TimedRow], *, base: RuntimeModel | None = None,
             harness_offset_us: float | None = None, max_iterations: int = 80) -> RuntimeFit:
    """Fit NCCL's NVLS figures of ``base`` (:attr:`RuntimeModel.nvls_latency_us`, ``nvls_efficiency``,
    ``nvls_half_chunk_bytes``) to rows that ran NVLS (``NCCL_ALGO=NVLS``, or sizes where NCCL chose it).

    Each row is simulated as the ``nvls`` baseline in NCCL's chunk steps at the share its chunk size gives, on the
    channels that hold data (:func:`~taccl_py.runtime.nccl_nvls_occupancy`). The
    two fixed costs (NVLS's latency, and the launch offset of rows that take one) shift every prediction by
    themselves, so for each share they are solved by linear least squares on the relative residuals; Nelder-Mead
    searches the share and the half-share chunk. Units: us, bytes.
    """
    model0 = _switch_fit_model(topology, rows, base, "nvls", too_few="NVLS's share, chunk cost and latency need rows of "
                               "three sizes or more", min_sizes=3, why="its switches do not reduce",
                               kinds=(CollectiveKind.ALLREDUCE,),
                               other_kinds="NVLS Allgather and ReduceScatter are priced as copies: fit their rows "
                                           "with --class nvlink")
    measured = np.array([r.time_us for r in rows])
    takes_offset = np.array([1.0 if r.offset else 0.0 for r in rows])
    fit_offset = harness_offset_us is None and bool(takes_offset.any()) and not bool(takes_offset.all())
    given = 0.0 if harness_offset_us is None else harness_offset_us
    cache: dict[tuple[float, float], np.ndarray] = {}

    def times(share: float, half: float) -> np.ndarray:
        """Predicted times at NVLS latency 0 and no offset."""
        key = (round(share, 9), round(half, 3))
        if key not in cache:
            m = replace(model0, nvls_efficiency=share, nvls_half_chunk_bytes=half, nvls_latency_us=0.0)
            out = []
            for r in rows:
                t = predict_baseline(topology, r.kind, "nvls", r.size_bytes, m).sim.time_us  # Simple: NVLS's own
                out.append(math.inf if t is None else t)
            cache[key] = np.array(out)
        return cache[key]

    def solve(t: np.ndarray) -> tuple[float, float, float]:
        """Latency and offset minimizing the relative residuals (both >= 0), and the cost."""
        base_t = t + given * takes_offset
        columns = [1.0 / measured] + ([takes_offset / measured] if fit_offset else [])
        a = np.stack(columns, axis=1)
        b = 1.0 - base_t / measured
        best: tuple[float, float, float] | None = None
        for keep in ([0, 1], [0], [1], []) if fit_offset else ([0], []):
            z = np.zeros(a.shape[1])
            if keep:
                sol, *_ = np.linalg.lstsq(a[:, keep], b, rcond=None)
                z[keep] = sol
            if np.any(z < 0):
                continue
            resid = a @ z - b
            cost = float(resid @ resid)
            if best is None or cost < best[2]:
                best = (float(z[0]), float(z[1]) if fit_offset else given, cost)
        assert best is not None
        return best

    def cost(v: np.ndarray) -> float:
        t = times(float(v[0]), float(v[1]))
        return math.inf if not np.all(np.isfinite(t)) else solve(t)[2]

    share0 = model0.nvls_efficiency or model0.efficiency.get("nvlink", 1.0)
    lo, hi = np.array([0.05, 0.0]), np.array([1.0, float(1 << 20)])
    x = np.array([share0, model0.nvls_half_chunk_bytes or 16384.0])
    x = _nelder_mead(cost, x, lo, hi, fixed=np.array([False, False]), iterations=max_iterations)
    latency, offset, _ = solve(times(float(x[0]), float(x[1])))
    figures = {"launch": offset, "nvls latency": latency, "nvls efficiency": float(x[0]),
               "nvls half chunk": float(x[1])}
    fitted = tuple(k for k in NVLS_FIGURES if k != "launch" or fit_offset)
    model = replace(model0, nvls_efficiency=float(x[0]), nvls_half_chunk_bytes=float(x[1]), nvls_latency_us=latency)
    final = times(float(x[0]), float(x[1])) + latency + offset * takes_offset
    fit_rows = tuple(RuntimeFitRow(r, float(t), "nvls", Protocol.SIMPLE.value) for r, t in zip(rows, final, strict=True))
    evaluations = len(cache)
    fit = RuntimeFit(model, "nvls", figures, fitted, fit_rows, evaluations, method=NVLS_FIT_METHOD)
    warnings: list[str] = []
    if harness_offset_us is None and takes_offset.all():
        warnings.append("no row is per-rank and no --harness-offset is given: NVLS's latency "
                        f"({latency:.4g} us) includes the harness's cost of these runs")
    if fit.rms_error > 0.15:
        warnings.append(f"the fitted model is off by {fit.rms_error:.0%} rms on these rows (worst "
                        f"{fit.max_error:.0%}): the NVLS model does not describe this run well")
    return replace(fit, warnings=tuple(warnings))


NVLS_TREE_FIT_METHOD = ("least squares on relative residuals: each row simulated as the nvls-tree baseline (NVLSTree) "
                        "in NCCL's chunk steps; the launch offset of rows that take one by non-negative linear least "
                        "squares for each share, the share by golden-section search")
SHARE_RANGE = (0.2, 1.0)
"""Where ``--class nvls-tree`` and ``--class net-alltoall`` search their share."""
NVLS_TREE_FIGURES = ("launch", "nvls tree share")
"""What ``--class nvls-tree`` fits: the harness's launch offset (rows that take one, unless given) and the share of
NVLS's NVLink rate that NVLSTree's NVLS phases reach (:attr:`~taccl_py.runtime.RuntimeModel.nvls_tree_share`)."""


def fit_nvls_tree(topology: Topology, rows: Sequence[TimedRow], *, base: RuntimeModel | None = None,
                  harness_offset_us: float | None = None, tolerance: float = 1e-4) -> RuntimeFit:
    """Fit :attr:`~taccl_py.runtime.RuntimeModel.nvls_tree_share` of ``base`` to Allreduce rows that ran NCCL's NVLSTree
    (multi-machine runs whose switches reduce, at the sizes NCCL chose it).

    Every other figure is kept: fit NVLS (``--class nvls``) and the network (``--class net``) first. Rows that take
    a launch offset get ``harness_offset_us``, or, when it is not given, one fitted offset (>= 0). The share is found
    in :data:`SHARE_RANGE` to ``tolerance`` by golden-section search (a warning says when it ends at either end).
    Units: us.
    """
    model0 = _switch_fit_model(topology, rows, base, "nvls-tree", too_few="NVLSTree's share needs rows of two sizes "
                               "or more", min_sizes=2, why="it needs several machines whose switches reduce",
                               kinds=(CollectiveKind.ALLREDUCE,))

    def run(share: float, size: int) -> tuple[str, str, float | None]:
        m = replace(model0, nvls_tree_share=share)
        return "nvls-tree", Protocol.SIMPLE.value, predict_baseline(topology, CollectiveKind.ALLREDUCE, "nvls-tree",
                                                                    size, m).sim.time_us

    fit, share = _fit_share(rows, run, lambda x: replace(model0, nvls_tree_share=x), harness_offset_us, tolerance,
                            figure="nvls tree share", label="nvls-tree", method=NVLS_TREE_FIT_METHOD,
                            what="the NVLSTree model")
    if min(abs(share - end) for end in SHARE_RANGE) <= 2 * tolerance:
        fit = replace(fit, warnings=(*fit.warnings,
                                     f"the share ({share:.4g}) is at the end of its range {SHARE_RANGE[0]:g}.."
                                     f"{SHARE_RANGE[1]:g}: " + ("these rows are as fast as NVLS alone or faster"
                                                                if share > 0.5 else
                                                                "these rows are far slower than NVLS's rate explains")))
    return fit


ALLTOALL_NET_FIT_METHOD = ("least squares on relative residuals: each row simulated as what NCCL runs for Alltoall "
                           "(its point-to-point sends, the protocol its threshold picks, the proxies' posts); the launch "
                           "offset of rows that take one by non-negative linear least squares for each share, the "
                           "share by golden-section search")
ALLTOALL_NET_FIGURES = ("launch", "alltoall net share")
"""What ``--class net-alltoall`` fits: the harness's launch offset (rows that take one, unless given) and the share of
the network's rate Alltoall's traffic reaches (:attr:`~taccl_py.runtime.RuntimeModel.alltoall_net_share`)."""


def fit_alltoall_net(topology: Topology, rows: Sequence[TimedRow], *, base: RuntimeModel | None = None,
                     harness_offset_us: float | None = None, tolerance: float = 1e-4) -> RuntimeFit:
    """Fit :attr:`~taccl_py.runtime.RuntimeModel.alltoall_net_share` of ``base`` to Alltoall rows across machines.

    Every other figure is kept: fit the network (``--class net``) first, on rows of collectives whose NICs each
    stream to one peer (Allreduce). Rows that take a launch offset get ``harness_offset_us``, or, when it is not
    given, one fitted offset (>= 0). The share is found in :data:`SHARE_RANGE` to ``tolerance`` by golden-section
    search. Only rows whose time the network's rate sets can tell the share: a warning says when the rows barely
    move with it. Units: us.
    """
    where = "taccl profile fit --runtime --class net-alltoall"
    model0 = base or topology.runtime
    if model0 is None:
        raise ProfileInputError("the topology has no runtime model to calibrate", where=where)
    if len(topology.machines) < 2:
        raise ProfileInputError(f"{topology.name!r} is one machine: Alltoall's network share needs a run across "
                                "machines", where=where)
    if not rows:
        raise ProfileInputError("no rows to fit", where=where)
    _check_measured(rows, where)
    for r in rows:
        if r.kind is not CollectiveKind.ALLTOALL:
            raise ProfileInputError(f"--class net-alltoall fits alltoall rows, not {r.kind.value}",
                                    where=r.origin or where)
        if r.algorithms is not None and "direct" not in r.algorithms:
            raise ProfileInputError(f"--class net-alltoall fits rows that ran NCCL's Alltoall (direct), not "
                                    f"{', '.join(r.algorithms)}", where=r.origin or where)
    if harness_offset_us is None and any(r.offset for r in rows) and len({r.size_bytes for r in rows}) < 2:
        raise ProfileInputError("rows that take the harness's launch offset, of one size: the offset would absorb "
                                "the share; give rows of two sizes or more, the offset (--harness-offset), or rows "
                                "measured one GPU per process (--per-rank)", where=where)

    def run(share: float, size: int) -> tuple[str, str, float | None]:
        chosen = predict_nccl(topology, CollectiveKind.ALLTOALL, size, replace(model0, alltoall_net_share=share))
        if chosen is None:
            return "direct", "", None
        name, pred = chosen
        return name, pred.protocol.value, pred.sim.time_us

    fit, share = _fit_share(rows, run, lambda x: replace(model0, alltoall_net_share=x), harness_offset_us, tolerance,
                            figure="alltoall net share", label="net-alltoall", method=ALLTOALL_NET_FIT_METHOD,
                            what="the network's share")
    low = [run(SHARE_RANGE[0], r.size_bytes)[2] for r in rows]
    high = [run(SHARE_RANGE[1], r.size_bytes)[2] for r in rows]
    if all(a is not None and b is not None and a < 1.5 * b for a, b in zip(low, high, strict=True)):
        fit = replace(fit, warnings=(*fit.warnings, "these rows barely depend on the network's rate (latency-bound "
                                     "sizes): the share they give is loose; fit on rows of 100 MB or more"))
    if min(abs(share - end) for end in SHARE_RANGE) <= 2 * tolerance:
        fit = replace(fit, warnings=(*fit.warnings,
                                     f"the share ({share:.4g}) is at the end of its range {SHARE_RANGE[0]:g}.."
                                     f"{SHARE_RANGE[1]:g}: these rows are "
                                     + ("as fast as the network's own share or faster" if share > 0.5 else
                                        "far slower than the network's rate explains")))
    return fit


def _fit_share(rows: Sequence[TimedRow], run: Callable[[float, int], tuple[str, str, float | None]],
               model_at: Callable[[float], RuntimeModel], harness_offset_us: float | None, tolerance: float, *,
               figure: str, label: str, method: str, what: str) -> tuple[RuntimeFit, float]:
    """One share in :data:`SHARE_RANGE` (and the harness's launch offset) fitted to ``rows`` by golden-section search.

    ``run(share, size)`` gives (algorithm, protocol, time in us or None) at a share, ``model_at(share)`` the model;
    rows that take a launch offset get ``harness_offset_us``, or one fitted offset (>= 0) when it is not given.
    Returns the fit and the share."""
    measured = np.array([r.time_us for r in rows])
    takes_offset = np.array([1.0 if r.offset else 0.0 for r in rows])
    fit_offset = harness_offset_us is None and bool(takes_offset.any())
    given = 0.0 if harness_offset_us is None else harness_offset_us
    cache: dict[float, tuple[list[tuple[str, str]], np.ndarray]] = {}

    def times(share: float) -> tuple[list[tuple[str, str]], np.ndarray]:
        key = round(share, 9)
        if key not in cache:
            per_size = {size: run(share, size) for size in sorted({r.size_bytes for r in rows})}
            cache[key] = ([per_size[r.size_bytes][:2] for r in rows],
                          np.array([math.inf if per_size[r.size_bytes][2] is None else per_size[r.size_bytes][2]
                                    for r in rows]))
        return cache[key]

    def solve(t: np.ndarray) -> tuple[float, float]:
        """The offset (>= 0) minimizing the relative residuals at these times, and the cost."""
        offset = least_squares_offset(t, measured, takes_offset) if fit_offset else given
        resid = (t + offset * takes_offset) / measured - 1.0
        return offset, float(resid @ resid)

    def cost(share: float) -> float:
        t = times(share)[1]
        return math.inf if not np.all(np.isfinite(t)) else solve(t)[1]

    share = _golden_section(cost, SHARE_RANGE[0], SHARE_RANGE[1], tolerance=tolerance)
    choices, t = times(share)
    if not np.all(np.isfinite(t)):
        raise ProfileInputError(f"{what} does not complete these rows at any share", where=f"--class {label}")
    offset, _ = solve(t)
    final = t + offset * takes_offset
    fit_rows = tuple(RuntimeFitRow(r, float(x), name, proto)
                     for r, x, (name, proto) in zip(rows, final, choices, strict=True))
    fitted = ("launch", figure) if fit_offset else (figure,)
    fit = RuntimeFit(model_at(share), label, {"launch": offset, figure: share}, fitted, fit_rows, len(cache),
                     method=method)
    if fit.rms_error > 0.15:
        fit = replace(fit, warnings=(f"the fitted model is off by {fit.rms_error:.0%} rms on these rows (worst "
                                     f"{fit.max_error:.0%}): {what} does not describe this run well",))
    return fit, share


def _check_measured(rows: Sequence[TimedRow], where: str) -> None:
    """Every row a positive size and a positive, finite time (else the error names the row's file)."""
    for r in rows:
        if not (math.isfinite(r.time_us) and r.time_us > 0) or r.size_bytes <= 0:
            raise ProfileInputError(f"size and time must be positive (got {r.size_bytes} B, {r.time_us} us)",
                                    where=r.origin or where)


def _golden_section(f: Callable[[float], float], lo: float, hi: float, *, tolerance: float) -> float:
    """The minimizer of ``f`` on [lo, hi] (unimodal there) to within ``tolerance``, by golden-section search."""
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tolerance:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    best = min((fc, c), (fd, d), (f(lo), lo), (f(hi), hi))
    return float(best[1])


def _serial_steps(kind: CollectiveKind, algorithm: str, ranks: int) -> int | None:
    """Serial steps of NCCL's ``algorithm`` for ``kind``: one point-to-point step (``direct``), the ring's
    2 (n - 1) for Allreduce and n - 1 else; None for other algorithms."""
    if algorithm == "direct":
        return 1
    if algorithm != "ring":
        return None
    return 2 * (ranks - 1) if kind is CollectiveKind.ALLREDUCE else ranks - 1


def least_squares_offset(predicted_us: Any, measured_us: Any, takes: Any = None, *, lower: float = 0.0) -> float:
    """The launch offset (us, at least ``lower``) that, added to the predicted times of the rows that take one
    (``takes``: 1 or 0 per row; None: every row), minimizes the squared relative residuals
    ``(predicted + offset x takes) / measured - 1``: closed form, an offset shifting every time it applies to alike."""
    t, m = np.asarray(predicted_us, float), np.asarray(measured_us, float)
    a = (np.ones_like(m) if takes is None else np.asarray(takes, float)) / m
    return max(lower, float(a @ (1.0 - t / m)) / float(a @ a))


def _ll_launch_identified(problem: _Problem, x: np.ndarray) -> bool:
    """Whether rows tell LL's fixed cost from its per-step latency: rows of one GPU per process (no harness
    offset) that run LL at ``x`` (ring or point-to-point) with at least two different numbers of steps."""
    n = problem.topology.num_gpus
    steps = set()
    for i, row in enumerate(problem.rows):
        algorithm, protocol, _ = problem.choose(i, x)
        if not row.offset and protocol is Protocol.LL:
            steps.add(_serial_steps(row.kind, algorithm, n))
    steps.discard(None)
    return len(steps) >= 2


def _active(choice: Sequence[tuple[str, Protocol, float]], fit_launch: bool, fit_ll_launch: bool,
            fit_copy: bool) -> list[int]:
    counts = {p: sum(1 for c in choice if c[1] is p) for p in PROTOCOLS}
    active = [0] if fit_launch else []
    if fit_ll_launch:
        active.append(_LAUNCH_LL)
    if fit_copy:
        active.append(_COPY)
    active += [_HOP[p] for p in PROTOCOLS if counts[p] >= MIN_ROWS_PER_PROTOCOL]
    active.append(4)
    if counts[Protocol.LL128] >= MIN_ROWS_PER_PROTOCOL:
        active.append(5)
    return sorted(active)


def _cost(resid: np.ndarray, x: np.ndarray, problem: _Problem) -> float:
    prior = (x - problem.start) / problem.scale
    return float(resid @ resid + PRIOR_WEIGHT * len(resid) * (prior @ prior))


def read_timed_rows(files: Sequence[str], topology: Topology, *, collective: str | None = None,
                    rows_kept: str = "all", per_rank: Sequence[str] = (), select: dict[str, str] | None = None,
                    ranks: int | None = None) -> tuple[list[TimedRow], list[str], list[str]]:
    """Rows to fit from nccl-tests logs (every run; out-of-place time) and published timing tables.

    ``rows_kept``: ``all``, or ``even`` / ``odd`` to keep every other row of each run or table (the rest
    held out to check the fit). ``per_rank``: more files, measured with one GPU per process (MPI, torchrun),
    whose rows the fitted launch offset does not apply to (:attr:`TimedRow.offset`). ``select``: a table
    with a column of that name keeps only the rows with that value (a table holding several runs);
    ``collective`` (one name, or several separated by commas) also keeps only a table's rows of those
    collectives; in a log, a run that names its binary is kept when it is among them (a warning says which
    were skipped; a log that keeps none is an error), and one name is the binary of a run that does not say.
    A file given as ``FILE@LO:HI`` keeps only its rows of sizes LO to HI (e.g. the sizes at which a run of NCCL's
    default algorithm is known to run the algorithm fitted). Returns the rows, one line per input (what was read)
    and warnings. A log whose ranks differ from the topology's GPUs is an error: the fit
    simulates every GPU of it. ``ranks``: the ranks of a run whose log lacks its ``Rank`` lines (else
    nThread x nGpus of its header); given, it is every run's.
    """
    per_file, inputs, warnings = read_timed_files(files, topology, collective=collective, rows_kept=rows_kept,
                                                  per_rank=per_rank, select=select, ranks=ranks)
    return [row for _, rows in per_file for row in rows], inputs, warnings


def read_timed_files(files: Sequence[str], topology: Topology, *, collective: str | None = None,
                     rows_kept: str = "all", per_rank: Sequence[str] = (), select: dict[str, str] | None = None,
                     ranks: int | None = None) -> tuple[list[tuple[str, list[TimedRow]]], list[str], list[str]]:
    """:func:`read_timed_rows`, the rows kept file by file: ``(spec, rows)`` for each of ``files`` then ``per_rank``
    in order (a spec as given, with its ``@LO:HI`` and ``#ALGO``)."""
    if rows_kept not in ("all", "even", "odd"):
        raise ProfileInputError(f"must be all, even or odd (got {rows_kept!r})", where="--rows")
    per_file: list[tuple[str, list[TimedRow]]] = []
    inputs: list[str] = []
    warnings: list[str] = []
    columns: set[str] = set()
    for path, offset in [*((f, True) for f in files), *((f, False) for f in per_rank)]:
        rows: list[TimedRow] = []
        columns |= _read_one(path, topology, collective, rows_kept, select or {}, offset, rows, inputs, warnings,
                             ranks)
        per_file.append((path, rows))
    unknown = sorted(set(select or {}) - columns)
    if unknown:
        raise ProfileInputError(f"no published table read has a column {', '.join(map(repr, unknown))} (columns: "
                                f"{', '.join(sorted(columns)) or 'none: only logs were read'})", where="--select")
    return per_file, inputs, warnings


def split_size_qualifier(spec: str) -> tuple[str, tuple[int, int] | None]:
    """``FILE@LO:HI`` as the file and the sizes (bytes, both included) to keep; a plain ``FILE`` keeps all.

    A name that is an existing file is taken whole, even with an ``@`` in it.
    """
    if Path(spec).is_file():
        return spec, None
    path, sep, sizes = spec.rpartition("@")
    if not sep or not Path(path).is_file():
        raise ProfileInputError.not_a_file(path if sep else spec)
    return path, parse_size_bounds(sizes, where=f"{spec}: sizes after @")


def split_algorithm_qualifier(spec: str) -> tuple[str, tuple[str, ...] | None]:
    """``FILE[@LO:HI]#ALGO[,ALGO]`` as the rest and the NCCL algorithms that file's runs allowed (their
    ``NCCL_ALGO``, or what the run is known to have run); without ``#``, None.

    A name that is an existing file is taken whole, even with a ``#`` in it.
    """
    before, at, after = spec.rpartition("@")
    if Path(spec).is_file() or (at and "#" not in after and Path(before).is_file()):
        return spec, None
    rest, sep, names = spec.rpartition("#")
    if not sep:
        return spec, None
    algorithms = tuple(a.strip() for a in names.split(","))
    unknown = [a or "(none)" for a in algorithms if a not in NCCL_ALGORITHM_NAMES]
    if unknown:
        hint = "; give @LO:HI before #ALGO" if "@" in names else ""
        raise ProfileInputError(f"unknown algorithm {', '.join(unknown)} after # (known: "
                                f"{', '.join(NCCL_ALGORITHM_NAMES)}{hint})", where=spec)
    return rest, algorithms


def _read_one(path: str, topology: Topology, collective: str | None, rows_kept: str, select: dict[str, str],
              offset: bool, rows: list[TimedRow], inputs: list[str], warnings: list[str],
              ranks: int | None = None) -> set[str]:
    """Append one file's rows (see :func:`read_timed_rows`); returns a table's extra column names (none for a log)."""
    start = 1 if rows_kept == "odd" else 0
    step = 1 if rows_kept == "all" else 2
    n = topology.num_gpus
    path, allowed = split_algorithm_qualifier(path)
    path, bounds = split_size_qualifier(path)
    lo, hi = bounds or (0, math.inf)
    harness = ("" if offset else ", one GPU per process") + (
        "" if bounds is None else f", sizes {format_bytes(lo)}..{format_bytes(hi)}") + (
        "" if allowed is None else f", algorithm {', '.join(allowed)}")
    names = [] if collective is None else [c.strip() for c in collective.split(",")]
    binaries = [resolve_binary(c, where="--collective") for c in names]
    for b in binaries:
        if BINARY_MODELS[b].collective == "sendrecv":
            raise ProfileInputError("sendrecv_perf is point-to-point: fit links with it (without --runtime)",
                                    where="--collective")
    if is_timing_table(path):
        wanted = {CollectiveKind(BINARY_MODELS[b].collective) for b in binaries} or None
        everything = read_timing_table(path)
        table = [r for r in everything
                 if (wanted is None or r.kind in wanted) and lo <= r.size_bytes <= hi
                 and all(r.extra.get(k, v) == v for k, v in select.items())][start::step]
        if not table:
            raise ProfileInputError("no row of the table is selected (see --collective, --select"
                                    f"{'' if bounds is None else ' and the sizes after @'})", where=path)
        rows.extend(TimedRow(r.kind, r.size_bytes, r.time(n), r.origin, offset, allowed) for r in table)
        inputs.append(f"{path}: published table, {len(table)} rows{harness}")
        return {k for r in everything for k in r.extra}
    kept = 0
    for run in parse_nccl_tests_log(path):
        at = f"{path}: line {run.first_line}"
        if run.binary is not None:
            binary = resolve_binary(run.binary, where=at)
            if binaries and binary not in binaries:
                warnings.append(f"{at}: a run of {binary} skipped (not among --collective {collective})")
                continue
        elif len(binaries) == 1:
            binary = binaries[0]
        elif binaries:
            raise ProfileInputError("the log does not say which collective it ran; give one --collective", where=at)
        else:
            guessed = binary_from_name(Path(path).name)
            if guessed is None:
                raise ProfileInputError("cannot tell which collective this log ran; pass --collective", where=at)
            binary = guessed
        kept += 1
        name = BINARY_MODELS[binary].collective
        if name == "sendrecv":
            raise ProfileInputError("sendrecv_perf is point-to-point: fit links with it (without --runtime)",
                                    where=at)
        kind = CollectiveKind(name)
        nranks = ranks if ranks is not None else run.nranks
        if nranks != n:
            hint = "" if run.ranks or ranks is not None else " (the log has no '#  Rank' lines: pass --ranks N)"
            raise ProfileInputError(f"the run has {nranks} ranks but the topology has {n} GPUs{hint}", where=at)
        in_range = [r for r in run.rows if lo <= r.size_bytes <= hi]
        if not in_range:
            raise ProfileInputError("no row of the run is in the size range after @", where=at)
        if not run.complete and 2 * run.rows[-1].size_bytes <= run.max_bytes:  # a doubling step still to come
            warnings.append(f"{at}: the table stops at {format_bytes(run.rows[-1].size_bytes)} of the header's "
                            f"maxBytes {format_bytes(run.max_bytes)}, without the '# Avg bus bandwidth' footer "
                            "(log cut short?)")
        used = [r for r in in_range if not r.wrong and r.size_bytes >= 4 * n]
        if len(used) < len(in_range):
            dropped = [r for r in in_range if r.wrong or r.size_bytes < 4 * n]
            sizes = ", ".join(f"{format_bytes(r.size_bytes)} (line {r.line})" for r in dropped[:6]) + (
                ", ..." if len(dropped) > 6 else "")
            warnings.append(f"{path}: {len(dropped)} row(s) skipped ({sizes}: wrong results, or fewer elements "
                            "than ranks)")
        used = used[start::step]
        if not used and (bounds is not None or rows_kept != "all"):
            raise ProfileInputError(f"no row of the run is left (wrong results, fewer elements than ranks"
                                    f"{', --rows' if rows_kept != 'all' else ''})", where=at)
        rows.extend(TimedRow(kind, r.size_bytes, r.time_us_out, f"{path}: line {r.line}", offset, allowed,
                             r.time_us_in, max(run.ngpus, 1)) for r in used)
        inputs.append(f"{path}: {binary}, {nranks} ranks, {len(used)} sizes{harness}")
    if not kept:
        raise ProfileInputError(f"no run of the log is among --collective {collective}", where=path)
    return set()
