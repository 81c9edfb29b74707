"""Regenerate the sample nccl-tests logs and CSVs of this folder (deterministic).

The files imitate real nccl-tests output byte for byte in layout (header lines,
column widths, footer), with times drawn from known per-hop alpha-beta models
plus a little noise, a protocol bump at mid sizes and, where stated, an outlier,
so that tests can check both the parser and that the fit recovers the truth.
Run: ``python tests/data/profiler/make_samples.py`` (rewrites the files).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).parent

TRUTH = {
    # file: (binary, ranks, alpha_us, bandwidth_GBps)
    "sample_sendrecv.log": ("sendrecv_perf", 2, 9.0, 230.0),
    "all_gather_perf_h100x8.log": ("all_gather_perf", 8, 3.0, 360.0),
    "all_reduce_2nodes.log": ("all_reduce_perf", 16, 1.6, 48.0),
    "reduce_scatter_old_format.log": ("reduce_scatter_perf", 4, 4.0, 20.0),
    "alltoall_4gpu.log": ("alltoall_perf", 4, 6.0, 40.0),
}


def coefficients(binary: str, n: int) -> tuple[float, float]:
    return {
        "sendrecv_perf": (1.0, 1.0),
        "all_gather_perf": (n - 1.0, (n - 1) / n),
        "reduce_scatter_perf": (n - 1.0, (n - 1) / n),
        "all_reduce_perf": (2.0 * (n - 1), 2.0 * (n - 1) / n),
        "alltoall_perf": (1.0, 1.0 / n),
    }[binary]


def bus_factor(binary: str, n: int) -> float:
    return {"sendrecv_perf": 1.0, "all_gather_perf": (n - 1) / n, "reduce_scatter_perf": (n - 1) / n,
            "all_reduce_perf": 2 * (n - 1) / n, "alltoall_perf": (n - 1) / n}[binary]


def time_str(value: float) -> str:
    if value < 1e4:
        return f"{value:7.2f}"
    if value < 1e5:
        return f"{value:7.1f}"
    return f"{value:7.0f}"


def model_times(binary: str, n: int, alpha: float, bw: float, sizes: list[int], rng: np.random.Generator,
                outlier_at: int | None = None) -> list[tuple[float, float]]:
    lat, byt = coefficients(binary, n)
    rows = []
    for size in sizes:
        base = lat * alpha + byt * size / (bw * 1e3)
        bump = 1.04 if 65536 <= size <= 524288 else 1.0  # protocol switch (LL128 -> Simple) region
        out = base * bump * (1 + rng.normal(0, 0.012))
        inp = base * bump * (1 + rng.normal(0, 0.012))
        if size == outlier_at:
            out *= 3.1
        rows.append((out, inp))
    return rows


def table_new(binary: str, n: int, sizes: list[int], times: list[tuple[float, float]], *, redop: str,
              dtype_size: int = 4, inplace_wrong: str = "0", count_div: int = 1) -> list[str]:
    lines = [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong ",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)        ",
    ]
    factor = bus_factor(binary, n)
    bws = []
    for size, (t_out, t_in) in zip(sizes, times, strict=True):
        algo, algi = size / t_out / 1e3, size / t_in / 1e3
        bws.append(algo * factor)
        lines.append(f"{size:12d}  {size // dtype_size // count_div:12d}  {'float':>8s}  {redop:>6s}  {-1:6d}  "
                     f"{time_str(t_out)}  {algo:6.2f}  {algo * factor:6.2f}  {'0':>6s}  "
                     f"{time_str(t_in)}  {algi:6.2f}  {algi * factor:6.2f}  {inplace_wrong:>6s}")
    lines += ["# Out of bounds values : 0 OK",
              f"# Avg bus bandwidth    : {sum(bws) / len(bws):g} ", "#"]
    return lines


def pow2(lo: int, hi: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def write(name: str, lines: list[str]) -> None:
    (HERE / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def sendrecv(rng: np.random.Generator) -> None:
    binary, n, alpha, bw = TRUTH["sample_sendrecv.log"]
    sizes = pow2(8, 256 << 20)
    times = model_times(binary, n, alpha, bw, sizes, rng, outlier_at=2 << 20)
    head = [
        "# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703",
        "# Collective test starting: sendrecv_perf",
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0",
        "#",
        "# Using devices",
        "#  Rank  0 Group  0 Pid  41822 on dgx-a100-07 device  0 [0000:07:00] NVIDIA A100-SXM4-80GB",
        "#  Rank  1 Group  0 Pid  41823 on dgx-a100-07 device  1 [0000:0f:00] NVIDIA A100-SXM4-80GB",
    ]
    tail = ["# Collective test concluded: sendrecv_perf", "#"]
    write("sample_sendrecv.log", head + table_new(binary, n, sizes, times, redop="sum", inplace_wrong="N/A") + tail)
    single = [*head[:2], head[2].replace("minBytes 8 ", "minBytes 67108864 "), *head[3:]]
    one = [64 << 20]
    write("single_size_sendrecv.log",
          single + table_new(binary, n, one, model_times(binary, n, alpha, bw, one, rng), redop="sum",
                             inplace_wrong="N/A") + tail)


def all_gather(rng: np.random.Generator) -> None:
    binary, n, alpha, bw = TRUTH["all_gather_perf_h100x8.log"]
    sizes = pow2(1024, 1 << 30)
    times = model_times(binary, n, alpha, bw, sizes, rng)
    head = ["# nThread 1 nGpus 8 minBytes 1024 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 "
            "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    head += [f"#  Rank {r:2d} Group  0 Pid 218734 on hgx-h100-12 device {r:2d} [0000:{buses[r]}:00] "
             "NVIDIA H100 80GB HBM3" for r in range(n)]
    write("all_gather_perf_h100x8.log", head + table_new(binary, n, sizes, times, redop="none", count_div=n))


def all_reduce(rng: np.random.Generator) -> None:
    binary, n, alpha, bw = TRUTH["all_reduce_2nodes.log"]
    sizes = pow2(8, 1 << 30)
    times = model_times(binary, n, alpha, bw, sizes, rng)
    head = [
        "Warning: Permanently added 'gpu-node-2,10.10.0.12' (ED25519) to the list of known hosts.",
        "# nccl-tests version 2.18.3 nccl-headers=23003 nccl-library=23003",
        "# Collective test starting: all_reduce_perf",
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0 unalign: 0",
        "#",
        "# Using devices",
    ]
    for r in range(n):
        host = "gpu-node-1" if r < 8 else "gpu-node-2"
        head.append(f"#  Rank {r:2d} Group  0 Pid {30211 + r % 8:6d} on {host:>10s} device {r % 8:2d} "
                    f"[0000:{(0x18 + 0x10 * (r % 8)):02x}:00] NVIDIA H100 80GB HBM3")
    head += [
        "gpu-node-1:30211:30211 [0] NCCL INFO Bootstrap : Using eth0:10.10.0.11<0>",
        "gpu-node-1:30211:30211 [0] NCCL INFO cudaDriverVersion 12040",
        "NCCL version 2.21.5+cuda12.4",
        "gpu-node-1:30211:30302 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB eth0:10.10.0.11<0>",
        "gpu-node-1:30211:30302 [0] NCCL INFO comm 0x55d0c8 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 "
        "MNNVL 0",
        "gpu-node-1:30211:30302 [0] NCCL INFO Channel 00/16 :    0   7   6   5   4   3   2   1   8  15  14  13  "
        "12  11  10   9",
        "gpu-node-1:30211:30302 [0] NCCL INFO Connected all rings",
        "gpu-node-1:30211:30302 [0] NCCL INFO ncclCommInitRank comm 0x55d0c8 rank 0 nranks 16 cudaDev 0 nvmlDev 0 "
        "busId 18000 commId 0x7c1f2e9b5a3d4c10 - Init COMPLETE",
    ]
    table = table_new(binary, n, sizes, times, redop="sum")
    # NCCL prints to the same stream; one INFO line lands inside the table
    table.insert(12, "gpu-node-2:30218:30330 [7] NCCL INFO Using network IB")
    tail = ["# Collective test concluded: all_reduce_perf", "#",
            "gpu-node-1:30211:30211 [0] NCCL INFO comm 0x55d0c8 rank 0 nranks 16 cudaDev 0 busId 18000 - "
            "Destroy COMPLETE"]
    write("all_reduce_2nodes.log", head + table + tail)
    cut = head + table[:4 + 20]
    last = cut[-1]
    cut[-1] = last[: len(last) // 2].rstrip()
    write("truncated_all_reduce.log", cut)
    bad = head + table[:4 + 6] + [table[4 + 6].replace(time_str(times[6][0]), "  1x.40"), *table[4 + 7:]] + tail
    write("garbled_all_reduce.log", bad)


def reduce_scatter_old(rng: np.random.Generator) -> None:
    binary, n, alpha, bw = TRUTH["reduce_scatter_old_format.log"]
    sizes = pow2(4096, 128 << 20)
    times = model_times(binary, n, alpha, bw, sizes, rng)
    lines = ["# nThread 1 nGpus 4 minBytes 4096 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 "
             "validation: 1 ", "#", "# Using devices"]
    lines += [f"#   Rank  {r} Pid  11873 on    v100box device  {r} [0x{0x3d + r:02x}] Tesla V100-PCIE-32GB"
              for r in range(n)]
    lines += [
        "#",
        "#                                                     out-of-place                       in-place          ",
        "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
        "#        (B)    (elements)                      (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    factor = bus_factor(binary, n)
    for size, (t_out, t_in) in zip(sizes, times, strict=True):
        algo, algi = size / t_out / 1e3, size / t_in / 1e3
        lines.append(f"{size:12d}  {size // 4 // n:12d}  {'float':>6s}  {'sum':>6s}  {time_str(t_out)}  {algo:6.2f}"
                     f"  {algo * factor:6.2f}  0e+00  {time_str(t_in)}  {algi:6.2f}  {algi * factor:6.2f}  0e+00")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 11.8312 ", "#"]
    write("reduce_scatter_old_format.log", lines)


def alltoall(rng: np.random.Generator) -> None:
    binary, n, alpha, bw = TRUTH["alltoall_4gpu.log"]
    sizes = pow2(1024, 256 << 20)
    times = model_times(binary, n, alpha, bw, sizes, rng)
    head = ["# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703",
            "# Collective test starting: alltoall_perf",
            "# nThread 1 nGpus 4 minBytes 1024 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 "
            "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    head += [f"#  Rank  {r} Group  0 Pid  90412 on  l40s-node device  {r} [0000:{0x41 + r:02x}:00] NVIDIA L40S"
             for r in range(n)]
    tail = ["# Collective test concluded: alltoall_perf", "#"]
    write("alltoall_4gpu.log", head + table_new(binary, n, sizes, times, redop="none", count_div=n) + tail)


def pingpong_csv(rng: np.random.Generator) -> None:
    """4 GPUs on 2 machines: NVLink inside (alpha 2.1 us, 130 GB/s), IB across (4.5 us, 11.8 GB/s)."""
    lines = ["# ping-pong: half round trip per row; 4 ranks, 2 hosts (gpu-a: 0,1; gpu-b: 2,3)",
             "src,dst,bytes,time_us,repeat"]
    for src in range(4):
        for dst in range(src + 1, 4):
            alpha, bw = (2.1, 130.0) if src // 2 == dst // 2 else (4.5, 11.8)
            for size in pow2(1024, 64 << 20):
                for repeat in range(3):
                    t = (alpha + size / (bw * 1e3)) * (1 + rng.normal(0, 0.01))
                    lines.append(f"{src},{dst},{size},{t:.4f},{repeat}")
    write("sample_pingpong.csv", lines)


def main() -> None:
    rng = np.random.default_rng(20240613)
    sendrecv(rng)
    all_gather(rng)
    all_reduce(rng)
    reduce_scatter_old(rng)
    alltoall(rng)
    pingpong_csv(rng)


if __name__ == "__main__":
    main()
