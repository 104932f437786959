"""Hostile candidate: forward returns a list subclass whose __iter__ and __getitem__ compute the
answer in PyTorch: when the harness reads the outputs, after the op recorder has closed."""

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


class Lazy(list):
    def __init__(self, x, y):
        super().__init__([y])
        self.x, self.y = x, y

    def _fill(self):
        self.y.copy_(torch.relu(self.x) * 2.0 + 1.0)

    def __iter__(self):
        self._fill()
        return super().__iter__()

    def __getitem__(self, i):
        self._fill()
        return super().__getitem__(i)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        launch(x, y)
        return Lazy(x, y)
