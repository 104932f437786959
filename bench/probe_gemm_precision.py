"""fp32 GEMM on tensor cores: which split of the operands is fastest at fp32 accuracy (H200 probe).

    python bench/probe_gemm_precision.py [--json OUT.json] [--quick]

The cookbook's GEMMs run `tl.dot(..., input_precision="tf32x3")`: Triton loads fp32 tiles, splits
each into a TF32 high part and remainder in registers, and issues three TF32 products. On the H200
that reached 74-82 TFLOP/s at 4096^3, about half of what three TF32 products allow. This probe
times, on KernelBench's GEMM shapes, the same product with the split done once beforehand, in its
own pass over A and B, so that the main loop's tiles go straight from global to shared memory and
into wgmma:

- `presplit tf32x3`: A = Ah + Al, B = Bh + Bl, each part fp32 holding a TF32 value (rounded to
  nearest); Ah Bh + Ah Bl + Al Bh on TF32 tensor cores;
- `presplit bf16x3`: the parts are bfloat16 (8-bit mantissas, 16 in all): three bf16 products, at
  twice TF32's rate and half its bytes, but a coarser split;
- `presplit bf16x6`: three bf16 parts (24 bits in all), the six products that matter;
- Triton's own `input_precision="bf16x3"` / `"bf16x6"` where the compiler has them;
- plain TF32 and plain bf16 (one product): the upper bounds, not fp32-accurate.

Each variant's error is measured against cuBLAS fp32 (TF32 off), as verify's reference runs, on
KernelBench's inputs (torch.rand: all positive) and on randn (zero mean: outputs that cancel to
near zero, where atol decides): err/tol is max |out - ref| / (1e-4 + 1e-4 |ref|), verify's fp32
test, and rel_l2 its second one (limit 1e-3). Times: median of triton.testing.do_bench, in ms.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_memory_bound import entry, ms  # noqa: E402 - a sibling script, found through its folder

RESULTS: dict[str, dict[str, Any]] = {}


@triton.jit
def _tf32_rna(x):
    """x rounded to the nearest TF32 value (10 mantissa bits), as cvt.rna.tf32.f32 does."""
    bits = x.to(tl.uint32, bitcast=True)
    return ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def split_kernel(
    x_ptr,
    p0_ptr,
    p1_ptr,
    p2_ptr,
    R,
    C,
    stride_xr,
    stride_xc,
    stride_pr,
    stride_pc,
    PARTS: tl.constexpr,
    BF16: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """x = p0 + p1 (+ p2), each part a TF32 value in fp32 or a bfloat16; part [r, c] is written at
    stride_pr * r + stride_pc * c, so a transposed layout is one stride swap."""
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    x = tl.load(
        x_ptr + offs_r[:, None].to(tl.int64) * stride_xr + offs_c[None, :] * stride_xc, mask=mask, other=0.0
    )
    out = offs_r[:, None].to(tl.int64) * stride_pr + offs_c[None, :].to(tl.int64) * stride_pc
    if BF16:
        p0 = x.to(tl.bfloat16)
        r = x - p0.to(tl.float32)
        p1 = r.to(tl.bfloat16)
        tl.store(p0_ptr + out, p0, mask=mask)
        tl.store(p1_ptr + out, p1, mask=mask)
        if PARTS == 3:
            tl.store(p2_ptr + out, (r - p1.to(tl.float32)).to(tl.bfloat16), mask=mask)
    else:
        p0 = _tf32_rna(x)
        tl.store(p0_ptr + out, p0, mask=mask)
        tl.store(p1_ptr + out, _tf32_rna(x - p0), mask=mask)


@triton.jit
def _grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """The (row, column) tile of program `pid`, in GROUP_M-row groups (Triton tutorial 03)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    return first_pid_m + ((pid % num_pid_in_group) % group_size_m), (pid % num_pid_in_group) // group_size_m


