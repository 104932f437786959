"""Probe (GPU check, later trials): forward's first call, the one whose record the GPU check
compiled and the one the compile stage's discovery runs, launches a kernel that compiles; every
later call launches another that reads a module-level Python float, which Triton's interpreter
runs and the GPU compiler refuses (NameError: Cannot access global variable). The fresh replay
rebuilds and runs that kernel (a recorded constant), so only compiling the later trials' kernels
catches it."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

SCALE = 2.0


@triton.jit
def relu_affine_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=offs < n)


@triton.jit
def relu_affine_global_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * SCALE + 1.0, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = torch.empty_like(x)
        n = x.numel()
        kernel = relu_affine_kernel if self.calls == 1 else relu_affine_global_kernel
        kernel[(triton.cdiv(n, 512),)](x, y, n, BLOCK=512)
        return y
