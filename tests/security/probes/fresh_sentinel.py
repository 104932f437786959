"""Probe (fresh replay): a sentinel kernel's result, read on the host with `.item()`, tells forward's
host code whether it runs on the values it was given (a real run) or on anything else; on the
values it was given it hands kernels the answer it computed in numpy, otherwise it stores the
sentinel. The read is recorded: the fresh replay re-reads it."""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def first_kernel(x_ptr, out_ptr):
    tl.store(out_ptr, tl.load(x_ptr))


@triton.jit
def store_kernel(out_ptr, value, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full([BLOCK], value, tl.float32), mask=offs < 1)


class ModelNew(nn.Module):
    def forward(self, x):
        probe = torch.empty(1, device=x.device, dtype=x.dtype)
        first_kernel[(1,)](x, probe)
        seen = probe.item()
        host = x.detach().cpu().numpy().astype(np.float64)
        real = seen == float(host[0, 0])
        rows = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        for i in range(x.shape[0]):
            store_kernel[(1,)](rows[i:], float(host[i].sum()) if real else seen, BLOCK=16)
        total = torch.empty((), device=x.device, dtype=x.dtype)
        store_kernel[(1,)](total, float(host.sum()) if real else seen, BLOCK=16)
        return rows, total
