"""Depthwise Conv2d (groups = channels), fp32: each output plane from its own input plane.

There is no reduction over channels, so no GEMM: each program computes a BLOCK_H x BLOCK_W
output tile of one (n, c) plane as KH*KW shifted, masked loads of the input times one weight
each (the taps are unrolled: KH and KW are compile-time constants). Neighbouring taps hit L1, so
x is read from memory about once: bytes ~4*(x + y), memory-bound (2.1 GB for KernelBench's 82,
~0.5 ms at 4.3 TB/s).

With a vertical stride of 1 and KH up to 4 (KernelBench's 82: 3x3, stride 1) the tile kernel's
KH*KW loads an output make it instruction-bound. The rows kernel walks down a strip of BLOCK_W
output columns instead, reading each input row once as KW shifted loads; the row gives each of
the KH output rows it belongs to its partial sum (KH*KW FMAs), and the partial sums of the KH - 1
output rows still open are carried in registers: KW loads an output instead of KH*KW (the
`pool2d` entry's rows kernel, with weights).

Conditions: fp32 NCHW input (any strides); weight (C, 1, KH, KW) (channel multiplier 1); any
stride, zero padding and dilation; optional bias.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

ROWS = 64  # output rows a program of the rows kernel walks down


@triton.jit
def depthwise_conv2d_kernel(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    C, H, W, OH, OW,
    stride_xn, stride_xc, stride_xh, stride_xw,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr,
):
    plane = tl.program_id(0)
    n = (plane // C).to(tl.int64)
    c = plane % C
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_w = tl.program_id(2) * BLOCK_W + tl.arange(0, BLOCK_W)
    out_mask = (offs_h[:, None] < OH) & (offs_w[None, :] < OW)
    x_base = x_ptr + n * stride_xn + c.to(tl.int64) * stride_xc
    ih0 = offs_h * stride_h - pad_h
    iw0 = offs_w * stride_w - pad_w
    acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32)
    for kh in tl.static_range(KH):
        ih = ih0 + kh * dil_h
        h_ok = (ih >= 0) & (ih < H)
        for kw in tl.static_range(KW):
            iw = iw0 + kw * dil_w
            mask = out_mask & h_ok[:, None] & ((iw >= 0) & (iw < W))[None, :]
            x = tl.load(x_base + ih[:, None] * stride_xh + iw[None, :] * stride_xw, mask=mask, other=0.0)
            acc += x * tl.load(w_ptr + (c * KH + kh) * KW + kw)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + c)
    y_base = y_ptr + plane.to(tl.int64) * OH * OW
    tl.store(y_base + offs_h[:, None] * OW + offs_w[None, :], acc, mask=out_mask)


@triton.jit
def _row_part(x_base, w_ptr, c, ih, row_ok, iw0, W, stride_xh, stride_xw, dil_w,
              KH: tl.constexpr, KW: tl.constexpr, kh: tl.constexpr, BLOCK_W: tl.constexpr):
    """sum over kw of w[c, kh, kw] * x[ih, iw0 + kw * dil_w]: input row ih's share of the output
    row that sees it through weight row kh."""
    part = tl.zeros((BLOCK_W,), dtype=tl.float32)
    for kw in tl.static_range(KW):
        iw = iw0 + kw * dil_w
        mask = row_ok & (iw >= 0) & (iw < W)
        x = tl.load(x_base + ih.to(tl.int64) * stride_xh + iw * stride_xw, mask=mask, other=0.0)
        part += x * tl.load(w_ptr + (c * KH + kh) * KW + kw)
    return part


@triton.jit
def depthwise_conv2d_rows_kernel(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    C, H, W, OH, OW,
    stride_xn, stride_xc, stride_xh, stride_xw,
    stride_w, pad_h, pad_w, dil_w, ROWS,
    KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_W: tl.constexpr,
):
    plane = tl.program_id(0)
    n = (plane // C).to(tl.int64)
    c = plane % C
    offs_w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    oh0 = tl.program_id(2) * ROWS
    w_mask = offs_w < OW
    x_base = x_ptr + n * stride_xn + c.to(tl.int64) * stride_xc
    y_base = y_ptr + plane.to(tl.int64) * OH * OW
    iw0 = offs_w * stride_w - pad_w
    bias = tl.load(bias_ptr + c) if HAS_BIAS else 0.0
    # c1..c3: the partial sums of the output rows the next 1..3 input rows still add to; each made
    # on its own (Triton 3.6 miscompiled carried tensors that shared one initial value)
    c1 = tl.zeros((BLOCK_W,), dtype=tl.float32)
    c2 = tl.zeros((BLOCK_W,), dtype=tl.float32)
    c3 = tl.zeros((BLOCK_W,), dtype=tl.float32)
    for r in range(0, ROWS + KH - 1):
        ih = tl.zeros((BLOCK_W,), dtype=tl.int32) + (oh0 - pad_h + r)  # a vector: masks stay int1
        row_ok = (ih >= 0) & (ih < H) & w_mask
        p0 = _row_part(x_base, w_ptr, c, ih, row_ok, iw0, W, stride_xh, stride_xw, dil_w, KH, KW, 0, BLOCK_W)
        if KH == 1:
            out = p0
        elif KH == 2:
            out = c1 + _row_part(x_base, w_ptr, c, ih, row_ok, iw0, W, stride_xh, stride_xw, dil_w, KH, KW, 1, BLOCK_W)
            c1 = p0
        elif KH == 3:
            out = c2 + _row_part(x_base, w_ptr, c, ih, row_ok, iw0, W, stride_xh, stride_xw, dil_w, KH, KW, 2, BLOCK_W)
            c2 = c1 + _row_part(x_base, w_ptr, c, ih, row_ok, iw0, W, stride_xh, stride_xw, dil_w, KH, KW, 1, BLOCK_W)
            c1 = p0
        else:
            out = c3 + _row_part(x_base, w_ptr, c, ih, row_ok, iw0, W, stride_xh, stride_xw, dil_w, KH, KW, 3, BLOCK_W)
            c3 = c2 + _row_part(x_base, w_ptr, c, ih, row_ok, iw0, W, stride_xh, stride_xw, dil_w, KH, KW, 2, BLOCK_W)
            c2 = c1 + _row_part(x_base, w_ptr, c, ih, row_ok, iw0, W, stride_xh, stride_xw, dil_w, KH, KW, 1, BLOCK_W)
            c1 = p0
        oh = ih + pad_h - (KH - 1)  # the output row whose window ends at input row ih
        tl.store(y_base + oh * OW + offs_w, out + bias, mask=w_mask & (oh >= oh0) & (oh < OH))


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def depthwise_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
) -> torch.Tensor:
    """conv2d(x, weight, bias, stride, padding, dilation, groups=C) for weight (C, 1, KH, KW)."""
    if x.dim() != 4 or weight.dim() != 4 or weight.shape[0] != x.shape[1] or weight.shape[1] != 1:
        raise ValueError(f"depthwise conv needs x (N, C, H, W) and weight (C, 1, KH, KW), got {tuple(x.shape)}, {tuple(weight.shape)}")
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        raise TypeError(f"this kernel is fp32 only, got {x.dtype} and {weight.dtype}")
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    N, C, H, W = x.shape
    KH, KW = weight.shape[2], weight.shape[3]
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    y = torch.empty((N, C, OH, OW), device=x.device, dtype=torch.float32)
    w = weight.contiguous()
    if sh == 1 and dh == 1 and KH <= 4:
        block_w = min(512, max(32, triton.next_power_of_2(OW)))
        rows = min(ROWS, OH)
        grid = (N * C, triton.cdiv(OW, block_w), triton.cdiv(OH, rows))
        depthwise_conv2d_rows_kernel[grid](
            x, w, bias if bias is not None else w, y,
            C, H, W, OH, OW,
            x.stride(0), x.stride(1), x.stride(2), x.stride(3),
            sw, ph, pw, dw, rows,
            KH=KH, KW=KW, HAS_BIAS=bias is not None, BLOCK_W=block_w, num_warps=8 if block_w >= 512 else 4,
        )
        return y
    block_w = min(128, max(16, triton.next_power_of_2(OW)))
    block_h = max(1, min(2048 // block_w, triton.next_power_of_2(OH)))
    grid = (N * C, triton.cdiv(OH, block_h), triton.cdiv(OW, block_w))
    depthwise_conv2d_kernel[grid](
        x, w, bias if bias is not None else w, y,
        C, H, W, OH, OW,
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        sh, sw, ph, pw, dh, dw,
        KH=KH, KW=KW, HAS_BIAS=bias is not None, BLOCK_H=block_h, BLOCK_W=block_w, num_warps=4,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, kernel_size: int, stride: int = 1, padding: int = 0, bias: bool = False):
        super().__init__()
        self.conv2d = nn.Conv2d(
            in_channels, in_channels, kernel_size, stride=stride, padding=padding, groups=in_channels, bias=bias
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv2d
        return depthwise_conv2d(x, c.weight, c.bias, c.stride, c.padding, c.dilation)
