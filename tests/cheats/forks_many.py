"""Cheat fixture: forks 200 processes that stay alive. It passes only when a process limit
refused the forks part of the way; otherwise its error says how far it got (see tests/engine/box/test_box.py)."""

import os as _o

import torch
import torch.nn as nn
import triton
import triton.language as tl

_leave = getattr(_o, "_ex" + "it")  # os._exit, past the static check


@triton.jit
def relu_affine_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


def _fork_200():
    r, w = _o.pipe()
    children, error = [], None
    for _ in range(200):
        try:
            pid = _o.fork()
        except OSError as e:
            error = e
            break
        if pid == 0:
            _o.close(w)
            _o.read(r, 1)  # until the parent closes the pipe
            _leave(0)
        children.append(pid)
    _o.close(w)
    _o.close(r)
    for pid in children:
        _o.waitpid(pid, 0)
    return len(children), error


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 512),)](x, y, n, BLOCK_SIZE=512)
        forked, error = _fork_200()
        if forked >= 10 and isinstance(error, BlockingIOError):
            return y
        raise RuntimeError(f"forked {forked} of 200 ({error!r})")
