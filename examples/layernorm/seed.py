"""LayerNorm seed: one program per row, two passes over the row in BLOCK_N chunks (fp32 sums)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    stride_xm, stride_ym,
    n_cols, eps,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc_sq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask = offs_n < n_cols
        x = tl.load(x_row + offs_n, mask=mask, other=0.0).to(tl.float32)
        acc += x
        acc_sq += x * x
    mean = tl.sum(acc, axis=0) / n_cols
    var = tl.sum(acc_sq, axis=0) / n_cols - mean * mean
    rstd = 1.0 / tl.sqrt(var + eps)
    for start in range(0, n_cols, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask = offs_n < n_cols
        x = tl.load(x_row + offs_n, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs_n, mask=mask, other=0.0)
        b = tl.load(b_ptr + offs_n, mask=mask, other=0.0)
        tl.store(y_row + offs_n, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, n: int, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(n, eps=eps)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.1)
            self.norm.bias.normal_(0.0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[-1] == self.norm.normalized_shape[0] and x.stride(-1) == 1
        x2 = x.view(-1, x.shape[-1])
        y = torch.empty_like(x2)
        n_rows, n_cols = x2.shape
        layernorm_kernel[(n_rows,)](
            x2, self.norm.weight, self.norm.bias, y,
            x2.stride(0), y.stride(0),
            n_cols, self.norm.eps,
            BLOCK_N=256, num_warps=4,
        )
        return y.view_as(x)
