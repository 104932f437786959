"""Honest (timed calls): forward writes every answer into one output buffer it keeps and returns
it. Inside a CUDA graph every call's output is then the same memory, so the audit checks the
graph's last call, whose answer that buffer holds; the profile must pass."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_affine_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x):
        if self.out is None or self.out.shape != x.shape or self.out.device != x.device:
            self.out = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 512),)](x, self.out, n, BLOCK_SIZE=512)
        return self.out
