"""Live ping-pong measurements with ``torch.distributed`` (gloo on CPUs, nccl on GPUs).

For every measured pair (a, b) and size, rank a sends the buffer to b and b
sends it back; half the round trip is one sample of ``a -> b``. Other ranks
wait at a barrier, so one pair is measured at a time. Each size is warmed up
before its timed repeats. Rank 0 gathers every sample and writes the CSV of
:mod:`taccl_py.profiler.measurements`.

Two ways to start: under ``torchrun`` (``torchrun --nproc-per-node N -m
taccl_py.profile ...``: every process is one rank, rendezvous from the
environment) or locally (:func:`run_local` spawns N processes that meet over
loopback TCP). torch is imported lazily: it is the optional ``profile`` extra.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from taccl_py.errors import ProfileInputError, TacclError
from taccl_py.limits import MAX_LOCAL_RANKS, limit_text
from taccl_py.profiler.measurements import Sample, write_measurements_csv
from taccl_py.units import format_bytes

__all__ = [
    "BACKENDS",
    "PingPongConfig",
    "all_pairs",
    "check_local_ranks",
    "check_local_run",
    "launched_by_torchrun",
    "measure_pingpong",
    "require_torch",
    "resolve_backend",
    "run_local",
    "run_torchrun",
]

BACKENDS = ("gloo", "nccl")
INSTALL_HINT = ("taccl profile run needs PyTorch: pip install 'taccl_py[profile]' (CPU-only: pip install torch "
                "--index-url https://download.pytorch.org/whl/cpu)")


@dataclass(frozen=True)
class PingPongConfig:
    """What to measure: sizes (bytes), ordered GPU pairs, repeats, warm-up rounds, backend, timeout (s)."""

    sizes: tuple[int, ...]
    pairs: tuple[tuple[int, int], ...]
    repeats: int = 20
    warmup: int = 3
    backend: str = "gloo"
    timeout_s: float = 600.0


def require_torch() -> ModuleType:
    """Import torch, or raise one clear line saying how to install it."""
    try:
        import torch
    except ImportError:
        raise ProfileInputError(INSTALL_HINT) from None
    return torch


def resolve_backend(requested: str | None) -> str:
    """``gloo`` or ``nccl`` (nccl needs CUDA); None picks nccl when GPUs are visible, else gloo."""
    torch = require_torch()
    has_cuda = bool(torch.cuda.is_available())
    if requested is None:
        return "nccl" if has_cuda else "gloo"
    if requested not in BACKENDS:
        raise ProfileInputError(f"must be gloo or nccl (got {requested!r})", where="--backend")
    if requested == "nccl" and not has_cuda:
        raise ProfileInputError("nccl needs CUDA GPUs and none is visible; use --backend gloo", where="--backend")
    return requested


def all_pairs(num_ranks: int) -> tuple[tuple[int, int], ...]:
    """Every unordered pair once, as (lower, higher): a ping-pong measures both directions."""
    return tuple((a, b) for a in range(num_ranks) for b in range(a + 1, num_ranks))


def launched_by_torchrun() -> bool:
    """True inside a process started by torchrun (or any launcher setting the env:// variables)."""
    env = os.environ
    return all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _sync(torch: Any, backend: str) -> None:
    if backend == "nccl":
        torch.cuda.synchronize()


def measure_pingpong(config: PingPongConfig, rank: int) -> list[Sample] | None:
    """Run the ping-pongs in an initialised process group; rank 0 returns every sample, others None."""
    torch = require_torch()
    import torch.distributed as dist

    device = "cpu"
    if config.backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank)) % max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    buffer = torch.zeros(max(config.sizes), dtype=torch.uint8, device=device)
    mine: list[tuple[int, int, int, float, int]] = []
    for src, dst in config.pairs:
        if rank in (src, dst):
            peer = dst if rank == src else src
            for size in config.sizes:
                view = buffer[:size]
                for k in range(config.warmup + config.repeats):
                    _sync(torch, config.backend)
                    start = time.perf_counter()
                    if rank == src:
                        dist.send(view, peer)
                        dist.recv(view, peer)
                    else:
                        dist.recv(view, peer)
                        dist.send(view, peer)
                    _sync(torch, config.backend)
                    elapsed_us = (time.perf_counter() - start) * 1e6 / 2
                    if rank == src and k >= config.warmup:
                        mine.append((src, dst, size, elapsed_us, k - config.warmup))
        dist.barrier()
    gathered: list[Any] | None = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if rank != 0 or gathered is None:
        return None
    rows = sorted(r for part in gathered for r in (part or []))
    return [Sample(src, dst, size, t, repeat) for (src, dst, size, t, repeat) in rows]