@triton.jit
def split_matmul_kernel(
    a0,
    a1,
    a2,
    b0,
    b1,
    b2,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_bn,
    stride_cm,
    TERMS: tl.constexpr,
    PREC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """C = sum of the TERMS largest products of the parts: 1 (p0 p0), 3 (+ p0 p1, p1 p0) or 6
    (+ p0 p2, p2 p0, p1 p1). A's parts are (M, K) row-major, B's (N, K) row-major (K-major),
    K a multiple of BLOCK_K (zero-padded by the host)."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_off = offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]
    b_off = offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        ah = tl.load(a0 + a_off + k)
        bh = tl.load(b0 + b_off + k)
        if TERMS >= 3:
            al = tl.load(a1 + a_off + k)
            bl = tl.load(b1 + b_off + k)
            if TERMS == 6:
                a3 = tl.load(a2 + a_off + k)
                b3 = tl.load(b2 + b_off + k)
                acc = tl.dot(al, bl, acc, input_precision=PREC)
                acc = tl.dot(ah, b3, acc, input_precision=PREC)
                acc = tl.dot(a3, bh, acc, input_precision=PREC)
            acc = tl.dot(ah, bl, acc, input_precision=PREC)
            acc = tl.dot(al, bh, acc, input_precision=PREC)
        acc = tl.dot(ah, bh, acc, input_precision=PREC)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptr + offs_cm[:, None].to(tl.int64) * stride_cm + offs_cn[None, :], acc, mask=mask)


@triton.jit
def builtin_matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_bn,
    stride_cm,
    PREC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """fp32 A (M, K), B as (N, K) K-major, K a multiple of BLOCK_K: one tl.dot at PREC."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_off = offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]
    b_off = offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc = tl.dot(tl.load(a_ptr + a_off + k), tl.load(b_ptr + b_off + k), acc, input_precision=PREC)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptr + offs_cm[:, None].to(tl.int64) * stride_cm + offs_cn[None, :], acc, mask=mask)


# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): shared memory per stage is
# (BLOCK_M + BLOCK_N) * BLOCK_K * bytes * parts, under the H200's 227 KB with the stages.
TF32_CONFIGS = [
    (128, 128, 32, 8, 3),
    (128, 256, 32, 8, 2),
    (128, 128, 16, 8, 5),
    (128, 256, 16, 8, 4),
    (128, 128, 32, 4, 3),
]
BF16X3_CONFIGS = [
    (128, 128, 64, 8, 3),
    (128, 256, 64, 8, 2),
    (128, 256, 32, 8, 4),
    (128, 128, 32, 8, 5),
    (256, 128, 32, 8, 4),
    (128, 128, 64, 4, 3),
]
BF16X6_CONFIGS = [(128, 128, 64, 8, 2), (128, 128, 32, 8, 4), (128, 256, 32, 8, 3), (128, 256, 16, 8, 5)]
BUILTIN_CONFIGS = [(128, 128, 32, 8, 3), (128, 256, 32, 8, 3), (128, 128, 64, 8, 3)]


def pad_k(k: int) -> int:
    return triton.cdiv(k, 64) * 64


def split(x: torch.Tensor, parts: int, bf16: bool, transpose: bool) -> list[torch.Tensor]:
    """The parts of `x` (R, C): (R, pad_k(C)) row-major, or (C, pad_k(R)) for `transpose` (B)."""
    R, C = x.shape
    shape = (C, pad_k(R)) if transpose else (R, pad_k(C))
    out = [
        torch.zeros(shape, device=x.device, dtype=torch.bfloat16 if bf16 else torch.float32)
        for _ in range(parts)
    ]
    p2 = out[2] if parts == 3 else out[1]
    stride_pr, stride_pc = (1, shape[1]) if transpose else (shape[1], 1)
    grid = (triton.cdiv(R, 64), triton.cdiv(C, 64))
    split_kernel[grid](
        x,
        out[0],
        out[1],
        p2,
        R,
        C,
        x.stride(0),
        x.stride(1),
        stride_pr,
        stride_pc,
        PARTS=parts,
        BF16=bf16,
        BLOCK=64,
    )
    return out


