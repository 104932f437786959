"""Cheat fixture: a LayerNorm kernel that applies its weight and bias (the honest version)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, D: tl.constexpr, AFFINE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, D)
    x = tl.load(x_ptr + row * D + offs)
    mean = tl.sum(x, axis=0) / D
    xc = x - mean
    var = tl.sum(xc * xc, axis=0) / D
    y = xc / tl.sqrt(var + 1e-5)
    if AFFINE:
        y = y * tl.load(w_ptr + offs) + tl.load(b_ptr + offs)
    tl.store(y_ptr + row * D + offs, y)


class ModelNew(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        y = torch.empty_like(x)
        d = x.shape[-1]
        layernorm_kernel[(x.numel() // d,)](x, self.norm.weight, self.norm.bias, y, D=d, AFFINE=True)
        return y
