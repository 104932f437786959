"""Candidate for task_fp64.py; PRECISION picks float64 (honest) or float32 (a downgrade the
float32 tolerance would let through)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

PRECISION = "float64"  # replaced by the test


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, (x + 1000.0) - 1000.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        dtype = {"float64": torch.float64, "float32": torch.float32}[PRECISION]
        xs = x.to(dtype)
        y = torch.empty_like(xs)
        affine_kernel[(triton.cdiv(xs.numel(), 256),)](xs, y, xs.numel(), BLOCK=256)
        return y.to(x.dtype)
