"""Fresh parameter values for verify: the same in the reference `Model` and the candidate `ModelNew`.

KernelBench builds both models after seeding the RNG identically, so parameters created in the
same order start equal. That leaves a hole: a module's *initial* values can hide a wrong kernel.
`nn.LayerNorm` starts at weight 1 and bias 0, so a LayerNorm kernel that ignores both passes; an
RMSNorm scale of ones hides a missing multiply. So before the trials both workers overwrite every
floating-point parameter and buffer with values drawn from a secret seed the parent sends, the
i-th tensor of one model getting exactly what the i-th tensor of the other gets.

Values: parameters become `p * U(0.5, 1.5) + 0.1 * s * N(0, 1)` (s = mean |p|, or 1 when p is all
zeros), so a weight of ones is no longer ones and a bias of zeros no longer zeros, at the same
scale as before; buffers are only scaled by `U(0.5, 1.5)`, which keeps a running variance
positive and a zero buffer zero. Integer and boolean tensors (counters, indices) are left alone.

The two models are matched by order and shape. When they differ (the candidate fused or
reshaped its parameters), nothing is perturbed and the verdict's notes say so: the candidate is
then checked on the seeded initial values, as KernelBench checks it. A task opts out by
defining `KERNELCRAFT_PERTURB_PARAMETERS = False`.
"""

from __future__ import annotations

from typing import Any

import torch

OPT_OUT = "KERNELCRAFT_PERTURB_PARAMETERS"
# Mixed into the build seed, so that the fresh values are not the ones the build seed just drew.
SALT = 0x5EED_F0F0


def signature(model: torch.nn.Module) -> list[tuple[str, tuple[int, ...], str]]:
    """What must agree between the two models: kind, shape and dtype of each float tensor, in order."""
    return [(kind, tuple(t.shape), str(t.dtype)) for kind, t in _tensors(model)]


def _tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    out: list[tuple[str, torch.Tensor]] = [("parameter", p) for p in model.parameters()]
    out += [("buffer", b) for b in model.buffers()]
    return [(k, t) for k, t in out if t.is_floating_point()]


@torch.no_grad()
def perturb(model: torch.nn.Module, seed: int) -> int:
    """Overwrite the model's float parameters and buffers from `seed`; returns how many."""
    tensors = _tensors(model)
    for i, (kind, t) in enumerate(tensors):
        g = torch.Generator(device="cpu").manual_seed((seed + 7919 * i) % (2**63))
        scale = torch.empty(t.shape, dtype=torch.float32).uniform_(0.5, 1.5, generator=g)
        new = t.detach().float().cpu() * scale
        if kind == "parameter":
            mean_abs = float(t.detach().float().abs().mean()) if t.numel() else 0.0
            s = mean_abs if mean_abs > 0 else 1.0
            new = new + 0.1 * s * torch.randn(t.shape, generator=g)
        t.copy_(new.to(dtype=t.dtype, device=t.device))
    return len(tensors)


def task_allows(task_module: Any) -> bool:
    """False when the task defines `KERNELCRAFT_PERTURB_PARAMETERS = False`."""
    return bool(getattr(task_module, OPT_OUT, True))
