"""GEMM + epilogue, fp32: y = act((x @ W^T + bias) * scale + shift), one kernel.

`nn.Linear` followed by elementwise ops (KernelBench level 2's Gemm_*/Matmul_* tasks): the
epilogue runs on the accumulator in registers, so the output is written once instead of once
per op. W is read as stored by nn.Linear, (N, K) row-major, which is the K-major layout the
tensor cores want for the B operand: no transpose is made.

The affine part folds the level-2 variants: `* m` is scale=m; `/ d` is scale=1/d; `- s) * m` is
scale=m, shift=-s*m; `y * s + y` (a residual of itself) is scale=1+s. ACTIVATION: none, relu,
leaky_relu (SLOPE), gelu (erf), gelu_tanh, sigmoid, silu, tanh.

Precision: 3xTF32 (`input_precision="tf32x3"`), near-fp32 on tensor cores.
FLOPs 2*M*N*K; bytes 4*(M*K + N*K + M*N).
Conditions: fp32; x (M, K) with any strides; bias of N elements or None.
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
ACTIVATIONS = ("none", "relu", "leaky_relu", "gelu", "gelu_tanh", "sigmoid", "silu", "tanh")


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


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def linear_epilogue_kernel(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    scale, shift,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, SLOPE: tl.constexpr,
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
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)  # W^T tile, K-major
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

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
    y = torch.empty((M, N), device=x.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    linear_epilogue_kernel[grid](
        x, weight, bias if bias is not None else y, y, M, N, K,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
        float(scale), float(shift),
        HAS_BIAS=bias is not None, ACTIVATION=activation, SLOPE=float(slope),
    )
    return y


class ModelNew(nn.Module):
    """Linear without bias, then + bias and ReLU (parameters made in the reference's order)."""

    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return linear_epilogue(x, self.gemm.weight, self.bias.reshape(-1), activation="relu")
