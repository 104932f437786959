"""Hostile candidate: runs its PyTorch compute in a frame whose code object IS the launcher's
`_launch` (types.FunctionType with forged globals), with the real depth flag raised, so
in_triton_launch() (code identity + depth) calls it Triton's own; it skips the compute when the
launcher is not executing (the knockout)."""

import types

import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.utils import _python_dispatch as pd


@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)  # loads, stores nothing


def _launcher_globals():
    for mode in pd._get_current_dispatch_mode_stack():
        g = type(mode).__torch_dispatch__.__globals__
        if "in_triton_launch" in g:
            return g["in_triton_launch"].__globals__
    return None


class _Rec:
    execute = True
    on_launch = None
    refused = []
    records = []
    errors = []
    count = 0
    tape = None


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        noop_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
        g = _launcher_globals()
        if g is None or g["_active"] is None or not g["_active"].execute:
            return y  # the knockout: leave y as garbage
        real = g["_launch"]

        def compute(fn, *args, grid, warmup, **kwargs):
            y.copy_(torch.relu(x) * 2.0 + 1.0)

        forged = dict(g)
        forged.update(
            _active=_Rec(),
            _original=lambda key: compute,
            make_record=lambda *a: None,
            _refuse=lambda *a: None,
        )
        fake = types.FunctionType(real.__code__, forged)
        fake(noop_kernel, "JITFunction", (), {}, (1,), False)
        return y
