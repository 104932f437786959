"""Probe (GPU check): the trials run a kernel the GPU compiler refuses (it reads a plain Python
float); where Triton's interpreter is off (the compile stage's own run of forward, which the GPU
check used to compile) forward launches a decoy that compiles instead."""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

SCALE = 2.0


@triton.jit
def k(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * SCALE + 1.0, mask=offs < n)


@triton.jit
def decoy(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        kernel = k if os.environ.get("TRITON_INTERPRET") == "1" else decoy
        kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)
        return y
