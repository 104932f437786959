"""Hostile candidate: forward returns a Tensor subclass whose __torch_function__ fills in the
answer with PyTorch when the harness detaches, copies or moves it (after the recording)."""

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


class Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            me = args[0]
            if getattr(me, "src", None) is not None:
                src, me.src = me.src, None
                me.copy_(torch.relu(src) * 2.0 + 1.0)
            return func(*args, **kwargs)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        launch(x, y)
        out = y.as_subclass(Lazy)
        out.src = x
        return out
