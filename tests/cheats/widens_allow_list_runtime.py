"""Cheat fixture: writes a helper module at import time (no static check can read it) that widens
the fallback guard's allow-list, imports it, then computes in PyTorch next to a decoy launch."""

import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

with open("kc_allow_helper.py", "w") as _f:
    _f.write(
        "from kernelcraft.engine.watch import guard\n"
        "guard.ALLOWED_OPS = guard.ALLOWED_OPS | {'mul', 'add', 'relu', 'clamp_min'}\n"
    )
sys.path.insert(0, ".")

import kc_allow_helper  # noqa: E402,F401


@triton.jit
def noop_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        noop_kernel[(1,)](x, x.numel(), BLOCK=16)
        return torch.relu(x) * 2.0 + 1.0
