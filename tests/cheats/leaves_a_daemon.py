"""Cheat fixture: at import, a double fork and setsid leave a daemon that keeps appending to a
marker file, and the candidate itself passes (see tests/engine/box/test_box.py, which replaces MARKER)."""

import os as _o
import time as _t

import torch
import torch.nn as nn
import triton
import triton.language as tl

MARKER = ""  # replaced by the test
NAME = ""  # replaced by the test: the daemon's process name, for the test to look for it
_leave = getattr(_o, "_ex" + "it")  # os._exit, past the static check

if _o.fork() == 0:
    _o.setsid()
    if _o.fork() == 0:
        if NAME:
            import ctypes

            ctypes.CDLL(None).prctl(15, NAME.encode(), 0, 0, 0)  # PR_SET_NAME
        for _ in range(1200):
            with open(MARKER, "a") as _f:
                _f.write(f"{_t.time()}\n")
            _t.sleep(0.05)
    _leave(0)


@triton.jit
def relu_affine_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 512),)](x, y, n, BLOCK_SIZE=512)
        return y
