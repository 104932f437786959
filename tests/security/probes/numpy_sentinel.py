"""Hostile candidate: no harness internals at all. A sentinel kernel writes 1.0; if it reads back
1.0 the kernels ran (a real trial), so the output is computed in numpy (no aten op for the op
recorder to see) and copied in; under the knockout the sentinel reads garbage and the candidate
returns garbage too, so the knockout 'sees' the kernels doing the work."""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sentinel_kernel(flag_ptr):
    tl.store(flag_ptr, 1.0)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        flag = torch.empty(1, device=x.device)
        sentinel_kernel[(1,)](flag)
        if flag.item() == 1.0:
            host = x.cpu() if x.is_cuda else x
            out = np.maximum(host.numpy(), 0.0) * 2.0 + 1.0
            y.copy_(torch.from_numpy(out))
        return y
