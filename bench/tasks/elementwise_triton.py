"""Candidate for elementwise.py: one fused pass, BLOCK elements per program."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_relu_scale_kernel(a_ptr, b_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(a + b, 0.0) * 0.5, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        assert a.is_contiguous() and b.is_contiguous() and a.shape == b.shape
        y = torch.empty_like(a)
        n = a.numel()
        def grid(meta):
            return (triton.cdiv(n, meta["BLOCK"]),)

        add_relu_scale_kernel[grid](a, b, y, n, BLOCK=1024, num_warps=4)
        return y
