"""Cross-entropy with integer targets, mean reduction, fp32: mean_i(logsumexp(x_i) - x_i[t_i]).

Kernel 1, one program per row: the row's logsumexp, from one load when the row fits in BLOCK
(KernelBench's 4096 classes), else by the online max-and-rescaled-sum over BLOCK chunks; minus
the target's logit (one scalar load); the row's loss goes to a buffer. Kernel 2, one program:
the sum of the row losses in fp32 lanes, divided by the batch. Bytes 4*B*C once (+ 12*B).

Conditions: float logits (B, C), contiguous rows; int targets (B,) in [0, C) (no
ignore_index, no label smoothing, no class weights); reduction 'mean'.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 8192


@triton.jit
def row_loss_kernel(x_ptr, t_ptr, loss_ptr, C, ONE_LOAD: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * C
    offs = tl.arange(0, BLOCK)
    if ONE_LOAD:
        x = tl.load(x_row + offs, mask=offs < C, other=float("-inf")).to(tl.float32)
        m = tl.max(x, axis=0)
        lse = m + tl.log(tl.sum(tl.exp(x - m), axis=0))
    else:
        m_vec = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
        s_vec = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, C, BLOCK):
            cols = start + offs
            x = tl.load(x_row + cols, mask=cols < C, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m_vec, x)
            alpha = tl.where(m_new == float("-inf"), 1.0, tl.exp(m_vec - m_new))
            s_vec = s_vec * alpha + tl.where(m_new == float("-inf"), 0.0, tl.exp(x - m_new))
            m_vec = m_new
        m = tl.max(m_vec, axis=0)
        lse = m + tl.log(tl.sum(s_vec * tl.exp(m_vec - m), axis=0))
    target = tl.load(t_ptr + row)
    picked = tl.load(x_row + target).to(tl.float32)
    tl.store(loss_ptr + row, lse - picked)


@triton.jit
def mean_kernel(v_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        acc += tl.load(v_ptr + start + offs, mask=start + offs < N, other=0.0)
    tl.store(out_ptr, (tl.sum(acc, axis=0) / N).to(out_ptr.dtype.element_ty))


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """nn.functional.cross_entropy(logits, targets) for logits (B, C) and class indices (B,)."""
    if logits.dim() != 2 or targets.dim() != 1 or targets.shape[0] != logits.shape[0]:
        raise ValueError(f"cross_entropy needs logits (B, C) and targets (B,), got {tuple(logits.shape)}, {tuple(targets.shape)}")
    if not logits.is_floating_point() or targets.is_floating_point():
        raise TypeError(f"logits must be float and targets class indices, got {logits.dtype}, {targets.dtype}")
    x = logits.contiguous()
    B, C = x.shape
    losses = torch.empty(B, device=x.device, dtype=torch.float32)
    out = torch.empty((), device=x.device, dtype=x.dtype)
    one_load = C <= BLOCK
    block = triton.next_power_of_2(C) if one_load else BLOCK
    row_loss_kernel[(B,)](x, targets, losses, C, ONE_LOAD=one_load, BLOCK=block, num_warps=min(16, max(4, block // 512)))
    mean_kernel[(1,)](losses, out, B, BLOCK=1024, num_warps=4)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return cross_entropy(predictions, targets)
