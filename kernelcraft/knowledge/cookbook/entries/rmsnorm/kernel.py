"""RMSNorm across channels: y = x / sqrt(mean(x^2 over dim 1) + eps) for x (B, C, *spatial).

The reduced dimension is strided (by the spatial size S), so a program takes a BLOCK_C x BLOCK_S
tile: all channels of BLOCK_S adjacent positions, loads coalesced along S. With C <= MAX_C
channels (KernelBench's 64) the tile holds every channel: x is read once and y written once,
8 bytes an element, the minimum. More channels: the program walks them twice (sum of squares,
then scale), 12 bytes an element.

Conditions: float input, at least 2-D, reduction over dim 1; an optional per-channel weight
(RMSNorm's learnt scale) is applied when given; a non-contiguous input is made contiguous first.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_C = 128


@triton.jit
def rmsnorm_channels_kernel(
    x_ptr, w_ptr, y_ptr, C, S, eps,
    HAS_WEIGHT: tl.constexpr, ONE_PASS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr,
):
    batch = tl.program_id(0).to(tl.int64)
    offs_s = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    offs_c = tl.arange(0, BLOCK_C)
    s_mask = offs_s < S
    base = batch * C * S
    if ONE_PASS:
        mask = (offs_c[:, None] < C) & s_mask[None, :]
        ptrs = base + offs_c[:, None].to(tl.int64) * S + offs_s[None, :]
        x = tl.load(x_ptr + ptrs, mask=mask, other=0.0).to(tl.float32)
        rrms = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / C + eps)
        y = x * rrms[None, :]
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + offs_c, mask=offs_c < C, other=0.0)[:, None]
        tl.store(y_ptr + ptrs, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((BLOCK_C, BLOCK_S), dtype=tl.float32)
        for c0 in range(0, C, BLOCK_C):
            cs = c0 + offs_c
            mask = (cs[:, None] < C) & s_mask[None, :]
            x = tl.load(x_ptr + base + cs[:, None].to(tl.int64) * S + offs_s[None, :], mask=mask, other=0.0)
            x = x.to(tl.float32)
            acc += x * x
        rrms = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / C + eps)
        for c0 in range(0, C, BLOCK_C):
            cs = c0 + offs_c
            mask = (cs[:, None] < C) & s_mask[None, :]
            ptrs = base + cs[:, None].to(tl.int64) * S + offs_s[None, :]
            y = tl.load(x_ptr + ptrs, mask=mask, other=0.0).to(tl.float32) * rrms[None, :]
            if HAS_WEIGHT:
                y = y * tl.load(w_ptr + cs, mask=cs < C, other=0.0)[:, None]
            tl.store(y_ptr + ptrs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm_channels(x: torch.Tensor, eps: float, weight: torch.Tensor | None = None) -> torch.Tensor:
    """x / sqrt(mean(x**2, dim=1, keepdim=True) + eps), times weight (C,) if given."""
    if x.dim() < 2 or not x.is_floating_point():
        raise ValueError(f"rms_norm_channels takes a float tensor (B, C, ...), got {x.dtype} {tuple(x.shape)}")
    x = x.contiguous()
    B, C = x.shape[0], x.shape[1]
    S = x.numel() // (B * C) if B * C else 0
    y = torch.empty_like(x)
    one_pass = C <= MAX_C
    block_c = triton.next_power_of_2(C) if one_pass else 32
    block_s = max(16, min(256, 8192 // block_c, triton.next_power_of_2(S)))
    grid = (B, triton.cdiv(S, block_s))
    rmsnorm_channels_kernel[grid](
        x, weight if weight is not None else x, y, C, S, eps,
        HAS_WEIGHT=weight is not None, ONE_PASS=one_pass, BLOCK_C=block_c, BLOCK_S=block_s, num_warps=8,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm_channels(x, self.eps)
