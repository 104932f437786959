"""Attention, fp32: softmax(Q K^T / sqrt(D)) V for Q, K, V (B, H, S, D), no mask.

Head size D <= 128: a flash-attention forward (Dao et al.; Triton tutorial 06). One program per
BLOCK_M query rows of one (batch, head) keeps Q in registers, streams K and V in BLOCK_N-row
tiles, and carries the online-softmax state (row max m, row sum l) and the output accumulator,
rescaled by exp2(m_old - m_new) when the max grows: the S x S scores never reach memory.
Bytes 4*(B*H*S*D) per tensor, once each; FLOPs 4*B*H*S^2*D.

Head size D > 128 (KernelBench's 97 has D = 1024, S = 512): a Q tile and its D-wide accumulator
no longer fit in registers, so three steps run, as the `bmm` entry's split GEMM (bf16x3): Q and K are
split once into bfloat16 parts (hi = bf16(v), lo = bf16(v - hi)), K-major in D; scores = Q K^T *
scale (three bf16 products per K block into a fresh accumulator, added on the CUDA cores); a row
softmax that writes P as bfloat16 parts itself; V split into parts K-major in S (the split kernel
turns it around); out = P V. The scores take B*H*S^2*4 bytes (1 GiB there), small next to the
4*B*H*S^2*D FLOPs, which run on bf16 tensor cores at about twice 3xTF32's speed. PRECISION =
"tf32x3" splits into TF32 parts instead (22 bits, for zero-mean inputs with a long D or S).

Precision: the flash kernel's dots are 3xTF32 (`input_precision="tf32x3"`), near fp32; the D > 128
path's as PRECISION says.
Layout (flash): Hopper's wgmma takes TF32 operands K-major only. K^T is K-major as K is stored (D
contiguous); V, the B operand of P V, is K-major only with S contiguous, so V is copied once
transposed ((B, H, D, S) storage read through (B, H, S, D) strides, by a tiled transpose kernel)
unless it already is. The
`gemm` entry's probe on the H200 shows what an N-major B costs: twice the time.
Conditions: fp32 (B, H, S, D) (any strides), no attention mask, not causal, no dropout, the
default scale 1/sqrt(D); the D > 128 path needs S_k <= 16384, B*H <= 65535 and memory for the
parts (an fp32 copy of Q, K and V) and the scores, and finite inputs (an inf meets a zero part in a small product: NaN where PyTorch gives inf).
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

FLASH_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 32}, num_warps=8, num_stages=2),
]
PRECISION = "bf16x3"  # the D > 128 path's split: or "tf32x3" (TF32 parts, near fp32, half the speed)
K_ALIGN = 64  # the parts' K is padded to a multiple of this (every BLOCK_K divides it)
# Two warpgroups hold a 128x128 tile's two fp32 accumulators; configs whose stages do not fit in
# shared memory for the parts' dtype are dropped before tuning (`_fits`).
GEMM_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=4),
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


@triton.autotune(configs=FLASH_CONFIGS, key=["SQ", "SK", "BLOCK_D"])
@triton.jit
def flash_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om, stride_od,
    H, SQ, SK, D, qk_scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_zh = tl.program_id(1)
    z = (pid_zh // H).to(tl.int64)
    h = (pid_zh % H).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    q_base = q_ptr + z * stride_qz + h * stride_qh
    k_base = k_ptr + z * stride_kz + h * stride_kh
    v_base = v_ptr + z * stride_vz + h * stride_vh
    q = tl.load(
        q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
        mask=(offs_m[:, None] < SQ) & d_mask[None, :],
        other=0.0,
    )
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start_n in range(0, SK, BLOCK_N):
        cols = start_n + offs_n
        col_mask = cols < SK
        kt = tl.load(  # K^T tile: BLOCK_D x BLOCK_N
            k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd,
            mask=col_mask[None, :] & d_mask[:, None],
            other=0.0,
        )
        qk = tl.dot(q, kt, input_precision="tf32x3") * qk_scale  # in log2 units
        qk = tl.where(col_mask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
            mask=col_mask[:, None] & d_mask[None, :],
            other=0.0,
        )
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="tf32x3")
        m_i = m_new
    acc = acc / l_i[:, None]
    o_base = o_ptr + z * stride_oz + h * stride_oh
    tl.store(
        o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
        acc,
        mask=(offs_m[:, None] < SQ) & d_mask[None, :],
    )


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
def _store_parts(hi_ptr, lo_ptr, offs, x, mask, BF16: tl.constexpr):
    """hi + lo = x: bfloat16 parts, or TF32 values in fp32."""
    if BF16:
        hi_f = _bf16_rne(x)
        tl.store(hi_ptr + offs, hi_f.to(tl.bfloat16), mask=mask)
        tl.store(lo_ptr + offs, _bf16_rne(x - hi_f).to(tl.bfloat16), mask=mask)
    else:
        hi = _tf32_rna(x)
        tl.store(hi_ptr + offs, hi, mask=mask)
        tl.store(lo_ptr + offs, _tf32_rna(x - hi), mask=mask)


@triton.jit
def split_kernel(
    x_ptr, hi_ptr, lo_ptr, ROWS, K, KP, stride_xb, stride_xr, stride_xk, BF16: tl.constexpr, BLOCK: tl.constexpr
):
    """hi[b, r, k] + lo[b, r, k] = x[b, r, k] for the (batch, ROWS, KP) contiguous parts, zero past
    K. x is read through any strides; when its contiguous dimension is the rows (V's parts),
    Triton turns the tile around in shared memory, so both sides stay coalesced."""
    b = tl.program_id(2).to(tl.int64)
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_x = (offs_r[:, None] < ROWS) & (offs_k[None, :] < K)
    x_offs = b * stride_xb + offs_r[:, None].to(tl.int64) * stride_xr + offs_k[None, :].to(tl.int64) * stride_xk
    x = tl.load(x_ptr + x_offs, mask=in_x, other=0.0)
    out = (b * ROWS + offs_r[:, None]) * KP + offs_k[None, :]
    _store_parts(hi_ptr, lo_ptr, out, x, (offs_r[:, None] < ROWS) & (offs_k[None, :] < KP), BF16)


@triton.autotune(configs=GEMM_CONFIGS, key=["M", "N", "KP"], prune_configs_by={"early_config_prune": _fits})
@triton.jit
def bmm_parts_kernel(
    a_hi, a_lo, b_hi, b_lo, c_ptr, M, N, KP, alpha, PREC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """C[z] = alpha * A[z] @ B[z]^T from parts: A's (batch, M, KP), B's (batch, N, KP), C (batch,
    M, N) contiguous. Each K block's three products go into a fresh accumulator that is added into
    the fp32 total on the CUDA cores (wgmma's accumulation truncates: the `gemm` entry's figures)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    z = tl.program_id(2).to(tl.int64)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_offs = (z * M + offs_m[:, None]) * KP + offs_k[None, :]
    b_offs = (z * N + offs_n[None, :]) * KP + offs_k[:, None]  # B^T tiles, K-major
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, KP // BLOCK_K):
        ah = tl.load(a_hi + a_offs)
        bh = tl.load(b_hi + b_offs)
        part = tl.dot(tl.load(a_lo + a_offs), bh, input_precision=PREC)
        part = tl.dot(ah, tl.load(b_lo + b_offs), part, input_precision=PREC)
        acc += tl.dot(ah, bh, part, input_precision=PREC)
        a_offs += BLOCK_K
        b_offs += BLOCK_K
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_offs = (z * M + offs_cm[:, None]) * N + offs_cn[None, :]
    tl.store(c_ptr + c_offs, acc * alpha, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def softmax_parts_kernel(s_ptr, p_hi, p_lo, N, NP, BF16: tl.constexpr, BLOCK_N: tl.constexpr):
    """One row of P = softmax(scores) (scores already in log2 units), written as the parts of
    the next product's A operand: (rows, NP), zero past N."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_N)
    x = tl.load(s_ptr + row * N + offs, mask=offs < N, other=float("-inf"))
    e = tl.exp2(x - tl.max(x, axis=0))
    _store_parts(p_hi, p_lo, row * NP + offs, e / tl.sum(e, axis=0), offs < NP, BF16)


@triton.jit
def transpose_kernel(x_ptr, y_ptr, R, C, stride_xb, stride_xr, stride_xc, stride_yb, stride_yc, BLOCK: tl.constexpr):
    """y[b, c, r] = x[b, r, c]: a BLOCK x BLOCK tile read along c and written along r (Triton turns
    the tile around in shared memory, so both sides stay coalesced)."""
    b = tl.program_id(2).to(tl.int64)
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    tile = tl.load(x_ptr + b * stride_xb + offs_r[:, None] * stride_xr + offs_c[None, :] * stride_xc, mask=mask)
    tl.store(y_ptr + b * stride_yb + offs_c[None, :].to(tl.int64) * stride_yc + offs_r[:, None], tile, mask=mask)


def _s_contiguous(v: torch.Tensor) -> torch.Tensor:
    """v (B, H, S, D) as a view of (B, H, D, S) storage: S contiguous, so P V's B operand is K-major.
    A contiguous v goes through `transpose_kernel`: PyTorch's strided copy of a transposed operand
    ran at a third of the bandwidth or less on the H200 (KernelBench 3's B: 1.94 ms against 0.52)."""
    B, H, S, D = v.shape
    if not v.is_contiguous() or B * H > 65535:
        return v.transpose(2, 3).contiguous().transpose(2, 3)
    out = torch.empty((B, H, D, S), device=v.device, dtype=v.dtype)
    grid = (triton.cdiv(S, 64), triton.cdiv(D, 64), B * H)
    transpose_kernel[grid](v, out, S, D, S * D, D, 1, S * D, S, BLOCK=64)
    return out.transpose(2, 3)


def _strides(t: torch.Tensor) -> tuple[int, int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2), t.stride(3)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """scaled_dot_product_attention(q, k, v) without mask, dropout or causality."""
    if q.dim() != 4 or k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"attention needs q, k, v (B, H, S, D), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype == torch.float32):
        raise TypeError(f"this kernel is fp32 only, got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, SQ, D = q.shape
    SK = k.shape[2]
    out = torch.empty((B, H, SQ, D), device=q.device, dtype=torch.float32)
    qk_scale = 1.0 / math.sqrt(D) * 1.4426950408889634  # exp2 units
    if D <= 128:
        if v.stride(2) != 1:
            v = _s_contiguous(v)
        grid = lambda meta: (triton.cdiv(SQ, meta["BLOCK_M"]), B * H)
        flash_attention_kernel[grid](
            q, k, v, out, *_strides(q), *_strides(k), *_strides(v), *_strides(out),
            H, SQ, SK, D, qk_scale, BLOCK_D=max(16, triton.next_power_of_2(D)),
        )
        return out
    if SK > 16384:
        raise ValueError(f"head size {D} > 128 with {SK} keys: the unfused path holds S x S scores; keep S_k <= 16384")
    if B * H > 65535:
        raise ValueError(f"{B * H} heads in all: the D > 128 path puts them on a grid axis of at most 65535")
    if PRECISION not in ("bf16x3", "tf32x3"):
        raise ValueError(f"PRECISION {PRECISION!r}: use 'bf16x3' or 'tf32x3'")
    bf16 = PRECISION == "bf16x3"
    prec = "ieee" if bf16 else "tf32"  # bf16 products are exact; TF32 parts too
    dp, skp = max(triton.cdiv(D, K_ALIGN), 1) * K_ALIGN, max(triton.cdiv(SK, K_ALIGN), 1) * K_ALIGN
    q_hi, q_lo = _split(q.reshape(B * H, SQ, D), 2, dp, bf16)
    k_hi, k_lo = _split(k.reshape(B * H, SK, D), 2, dp, bf16)
    scores = torch.empty((B * H, SQ, SK), device=q.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(SQ, meta["BLOCK_M"]), triton.cdiv(SK, meta["BLOCK_N"]), B * H)
    bmm_parts_kernel[grid](q_hi, q_lo, k_hi, k_lo, scores, SQ, SK, dp, qk_scale, PREC=prec)
    del q_hi, q_lo, k_hi, k_lo  # their memory takes P's and V's parts
    p_hi = torch.empty((B * H, SQ, skp), device=q.device, dtype=torch.bfloat16 if bf16 else torch.float32)
    p_lo = torch.empty_like(p_hi)
    block = triton.next_power_of_2(skp)
    softmax_parts_kernel[(B * H * SQ,)](scores, p_hi, p_lo, SK, skp, BF16=bf16, BLOCK_N=block, num_warps=min(16, max(4, block // 512)))
    del scores
    v_hi, v_lo = _split(v.reshape(B * H, SK, D), 1, skp, bf16)  # (B*H, D, skp): V's columns as K-major rows
    out3 = out.view(B * H, SQ, D)
    grid = lambda meta: (triton.cdiv(SQ, meta["BLOCK_M"]), triton.cdiv(D, meta["BLOCK_N"]), B * H)
    bmm_parts_kernel[grid](p_hi, p_lo, v_hi, v_lo, out3, SQ, D, skp, 1.0, PREC=prec)
    return out


def _split(x: torch.Tensor, k_dim: int, kp: int, bf16: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The parts of 3-D fp32 `x` whose K is dimension `k_dim` (1 or 2): two contiguous (batch,
    rows, kp) buffers, bfloat16 or TF32 values in fp32, zero past K."""
    batch, rows, k = x.shape[0], x.shape[3 - k_dim], x.shape[k_dim]
    hi = torch.empty((batch, rows, kp), device=x.device, dtype=torch.bfloat16 if bf16 else torch.float32)
    lo = torch.empty_like(hi)
    grid = (triton.cdiv(rows, 64), triton.cdiv(kp, 64), batch)
    split_kernel[grid](x, hi, lo, rows, k, kp, x.stride(0), x.stride(3 - k_dim), x.stride(k_dim), BF16=bf16, BLOCK=64)
    return hi, lo


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        return attention(Q, K, V)
