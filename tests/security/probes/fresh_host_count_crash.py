"""Probe (fresh replay): as `fresh_host_count.py`, the output's size counted in numpy on the host,
and the kernel writes 2**40 elements away wherever its own count differs from that number: the
trial's inputs never do, fresh inputs do, so re-running the record crashes the reference worker.
A crash there is the fresh replay's verdict, not an accident of the harness."""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def compact_double_kernel(x_ptr, out_ptr, n, m, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    keep = x > 0
    where = tl.cumsum(keep.to(tl.int32), axis=0) - 1
    away = (tl.sum(keep.to(tl.int64), axis=0) - m) * (1 << 40)
    tl.store(out_ptr + away + where, x * 2.0, mask=keep & (offs < n))


class ModelNew(nn.Module):
    def forward(self, x):
        flat = x.reshape(-1)
        m = int(np.count_nonzero(flat.detach().cpu().numpy() > 0))
        out = torch.empty(m, device=x.device, dtype=x.dtype)
        compact_double_kernel[(1,)](flat, out, flat.numel(), m, BLOCK=256)
        return out
