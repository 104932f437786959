"""Elementwise activations, one pass: y = f(x) for the activations of KernelBench level 1.

A flat 1-D grid of BLOCK-element programs over the contiguous tensor (tutorial 01): 8 bytes an
element, the minimum, so the time is the bandwidth's (6.4 GB in and out for KernelBench's
1.6G-element inputs: ~3 ms at 4.3 TB/s). BLOCK = 1024 with 4 warps gives each thread 8 elements,
two 16-byte loads. On the H200 (bench/probe_memory_bound.py, elementwise) this and 2048 with 4
warps ran at a plain copy's speed, as torch.compile does (GELU 3.03 ms, a clone 3.03 ms); larger
blocks, 8 to 16 warps, persistent grids and streaming cache hints were 0-30% slower. Math in fp32.

ACT: relu, leaky_relu (ALPHA), sigmoid, tanh, swish, gelu (erf), gelu_tanh (MinGPT's NewGELU),
selu, elu (ALPHA), softplus, softsign, hardsigmoid, hardtanh (ALPHA = min, BETA = max).
Conditions: float input (any dtype; non-contiguous inputs are made contiguous first).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

ACTS = (
    "relu", "leaky_relu", "sigmoid", "tanh", "swish", "gelu", "gelu_tanh",
    "selu", "elu", "softplus", "softsign", "hardsigmoid", "hardtanh",
)
BLOCK = 1024


@triton.jit
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def activation_kernel(x_ptr, y_ptr, n, ALPHA, BETA, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    if ACT == "relu":
        y = tl.maximum(x, 0.0)
    elif ACT == "leaky_relu":
        y = tl.where(x >= 0, x, x * ALPHA)
    elif ACT == "sigmoid":
        y = tl.sigmoid(x)
    elif ACT == "tanh":
        y = _tanh(x)
    elif ACT == "swish":
        y = x * tl.sigmoid(x)
    elif ACT == "gelu":
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    elif ACT == "gelu_tanh":
        y = 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    elif ACT == "selu":
        y = 1.0507009873554805 * tl.where(x > 0, x, 1.6732632423543772 * (tl.exp(x) - 1.0))
    elif ACT == "elu":
        y = tl.where(x > 0, x, ALPHA * (tl.exp(x) - 1.0))
    elif ACT == "softplus":  # PyTorch's threshold: x above 20 is returned as is
        y = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    elif ACT == "softsign":
        y = x / (1.0 + tl.abs(x))
    elif ACT == "hardsigmoid":
        y = tl.minimum(tl.maximum(x / 6.0 + 0.5, 0.0), 1.0)
    else:  # hardtanh
        y = tl.minimum(tl.maximum(x, ALPHA), BETA)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def activation(x: torch.Tensor, act: str, alpha: float = 0.0, beta: float = 0.0) -> torch.Tensor:
    """f(x) elementwise; alpha: leaky_relu's slope, elu's alpha, hardtanh's min (beta its max)."""
    if act not in ACTS:
        raise ValueError(f"activation {act!r}: use one of {', '.join(ACTS)}")
    if not x.is_floating_point():
        raise TypeError(f"activations take floating-point tensors, got {x.dtype}")
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    activation_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, float(alpha), float(beta), ACT=act, BLOCK=BLOCK, num_warps=4)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return activation(x, "gelu")
