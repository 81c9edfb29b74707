"""Least-squares alpha-beta fit: ``time = a * alpha + b * bytes / bandwidth``.

Every observation carries its own coefficients ``a`` (how many latencies the
measured operation pays) and ``b`` (how many times ``bytes / bandwidth`` it
pays), so one fit can pool a point-to-point ping-pong (a = b = 1) with ring
collectives over n ranks (Allgather: a = n-1, b = (n-1)/n; ...).

Method (stated in every provenance record as :data:`FIT_METHOD`):

* weighted least squares on *relative* residuals (weight 1/time), so a 10 us
  point counts as much as a 10 ms point and alpha is not drowned by the
  largest sizes;
* outliers: after the first fit, an observation whose log residual
  ``ln(time / fitted)`` is more than :data:`OUTLIER_MADS` scaled median
  absolute deviations (1.4826 MAD) from the median log residual *and* more
  than :data:`OUTLIER_FLOOR` (about 2 %) away from it is dropped, then the fit
  is done once more (no further iteration). Log residuals keep a 50x spike
  (a scheduler hiccup) far from the bulk, where a relative residual would
  cap it at 100 %;
* a negative fitted latency is unphysical: alpha is then fixed at 0 and the
  bandwidth refitted, with a warning.

Times are microseconds, sizes bytes, bandwidth GB/s (1e9 B/s).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from taccl_py.errors import ProfileInputError
from taccl_py.units import BYTES_PER_US_PER_GBPS, format_bytes

__all__ = [
    "FIT_METHOD",
    "MIN_SIZE_SPAN",
    "OUTLIER_FLOOR",
    "OUTLIER_MADS",
    "POOR_R_SQUARED",
    "AlphaBetaFit",
    "FitPoint",
    "Observation",
    "fit_alpha_beta",
]

OUTLIER_MADS = 3.5
"""An observation this many scaled MADs from the median log residual is an outlier (Iglewicz-Hoaglin)."""

OUTLIER_FLOOR = 0.02
"""... and only when it is also more than 0.02 in ln (about 2 %) away (near-perfect data loses nothing)."""

POOR_R_SQUARED = 0.99
"""Below this R-squared the fit is reported as poor."""

MIN_SIZE_SPAN = 8.0
"""Largest / smallest size below which alpha and bandwidth cannot be told apart reliably."""

FIT_METHOD = (f"weighted least squares on relative residuals; outliers (ln residual beyond {OUTLIER_MADS:g} scaled "
              f"MADs and {OUTLIER_FLOOR:g}) dropped, refitted once")

_MAD_SCALE = 1.4826
_MAX_ALPHA_REL_SE = 0.5
_MAX_BANDWIDTH_REL_SE = 0.1


@dataclass(frozen=True)
class Observation:
    """One measured time: ``time_us ~ latency_coeff * alpha + bytes_coeff * size_bytes / B``.

    ``origin`` says where it came from (``file:line``) for messages and reports.
    """

    size_bytes: int
    time_us: float
    latency_coeff: float = 1.0
    bytes_coeff: float = 1.0
    origin: str = ""


@dataclass(frozen=True)
class FitPoint:
    """An observation with the fitted prediction and its relative residual (percent)."""

    size_bytes: int
    time_us: float
    predicted_us: float
    residual_pct: float
    dropped: bool
    origin: str


@dataclass(frozen=True)
class AlphaBetaFit:
    """Fitted latency (us) and bandwidth (GB/s) with the figures that say how good they are."""

    alpha_us: float
    bandwidth_gbps: float
    r_squared: float
    rms_residual_pct: float
    max_residual_pct: float
    alpha_stderr_us: float
    bandwidth_stderr_gbps: float
    num_samples: int
    num_dropped: int
    num_sizes: int
    min_bytes: int
    max_bytes: int
    alpha_clamped: bool
    points: tuple[FitPoint, ...]
    warnings: tuple[str, ...]

    @property
    def num_used(self) -> int:
        return self.num_samples - self.num_dropped

    def predict_us(self, size_bytes: float, latency_coeff: float = 1.0, bytes_coeff: float = 1.0) -> float:
        """Model time of an operation of ``size_bytes`` with the given coefficients."""
        return latency_coeff * self.alpha_us + bytes_coeff * size_bytes / (
            self.bandwidth_gbps * BYTES_PER_US_PER_GBPS)


@dataclass(frozen=True)
class _Solution:
    alpha: float
    inv_bw: float  # microseconds per byte
    cov: np.ndarray
    clamped: bool


def _solve(design: np.ndarray, times: np.ndarray, *, clamp: bool) -> _Solution:
    """Weighted (1/time) least squares for (alpha, 1/B); alpha fixed at 0 when ``clamp``."""
    weights = 1.0 / times
    a = design * weights[:, None]
    y = times * weights  # all ones
    dof = len(times) - (1 if clamp else 2)
    if clamp:
        col = a[:, 1]
        inv_bw = float(col @ y / (col @ col))
        resid = y - col * inv_bw
        s2 = float(resid @ resid) / dof if dof > 0 else 0.0
        cov = np.array([[0.0, 0.0], [0.0, s2 / float(col @ col)]])
        return _Solution(0.0, inv_bw, cov, True)
    params, *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = y - a @ params
    s2 = float(resid @ resid) / dof if dof > 0 else 0.0
    cov = s2 * np.linalg.pinv(a.T @ a)
    return _Solution(float(params[0]), float(params[1]), cov, False)


def _outliers(times: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Mask of observations the stated MAD rule on log residuals drops."""
    log_resid = np.log(times / np.maximum(predicted, times * 1e-6))
    med = float(np.median(log_resid))
    dev = np.abs(log_resid - med)
    mad = float(np.median(dev)) * _MAD_SCALE
    return (dev > OUTLIER_MADS * mad) & (dev > OUTLIER_FLOOR)


