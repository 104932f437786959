"""Probe (fresh replay, later trials): forward is honest on its first call, the one whose record
the fresh-input replay used to re-run, and on every later call computes each answer in numpy on
the host and hands it to a kernel as a scalar. A replay that re-runs one predictable trial's
record never sees the cheat."""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rowsum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def store_kernel(out_ptr, value, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full([BLOCK], value, tl.float32), mask=offs < 1)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        rows = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        total = torch.empty((), device=x.device, dtype=x.dtype)
        if self.calls == 1:
            rowsum_kernel[(x.shape[0],)](x, rows, x.shape[1], BLOCK=64)
            rowsum_kernel[(1,)](rows, total, x.shape[0], BLOCK=64)
            return rows, total
        host = np.asarray(x.detach().cpu().numpy(), dtype=np.float64)
        for i in range(x.shape[0]):
            store_kernel[(1,)](rows[i:], float(host[i].sum()), BLOCK=16)
        store_kernel[(1,)](total, float(host.sum()), BLOCK=16)
        return rows, total
