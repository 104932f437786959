"""Candidate: calls plain Python (numpy) inside its @triton.jit body, which Triton's interpreter
runs and the GPU compiler refuses."""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n)
    two = float(np.sqrt(4.0))
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * two + 1.0, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        k[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
        return y
