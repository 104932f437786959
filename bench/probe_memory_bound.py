"""Where the cookbook's memory-bound kernels stand against torch.compile, and what moves them (H200 probe).

    python bench/probe_memory_bound.py [--json OUT.json] [--only NAME ...]

The cookbook bench left softmax, max pooling, the middle-dimension reductions, GroupNorm and
InstanceNorm at 0.86-1.0x torch.compile: at the HBM roofline of the algorithm each used, and
torch.compile at the same one. This probe times, on KernelBench's own shapes, each entry's
kernel in its old form and its new one, against eager and torch.compile:

- softmax / log-softmax (23, 24): two passes (online max and sum, then normalise: 12 bytes an
  element) against one pass (chunks held in registers by programs that wait for each other:
  8 bytes an element);
- InstanceNorm (34), GroupNorm (35): three kernels (12 bytes) against one pass (8 bytes);
- max pooling (42, 4x4 window, stride 1): the tile kernel (16 loads an output) against the rows
  kernel (4 loads an output), over its rows a program walks;
- sum, max and argmax over the middle dimension (47, 49, 51): the tile's shape and warps;
- batched GEMM (3): the operand copy apart from the kernel;
- convolutions (63, level 2's 1, depthwise 82): the NCHW gather against the channels-last implicit
  GEMM, the depthwise tile kernel against its rows kernel.

Every new form is checked against eager first (max abs error printed). Times: the median of
triton.testing.do_bench (L2 flushed between runs), in ms.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
import triton.testing

REPO = Path(__file__).resolve().parent.parent
ENTRIES = REPO / "kernelcraft" / "knowledge" / "cookbook" / "entries"
RESULTS: dict[str, dict[str, Any]] = {}


def entry(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"cookbook_{name}", ENTRIES / name / "kernel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ms(fn: Callable[[], Any]) -> float:
    return float(triton.testing.do_bench(fn, warmup=25, rep=150, return_mode="median"))


def record(task: str, variant: str, fn: Callable[[], Any], ref: torch.Tensor | None = None) -> None:
    row: dict[str, Any] = {}
    try:
        out = fn()
        torch.cuda.synchronize()
        if ref is not None:
            if out.dtype == torch.int64:
                row["mismatches"] = int((out != ref).sum())
            else:
                row["max_abs_err"] = float((out.float() - ref.float()).abs().max())
        row["ms"] = round(ms(fn), 4)
    except Exception as e:  # noqa: BLE001 - a probe reports every variant's failure and goes on
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    RESULTS.setdefault(task, {})[variant] = row
    print(f"{task:14s} {variant:34s} {row}", flush=True)


def torch_sides(task: str, fn: Callable[..., torch.Tensor], *args: Any) -> torch.Tensor:
    ref = fn(*args)
    record(task, "eager", lambda: fn(*args))
    compiled = torch.compile(fn)
    record(task, "torch.compile", lambda: compiled(*args))
    return ref


def probe_softmax() -> None:
    sm = entry("softmax")
    x = torch.rand(4096, 393216, device="cuda")
    for log in (False, True):
        task = "24_logsoftmax" if log else "23_softmax"
        ref = torch_sides(
            task, (lambda t: torch.log_softmax(t, 1)) if log else (lambda t: torch.softmax(t, 1)), x
        )
        record(task, "one_pass", lambda log=log: sm.softmax(x, 1, log=log), ref)
        keep = sm._one_pass_chunk
        for chunk, warps in ((16384, 8), (16384, 4), (32768, 16)):
            sm._one_pass_chunk = lambda *a, c=chunk, w=warps: (c, w)
            record(task, f"one_pass CHUNK={chunk} w={warps}", lambda log=log: sm.softmax(x, 1, log=log), ref)
        sm._one_pass_chunk = keep

        def two_pass(log: bool = log) -> torch.Tensor:
            y = torch.empty_like(x)
            sm.softmax_online_kernel[(x.shape[0],)](x, y, x.shape[1], LOG=log, BLOCK=sm.BLOCK, num_warps=8)
            return y

        record(task, "two_pass (old)", two_pass, ref)
        del ref
    torch.cuda.empty_cache()


def probe_norms() -> None:
    inorm, gnorm = entry("instancenorm"), entry("groupnorm")
    x = torch.rand(112, 64, 512, 512, device="cuda")
    w, b = torch.rand(64, device="cuda"), torch.rand(64, device="cuda")
    ref = torch_sides("34_instancenorm", lambda t: torch.nn.functional.instance_norm(t, eps=1e-5), x)
    record("34_instancenorm", "one_pass", lambda: inorm.instance_norm(x, None, None, 1e-5), ref)
    keep = inorm._one_pass_chunk
    for chunk, warps in ((16384, 8), (16384, 4)):
        inorm._one_pass_chunk = lambda *a, c=chunk, w=warps: (c, w)
        record(
            "34_instancenorm",
            f"one_pass CHUNK={chunk} w={warps}",
            lambda: inorm.instance_norm(x, None, None, 1e-5),
            ref,
        )
    inorm._one_pass_chunk = lambda *a: (0, 0)
    record("34_instancenorm", "three_kernels (old)", lambda: inorm.instance_norm(x, None, None, 1e-5), ref)
    inorm._one_pass_chunk = keep
    del ref
    ref = torch_sides("35_groupnorm", lambda t: torch.nn.functional.group_norm(t, 8, w, b, 1e-5), x)
    record("35_groupnorm", "one_pass", lambda: gnorm.group_norm(x, 8, w, b, 1e-5), ref)
    keep = gnorm._one_pass_chunk
    for chunk, warps in ((16384, 8), (32768, 8)):
        gnorm._one_pass_chunk = lambda *a, c=chunk, w=warps: (c, w)
        record(
            "35_groupnorm",
            f"one_pass CHUNK={chunk} w={warps}",
            lambda: gnorm.group_norm(x, 8, w, b, 1e-5),
            ref,
        )
    gnorm._one_pass_chunk = lambda *a: (0, 0)
    record("35_groupnorm", "three_kernels (old)", lambda: gnorm.group_norm(x, 8, w, b, 1e-5), ref)
    gnorm._one_pass_chunk = keep
    del ref
    torch.cuda.empty_cache()
    bn = torch.rand(64, 64, 512, 512, device="cuda")
    bnm = torch.nn.BatchNorm2d(64).cuda().train()
    torch_sides("33_batchnorm", lambda t: bnm(t), bn)
    torch.cuda.empty_cache()


def probe_pool() -> None:
    pool = entry("pool2d")
    for shape, rows in (
        ((1, 1, 37, 41), 64),
        ((1, 1, 37, 41), 8),
        ((1, 1, 130, 600), 64),
        ((2, 3, 512, 512), 64),
    ):
        pool.ROWS = rows
        t = torch.rand(shape, device="cuda")
        want = torch.nn.functional.max_pool2d(t, 4, 1, 1, 1)
        got = pool.pool2d(t, 4, 1, 1, 1, "max")
        N, C, H, W = t.shape
        OH, OW = want.shape[2], want.shape[3]
        for stages in (1, 2):
            y1 = torch.zeros_like(want)
            pool.pool2d_rows_kernel[(N * C, triton.cdiv(OW, 512), triton.cdiv(OH, rows))](
                t,
                y1,
                C,
                H,
                W,
                OH,
                OW,
                *t.stride(),
                1,
                1,
                1,
                1,
                rows,
                KH=4,
                KW=4,
                IS_MAX=True,
                BLOCK_W=512,
                num_warps=4,
                num_stages=stages,
            )
            print(f"  stages={stages}: bad {int(((y1 - want).abs() > 1e-6).sum())}", flush=True)
        bad = (got - want).abs() > 1e-6
        where = bad.nonzero()[:8].tolist()
        rows_bad = sorted(set(bad.nonzero()[:, 2].tolist()))[:20]
        cols_bad = sorted(set(bad.nonzero()[:, 3].tolist()))[:20]
        print(
            f"pool debug {shape} ROWS={rows}: {int(bad.sum())} bad of {bad.numel()}; first {where}; rows {rows_bad}; cols {cols_bad}",
            flush=True,
        )
        RESULTS.setdefault("pool_debug", {})[f"{shape} ROWS={rows}"] = {"bad": int(bad.sum()), "first": where}
    x = torch.rand(32, 64, 512, 512, device="cuda")
    task = "42_maxpool"
    ref = torch_sides(task, lambda t: torch.nn.functional.max_pool2d(t, 4, 1, 1, 1), x)
    for rows in (32, 64, 128):
        pool.ROWS = rows
        record(task, f"rows kernel ROWS={rows}", lambda: pool.pool2d(x, 4, 1, 1, 1, "max"), ref)
    for rows, block_w, warps in ((64, 256, 4), (64, 512, 8), (128, 256, 2)):

        def rows_kernel(rows: int = rows, block_w: int = block_w, warps: int = warps) -> torch.Tensor:
            N, C, H, W = x.shape
            y = torch.empty((N, C, 511, 511), device="cuda")
            grid = (N * C, triton.cdiv(511, block_w), triton.cdiv(511, rows))
            pool.pool2d_rows_kernel[grid](
                x,
                y,
                C,
                H,
                W,
                511,
                511,
                *x.stride(),
                1,
                1,
                1,
                1,
                rows,
                KH=4,
                KW=4,
                IS_MAX=True,
                BLOCK_W=block_w,
                num_warps=warps,
            )
            return y

        record(task, f"rows ROWS={rows} BLOCK_W={block_w} w={warps}", rows_kernel, ref)

    def tile_kernel() -> torch.Tensor:
        N, C, H, W = x.shape
        y = torch.empty((N, C, 511, 511), device="cuda")
        grid = (N * C, triton.cdiv(511, 8), triton.cdiv(511, 256))
        pool.pool2d_kernel[grid](
            x,
            y,
            C,
            H,
            W,
            511,
            511,
            *x.stride(),
            1,
            1,
            1,
            1,
            1,
            1,
            KH=4,
            KW=4,
            IS_MAX=True,
            BLOCK_H=8,
            BLOCK_W=256,
            num_warps=4,
        )
        return y

    record(task, "tile kernel (old)", tile_kernel, ref)
    del ref
    torch.cuda.empty_cache()


REDUCE_CONFIGS = [  # (BLOCK_I, BLOCK_R, warps); the first is the entry's
    (128, 32, 8),
    (256, 16, 8),
    (256, 32, 8),
    (128, 64, 8),
    (64, 64, 8),
    (128, 32, 16),
    (128, 64, 16),
    (512, 16, 8),
]


def probe_reduce() -> None:
    red, arg = entry("reduce_dim"), entry("argreduce_dim")
    x = torch.rand(128, 4096, 4095, device="cuda")
    outer, R, inner = 128, 4096, 4095
    for task, op in (("47_sum", "sum"), ("49_max", "max"), ("51_argmax", "argmax")):
        if op == "argmax":
            ref = torch_sides(task, lambda t: torch.argmax(t, 1), x)
        elif op == "max":
            ref = torch_sides(task, lambda t: torch.max(t, 1)[0], x)
        else:
            ref = torch_sides(task, lambda t: torch.sum(t, 1), x)
        for bi, br, warps in REDUCE_CONFIGS:

            def run(bi: int = bi, br: int = br, warps: int = warps, op: str = op) -> torch.Tensor:
                grid = (outer * triton.cdiv(inner, bi),)
                if op == "argmax":
                    y = torch.empty((outer, inner), device="cuda", dtype=torch.int64)
                    arg.argreduce_dim_kernel[grid](
                        x, y, R, inner, IS_MAX=True, BLOCK_R=br, BLOCK_I=bi, num_warps=warps
                    )
                else:
                    y = torch.empty((outer, inner), device="cuda")
                    red.reduce_dim_kernel[grid](
                        x, y, R, inner, 1.0, OP=op, BLOCK_R=br, BLOCK_I=bi, num_warps=warps
                    )
                return y

            record(task, f"BLOCK_I={bi} BLOCK_R={br} w={warps}", run, ref)
        del ref
    torch.cuda.empty_cache()


def probe_bmm() -> None:
    bmm = entry("bmm")
    a = torch.rand(128, 512, 1024, device="cuda")
    b = torch.rand(128, 1024, 2048, device="cuda")
    task = "3_bmm"
    ref = torch_sides(task, torch.bmm, a, b)
    record(task, "entry (copy + kernel)", lambda: bmm.bmm(a, b), ref)
    record(task, "copy of B only (transpose kernel)", lambda: bmm._packed(b, 1, 1024))
    packed = bmm._packed(b, 1, 1024).transpose(1, 2)
    record(task, "kernel only (B K-major)", lambda: bmm.bmm(a, packed), ref)
    record(task, "B.transpose(1,2).contiguous()", lambda: b.transpose(1, 2).contiguous())
    print("bmm best config:", bmm.bmm_kernel.best_config, flush=True)
    RESULTS[task]["best_config"] = {"config": str(bmm.bmm_kernel.best_config)}


def probe_conv() -> None:
    conv, dw = entry("conv2d"), entry("depthwise_conv2d")
    x = torch.rand(16, 16, 1024, 1024, device="cuda")
    w = torch.rand(128, 16, 3, 3, device="cuda") * 0.1
    task = "63_conv2d"
    ref = torch_sides(task, lambda t: torch.nn.functional.conv2d(t, w), x)
    record(task, "nhwc implicit GEMM (new)", lambda: conv.conv2d(x, w), ref)

    def gather(x: torch.Tensor = x, w: torch.Tensor = w) -> torch.Tensor:
        NB, C, H, W = x.shape
        OC, OH, OW = w.shape[0], H - 2, W - 2
        y = torch.empty((NB, OC, OH, OW), device="cuda")

        def grid(meta: dict[str, int]) -> tuple[int, int]:
            return (triton.cdiv(NB * OH * OW, meta["BLOCK_M"]), triton.cdiv(OC, meta["BLOCK_N"]))

        conv.conv2d_kernel[grid](
            x,
            w,
            w,
            w,
            y,
            NB,
            C,
            H,
            W,
            OC,
            OH,
            OW,
            *x.stride(),
            1,
            1,
            0,
            0,
            1,
            1,
            KH=3,
            KW=3,
            HAS_BIAS=False,
            ACTIVATION="none",
            HAS_POST_BIAS=False,
            Y32=y.numel() < 2**31,
        )
        return y

    record(task, "NCHW gather (old, int32 epilogue)", gather, ref)
    record(task, "channels_last copy of x", lambda: x.contiguous(memory_format=torch.channels_last))
    del ref
    x2 = torch.rand(128, 64, 128, 128, device="cuda")
    w2 = torch.rand(128, 64, 3, 3, device="cuda") * 0.05
    b2, pb2 = torch.rand(128, device="cuda"), torch.rand(128, device="cuda")
    task = "L2_1_conv_relu_bias"
    ref = torch_sides(
        task, lambda t: torch.relu(torch.nn.functional.conv2d(t, w2, b2)) + pb2.view(1, -1, 1, 1), x2
    )
    record(
        task,
        "nhwc implicit GEMM (new)",
        lambda: conv.conv2d(x2, w2, b2, activation="relu", post_bias=pb2),
        ref,
    )
    record(task, "NCHW gather (old, int32 epilogue)", lambda: gather(x2, w2), None)
    del ref
    x3 = torch.rand(16, 64, 512, 512, device="cuda")
    w3 = torch.rand(64, 1, 3, 3, device="cuda")
    task = "82_depthwise"
    ref = torch_sides(task, lambda t: torch.nn.functional.conv2d(t, w3, groups=64), x3)
    record(task, "rows kernel (new)", lambda: dw.depthwise_conv2d(x3, w3), ref)
    for rows, block_w, warps in ((32, 512, 8), (128, 512, 8), (64, 512, 4), (64, 256, 4)):

        def rows_kernel(rows: int = rows, block_w: int = block_w, warps: int = warps) -> torch.Tensor:
            y = torch.empty((16, 64, 510, 510), device="cuda")
            grid = (16 * 64, triton.cdiv(510, block_w), triton.cdiv(510, rows))
            dw.depthwise_conv2d_rows_kernel[grid](
                x3,
                w3,
                w3,
                y,
                64,
                512,
                512,
                510,
                510,
                *x3.stride(),
                1,
                0,
                0,
                1,
                rows,
                KH=3,
                KW=3,
                HAS_BIAS=False,
                BLOCK_W=block_w,
                num_warps=warps,
            )
            return y

        record(task, f"rows ROWS={rows} BLOCK_W={block_w} w={warps}", rows_kernel, ref)

    def tile() -> torch.Tensor:
        y = torch.empty((16, 64, 510, 510), device="cuda")
        grid = (16 * 64, triton.cdiv(510, 16), triton.cdiv(510, 128))
        dw.depthwise_conv2d_kernel[grid](
            x3,
            w3,
            w3,
            y,
            64,
            512,
            512,
            510,
            510,
            *x3.stride(),
            1,
            1,
            0,
            0,
            1,
            1,
            KH=3,
            KW=3,
            HAS_BIAS=False,
            BLOCK_H=16,
            BLOCK_W=128,
            num_warps=4,
        )
        return y

    record(task, "tile kernel (old)", tile, ref)
    del ref


@triton.jit
def _act(x, ACT: tl.constexpr):
    if ACT == "copy":
        return x
    if ACT == "gelu":
        return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    e = tl.exp(-2.0 * tl.abs(inner))
    t = (1.0 - e) / (1.0 + e)
    return 0.5 * x * (1.0 + tl.where(inner >= 0, t, -t))


@triton.jit
def elementwise_variant_kernel(
    x_ptr, y_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr, STREAM: tl.constexpr, PROGRAMS: tl.constexpr
):
    """y = act(x): one BLOCK a program (PROGRAMS = 0), or PROGRAMS programs striding over the
    blocks; STREAM marks loads evict-first and stores streaming (.cs)."""
    if PROGRAMS == 0:
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        if STREAM:
            x = tl.load(x_ptr + offs, mask=mask, eviction_policy="evict_first")
            tl.store(y_ptr + offs, _act(x, ACT), mask=mask, cache_modifier=".cs")
        else:
            tl.store(y_ptr + offs, _act(tl.load(x_ptr + offs, mask=mask), ACT), mask=mask)
    else:
        for start in range(tl.program_id(0).to(tl.int64) * BLOCK, n, PROGRAMS * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n
            if STREAM:
                x = tl.load(x_ptr + offs, mask=mask, eviction_policy="evict_first")
                tl.store(y_ptr + offs, _act(x, ACT), mask=mask, cache_modifier=".cs")
            else:
                tl.store(y_ptr + offs, _act(tl.load(x_ptr + offs, mask=mask), ACT), mask=mask)


def probe_elementwise() -> None:
    for task, shape, name in (
        ("26_gelu", (4096, 393216), "gelu"),
        ("88_mingpt_gelu", (8192, 8192), "gelu_tanh"),
    ):
        elementwise_task(task, shape, name)
        torch.cuda.empty_cache()


def elementwise_task(task: str, shape: tuple[int, int], name: str) -> None:
    act = entry("activation")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.rand(*shape, device="cuda")
    n = x.numel()

    def mingpt(t: torch.Tensor) -> torch.Tensor:
        return 0.5 * t * (1.0 + torch.tanh(0.7978845608028654 * (t + 0.044715 * torch.pow(t, 3.0))))

    ref = torch_sides(task, torch.nn.functional.gelu if name == "gelu" else mingpt, x)
    record(task, "entry", lambda: act.activation(x, name), ref)
    record(task, "torch clone (copy bound)", lambda: x.clone())

    def run(kind: str, block: int, warps: int, stream: bool, programs: int) -> torch.Tensor:
        y = torch.empty_like(x)
        grid = (programs,) if programs else (triton.cdiv(n, block),)
        elementwise_variant_kernel[grid](
            x, y, n, ACT=kind, BLOCK=block, STREAM=stream, PROGRAMS=programs, num_warps=warps
        )
        return y

    record(task, "copy kernel BLOCK=4096 w=8", lambda: run("copy", 4096, 8, False, 0))
    for block, warps in ((1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16)):
        for stream in (False, True):
            record(
                task,
                f"BLOCK={block} w={warps} stream={stream}",
                lambda b=block, w=warps, s=stream: run(name, b, w, s, 0),
                ref,
            )
    for block, warps, per_sm in ((4096, 8, 4), (4096, 8, 8), (8192, 8, 4), (2048, 4, 16)):
        for stream in (False, True):
            record(
                task,
                f"persistent {per_sm}/SM BLOCK={block} w={warps} stream={stream}",
                lambda b=block, w=warps, s=stream, p=per_sm: run(name, b, w, s, p * sms),
                ref,
            )


def probe_batchnorm() -> None:
    bn_entry = entry("batchnorm")
    x = torch.rand(64, 64, 512, 512, device="cuda")
    bnm = torch.nn.BatchNorm2d(64).cuda().train()
    ref = torch_sides("33_batchnorm", lambda t: bnm(t), x)
    keep = bn_entry.CHUNK
    for chunk in (4096, 8192, 16384, 32768):
        bn_entry.CHUNK = chunk
        record(
            "33_batchnorm",
            f"entry CHUNK={chunk}",
            lambda: bn_entry.batch_norm(x, bnm.weight, bnm.bias, 1e-5, training=True),
            ref,
        )
    bn_entry.CHUNK = keep


PROBES = {
    "conv": probe_conv,
    "softmax": probe_softmax,
    "norms": probe_norms,
    "pool": probe_pool,
    "reduce": probe_reduce,
    "bmm": probe_bmm,
    "elementwise": probe_elementwise,
    "batchnorm": probe_batchnorm,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--only", nargs="*", choices=sorted(PROBES), help="these probes only")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_memory_bound needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    print(meta, flush=True)
    for name in args.only or PROBES:
        PROBES[name]()
        torch.cuda.empty_cache()  # the probe's tensors died with it
        if args.json:
            args.json.write_text(json.dumps({"meta": meta, "results": RESULTS}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
