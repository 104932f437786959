"""Conv2d as an implicit GEMM, fp32 on tensor cores (bf16x3 or 3xTF32), fused epilogue.

The convolution is a GEMM with M = N*OH*OW output pixels, N = OC output channels and
K = C*KH*KW, where the A operand (im2col of x) is never materialised: each K step gathers a
BLOCK_M x BLOCK_K tile straight from the NCHW input, decoding k into (c, kh, kw) and m into
(n, oh, ow), with zero padding by mask. The weight (OC, C, KH, KW) read as (OC, K) is already the
K-major B operand. The epilogue adds the conv bias, applies an activation and adds a second
per-channel bias (KernelBench level 2's Conv2d_ReLU_BiasAdd) before the one store.
FLOPs 2*M*OC*K; bytes ~4*(x + weight + y) (x tiles are re-read from L2 by the OC tiles).

With C a multiple of 16 (KernelBench's 63: C = 16; level 2's 1: C = 64), x is written channels-last
first and the weight as (OC, KH, KW, C), each as two bfloat16 parts (hi = bf16(v), lo = bf16(v -
hi), as the `gemm` entry's bf16x3): each K step is then BLOCK_K channels of one tap, whose rows are
contiguous, so Triton loads the A tiles as vectors and stages them K-major for wgmma (the gather of
an NCHW x cannot be), and each K step's three bf16 products (lo hi + hi lo + hi hi) go into a fresh
accumulator added into the fp32 total on the CUDA cores (wgmma's accumulation truncates). The
output stays NCHW, its offsets int32 where y has under 2**31 elements: int64 offsets for the tile
made the kernel spill about 1 KB a thread.
Other C, or PRECISION = "tf32x3" (TF32 parts: near fp32, for zero-mean inputs with a long K), take
the gather kernel, whose dots are `input_precision="tf32x3"`.

Conditions: fp32 NCHW input (any strides), groups = 1, any stride, padding (zeros), dilation;
square or rectangular kernels; offsets in int64; on the channels-last path, finite inputs (an inf meets a zero part in a small product: NaN where PyTorch gives inf).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=3),
]
ACTIVATIONS = ("none", "relu")
PRECISION = "bf16x3"  # the channels-last path's; "tf32x3" takes the gather kernel (3xTF32) for every C


@triton.jit
def _epilogue(
    acc, bias_ptr, post_bias_ptr, y_ptr, offs_n, m_mask, n_mask, nb32, oh, ow, OC, OH, OW,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_POST_BIAS: tl.constexpr, Y32: tl.constexpr,
):
    """Both kernels' end: conv bias, activation, the second per-channel bias, then the store into
    NCHW y (element (nb, oc, oh, ow); along m it is contiguous within a row of ow)."""
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    if HAS_POST_BIAS:
        acc += tl.load(post_bias_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    if Y32:  # int32 offsets: an int64 offset a tile element made the kernels spill ~1 KB a thread
        y_off = ((nb32 * OC * OH + oh) * OW + ow)[:, None] + (offs_n * (OH * OW))[None, :]
    else:
        nb = nb32.to(tl.int64)
        y_off = ((nb[:, None] * OC + offs_n[None, :]) * OH + oh[:, None]) * OW + ow[:, None]
    tl.store(y_ptr + y_off, acc, mask=m_mask[:, None] & n_mask[None, :])


@triton.autotune(configs=CONFIGS, key=["C", "OC", "OH", "OW", "KH", "KW"])
@triton.jit
def conv2d_kernel(
    x_ptr, w_ptr, bias_ptr, post_bias_ptr, y_ptr,
    NB, C, H, W, OC, OH, OW,
    stride_xn, stride_xc, stride_xh, stride_xw,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    KH: tl.constexpr, KW: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_POST_BIAS: tl.constexpr, Y32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    M = NB * OH * OW
    K = C * KH * KW
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    n_mask = offs_n < OC
    ow = offs_m % OW
    oh = (offs_m // OW) % OH
    nb32 = offs_m // (OW * OH)
    nb = nb32.to(tl.int64)
    ih0 = oh * stride_h - pad_h
    iw0 = ow * stride_w - pad_w
    x_base = x_ptr + nb * stride_xn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        kw = offs_k % KW
        kh = (offs_k // KW) % KH
        c = offs_k // (KW * KH)
        ih = ih0[:, None] + kh[None, :] * dil_h
        iw = iw0[:, None] + kw[None, :] * dil_w
        a_mask = m_mask[:, None] & k_mask[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a_ptrs = x_base[:, None] + c[None, :].to(tl.int64) * stride_xc + ih * stride_xh + iw * stride_xw
        a = tl.load(a_ptrs, mask=a_mask, other=0.0)  # the im2col tile, gathered
        b = tl.load(
            w_ptr + offs_n[None, :].to(tl.int64) * K + offs_k[:, None],
            mask=n_mask[None, :] & k_mask[:, None],
            other=0.0,
        )
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    _epilogue(
        acc, bias_ptr, post_bias_ptr, y_ptr, offs_n, m_mask, n_mask, nb32, oh, ow, OC, OH, OW,
        HAS_BIAS, ACTIVATION, HAS_POST_BIAS, Y32,
    )


NHWC_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128}, num_warps=4, num_stages=4),
]


@triton.autotune(configs=NHWC_CONFIGS, key=["C", "OC", "OH", "OW", "KH", "KW", "BLOCK_K"])
@triton.jit
def conv2d_nhwc_kernel(
    x_hi, x_lo, w_hi, w_lo, bias_ptr, post_bias_ptr, y_ptr,
    NB, C, H, W, OC, OH, OW,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    KH: tl.constexpr, KW: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_POST_BIAS: tl.constexpr, Y32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """The implicit GEMM over channels-last bfloat16 parts of x ((N, H, W, C) contiguous) and of
    the weight ((OC, KH, KW, C) contiguous), C a multiple of BLOCK_K: each K step is BLOCK_K
    channels of one tap, so the A tiles' rows are contiguous runs Triton loads as vectors."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    M = NB * OH * OW
    K = C * KH * KW
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    n_mask = offs_n < OC
    ow = offs_m % OW
    oh = (offs_m // OW) % OH
    nb32 = offs_m // (OW * OH)
    nb = nb32.to(tl.int64)
    ih0 = oh * stride_h - pad_h
    iw0 = ow * stride_w - pad_w
    row = ((nb * H + ih0) * W + iw0) * C  # x[nb, ih0, iw0, 0]; each tap adds (dh * W + dw) * C
    offs_c = tl.arange(0, BLOCK_K)
    w_row = offs_n[None, :].to(tl.int64) * K
    c_blocks = C // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, KH * KW * c_blocks):
        tap = step // c_blocks
        c0 = (step % c_blocks) * BLOCK_K
        dh = (tap // KW) * dil_h
        dw = (tap % KW) * dil_w
        ih = ih0 + dh
        iw = iw0 + dw
        row_ok = (m_mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W))[:, None]
        a_offs = row[:, None] + ((dh * W + dw) * C + c0 + offs_c)[None, :]
        b_offs = w_row + (tap * C + c0 + offs_c)[:, None]
        ah = tl.load(x_hi + a_offs, mask=row_ok, other=0.0)
        bh = tl.load(w_hi + b_offs, mask=n_mask[None, :], other=0.0)
        part = tl.dot(tl.load(x_lo + a_offs, mask=row_ok, other=0.0), bh)
        part = tl.dot(ah, tl.load(w_lo + b_offs, mask=n_mask[None, :], other=0.0), part)
        acc += tl.dot(ah, bh, part)
    _epilogue(
        acc, bias_ptr, post_bias_ptr, y_ptr, offs_n, m_mask, n_mask, nb32, oh, ow, OC, OH, OW,
        HAS_BIAS, ACTIVATION, HAS_POST_BIAS, Y32,
    )


@triton.jit
def _bf16_rne(x):
    """x rounded to the nearest bfloat16 value (ties to even), still fp32: done on the bits, so
    the later cast to bfloat16 is exact wherever it runs (Triton's CPU interpreter truncates)."""
    bits = x.to(tl.uint32, bitcast=True)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)


