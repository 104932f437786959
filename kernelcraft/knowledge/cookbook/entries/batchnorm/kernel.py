"""BatchNorm over (N, *spatial) per channel, fp32 statistics: training mode (batch statistics,
running statistics updated) or eval mode (running statistics).

A channel's elements are N planes of S contiguous elements, one per sample, C*S apart. Batch
statistics take three kernels:
  1. per (plane, chunk): the chunk's mean and M2 from registers (every SM busy, loads coalesced);
  2. per channel: Chan's combination over its N * chunks pieces into the mean and 1/std, and, when
     running statistics are kept, running = (1 - momentum) * running + momentum * batch (the
     variance unbiased, as PyTorch does) and num_batches_tracked + 1;
  3. per (plane, chunk): y = (x - mean[c]) * rstd[c] * weight[c] + bias[c].
12 bytes an element. In eval mode only kernel 3 runs, reading the running statistics: 8 bytes.

Conditions: float input (N, C, ...); affine or not; momentum a number (not None: the cumulative
average is not implemented); a non-contiguous input is made contiguous first.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNK = 16384  # 16384 ran 3.12 ms, 8192 3.20 (KernelBench 33, H200)


@triton.jit
def chunk_stats_kernel(x_ptr, mean_ptr, m2_ptr, S, NUM_CHUNKS, CHUNK: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = offs < S
    x = tl.load(x_ptr + plane * S + offs, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(S - chunk * CHUNK, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    d = tl.where(mask, x - mean, 0.0)
    tl.store(mean_ptr + plane * NUM_CHUNKS + chunk, mean)
    tl.store(m2_ptr + plane * NUM_CHUNKS + chunk, tl.sum(d * d, axis=0))


@triton.jit
def combine_kernel(
    mean_ptr, m2_ptr, stats_ptr, run_mean_ptr, run_var_ptr, tracked_ptr,
    N, C, S, NUM_CHUNKS, eps, momentum,
    UPDATE_RUNNING: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
):
    c = tl.program_id(0)
    total = N * NUM_CHUNKS  # pieces of this channel: (n, chunk), n-major
    count_all = N.to(tl.float32) * S
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j0 in range(0, total, BLOCK):
        j = j0 + offs
        mask = j < total
        n = j // NUM_CHUNKS
        chunk = j % NUM_CHUNKS
        idx = (n.to(tl.int64) * C + c) * NUM_CHUNKS + chunk
        counts = tl.where(mask, tl.minimum(S - chunk * CHUNK, CHUNK), 0).to(tl.float32)
        acc += counts * tl.load(mean_ptr + idx, mask=mask, other=0.0)
    mean = tl.sum(acc, axis=0) / count_all
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j0 in range(0, total, BLOCK):
        j = j0 + offs
        mask = j < total
        n = j // NUM_CHUNKS
        chunk = j % NUM_CHUNKS
        idx = (n.to(tl.int64) * C + c) * NUM_CHUNKS + chunk
        counts = tl.where(mask, tl.minimum(S - chunk * CHUNK, CHUNK), 0).to(tl.float32)
        dm = tl.load(mean_ptr + idx, mask=mask, other=0.0) - mean
        acc += tl.load(m2_ptr + idx, mask=mask, other=0.0) + counts * dm * dm
    m2 = tl.sum(acc, axis=0)
    var = m2 / count_all
    tl.store(stats_ptr + c * 2, mean)
    tl.store(stats_ptr + c * 2 + 1, 1.0 / tl.sqrt(var + eps))
    if UPDATE_RUNNING:
        unbiased = m2 / tl.maximum(count_all - 1.0, 1.0)
        rm = tl.load(run_mean_ptr + c)
        rv = tl.load(run_var_ptr + c)
        tl.store(run_mean_ptr + c, (1.0 - momentum) * rm + momentum * mean)
        tl.store(run_var_ptr + c, (1.0 - momentum) * rv + momentum * unbiased)
        if c == 0:
            tl.store(tracked_ptr, tl.load(tracked_ptr) + 1)


@triton.jit
def normalize_kernel(
    x_ptr, w_ptr, b_ptr, stats_ptr, run_mean_ptr, run_var_ptr, y_ptr, C, S, eps,
    HAS_AFFINE: tl.constexpr, USE_RUNNING: tl.constexpr, CHUNK: tl.constexpr,
):
    plane = tl.program_id(0).to(tl.int64)
    c = plane % C
    offs = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < S
    if USE_RUNNING:
        mean = tl.load(run_mean_ptr + c).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.load(run_var_ptr + c).to(tl.float32) + eps)
    else:
        mean = tl.load(stats_ptr + c * 2)
        rstd = tl.load(stats_ptr + c * 2 + 1)
    scale = rstd
    shift = -mean * rstd
    if HAS_AFFINE:
        w = tl.load(w_ptr + c).to(tl.float32)
        scale = rstd * w
        shift = shift * w + tl.load(b_ptr + c).to(tl.float32)
    x = tl.load(x_ptr + plane * S + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + plane * S + offs, (x * scale + shift).to(y_ptr.dtype.element_ty), mask=mask)


def batch_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    *,
    training: bool = True,
    running_mean: torch.Tensor | None = None,
    running_var: torch.Tensor | None = None,
    num_batches_tracked: torch.Tensor | None = None,
    momentum: float = 0.1,
) -> torch.Tensor:
    """nn.functional.batch_norm: batch statistics when `training` (updating the running ones if
    given), else the running statistics."""
    if x.dim() < 2 or not x.is_floating_point():
        raise ValueError(f"batch_norm takes a float tensor (N, C, ...), got {x.dtype} {tuple(x.shape)}")
    if not training and (running_mean is None or running_var is None):
        raise ValueError("eval mode needs running_mean and running_var (or pass training=True)")
    x = x.contiguous()
    N, C = x.shape[0], x.shape[1]
    S = x.numel() // (N * C)
    y = torch.empty_like(x)
    affine = weight is not None and bias is not None
    num_chunks = triton.cdiv(S, CHUNK)
    stats = torch.empty((C, 2), device=x.device, dtype=torch.float32)
    rm = running_mean if running_mean is not None else stats
    rv = running_var if running_var is not None else stats
    if training:
        update = running_mean is not None and running_var is not None
        tracked = num_batches_tracked if (update and num_batches_tracked is not None) else torch.zeros(1, device=x.device, dtype=torch.int64)
        means = torch.empty((N * C, num_chunks), device=x.device, dtype=torch.float32)
        m2s = torch.empty_like(means)
        chunk_stats_kernel[(N * C, num_chunks)](x, means, m2s, S, num_chunks, CHUNK=CHUNK, num_warps=8)
        combine_kernel[(C,)](
            means, m2s, stats, rm, rv, tracked, N, C, S, num_chunks, eps, float(momentum),
            UPDATE_RUNNING=update, CHUNK=CHUNK, BLOCK=1024, num_warps=4,
        )
    normalize_kernel[(N * C, num_chunks)](
        x, weight if affine else x, bias if affine else x, stats, rm, rv, y, C, S, eps,
        HAS_AFFINE=affine, USE_RUNNING=not training, CHUNK=CHUNK, num_warps=8,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return batch_norm(x, self.bn.weight, self.bn.bias, self.bn.eps, training=True)
