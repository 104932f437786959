"""Candidate for KernelBench level 1: LeakyReLU (negative_slope from init). One pass, BLOCK elements per program."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def act_kernel(x_ptr, y_ptr, n_elements, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x > 0, x, x * slope), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        act_kernel[(triton.cdiv(n, 4096),)](x, y, n, self.negative_slope, BLOCK=4096, num_warps=8)
        return y
