"""Row mean seed: one program per row, fp32 accumulation over BLOCK_N chunks."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_mean_kernel(x_ptr, y_ptr, stride_xm, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask = offs_n < n_cols
        acc += tl.load(x_ptr + row * stride_xm + offs_n, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0) / n_cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.dim() == 2 and x.stride(1) == 1
        n_rows, n_cols = x.shape
        y = torch.empty(n_rows, device=x.device, dtype=x.dtype)
        row_mean_kernel[(n_rows,)](x, y, x.stride(0), n_cols, BLOCK_N=512, num_warps=4)
        return y
