"""Hostile candidate: forward returns an object that says it is a tensor (its __class__ is
torch.Tensor) and turns into the PyTorch answer when the harness reads its shape or data."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)  # loads, stores nothing


def launch(x, y):
    noop_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)


class Liar:
    def __init__(self, x):
        self.x = x

    @property
    def __class__(self):
        return torch.Tensor

    def __getattr__(self, name):
        return getattr(torch.relu(self.x) * 2.0 + 1.0, name)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        launch(x, y)
        return Liar(x)
