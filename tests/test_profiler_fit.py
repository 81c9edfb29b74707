"""The alpha-beta fit recovers known parameters, with tolerances that follow from the noise."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from taccl_py.errors import ProfileInputError
from taccl_py.profiler.fit import AlphaBetaFit, Observation, fit_alpha_beta

SIZES = [1 << k for k in range(3, 31)]  # 8 B .. 1 GB, as nccl-tests -b 8 -e 1G


def _observations(alpha: float, bw: float, noise: np.ndarray, *, lat: float = 1.0, byt: float = 1.0,
                  sizes: list[int] = SIZES, copies: int = 2) -> list[Observation]:
    sizes_rep = [s for s in sizes for _ in range(copies)]
    true = [lat * alpha + byt * s / (bw * 1e3) for s in sizes_rep]
    return [Observation(s, t * (1 + e), lat, byt, f"synthetic: row {k}")
            for k, (s, t, e) in enumerate(zip(sizes_rep, true, noise, strict=True))]


def _kept_bound(fit: AlphaBetaFit, obs: list[Observation], sigma: float) -> np.ndarray:
    """|error| bound of (alpha, 1/B) for relative noise |e| <= sigma: the fit solves min ||A p - 1|| with
    A = X / t_obs, the truth satisfies A p* = 1/(1+e), so p - p* = pinv(A) (e/(1+e))."""
    kept = [not p.dropped for p in fit.points]
    rows = [[o.latency_coeff / o.time_us, o.bytes_coeff * o.size_bytes / o.time_us]
            for o, k in zip(obs, kept, strict=True) if k]
    pinv = np.linalg.pinv(np.array(rows))
    return np.abs(pinv).sum(axis=1) * sigma / (1 - sigma)


@pytest.mark.slow
@given(alpha=st.floats(0.5, 50.0), bw=st.floats(1.0, 500.0), lat=st.sampled_from([1.0, 7.0, 30.0]),
       byt=st.sampled_from([1.0, 0.875, 1.875, 0.25]))
def test_noiseless_measurements_are_recovered_exactly(alpha: float, bw: float, lat: float, byt: float) -> None:
    fit = fit_alpha_beta(_observations(alpha, bw, np.zeros(2 * len(SIZES)), lat=lat, byt=byt))
    assert fit.alpha_us == pytest.approx(alpha, rel=1e-7)
    assert fit.bandwidth_gbps == pytest.approx(bw, rel=1e-7)
    assert fit.r_squared == pytest.approx(1.0, abs=1e-9)
    assert fit.num_dropped == 0


@pytest.mark.slow
@settings(max_examples=60)
@given(alpha=st.floats(0.5, 50.0), bw=st.floats(1.0, 500.0), sigma=st.floats(0.0, 0.05),
       seed=st.integers(0, 2**32 - 1))
def test_bounded_noise_stays_within_the_bound_it_implies(alpha: float, bw: float, sigma: float, seed: int) -> None:
    noise = np.random.default_rng(seed).uniform(-sigma, sigma, 2 * len(SIZES))
    obs = _observations(alpha, bw, noise)
    fit = fit_alpha_beta(obs)
    assume(not fit.alpha_clamped)
    bound = _kept_bound(fit, obs, sigma)
    assert abs(fit.alpha_us - alpha) <= bound[0] + 1e-9 * alpha
    assert abs(1 / (fit.bandwidth_gbps * 1e3) - 1 / (bw * 1e3)) <= bound[1] + 1e-12 / bw
    # what that means in plain numbers for this size range: a few percent at most
    assert fit.bandwidth_gbps == pytest.approx(bw, rel=3 * sigma + 1e-9)


@settings(max_examples=40)
@given(alpha=st.floats(1.0, 50.0), bw=st.floats(1.0, 500.0), sigma=st.floats(0.001, 0.03),
       seed=st.integers(0, 2**32 - 1))
def test_gaussian_noise_lands_within_the_reported_standard_errors(alpha: float, bw: float, sigma: float,
                                                                   seed: int) -> None:
    noise = np.random.default_rng(seed).normal(0.0, sigma, 2 * len(SIZES))
    fit = fit_alpha_beta(_observations(alpha, bw, noise))
    assume(not fit.alpha_clamped)
    # 6 standard errors: a false alarm is a < 1e-8 event per example
    assert abs(fit.alpha_us - alpha) <= 6 * fit.alpha_stderr_us + 1e-9
    assert abs(fit.bandwidth_gbps - bw) <= 6 * fit.bandwidth_stderr_gbps + 1e-9
    assert fit.r_squared > 0.99


def test_a_spike_is_dropped_by_the_stated_rule_and_the_rest_fits_exactly() -> None:
    noise = np.zeros(2 * len(SIZES))
    obs = _observations(5.0, 100.0, noise)
    spiked = [*obs[:20], Observation(obs[20].size_bytes, obs[20].time_us * 20, 1.0, 1.0, "spike"), *obs[21:]]
    fit = fit_alpha_beta(spiked)
    assert fit.num_dropped == 1
    assert [p.origin for p in fit.points if p.dropped] == ["spike"]
    assert fit.alpha_us == pytest.approx(5.0, rel=1e-9)
    assert fit.bandwidth_gbps == pytest.approx(100.0, rel=1e-9)
    assert any("dropped 1 outlier" in w for w in fit.warnings)


def test_small_gaussian_noise_loses_nothing() -> None:
    noise = np.random.default_rng(7).normal(0.0, 0.005, 2 * len(SIZES))
    fit = fit_alpha_beta(_observations(5.0, 100.0, noise))
    assert fit.num_dropped == 0
    assert not fit.warnings


def test_narrow_size_band_warns_that_alpha_and_beta_cannot_be_separated() -> None:
    sizes = [1 << 20, 3 << 19, 1 << 21]
    noise = np.random.default_rng(1).normal(0.0, 0.01, 2 * len(sizes))
    fit = fit_alpha_beta(_observations(5.0, 100.0, noise, sizes=sizes))
    assert any("cannot be separated" in w for w in fit.warnings)


def test_only_large_sizes_warn_that_alpha_is_extrapolated() -> None:
    sizes = [1 << k for k in range(24, 31)]
    noise = np.random.default_rng(2).normal(0.0, 0.01, 2 * len(sizes))
    fit = fit_alpha_beta(_observations(2.0, 100.0, noise, sizes=sizes))
    assert any("alpha is extrapolated" in w for w in fit.warnings)


def test_only_small_sizes_warn_that_bandwidth_is_extrapolated() -> None:
    sizes = [1 << k for k in range(3, 12)]
    noise = np.random.default_rng(3).normal(0.0, 0.01, 2 * len(sizes))
    fit = fit_alpha_beta(_observations(10.0, 100.0, noise, sizes=sizes))
    assert any("bandwidth is extrapolated" in w for w in fit.warnings)
    assert any("bandwidth is not identifiable" in w for w in fit.warnings)


def test_poor_fit_is_reported_below_r_squared_0_99() -> None:
    rng = np.random.default_rng(4)
    sizes = [1 << k for k in range(10, 24)]
    obs = [Observation(s, (5 + s / 1e5) * math.exp(rng.normal(0, 0.5)), 1.0, 1.0) for s in sizes for _ in range(3)]
    fit = fit_alpha_beta(obs)
    assert fit.r_squared < 0.99
    assert any(w.startswith("poor fit: R^2") for w in fit.warnings)


def test_negative_latency_is_fixed_at_zero_with_a_warning() -> None:
    sizes = [1 << k for k in range(16, 24)]
    obs = [Observation(s, s / 1e4 - 3.0 + 1e-9 * s, 1.0, 1.0) for s in sizes]
    fit = fit_alpha_beta(obs)
    assert fit.alpha_clamped and fit.alpha_us == 0.0
    assert fit.bandwidth_gbps > 0
    assert any("negative" in w for w in fit.warnings)


def test_a_single_size_is_an_input_error() -> None:
    obs = [Observation(4096, 10.0 + k, 1.0, 1.0) for k in range(5)]
    with pytest.raises(ProfileInputError, match="one size"):
        fit_alpha_beta(obs, where="x.csv")


def test_time_that_does_not_grow_with_size_is_an_input_error() -> None:
    obs = [Observation(s, 100.0 - s / 1e6, 1.0, 1.0) for s in SIZES[:20]]
    with pytest.raises(ProfileInputError, match="does not grow with size"):
        fit_alpha_beta(obs, where="x.csv")


def test_predict_uses_the_model_coefficients() -> None:
    fit = fit_alpha_beta(_observations(3.0, 50.0, np.zeros(2 * len(SIZES)), lat=7.0, byt=0.875))
    assert fit.predict_us(1 << 20, 7.0, 0.875) == pytest.approx(7 * 3.0 + 0.875 * (1 << 20) / 50e3)
