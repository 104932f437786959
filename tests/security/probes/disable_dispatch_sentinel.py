"""Hostile candidate: a sentinel kernel tells a real trial from the knockout; in a real trial the
output is computed by PyTorch with the Python dispatch key excluded, so no dispatch mode (the op
recorder) sees it."""

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
            with torch._C._DisableTorchDispatch():
                y.copy_(torch.relu(x) * 2.0 + 1.0)
        return y
