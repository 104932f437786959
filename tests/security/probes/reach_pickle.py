"""Hostile candidate: a pickle whose GLOBAL opcode imports the harness (torch.load unpickles)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def relu(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
    return y

import io

payload = b"ckernelcraft.engine.watch.guard\nOpRecorder\n."
recorder = torch.load(io.BytesIO(payload), weights_only=False)
setattr(recorder, "__init__", lambda self, *a: None)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x) * 2.0 + 1.0
