"""`tl.dot` in Triton's CPU interpreter, as the GPU's tensor cores compute it.

On an NVIDIA GPU, `tl.dot` on fp32 operands uses TF32 unless the kernel asks for
`input_precision="ieee"` (or `"tf32x3"`, three TF32 products that recover near-fp32 accuracy):
each operand keeps 10 of its 23 mantissa bits, a relative error near 1e-3 that fails an fp32
tolerance. Triton's interpreter ignores `input_precision` and multiplies in full fp32, so without
this module a kernel that is wrong on the GPU is `correct` on the CPU.

`emulate_tf32()` wraps the interpreter's `create_dot`:
- fp32 operands of a TF32 dot lose their low 13 mantissa bits first (truncation, as the tensor
  cores read the top 19 bits of an fp32 register fed to a TF32 MMA: the larger of the two
  possible errors, so the CPU is never more lenient than the GPU);
- fp32 operands of a `"bf16x3"` or `"bf16x6"` dot are split into two or three bfloat16 parts
  (round to nearest, then the remainder), and the dot sums the same three or six part products
  Triton's compiler emits (its F32DotTC pass);
- bfloat16 operands are widened to fp32 first. The interpreter holds bfloat16 tensors as their
  raw 16-bit patterns (numpy has no bfloat16) and its dot multiplies those integers: every
  bfloat16 `tl.dot` came out as garbage on the CPU (Triton 3.6 to 3.9).
TF32x3 and IEEE dots, and dots of other dtypes, are unchanged.

Only the candidate worker calls this, in interpreter mode, before the candidate is imported.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_LOW_MANTISSA = np.uint32(0x1FFF)  # the 13 of fp32's 23 mantissa bits that TF32 drops
_installed: dict[str, Any] = {}
_rounded = [0]  # fp32 dots rounded to TF32 so far (a verdict's hint, never its decision)


def rounded() -> int:
    """How many interpreted fp32 dots were rounded to TF32 in this process so far."""
    return _rounded[0]


def to_tf32(values: np.ndarray) -> np.ndarray:
    """fp32 values with the mantissa bits TF32 drops cleared; inf and NaN unchanged."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    cut = (bits & ~_LOW_MANTISSA).view(np.float32)
    return np.where(np.isfinite(values), cut, values).astype(np.float32)


def is_tf32(input_precision: Any) -> bool:
    """True for the interpreter's `INPUT_PRECISION.TF32` (not TF32x3, not IEEE)."""
    name = getattr(input_precision, "name", str(input_precision))
    return str(name).upper() == "TF32"


def emulate_tf32() -> None:
    """Make every later interpreted fp32 `tl.dot` with TF32 precision round like the GPU.
    Idempotent. The replacement is this module's own function, not a closure (whose cells a
    candidate could rewrite); the guard (`guard._watched`) holds `InterpreterBuilder.create_dot`
    and the original it calls by identity, so a candidate that puts the exact dot back fails."""
    if _installed:
        return
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    _installed["create_dot"] = builder.create_dot
    _installed["TensorHandle"] = interpreter.TensorHandle
    _installed["builder_class"] = builder
    _installed["builder"] = interpreter.interpreter_builder
    _installed["ours"] = _create_dot
    builder.create_dot = _create_dot
    _allow_bf16_splits(interpreter.interpreter_builder)
    from kernelcraft.engine.watch.bf16cast import round_bf16_to_nearest

    round_bf16_to_nearest()  # casts to bf16 round to nearest even, as on the GPU
    from kernelcraft.engine.watch.libdevice import serve_libdevice

    serve_libdevice()  # libdevice.tanh and its kin compute, as on the GPU


def _allow_bf16_splits(builder: Any) -> None:
    """Let the interpreter accept `"bf16x3"` and `"bf16x6"`, which the GPU backends take and
    `_create_dot` computes as they do; the interpreter's own options list only tf32, tf32x3 and
    ieee, so a kernel using them failed on the CPU alone."""
    import dataclasses

    from triton._C.libtriton import ir

    options: Any = getattr(builder, "options", None)
    allowed = getattr(options, "allowed_dot_input_precisions", None)
    extra = tuple(p for p in ("bf16x3", "bf16x6") if p not in (allowed or ()))
    if allowed is None or not extra or not hasattr(ir.INPUT_PRECISION, "BF16x3"):
        return
    try:
        builder.options = dataclasses.replace(options, allowed_dot_input_precisions=(*allowed, *extra))
    except TypeError:  # not the dataclass this was written against: leave the interpreter as it is
        return


