"""Units and size conventions shared by every stage.

Time is in microseconds, sizes in bytes, bandwidth in GB/s with GB = 1e9
bytes, so ``bytes / (GBps * 1e3)`` is microseconds. Size strings follow
nccl-tests: ``K``, ``M``, ``G`` (with or without ``B``/``iB``) are powers of
1024; plain integers are bytes.

Naming convention (README, "Units and conventions"): a field or variable called plainly
``bandwidth`` is in GB/s and one called ``latency`` (or ``alpha``) is in
microseconds, as in topology files and :class:`~taccl_py.topology.Link`;
every quantity in any other unit says so in its name (``bytes_per_us``,
``us_per_byte``, ``latency_ns``, ``bandwidth_gibps``, ``time_s``), and
reported figures carry their unit (``time_us``, ``algbw_GBps``,
``size_bytes``). Every GB/s <-> bytes/us and ns <-> us conversion goes through
the functions below; tolerances are named in :mod:`taccl_py.tolerances`.
"""

from __future__ import annotations

import math
import re

from taccl_py.errors import InputError
from taccl_py.limits import MAX_SIZE_BYTES, limit_text

__all__ = [
    "BYTES_PER_US_PER_GBPS",
    "GIB",
    "NS_PER_US",
    "algbw_gbps",
    "bytes_per_us_to_gbps",
    "format_bytes",
    "gbps_to_bytes_per_us",
    "ns_to_us",
    "parse_size",
    "parse_size_bounds",
    "parse_size_range",
    "transfer_time_us",
    "us_per_byte",
    "us_to_ns",
]

BYTES_PER_US_PER_GBPS = 1e3
"""1 GB/s (1e9 bytes per second) moves 1000 bytes per microsecond."""

NS_PER_US = 1e3
"""Nanoseconds in a microsecond (ASTRA-sim and Chakra give latencies in ns)."""

GIB = 1 << 30

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def gbps_to_bytes_per_us(bandwidth_gbps: float) -> float:
    """Bandwidth in GB/s (1e9 B/s) as bytes per microsecond."""
    return bandwidth_gbps * BYTES_PER_US_PER_GBPS


def bytes_per_us_to_gbps(bytes_per_us: float) -> float:
    """A rate in bytes per microsecond as GB/s (1e9 B/s)."""
    return bytes_per_us / BYTES_PER_US_PER_GBPS


def us_per_byte(bandwidth_gbps: float) -> float:
    """Microseconds one byte takes on a ``bandwidth_gbps`` link (the beta of alpha-beta)."""
    return 1.0 / gbps_to_bytes_per_us(bandwidth_gbps)


def algbw_gbps(size_bytes: float, time_us: float) -> float:
    """nccl-tests' algorithm bandwidth: ``size_bytes`` moved in ``time_us``, in GB/s."""
    return bytes_per_us_to_gbps(size_bytes / time_us)


def ns_to_us(nanoseconds: float) -> float:
    """Nanoseconds as microseconds."""
    return nanoseconds / NS_PER_US


def us_to_ns(microseconds: float) -> float:
    """Microseconds as nanoseconds."""
    return microseconds * NS_PER_US


def transfer_time_us(num_bytes: float, bandwidth_gbps: float, latency_us: float = 0.0) -> float:
    """alpha + bytes / bandwidth, in microseconds."""
    return latency_us + num_bytes / gbps_to_bytes_per_us(bandwidth_gbps)


def parse_size(text: str | int, *, where: str = "--size") -> int:
    """Parse ``1MiB``, ``256KB``, ``1G``, ``4096`` or ``1e6`` into bytes (K/M/G are binary)."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE_RE.match(str(text))
        if not match:
            raise InputError(f"cannot read size {text!r}; use e.g. 4096, 256KB, 1MiB or 1GB", where=where)
        number, suffix = match.groups()
        scaled = float(number) * _SUFFIX[suffix.upper()]
        if not math.isfinite(scaled) or scaled != int(scaled):
            raise InputError(f"size {text!r} is not a whole number of bytes", where=where)
        value = int(scaled)
    if value <= 0:
        raise InputError(f"size must be > 0 bytes (got {text!r})", where=where)
    if value > MAX_SIZE_BYTES:
        raise InputError(f"size {text!r} is above 1TB; {limit_text('MAX_SIZE_BYTES', MAX_SIZE_BYTES, 'bytes')}",
                         where=where)
    return value


def parse_size_range(text: str, *, where: str = "--size") -> list[int]:
    """Parse ``LO:HI`` into the powers of two from LO to HI (both included), or one size."""
    if ":" not in str(text):
        return [parse_size(text, where=where)]
    lo_text, _, hi_text = str(text).partition(":")
    lo, hi = parse_size(lo_text, where=where), parse_size(hi_text, where=where)
    if lo > hi:
        raise InputError(f"range {text!r} has its lower end above its upper end", where=where)
    sizes = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size *= 2
    return sizes


def parse_size_bounds(text: str, *, where: str = "--size") -> tuple[int, int]:
    """Parse ``LO:HI`` into its two ends in bytes (both included), or ``SIZE`` into ``(SIZE, SIZE)``."""
    lo_text, sep, hi_text = str(text).partition(":")
    lo = parse_size(lo_text, where=where)
    hi = parse_size(hi_text, where=where) if sep else lo
    if lo > hi:
        raise InputError(f"range {text!r} has its lower end above its upper end", where=where)
    return lo, hi


def format_bytes(num_bytes: float) -> str:
    """Short human form: 1KB, 64MB, 1GB (binary multiples, as nccl-tests users read them)."""
    for suffix, factor in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if num_bytes >= factor:
            value = num_bytes / factor
            return f"{value:g}{suffix}" if value == int(value) else f"{value:.3g}{suffix}"
    return f"{num_bytes:g}B"