def presplit(a: torch.Tensor, b: torch.Tensor, terms: int, bf16: bool, cfg: tuple[int, ...]) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    parts = {1: 2, 3: 2, 6: 3}[terms]
    ap = split(a, parts, bf16, transpose=False)
    bp = split(b, parts, bf16, transpose=True)
    if parts == 2:
        ap.append(ap[1])
        bp.append(bp[1])
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    bm, bn, bk, warps, stages = cfg
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    split_matmul_kernel[grid](
        *ap,
        *bp,
        c,
        M,
        N,
        ap[0].shape[1],
        ap[0].stride(0),
        bp[0].stride(0),
        c.stride(0),
        TERMS=terms,
        PREC="ieee" if bf16 else "tf32",
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=8,
        num_warps=warps,
        num_stages=stages,
    )
    return c


def builtin(a: torch.Tensor, b: torch.Tensor, prec: str, cfg: tuple[int, ...]) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    kp = pad_k(K)
    ap = torch.zeros((M, kp), device=a.device)
    ap[:, :K] = a
    bp = torch.zeros((N, kp), device=a.device)
    bp[:, :K] = b.t()
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    bm, bn, bk, warps, stages = cfg
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    builtin_matmul_kernel[grid](
        ap,
        bp,
        c,
        M,
        N,
        kp,
        ap.stride(0),
        bp.stride(0),
        c.stride(0),
        PREC=prec,
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=8,
        num_warps=warps,
        num_stages=stages,
    )
    return c


