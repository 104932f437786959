"""InstanceNorm, fp32 statistics: each (n, c) plane of x (N, C, *spatial) normalised on its own.

A plane is one contiguous segment of S elements. Planes up to CHUNK elements: one kernel, one
program per plane, 8 bytes an element. Longer planes (KernelBench's 34_InstanceNorm: 7168
planes of 262144) are split in CHUNK-element pieces so that loads stay in flight on every SM:
  1. per (plane, chunk): the chunk's mean and M2 from registers;
  2. per plane: Chan's combination into mean and 1/std;
  3. per (plane, chunk): y = (x - mean) * rstd (* weight[c] + bias[c] when affine).
12 bytes an element.

On a GPU, long planes take one pass instead (8 bytes an element): a plane's P chunks are P
programs launched together; each loads its chunk into registers, writes the chunk's mean and M2
to a workspace, adds 1 to the plane's counter (release) and spins until all P have (acquire);
it then combines the P partials (Chan) and normalises its chunk from registers. The programs of
a plane wait on each other, so all P must be resident at once: the GPU starts programs in grid
order, so that holds when P is at most the number of SMs (checked on the host:
16384 elements at 4 warps, else 8192 at 4 or 32768 at 16, the first that lets two planes
run at once). Triton's interpreter
runs programs one after another, where a wait would never end: on the CPU the three kernels run.

Conditions: float input; batch statistics always (nn.InstanceNorm's default,
track_running_stats=False); affine or not; a non-contiguous input is made contiguous first.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNK = 8192


@triton.jit
def plane_fused_kernel(x_ptr, w_ptr, b_ptr, y_ptr, S, C, eps, HAS_AFFINE: tl.constexpr, BLOCK: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < S
    x = tl.load(x_ptr + plane * S + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / S
    d = tl.where(mask, x - mean, 0.0)
    y = d / tl.sqrt(tl.sum(d * d, axis=0) / S + eps)
    if HAS_AFFINE:
        y = y * tl.load(w_ptr + plane % C) + tl.load(b_ptr + plane % C)
    tl.store(y_ptr + plane * S + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def chunk_stats_kernel(x_ptr, mean_ptr, m2_ptr, S, NUM_CHUNKS, CHUNK: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = offs < S
    x = tl.load(x_ptr + plane * S + offs, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(S - chunk * CHUNK, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    d = tl.where(mask, x - mean, 0.0)
    tl.store(mean_ptr + plane * NUM_CHUNKS + chunk, mean)
    tl.store(m2_ptr + plane * NUM_CHUNKS + chunk, tl.sum(d * d, axis=0))


@triton.jit
def combine_kernel(mean_ptr, m2_ptr, stats_ptr, S, NUM_CHUNKS, eps, CHUNK: tl.constexpr, BLOCK_C: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_C)
    mask = offs < NUM_CHUNKS
    means = tl.load(mean_ptr + plane * NUM_CHUNKS + offs, mask=mask, other=0.0)
    m2s = tl.load(m2_ptr + plane * NUM_CHUNKS + offs, mask=mask, other=0.0)
    counts = tl.where(mask, tl.minimum(S - offs * CHUNK, CHUNK), 0).to(tl.float32)
    mean = tl.sum(counts * means, axis=0) / S
    dm = means - mean
    var = (tl.sum(m2s, axis=0) + tl.sum(counts * dm * dm, axis=0)) / S
    tl.store(stats_ptr + plane * 2, mean)
    tl.store(stats_ptr + plane * 2 + 1, 1.0 / tl.sqrt(var + eps))


@triton.jit
def normalize_kernel(x_ptr, w_ptr, b_ptr, stats_ptr, y_ptr, S, C, HAS_AFFINE: tl.constexpr, CHUNK: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < S
    mean = tl.load(stats_ptr + plane * 2)
    rstd = tl.load(stats_ptr + plane * 2 + 1)
    x = tl.load(x_ptr + plane * S + offs, mask=mask, other=0.0).to(tl.float32)
    y = (x - mean) * rstd
    if HAS_AFFINE:
        y = y * tl.load(w_ptr + plane % C) + tl.load(b_ptr + plane % C)
    tl.store(y_ptr + plane * S + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def plane_one_pass_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, part_ptr, count_ptr, S, C, P, eps,
    HAS_AFFINE: tl.constexpr, CHUNK: tl.constexpr, BLOCK_P: tl.constexpr,
):
    pid = tl.program_id(0)
    plane = (pid // P).to(tl.int64)
    chunk = pid % P
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = offs < S
    x = tl.load(x_ptr + plane * S + offs, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(S - chunk * CHUNK, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    d = tl.where(mask, x - mean, 0.0)
    part = part_ptr + (plane * P + chunk) * 2
    tl.store(part, mean)
    tl.store(part + 1, tl.sum(d * d, axis=0))
    tl.debug_barrier()
    tl.atomic_add(count_ptr + plane, 1, sem="release")
    while tl.atomic_add(count_ptr + plane, 0, sem="acquire") < P:
        pass
    offs_p = tl.arange(0, BLOCK_P)
    p_mask = offs_p < P
    parts = part_ptr + (plane * P + offs_p) * 2
    means = tl.load(parts, mask=p_mask, other=0.0, cache_modifier=".cg")
    m2s = tl.load(parts + 1, mask=p_mask, other=0.0, cache_modifier=".cg")
    counts = tl.where(p_mask, tl.minimum(S - offs_p * CHUNK, CHUNK), 0).to(tl.float32)
    mean = tl.sum(counts * means, axis=0) / S
    dm = means - mean
    var = (tl.sum(m2s, axis=0) + tl.sum(counts * dm * dm, axis=0)) / S
    y = (x - mean) / tl.sqrt(var + eps)
    if HAS_AFFINE:
        y = y * tl.load(w_ptr + plane % C) + tl.load(b_ptr + plane % C)
    tl.store(y_ptr + plane * S + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _one_pass_chunk(x: torch.Tensor, S: int) -> tuple[int, int]:
    """(CHUNK, warps) of the one-pass kernel for planes of S elements, or (0, 0) where it must not
    run: on the CPU (the interpreter), or more programs a plane than SMs."""
    if x.device.type == "cpu":  # Triton's interpreter runs programs one at a time: no spin-wait
        return 0, 0
    # In `kernelcraft compile` (meta tensors seen as CUDA) this is the GPU's way, with the H200's 132 SMs.
    try:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    except (AssertionError, RuntimeError, ValueError):  # no CUDA here: compile's tensors seen as CUDA
        sms = 132
    for room in (sms // 2, sms):  # the order measured best on the H200
        for chunk, warps in ((16384, 4), (8192, 4), (32768, 16)):
            if triton.cdiv(S, chunk) <= room:
                return chunk, warps
    return 0, 0


def instance_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """nn.functional.instance_norm(x, weight=weight, bias=bias, eps=eps) with batch statistics."""
    if x.dim() < 3 or not x.is_floating_point():
        raise ValueError(f"instance_norm takes a float tensor (N, C, ...), got {x.dtype} {tuple(x.shape)}")
    x = x.contiguous()
    N, C = x.shape[0], x.shape[1]
    S = x.numel() // (N * C)
    planes = N * C
    y = torch.empty_like(x)
    affine = weight is not None and bias is not None
    w = weight if affine else x
    b = bias if affine else x
    if S <= CHUNK:
        block = triton.next_power_of_2(S)
        plane_fused_kernel[(planes,)](x, w, b, y, S, C, eps, HAS_AFFINE=affine, BLOCK=block, num_warps=min(16, max(4, block // 1024)))
        return y
    one_chunk, warps = _one_pass_chunk(x, S)
    if one_chunk:
        p = triton.cdiv(S, one_chunk)
        part = torch.empty((planes, p, 2), device=x.device, dtype=torch.float32)
        count = torch.zeros((planes,), device=x.device, dtype=torch.int32)
        plane_one_pass_kernel[(planes * p,)](
            x, w, b, y, part, count, S, C, p, eps,
            HAS_AFFINE=affine, CHUNK=one_chunk, BLOCK_P=triton.next_power_of_2(p), num_warps=warps,
        )
        return y
    num_chunks = triton.cdiv(S, CHUNK)
    means = torch.empty((planes, num_chunks), device=x.device, dtype=torch.float32)
    m2s = torch.empty_like(means)
    stats = torch.empty((planes, 2), device=x.device, dtype=torch.float32)
    chunk_stats_kernel[(planes, num_chunks)](x, means, m2s, S, num_chunks, CHUNK=CHUNK, num_warps=8)
    combine_kernel[(planes,)](means, m2s, stats, S, num_chunks, eps, CHUNK=CHUNK, BLOCK_C=triton.next_power_of_2(num_chunks))
    normalize_kernel[(planes, num_chunks)](x, w, b, stats, y, S, C, HAS_AFFINE=affine, CHUNK=CHUNK, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(num_features=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.inorm
        return instance_norm(x, m.weight, m.bias, m.eps)
