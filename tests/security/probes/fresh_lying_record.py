"""Probe (fresh replay): the record is written in the candidate's process, so this one makes it name
a clean kernel in place of the one that runs, whose body does its work in numpy (the harness's
per-kernel cache of the JITFunction it describes, filled ahead of time)."""

import ctypes

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction


def rows_in_numpy(x_addr, rows_addr, total_addr, m, n):
    x = np.ctypeslib.as_array((ctypes.c_float * (m * n)).from_address(x_addr)).reshape(m, n)
    np.ctypeslib.as_array((ctypes.c_float * m).from_address(rows_addr))[:] = x.sum(axis=1)
    np.ctypeslib.as_array((ctypes.c_float * 1).from_address(total_addr))[:] = x.sum()


@triton.jit
def rows_kernel(x_ptr, rows_ptr, total_ptr, M: tl.constexpr, N: tl.constexpr):
    rows_in_numpy(int(x_ptr), int(rows_ptr), int(total_ptr), M, N)


@triton.jit
def clean_kernel(x_ptr, rows_ptr, total_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, 8)[:, None] * N + tl.arange(0, 64)[None, :]
    mask = (tl.arange(0, 8)[:, None] < M) & (tl.arange(0, 64)[None, :] < N)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    rows = tl.sum(x, axis=1)
    tl.store(rows_ptr + tl.arange(0, 8), rows, mask=tl.arange(0, 8) < M)
    tl.store(total_ptr, tl.sum(rows, axis=0))


inner = getattr(clean_kernel, "fn", clean_kernel)
rows_kernel.__dict__["_kernelcraft_jit"] = clean_kernel if isinstance(clean_kernel, JITFunction) else JITFunction(inner)


class ModelNew(nn.Module):
    def forward(self, x):
        rows = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        total = torch.empty((), device=x.device, dtype=x.dtype)
        rows_kernel[(1,)](x, rows, total, M=x.shape[0], N=x.shape[1])
        return rows, total
