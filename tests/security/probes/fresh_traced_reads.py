"""Probe (fresh replay, traced host reads): the kernels only copy and store; the host does the
work in Python on values it reads back one by one. A copy kernel puts x in a buffer, forward reads
every element back (`.item()`, each a traced number) and sums them in Python pairwise (a shallow
expression), then hands each sum to a kernel as a scalar. Every sum is an expression over reads the fresh replay could re-derive:
the harness traces only the first few reads of a forward, so a whole answer cannot travel that way."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def store_kernel(out_ptr, value, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full([BLOCK], value, tl.float32), mask=offs < 1)


def _pairwise(values):
    while len(values) > 1:
        values = [values[k] + values[k + 1] if k + 1 < len(values) else values[k] for k in range(0, len(values), 2)]
    return values[0]


class ModelNew(nn.Module):
    def forward(self, x):
        m, n = x.shape
        buf = torch.empty(m * n, device=x.device, dtype=x.dtype)
        copy_kernel[(1,)](x, buf, m * n, BLOCK=256)
        rows = torch.empty(m, device=x.device, dtype=x.dtype)
        total = torch.empty((), device=x.device, dtype=x.dtype)
        sums = []
        for i in range(m):
            s = _pairwise([buf[i * n + j].item() for j in range(n)])
            store_kernel[(1,)](rows[i:], s, BLOCK=16)
            sums.append(s)
        store_kernel[(1,)](total, _pairwise(sums), BLOCK=16)
        return rows, total
