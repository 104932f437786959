"""GEMM + epilogue, fp32: y = act((x @ W^T + bias) * scale + shift), one kernel.

`nn.Linear` followed by elementwise ops (KernelBench level 2's Gemm_*/Matmul_* tasks): the
epilogue runs on the accumulator in registers, so the output is written once instead of once
per op.

The affine part folds the level-2 variants: `* m` is scale=m; `/ d` is scale=1/d; `- s) * m` is
scale=m, shift=-s*m; `y * s + y` (a residual of itself) is scale=1+s. ACTIVATION: none, relu,
leaky_relu (SLOPE), gelu (erf), gelu_tanh, sigmoid, silu, tanh.

Precision (PRECISION, as the `gemm` entry, which says why and what was measured): x and W are
each split once into two bfloat16 parts (hi = bf16(v), lo = bf16(v - hi)), K-major and K padded
to 64, and each K block's three bf16 products (lo hi + hi lo + hi hi) go into a fresh
accumulator added into the fp32 total. About twice the speed of `tl.dot(input_precision=
"tf32x3")` with the same error on KernelBench's inputs; for zero-mean inputs with K in the
thousands set PRECISION = "tf32x3" (TF32 parts in fp32, half the speed).
FLOPs 2*M*N*K; bytes: the split reads and writes 4*(M+N)*K, the product reads the parts and
writes 4*M*N.
Conditions: fp32; x (M, K) and W (N, K) with any strides; bias of N elements or None; memory for
the parts (an fp32 copy of x and W); finite inputs (an inf meets a zero part in a small product: NaN where PyTorch gives inf).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

PRECISION = "bf16x3"  # or "tf32x3": near-fp32 for zero-mean inputs and a long K, half the speed
K_ALIGN = 64  # the parts' K is padded to a multiple of this (every BLOCK_K divides it)
# Two warpgroups hold a 128x128 tile's two fp32 accumulators; configs whose stages do not fit in
# shared memory for the parts' dtype are dropped before tuning (`_fits`).
CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=5),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
]
SHARED_BYTES = 227 * 1024  # an H100/H200 block's shared memory
ACTIVATIONS = ("none", "relu", "leaky_relu", "gelu", "gelu_tanh", "sigmoid", "silu", "tanh")


def _fits(configs, named_args, **kwargs):
    """The configs whose pipeline stages fit in shared memory: stages x (BLOCK_M + BLOCK_N) x
    BLOCK_K x 2 parts x the parts' element size."""
    size = named_args["x_hi"].element_size()
    kept = [
        c
        for c in configs
        if c.num_stages * (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"]) * c.kwargs["BLOCK_K"] * 2 * size <= SHARED_BYTES
    ]
    return kept or configs[-1:]


@triton.jit
def _tf32_rna(x):
    """x rounded to the nearest TF32 value (10 mantissa bits, ties away from zero)."""
    bits = x.to(tl.uint32, bitcast=True)
    return ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def _bf16_rne(x):
    """x rounded to the nearest bfloat16 value (ties to even), still fp32: done on the bits, so
    the later cast to bfloat16 is exact wherever it runs (Triton's CPU interpreter truncates)."""
    bits = x.to(tl.uint32, bitcast=True)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)


@triton.jit
def split_kernel(
    x_ptr, hi_ptr, lo_ptr, ROWS, K, KP, stride_xr, stride_xk, BF16: tl.constexpr, BLOCK: tl.constexpr
):
    """hi[r, k] + lo[r, k] = x[r, k] for the (ROWS, KP) row-major parts, zero past K."""
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_x = (offs_r[:, None] < ROWS) & (offs_k[None, :] < K)
    x_offs = offs_r[:, None].to(tl.int64) * stride_xr + offs_k[None, :].to(tl.int64) * stride_xk
    x = tl.load(x_ptr + x_offs, mask=in_x, other=0.0)
    if BF16:
        hi_f = _bf16_rne(x)
        hi = hi_f.to(tl.bfloat16)
        lo = _bf16_rne(x - hi_f).to(tl.bfloat16)
    else:
        hi = _tf32_rna(x)
        lo = _tf32_rna(x - hi)
    out = offs_r[:, None].to(tl.int64) * KP + offs_k[None, :]
    in_parts = (offs_r[:, None] < ROWS) & (offs_k[None, :] < KP)
    tl.store(hi_ptr + out, hi, mask=in_parts)
    tl.store(lo_ptr + out, lo, mask=in_parts)


