"""Batched GEMM, fp32: C[b] = A[b] @ B[b] on tensor cores with 3xTF32 (near-fp32 accuracy).

The tiled GEMM of the `gemm` entry with the batch on the grid's second axis: each program
computes one BLOCK_M x BLOCK_N tile of one batch's product, the tiles of a batch grouped
GROUP_M rows at a time for L2 reuse. Any strides.

Layout: Hopper's wgmma takes TF32 operands K-major only, and Triton vectorizes loads only over rows
it knows are aligned (a row stride a multiple of 16 elements, a 16-byte aligned base). So an
operand that is not so is copied once, K-major (B (batch, K, N) as (batch, N, K)), K zero-padded
to a multiple of 32 when it leaves rows unaligned: as the `gemm` entry does, where this halved
the time of KernelBench's square product on the H200.

FLOPs 2*B*M*N*K; bytes 4*B*(M*K + K*N + M*N) at best.
Conditions: 3-D fp32 (B, M, K) @ (B, K, N); any sizes (edges masked); offsets in int64; memory for
a K-major copy of an operand that is not already one.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
]
PAD_K = 32  # K is padded to a multiple of this when it leaves an operand's rows unaligned


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def bmm_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
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
    a_ptrs = a_ptr + batch * stride_ab + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + batch * stride_cb + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def _k_major(x: torch.Tensor, k_dim: int) -> bool:
    """Whether 3-D `x` is read best as it is: K (dimension `k_dim`, 1 or 2) contiguous, the row and
    batch strides multiples of 16 elements, the base 16-byte aligned."""
    row_dim = 3 - k_dim
    return (
        x.stride(k_dim) == 1 and x.stride(row_dim) % 16 == 0 and x.stride(0) % 16 == 0 and x.data_ptr() % 16 == 0
    )


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


def _packed(x: torch.Tensor, k_dim: int, kp: int) -> torch.Tensor:
    """`x` copied K-major: a contiguous (batch, rows, kp) buffer, its columns past K zero. B (K
    major = dimension 1) goes through `transpose_kernel`: PyTorch's strided copy ran KernelBench
    3's 1 GiB B at 1.1 TB/s on the H200, a third of what a tiled transpose reaches."""
    batch, rows, k = x.shape[0], x.shape[3 - k_dim], x.shape[k_dim]
    out = torch.empty((batch, rows, kp), device=x.device, dtype=x.dtype)
    if k_dim == 2 or batch > 65535:
        out[:, :, :k].copy_(x if k_dim == 2 else x.transpose(1, 2))
    else:
        grid = (triton.cdiv(k, 64), triton.cdiv(rows, 64), batch)
        transpose_kernel[grid](x, out, k, rows, x.stride(0), x.stride(1), x.stride(2), out.stride(0), out.stride(1), BLOCK=64)
    out[:, :, k:].zero_()
    return out


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (B, M, K) @ b (B, K, N) -> (B, M, N), fp32."""
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ValueError(f"bmm needs (B, M, K) @ (B, K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise TypeError(f"this kernel is fp32 only, got {a.dtype} and {b.dtype}")
    batch, M, K = a.shape
    N = b.shape[2]
    if not (_k_major(a, 2) and _k_major(b, 1)):
        kp = K if K % 16 == 0 else triton.cdiv(K, PAD_K) * PAD_K
        if kp != K or not _k_major(a, 2):
            a = _packed(a, 2, kp)
        if kp != K or not _k_major(b, 1):
            b = _packed(b, 1, kp).transpose(1, 2)  # a (batch, kp, N) view of (batch, N, kp)
        K = kp
    c = torch.empty((batch, M, N), device=a.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), batch)
    bmm_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), a.stride(2),
        b.stride(0), b.stride(1), b.stride(2),
        c.stride(0), c.stride(1), c.stride(2),
    )
    return c


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return bmm(A, B)
