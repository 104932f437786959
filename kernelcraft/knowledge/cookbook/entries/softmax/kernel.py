"""Softmax and log-softmax over the last dimension, fp32 arithmetic, any row length.

Rows up to BLOCK elements: one program per row loads the row once, y = exp(x - max) / sum
(tutorial 02), 8 bytes an element. Longer rows (KernelBench's 393216): the online softmax of
Milakov & Gimelshein: one pass keeps, per lane, a running max m and a sum s rescaled by
exp(m_old - m_new) whenever m grows; the lanes are merged at the end; a second pass writes
exp(x - m) / s (or x - m - log s). 12 bytes an element, against 16 for max, sum and normalise
as three passes. exp is computed as exp2(x * log2(e)).

On a GPU, long rows take one pass instead (8 bytes an element): a row is split into P chunks of
CHUNK elements (16384, else 8192 or 32768), one program each, launched together. Each program loads its chunk into
registers, writes the chunk's (max, sum of exp) to a workspace, adds 1 to the row's counter and
spins until all P have (a release add, acquire reads); it then merges the P partials and writes
its chunk from registers. The programs of a row wait on each other, so all P must be resident at
once: the GPU starts programs in grid order, so that holds when P is at most the number of SMs
(checked on the host, which takes the first chunk size that lets two rows run at once). Triton's interpreter runs programs one after another, where a wait would
never end: on the CPU the two-pass kernel runs.

Conditions: float input, softmax over the last dim (a dim in the middle: move it last first);
a non-contiguous input is made contiguous first.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
BLOCK = 4096
ONE_PASS_CHUNKS = ((16384, 4), (8192, 4), (32768, 16))  # (CHUNK, warps), in the order tried


@triton.jit
def softmax_short_kernel(x_ptr, y_ptr, N, LOG: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=float("-inf")).to(tl.float32)
    z = (x - tl.max(x, axis=0)) * 1.4426950408889634
    e = tl.exp2(z)
    s = tl.sum(e, axis=0)
    if LOG:
        y = (z - tl.log2(s)) * 0.6931471805599453
    else:
        y = e / s
    tl.store(y_ptr + row * N + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, N, LOG: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * N
    y_row = y_ptr + row * N
    offs = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32) * 1.4426950408889634
        m_new = tl.maximum(m, x)
        # a lane that has seen only -inf keeps s = 0 (no inf - inf)
        alpha = tl.where(m_new == float("-inf"), 1.0, tl.exp2(m - m_new))
        s = s * alpha + tl.where(m_new == float("-inf"), 0.0, tl.exp2(x - m_new))
        m = m_new
    m_row = tl.max(m, axis=0)
    s_row = tl.sum(s * tl.exp2(m - m_row), axis=0)
    log2_s = tl.log2(s_row)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        z = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32) * 1.4426950408889634 - m_row
        if LOG:
            y = (z - log2_s) * 0.6931471805599453
        else:
            y = tl.exp2(z - log2_s)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_one_pass_kernel(x_ptr, y_ptr, part_ptr, count_ptr, N, P, LOG: tl.constexpr, CHUNK: tl.constexpr, BLOCK_P: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // P).to(tl.int64)
    chunk = pid % P
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0) * 1.4426950408889634
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # a chunk all -inf: s = 0, no inf - inf
    # softmax keeps e, log-softmax keeps x (as loaded: a scaled copy would be a second live
    # tensor): one exp2 an element either way, and 64 registers of data a thread
    e = tl.exp2(x * 1.4426950408889634 - m_safe)
    part = part_ptr + (row * P + chunk) * 2
    tl.store(part, m)
    tl.store(part + 1, tl.sum(e, axis=0))
    tl.debug_barrier()
    tl.atomic_add(count_ptr + row, 1, sem="release")
    while tl.atomic_add(count_ptr + row, 0, sem="acquire") < P:
        pass
    offs_p = tl.arange(0, BLOCK_P)
    p_mask = offs_p < P
    parts = part_ptr + (row * P + offs_p) * 2
    ms = tl.load(parts, mask=p_mask, other=float("-inf"), cache_modifier=".cg")
    ss = tl.load(parts + 1, mask=p_mask, other=0.0, cache_modifier=".cg")
    m_row = tl.max(ms, axis=0)
    s_row = tl.sum(ss * tl.exp2(ms - m_row), axis=0)
    if LOG:
        y = x - (m_row + tl.log2(s_row)) * 0.6931471805599453
    else:
        y = e * (tl.exp2(m - m_row) / s_row)
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _one_pass_chunk(x: torch.Tensor, N: int) -> tuple[int, int]:
    """(CHUNK, warps) of the one-pass kernel for rows of N elements, or (0, 0) where it must not
    run: on the CPU (the interpreter), or more programs a row than SMs (they could not all be
    resident). Measured on the H200 (KernelBench 23): 16384 elements at 4 warps 3.22 ms, 8192 at
    4 3.70, 16384 at 8 3.56, 32768 at 16 3.61; while two rows fit at once."""
    if x.device.type == "cpu":  # Triton's interpreter runs programs one at a time: no spin-wait
        return 0, 0
    # In `kernelcraft compile` (meta tensors seen as CUDA) this is the GPU's way, with the H200's 132 SMs.
    try:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    except (AssertionError, RuntimeError, ValueError):  # no CUDA here: compile's tensors seen as CUDA
        sms = 132
    for room in (sms // 2, sms):
        for chunk, warps in ONE_PASS_CHUNKS:
            if triton.cdiv(N, chunk) <= room:
                return chunk, warps
    return 0, 0


def softmax(x: torch.Tensor, dim: int = -1, log: bool = False) -> torch.Tensor:
    """torch.softmax(x, dim) (log_softmax when `log`)."""
    if not x.is_floating_point():
        raise TypeError(f"softmax takes a floating-point tensor, got {x.dtype}")
    dim = dim % x.dim()
    moved = dim != x.dim() - 1
    if moved:
        x = x.movedim(dim, -1)
    x = x.contiguous()
    N = x.shape[-1]
    rows = x.numel() // N if N else 0
    y = torch.empty_like(x)
    if N <= BLOCK:
        block = triton.next_power_of_2(N)
        softmax_short_kernel[(rows,)](x, y, N, LOG=log, BLOCK_N=block, num_warps=min(16, max(4, block // 512)))
    elif (chunk := _one_pass_chunk(x, N))[0] and rows:
        p = triton.cdiv(N, chunk[0])
        part = torch.empty((rows, p, 2), device=x.device, dtype=torch.float32)
        count = torch.zeros((rows,), device=x.device, dtype=torch.int32)
        softmax_one_pass_kernel[(rows * p,)](
            x, y, part, count, N, p, LOG=log, CHUNK=chunk[0], BLOCK_P=triton.next_power_of_2(p), num_warps=chunk[1]
        )
    else:
        softmax_online_kernel[(rows,)](x, y, N, LOG=log, BLOCK=BLOCK, num_warps=8)
    return y.movedim(-1, dim) if moved else y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x, dim=1)