@triton.jit
def _tanh(x):
    # tanh from exp, stable for large |x| (no tl.tanh in Triton 3.6's core language)
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def _activation(y, ACTIVATION: tl.constexpr, SLOPE: tl.constexpr):
    if ACTIVATION == "relu":
        y = tl.maximum(y, 0.0)
    elif ACTIVATION == "leaky_relu":
        y = tl.where(y >= 0, y, y * SLOPE)
    elif ACTIVATION == "gelu":
        y = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":
        y = 0.5 * y * (1.0 + _tanh(0.7978845608028654 * (y + 0.044715 * y * y * y)))
    elif ACTIVATION == "sigmoid":
        y = tl.sigmoid(y)
    elif ACTIVATION == "silu":
        y = y * tl.sigmoid(y)
    elif ACTIVATION == "tanh":
        y = _tanh(y)
    return y


@triton.autotune(configs=CONFIGS, key=["M", "N", "KP"], prune_configs_by={"early_config_prune": _fits})
@triton.jit
def linear_epilogue_kernel(
    x_hi, x_lo, w_hi, w_lo, bias_ptr, y_ptr,
    M, N, KP, stride_ym, stride_yn,
    scale, shift,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, SLOPE: tl.constexpr, PREC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    x_offs = offs_m[:, None].to(tl.int64) * KP + offs_k[None, :]
    w_offs = offs_n[None, :].to(tl.int64) * KP + offs_k[:, None]  # W^T tiles, K-major
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, KP // BLOCK_K):
        # each K block's three products in a fresh accumulator, added on the CUDA cores: wgmma's
        # accumulation truncates (the `gemm` entry's docstring has the figures)
        xh = tl.load(x_hi + x_offs)
        wh = tl.load(w_hi + w_offs)
        part = tl.dot(tl.load(x_lo + x_offs), wh, input_precision=PREC)
        part = tl.dot(xh, tl.load(w_lo + w_offs), part, input_precision=PREC)
        acc += tl.dot(xh, wh, part, input_precision=PREC)
        x_offs += BLOCK_K
        w_offs += BLOCK_K

    offs_ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_yn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_yn, mask=offs_yn < N, other=0.0)[None, :]
    y = _activation(acc * scale + shift, ACTIVATION, SLOPE)
    y_ptrs = y_ptr + offs_ym[:, None].to(tl.int64) * stride_ym + offs_yn[None, :] * stride_yn
    tl.store(y_ptrs, y, mask=(offs_ym[:, None] < M) & (offs_yn[None, :] < N))


def linear_epilogue(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    scale: float = 1.0,
    shift: float = 0.0,
    activation: str = "none",
    slope: float = 0.01,
) -> torch.Tensor:
    """act((x @ weight^T + bias) * scale + shift) for x (M, K), weight (N, K), bias (N,)."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"linear needs x (M, K) and weight (N, K), got {tuple(x.shape)}, {tuple(weight.shape)}")
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        raise TypeError(f"this kernel is fp32 only, got {x.dtype} and {weight.dtype}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r}: use one of {', '.join(ACTIVATIONS)}")
    M, K = x.shape
    N = weight.shape[0]
    if bias is not None and bias.numel() != N:
        raise ValueError(f"bias has {bias.numel()} elements; the output has {N} columns")
    kp = max(triton.cdiv(K, K_ALIGN), 1) * K_ALIGN
    x_hi, x_lo = split(x, kp)
    w_hi, w_lo = split(weight, kp)
    y = torch.empty((M, N), device=x.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    linear_epilogue_kernel[grid](
        x_hi, x_lo, w_hi, w_lo, bias if bias is not None else y, y, M, N, kp, y.stride(0), y.stride(1),
        float(scale), float(shift),
        HAS_BIAS=bias is not None, ACTIVATION=activation, SLOPE=float(slope),
        PREC="ieee" if PRECISION == "bf16x3" else "tf32",
    )
    return y


def split(v: torch.Tensor, kp: int, precision: str = PRECISION) -> tuple[torch.Tensor, torch.Tensor]:
    """The (hi, lo) parts of 2-D fp32 `v` (rows, K): two (rows, kp) row-major buffers, bfloat16
    for "bf16x3", TF32 values in fp32 for "tf32x3", zero past K."""
    if precision not in ("bf16x3", "tf32x3"):
        raise ValueError(f"precision {precision!r}: use 'bf16x3' or 'tf32x3'")
    rows, k = v.shape
    hi = torch.empty((rows, kp), device=v.device, dtype=torch.bfloat16 if precision == "bf16x3" else torch.float32)
    lo = torch.empty_like(hi)
    grid = (triton.cdiv(rows, 64), triton.cdiv(kp, 64))
    split_kernel[grid](v, hi, lo, rows, k, kp, v.stride(0), v.stride(1), BF16=precision == "bf16x3", BLOCK=64)
    return hi, lo


class ModelNew(nn.Module):
    """Linear without bias, then + bias and ReLU (parameters made in the reference's order)."""

    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return linear_epilogue(x, self.gemm.weight, self.bias.reshape(-1), activation="relu")
