"""Honest (fresh replay): the output's size is read back from a kernel (`.item()`), then used for the
allocation, a scalar argument and a grid; the last kernel works in place on a view."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def count_kernel(x_ptr, count_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(count_ptr, tl.sum((x > 0).to(tl.int32), axis=0))


@triton.jit
def compact_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    keep = x > 0
    where = tl.cumsum(keep.to(tl.int32), axis=0) - 1
    tl.store(out_ptr + where, x, mask=keep & (offs < n))


@triton.jit
def double_kernel(y_ptr, m, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    y = tl.load(y_ptr + offs, mask=offs < m)
    tl.store(y_ptr + offs, y * 2.0, mask=offs < m)


class ModelNew(nn.Module):
    def forward(self, x):
        flat = x.reshape(-1)
        n = flat.numel()
        count = torch.empty(1, device=x.device, dtype=torch.int32)
        count_kernel[(1,)](flat, count, n, BLOCK=256)
        m = int(count.item())
        out = torch.empty(m, device=x.device, dtype=x.dtype)
        compact_kernel[(1,)](flat, out, n, BLOCK=256)
        double_kernel[(triton.cdiv(m, 8),)](out, m, BLOCK=8)
        return out