def _check_inputs(observations: Sequence[Observation], where: str) -> None:
    if not observations:
        raise ProfileInputError("no measurements to fit", where=where)
    for obs in observations:
        at = obs.origin or where
        if not (math.isfinite(obs.time_us) and obs.time_us > 0):
            raise ProfileInputError(f"time must be a positive number of microseconds (got {obs.time_us!r})",
                                    where=at)
        if obs.size_bytes <= 0:
            raise ProfileInputError(f"size must be > 0 bytes (got {obs.size_bytes!r})", where=at)
    sizes = {obs.size_bytes for obs in observations}
    if len(sizes) < 2:
        only = next(iter(sizes))
        raise ProfileInputError(
            f"every measurement uses one size ({only} bytes); alpha and bandwidth need "
            "at least two sizes, ideally from ~1KB to tens of MB", where=where)


def fit_alpha_beta(observations: Sequence[Observation], *, where: str = "measurements") -> AlphaBetaFit:
    """Fit alpha (us) and bandwidth (GB/s) to ``observations`` with the rule in the module docstring.

    Raises
    ------
    ProfileInputError
        No observations, a non-positive time or size, a single size only, or
        times that do not grow with size (no bandwidth can be fitted).
    """
    _check_inputs(observations, where)
    design = np.array([[o.latency_coeff, o.bytes_coeff * o.size_bytes] for o in observations], dtype=float)
    times = np.array([o.time_us for o in observations], dtype=float)
    sizes = np.array([o.size_bytes for o in observations], dtype=float)

    keep = np.ones(len(times), dtype=bool)
    sol = _solve(design, times, clamp=False)
    if len(times) >= 4:
        drop = _outliers(times, design @ np.array([sol.alpha, sol.inv_bw]))
        candidate = ~drop
        if drop.any() and len(set(sizes[candidate])) >= 2 and candidate.sum() >= 3:
            keep = candidate
            sol = _solve(design[keep], times[keep], clamp=False)
    if sol.inv_bw <= 0:
        raise ProfileInputError(
            f"time does not grow with size (fitted slope {sol.inv_bw:.3g} us/byte over "
            f"{format_bytes(sizes.min())}..{format_bytes(sizes.max())}); no bandwidth can be fitted", where=where)
    warnings: list[str] = []
    if sol.alpha < 0:
        warnings.append(f"fitted latency was negative ({sol.alpha:.4g} us): fixed at 0 and bandwidth refitted; "
                        "measure smaller sizes to pin the latency down")
        sol = _solve(design[keep], times[keep], clamp=True)
        if sol.inv_bw <= 0:
            raise ProfileInputError("time does not grow with size; no bandwidth can be fitted", where=where)

    params = np.array([sol.alpha, sol.inv_bw])
    predicted = design @ params
    rel_pct = (times - predicted) / times * 100.0
    used_t = times[keep]
    ss_res = float(np.sum((used_t - predicted[keep]) ** 2))
    ss_tot = float(np.sum((used_t - used_t.mean()) ** 2))
    r_squared = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    bandwidth = 1.0 / sol.inv_bw / BYTES_PER_US_PER_GBPS
    alpha_se = math.sqrt(max(float(sol.cov[0, 0]), 0.0))
    inv_bw_se = math.sqrt(max(float(sol.cov[1, 1]), 0.0))
    bandwidth_se = inv_bw_se / sol.inv_bw ** 2 / BYTES_PER_US_PER_GBPS
    used_sizes = sizes[keep]
    lo, hi = int(used_sizes.min()), int(used_sizes.max())
    num_sizes = len(set(used_sizes.tolist()))

    warnings.extend(_quality_warnings(
        r_squared=r_squared, lo=lo, hi=hi, num_sizes=num_sizes, alpha=sol.alpha, alpha_se=alpha_se,
        bandwidth=bandwidth, bandwidth_se=bandwidth_se, clamped=sol.clamped,
        latency_share_small=_share(design[keep], params, smallest=True),
        bytes_share_large=_share(design[keep], params, smallest=False)))
    dropped = ~keep
    if dropped.any():
        listed = ", ".join(f"{format_bytes(sizes[i])} ({rel_pct[i]:+.1f}%)"
                           for i in np.flatnonzero(dropped)[:5])
        more = "" if dropped.sum() <= 5 else f" and {int(dropped.sum()) - 5} more"
        warnings.append(f"dropped {int(dropped.sum())} outlier(s): {listed}{more}")
    points = tuple(FitPoint(int(sizes[i]), float(times[i]), float(predicted[i]), float(rel_pct[i]),
                            bool(dropped[i]), observations[i].origin) for i in range(len(times)))
    used_rel = np.abs(rel_pct[keep])
    return AlphaBetaFit(
        alpha_us=sol.alpha, bandwidth_gbps=bandwidth, r_squared=r_squared,
        rms_residual_pct=float(np.sqrt(np.mean(used_rel ** 2))), max_residual_pct=float(used_rel.max()),
        alpha_stderr_us=alpha_se, bandwidth_stderr_gbps=bandwidth_se, num_samples=len(times),
        num_dropped=int(dropped.sum()), num_sizes=num_sizes, min_bytes=lo, max_bytes=hi,
        alpha_clamped=sol.clamped, points=points, warnings=tuple(warnings))


