"""Roofline floors: the least time one forward of the *reference* can take on a target.

Work is counted from the reference, never from the candidate:

- FLOPs: `torch.utils.flop_counter.FlopCounterMode` counts matmul, convolution and attention
  (2 per multiply-add). It counts nothing else, so we add, for every other aten op, 1 FLOP per
  output element for pointwise ops (ops tagged `torch.Tag.pointwise`: add, mul, relu, exp, ...)
  and 1 FLOP per input element for reductions and normalisations (sum, mean, amax, softmax,
  layer_norm, ...). These "elementwise FLOPs" are a lower bound (exp or softmax cost more than 1)
  and run at the vector (fp32) rate, not the tensor-core rate.
- Bytes: every tensor input read once, every parameter and buffer read once, every output
  written once. Intermediates are assumed to stay on chip (a perfectly fused kernel).

The floor is max(compute time, memory time) with compute time = matmul FLOPs / peak(dtype) +
elementwise FLOPs / peak(fp32). A kernel can come close to the floor but not beat it by much
(unless it uses a faster precision than the reference, e.g. TF32 for an fp32 matmul).

Peaks: datasheet numbers with their source beside each, dense (no 2:4 sparsity; where a datasheet
gives only sparse figures they are halved, as its footnotes say). `h200-measured` holds what we
measured on our H200 (docs/design.md, "Measured facts").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kernelcraft.base.errors import UsageError
from kernelcraft.base.evaluation import Roofline


@dataclass(frozen=True)
class Peak:
    name: str
    gbps: float
    tflops: dict[str, float]  # dtype -> dense TFLOP/s; "fp32" is the vector (non-tensor-core) rate
    source: str


PEAKS: dict[str, Peak] = {
    # NVIDIA A100 Tensor Core GPU datasheet (nvidia.com, A100 80GB SXM column): FP32 19.5 TFLOPS,
    # TF32 156, BF16/FP16 312 (dense; 312/624 with sparsity), 2,039 GB/s.
    "sm_80": Peak(
        "A100 80GB SXM",
        2039.0,
        {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        "NVIDIA A100 datasheet",
    ),
    # Same datasheet, A100 40GB (SXM and PCIe columns): 1,555 GB/s; compute as above.
    "a100-40gb": Peak(
        "A100 40GB",
        1555.0,
        {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        "NVIDIA A100 datasheet",
    ),
    # NVIDIA L40S datasheet: FP32 91.6 TFLOPS, TF32 183 | 366*, BF16/FP16 362.05 | 733*,
    # FP8 733 | 1,466* (* with sparsity), 864 GB/s GDDR6.
    "sm_89": Peak(
        "L40S",
        864.0,
        {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
        "NVIDIA L40S datasheet",
    ),
    # NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): FP32 67 TFLOPS, TF32 989, BF16/FP16 1,979,
    # FP8 3,958 TFLOPS (all "with sparsity": halved here), 4.8 TB/s HBM3e. sm_90a is the H200 here
    # because that is the GPU kernelcraft is measured on.
    "sm_90a": Peak(
        "H200 SXM",
        4800.0,
        {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0},
        "NVIDIA H200 datasheet",
    ),
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): compute as H200 SXM, 3.35 TB/s.
    "h100-sxm": Peak(
        "H100 SXM",
        3350.0,
        {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0},
        "NVIDIA H100 datasheet",
    ),
    # Measured on our H200 (torch 2.11, Triton 3.6; docs/design.md "Measured facts"): ~4.3 TB/s
    # device-to-device, ~790 TFLOP/s bf16 dense. Rates we did not measure keep the datasheet value.
    "h200-measured": Peak(
        "H200 SXM (measured)",
        4300.0,
        {"fp32": 67.0, "tf32": 494.5, "bf16": 790.0, "fp16": 790.0, "fp8": 1979.0},
        "kernelcraft measurement on H200; fp32/tf32/fp8 from the NVIDIA H200 datasheet",
    ),
    # NVIDIA HGX B200 datasheet (8 GPUs): FP32 600 TFLOPS, TF32 18 PFLOPS*, FP16/BF16 36 PFLOPS*,
    # FP8 72 PFLOPS*, 64 TB/s (* with sparsity). Per GPU: / 8, sparse figures halved.
    "sm_100": Peak(
        "B200 (HGX)",
        8000.0,
        {"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0},
        "NVIDIA HGX B200 datasheet",
    ),
    # AMD Instinct MI300X data sheet: FP32 vector 163.4 TFLOPs, TF32 653.7, FP16/BF16 1,307.4,
    # FP8 2,614.9 (dense; sparsity doubles the matrix figures), 5.3 TB/s HBM3.
    "gfx942": Peak(
        "MI300X",
        5300.0,
        {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
        "AMD Instinct MI300X data sheet",
    ),
}
_ALIASES = {
    "sm_90": "sm_90a",
    "h200": "sm_90a",
    "h100": "h100-sxm",
    "a100": "sm_80",
    "l40s": "sm_89",
    "b200": "sm_100",
    "sm_100a": "sm_100",
    "mi300x": "gfx942",
}


def peak(target: str) -> Peak:
    key = _ALIASES.get(target.lower(), target.lower())
    if key not in PEAKS:
        raise UsageError(f"no roofline peaks for target {target!r}; known: {', '.join(PEAKS)}")
    return PEAKS[key]


def roofline(
    target: str, flops: float, bytes: float, dtype: str = "fp32", elementwise_flops: float = 0.0
) -> Roofline:
    """The floor of a workload on `target`. `flops` is the total; `elementwise_flops` (part of it)
    runs at the fp32 vector rate, the rest at the `dtype` rate ('fp32', 'tf32', 'bf16', 'fp16', 'fp8')."""
    p = peak(target)
    if dtype not in p.tflops:
        raise UsageError(f"no {dtype} peak for {p.name}; known: {', '.join(p.tflops)}")
    elementwise_flops = min(max(elementwise_flops, 0.0), flops)
    compute_us = (
        (flops - elementwise_flops) / (p.tflops[dtype] * 1e12) + elementwise_flops / (p.tflops["fp32"] * 1e12)
    ) * 1e6
    memory_us = bytes / (p.gbps * 1e9) * 1e6
    return Roofline(
        target=target,
        flops=flops,
        bytes=bytes,
        peak_tflops=p.tflops[dtype],
        peak_gbps=p.gbps,
        floor_us=max(compute_us, memory_us),
        bound="memory" if memory_us >= compute_us else "compute",
    )


# Reductions and normalisations: 1 FLOP per input element. Matched by the op's base name.
_REDUCTIONS = frozenset(
    {
        "sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "std_mean", "norm",
        "linalg_vector_norm", "logsumexp", "_softmax", "_log_softmax", "softmax", "log_softmax", "cumsum",
        "cumprod", "argmax", "argmin", "native_layer_norm", "native_group_norm", "native_batch_norm",
        "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "_fused_rms_norm", "rms_norm",
        "all", "any",
    }
)  # fmt: skip


# Pointwise-tagged or not, these move or fill data: no FLOPs.
_NOT_ARITHMETIC = frozenset(
    {"copy", "clone", "fill", "zero", "_to_copy", "lift_fresh_copy", "detach", "alias"}
)


@dataclass
class Work:
    flops: float
    elementwise_flops: float
    bytes: float
    dtype: str


def _tensors(obj: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


def _nbytes(tensors: Sequence[Any]) -> int:
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        key = (id(t), t.data_ptr() if t.device.type != "meta" else id(t))
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def _dtype_name(tensors: Sequence[Any]) -> str:
    import torch

    names = {
        torch.bfloat16: "bf16",
        torch.float16: "fp16",
        torch.float8_e4m3fn: "fp8",
        torch.float8_e5m2: "fp8",
    }
    found = [names[t.dtype] for t in tensors if t.dtype in names]
    return found[0] if found else "fp32"


def count_work(model: Any, inputs: Sequence[Any]) -> Work:
    """Run the reference once (no grad) and count its FLOPs and fewest bytes."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode, flop_registry

    counted_by_flop_counter = {getattr(op, "_overloadpacket", op) for op in flop_registry}

    class _Elementwise(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.flops = 0.0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            packet = func.overloadpacket
            if packet in counted_by_flop_counter:
                return out
            base = packet.__name__.rstrip("_")
            if base in _NOT_ARITHMETIC:
                return out
            if torch.Tag.pointwise in func.tags:
                self.flops += sum(t.numel() for t in _tensors(out))
            elif base in _REDUCTIONS:
                first = _tensors(args)
                if first:
                    self.flops += first[0].numel()
            return out

    params = [*model.parameters(), *model.buffers()] if hasattr(model, "parameters") else []
    with torch.no_grad():
        counter = FlopCounterMode(display=False)
        elementwise = _Elementwise()
        with counter, elementwise:
            out = model(*inputs)
    in_tensors = _tensors(list(inputs))
    matmul = float(counter.get_total_flops())
    return Work(
        flops=matmul + elementwise.flops,
        elementwise_flops=elementwise.flops,
        bytes=float(_nbytes(in_tensors + params) + _nbytes(_tensors(out))),
        dtype=_dtype_name(in_tensors + params),
    )


def roofline_for(model: Any, inputs: Sequence[Any], target: str) -> Roofline:
    """The roofline floor of one forward of the reference `model` on `inputs` for `target`."""
    work = count_work(model, inputs)
    return roofline(target, work.flops, work.bytes, work.dtype, work.elementwise_flops)
