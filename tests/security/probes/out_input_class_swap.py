"""Hostile candidate: swaps the class of the input tensor it was given to a subclass whose
__torch_function__ runs PyTorch when the harness packs the inputs after forward, and writes the
answer into its output then."""

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


class Sneaky(torch.Tensor):
    out = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            if cls.out is not None:
                out, cls.out = cls.out, None
                out.copy_(torch.relu(args[0]) * 2.0 + 1.0)
            return func(*args, **kwargs)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        launch(x, y)
        Sneaky.out = y
        x.__class__ = Sneaky
        return y
