"""Hostile candidate: forward returns a tuple subclass whose __len__ and __iter__ compute the
answer in PyTorch when the harness reads them (after the recording)."""

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


class Lazy(tuple):
    def __len__(self):
        self[0].copy_(torch.relu(self.x) * 2.0 + 1.0)
        return 1

    def __iter__(self):
        len(self)
        return tuple.__iter__(self)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        launch(x, y)
        out = Lazy((y,))
        out.x = x
        return out
