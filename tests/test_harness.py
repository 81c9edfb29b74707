"""The harness's host cost (taccl_py.harness) and the channels NCCL runs a collective on (runtime.nccl_channels)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taccl_py.harness import OverlappedHost
from taccl_py.runtime import NCCL_NVLS_CHANNELS, Protocol, nccl_channels


def test_nccl_drops_channels_below_its_thread_threshold() -> None:
    """Hand-computed from enqueue.cc's rule (bytes < channels x threads x threshold drops a channel): a ring's LL
    needs 512 threads x 8 B x 8 ranks = 32 KB a channel on 8 ranks, LL128 640 x 8 = 5 KB, Simple 512 x 64 = 32 KB;
    a tree's LL is not scaled by the ranks (4 KB)."""
    assert nccl_channels("ring", Protocol.LL, 1024, 8, 32) == 1
    assert nccl_channels("ring", Protocol.LL, 64 << 10, 8, 32) == 2
    assert nccl_channels("ring", Protocol.LL, (64 << 10) - 1, 8, 32) == 1
    assert nccl_channels("ring", Protocol.LL, 1 << 20, 8, 32) == 32
    assert nccl_channels("ring", Protocol.LL, 1 << 20, 16, 32) == 16  # twice the ranks, twice the bytes a channel
    assert nccl_channels("ring", Protocol.LL128, 60 << 10, 8, 32) == 12
    assert nccl_channels("ring", "Simple", 96 << 10, 8, 32) == 3
    assert nccl_channels("tree", Protocol.LL, 64 << 10, 8, 32) == 16
    assert nccl_channels("ring", Protocol.SIMPLE, 1 << 30, 8, 24) == 24  # never more than the communicator's
    assert nccl_channels("nvls", Protocol.SIMPLE, 1024, 8, 32) == NCCL_NVLS_CHANNELS
    assert nccl_channels("direct", Protocol.LL, 1024, 8, 32) == 32


@given(st.sampled_from(["ring", "tree"]), st.sampled_from(list(Protocol)), st.integers(1, 1 << 34),
       st.integers(2, 64), st.integers(1, 64))
def test_channels_are_nccls_loop(algorithm: str, protocol: Protocol, size: int, ranks: int, channels: int) -> None:
    """The closed form is the loop NCCL runs: from every channel, drop one while the buffer is below the threshold."""
    threads = {Protocol.LL: 512, Protocol.LL128: 640, Protocol.SIMPLE: 512}[protocol]
    threshold = {Protocol.LL: 8, Protocol.LL128: 8, Protocol.SIMPLE: 64}[protocol]
    if algorithm == "ring" and protocol is Protocol.LL:
        threshold *= ranks
    nc = channels
    while size < nc * threads * threshold and nc >= 2:
        nc -= 1
    assert nccl_channels(algorithm, protocol, size, ranks, channels) == nc


def test_an_overlapped_host_takes_the_longer_of_the_two() -> None:
    host = OverlappedHost(30.0, 0.25)
    assert host.host_time_us(8) == 32.0 and host.host_time_us(0) == 30.25  # at least one channel
    assert host.time_us(10.0, 8) == 32.0  # the host binds: the GPUs' time is hidden under it
    assert host.time_us(100.0, 32) == 100.0  # the GPUs bind: nothing is added
    for bad in (-1.0, math.nan, 2e6):
        with pytest.raises(ValueError, match="must be a number of us"):
            OverlappedHost(bad)
        with pytest.raises(ValueError, match="per_channel_us"):
            OverlappedHost(1.0, bad)
