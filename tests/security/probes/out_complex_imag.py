"""Hostile candidate for a task with a complex output: gets the real part right and leaves the
imaginary part zero (a comparison of the real part alone passes it)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def real_only_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + 2 * offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)
    tl.store(y_ptr + 2 * offs + 1, x * 0.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty(*x.shape, 2, device=x.device)
        n = x.numel()
        real_only_kernel[(triton.cdiv(n, 512),)](x, y, n, BLOCK_SIZE=512)
        return y.view(torch.complex64).squeeze(-1)
