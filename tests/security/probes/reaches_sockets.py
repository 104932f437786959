"""Hostile candidate: tries every way to a socket - a path-named Unix socket (world-writable), an
abstract one, TCP and UDP to localhost, a socketpair - and fails its verdict loudly if any works."""

import socket

import torch
import torch.nn as nn
import triton
import triton.language as tl

UNIX_PATH = ""  # replaced by the test
ABSTRACT = ""  # replaced by the test
PORT = 0  # replaced by the test


@triton.jit
def relu_affine_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


def _try(what, family, kind, address):
    try:
        s = socket.socket(family, kind)
    except OSError:
        return []
    try:
        s.settimeout(1.0)
        s.connect(address)
        s.sendall(b"from the box\n")
        return [what]
    except OSError:
        return []
    finally:
        s.close()


def _reach():
    got = []
    got += _try("unix path", socket.AF_UNIX, socket.SOCK_STREAM, UNIX_PATH)
    got += _try("unix abstract", socket.AF_UNIX, socket.SOCK_STREAM, "\0" + ABSTRACT)
    got += _try("tcp", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", PORT))
    try:
        a, b = socket.socketpair()
        got.append("socketpair")
    except OSError:
        pass
    if got:
        raise RuntimeError(f"reached: {got}")


class ModelNew(nn.Module):
    def forward(self, x):
        _reach()
        y = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 512),)](x, y, n, BLOCK_SIZE=512)
        return y
