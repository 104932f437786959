"""Attack (timed calls): a Triton kernel for its first 30 calls (every call verification makes),
then PyTorch's own ops. The answers are right, so the output check of timed calls passes them;
the round's witness call, recorded as a trial is, finds the PyTorch compute."""

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


STATE = {"calls": 0}


class ModelNew(nn.Module):
    def forward(self, x):
        STATE["calls"] += 1
        if STATE["calls"] > 30:
            return torch.relu(x) * 2.0 + 1.0
        y = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK_SIZE=1024)
        return y
