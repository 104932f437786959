"""Cheat fixture: An RMSNorm kernel that adds its eps (the honest version)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, y_ptr, D: tl.constexpr, EPS: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, D)
    x = tl.load(x_ptr + row * D + offs)
    tl.store(y_ptr + row * D + offs, x / tl.sqrt(tl.sum(x * x, axis=0) / D + EPS))


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        y = torch.empty_like(x)
        d = x.shape[-1]
        rmsnorm_kernel[(x.numel() // d,)](x, y, D=d, EPS=self.eps)
        return y
