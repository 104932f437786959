"""Hostile candidate: reaches the launcher's table of original run methods through the op
recorder's __globals__, swaps in a function that computes the output with PyTorch (it then runs
inside the launch: unrecorded, and skipped by the knockout), and puts the table back before
returning, so the guard's after-the-fact snapshot sees nothing."""

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


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        g = _launcher_globals()
        saved = dict(g["_originals"]) if g else {}
        if g:
            for key, real in saved.items():
                if key[1] == "run":

                    def evil(fn, *args, _real=real, **kwargs):
                        y.copy_(torch.relu(x) * 2.0 + 1.0)
                        return _real(fn, *args, **kwargs)

                    g["_originals"][key] = evil
        noop_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
        if g:
            g["_originals"].update(saved)
        return y
