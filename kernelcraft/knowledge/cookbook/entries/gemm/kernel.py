"""GEMM, fp32 in and out: C = A @ B on tensor cores with 3xTF32 (near-fp32 accuracy).

One program per BLOCK_M x BLOCK_N tile of C, launched in GROUP_M-row groups so that the tiles
running at once share rows of A and columns of B in L2 (Triton tutorial 03). Any strides: a
transposed A or B (KernelBench 16-18) is taken too (see Layout).

Precision: `input_precision="tf32x3"` splits each fp32 operand into a TF32 high part and a TF32
remainder and sums three tensor-core products: about fp32 accuracy at ~1/3 of TF32's rate, which
on an H100/H200 is still ~2-3x what fp32 FMA (cuBLAS with TF32 off, as the reference runs) reaches.
Plain TF32 misses kernelcraft's fp32 tolerance (1e-4) once K is in the thousands.

Layout: Hopper's wgmma takes TF32 operands K-major only (K the contiguous dimension), and Triton's
loads vectorize only where it knows rows start aligned: a row stride that is a multiple of 16
elements and a 16-byte aligned base (the values Triton specializes on). So the host hands
the kernel K-major, aligned operands, copying one only when it is not: B (K, N) as a row-major (N, K) buffer, and both,
K zero-padded to a multiple of 32, when K leaves rows unaligned. The copies move 4*(M+N)*K bytes,
small beside 2*M*N*K FLOPs. On the H200 (bench/probe_gemm_layout.py) this took KernelBench's 4096^3
product from 3.95 ms to 1.86 ms (cuBLAS fp32: 2.68 ms) and its 8205x2949x5921 one from 14.3 ms to
4.0 ms (cuBLAS: 6.5 ms).

Split-K: an output of few tiles (fewer than half the SMs) from a long K (>= 8192) leaves the GPU
idle with one program per tile, so `matmul_split_k_kernel` gives each tile SPLIT_K programs, each
summing one slice of K, and adds the slices into a zeroed C with fp32 atomics (the order of the
adds varies run to run: results agree within the fp32 tolerance, not bit for bit).

FLOPs 2*M*N*K; bytes 4*(M*K + K*N + M*N) at best (L2 reuse within a group).
Conditions: 2-D fp32 inputs of any strides; M, N, K any size (edges masked); offsets in int64;
memory for a K-major copy of an operand that is not already one.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# Hopper: 128x128 or 128x256 tiles with 8 warps; a smaller tile for shapes with few tiles.
CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
]
PAD_K = 32  # K is padded to a multiple of this when it leaves an operand's rows unaligned
# Split-K, for outputs of few tiles and a long K (KernelBench 6: 256x256 from K = 524288): each
# program sums one K slice of one tile and adds it into C (zeroed first) with an atomic add.
SPLIT_K_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "SPLIT_K": 16}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "SPLIT_K": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "SPLIT_K": 64}, num_warps=4, num_stages=4),
]
SPLIT_K_MIN = 8192  # split K only from this long, and only when the tiles leave most SMs idle


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
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

    # Rows and columns past the edge wrap around (`% M`): their loads stay in bounds without a
    # mask, and their results are never stored.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None].to(tl.int64) * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)  # BLOCK_M*BLOCK_K*4 bytes
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)  # BLOCK_K*BLOCK_N*4 bytes
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None].to(tl.int64) * stride_cm + offs_cn[None, :] * stride_cn
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, acc, mask=mask)  # BLOCK_M*BLOCK_N*4 bytes


@triton.autotune(configs=SPLIT_K_CONFIGS, key=["M", "N", "K"], reset_to_zero=["c_ptr"])
@triton.jit
def matmul_split_k_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)  # which K slice
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    k_blocks = tl.cdiv(K, BLOCK_K)
    per_slice = tl.cdiv(k_blocks, SPLIT_K)
    k_first = pid_k * per_slice
    k_last = tl.minimum(k_first + per_slice, k_blocks)

    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + (k_first * BLOCK_K + offs_k[None, :]).to(tl.int64) * stride_ak
    b_ptrs = b_ptr + (k_first * BLOCK_K + offs_k[:, None]).to(tl.int64) * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_first, k_last):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None].to(tl.int64) * stride_cm + offs_cn[None, :] * stride_cn
    tl.atomic_add(c_ptrs, acc, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132


def _k_major(x: torch.Tensor, k_dim: int) -> bool:
    """Whether 2-D `x` is read best as it is: K (dimension `k_dim`) contiguous, the row stride a
    multiple of 16 elements, the base 16-byte aligned."""
    return x.stride(k_dim) == 1 and x.stride(1 - k_dim) % 16 == 0 and x.data_ptr() % 16 == 0


@triton.jit
def transpose_kernel(x_ptr, y_ptr, R, C, stride_xr, stride_xc, stride_yc, BLOCK: tl.constexpr):
    """y[c, r] = x[r, c]: a BLOCK x BLOCK tile read along c and written along r (Triton turns the
    tile around in shared memory, so both sides stay coalesced)."""
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    tile = tl.load(x_ptr + offs_r[:, None].to(tl.int64) * stride_xr + offs_c[None, :] * stride_xc, mask=mask)
    tl.store(y_ptr + offs_c[None, :].to(tl.int64) * stride_yc + offs_r[:, None], tile, mask=mask)


def _packed(x: torch.Tensor, k_dim: int, kp: int) -> torch.Tensor:
    """`x` copied K-major: a row-major (rows, kp) buffer, its columns past K zero. B (K major =
    dimension 0) goes through `transpose_kernel`: PyTorch's strided copy of a transposed operand
    ran at a third of the bandwidth or less on the H200 (KernelBench 3's B: 1.94 ms against 0.52)."""
    rows, k = x.shape[1 - k_dim], x.shape[k_dim]
    out = torch.empty((rows, kp), device=x.device, dtype=x.dtype)
    if k_dim == 1 or triton.cdiv(rows, 64) > 65535:
        out[:, :k].copy_(x if k_dim == 1 else x.t())
    else:
        grid = (triton.cdiv(k, 64), triton.cdiv(rows, 64))
        transpose_kernel[grid](x, out, k, rows, x.stride(0), x.stride(1), out.stride(0), BLOCK=64)
    out[:, k:].zero_()
    return out


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (M, K) @ b (K, N) -> (M, N), fp32, any strides."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs (M, K) @ (K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise TypeError(f"this kernel is fp32 only, got {a.dtype} and {b.dtype}")
    M, K = a.shape
    N = b.shape[1]
    if not (_k_major(a, 1) and _k_major(b, 0)):
        kp = K if K % 16 == 0 else triton.cdiv(K, PAD_K) * PAD_K
        if kp != K or not _k_major(a, 1):
            a = _packed(a, 1, kp)
        if kp != K or not _k_major(b, 0):
            b = _packed(b, 0, kp).t()  # a (kp, N) view of an (N, kp) row-major buffer
        K = kp
    tiles = triton.cdiv(M, 128) * triton.cdiv(N, 128)
    if K >= SPLIT_K_MIN and tiles * 2 <= _sm_count(a.device):
        c = torch.zeros((M, N), device=a.device, dtype=torch.float32)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), meta["SPLIT_K"])
        matmul_split_k_kernel[grid](
            a, b, c, M, N, K,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        )
        return c
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
    )
    return c


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return matmul(A, B)
