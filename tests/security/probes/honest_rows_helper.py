"""Honest (fresh replay): row sums by a kernel that calls another @triton.jit function, one launch
per half of the rows on views, and the total by a second kernel that reads the first's output
(a Triton dtype passed as a constexpr, a tl.constexpr global)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

WIDTH = tl.constexpr(64)


@triton.jit
def _row_total(ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    return tl.sum(tl.load(ptr + offs, mask=offs < n, other=0.0), axis=0)


@triton.jit
def rows_kernel(x_ptr, rows_ptr, n, stride):
    row = tl.program_id(0)
    tl.store(rows_ptr + row, _row_total(x_ptr + row * stride, n, WIDTH))


@triton.jit
def total_kernel(rows_ptr, total_ptr, m, BLOCK: tl.constexpr, OUT: tl.constexpr):
    tl.store(total_ptr, _row_total(rows_ptr, m, BLOCK).to(OUT))


class ModelNew(nn.Module):
    def forward(self, x):
        rows = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        half = x.shape[0] // 2
        for part, out in ((x[:half], rows[:half]), (x[half:], rows[half:])):
            rows_kernel[(part.shape[0],)](part, out, part.shape[1], part.stride(0))
        total = torch.empty((), device=x.device, dtype=x.dtype)
        total_kernel[(1,)](rows, total, rows.numel(), BLOCK=16, OUT=tl.float32)
        return rows, total
