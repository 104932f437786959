"""GroupNorm, fp32 statistics, any group size: x (N, C, *spatial) in G groups of C/G channels.

A group of an NCHW tensor is one contiguous segment of L = (C/G) * S elements. Segments up to
CHUNK elements: one kernel, one program per segment, x read once from memory. Longer segments
(KernelBench's 35_GroupNorm_: 896 segments of 2M elements) are split so that every SM is busy:
  1. per (segment, chunk): the chunk's mean and M2 from registers;
  2. per segment: Chan's combination into mean and 1/std;
  3. per (segment, chunk): y = (x - mean) * rstd * weight[c] + bias[c].
12 bytes an element (x read twice, y written once), against 8 for the fused short path.

On a GPU, long segments take one pass instead (8 bytes an element): a segment's P chunks are
P programs launched together; each loads its chunk into registers, writes the chunk's mean and
M2 to a workspace, adds 1 to the segment's counter (release) and spins until all P have
(acquire); it then combines the P partials (Chan) and normalises its chunk from registers. The
programs of a segment wait on each other, so all P must be resident at once: the GPU starts
programs in grid order, so that holds when P is at most the number of SMs (checked on the
host: 16384 elements at 4 warps, else 8192 at 4 or 32768 at 16, the first that lets two
segments run at once).
Triton's interpreter runs programs one after another, where a wait would never end: on the CPU
the three kernels run.

Conditions: float input; C divisible by G (as nn.GroupNorm requires); affine or not; a
non-contiguous input is made contiguous first.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNK = 8192


@triton.jit
def groupnorm_fused_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, L, S, CG, G, eps,
    HAS_AFFINE: tl.constexpr, BLOCK: tl.constexpr,
):
    seg = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < L
    x = tl.load(x_ptr + seg * L + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / L
    d = tl.where(mask, x - mean, 0.0)
    y = d / tl.sqrt(tl.sum(d * d, axis=0) / L + eps)
    if HAS_AFFINE:
        c = (seg % G) * CG + offs // S
        y = y * tl.load(w_ptr + c, mask=mask) + tl.load(b_ptr + c, mask=mask)
    tl.store(y_ptr + seg * L + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def chunk_stats_kernel(x_ptr, mean_ptr, m2_ptr, L, NUM_CHUNKS, CHUNK: tl.constexpr):
    seg = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = offs < L
    x = tl.load(x_ptr + seg * L + offs, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(L - chunk * CHUNK, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    d = tl.where(mask, x - mean, 0.0)
    tl.store(mean_ptr + seg * NUM_CHUNKS + chunk, mean)
    tl.store(m2_ptr + seg * NUM_CHUNKS + chunk, tl.sum(d * d, axis=0))


@triton.jit
def combine_kernel(mean_ptr, m2_ptr, stats_ptr, L, NUM_CHUNKS, eps, CHUNK: tl.constexpr, BLOCK_C: tl.constexpr):
    seg = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_C)
    mask = offs < NUM_CHUNKS
    means = tl.load(mean_ptr + seg * NUM_CHUNKS + offs, mask=mask, other=0.0)
    m2s = tl.load(m2_ptr + seg * NUM_CHUNKS + offs, mask=mask, other=0.0)
    counts = tl.where(mask, tl.minimum(L - offs * CHUNK, CHUNK), 0).to(tl.float32)
    mean = tl.sum(counts * means, axis=0) / L
    dm = means - mean
    var = (tl.sum(m2s, axis=0) + tl.sum(counts * dm * dm, axis=0)) / L
    tl.store(stats_ptr + seg * 2, mean)
    tl.store(stats_ptr + seg * 2 + 1, 1.0 / tl.sqrt(var + eps))


@triton.jit
def normalize_kernel(
    x_ptr, w_ptr, b_ptr, stats_ptr, y_ptr, L, S, CG, G,
    HAS_AFFINE: tl.constexpr, CHUNK: tl.constexpr,
):
    seg = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < L
    mean = tl.load(stats_ptr + seg * 2)
    rstd = tl.load(stats_ptr + seg * 2 + 1)
    x = tl.load(x_ptr + seg * L + offs, mask=mask, other=0.0).to(tl.float32)
    y = (x - mean) * rstd
    if HAS_AFFINE:
        c = (seg % G) * CG + offs // S
        y = y * tl.load(w_ptr + c, mask=mask) + tl.load(b_ptr + c, mask=mask)
    tl.store(y_ptr + seg * L + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def groupnorm_one_pass_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, part_ptr, count_ptr, L, S, CG, G, P, eps,
    HAS_AFFINE: tl.constexpr, ONE_CHANNEL: tl.constexpr, CHUNK: tl.constexpr, BLOCK_P: tl.constexpr,
):
    pid = tl.program_id(0)
    seg = (pid // P).to(tl.int64)
    chunk = pid % P
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = offs < L
    x = tl.load(x_ptr + seg * L + offs, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(L - chunk * CHUNK, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    d = tl.where(mask, x - mean, 0.0)
    part = part_ptr + (seg * P + chunk) * 2
    tl.store(part, mean)
    tl.store(part + 1, tl.sum(d * d, axis=0))
    tl.debug_barrier()
    tl.atomic_add(count_ptr + seg, 1, sem="release")
    while tl.atomic_add(count_ptr + seg, 0, sem="acquire") < P:
        pass
    offs_p = tl.arange(0, BLOCK_P)
    p_mask = offs_p < P
    parts = part_ptr + (seg * P + offs_p) * 2
    means = tl.load(parts, mask=p_mask, other=0.0, cache_modifier=".cg")
    m2s = tl.load(parts + 1, mask=p_mask, other=0.0, cache_modifier=".cg")
    counts = tl.where(p_mask, tl.minimum(L - offs_p * CHUNK, CHUNK), 0).to(tl.float32)
    mean = tl.sum(counts * means, axis=0) / L
    dm = means - mean
    var = (tl.sum(m2s, axis=0) + tl.sum(counts * dm * dm, axis=0)) / L
    y = (x - mean) / tl.sqrt(var + eps)
    if HAS_AFFINE:
        if ONE_CHANNEL:  # CHUNK divides S: the chunk lies in one channel
            c = (seg % G) * CG + (chunk * CHUNK) // S
            y = y * tl.load(w_ptr + c) + tl.load(b_ptr + c)
        else:
            c = (seg % G) * CG + offs // S
            y = y * tl.load(w_ptr + c, mask=mask) + tl.load(b_ptr + c, mask=mask)
    tl.store(y_ptr + seg * L + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _one_pass_chunk(x: torch.Tensor, L: int) -> tuple[int, int]:
    """(CHUNK, warps) of the one-pass kernel for segments of L elements, or (0, 0) where it must not
    run: on the CPU (the interpreter), or more programs a segment than SMs."""
    if x.device.type == "cpu":  # Triton's interpreter runs programs one at a time: no spin-wait
        return 0, 0
    # In `kernelcraft compile` (meta tensors seen as CUDA) this is the GPU's way, with the H200's 132 SMs.
    try:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    except (AssertionError, RuntimeError, ValueError):  # no CUDA here: compile's tensors seen as CUDA
        sms = 132
    for room in (sms // 2, sms):  # the order measured best on the H200
        for chunk, warps in ((16384, 4), (8192, 4), (32768, 16)):
            if triton.cdiv(L, chunk) <= room:
                return chunk, warps
    return 0, 0


def group_norm(
    x: torch.Tensor, groups: int, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """nn.functional.group_norm(x, groups, weight, bias, eps) for x (N, C, ...)."""
    if x.dim() < 2 or not x.is_floating_point():
        raise ValueError(f"group_norm takes a float tensor (N, C, ...), got {x.dtype} {tuple(x.shape)}")
    N, C = x.shape[0], x.shape[1]
    if C % groups:
        raise ValueError(f"{C} channels do not split into {groups} groups")
    x = x.contiguous()
    S = x.numel() // (N * C)
    CG = C // groups
    L = CG * S
    segments = N * groups
    y = torch.empty_like(x)
    affine = weight is not None and bias is not None
    w = weight if affine else x
    b = bias if affine else x
    if L <= CHUNK:
        block = triton.next_power_of_2(L)
        groupnorm_fused_kernel[(segments,)](
            x, w, b, y, L, S, CG, groups, eps, HAS_AFFINE=affine, BLOCK=block, num_warps=min(16, max(4, block // 1024))
        )
        return y
    one_chunk, warps = _one_pass_chunk(x, L)
    if one_chunk:
        p = triton.cdiv(L, one_chunk)
        part = torch.empty((segments, p, 2), device=x.device, dtype=torch.float32)
        count = torch.zeros((segments,), device=x.device, dtype=torch.int32)
        groupnorm_one_pass_kernel[(segments * p,)](
            x, w, b, y, part, count, L, S, CG, groups, p, eps,
            HAS_AFFINE=affine, ONE_CHANNEL=S % one_chunk == 0, CHUNK=one_chunk, BLOCK_P=triton.next_power_of_2(p), num_warps=warps,
        )
        return y
    num_chunks = triton.cdiv(L, CHUNK)
    means = torch.empty((segments, num_chunks), device=x.device, dtype=torch.float32)
    m2s = torch.empty_like(means)
    stats = torch.empty((segments, 2), device=x.device, dtype=torch.float32)
    chunk_stats_kernel[(segments, num_chunks)](x, means, m2s, L, num_chunks, CHUNK=CHUNK, num_warps=8)
    combine_kernel[(segments,)](means, m2s, stats, L, num_chunks, eps, CHUNK=CHUNK, BLOCK_C=triton.next_power_of_2(num_chunks))
    normalize_kernel[(segments, num_chunks)](x, w, b, stats, y, L, S, CG, groups, HAS_AFFINE=affine, CHUNK=CHUNK, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gn = self.gn
        return group_norm(x, gn.num_groups, gn.weight, gn.bias, gn.eps)
