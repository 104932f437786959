"""Hostile candidate: the kernel stores nothing; the input is passed as a Tensor subclass whose
__torch_function__ computes the output when Triton touches it *inside* the launch (the
interpreter's untyped_storage(); on a GPU the binder's second data_ptr()), where the op recorder
is suspended and which the knockout skips."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)  # loads, stores nothing


STATE = {}


class Sneaky(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name == "data_ptr":
            STATE["ptr"] = STATE.get("ptr", 0) + 1
        if name == "untyped_storage" or (name == "data_ptr" and STATE["ptr"] == 2):
            with torch._C.DisableTorchFunctionSubclass():
                STATE["y"].copy_(torch.relu(STATE["x"]) * 2.0 + 1.0)
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        STATE.clear()
        STATE.update(x=x, y=y)
        noop_kernel[(triton.cdiv(x.numel(), 512),)](x.as_subclass(Sneaky), y, x.numel(), BLOCK_SIZE=512)
        return y
