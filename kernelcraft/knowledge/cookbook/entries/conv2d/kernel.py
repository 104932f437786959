"""Conv2d as an implicit GEMM, fp32 on tensor cores with 3xTF32 (near fp32), fused epilogue.

The convolution is a GEMM with M = N*OH*OW output pixels, N = OC output channels and
K = C*KH*KW, where the A operand (im2col of x) is never materialised: each K step gathers a
BLOCK_M x BLOCK_K tile straight from the NCHW input, decoding k into (c, kh, kw) and m into
(n, oh, ow), with zero padding by mask. The weight (OC, C, KH, KW) read as (OC, K) is already the
K-major B operand. The epilogue adds the conv bias, applies an activation and adds a second
per-channel bias (KernelBench level 2's Conv2d_ReLU_BiasAdd) before the one store.
FLOPs 2*M*OC*K; bytes ~4*(x + weight + y) (x tiles are re-read from L2 by the OC tiles).

With C a multiple of 16 (KernelBench's 63: C = 16; level 2's 1: C = 64), x is copied channels-last
first and the weight to (OC, KH, KW, C): each K step is then BLOCK_K channels of one tap, whose
rows are contiguous, so Triton loads the A tile as vectors and stages it K-major for wgmma (the
gather of an NCHW x cannot be). The output stays NCHW, its offsets int32 where y has under 2**31
elements: int64 offsets for the tile made the kernel spill about 1 KB a thread.

Conditions: fp32 NCHW input (any strides), groups = 1, any stride, padding (zeros), dilation;
square or rectangular kernels; offsets in int64.
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
    x_ptr, w_ptr, bias_ptr, post_bias_ptr, y_ptr,
    NB, C, H, W, OC, OH, OW,
    stride_xn, stride_xh, stride_xw,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    KH: tl.constexpr, KW: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_POST_BIAS: tl.constexpr, Y32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """The implicit GEMM over a channels-last x (its channel stride 1) and a (OC, KH, KW, C)
    weight, C a multiple of BLOCK_K: each K step is BLOCK_K channels of one tap, so the A tile's
    rows are contiguous runs Triton loads as vectors and stages K-major for wgmma."""
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
    row_base = x_ptr + nb * stride_xn + ih0.to(tl.int64) * stride_xh + iw0.to(tl.int64) * stride_xw
    offs_c = tl.arange(0, BLOCK_K)
    c_blocks = C // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, KH * KW * c_blocks):
        tap = step // c_blocks
        c0 = (step % c_blocks) * BLOCK_K
        dh = (tap // KW) * dil_h
        dw = (tap % KW) * dil_w
        ih = ih0 + dh
        iw = iw0 + dw
        row_ok = m_mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(row_base[:, None] + (dh * stride_xh + dw * stride_xw + c0 + offs_c)[None, :], mask=row_ok[:, None], other=0.0)
        b = tl.load(w_ptr + offs_n[None, :].to(tl.int64) * K + (tap * C + c0 + offs_c)[:, None], mask=n_mask[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    _epilogue(
        acc, bias_ptr, post_bias_ptr, y_ptr, offs_n, m_mask, n_mask, nb32, oh, ow, OC, OH, OW,
        HAS_BIAS, ACTIVATION, HAS_POST_BIAS, Y32,
    )


@triton.jit
def nchw_to_nhwc_kernel(x_ptr, y_ptr, C, HW, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr):
    """y[n, hw, c] = x[n, c, hw]: a BLOCK_C x BLOCK_HW tile read along hw and written along c
    (Triton turns the tile around in shared memory, so both sides stay coalesced)."""
    n = tl.program_id(2).to(tl.int64)
    offs_c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_hw = tl.program_id(1) * BLOCK_HW + tl.arange(0, BLOCK_HW)
    mask = (offs_c[:, None] < C) & (offs_hw[None, :] < HW)
    tile = tl.load(x_ptr + n * C * HW + offs_c[:, None] * HW + offs_hw[None, :], mask=mask)
    tl.store(y_ptr + n * C * HW + offs_hw[None, :].to(tl.int64) * C + offs_c[:, None], tile, mask=mask)


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    """x (N, C, H, W) with channel stride 1, as a view of an (N, H, W, C) buffer. A contiguous NCHW x
    goes through `nchw_to_nhwc_kernel`: PyTorch's copy took 0.81 ms for KernelBench 63's 268 MB x
    on the H200, several times what the bytes need."""
    if x.is_contiguous(memory_format=torch.channels_last):
        return x
    N, C, H, W = x.shape
    if not x.is_contiguous() or N > 65535:
        return x.contiguous(memory_format=torch.channels_last)
    out = torch.empty((N, H, W, C), device=x.device, dtype=x.dtype)
    block_c = min(64, max(16, triton.next_power_of_2(C)))
    block_hw = 4096 // block_c
    grid = (triton.cdiv(C, block_c), triton.cdiv(H * W, block_hw), N)
    nchw_to_nhwc_kernel[grid](x, out, C, H * W, BLOCK_C=block_c, BLOCK_HW=block_hw, num_warps=4)
    return out.permute(0, 3, 1, 2)


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
    if C % 16 == 0:  # channels-last x and (OC, KH, KW, C) weight: K steps of whole channel runs
        xc = _channels_last(x)
        w = weight.permute(0, 2, 3, 1).contiguous()
        conv2d_nhwc_kernel[grid](
            xc, w, bias if bias is not None else w, post_bias if post_bias is not None else w, y,
            NB, C, H, W, OC, OH, OW,
            xc.stride(0), xc.stride(2), xc.stride(3),
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
