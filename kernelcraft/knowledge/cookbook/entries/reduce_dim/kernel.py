"""Reduction over one dimension (sum, mean, max, min, prod), fp32 accumulation.

The input is seen as (OUTER, R, INNER), contiguous, reducing R. Each program owns BLOCK_I
adjacent INNER positions of one OUTER index and walks R in BLOCK_R-row steps, keeping a
BLOCK_R x BLOCK_I tile of partial results in registers and reducing it once at the end: loads
are coalesced along INNER (or along R when INNER is 1, which Triton specialises), and a sum of R
terms is BLOCK_R-way pairwise, so it stays close to PyTorch's.

Bytes 4*(OUTER*R*INNER + OUTER*INNER): one read of the input, memory-bound.
Conditions: float input (fp32 accumulation, output in the input's dtype); any dim (negative
too); a non-contiguous input is made contiguous first; max/min do not propagate NaN.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

OPS = ("sum", "mean", "max", "min", "prod")


@triton.jit
def reduce_dim_kernel(
    x_ptr, y_ptr,
    R, INNER, scale,
    OP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr,
):
    # the INNER blocks of one OUTER index are adjacent programs: running together, they read
    # each R row of its slab whole (DRAM pages stay open), not 1/num_blocks of many slabs' rows
    blocks = tl.cdiv(INNER, BLOCK_I)
    outer = (tl.program_id(0) // blocks).to(tl.int64)
    offs_i = (tl.program_id(0) % blocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    offs_r = tl.arange(0, BLOCK_R)
    i_mask = offs_i < INNER
    base = x_ptr + outer * R * INNER
    if OP == "max":
        acc = tl.full((BLOCK_R, BLOCK_I), float("-inf"), dtype=tl.float32)
    elif OP == "min":
        acc = tl.full((BLOCK_R, BLOCK_I), float("inf"), dtype=tl.float32)
    elif OP == "prod":
        acc = tl.full((BLOCK_R, BLOCK_I), 1.0, dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_R, BLOCK_I), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        rows = r0 + offs_r
        mask = (rows[:, None] < R) & i_mask[None, :]
        ptrs = base + rows[:, None].to(tl.int64) * INNER + offs_i[None, :]
        if OP == "max":
            x = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
            acc = tl.maximum(acc, x)
        elif OP == "min":
            x = tl.load(ptrs, mask=mask, other=float("inf")).to(tl.float32)
            acc = tl.minimum(acc, x)
        elif OP == "prod":
            x = tl.load(ptrs, mask=mask, other=1.0).to(tl.float32)
            acc = acc * x
        else:
            x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
            acc += x
    if OP == "max":
        y = tl.max(acc, axis=0)
    elif OP == "min":
        y = tl.min(acc, axis=0)
    elif OP == "prod":
        y = tl.reduce(acc, 0, _mul)
    else:
        y = tl.sum(acc, axis=0) * scale  # scale is 1/R for a mean
    tl.store(y_ptr + outer * INNER + offs_i, y.to(y_ptr.dtype.element_ty), mask=i_mask)


@triton.jit
def _mul(a, b):
    return a * b


def reduce_dim(x: torch.Tensor, dim: int, op: str = "sum", keepdim: bool = False) -> torch.Tensor:
    """torch.<op>(x, dim, keepdim) for op in sum, mean, max, min, prod (values only)."""
    if op not in OPS:
        raise ValueError(f"op {op!r}: use one of {', '.join(OPS)}")
    if not x.is_floating_point():
        raise TypeError(f"this kernel reduces floating-point tensors, got {x.dtype}")
    dim = dim % x.dim()
    x = x.contiguous()
    shape = list(x.shape)
    R = shape[dim]
    outer = 1
    for s in shape[:dim]:
        outer *= s
    inner = 1
    for s in shape[dim + 1 :]:
        inner *= s
    out_shape = shape[:dim] + ([1] if keepdim else []) + shape[dim + 1 :]
    y = torch.empty(out_shape, device=x.device, dtype=x.dtype)
    if inner == 1:  # a row reduction: the tile runs along R
        block_i, block_r, warps = 1, 2048, 8
    else:
        # a 64 x 128 tile: 2.07 ms on KernelBench 47 on the H200, against 2.21 for 32 x 128
        block_i = min(128, triton.next_power_of_2(inner))
        block_r, warps = max(1, 8192 // block_i), 8
    grid = (outer * triton.cdiv(inner, block_i),)
    reduce_dim_kernel[grid](
        x, y, R, inner, 1.0 / R if op == "mean" else 1.0,
        OP=op, BLOCK_R=block_r, BLOCK_I=block_i, num_warps=warps,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return reduce_dim(x, self.dim, "sum", keepdim=True)
