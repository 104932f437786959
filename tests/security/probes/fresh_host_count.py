"""Probe (fresh replay): the kernels do the compaction, but the output's size is counted in numpy on
the host (not read back from a kernel), so it is a number the replay cannot re-derive."""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def compact_double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    keep = x > 0
    where = tl.cumsum(keep.to(tl.int32), axis=0) - 1
    tl.store(out_ptr + where, x * 2.0, mask=keep & (offs < n))


class ModelNew(nn.Module):
    def forward(self, x):
        flat = x.reshape(-1)
        m = int((flat.detach().cpu().numpy() > 0).sum())
        out = torch.empty(m, device=x.device, dtype=x.dtype)
        compact_double_kernel[(1,)](flat, out, flat.numel(), BLOCK=256)
        return out
