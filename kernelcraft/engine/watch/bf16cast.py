"""Casts to bfloat16 in Triton's CPU interpreter, rounded to nearest even as the GPU rounds them.

On the GPU, `x.to(tl.bfloat16)` of an fp32 (or fp16, fp64) value is LLVM's `fptrunc`: round to
nearest, ties to even. Triton's interpreter (3.6 to 3.9) drops the low 16 bits instead (its
`cast_impl` converts with no rounding mode), and its "RTNE" rounds a tie up whatever the last
bit; fp64 to bfloat16 reinterprets the number as an integer. Half the values of a bf16 store came
out one unit in the last place low on the CPU, so an honest kernel that stores bf16 failed a
verify whose answer cancels (a bf16 residual add) on the CPU alone.

`round_bf16_to_nearest()` replaces `InterpreterBuilder.cast_impl` and `create_fp_to_fp` for a
cast to bfloat16 from a wider or other float type, and leaves every other cast, and an explicit
`fp_downcast_rounding="rtz"`, to the interpreter. Installed with the TF32 emulation
(`tf32.emulate_tf32`), in the candidate worker and the reference worker's replay alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_installed: dict[str, Any] = {}


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) nearest `values` (any float dtype), ties to even; NaN
    stays a quiet NaN and infinities stay infinite, as `torch.Tensor.to(torch.bfloat16)`. (The
    bits `tf32.to_bf16` keeps as fp32; that module installs this one, so this one stands alone.)"""
    f32 = np.array(values, dtype=np.float32)  # a copy, C-ordered, 0-d kept 0-d
    bits = f32.view(np.uint32).astype(np.uint64)
    high = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return np.where(np.isnan(f32), (bits >> 16) | 0x40, high).astype(np.uint16)


def round_bf16_to_nearest() -> None:
    """Make every later interpreted cast to bfloat16 round to nearest even. Idempotent."""
    if _installed:
        return
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    _installed["cast_impl"] = builder.cast_impl
    _installed["create_fp_to_fp"] = builder.create_fp_to_fp
    _installed["TensorHandle"] = interpreter.TensorHandle
    builder.cast_impl = _cast_impl
    builder.create_fp_to_fp = _create_fp_to_fp


def _to_bf16(src: Any, dst_type: Any) -> Any | None:
    """The cast of `src` to bfloat16 rounded to nearest even, or None where it is not one."""
    import triton.language as tl

    if dst_type.scalar != tl.bfloat16:
        return None
    src_type = src.dtype.scalar
    if src_type == tl.bfloat16 or not src_type.is_floating():
        return None
    if src_type == tl.float16:
        data = src.data.astype(np.float32)
    elif src_type in (tl.float32, tl.float64):
        data = src.data
    else:  # fp8 kinds: the interpreter's own conversion
        return None
    return _installed["TensorHandle"](to_bf16_bits(data), tl.bfloat16)


def _cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
    done = _to_bf16(src, dst_type)
    return done if done is not None else _installed["cast_impl"](self, src, dst_type)


def _create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
    from triton._C.libtriton import ir

    if rounding_mode is None or rounding_mode == ir.ROUNDING_MODE.RTNE:
        done = _to_bf16(src, dst_type)
        if done is not None:
            return done
    return _installed["create_fp_to_fp"](self, src, dst_type, rounding_mode)
