"""Shared test configuration: deterministic Hypothesis runs, no per-example deadline."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "taccl",
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("taccl-debug", parent=settings.get_profile("taccl"),
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
# TACCL_HYPOTHESIS=taccl-debug reports the first failing example without shrinking it
settings.load_profile(os.environ.get("TACCL_HYPOTHESIS", "taccl"))
