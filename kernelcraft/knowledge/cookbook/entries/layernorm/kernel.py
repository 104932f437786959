"""LayerNorm, fp32 statistics: y = (x - mean) / sqrt(var + eps) * weight + bias over the last
dims, any row length.

Short rows (N <= MAX_FUSED, the common case): one program per row loads the row once, computes
mean and variance from registers (two passes over registers, not memory) and writes y.

Long rows (KernelBench's 40_LayerNorm: 16 rows of 4M elements): one program per row would leave
the GPU idle, so the row is cut into CHUNK-element pieces and three kernels run:
  1. per (row, chunk): the chunk's mean and M2 = sum((x - chunk mean)^2), from registers;
  2. per row: Chan's parallel combination of the chunks into the row's mean and 1/std;
  3. per 2048 columns: normalise them in every row, so weight and bias are read once.
Reads x twice and writes y once: 12 bytes an element (+ 8 per column for weight and bias).

Conditions: float input (fp32 statistics); elementwise affine or none; normalized over the
trailing dims; a non-contiguous input is made contiguous first.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FUSED = 16384
CHUNK = 8192
COLUMNS = 2048  # columns per program of the normalising pass: N / 2048 programs keep every SM busy


@triton.jit
def layernorm_row_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, N, eps,
    HAS_AFFINE: tl.constexpr, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    y = d * rstd
    if HAS_AFFINE:
        y = y * tl.load(w_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask)
    tl.store(y_ptr + row * N + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def chunk_stats_kernel(x_ptr, mean_ptr, m2_ptr, N, NUM_CHUNKS, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(N - chunk * CHUNK, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    d = tl.where(mask, x - mean, 0.0)
    tl.store(mean_ptr + row * NUM_CHUNKS + chunk, mean)
    tl.store(m2_ptr + row * NUM_CHUNKS + chunk, tl.sum(d * d, axis=0))


@triton.jit
def combine_kernel(mean_ptr, m2_ptr, stats_ptr, N, NUM_CHUNKS, eps, CHUNK: tl.constexpr, BLOCK_C: tl.constexpr):
    # Chan et al.: M2 = sum(M2_i) + sum(n_i * (mean_i - mean)^2), mean = sum(n_i * mean_i) / N
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_C)
    mask = offs < NUM_CHUNKS
    means = tl.load(mean_ptr + row * NUM_CHUNKS + offs, mask=mask, other=0.0)
    m2s = tl.load(m2_ptr + row * NUM_CHUNKS + offs, mask=mask, other=0.0)
    counts = tl.where(mask, tl.minimum(N - offs * CHUNK, CHUNK), 0).to(tl.float32)
    mean = tl.sum(counts * means, axis=0) / N
    dm = means - mean
    var = (tl.sum(m2s, axis=0) + tl.sum(counts * dm * dm, axis=0)) / N
    tl.store(stats_ptr + row * 2, mean)
    tl.store(stats_ptr + row * 2 + 1, 1.0 / tl.sqrt(var + eps))


@triton.jit
def normalize_columns_kernel(
    x_ptr, w_ptr, b_ptr, stats_ptr, y_ptr, ROWS, N,
    HAS_AFFINE: tl.constexpr, CHUNK: tl.constexpr,
):
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < N
    if HAS_AFFINE:
        w = tl.load(w_ptr + offs, mask=mask)  # once for all rows
        b = tl.load(b_ptr + offs, mask=mask)
    x_row = x_ptr  # 64-bit pointers step one row at a time: no int32 overflow past 2^31 elements
    y_row = y_ptr
    for row in range(0, ROWS):
        mean = tl.load(stats_ptr + row * 2)
        rstd = tl.load(stats_ptr + row * 2 + 1)
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd
        if HAS_AFFINE:
            y = y * w + b
        tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
        x_row += N
        y_row += N


def layer_norm(
    x: torch.Tensor, normalized_ndim: int, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """LayerNorm of x over its last `normalized_ndim` dims; weight and bias both or neither."""
    if not x.is_floating_point():
        raise TypeError(f"layer_norm takes a floating-point tensor, got {x.dtype}")
    if (weight is None) != (bias is None):
        raise ValueError("give both weight and bias, or neither (elementwise_affine=False)")
    x = x.contiguous()
    N = 1
    for s in x.shape[x.dim() - normalized_ndim :]:
        N *= s
    rows = x.numel() // N
    y = torch.empty_like(x)
    affine = weight is not None
    w = weight.contiguous() if weight is not None else x
    b = bias.contiguous() if bias is not None else x
    if N <= MAX_FUSED:
        block = triton.next_power_of_2(N)
        layernorm_row_kernel[(rows,)](
            x, w, b, y, N, eps, HAS_AFFINE=affine, BLOCK_N=block, num_warps=min(16, max(4, block // 1024))
        )
        return y
    num_chunks = triton.cdiv(N, CHUNK)
    means = torch.empty((rows, num_chunks), device=x.device, dtype=torch.float32)
    m2s = torch.empty_like(means)
    stats = torch.empty((rows, 2), device=x.device, dtype=torch.float32)
    chunk_stats_kernel[(rows, num_chunks)](x, means, m2s, N, num_chunks, CHUNK=CHUNK, num_warps=8)
    combine_kernel[(rows,)](
        means, m2s, stats, N, num_chunks, eps, CHUNK=CHUNK, BLOCK_C=triton.next_power_of_2(num_chunks)
    )
    normalize_columns_kernel[(triton.cdiv(N, COLUMNS),)](
        x, w, b, stats, y, rows, N, HAS_AFFINE=affine, CHUNK=COLUMNS, num_warps=4
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ln = self.ln
        return layer_norm(x, len(ln.normalized_shape), ln.weight, ln.bias, ln.eps)
