"""The one registry of GPU targets: every fact kernelcraft knows about a target lives in `REGISTRY`.

A target's name, aliases, compiler backend and arch, warp size, shared-memory and SM limits, the
tensor-core path its `tl.dot` should take, its dense peak rate per unit, its HBM bandwidth and
its manual (`kernelcraft/hw_docs/<manual>`) are one `TargetFacts` entry below, each figure with its
source. Everything else reads them from here: the AOT compiler (`engine/checks/aot.py`), the
roofline (`engine/measure/roofline.py`), the physical floor (`engine/host/verdicts.py`), occupancy
(`base/occupancy.py`), the tuner's shared-memory bound, the CLI's choices, the MCP schema's
descriptions and the prompts. `tests/base/test_targets.py` fails when a target name is written
anywhere else in the package.

Adding a target: one entry in `REGISTRY` and its name in `Target`, its manual in `hw_docs/`, and
its tests (docs/development.md, "Where each kind of change goes").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from kernelcraft.base.errors import UsageError

Target = Literal["sm_80", "sm_89", "sm_90a", "sm_100", "gfx942"]
"""Every target's name, for pydantic and the MCP schema; `REGISTRY` holds exactly these."""

Unit = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
"""A unit's input type: 'fp32' is the vector (CUDA-core / SIMD) rate, the others tensor cores."""


@dataclass(frozen=True)
class SMLimits:
    """What one streaming multiprocessor holds at once (CUDA occupancy calculator's inputs)."""

    registers: int = 65_536
    warps: int = 64
    blocks: int = 32
    shared_bytes: int = 228 * 1024  # per SM; 1 KiB of it reserved per block


@dataclass(frozen=True)
class TargetFacts:
    name: Target
    gpu: str
    """The GPU as a prompt names it."""
    aliases: tuple[str, ...]
    """Other spellings a user or Triton may use (lower case); each names one target only."""
    devices: tuple[str, ...]
    """Substrings of `torch.cuda.get_device_name()` of the GPUs this target is timed on."""
    backend: Literal["cuda", "hip"]
    arch: int | str
    """Triton's `GPUTarget.arch`: the compute capability (NVIDIA) or the gfx name (AMD)."""
    warp_size: int
    max_shared_per_block: int
    """Largest shared memory (LDS) one block may use, in bytes; beyond it Triton raises OutOfResources."""
    sm: SMLimits | None
    """Per-SM limits for the occupancy calculation; None where it is not modelled (AMD)."""
    tensor_core_path: str
    """The instruction a well-formed `tl.dot` compiles to ('mma.sync', 'wgmma', 'tcgen05', 'mfma')."""
    tflops: dict[Unit, float]
    """Dense peak TFLOP/s per unit (no 2:4 sparsity; datasheets' sparse figures halved)."""
    hbm_gbps: float
    """HBM bandwidth the roofline uses: measured on the device where we measured it, else the datasheet's."""
    manual: str
    """The target's manual in `kernelcraft/hw_docs/`."""
    sources: tuple[str, ...]
    default: bool = True
    """Compiled for when a job names no targets."""


