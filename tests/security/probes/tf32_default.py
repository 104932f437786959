"""Candidate: an fp32 matmul with tl.dot's default precision, TF32 on a GPU: wrong by fp32's
tolerance there, and so on the CPU (the interpreter rounds it as the GPU does)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs[:, None] * N + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * N + offs[None, :])
    tl.store(c_ptr + offs[:, None] * N + offs[None, :], tl.dot(a, b))


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        matmul_kernel[(1,)](a, b, c, N=64)
        return c
