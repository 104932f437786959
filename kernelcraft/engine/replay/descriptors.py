"""Host-side tensor descriptors (`triton.tools.tensor_descriptor.TensorDescriptor`, TMA on Hopper)
as the replays carry them: the tape holds a launch's descriptor as `Desc` (its base tensor as the
tape saw it, and its layout), and each replay rebuilds it over its own memory (`descriptor`).
Written by the evaluation engine only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Desc:
    """A host-side `TensorDescriptor` a launch got (TMA on Hopper): its base tensor as the tape
    saw it and its layout, rebuilt over the replay's memory (`descriptor`)."""

    base: Any
    """The base tensor: a `replay.Ref` on the tape."""
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block_shape: tuple[int, ...]
    padding: str
    round_f32_to_tf32: bool


def descriptor_type() -> Any:
    """Triton's host-side `TensorDescriptor` class (None where this Triton has none)."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # pragma: no cover - Triton 3.9 has it
        return None
    return TensorDescriptor


def rounds_to_tf32(obj: Any) -> bool:
    """A descriptor's `round_f32_to_tf32` (Triton 3.9); False where this Triton has no such
    field (3.6: the H200 machine's)."""
    return bool(getattr(obj, "round_f32_to_tf32", False))


def descriptor(base: torch.Tensor, d: Desc, number: Callable[[Any], Any] = lambda n: n) -> Any:
    """`d` rebuilt over `base` (its shape and strides through `number`: the fresh replay's
    substitutions). Triton's own checks apply (alignment, a unit last stride). The TF32 flag is
    passed only when set: Triton 3.6's descriptor has no such argument."""
    extra = {"round_f32_to_tf32": True} if d.round_f32_to_tf32 else {}
    return descriptor_type()(
        base,
        [int(number(x)) for x in d.shape],
        [int(number(x)) for x in d.strides],
        list(d.block_shape),
        d.padding,
        **extra,
    )
