"""Input limits: the largest (and smallest) values any file or argument may carry.

Each limit is far beyond every real system (the biggest shipped cluster has 128
GPUs; no link is slower than 1 MB/s or farther than a second away) and far below
what would make a run hang or exhaust memory: a latency of 1e308 us overflows the
simulator's clock, a chunk factor of 1e9 asks for billions of chunk copies, a
topology of 10^8 GPUs for gigabytes of adjacency. Errors name the limit
(``... the limit is 65,536 (MAX_GPUS)``) so a user knows what was refused and why.
"""

from __future__ import annotations

__all__ = [
    "MAX_BANDWIDTH_GBPS",
    "MAX_CHUNK_COPIES",
    "MAX_CHUNK_FACTOR",
    "MAX_FILE_BYTES",
    "MAX_GPUS",
    "MAX_JSON_DEPTH",
    "MAX_LATENCY_US",
    "MAX_LOCAL_RANKS",
    "MAX_PROFILE_REPEATS",
    "MAX_SIZE_BYTES",
    "MAX_SOLVER_THREADS",
    "MAX_START_US",
    "MAX_XML_FILE_BYTES",
    "MIN_BANDWIDTH_GBPS",
    "limit_text",
]

MAX_GPUS = 65_536
"""GPUs (ranks) in a topology, a schedule, a measurement file or an nccl-tests run."""

MAX_LATENCY_US = 1e6
"""Latency of one link, and any per-step software overhead: one second, in us."""

MIN_BANDWIDTH_GBPS = 1e-3
"""Slowest link: 1 MB/s. Slower links make a 1 TB transfer outlast float precision of the clock."""

MAX_BANDWIDTH_GBPS = 1e6
"""Fastest link: 1 PB/s."""

MAX_SIZE_BYTES = 1 << 40
"""Largest buffer (``--size``): 1 TB (2^40 bytes), beyond the memory of any GPU."""

MAX_START_US = 1e9
"""Latest ``not_before_us`` of a schedule transfer: 1000 s."""

MAX_CHUNK_FACTOR = 4096
"""Chunks per GPU block; MSCCL runs at most 4096 steps per rank, and a rank handles every chunk of its block."""

MAX_CHUNK_COPIES = 1 << 24
"""(rank, chunk) pairs a collective tracks (ranks x chunks): 16.7 M, a few GB of simulator state."""

MAX_SOLVER_THREADS = 1024
"""Solver threads (``--threads``)."""

MAX_LOCAL_RANKS = 16
"""Ranks ``taccl profile run`` spawns on one machine (every one is a process holding PyTorch, some 300 MB): the
GPUs of the largest node (an MI250x8 node has 16 GCDs). More ranks are started by torchrun, one per GPU."""

MAX_PROFILE_REPEATS = 10_000
"""Timed repeats (and warm-up rounds) of one ping-pong size."""

MAX_JSON_DEPTH = 64
"""Nesting of arrays and objects in an input JSON file (a topology needs 4)."""

MAX_FILE_BYTES = 256 << 20
"""Size of an input file read whole (topology, schedule, sketch, measurements): 256 MiB, some ten times the
schedule of a 1024-GPU ring Allgather."""

MAX_XML_FILE_BYTES = 1 << 30
"""Size of an MSCCL XML file read into arrays by the compiled reader (`taccl verify`, `simulate -a`): 1 GiB, some
three times the Allreduce `synthesize` writes for 1,024 GPUs (318 MB). A larger file, or one above
:data:`MAX_FILE_BYTES` not in the plain form that reader takes, is refused."""


def limit_text(name: str, value: float, unit: str = "") -> str:
    """``the limit is 65,536 (MAX_GPUS)``: how every error names the limit it hit."""
    shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
    return f"the limit is {shown}{' ' + unit if unit else ''} ({name})"
