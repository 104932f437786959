"""Where a fresh process's first Triton launch and CUDA start go (issue 13, the first verdict).

Each probe runs in a fresh Python process, as a worker meets it:

  jit       the layernorm example's candidate, first forward in a fresh Triton cache: Triton's
            own C helpers (`cuda_utils`, built with the machine's C compiler), the kernel's
            compile (`triton.compiler.compile`), its launcher (a C stub per signature, built the
            same way) and the rest of the first forward; then the same with `cuda_utils` already
            in the cache (as kernelcraft's workers find it: `engine/tritondriver.py`)
  cuda      torch's CUDA start (`torch.cuda.init()` and a first allocation) alone, after the
            driver was started through ctypes (`cuInit`, the primary context), and with that
            ctypes start in a thread while the main thread imports torch._dynamo

    python bench/probe_first_verdict.py [jit] [cuda]

Prints one line per figure; needs a CUDA GPU.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

JIT = r"""
import os, sys, time, importlib.util
os.environ["TRITON_CACHE_DIR"] = sys.argv[1]
t0 = time.perf_counter()
import torch, triton
import triton.runtime.build as build
import triton.compiler.compiler as compiler
spent = {}
def timed(name, fn):
    def inner(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            key = name(a, k) if callable(name) else name
            spent[key] = spent.get(key, 0.0) + time.perf_counter() - t
    return inner
build._build = timed(lambda a, k: "cc " + a[0], build._build)  # name, src, ...
import triton.compiler as tc
tc.compile = timed("kernel compile", tc.compile)  # JITFunction imports it from here when it compiles
ck = compiler.CompiledKernel
ck._init_handles = timed("module load + launcher", ck._init_handles)
torch.empty(1, device="cuda")
t1 = time.perf_counter()
from triton.runtime import driver
driver.active.utils
t2 = time.perf_counter()
spec = importlib.util.spec_from_file_location("cand", sys.argv[2])
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
task = importlib.util.spec_from_file_location("task", sys.argv[3])
tmod = importlib.util.module_from_spec(task); task.loader.exec_module(tmod)
model = mod.ModelNew(*tmod.get_init_inputs()).cuda()
x = [t.cuda() for t in tmod.get_inputs()]
t3 = time.perf_counter()
model(*x); torch.cuda.synchronize()
t4 = time.perf_counter()
model(*x); torch.cuda.synchronize()
t5 = time.perf_counter()
print(f"{sys.argv[4]}: torch+cuda {t1-t0:.2f} s, driver.active.utils {t2-t1:.2f} s, "
      f"first forward {t4-t3:.2f} s, second {t5-t4:.4f} s; inside: "
      + ", ".join(f"{k} {v:.2f} s" for k, v in spent.items()))
"""

CUDA = r"""
import sys, time, threading, ctypes
mode = sys.argv[1]
def driver_start():
    lib = ctypes.CDLL("libcuda.so.1")
    assert lib.cuInit(0) == 0
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert lib.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
if mode == "ctypes":
    driver_start()
th = None
if mode == "thread":
    th = threading.Thread(target=driver_start); th.start()
t2 = time.perf_counter()
import torch._dynamo
t3 = time.perf_counter()
if th is not None:
    th.join()
t4 = time.perf_counter()
torch.cuda.init(); torch.empty(1, device="cuda")
t5 = time.perf_counter()
print(f"{mode}: torch {t1-t0:.2f} s, driver start {t2-t1:.2f} s, dynamo {t3-t2:.2f} s, "
      f"join {t4-t3:.2f} s, torch cuda start {t5-t4:.2f} s; from torch's import on {t5-t1:.2f} s")
"""


def main() -> None:
    probes = sys.argv[1:] or ["jit", "cuda"]
    task, cand = ROOT / "examples/layernorm/task.py", ROOT / "examples/layernorm/seed.py"
    if "jit" in probes:
        cache = tempfile.mkdtemp(prefix="triton-probe-")
        for label in ("fresh cache", "cuda_utils cached", "all cached"):
            if label == "cuda_utils cached":  # keep Triton's helpers, drop the kernel and launcher
                for d in Path(cache).iterdir():
                    if not any(f.name.startswith("cuda_utils") for f in d.iterdir()):
                        subprocess.run(["rm", "-rf", str(d)], check=True)
            subprocess.run([sys.executable, "-c", JIT, cache, str(cand), str(task), label], check=False)
    if "cuda" in probes:
        for mode in ("torch", "ctypes", "thread", "torch", "ctypes", "thread"):
            subprocess.run([sys.executable, "-c", CUDA, mode], check=False)


if __name__ == "__main__":
    main()
