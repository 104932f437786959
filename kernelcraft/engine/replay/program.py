"""Forward's record as plain data: what the fresh-input replay (`fresh.py`) re-runs elsewhere.

The replay in the candidate's own process (`replay.py`) re-runs forward's recorded launches and
ops on copies of the same inputs, re-using every number forward's host code computed. A number
computed on the host from the inputs (in Python or numpy, out of the recorder's sight) and handed
to a kernel as a scalar or a fill value is then "reproduced" there although no kernel computed
it. `export` turns the record (a `replay.Tape`) into a `Program`: every storage (an input, a
tensor kept on the model, or one a recorded op made), every step (an ATen op by its qualified
name, or a launch of a kernel by its source text, with arguments that are references to tensors
or plain values) and the outputs, with no Python object of the candidate's in it. The reference
worker re-runs it (`fresh.py`) on fresh inputs the candidate never saw, with kernels rebuilt from
their recorded source (`kernelsource.py`), and the outputs must be the reference's for those
inputs: a number that came from the host is now the wrong number.

The models cross processes (pydantic). A candidate may send any `Program`: the reference worker
trusts none of it, since whatever it claims is what runs, on inputs it chose.
Written by the evaluation engine only.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field


class RefDesc(BaseModel):
    """A view of a storage: the storage's index in `Program.storages`, and the view's layout."""

    storage: int
    offset: int
    size: list[int]
    stride: list[int]
    dtype: str


class TensorDesc(BaseModel):
    """A host-side `TensorDescriptor` a launch got: its base tensor's view and its layout."""

    base: RefDesc
    shape: list[int] = Field(max_length=5)
    strides: list[int] = Field(max_length=5)
    block_shape: list[int] = Field(max_length=5)
    padding: Literal["zero", "nan"] = "zero"
    round_f32_to_tf32: bool = False


class StorageDesc(BaseModel):
    """One storage forward touched. `input`: the `index`-th input tensor (fresh in the re-run);
    `kept`: a tensor that was on the model before forward (its bytes are `kept[index]`); `fresh`:
    made during forward (`nbytes` of 0xFF bytes in the re-run, as in the replay)."""

    kind: Literal["input", "kept", "fresh"]
    index: int = 0
    nbytes: int


class InputDesc(BaseModel):
    dtype: str
    shape: list[int]


class OpStep(BaseModel):
    kind: Literal["op"] = "op"
    op: str
    """The ATen overload, as `str(torch.ops.aten.add.Tensor)` writes it: 'aten.add.Tensor'."""
    args: list[Any]
    kwargs: dict[str, Any]
    outs: list[RefDesc]
    created: list[int]
    value: Any = None
    """A host read (`.item()`, `bool(t)`): the value forward's host code got."""


class LaunchStep(BaseModel):
    kind: Literal["launch"] = "launch"
    kernel: int
    args: list[Any]
    kwargs: dict[str, Any]
    grid: list[int]


class KernelDesc(BaseModel):
    """A kernel as launched: its source text (from `def`), the names it reads outside itself
    (encoded values: a Triton module, a constant, another kernel) and its `@triton.jit` options."""

    name: str
    source: str
    globals: dict[str, Any]
    do_not_specialize: list[Any] = Field(default_factory=list)
    noinline: bool | None = None


class DerivedDesc(BaseModel):
    """A number forward's host code computed from its host reads (`traced.py`): its value in the
    trial, and its expression over the reads (`["read", k]`, `["c", value]`, `[op, a, b]`)."""

    value: Any
    expr: Any


class Program(BaseModel):
    inputs: list[InputDesc]
    storages: list[StorageDesc]
    steps: list[Annotated[OpStep | LaunchStep, Field(discriminator="kind")]]
    kernels: list[KernelDesc]
    outputs: list[RefDesc]
    derived: list[DerivedDesc] = Field(default_factory=list, max_length=256)


# --------------------------------------------------------------------------------------------
# Values: one tagged dict each (JSON), decoded on the other side by `fresh.decode` alone.

NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def encode_plain(value: Any, kernel_index: Any) -> dict[str, Any]:
    """A plain value (no tensor) as a tagged dict; `kernel_index(fn)`: a kernel's index."""

    import torch  # here, not at the top: the evaluator's process reads records without torch

    if value is None:
        return {"none": True}
    if isinstance(value, bool):
        return {"b": value}
    if isinstance(value, int):
        return {"i": int(value)}
    if isinstance(value, float):
        return {"f": value} if math.isfinite(value) else {"fs": repr(value)}
    if isinstance(value, str):
        return {"s": value}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memfmt": str(value).removeprefix("torch.")}
    if isinstance(value, (list, tuple)):
        tag = "tuple" if isinstance(value, tuple) else "list"
        return {tag: [encode_plain(v, kernel_index) for v in value]}
    from kernelcraft.engine.watch.records import triton_parts

    t = triton_parts()
    if isinstance(value, (t["JITFunction"], t["InterpretedFunction"])):
        return {"kernel": kernel_index(value)}
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        return encode_plain(value.value, kernel_index)
    if isinstance(value, tl.dtype):
        return {"tldtype": str(value.name)}
    return {"opaque": f"{type(value).__module__}.{type(value).__qualname__}"}


class Refused(Exception):
    """The record cannot be re-run here as it stands (the verdict's message)."""


_SIMPLE = {"none", "b", "i", "f", "fs", "s", "dtype", "tldtype", "device", "layout", "memfmt"}


def decode_constant(value: Any) -> Any:
    """A plain value (no tensor, no kernel) from its tagged dict."""

    import torch  # (as in `encode_plain`)

    if not isinstance(value, dict) or len(value) != 1:
        raise Refused(f"a value in forward's record is malformed: {str(value)[:80]}")
    ((tag, inner),) = value.items()
    if tag == "none":
        return None
    if tag == "b":
        return bool(inner)
    if tag == "i" and type(inner) is int:
        return inner
    if tag == "f" and isinstance(inner, (int, float)) and not isinstance(inner, bool):
        return float(inner)
    if tag == "fs" and inner in NONFINITE:
        return NONFINITE[inner]
    if tag == "s" and isinstance(inner, str):
        return inner
    if tag == "dtype":
        from kernelcraft.engine.wire.tensors import DTYPES

        if inner in DTYPES:
            return DTYPES[inner]
    if tag == "tldtype":
        import triton.language as tl

        named = {v.name: v for v in vars(tl).values() if isinstance(v, tl.dtype)}  # "fp16": tl.float16
        if inner in named:
            return named[inner]
    if tag == "device" and isinstance(inner, str):
        return torch.device(inner)
    if tag == "layout" and inner == "strided":
        return torch.strided
    if tag == "memfmt" and inner in (
        "contiguous_format",
        "preserve_format",
        "channels_last",
        "channels_last_3d",
    ):
        return getattr(torch, inner)
    if tag in ("list", "tuple") and isinstance(inner, list):
        items = [decode_constant(v) for v in inner]
        return tuple(items) if tag == "tuple" else items
    if tag == "opaque":
        raise Refused(
            f"forward passed a Python object ({str(inner)[:80]}) where the harness can carry only data"
        )
    raise Refused(f"a value in forward's record is not one the harness knows: {tag!r}")
