"""`train.precision`: the arithmetic of the training steps.

fp32 (the default) trains in float32. bf16 runs each step's forward under torch's bf16
autocast (matrix products and the ops torch lists for it in bfloat16, the rest in
float32), with float32 weights, gradients and optimizer state; evaluation stays float32.
A layer over sparse (CSR) inputs runs in float32 (`BlockGNN.layer`): torch's sparse
products have no bf16 kernel.
It pays where the hardware multiplies bf16 natively (GPUs since Ampere, CPUs with
AVX512-BF16 or AMX); elsewhere torch emulates it and a large product takes several times
longer in bf16 (BENCHMARKS.md, "`train.precision: bf16`"), so a run there says so
in one line and goes on as asked.
"""
from __future__ import annotations

import torch

PRECISIONS = ("fp32", "bf16")


def forward_in(precision: str, device: torch.device, steps):
    """`steps` (a mode's train_batches: each item's forward runs when it is drawn), each
    drawn under `precision`'s autocast on `device`; what the loop does between items
    (backward, optimizer) runs outside it, as torch advises for autocast."""
    if precision == "fp32":
        yield from steps
        return
    while True:
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            item = next(steps, None)
        if item is None:
            return
        yield item


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bf16 in hardware (CUDA: compute capability >= 8.0; CPU:
    AVX512-BF16 or AMX, read from /proc/cpuinfo)."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 8
    try:
        with open("/proc/cpuinfo") as info:
            flags = next((line for line in info if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