def _header(config: PingPongConfig, world_size: int, hosts: Sequence[str]) -> list[str]:
    torch = require_torch()
    return [
        f"taccl profile run: ping-pong, half round trip per row; backend {config.backend}, {world_size} ranks, "
        f"torch {torch.__version__}, python {platform.python_version()}",
        f"sizes {format_bytes(min(config.sizes))}..{format_bytes(max(config.sizes))} "
        f"({len(config.sizes)} sizes), warm-up {config.warmup}, repeats {config.repeats}, {len(config.pairs)} pairs",
        "hosts: " + ", ".join(f"rank {r}={h}" for r, h in enumerate(hosts)),
    ]


def _run_rank(config: PingPongConfig, rank: int, output: str) -> tuple[Sample, ...] | None:
    """Measure as one rank of an initialised group; rank 0 writes ``output`` and returns the samples."""
    import torch.distributed as dist

    hosts: list[Any] | None = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(socket.gethostname(), hosts, dst=0)
    samples = measure_pingpong(config, rank)
    if rank == 0 and samples is not None and hosts is not None:
        write_measurements_csv(output, samples, comments=_header(config, dist.get_world_size(),
                                                                 [str(h) for h in hosts]))
        return tuple(samples)
    return None


def _check_pairs(config: PingPongConfig, world_size: int) -> None:
    if world_size < 2:
        raise ProfileInputError(f"ping-pong needs at least 2 ranks (got {world_size})", where="--nproc")
    for src, dst in config.pairs:
        if max(src, dst) >= world_size:
            raise ProfileInputError(f"pair {src}->{dst} needs rank {max(src, dst)} but only {world_size} ranks run",
                                    where="--pairs")


def run_torchrun(config: PingPongConfig, output: str) -> tuple[tuple[Sample, ...] | None, int]:
    """Measure inside a torchrun-launched process; returns (samples on rank 0 else None, rank)."""
    require_torch()
    import torch.distributed as dist

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    _check_pairs(config, world_size)
    dist.init_process_group(config.backend, init_method="env://", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=config.timeout_s))
    try:
        return _run_rank(config, rank, output), rank
    finally:
        dist.destroy_process_group()


def _spawned(rank: int, world_size: int, port: int, config: PingPongConfig, output: str) -> None:
    """Body of one locally spawned rank (module level so that it pickles)."""
    import torch.distributed as dist

    dist.init_process_group(config.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=config.timeout_s))
    try:
        _run_rank(config, rank, output)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _available_memory_bytes() -> int | None:
    """Physical memory free now (Linux, macOS), or None where the OS does not say."""
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_local_ranks(nproc: int) -> None:
    """Refuse more local processes than one machine runs (checked before PyTorch is even imported)."""
    if nproc > MAX_LOCAL_RANKS:
        raise ProfileInputError(f"{nproc} local processes: {limit_text('MAX_LOCAL_RANKS', MAX_LOCAL_RANKS)}; start "
                                "more ranks with torchrun (one per GPU, on every node)", where="--nproc")


def check_local_run(config: PingPongConfig, nproc: int) -> None:
    """Refuse a local run this machine cannot hold, before any process starts.

    Every rank is a process holding PyTorch and one buffer of the largest size; on gloo the buffers are host
    memory (twice over: gloo stages a copy), so ranks x largest size must fit in the memory free now.
    """
    if not math.isfinite(config.timeout_s) or config.timeout_s <= 0:
        raise ProfileInputError(f"must be a positive number of seconds (got {config.timeout_s})", where="--timeout")
    check_local_ranks(nproc)
    _check_pairs(config, nproc)
    free = _available_memory_bytes()
    need = 2 * nproc * max(config.sizes)
    if config.backend == "gloo" and free is not None and need > free:
        raise ProfileInputError(f"{nproc} ranks x {format_bytes(max(config.sizes))} buffers need about "
                                f"{format_bytes(need)} of host memory and {format_bytes(free)} is free; "
                                "give a smaller largest size or fewer ranks", where="--sizes")


def run_local(config: PingPongConfig, nproc: int, output: str) -> None:
    """Spawn ``nproc`` ranks on this machine (loopback rendezvous); rank 0 writes ``output``.

    Raises :class:`TacclError` naming the rank when a rank fails.
    """
    require_torch()
    import torch.multiprocessing as mp

    check_local_run(config, nproc)
    try:
        mp.spawn(_spawned, args=(nproc, _free_port(), config, output), nprocs=nproc, join=True)
    except mp.ProcessRaisedException as exc:
        last = [line for line in str(exc).strip().splitlines() if line.strip()][-1:]
        raise TacclError(f"live profiling failed on rank {exc.error_index}: {' '.join(last)}") from None
    except mp.ProcessExitedException as exc:
        raise TacclError(f"live profiling failed: rank {exc.error_index} exited with status {exc.exit_code}") from None
