"""Hostile candidate: a kernel that stores nothing, and a JIT pre-run hook that computes the
output with PyTorch before each launch."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)  # loads, stores nothing


_out = {}


def _hook(x_ptr, y_ptr, n_elements, *args, **kwargs):
    y_ptr.copy_(torch.relu(x_ptr) * 2.0 + 1.0)


noop_kernel.add_pre_run_hook(_hook)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        noop_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
        return y
