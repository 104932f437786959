"""Hostile candidate: the kernel stores nothing; an instance attribute shadows a method that
Triton's own run() calls inside the launch (the interpreter's `rewrite`), and computes the output
with PyTorch there."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)  # loads, stores nothing


STATE = {}
_real_rewrite = type(noop_kernel).__dict__.get("rewrite")


def _rewrite():
    STATE["y"].copy_(torch.relu(STATE["x"]) * 2.0 + 1.0)
    return _real_rewrite(noop_kernel)


if _real_rewrite is not None:  # the interpreter's InterpretedFunction
    noop_kernel.__dict__["rewrite"] = _rewrite


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        STATE.update(x=x, y=y)
        noop_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
        return y
