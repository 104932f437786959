"""Hostile candidate: a TF32 tl.dot (wrong by fp32's tolerance on a GPU). During forward only, it
puts the interpreter's exact create_dot back (found through the emulation's globals) and puts the
emulation back before returning, so the guard's after-forward snapshot sees it in place."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.runtime import interpreter

_B = interpreter.InterpreterBuilder
_emulated = _B.create_dot
_exact = getattr(_emulated, "__globals__", {}).get("_installed", {}).get("create_dot", _emulated)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs[:, None] * N + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * N + offs[None, :])
    tl.store(c_ptr + offs[:, None] * N + offs[None, :], tl.dot(a, b))


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        _B.create_dot = _exact
        matmul_kernel[(1,)](a, b, c, N=64)
        _B.create_dot = _emulated
        return c
