"""Hostile candidate: an autotuned kernel that stores nothing, and a Config pre_hook
computing the output with PyTorch."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _hook(nargs):
    nargs["y_ptr"].copy_(torch.relu(nargs["x_ptr"]) * 2.0 + 1.0)


@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 512}, pre_hook=_hook)], key=["n_elements"])
@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        noop_kernel[lambda m: (triton.cdiv(x.numel(), m["BLOCK_SIZE"]),)](x, y, x.numel())
        return y
