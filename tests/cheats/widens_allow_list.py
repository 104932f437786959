"""Cheat fixture: a helper module it imports widens the fallback guard's allow-list, then forward
computes in PyTorch next to a decoy launch."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

import tests.cheats.allowlist_helper  # noqa: F401


@triton.jit
def noop_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        noop_kernel[(1,)](x, x.numel(), BLOCK=16)
        return torch.relu(x) * 2.0 + 1.0
