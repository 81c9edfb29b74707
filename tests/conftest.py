"""Shared test configuration: deterministic Hypothesis runs, no per-example deadline."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "taccl",
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("taccl")
