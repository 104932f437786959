"""The environment a worker (and its zygote) starts with: an allowlist, not a denylist.

A worker runs a client's code (the task and the candidate), which reads its environment however
it likes. A denylist of secret-looking names let `DATABASE_URL`'s password through to a client; so
the worker inherits only the variables named here, each for a reason, and the pool then sets its
own (`pool.base_env`, `pool.own_env`: the wire's `KERNELCRAFT_WORKER_*`, HOME, TMPDIR, the caches).
Everything else of the server's environment is dropped, whatever its name says.

What is kept, by who needs it:
- the system: PATH (the compilers Triton runs), the locale (LANG, LANGUAGE, LC_*) and TZ;
- Python: where it and its packages are (PYTHONPATH, PYTHONHOME, VIRTUAL_ENV) and how it runs
  (bytecode, encoding, buffering, user site, hash seed);
- Triton: the tools and libraries it is pointed at (ptxas, cuobjdump, nvdisasm, libcuda,
  libdevice) and its numerics defaults (FP fusion, fp32 default). Not its overrides and dumps
  (TRITON_OVERRIDE_DIR, TRITON_KERNEL_OVERRIDE, TRITON_DUMP_DIR, TRITON_ALWAYS_COMPILE), nor the
  interpreter switch, which the pool sets itself;
- CUDA and the GPU: which devices (CUDA_VISIBLE_DEVICES and its peers), where CUDA is (CUDA_HOME,
  CUDA_PATH, LD_LIBRARY_PATH), how modules load, PyTorch's allocator setting; the C compiler
  Triton builds its launchers with (CC, CXX);
- CPU threads: OMP_NUM_THREADS and the BLAS libraries' equivalents.
No KERNELCRAFT_* variable is inherited: the engine's settings reach a worker as its job's fields
and as what its pool writes on the worker's wire (`wire/childenv.py`: its box mode).

Used by `machine/pool.py` (workers and the zygote) and `cluster/ray_evaluator.py` (what Ray's
processes inherit). Imports nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

KEPT: frozenset[str] = frozenset(
    {
        # the system
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        # Python
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONPYCACHEPREFIX",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONUNBUFFERED",
        "PYTHONNOUSERSITE",
        "PYTHONHASHSEED",
        "PYTHONSAFEPATH",
        # Triton
        "TRITON_PTXAS_PATH",
        "TRITON_CUOBJDUMP_PATH",
        "TRITON_NVDISASM_PATH",
        "TRITON_LIBCUDA_PATH",
        "TRITON_LIBDEVICE_PATH",
        "TRITON_CUDACRT_PATH",
        "TRITON_CUDART_PATH",
        "TRITON_DEFAULT_FP_FUSION",
        "TRITON_F32_DEFAULT",
        # CUDA, the GPU and its toolchain
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_MODULE_LOADING",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "ROCM_PATH",
        "LD_LIBRARY_PATH",
        "PYTORCH_CUDA_ALLOC_CONF",
        "CC",
        "CXX",
        # CPU threads
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
    }
    # the locale's categories (glibc's)
    | {
        f"LC_{c}"
        for c in (
            "ALL CTYPE NUMERIC TIME COLLATE MONETARY MESSAGES PAPER NAME ADDRESS TELEPHONE MEASUREMENT"
            " IDENTIFICATION"
        ).split()
    }
)


def kept(name: str) -> bool:
    """Whether a worker inherits the variable `name`."""
    return name in KEPT


def worker_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `base` (this process's environment when None) a worker inherits."""
    env = os.environ if base is None else base
    return {k: v for k, v in env.items() if kept(k)}
