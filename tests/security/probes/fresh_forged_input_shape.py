"""Probe (fresh replay): the answer computed in numpy on the host and handed to kernels as scalars
(as `fresh_host_scalar.py`), and forward's record made to claim another shape for the input (the
live recorder's tape reached through the dispatch-mode stack; the input itself is left alone), so
that the reference, comparing its fresh inputs with the record's claim, would think the task's
inputs change shape between draws and skip the re-run."""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack


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
        for mode in _get_current_dispatch_mode_stack():
            order = getattr(getattr(mode, "tape", None), "input_order", None)
            if order:
                order[0] = order[0][:1]  # a view: the record says [1, 40]; the input stays [6, 40]
        return rows, total