REGISTRY: dict[str, TargetFacts] = {
    t.name: t
    for t in (
        TargetFacts(
            name="sm_80",
            gpu="NVIDIA A100 (Ampere, sm_80)",
            aliases=("a100",),
            devices=("A100",),
            backend="cuda",
            arch=80,
            warp_size=32,
            max_shared_per_block=163 * 1024,
            sm=SMLimits(shared_bytes=164 * 1024),
            tensor_core_path="mma.sync",
            tflops={"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
            hbm_gbps=2039.0,
            manual="nvidia-ampere-a100.md",
            sources=(
                "NVIDIA A100 datasheet, A100 80GB SXM: FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS dense, 2,039 GB/s",
                "CUDA C++ Programming Guide, compute capability 8.0: 163 KB shared memory per block, 164 KB per SM",
            ),
        ),
        TargetFacts(
            name="sm_89",
            gpu="NVIDIA L40S (Ada, sm_89)",
            aliases=("l40s",),
            devices=("L40S", "L40"),
            backend="cuda",
            arch=89,
            warp_size=32,
            max_shared_per_block=99 * 1024,
            sm=SMLimits(warps=48, blocks=24, shared_bytes=100 * 1024),
            tensor_core_path="mma.sync",
            tflops={"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
            hbm_gbps=864.0,
            manual="nvidia-ada-l40s.md",
            sources=(
                "NVIDIA L40S datasheet: FP32 91.6, TF32 183, BF16/FP16 362.05, FP8 733 TFLOPS dense, 864 GB/s GDDR6",
                "CUDA C++ Programming Guide, compute capability 8.9: 99 KB per block, 100 KB per SM, 48 warps, 24 blocks",
            ),
            default=False,
        ),
        TargetFacts(
            name="sm_90a",
            gpu="NVIDIA H100/H200 (Hopper, sm_90a)",
            aliases=("sm_90", "h100", "h200"),
            devices=("H200", "H100", "GH200"),
            backend="cuda",
            arch=90,
            warp_size=32,
            max_shared_per_block=227 * 1024,
            sm=SMLimits(),
            tensor_core_path="wgmma",
            tflops={"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0},
            hbm_gbps=4490.0,
            manual="nvidia-hopper-h100-h200.md",
            sources=(
                "NVIDIA H200 datasheet, H200 SXM: FP32 67, TF32 989, BF16/FP16 1,979, FP8 3,958 TFLOPS with "
                "sparsity (halved here), 4.8 TB/s HBM3e",
                "kernelcraft measurements on an H200 (torch 2.11, Triton 3.6): the highest HBM bandwidth a kernel "
                "reached, 4.49 TB/s (the cookbook's MSELoss kernel read 8.59 GB in 1913.9 µs, "
                "docs/results/bench_cookbook_h200_s12.json), the bandwidth used here; a device-to-device copy "
                "reaches about 4.3 TB/s (docs/design.md 'Measured facts'), the datasheet says 4.8; "
                "bench/probe_hbm.py measures it again",
                "CUDA C++ Programming Guide, compute capability 9.0: 227 KB per block, 228 KB per SM",
                "sm_90a holds the H200's figures; an H100 has the same compute and less bandwidth (3.35 TB/s), "
                "so a floor from these is never above an H100's",
            ),
        ),
        TargetFacts(
            name="sm_100",
            gpu="NVIDIA B200 (Blackwell, sm_100)",
            aliases=("sm_100a", "b200"),
            devices=("B200", "GB200"),
            backend="cuda",
            arch=100,
            warp_size=32,
            max_shared_per_block=227 * 1024,
            sm=SMLimits(),
            tensor_core_path="tcgen05",
            tflops={"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0},
            hbm_gbps=8000.0,
            manual="nvidia-blackwell-b200.md",
            sources=(
                "NVIDIA HGX B200 datasheet (8 GPUs): FP32 600 TFLOPS, TF32 18, FP16/BF16 36, FP8 72 PFLOPS with "
                "sparsity, 64 TB/s; per GPU / 8, sparse figures halved",
                "CUDA C++ Programming Guide, compute capability 10.0: 227 KB per block, 228 KB per SM",
            ),
        ),
        TargetFacts(
            name="gfx942",
            gpu="AMD MI300X (CDNA3, gfx942)",
            aliases=("mi300x", "mi300"),
            devices=("MI300X", "MI300"),
            backend="hip",
            arch="gfx942",
            warp_size=64,
            max_shared_per_block=64 * 1024,
            sm=None,
            tensor_core_path="mfma",
            tflops={"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
            hbm_gbps=5300.0,
            manual="amd-cdna3-mi300x.md",
            sources=(
                "AMD Instinct MI300X data sheet: FP32 vector 163.4, TF32 653.7, FP16/BF16 1,307.4, FP8 2,614.9 "
                "TFLOPS dense, 5.3 TB/s HBM3",
                "AMD Instinct MI300 ISA / CDNA3 white paper: 64 KB LDS per compute unit (one workgroup)",
            ),
        ),
    )
}

KNOWN_TARGETS: tuple[Target, ...] = get_args(Target)
DEFAULT_TARGETS: tuple[Target, ...] = tuple(t.name for t in REGISTRY.values() if t.default)
DEFAULT_TARGET: Target = "sm_90a"
"""The target a job, a search or a roofline uses when none is named: the GPU kernelcraft is measured on."""
GPU_NAMES: dict[str, str] = {t.name: t.gpu for t in REGISTRY.values()}
KNOWN_ARCHES: tuple[str, ...] = (*KNOWN_TARGETS, "any")
"""What a hardware-manual section may be about: a target, or every one."""
TARGET_LIST = ", ".join(KNOWN_TARGETS)
"""'sm_80, sm_89, ...' for help texts and descriptions."""
GPU_LIST = ", ".join(t.gpu for t in REGISTRY.values())
"""The GPUs of every target, for descriptions."""

_BY_SPELLING: dict[str, TargetFacts] = {
    spelling: t for t in REGISTRY.values() for spelling in (t.name, *t.aliases)
}


def find(target: str) -> TargetFacts | None:
    """The facts of a target by name or alias (any case), or None."""
    return _BY_SPELLING.get(target.strip().lower())


def facts(target: str) -> TargetFacts:
    """The facts of a target by name or alias (any case); UsageError naming the known ones."""
    found = find(target)
    if found is None:
        raise UsageError(
            f"unknown target {target!r}; use one of {TARGET_LIST} (or an alias: {_alias_list()})"
        )
    return found


def for_device(device: str) -> TargetFacts | None:
    """The target of a GPU by its name ('cuda:0 (NVIDIA H200)'), or None for one we have no facts for."""
    low = device.lower()
    for t in REGISTRY.values():
        if any(d.lower() in low for d in t.devices):
            return t
    return None


def _alias_list() -> str:
    return ", ".join(a for t in REGISTRY.values() for a in t.aliases)


_FAMILIES = {"nvidia": "nvidia", "cuda": "nvidia", "amd": "amd", "hip": "amd", "rocm": "amd"}
_BACKEND_FAMILY = {"cuda": "nvidia", "hip": "amd"}
_NO_FAMILY = {"host", "cpu", "interpreter", "any", ""}


def arch_family(arch: str | None) -> str | None:
    """A target's vendor family: NVIDIA ones (any sm_NN, 'cuda') → 'nvidia'; AMD ones (any gfxNNN,
    'hip') → 'amd'. None, 'host', 'cpu' and 'interpreter' have no family (None); anything else is
    a UsageError."""
    if arch is None:
        return None
    a = arch.strip().lower()
    if a in _NO_FAMILY:
        return None
    if a in _FAMILIES:
        return _FAMILIES[a]
    if a in _BY_SPELLING:
        return _BACKEND_FAMILY[_BY_SPELLING[a].backend]
    if re.fullmatch(r"sm_?\d+[a-z]?", a) or a.startswith("cuda:"):
        return "nvidia"
    if re.fullmatch(r"gfx[0-9a-f]+", a) or a.startswith("hip:"):
        return "amd"
    raise UsageError(
        f"unknown architecture {arch!r}; use a target ({TARGET_LIST}), an NVIDIA sm_NN or AMD gfxNNN "
        "name, or a family name (nvidia, amd)"
    )
