"""Shared test configuration: deterministic Hypothesis runs, no per-example deadline."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
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


@pytest.fixture(autouse=True)
def _no_background_work_left() -> Iterator[None]:
    """Work a test started in threads (taccl_py.threads.in_background) ends before the next test: a command run
    in-process that fails while some is under way leaves at once (os._exit), which would end the test worker."""
    yield
    from taccl_py.threads import wait_background

    assert wait_background(60), "background work still running 60 s after the test"
