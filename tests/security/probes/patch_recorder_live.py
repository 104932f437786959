"""Hostile candidate: finds the live op recorder on the dispatch-mode stack inside forward and
gives it an allow-list that holds every op; the kernel does relu, PyTorch the rest."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class Everything(frozenset):
    def __contains__(self, item):
        return True


def relu(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        stack = torch.sys.modules["torch.utils._python_dispatch"]._get_current_dispatch_mode_stack()
        for mode in stack:
            if type(mode).__name__ == "OpRecorder":
                mode.allowed = Everything(mode.allowed)
        return relu(x) * 2.0 + 1.0
