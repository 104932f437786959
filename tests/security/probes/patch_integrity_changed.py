"""Hostile candidate: silences the harness's own check (Integrity.changed returns nothing), then
names every op the recorder sees after an allowed one; the kernel does relu, PyTorch the rest."""

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


guard = torch.sys.modules["kernelcraft.engine.watch.guard"]
guard.Integrity.changed = lambda self: []
guard.op_name = lambda func: "clone"


class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x) * 2.0 + 1.0
