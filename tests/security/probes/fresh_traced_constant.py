"""Probe (fresh replay, traced host reads): forward reads a kernel's result back (`.item()`) so
that its scale is a traced number, then folds into it the answer it computed in numpy: the scale
is `m * 0 + 1 / numpy_max`. The expression the record carries keeps the numpy number as the
trial's constant, which is wrong on fresh inputs."""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def absmax_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.max(tl.abs(x), axis=0))


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * scale, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        n = x.numel()
        peak = torch.empty(1, device=x.device, dtype=torch.float32)
        absmax_kernel[(1,)](x, peak, n, BLOCK=256)
        m = peak.item()
        host = float(np.abs(x.detach().cpu().numpy()).max())
        scale = m * 0.0 + 1.0 / host
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(n, 64),)](x, y, n, scale, BLOCK=64)
        return y
