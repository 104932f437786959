"""The mean of an elementwise loss, fp32: MSE, L1, smooth L1 (Huber, beta = 1), hinge.

Two kernels, deterministic: GRID programs each sum the loss over a grid-strided run of BLOCK
chunks (fp32 lanes, one tree at the end) into one partial each; one program sums the GRID
partials and divides by the element count. No atomics, so the result is the same run to run,
and each fp32 partial adds at most n / (GRID * BLOCK) terms per lane: accurate at 10^9 elements
(KernelBench's 94: two 4 GiB inputs, ~2 ms at 4.3 TB/s).

Targets may broadcast against the predictions (hinge's labels, one per column): they are read
through the strides of `targets.expand_as(predictions)`, a view, never copied.
Conditions: float inputs, predictions contiguous; reduction 'mean' over all elements.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

LOSSES = ("mse", "l1", "smooth_l1", "hinge")
GRID = 2048
BLOCK = 4096


@triton.jit
def loss_partials_kernel(
    p_ptr, t_ptr, partial_ptr, n, COLS, stride_tr, stride_tc,
    LOSS: tl.constexpr, BROADCAST: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    for start in range(pid.to(tl.int64) * BLOCK, n, step):
        idx = start + offs
        mask = idx < n
        p = tl.load(p_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        if BROADCAST:
            t_off = (idx // COLS) * stride_tr + (idx % COLS) * stride_tc
        else:
            t_off = idx
        t = tl.load(t_ptr + t_off, mask=mask, other=0.0).to(tl.float32)
        if LOSS == "mse":
            d = p - t
            v = d * d
        elif LOSS == "l1":
            v = tl.abs(p - t)
        elif LOSS == "smooth_l1":
            d = tl.abs(p - t)
            v = tl.where(d < 1.0, 0.5 * d * d, d - 0.5)
        else:  # hinge: clamp(1 - p * t, min=0)
            v = tl.maximum(1.0 - p * t, 0.0)
        acc += tl.where(mask, v, 0.0)
    tl.store(partial_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def finish_mean_kernel(partial_ptr, out_ptr, NUM, inv_n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    parts = tl.load(partial_ptr + offs, mask=offs < NUM, other=0.0)
    tl.store(out_ptr, (tl.sum(parts, axis=0) * inv_n).to(out_ptr.dtype.element_ty))


def mean_loss(predictions: torch.Tensor, targets: torch.Tensor, loss: str = "mse") -> torch.Tensor:
    """mean(loss(predictions, targets)) as a 0-dim tensor, targets broadcast to predictions."""
    if loss not in LOSSES:
        raise ValueError(f"loss {loss!r}: use one of {', '.join(LOSSES)}")
    if not predictions.is_floating_point() or not targets.is_floating_point():
        raise TypeError(f"losses take floating-point tensors, got {predictions.dtype} and {targets.dtype}")
    p = predictions.contiguous()
    t = targets.expand_as(p)  # a view: broadcast targets are read with stride 0
    cols = p.shape[-1] if p.dim() else 1
    if t.dim() > 2 or (t.stride() != p.stride() and t.dim() < 2):
        t = t.contiguous()
    broadcast = t.stride() != p.stride()
    stride_tr = t.stride(-2) if t.dim() >= 2 else 0
    stride_tc = t.stride(-1) if t.dim() >= 1 else 0
    n = p.numel()
    grid = min(GRID, max(1, triton.cdiv(n, BLOCK)))
    partials = torch.empty(grid, device=p.device, dtype=torch.float32)
    out = torch.empty((), device=p.device, dtype=p.dtype)
    loss_partials_kernel[(grid,)](
        p, t, partials, n, cols, stride_tr, stride_tc, LOSS=loss, BROADCAST=broadcast, BLOCK=BLOCK, num_warps=8
    )
    finish_mean_kernel[(1,)](partials, out, grid, 1.0 / n, BLOCK=triton.next_power_of_2(grid), num_warps=4)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return mean_loss(predictions, targets, "mse")
