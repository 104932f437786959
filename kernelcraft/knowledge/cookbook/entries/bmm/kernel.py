"""Batched GEMM, fp32: C[b] = A[b] @ B[b] on bf16 tensor cores, each operand split once (bf16x3).

The GEMM of the `gemm` entry with the batch on the grid's second axis: each program computes one
BLOCK_M x BLOCK_N tile of one batch's product, the tiles of a batch grouped GROUP_M rows at a
time for L2 reuse. Any strides.

Precision (PRECISION, as the `gemm` entry, which says why and what was measured): A and B are
each split once into two bfloat16 parts (hi = bf16(v), lo = bf16(v - hi)), written K-major with K
padded to 64 (B (batch, K, N) as (batch, N, Kp): the split kernel turns the tile around in shared
memory), and each K block's three bf16 products (lo hi + hi lo + hi hi) go into a fresh
accumulator added into the fp32 total. About twice the speed of `tl.dot(input_precision=
"tf32x3")` with the same error on KernelBench's inputs; for zero-mean inputs with K in the
thousands set PRECISION = "tf32x3" (TF32 parts in fp32, half the speed).

FLOPs 2*B*M*N*K; bytes: the split reads and writes 4*B*(M+N)*K, the product reads the parts and
writes 4*B*M*N.
Conditions: 3-D fp32 (B, M, K) @ (B, K, N); any sizes (edges masked); offsets in int64; memory
for the parts (an fp32 copy of A and B); finite inputs (an inf meets a zero part in a small product: NaN where PyTorch gives inf).
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


def _fits(configs, named_args, **kwargs):
    """The configs whose pipeline stages fit in shared memory: stages x (BLOCK_M + BLOCK_N) x
    BLOCK_K x 2 parts x the parts' element size."""
    size = named_args["a_hi"].element_size()
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
    x_ptr, hi_ptr, lo_ptr, ROWS, K, KP, stride_xb, stride_xr, stride_xk, BF16: tl.constexpr, BLOCK: tl.constexpr
):
    """hi[b, r, k] + lo[b, r, k] = x[b, r, k] for the (batch, ROWS, KP) contiguous parts, zero past
    K. x is read through any strides; when its contiguous dimension is the rows (B's parts),
    Triton turns the tile around in shared memory, so both sides stay coalesced."""
    b = tl.program_id(2).to(tl.int64)
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_x = (offs_r[:, None] < ROWS) & (offs_k[None, :] < K)
    x_offs = b * stride_xb + offs_r[:, None].to(tl.int64) * stride_xr + offs_k[None, :].to(tl.int64) * stride_xk
    x = tl.load(x_ptr + x_offs, mask=in_x, other=0.0)
    if BF16:
        hi_f = _bf16_rne(x)
        hi = hi_f.to(tl.bfloat16)
        lo = _bf16_rne(x - hi_f).to(tl.bfloat16)
    else:
        hi = _tf32_rna(x)
        lo = _tf32_rna(x - hi)
    out = (b * ROWS + offs_r[:, None]) * KP + offs_k[None, :]
    in_parts = (offs_r[:, None] < ROWS) & (offs_k[None, :] < KP)
    tl.store(hi_ptr + out, hi, mask=in_parts)
    tl.store(lo_ptr + out, lo, mask=in_parts)


@triton.autotune(configs=CONFIGS, key=["M", "N", "KP"], prune_configs_by={"early_config_prune": _fits})
@triton.jit
def bmm_kernel(
    a_hi, a_lo, b_hi, b_lo, c_ptr,
    M, N, KP, stride_cb, stride_cm, stride_cn, PREC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
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
    a_offs = (batch * M + offs_m[:, None]) * KP + offs_k[None, :]
    b_offs = (batch * N + offs_n[None, :]) * KP + offs_k[:, None]  # K-major B tiles
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, KP // BLOCK_K):
        # each K block's three products in a fresh accumulator, added on the CUDA cores: wgmma's
        # accumulation truncates (the `gemm` entry's docstring has the figures)
        ah = tl.load(a_hi + a_offs)
        bh = tl.load(b_hi + b_offs)
        part = tl.dot(tl.load(a_lo + a_offs), bh, input_precision=PREC)
        part = tl.dot(ah, tl.load(b_lo + b_offs), part, input_precision=PREC)
        acc += tl.dot(ah, bh, part, input_precision=PREC)
        a_offs += BLOCK_K
        b_offs += BLOCK_K

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + batch * stride_cb + offs_cm[:, None].to(tl.int64) * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def split(x: torch.Tensor, k_dim: int, kp: int, precision: str = PRECISION) -> tuple[torch.Tensor, torch.Tensor]:
    """The (hi, lo) parts of 3-D fp32 `x` whose K is dimension `k_dim` (1 or 2): two contiguous
    (batch, rows, kp) buffers, bfloat16 for "bf16x3", TF32 values in fp32 for "tf32x3", zero past K."""
    if precision not in ("bf16x3", "tf32x3"):
        raise ValueError(f"precision {precision!r}: use 'bf16x3' or 'tf32x3'")
    batch, rows, k = x.shape[0], x.shape[3 - k_dim], x.shape[k_dim]
    hi = torch.empty((batch, rows, kp), device=x.device, dtype=torch.bfloat16 if precision == "bf16x3" else torch.float32)
    lo = torch.empty_like(hi)
    grid = (triton.cdiv(rows, 64), triton.cdiv(kp, 64), batch)
    split_kernel[grid](
        x, hi, lo, rows, k, kp, x.stride(0), x.stride(3 - k_dim), x.stride(k_dim), BF16=precision == "bf16x3", BLOCK=64
    )
    return hi, lo


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (B, M, K) @ b (B, K, N) -> (B, M, N), fp32."""
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ValueError(f"bmm needs (B, M, K) @ (B, K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise TypeError(f"this kernel is fp32 only, got {a.dtype} and {b.dtype}")
    batch, M, K = a.shape
    N = b.shape[2]
    if batch > 65535:
        raise ValueError(f"a batch of {batch} is over the grid's 65535; split the batch")
    kp = max(triton.cdiv(K, K_ALIGN), 1) * K_ALIGN
    a_hi, a_lo = split(a, 2, kp)
    b_hi, b_lo = split(b, 1, kp)  # (batch, N, kp): B's columns as K-major rows
    c = torch.empty((batch, M, N), device=a.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), batch)
    bmm_kernel[grid](
        a_hi, a_lo, b_hi, b_lo, c, M, N, kp, c.stride(0), c.stride(1), c.stride(2),
        PREC="ieee" if PRECISION == "bf16x3" else "tf32",
    )
    return c


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return bmm(A, B)
