"""Honest, but beyond what the fresh replay re-derives: the scale is `1.0 / math.sqrt(m)` of a value
read back from a kernel. `math.sqrt` returns a plain number (the trace of the read is lost), so the
fresh replay uses the trial's scale and the answer is wrong there; the verdict's words must say
why and what to write instead (`** 0.5`), not only that the host computed the answer."""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def absmax_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.max(tl.abs(x), axis=0))


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * scale, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        n = x.numel()
        peak = torch.empty(1, device=x.device, dtype=torch.float32)
        absmax_kernel[(1,)](x, peak, n, BLOCK=256)
        m = peak.item()
        scale = 1.0 / math.sqrt(m * m)
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(n, 64),)](x, y, n, scale, BLOCK=64)
        return y