@triton.jit
def nhwc_parts_kernel(
    x_ptr, hi_ptr, lo_ptr, C, HW, W, stride_xn, stride_xc, stride_xh, stride_xw,
    BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    """hi[n, hw, c] + lo[n, hw, c] = x[n, c, h, w], bfloat16 parts in (N, H, W, C) order: a BLOCK_C x
    BLOCK_HW tile read through x's strides and written along c (when x is NCHW, Triton turns the
    tile around in shared memory, so both sides stay coalesced)."""
    n = tl.program_id(2).to(tl.int64)
    offs_c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_hw = tl.program_id(1) * BLOCK_HW + tl.arange(0, BLOCK_HW)
    mask = (offs_c[:, None] < C) & (offs_hw[None, :] < HW)
    h, w = offs_hw // W, offs_hw % W
    x_offs = n * stride_xn + offs_c[:, None].to(tl.int64) * stride_xc + (h.to(tl.int64) * stride_xh + w * stride_xw)[None, :]
    x = tl.load(x_ptr + x_offs, mask=mask, other=0.0)
    hi = _bf16_rne(x)
    out = n * C * HW + offs_hw[None, :].to(tl.int64) * C + offs_c[:, None]
    tl.store(hi_ptr + out, hi.to(tl.bfloat16), mask=mask)
    tl.store(lo_ptr + out, _bf16_rne(x - hi).to(tl.bfloat16), mask=mask)


@triton.jit
def flat_parts_kernel(x_ptr, hi_ptr, lo_ptr, n, BLOCK: tl.constexpr):
    """hi + lo = x elementwise, bfloat16 parts of a contiguous tensor (the permuted weight)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    hi = _bf16_rne(x)
    tl.store(hi_ptr + offs, hi.to(tl.bfloat16), mask=offs < n)
    tl.store(lo_ptr + offs, _bf16_rne(x - hi).to(tl.bfloat16), mask=offs < n)


def _nhwc_parts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (N, C, H, W), any strides, as two contiguous (N, H, W, C) bfloat16 parts."""
    N, C, H, W = x.shape
    if N > 65535:
        raise ValueError(f"a batch of {N} is over the grid's 65535; split the batch")
    hi = torch.empty((N, H, W, C), device=x.device, dtype=torch.bfloat16)
    lo = torch.empty_like(hi)
    block_c = min(64, max(16, triton.next_power_of_2(C)))
    block_hw = 4096 // block_c
    grid = (triton.cdiv(C, block_c), triton.cdiv(H * W, block_hw), N)
    nhwc_parts_kernel[grid](x, hi, lo, C, H * W, W, *x.stride(), BLOCK_C=block_c, BLOCK_HW=block_hw, num_warps=4)
    return hi, lo


def _flat_parts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.contiguous()
    hi = torch.empty(x.shape, device=x.device, dtype=torch.bfloat16)
    lo = torch.empty_like(hi)
    flat_parts_kernel[(triton.cdiv(x.numel(), 1024),)](x, hi, lo, x.numel(), BLOCK=1024)
    return hi, lo


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    *,
    activation: str = "none",
    post_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """act(conv2d(x, weight, bias, stride, padding, dilation)) + post_bias (per channel), groups 1."""
    if x.dim() != 4 or weight.dim() != 4 or weight.shape[1] != x.shape[1]:
        raise ValueError(f"conv2d needs x (N, C, H, W) and weight (OC, C, KH, KW), got {tuple(x.shape)}, {tuple(weight.shape)}")
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        raise TypeError(f"this kernel is fp32 only, got {x.dtype} and {weight.dtype}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r}: use one of {', '.join(ACTIVATIONS)}")
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    NB, C, H, W = x.shape
    OC, _, KH, KW = weight.shape
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    y = torch.empty((NB, OC, OH, OW), device=x.device, dtype=torch.float32)
    y32 = y.numel() < 2**31
    grid = lambda meta: (triton.cdiv(NB * OH * OW, meta["BLOCK_M"]), triton.cdiv(OC, meta["BLOCK_N"]))
    if C % 16 == 0 and PRECISION == "bf16x3":  # channels-last parts: K steps of whole channel runs
        x_hi, x_lo = _nhwc_parts(x)
        w_hi, w_lo = _flat_parts(weight.permute(0, 2, 3, 1))  # (OC, KH, KW, C)
        conv2d_nhwc_kernel[grid](
            x_hi, x_lo, w_hi, w_lo, bias if bias is not None else y, post_bias if post_bias is not None else y, y,
            NB, C, H, W, OC, OH, OW,
            sh, sw, ph, pw, dh, dw,
            KH=KH, KW=KW, HAS_BIAS=bias is not None, ACTIVATION=activation, HAS_POST_BIAS=post_bias is not None,
            Y32=y32, BLOCK_K=32 if C % 32 == 0 else 16,
        )
        return y
    w = weight.contiguous()
    conv2d_kernel[grid](
        x, w, bias if bias is not None else w, post_bias if post_bias is not None else w, y,
        NB, C, H, W, OC, OH, OW,
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        sh, sw, ph, pw, dh, dw,
        KH=KH, KW=KW, HAS_BIAS=bias is not None, ACTIVATION=activation, HAS_POST_BIAS=post_bias is not None,
        Y32=y32,
    )
    return y


class ModelNew(nn.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = False,
    ):
        super().__init__()
        if groups != 1:
            raise ValueError("this kernel takes groups=1 (see the depthwise_conv2d entry for groups=C)")
        self.conv2d = nn.Conv2d(
            in_channels, out_channels, (kernel_size, kernel_size),
            stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv2d
        return conv2d(x, c.weight, c.bias, c.stride, c.padding, c.dilation)