def errors(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    diff = (out - ref).abs()
    return {
        "err_tol": round(float((diff / (1e-4 + 1e-4 * ref.abs())).max()), 4),
        "rel_l2": float(diff.norm() / ref.norm()),
    }


def gemm_inputs(M: int, K: int, N: int) -> tuple[dict[str, Any], dict[str, torch.Tensor], float]:
    """KernelBench's inputs (rand) and zero-mean ones (randn), cuBLAS fp32's products, the FLOPs."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = {
        dist: (draw(M, K, device="cuda", generator=gen), draw(K, N, device="cuda", generator=gen))
        for dist, draw in (("rand", torch.rand), ("randn", torch.randn))
    }
    return inputs, {k: torch.matmul(*v) for k, v in inputs.items()}, 2.0 * M * N * K


def measure(
    name: str, runs: dict[str, Any], inputs: dict[str, Any], refs: dict[str, torch.Tensor], flop: float
) -> None:
    """Each run's errors on both inputs (not for a run named "split ...", which makes no product)
    and its time on KernelBench's, into RESULTS[name]."""
    for variant, fn in runs.items():
        row: dict[str, Any] = {}
        try:
            if not variant.startswith("split"):
                for dist, (a, b) in inputs.items():
                    row[dist] = errors(fn(a, b), refs[dist])
            a, b = inputs["rand"]
            row["ms"] = round(ms(lambda fn=fn, a=a, b=b: fn(a, b)), 4)
            row["tflops"] = round(flop / row["ms"] / 1e9, 1)
        except Exception as e:  # noqa: BLE001 - a probe reports every variant's failure and goes on
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        RESULTS.setdefault(name, {})[variant] = row
        print(f"{name:22s} {variant:44s} {row}", flush=True)


def variants(configs: dict[str, list[tuple[int, ...]]]) -> dict[str, Any]:
    """name -> fn(a, b)"""
    gemm = entry("gemm")
    out: dict[str, Any] = {"cublas fp32": torch.matmul, "entry tf32x3 (in-kernel split)": gemm.matmul}
    for cfg in configs["tf32"]:
        out[f"presplit tf32x3 {cfg}"] = lambda a, b, cfg=cfg: presplit(a, b, 3, False, cfg)
    for cfg in configs["bf16x3"]:
        out[f"presplit bf16x3 {cfg}"] = lambda a, b, cfg=cfg: presplit(a, b, 3, True, cfg)
    for cfg in configs["bf16x6"]:
        out[f"presplit bf16x6 {cfg}"] = lambda a, b, cfg=cfg: presplit(a, b, 6, True, cfg)
    for prec in ("bf16x3", "bf16x6", "tf32x3"):
        for cfg in configs["builtin"]:
            out[f"builtin {prec} {cfg}"] = lambda a, b, prec=prec, cfg=cfg: builtin(a, b, prec, cfg)
    out["plain tf32 (128, 128, 32, 8, 3)"] = lambda a, b: presplit(a, b, 1, False, (128, 128, 32, 8, 3))
    out["plain bf16 (128, 128, 64, 8, 3)"] = lambda a, b: presplit(a, b, 1, True, (128, 128, 64, 8, 3))
    return out


def probe_shape(name: str, M: int, K: int, N: int, configs: dict[str, list[tuple[int, ...]]]) -> None:
    inputs, refs, flop = gemm_inputs(M, K, N)
    measure(name, variants(configs), inputs, refs, flop)


@triton.jit
def flush_matmul_kernel(
    a_hi,
    a_lo,
    b_hi,
    b_lo,
    c_ptr,
    M,
    N,
    KP,
    stride_cm,
    PREC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    FLUSH: tl.constexpr,
):
    """bf16x3 from split parts, all three products into one tensor-core accumulator that is added
    into an fp32 total (CUDA cores, round to nearest) and restarted every FLUSH K blocks: the
    truncating accumulation then only ever sees FLUSH * BLOCK_K products' worth of magnitude."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_offs = offs_m[:, None].to(tl.int64) * KP + offs_k[None, :]
    b_offs = offs_n[None, :].to(tl.int64) * KP + offs_k[:, None]
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, KP // BLOCK_K):
        ah = tl.load(a_hi + a_offs)
        bh = tl.load(b_hi + b_offs)
        if FLUSH == 1:
            part = tl.dot(tl.load(a_lo + a_offs), bh, input_precision=PREC)
        else:
            part = tl.dot(tl.load(a_lo + a_offs), bh, part, input_precision=PREC)
        part = tl.dot(ah, tl.load(b_lo + b_offs), part, input_precision=PREC)
        part = tl.dot(ah, bh, part, input_precision=PREC)
        if FLUSH == 1:
            total += part
        elif k % FLUSH == FLUSH - 1:
            total += part
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        a_offs += BLOCK_K
        b_offs += BLOCK_K
    if FLUSH != 1:
        total += part
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptr + offs_cm[:, None].to(tl.int64) * stride_cm + offs_cn[None, :], total, mask=mask)


FLUSH_CONFIGS = [(128, 128, 64, 8, 3), (128, 128, 32, 8, 5), (64, 128, 32, 4, 4), (64, 128, 64, 4, 3)]


def probe_flush(name: str, M: int, K: int, N: int) -> None:
    """The flush variants against the entry as it stands (its results file was written when the entry
    kept two accumulators: probe_gemm_flush_h200.json)."""
    gemm = entry("gemm")
    inputs, refs, flop = gemm_inputs(M, K, N)
    kp = triton.cdiv(K, gemm.K_ALIGN) * gemm.K_ALIGN

    def one(flush: int, cfg: tuple[int, ...]):
        def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            ah, al = gemm.split(a, 1, kp, "bf16x3")
            bh, bl = gemm.split(b, 0, kp, "bf16x3")
            c = torch.empty((M, N), device="cuda")
            bm, bn, bk, warps, stages = cfg
            flush_matmul_kernel[(triton.cdiv(M, bm) * triton.cdiv(N, bn),)](
                ah,
                al,
                bh,
                bl,
                c,
                M,
                N,
                kp,
                c.stride(0),
                PREC="ieee",
                BLOCK_M=bm,
                BLOCK_N=bn,
                BLOCK_K=bk,
                GROUP_M=8,
                FLUSH=flush,
                num_warps=warps,
                num_stages=stages,
            )
            return c

        return fn

    runs = {"entry bf16x3 (autotuned)": lambda a, b: gemm.matmul(a, b)}
    for cfg in FLUSH_CONFIGS:
        for flush in (1, 2, 4, 8):
            runs[f"flush every {flush} {cfg}"] = one(flush, cfg)
    measure(name, runs, inputs, refs, flop)


# The entry's kernel, config by config: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages).
ENTRY_CONFIGS = [
    (128, 128, 64, 8, 3),
    (128, 256, 32, 8, 4),
    (128, 256, 64, 8, 2),
    (128, 128, 32, 8, 3),
    (128, 128, 32, 8, 5),
    (256, 128, 32, 8, 4),
    (64, 128, 32, 4, 4),
    (128, 128, 64, 4, 3),
    (64, 256, 32, 4, 4),
    (64, 256, 64, 4, 3),
]


def probe_entry(name: str, M: int, K: int, N: int) -> None:
    """The gemm entry (bf16x3 split once): autotuned, then each config alone."""
    gemm = entry("gemm")
    inputs, refs, flop = gemm_inputs(M, K, N)

    def one(precision: str, cfg: tuple[int, ...] | None):
        def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            if cfg is None:
                return gemm.matmul(a, b, precision)
            kp = triton.cdiv(K, gemm.K_ALIGN) * gemm.K_ALIGN
            ah, al = gemm.split(a, 1, kp, precision)
            bh, bl = gemm.split(b, 0, kp, precision)
            c = torch.empty((M, N), device="cuda")
            bm, bn, bk, warps, stages = cfg
            gemm.matmul_kernel.fn[(triton.cdiv(M, bm) * triton.cdiv(N, bn),)](
                ah,
                al,
                bh,
                bl,
                c,
                M,
                N,
                kp,
                c.stride(0),
                c.stride(1),
                PREC="ieee" if precision == "bf16x3" else "tf32",
                BLOCK_M=bm,
                BLOCK_N=bn,
                BLOCK_K=bk,
                GROUP_M=8,
                num_warps=warps,
                num_stages=stages,
            )
            return c

        return fn

    runs = {
        "cublas fp32": torch.matmul,
        "entry bf16x3 (autotuned)": one("bf16x3", None),
        "entry tf32x3 (autotuned)": one("tf32x3", None),
    }
    if K < gemm.SPLIT_K_MIN:
        for cfg in ENTRY_CONFIGS:
            runs[f"entry bf16x3 {cfg}"] = one("bf16x3", cfg)
        kp = triton.cdiv(K, gemm.K_ALIGN) * gemm.K_ALIGN
        a = inputs["rand"][0]
        runs["split of A alone"] = lambda a_, b_: gemm.split(a, 1, kp)[0]
    measure(name, runs, inputs, refs, flop)


SHAPES = {
    "L1_1 4096^3": (4096, 4096, 4096),
    "L1_2 2048x8192x4096": (2048, 8192, 4096),
    "L1_8 8205x2949x5921": (8205, 2949, 5921),
}
ENTRY_SHAPES = {**SHAPES, "L1_6 256x524288x256": (256, 524288, 256)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--quick", action="store_true", help="4096^3 only")
    parser.add_argument("--entry", action="store_true", help="the gemm entry's kernel, config by config")
    parser.add_argument("--flush", action="store_true", help="one accumulator restarted every few K blocks")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_gemm_precision needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    print(meta, flush=True)
    if args.entry or args.flush:
        for name, (M, K, N) in (SHAPES if args.flush else ENTRY_SHAPES).items():
            (probe_flush if args.flush else probe_entry)(name, M, K, N)
            torch.cuda.empty_cache()
            if args.json:
                args.json.write_text(json.dumps({"meta": meta, "results": RESULTS}, indent=1) + "\n")
        return 0
    full = {
        "tf32": TF32_CONFIGS,
        "bf16x3": BF16X3_CONFIGS,
        "bf16x6": BF16X6_CONFIGS,
        "builtin": BUILTIN_CONFIGS,
    }
    for i, (name, (M, K, N)) in enumerate(SHAPES.items()):
        if i and args.quick:
            break
        probe_shape(name, M, K, N, full)
        torch.cuda.empty_cache()
        if args.json:
            args.json.write_text(json.dumps({"meta": meta, "results": RESULTS}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
