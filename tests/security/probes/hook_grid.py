"""Hostile candidate: a kernel that stores nothing, and a grid callable that computes the output
with PyTorch (on every call: the harness may call it more than once)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)  # loads, stores nothing


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)

        def grid(meta):
            y.copy_(torch.relu(x) * 2.0 + 1.0)
            return (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)

        noop_kernel[grid](x, y, x.numel(), BLOCK_SIZE=512)
        return y