def _share(design: np.ndarray, params: np.ndarray, *, smallest: bool) -> float:
    """Latency share of the time at the smallest size, or bandwidth share at the largest."""
    index = int(np.argmin(design[:, 1]) if smallest else np.argmax(design[:, 1]))
    lat, byt = design[index, 0] * params[0], design[index, 1] * params[1]
    total = lat + byt
    if total <= 0:
        return 0.0
    return float(lat / total) if smallest else float(byt / total)


def _quality_warnings(*, r_squared: float, lo: int, hi: int, num_sizes: int, alpha: float, alpha_se: float,
                      bandwidth: float, bandwidth_se: float, clamped: bool, latency_share_small: float,
                      bytes_share_large: float) -> list[str]:
    """The reasons not to trust a fit, each as one sentence with a remedy."""
    out: list[str] = []
    if r_squared < POOR_R_SQUARED:
        out.append(f"poor fit: R^2 = {r_squared:.4f} < {POOR_R_SQUARED} (the alpha-beta line does not describe "
                   "these times well; look at `taccl profile show --plot`)")
    if hi / lo < MIN_SIZE_SPAN:
        out.append(f"sizes span only {format_bytes(lo)}..{format_bytes(hi)} ({hi / lo:.3g}x): alpha and "
                   f"bandwidth cannot be separated; measure from ~1KB to tens of MB")
    elif num_sizes < 3:
        out.append("only 2 distinct sizes: the fit is exact and says nothing about its error")
    if not clamped and alpha > 0 and alpha_se > _MAX_ALPHA_REL_SE * alpha:
        out.append(f"latency is not identifiable: alpha = {alpha:.4g} +/- {alpha_se:.2g} us; "
                   "add smaller sizes")
    if bandwidth_se > _MAX_BANDWIDTH_REL_SE * bandwidth:
        out.append(f"bandwidth is not identifiable: {bandwidth:.4g} +/- {bandwidth_se:.2g} GB/s; "
                   "add larger sizes")
    if not clamped and latency_share_small < 0.1:
        out.append(f"even at {format_bytes(lo)} the latency is only {latency_share_small:.0%} of the time: "
                   "alpha is extrapolated; add smaller sizes")
    if bytes_share_large < 0.5:
        out.append(f"even at {format_bytes(hi)} the transfer term is only {bytes_share_large:.0%} of the time: "
                   "bandwidth is extrapolated; add larger sizes")
    return out
