"""Write the example training-step workloads of this directory (run: ``.venv/bin/python examples/workloads/make_examples.py``).

Layer sizes come from the published models; compute durations and memory-bandwidth
demands are modelling assumptions stated below (an A100 40GB: 312 TFLOPS bf16/fp16
dense, 1,555 GB/s HBM2), meant to be replaced by profiled figures.

* ``resnet50_dp.json``: data-parallel ResNet-50 (He et al., CVPR 2016), PyTorch DDP
  style: gradients are all-reduced in buckets in backward order while backprop continues.
  Parameter counts per stage are torchvision's ``resnet50`` (25,557,032 in total):
  stem 9,536; layer1 215,808; layer2 1,219,584; layer3 7,098,368; layer4 14,964,736
  (block 0 with its downsample 6,039,552, blocks 1 and 2 4,462,592 each); fc 2,049,000.
  Gradients are fp32 (4 bytes), bucketed at stage boundaries near DDP's 25 MB cap.
  Compute: 128 images per GPU with mixed precision, forward 15 ms and backward 30 ms
  (about 2,800 images/s per GPU, the order of NVIDIA's published A100 ResNet-50 v1.5
  training throughput), split between stages by their multiply-accumulates (stem 0.118,
  layer1 0.680, layer2 1.030, layer3 1.470, layer4 0.810, fc 0.002 GMAC per image).
  Kernels draw 700 GB/s of HBM (45%: convolutions with their batch-norm and ReLU
  kernels); the SGD-with-momentum update reads and writes 5 x 102 MB at 1,200 GB/s.
* ``fsdp_gpt_layers.json``: FSDP (full sharding) over 12 transformer layers of GPT-2 XL's
  shape (Radford et al. 2019: d_model 1,600, 48 layers, 1.5B parameters; 12 layers keep
  the example quick). A layer has 12 d^2 + 13 d = 30,740,800 parameters, 61,481,600 bytes
  in bf16. Before each layer's forward and backward its parameters are all-gathered;
  after its backward its bf16 gradients are reduce-scattered. Compute: 8 sequences of
  1,024 tokens per GPU, 24 d^2 FLOPs per token per layer forward (503 GFLOP) at 156
  TFLOPS (50% of peak): 3.2 ms forward, 6.4 ms backward, drawing 500 GB/s. Collectives
  run on two streams (``ag`` and ``rs``), as FSDP's prefetching does, so the next
  layer's Allgather overlaps this layer's compute.
* ``allreduce_overlap.json``: ACE's microbenchmark shape, a 256 MiB Allreduce beside a
  4 ms memory-bound kernel drawing 1,200 GB/s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FORMAT = "taccl_py-workload/1"

RESNET_STAGE_PARAMS = {"stem": 9_536, "layer1": 215_808, "layer2": 1_219_584, "layer3": 7_098_368,
                       "layer4.0": 6_039_552, "layer4.1": 4_462_592, "layer4.2": 4_462_592, "fc": 2_049_000}
RESNET_STAGE_GMAC = {"stem": 0.118, "layer1": 0.680, "layer2": 1.030, "layer3": 1.470, "layer4": 0.810, "fc": 0.002}
BACKWARD_US, FORWARD_US = 30_000.0, 15_000.0
KERNEL_GBPS = 700


def resnet50() -> dict[str, Any]:
    assert sum(RESNET_STAGE_PARAMS.values()) == 25_557_032
    total = sum(RESNET_STAGE_GMAC.values())

    def backward_us(stage: str, share: float = 1.0) -> float:
        return round(BACKWARD_US * RESNET_STAGE_GMAC[stage] / total * share, 1)

    nodes: list[dict[str, Any]] = [
        {"id": "forward", "type": "compute", "duration_us": FORWARD_US, "memory_bandwidth": KERNEL_GBPS}]

    def compute(node_id: str, us: float) -> None:
        nodes.append({"id": node_id, "type": "compute", "duration_us": us, "memory_bandwidth": KERNEL_GBPS})

    def bucket(node_id: str, stages: list[str], after: str) -> None:
        size = 4 * sum(RESNET_STAGE_PARAMS[s] for s in stages)
        nodes.append({"id": node_id, "type": "collective", "kind": "allreduce", "size": size, "algorithm": "ring",
                      "after": [after], "note": f"fp32 gradients of {', '.join(stages)}"})

    compute("backward fc", backward_us("fc"))
    bucket("allreduce bucket 0", ["fc"], "backward fc")
    compute("backward layer4.2-1", backward_us("layer4", 2 / 3))
    bucket("allreduce bucket 1", ["layer4.2", "layer4.1"], "backward layer4.2-1")
    compute("backward layer4.0", backward_us("layer4", 1 / 3))
    bucket("allreduce bucket 2", ["layer4.0"], "backward layer4.0")
    compute("backward layer3", backward_us("layer3"))
    bucket("allreduce bucket 3", ["layer3"], "backward layer3")
    compute("backward layer2", backward_us("layer2"))
    compute("backward layer1", backward_us("layer1"))
    compute("backward stem", backward_us("stem"))
    bucket("allreduce bucket 4", ["layer2", "layer1", "stem"], "backward stem")
    nodes.append({"id": "optimizer step", "type": "compute", "duration_us": 426.0, "memory_bandwidth": 1200,
                  "after": [f"allreduce bucket {k}" for k in range(5)],
                  "note": "SGD with momentum: read weights, gradients, momentum; write weights, momentum (5 x 102 MB)"})
    return {"format": FORMAT, "name": "resnet50-dp",
            "source": "ResNet-50 (He et al., CVPR 2016), torchvision parameter counts; DDP-style gradient buckets; "
                      "compute figures are assumptions, see make_examples.py",
            "nodes": nodes}


GPT_D = 1_600
GPT_LAYERS = 12


def fsdp_gpt() -> dict[str, Any]:
    params = 12 * GPT_D**2 + 13 * GPT_D
    layer_bytes = 2 * params  # bf16
    tokens = 8 * 1024
    forward_us = round(24 * GPT_D**2 * tokens / 156e12 * 1e6, 1)
    nodes: list[dict[str, Any]] = []
    for layer in range(GPT_LAYERS):
        nodes.append({"id": f"allgather fwd {layer}", "type": "collective", "kind": "allgather", "size": layer_bytes,
                      "algorithm": "ring", "stream": "ag"})
        nodes.append({"id": f"forward {layer}", "type": "compute", "duration_us": forward_us, "memory_bandwidth": 500,
                      "after": [f"allgather fwd {layer}"]})
    for layer in reversed(range(GPT_LAYERS)):
        gather = [] if layer == GPT_LAYERS - 1 else [f"allgather bwd {layer}"]
        if gather:
            nodes.append({"id": f"allgather bwd {layer}", "type": "collective", "kind": "allgather",
                          "size": layer_bytes, "algorithm": "ring", "stream": "ag"})
        nodes.append({"id": f"backward {layer}", "type": "compute", "duration_us": 2 * forward_us,
                      "memory_bandwidth": 500, "after": gather})
        nodes.append({"id": f"reducescatter {layer}", "type": "collective", "kind": "reducescatter",
                      "size": layer_bytes, "algorithm": "ring", "stream": "rs", "after": [f"backward {layer}"]})
    return {"format": FORMAT, "name": "fsdp-gpt2xl-12layers",
            "source": f"FSDP full sharding over {GPT_LAYERS} GPT-2 XL-shaped layers (d_model {GPT_D}, "
                      f"{params} parameters, {layer_bytes} bytes bf16 each); compute figures are assumptions, "
                      "see make_examples.py",
            "nodes": nodes}


def write(name: str, data: dict[str, Any]) -> None:
    lines = ["{"]
    for key in ("format", "name", "source"):
        lines.append(f"  {json.dumps(key)}: {json.dumps(data[key])},")
    lines.append('  "nodes": [')
    for k, node in enumerate(data["nodes"]):
        lines.append(f"    {json.dumps(node)}{',' if k < len(data['nodes']) - 1 else ''}")
    lines += ["  ]", "}"]
    (HERE / name).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    write("resnet50_dp.json", resnet50())
    write("fsdp_gpt_layers.json", fsdp_gpt())
