"""Cheat fixture: caches results (see tests/engine/host/test_verify_cheats.py for the expected verdict)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_affine_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


CACHE = {}


class ModelNew(nn.Module):
    def forward(self, x):
        key = tuple(x.shape)
        y = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 512),)](x, y, n, BLOCK_SIZE=512)
        if key in CACHE:
            return CACHE[key].clone()
        CACHE[key] = y.clone()
        return y
