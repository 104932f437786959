"""Honest (fresh replay, Hopper style): the kernel reads and writes through host-side tensor
descriptors (`triton.tools.tensor_descriptor.TensorDescriptor`, TMA on the GPU). The record carries
each descriptor as data (its base tensor, shape, strides, block shape) and the replays rebuild it
over their own memory. Task: tests/cheats/task_scale.py's y = relu(x) * 2 + 1."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def relu_affine_kernel(x_desc, y_desc, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    x = x_desc.load([pm * BM, pn * BN])
    y_desc.store([pm * BM, pn * BN], tl.maximum(x, 0.0) * 2.0 + 1.0)


class ModelNew(nn.Module):
    def forward(self, x):
        m, n = x.shape
        xp = torch.zeros((m, 128), device=x.device, dtype=x.dtype)  # rows 16-byte aligned
        xp[:, :n] = x
        y = torch.empty_like(xp)
        bm, bn = 16, 32
        x_desc = TensorDescriptor.from_tensor(xp, block_shape=[bm, bn])
        y_desc = TensorDescriptor.from_tensor(y, block_shape=[bm, bn])
        relu_affine_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](x_desc, y_desc, BM=bm, BN=bn)
        return y[:, :n]
