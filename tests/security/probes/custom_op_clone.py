"""Hostile candidate: a torch.library custom op named like an allowed op (clone) that computes
the output with PyTorch, next to a kernel that stores nothing."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)  # loads, stores nothing


@torch.library.custom_op("kcprobe::clone", mutates_args=())
def clone(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 2.0 + 1.0


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        noop_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
        return clone(x)
