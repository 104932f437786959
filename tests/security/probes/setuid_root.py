"""Hostile candidate: leaves a setuid file in /dev/shm and in its own directory, and fills
/dev/shm; it fails its verdict (loudly) if it runs as root or if either file is setuid-root."""

import os
import stat

import torch
import torch.nn as nn
import triton
import triton.language as tl

TOKEN = ""  # replaced by the test


@triton.jit
def relu_affine_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


def _plant():
    found = []
    if os.getuid() == 0 or os.geteuid() == 0:
        found.append(f"runs as uid {os.getuid()}/{os.geteuid()}")
    for path in (f"/dev/shm/{TOKEN}-suid", f"{TOKEN}-suid"):
        try:
            with open(path, "wb") as f:
                f.write(b"#!/bin/sh\nid\n")
            os.chmod(path, 0o4755)
            st = os.stat(path)
            if st.st_uid == 0 and st.st_mode & stat.S_ISUID:
                found.append(f"setuid-root {path}")
        except OSError:
            pass
    try:
        with open(f"/dev/shm/{TOKEN}-fill", "wb") as f:
            for _ in range(64):
                f.write(b"\0" * (8 << 20))
    except OSError:
        pass
    if found:
        raise RuntimeError(f"root in the box: {found}")


class ModelNew(nn.Module):
    def forward(self, x):
        _plant()
        y = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 512),)](x, y, n, BLOCK_SIZE=512)
        return y