def undone() -> str | None:
    """How the emulation was taken out of the interpreter's way (None: it is in place). Checked
    at every interpreted launch, so undoing it only around a launch is seen too."""
    if not _installed:
        return None
    import sys

    interpreter = sys.modules.get("triton.runtime.interpreter")
    builder_class, builder = _installed["builder_class"], _installed["builder"]
    if builder_class.__dict__.get("create_dot") is not _installed["ours"]:
        return "InterpreterBuilder.create_dot was replaced"
    if "create_dot" in vars(builder):
        return "the interpreter's builder has a create_dot of its own"
    if interpreter is None or getattr(interpreter, "interpreter_builder", None) is not builder:
        return "the interpreter's builder was replaced"
    if type(builder) is not builder_class:
        return "the interpreter's builder changed class"
    semantic = getattr(interpreter, "interpreter_semantic", None)
    if semantic is not None and getattr(semantic, "builder", builder) is not builder:
        return "the interpreter's semantic uses another builder"
    return None


def installed() -> tuple[Any, Any]:
    """(the interpreter's create_dot now, the original ours calls): what the guard watches."""
    import sys

    interpreter = sys.modules.get("triton.runtime.interpreter")
    now = getattr(getattr(interpreter, "InterpreterBuilder", None), "create_dot", None)
    return now, _installed.get("create_dot")


def to_bf16(values: np.ndarray) -> np.ndarray:
    """fp32 values rounded to the nearest bfloat16 (ties to even), kept as fp32; inf and NaN
    unchanged."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)).view(
        np.float32
    )
    return np.where(np.isfinite(values), rounded, values).astype(np.float32)


def split_bf16(values: np.ndarray, parts: int) -> list[np.ndarray]:
    """`values` as `parts` bfloat16 values (in fp32) whose sum approximates it: each part is the
    rounded remainder of the ones before."""
    out, rest = [], np.asarray(values, dtype=np.float32)
    for _ in range(parts):
        part = to_bf16(rest)
        out.append(part)
        rest = np.where(np.isfinite(part), rest - part, 0.0).astype(np.float32)
    return out


# The part products Triton's F32DotTC pass sums for each precision: (a part, b part) pairs,
# smallest first (the order it accumulates in).
# Tuples, not a dict: an UPPERCASE tuple is one of the constants the guard holds by value.
_BF16_TERMS = (
    ("BF16X3", ((1, 0), (0, 1), (0, 0))),
    ("BF16X6", ((1, 1), (0, 2), (2, 0), (1, 0), (0, 1), (0, 0))),
)


def _precision(input_precision: Any) -> str:
    return str(getattr(input_precision, "name", input_precision)).upper()


def _create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
    import triton.language as tl

    handle = _installed["TensorHandle"]
    if a.dtype.scalar == tl.bfloat16 and b.dtype.scalar == tl.bfloat16:  # raw bits: widen to fp32
        a = handle((a.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
        b = handle((b.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
    elif a.data.dtype == np.float32 and b.data.dtype == np.float32:
        precision = _precision(input_precision)
        if is_tf32(input_precision):
            _rounded[0] += 1
            a = handle(to_tf32(a.data), a.dtype.scalar)
            b = handle(to_tf32(b.data), b.dtype.scalar)
        elif (terms := dict(_BF16_TERMS).get(precision)) is not None:
            parts = 1 + max(max(t) for t in terms)
            a_parts, b_parts = split_bf16(a.data, parts), split_bf16(b.data, parts)
            # One product over K stacked: sum_t A_t B_t is [A_1 .. A_T] @ [B_1; ..; B_T].
            a = handle(np.concatenate([a_parts[i] for i, _ in terms], axis=-1), a.dtype.scalar)
            b = handle(np.concatenate([b_parts[j] for _, j in terms], axis=-2), b.dtype.scalar)
    return _installed["create_dot"](self, a, b, d, input_precision, max_num_imprecise_acc)
