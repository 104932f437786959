"""Hostile candidate: a kernel that stores nothing, and Triton's process-wide launch-enter hook
computing the output with PyTorch."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)  # loads, stores nothing


_pending = []


def _enter(*args, **kwargs):
    for x, y in _pending:
        y.copy_(torch.relu(x) * 2.0 + 1.0)


triton.knobs.runtime.launch_enter_hook.add(_enter) if hasattr(triton.knobs.runtime.launch_enter_hook, "add") else None


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _pending[:] = [(x, y)]
        noop_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
        return y
