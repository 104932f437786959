"""Deciding whether a candidate's outputs match the reference's.

Runs in the trusted reference worker, never where candidate code was imported.

Tolerances (per output dtype):

  dtype              atol = rtol    relative L2 limit
  float64, float32   1e-4           1e-3
  float16, bfloat16  1e-2           5e-2
  float8             1e-1           2e-1
  integer, bool      exact          -

An output passes when every element satisfies |out - ref| <= atol + rtol * |ref| (KernelBench's
`allclose`; NaN must match NaN) AND the relative L2 error ||out - ref|| / ||ref|| is within the
limit. The second check is what stops near-zero answers: when every reference value is tiny, an
all-zeros output passes the first check on atol alone but has a relative L2 error of 1. It is
skipped only when the reference is exactly zero.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelcraft.base.evaluation import Evidence
from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.tensors import leaves

Verdict = tuple[FailureClass, Evidence]


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """(atol = rtol, relative L2 limit) for an output dtype."""
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 5e-2
    if "float8" in str(dtype):
        return 1e-1, 2e-1
    return 1e-4, 1e-3


def _index(flat_index: int, shape: torch.Size) -> list[int]:
    out = []
    for n in reversed(shape):
        out.append(flat_index % n if n else 0)
        flat_index = flat_index // n if n else 0
    return list(reversed(out))


def compare_outputs(ref: Any, out: Any) -> Verdict | None:
    """None when `out` matches `ref`; otherwise the failure class and its evidence."""
    ref_leaves, out_leaves = leaves(ref), leaves(out)
    if len(ref_leaves) != len(out_leaves):
        return FailureClass.WRONG_SHAPE, Evidence(
            message=f"forward returned {len(out_leaves)} outputs; the reference returns {len(ref_leaves)}"
        )
    for i, (r, o) in enumerate(zip(ref_leaves, out_leaves, strict=True)):
        verdict = compare_one(r, o)
        if verdict is not None:
            cls, ev = verdict
            ev.output_index = i
            return cls, ev
    return None


def compare_one(ref: Any, out: Any) -> Verdict | None:
    if not isinstance(ref, torch.Tensor):
        if isinstance(out, torch.Tensor) or out != ref:
            return FailureClass.NUMERICAL_MISMATCH, Evidence(
                message=f"forward returned {out!r}; the reference returns {ref!r}"
            )
        return None
    if not isinstance(out, torch.Tensor):
        return FailureClass.WRONG_SHAPE, Evidence(
            message=f"forward returned a {type(out).__name__}; the reference returns a tensor"
        )
    if out.shape != ref.shape:
        return FailureClass.WRONG_SHAPE, Evidence(
            message=f"output shape {list(out.shape)} differs from the reference's {list(ref.shape)}"
        )
    if out.dtype != ref.dtype:
        return FailureClass.WRONG_DTYPE, Evidence(
            message=f"output dtype {out.dtype} differs from the reference's {ref.dtype}"
        )
    if ref.numel() == 0:
        return None
    if not (ref.dtype.is_floating_point or ref.dtype.is_complex):
        bad = out != ref
        if bool(bad.any()):
            k = int(bad.reshape(-1).nonzero()[0])
            return FailureClass.NUMERICAL_MISMATCH, Evidence(
                message="integer output differs from the reference",
                first_mismatch_index=_index(k, ref.shape),
                expected=float(ref.reshape(-1)[k]),
                actual=float(out.reshape(-1)[k]),
            )
        return None

    r = ref.detach().to(torch.float64)
    o = out.detach().to(torch.float64)
    tol, l2_limit = tolerances(ref.dtype)
    r_finite, o_finite = torch.isfinite(r), torch.isfinite(o)
    bad_nonfinite = r_finite & ~o_finite
    if bool(bad_nonfinite.any()):
        k = int(bad_nonfinite.reshape(-1).nonzero()[0])
        return FailureClass.NAN_OR_INF, Evidence(
            message=f"{int(bad_nonfinite.sum())} output values are NaN or Inf where the reference is finite",
            first_mismatch_index=_index(k, ref.shape),
            expected=float(r.reshape(-1)[k]),
            actual=float(o.reshape(-1)[k]),
        )
    # Where the reference is NaN/Inf the candidate must agree exactly (same NaN positions, same infs).
    nonfinite_mismatch = ~r_finite & ~((r == o) | (torch.isnan(r) & torch.isnan(o)))
    diff = (o - r).abs()
    diff = torch.where(r_finite, diff, torch.zeros_like(diff))
    limit = tol + tol * r.abs()
    bad = (r_finite & (diff > limit)) | nonfinite_mismatch
    rf = torch.where(r_finite, r, torch.zeros_like(r))
    of = torch.where(r_finite, o, torch.zeros_like(o))
    ref_norm = float(torch.linalg.vector_norm(rf))
    rel_l2 = float(torch.linalg.vector_norm(of - rf)) / ref_norm if ref_norm > 0 else 0.0
    max_abs = float(diff.max())
    max_rel = float((diff / r.abs().clamp_min(1e-12)).masked_fill(~r_finite, 0).max())
    if bool(bad.any()):
        k = int(bad.reshape(-1).nonzero()[0])
        return FailureClass.NUMERICAL_MISMATCH, Evidence(
            message=f"{int(bad.sum())} of {ref.numel()} output values differ beyond atol=rtol={tol:g}",
            first_mismatch_index=_index(k, ref.shape),
            expected=float(r.reshape(-1)[k]),
            actual=float(o.reshape(-1)[k]),
            max_abs_error=max_abs,
            max_rel_error=max_rel,
            relative_l2_error=rel_l2,
        )
    if rel_l2 > l2_limit:
        k = int(diff.reshape(-1).argmax())
        return FailureClass.NUMERICAL_MISMATCH, Evidence(
            message=f"relative L2 error {rel_l2:.3g} exceeds {l2_limit:g} (every element is within atol, "
            "but the output does not follow the reference; near-zero outputs need the right values too)",
            first_mismatch_index=_index(k, ref.shape),
            expected=float(r.reshape(-1)[k]),
            actual=float(o.reshape(-1)[k]),
            max_abs_error=max_abs,
            max_rel_error=max_rel,
            relative_l2_error=rel_l2,
        )
    return None


def inputs_changed(before: list[Any], after: list[Any]) -> Evidence | None:
    """Evidence when any input tensor differs (bitwise, NaN-aware) after the candidate's call."""
    if len(before) != len(after):
        return Evidence(message="the candidate returned a different number of inputs than it was given")
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if not isinstance(b, torch.Tensor):
            continue
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return Evidence(message=f"input {i} changed its shape or dtype during forward", output_index=i)
        same = (a == b) | ((a != a) & (b != b))
        if not bool(same.all()):
            k = int((~same).reshape(-1).nonzero()[0])
            return Evidence(
                message=f"forward wrote into input {i}; inputs must be left unchanged",
                output_index=i,
                first_mismatch_index=_index(k, b.shape),
                expected=float(b.reshape(-1)[k]),
                actual=float(a.reshape(-1)[k]),
            )
    return None
