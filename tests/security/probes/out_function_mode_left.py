"""Hostile candidate: leaves a torch function mode active when forward returns; the mode fills in
the answer with PyTorch when the harness detaches or copies the output, after the recording."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.overrides import TorchFunctionMode


@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)  # loads, stores nothing


class Later(TorchFunctionMode):
    def __init__(self, x, y):
        super().__init__()
        self.x, self.y = x, y

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.y is not None:
            y, self.y = self.y, None
            with self:
                pass
            y.copy_(torch.relu(self.x) * 2.0 + 1.0)
        return func(*args, **kwargs)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        noop_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
        Later(x, y).__enter__()
        return y
