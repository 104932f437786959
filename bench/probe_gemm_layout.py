"""Why the cookbook's fp32 GEMM trails cuBLAS: operand layout, alignment and precision (H200 probe).

    python bench/probe_gemm_layout.py [--json OUT.json]

The cookbook's `gemm` kernel (3xTF32) ran KernelBench's square and standard matmuls at 0.68x eager
and the irregular one at 0.34x, while the same loop in `linear_epilogue`, whose B operand is
nn.Linear's (N, K) weight, ran at 1.56x. This probe times the `gemm` kernel on KernelBench's
shapes with the host changing only what it passes in:

- `as_given`: B (K, N) row-major, as the task makes it (N-major: N is the contiguous dimension);
- `b_kmajor`: B copied once to (N, K) row-major and passed with its strides (K-major), copy timed;
- `packed`: A and B copied to K-major buffers whose rows are padded to a multiple of 32 elements
  (16-byte aligned rows, zeros past K), copies timed;

and, for the layout that wins, each `input_precision` (ieee, tf32x3, tf32), with the largest error
against an fp64 product scaled as kernelcraft's fp32 check does (|err| / (atol + rtol*|ref|), atol =
rtol = 1e-4; <= 1 passes). It says for each compiled variant whether the PTX uses Hopper's `wgmma`.
torch.matmul (cuBLAS, TF32 off, as the reference runs) is timed alongside. Times: the median of
triton.testing.do_bench(rep=200).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.testing

REPO = Path(__file__).resolve().parent.parent
ENTRY = REPO / "kernelcraft" / "knowledge" / "cookbook" / "entries" / "gemm" / "kernel.py"
SHAPES = {  # KernelBench level 1: name -> (M, K, N)
    "1_square": (4096, 4096, 4096),
    "2_standard": (2048, 8192, 4096),
    "8_irregular": (8205, 2949, 5921),
}
PAD = 32


def load_variant(precision: str, tmp: Path):
    """The gemm entry's module with every tl.dot's input_precision set to `precision`."""
    source = ENTRY.read_text().replace('input_precision="tf32x3"', f'input_precision="{precision}"')
    path = tmp / f"gemm_{precision}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"gemm_{precision}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch(module, a: torch.Tensor, b: torch.Tensor, layout: str) -> torch.Tensor:
    """C = A @ B through the entry's kernel, the operands prepared as `layout` says."""
    M, K = a.shape
    N = b.shape[1]
    if layout == "b_kmajor":
        b = b.t().contiguous().t()  # (K, N) view of an (N, K) row-major buffer: strides (1, K)
    elif layout == "packed":
        kp = triton.cdiv(K, PAD) * PAD
        ap = torch.zeros((M, kp), device=a.device, dtype=a.dtype)
        ap[:, :K] = a
        bp = torch.zeros((N, kp), device=a.device, dtype=a.dtype)
        bp[:, :K] = b.t()
        a, b, K = ap, bp.t(), kp
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    module.matmul_kernel[grid](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)
    )
    return c


def uses_wgmma(module) -> bool | None:
    """Whether any compiled specialization of the module's kernel issues wgmma (None: unknown)."""
    try:
        caches = module.matmul_kernel.fn.device_caches
        kernels = [k for cache in caches.values() for k in cache[0].values()]
        return any("wgmma" in k.asm.get("ptx", "") for k in kernels)
    except Exception:  # noqa: BLE001 - Triton's cache layout differs between versions
        return None


def error_ratio(c: torch.Tensor, ref: torch.Tensor, tol: float = 1e-4) -> float:
    return float(((c.double() - ref).abs() / (tol + tol * ref.abs())).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        modules = {p: load_variant(p, Path(tmp)) for p in ("tf32x3", "ieee", "tf32")}
        for name, (M, K, N) in SHAPES.items():
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(M, K, device="cuda", generator=g)
            b = torch.randn(K, N, device="cuda", generator=g)
            ref = a.double() @ b.double()
            flops = 2 * M * N * K
            ms = triton.testing.do_bench(lambda a=a, b=b: torch.matmul(a, b), rep=200, return_mode="median")
            rows.append(
                {
                    "shape": name,
                    "variant": "torch.matmul",
                    "ms": ms,
                    "tflops": flops / ms / 1e9,
                    "err_ratio": error_ratio(torch.matmul(a, b), ref),
                }
            )
            print(rows[-1], flush=True)
            for layout in ("as_given", "b_kmajor", "packed"):
                for precision in ("tf32x3", "ieee", "tf32") if layout != "as_given" else ("tf32x3",):
                    module = modules[precision]
                    c = launch(module, a, b, layout)
                    ms = triton.testing.do_bench(
                        lambda m=module, a=a, b=b, lay=layout: launch(m, a, b, lay),
                        rep=200,
                        return_mode="median",
                    )
                    rows.append(
                        {
                            "shape": name,
                            "variant": f"{layout}/{precision}",
                            "ms": ms,
                            "tflops": flops / ms / 1e9,
                            "err_ratio": error_ratio(c, ref),
                            "wgmma": uses_wgmma(module),
                        }
                    )
                    print(rows[-1], flush=True)
            del a, b, ref
            torch.cuda.empty_cache()
    out = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "rows": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    print(f"{'shape':12} {'variant':22} {'ms':>8} {'TFLOP/s':>8} {'err/tol':>8} wgmma")
    for r in rows:
        print(
            f"{r['shape']:12} {r['variant']:22} {r['ms']:8.3f} {r['tflops']:8.1f} {r['err_ratio']:8.3f} {r.get('wgmma')}"
        )


if __name__ == "__main__":
    sys.exit(main())
