"""A training step that cannot fit in memory is refused before it runs.

Without this check a huge `model.hidden` (10^6 on the quick start) allocated lazily, ran
the machine out of memory and was killed by the kernel (exit 137, no message), taking
whatever else ran there with it. The bound is a lower one: the parameters with their
gradient and Adam's two moments (16 bytes each) plus the float32 outputs (and, where the
caller counts them, per-edge messages) of every layer for the rows the step computes; a
step needs more than that (backward, optimizer temporaries), so a run refused here could
never have fit, and no run that fits is refused.
"""
from __future__ import annotations

import torch

from common.memory import available_memory_bytes as available_memory

from .errors import ConfigError


def check_step_fits(model: torch.nn.Module, output_elements: int, what: str, fix: str,
                    have: int | None = None) -> None:
    """Raise ConfigError when the step's lower bound exceeds the free memory; `what`
    describes `output_elements` (the layers' outputs; "" counts none), `fix` the settings
    to lower. `model` may be `shapes_only`'s: only its parameters' shapes are read."""
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    need = 16 * params + 4 * output_elements
    have = available_memory() if have is None else have
    if need > have:
        counted = f"{what}, and " if what else ""
        raise ConfigError(f"one training step needs at least {_size(need)} ({counted}"
                          f"{params:,} parameters with their gradients and Adam state) but "
                          f"{_size(have)} are free; lower {fix}")


def shapes_only(build) -> torch.nn.Module:
    """The module `build()` makes, its parameters on torch's meta device (shapes, no
    memory): a model too large to allocate is measured, and refused, before it is built
    (a `model.hidden` of 10^12 otherwise fails inside torch's allocator)."""
    with torch.device("meta"):
        return build()


def _size(n: int) -> str:
    return f"{n / 2 ** 30:.1f} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:.1f} MiB"
