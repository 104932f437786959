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

The floor is max(compute time, memory time) with compute time = matmul FLOPs / rate(precision) +
elementwise FLOPs / peak(fp32). The precision is the fastest way to do the matmul work that still
meets the task's tolerance (`PRECISIONS`, `fastest_precision`): an fp32 task held to rtol 1e-4 may
be computed as bf16x3 (each operand split into two bfloat16 parts, three bf16 tensor-core products
per multiply-add: 16 bits of mantissa), so its rate is a third of the bf16 dense peak, not the fp32
CUDA-core peak a kernel on tensor cores runs far faster than. A correct kernel therefore does not
beat its floor; `tests/engine/measure/test_cookbook_floors.py` checks that on the cookbook's H200 timings.

Peaks and bandwidths are the target registry's (`base/targets.py`): dense datasheet rates, and
HBM bandwidth as measured on the device where we measured it (the H200: about 4.3 TB/s, not the
datasheet's 4.8).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kernelcraft.base.errors import UsageError
from kernelcraft.base.targets import TargetFacts, Unit, facts
from kernelcraft.schema.evaluation import Roofline


@dataclass(frozen=True)
class Precision:
    """One way to compute a multiply-add: on which unit, with how many of its products."""

    name: str
    """Triton's `input_precision` where it has one ('ieee', 'tf32', 'tf32x3', 'bf16x3', 'bf16x6'),
    else the operand type ('bf16', 'fp16', 'fp8')."""
    unit: Unit
    products: int
    """Products on `unit` per multiply-add of the task's work (bf16x3: hi*hi + hi*lo + lo*hi)."""
    roundoff: float
    """Relative error of one operand as the scheme holds it (2^-significant bits)."""

    def rate(self, target: TargetFacts) -> float | None:
        """TFLOP/s of the task's work on `target` in this precision, or None without the unit."""
        peak = target.tflops.get(self.unit)
        return peak / self.products if peak else None


PRECISIONS: tuple[Precision, ...] = (
    Precision("ieee", "fp32", 1, 2.0**-24),  # fp32 FMA on the CUDA cores / SIMD units
    Precision("bf16x6", "bf16", 6, 2.0**-24),  # three bf16 parts per operand
    Precision("tf32x3", "tf32", 3, 2.0**-21),  # two tf32 parts per operand, 22 bits
    Precision("bf16x3", "bf16", 3, 2.0**-16),  # two bf16 parts per operand, 16 bits
    Precision("tf32", "tf32", 1, 2.0**-11),
    Precision("bf16", "bf16", 1, 2.0**-8),  # before fp16: the one of equal rate chosen for fp32 (its range)
    Precision("fp16", "fp16", 1, 2.0**-11),
    Precision("fp8", "fp8", 1, 2.0**-4),  # e4m3
)
_BY_NAME = {p.name: p for p in PRECISIONS} | {"fp32": PRECISIONS[0]}


def precision(name: str) -> Precision:
    found = _BY_NAME.get(name)
    if found is None:
        raise UsageError(f"unknown precision {name!r}; use one of {', '.join(p.name for p in PRECISIONS)}")
    return found


def fastest_precision(target: str, rtol: float, prefer: str = "") -> Precision:
    """The fastest precision on `target` whose operand roundoff is within `rtol` (the task's
    relative tolerance), `prefer` (the reference's operand type) among equally fast ones; 'ieee'
    when none fits (a tolerance tighter than fp32's)."""
    t = facts(target)
    fitting = [p for p in PRECISIONS if p.roundoff <= rtol and p.rate(t)]
    return max(fitting, key=lambda p: (p.rate(t) or 0.0, p.name == prefer), default=PRECISIONS[0])


def roofline(
    target: str, flops: float, bytes: float, precision_name: str = "ieee", elementwise_flops: float = 0.0
) -> Roofline:
    """The floor of a workload on `target`. `flops` is the total; `elementwise_flops` (part of it)
    runs at the fp32 vector rate, the rest at the rate of `precision_name` (`PRECISIONS`)."""
    t = facts(target)
    p = precision(precision_name)
    rate = p.rate(t)
    if rate is None:
        raise UsageError(
            f"{t.gpu} has no {p.unit} unit for precision {p.name}; its units: {', '.join(t.tflops)}"
        )
    elementwise_flops = min(max(elementwise_flops, 0.0), flops)
    compute_us = (
        (flops - elementwise_flops) / (rate * 1e12) + elementwise_flops / (t.tflops["fp32"] * 1e12)
    ) * 1e6
    memory_us = bytes / (t.hbm_gbps * 1e9) * 1e6
    return Roofline(
        target=target,
        flops=flops,
        elementwise_flops=elementwise_flops,
        bytes=bytes,
        precision=p.name,
        peak_tflops=rate,
        peak_gbps=t.hbm_gbps,
        floor_us=max(compute_us, memory_us),
        bound="memory" if memory_us >= compute_us else "compute",
    )


def physical_floor_us(flops: float, bytes: float, target: TargetFacts) -> float:
    """The least time any kernel can take for this work on `target`: its bytes at the HBM bandwidth
    or all its FLOPs at the fastest unit's peak (any precision, tolerance or not), whichever is
    larger. Never above `roofline(...)`'s floor for the same work and target (same bandwidth, a
    faster rate), so it is deliberately optimistic: an algebraic rewrite doing less work than the
    reference still fits under it, only a timing that hid or skipped the work falls below it."""
    return max(bytes / (target.hbm_gbps * 1e9), flops / (max(target.tflops.values()) * 1e12)) * 1e6


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
    """The reference's operand type ('fp32', 'bf16', 'fp16', 'fp8')."""
    float_dtypes: tuple[Any, ...] = ()
    """The torch dtypes the task's tolerance is set by: its floating outputs', else its inputs'."""


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
    out_tensors = _tensors(out)
    matmul = float(counter.get_total_flops())
    floating = [t.dtype for t in out_tensors if t.dtype.is_floating_point] or [
        t.dtype for t in in_tensors + params if t.dtype.is_floating_point
    ]
    return Work(
        flops=matmul + elementwise.flops,
        elementwise_flops=elementwise.flops,
        bytes=float(_nbytes(in_tensors + params) + _nbytes(out_tensors)),
        dtype=_dtype_name(in_tensors + params),
        float_dtypes=tuple(dict.fromkeys(floating)) or (torch.float32,),
    )


def floor_of(work: Work, target: str, rtol_of: Callable[[Any], float]) -> Roofline:
    """The floor of counted work: the matmul work at the fastest precision that meets the task's
    tolerance, the strictest `rtol_of(dtype)` over `work.float_dtypes`."""
    rtol = min(rtol_of(d) for d in work.float_dtypes)
    p = fastest_precision(target, rtol, work.dtype)
    r = roofline(target, work.flops, work.bytes, p.name, work.elementwise_flops)
    r.rtol = rtol
    return r


def roofline_for(model: Any, inputs: Sequence[Any], target: str, rtol_of: Callable[[Any], float]) -> Roofline:
    """The roofline floor of one forward of the reference `model` on `inputs` for `target`, for
    a task whose outputs are held to `rtol_of(dtype)` (the correctness rule's relative tolerance)."""
    return floor_of(count_work(model, inputs), target, rtol_of)


def on_meta(task: Any, full_task: Any, model: Any, target: str, rtol_of: Callable[[Any], float]) -> Roofline:
    """The roofline of the full-size `get_inputs()` built on the meta device (no memory, no
    compute): `Model` built from `full_task` (the task as given, when the trials run a shrunk
    copy), else `model` moved to meta."""
    import copy

    import torch

    torch.manual_seed(0)
    with torch.device("meta"):
        meta_inputs = list((full_task or task).get_inputs())
        meta_model = full_task.Model(*full_task.get_init_inputs()) if full_task is not None else None
    if meta_model is None:
        meta_model = copy.deepcopy(model).to("meta")
    return roofline_for(meta_model, meta_inputs, target, rtol_of)
