"""The HBM bandwidth a kernel can reach on this GPU: the figure the roofline's memory floor uses.

    python bench/probe_hbm.py [--gib 4] [--json OUT.json]      # on the GPU machine

Times three Triton kernels over a buffer far larger than L2 with `triton.testing.do_bench`
(median, L2 flushed): a read-only sum (each program reduces its block to one partial sum), a copy
and a fill, and prints each one's GB/s beside the target registry's `hbm_gbps` for this GPU. The
registry's figure must be at least the highest of them, or a correct kernel could beat its
roofline floor: raise it in `kernelcraft/base/targets.py` with this run as its source.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
import triton.testing

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kernelcraft.base.targets import for_device  # noqa: E402

BLOCK = 8192


@triton.jit
def read_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)  # 4 bytes read an element
    tl.store(partial_ptr + pid, tl.sum(x, axis=0))


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)  # 4 read + 4 written


@triton.jit
def fill_kernel(y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.full((BLOCK,), 1.0, tl.float32), mask=offs < n)  # 4 bytes written


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gib", type=float, default=4.0, help="buffer size in GiB (default 4)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("probe_hbm.py needs a CUDA GPU")
    n = int(args.gib * 2**30) // 4
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    grid = (triton.cdiv(n, BLOCK),)
    partial = torch.empty(grid[0], device="cuda")
    runs = {
        "read": (lambda: read_kernel[grid](x, partial, n, BLOCK=BLOCK), 4 * n),
        "copy": (lambda: copy_kernel[grid](x, y, n, BLOCK=BLOCK), 8 * n),
        "fill": (lambda: fill_kernel[grid](y, n, BLOCK=BLOCK), 4 * n),
    }
    device = torch.cuda.get_device_name()
    target = for_device(device)
    out: dict[str, object] = {"device": device, "bytes_per_buffer": 4 * n}
    for name, (fn, nbytes) in runs.items():
        ms = triton.testing.do_bench(fn, return_mode="median")
        out[f"{name}_gbps"] = nbytes / (ms * 1e-3) / 1e9
        print(f"{name}: {ms:.3f} ms, {out[f'{name}_gbps']:.0f} GB/s")
    if target is not None:
        out["registry_gbps"] = target.hbm_gbps
        best = max(float(v) for k, v in out.items() if k.endswith("_gbps") and k != "registry_gbps")  # type: ignore[arg-type]
        verdict = "holds" if best <= target.hbm_gbps else "is too low: raise it"
        print(
            f"registry ({target.name}): {target.hbm_gbps:.0f} GB/s, best measured {best:.0f}: the registry {verdict}"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
