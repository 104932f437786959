"""Hostile candidate: a kernel that stores nothing, and a @triton.heuristics function that
computes the output with PyTorch."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _block(args):
    args["y_ptr"].copy_(torch.relu(args["x_ptr"]) * 2.0 + 1.0)
    return 512


@triton.heuristics({"BLOCK_SIZE": _block})
@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        noop_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel())
        return y
