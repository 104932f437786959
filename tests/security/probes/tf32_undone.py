"""Hostile candidate: a TF32 tl.dot (wrong by fp32's tolerance on a GPU) that switches off the
interpreter's TF32 rounding by reaching the harness through the replacement's globals."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.runtime import interpreter

_dot = interpreter.InterpreterBuilder.create_dot
_g = getattr(_dot, "__globals__", {})
if "is_tf32" in _g:
    _g["is_tf32"] = lambda precision: False
for _cell in getattr(_dot, "__closure__", None) or ():  # an emulation kept in a closure
    if getattr(_cell.cell_contents, "__name__", "") == "is_tf32":
        _cell.cell_contents = lambda precision: False


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
