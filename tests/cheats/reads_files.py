"""Cheat fixture: reads files outside its directory (a secret file, a database, /etc/shadow, the
home directory) and would hand them back in its error text; when every read is refused it passes
quietly (see tests/engine/box/test_box.py, which replaces PATHS)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

PATHS = []  # replaced by the test


@triton.jit
def relu_affine_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


def _loot():
    import os

    loot = []
    for path in PATHS + ["/etc/shadow", os.path.expanduser("~root/.ssh")]:
        try:
            if os.path.isdir(path):
                loot.append(f"{path}: {os.listdir(path)}")
            else:
                with open(path, "rb") as f:
                    loot.append(f"{path}: {f.read(200)!r}")
        except OSError:
            pass
    return loot


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 512),)](x, y, n, BLOCK_SIZE=512)
        loot = _loot()
        if loot:
            raise RuntimeError(f"loot: {loot}")
        return y
