"""Deciding whether a candidate's outputs match the reference's.

Runs in the trusted reference worker, never where candidate code was imported.

Tolerances (per output dtype):

  dtype              atol = rtol    relative L2 limit
  float64            1e-7           1e-6
  float32            1e-4           1e-3
  float16, bfloat16  1e-2           5e-2
  float8             1e-1           2e-1
  integer, bool      exact          -

An output passes when every element satisfies |out - ref| <= atol + rtol * |ref| (KernelBench's
`allclose`; NaN must match NaN) AND the relative L2 error ||out - ref|| / ||ref|| is within the
limit. The second check is what stops near-zero answers: when every reference value is tiny, an
all-zeros output passes the first check on atol alone but has a relative L2 error of 1. It is
skipped only when the reference is exactly zero. Tolerance follows the output's dtype, as
KernelBench's `get_tolerance_for_precision` and robust-kbench do (fp32 1e-4, fp16/bf16 1e-2):
float64 is held tighter than float32, so an fp64 task computed in fp32 fails. The verdict says
which tolerances it applied (`describe`).

Every float comparison also measures its margin (`Margin`): the worst element's error over its
tolerance, |out - ref| / (atol + rtol * |ref|) (at most 1 on a pass), where it is and its two
values, and the relative L2 error over its limit. A failure's message names the worst element;
a pass reports the margin so that a verdict near the edge says so (`job/run.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.checks import structure
from kernelcraft.engine.wire.tensors import leaves
from kernelcraft.schema.evaluation import Evidence

Verdict = tuple[FailureClass, Evidence]


ADAEXPLORE_TOLERANCE = 5e-2
"""AdaExplore's harness: atol = rtol = 5e-2 on every float output, no relative-L2 check."""


def tolerances(dtype: torch.dtype, rule: str = "kernelcraft") -> tuple[float, float]:
    """(atol = rtol, relative L2 limit) for an output dtype under a correctness rule
    ("kernelcraft" by dtype, "adaexplore" as AdaExplore's harness)."""
    if rule == "adaexplore":
        own, _ = tolerances(dtype)
        return max(own, ADAEXPLORE_TOLERANCE), float("inf")
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 5e-2
    if "float8" in str(dtype):
        return 1e-1, 2e-1
    if dtype in (torch.float64, torch.complex128):
        return 1e-7, 1e-6
    return 1e-4, 1e-3


def describe(ref: Any, rule: str = "kernelcraft") -> str:
    """The tolerances the reference's outputs are held to, one clause per dtype."""
    parts = []
    for dtype in dict.fromkeys(t.dtype for t in leaves(ref) if isinstance(t, torch.Tensor)):
        name = str(dtype).removeprefix("torch.")
        if dtype.is_floating_point or dtype.is_complex:
            tol, l2 = tolerances(dtype, rule)
            l2_text = f", relative L2 <= {l2:g}" if l2 != float("inf") else ""
            parts.append(f"{name}: atol=rtol={tol:g}{l2_text}")
        else:
            parts.append(f"{name}: exact")
    return "; ".join(parts)


@dataclass
class Margin:
    """How close one float output came to its tolerance."""

    ratio: float
    """The worst element's |out - ref| / (atol + rtol * |ref|): at most 1 passes."""
    index: list[int]
    expected: float
    actual: float
    l2_ratio: float
    """The relative L2 error over its limit (0 without a limit)."""
    output: int = 0

    def text(self) -> str:
        where = f"output {self.output}" if self.output else "the output"
        if self.ratio == 0 and self.l2_ratio == 0:
            return f"{where} equals the reference's exactly"
        at = f"output {self.output} at {self.index}" if self.output else f"at {self.index}"
        l2 = f"; relative L2 {_times(self.l2_ratio)} its limit" if self.l2_ratio else ""
        return (
            f"worst error {_times(self.ratio)} the tolerance, {at}: expected {self.expected:.6g}, "
            f"got {self.actual:.6g}{l2}"
        )

    def words(self) -> dict[str, Any]:
        """What a verdict carries of it (`Compared.margin`)."""
        return {"ratio": self.ratio, "l2_ratio": self.l2_ratio, "text": self.text()}


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.2g}x"


def _index(flat_index: int, shape: torch.Size) -> list[int]:
    out = []
    for n in reversed(shape):
        out.append(flat_index % n if n else 0)
        flat_index = flat_index // n if n else 0
    return list(reversed(out))


def compare_outputs(
    ref: Any, out: Any, rule: str = "kernelcraft", margins: list[Margin] | None = None
) -> Verdict | None:
    """None when `out` matches `ref`; otherwise the failure class and its evidence. `margins`
    gets each float output's margin compared (`Margin`). `out` must first have `ref`'s structure
    (`structure.py`): as many outputs, nested the same way."""
    shaped = structure.mismatch(ref, out)
    if shaped is not None:
        return FailureClass.WRONG_SHAPE, Evidence(message=shaped)
    ref_leaves, out_leaves = leaves(ref), leaves(out)
    if len(ref_leaves) != len(out_leaves):
        return FailureClass.WRONG_SHAPE, Evidence(
            message=f"forward returned {len(out_leaves)} outputs; the reference returns {len(ref_leaves)}"
        )
    for i, (r, o) in enumerate(zip(ref_leaves, out_leaves, strict=True)):
        found: list[Margin] = []
        verdict = compare_one(r, o, rule, found)
        for m in found:
            m.output = i
        if margins is not None:
            margins.extend(found)
        if verdict is not None:
            cls, ev = verdict
            ev.output_index = i
            return cls, ev
    return None


def compare_one(
    ref: Any, out: Any, rule: str = "kernelcraft", margins: list[Margin] | None = None
) -> Verdict | None:
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
    if ref.dtype.is_complex:  # the real and the imaginary parts, each held to the dtype's tolerance
        return _compare_close(_real_view(ref), _real_view(out), rule, margins, ref.dtype)
    if not ref.dtype.is_floating_point:
        return _compare_exact(ref, out)
    return _compare_close(ref, out, rule, margins)


def _real_view(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor as a real one with a last dimension of 2 (real, imaginary)."""
    return torch.view_as_real(t.detach().resolve_conj().resolve_neg())


CHUNK = 1 << 24
"""Elements compared at a time: the float64 temporaries of one chunk take ~1.5 GB, whatever the
output's size (KernelBench outputs reach 1.6 G elements, whose float64 copies would not fit)."""


def _chunks(ref: torch.Tensor, out: torch.Tensor) -> Any:
    r, o = ref.detach().reshape(-1), out.detach().reshape(-1)
    for start in range(0, r.numel(), CHUNK):
        yield start, r[start : start + CHUNK], o[start : start + CHUNK]


def _first_difference(a: torch.Tensor, b: torch.Tensor, differs: Any) -> tuple[int, float, float] | None:
    """The first flat index where `differs(a_chunk, b_chunk)` holds, with a's and b's values there."""
    for start, ac, bc in _chunks(a, b):
        mask = differs(ac, bc)
        if bool(mask.any()):
            k = int(mask.nonzero()[0])
            return start + k, float(ac[k]), float(bc[k])
    return None


def _compare_exact(ref: torch.Tensor, out: torch.Tensor) -> Verdict | None:
    found = _first_difference(ref, out, lambda r, o: o != r)
    if found is None:
        return None
    k, expected, actual = found
    return FailureClass.NUMERICAL_MISMATCH, Evidence(
        message="integer output differs from the reference",
        first_mismatch_index=_index(k, ref.shape),
        expected=expected,
        actual=actual,
    )


class _Close:
    """What one pass over the chunks learns (float64 sums, first offending indices)."""

    def __init__(self) -> None:
        self.nonfinite = 0
        self.first_nonfinite: tuple[int, float, float] | None = None
        self.bad = 0
        self.first_bad: tuple[int, float, float] | None = None
        self.ref_sq = 0.0
        self.err_sq = 0.0
        self.max_abs = 0.0
        self.at_max_abs: tuple[int, float, float] = (0, 0.0, 0.0)
        self.max_rel = 0.0
        self.max_ratio = 0.0
        self.at_max_ratio: tuple[int, float, float] = (0, 0.0, 0.0)


def _compare_close(
    ref: torch.Tensor,
    out: torch.Tensor,
    rule: str = "kernelcraft",
    margins: list[Margin] | None = None,
    dtype: torch.dtype | None = None,
) -> Verdict | None:
    tol, l2_limit = tolerances(dtype or ref.dtype, rule)
    acc = _Close()
    for start, rc, oc in _chunks(ref, out):
        _accumulate(acc, start, rc.to(torch.float64), oc.to(torch.float64), tol)
    k, expected, actual = acc.at_max_ratio
    ref_norm = acc.ref_sq**0.5
    rel_l2 = acc.err_sq**0.5 / ref_norm if ref_norm > 0 else 0.0
    l2_ratio = rel_l2 / l2_limit if l2_limit not in (0.0, float("inf")) else 0.0
    margin = Margin(acc.max_ratio, _index(k, ref.shape), expected, actual, l2_ratio)
    if margins is not None and acc.first_nonfinite is None:
        margins.append(margin)
    if acc.first_nonfinite is not None:
        k, expected, actual = acc.first_nonfinite
        return FailureClass.NAN_OR_INF, Evidence(
            message=f"{acc.nonfinite} output values are NaN or Inf where the reference is finite",
            first_mismatch_index=_index(k, ref.shape),
            expected=expected,
            actual=actual,
        )
    if acc.first_bad is not None:
        k, expected, actual = acc.first_bad
        return FailureClass.NUMERICAL_MISMATCH, Evidence(
            message=f"{acc.bad} of {ref.numel()} output values differ beyond atol=rtol={tol:g}; "
            f"{margin.text()}",
            error_over_tolerance=margin.ratio,
            first_mismatch_index=_index(k, ref.shape),
            expected=expected,
            actual=actual,
            max_abs_error=acc.max_abs,
            max_rel_error=acc.max_rel,
            relative_l2_error=rel_l2,
        )
    if rel_l2 > l2_limit:
        k, expected, actual = acc.at_max_abs
        return FailureClass.NUMERICAL_MISMATCH, Evidence(
            message=f"relative L2 error {rel_l2:.3g} exceeds {l2_limit:g} (every element is within atol, "
            "but the output does not follow the reference; near-zero outputs need the right values too)",
            error_over_tolerance=max(margin.ratio, l2_ratio),
            first_mismatch_index=_index(k, ref.shape),
            expected=expected,
            actual=actual,
            max_abs_error=acc.max_abs,
            max_rel_error=acc.max_rel,
            relative_l2_error=rel_l2,
        )
    return None


def _accumulate(acc: _Close, start: int, r: torch.Tensor, o: torch.Tensor, tol: float) -> None:
    r_finite, o_finite = torch.isfinite(r), torch.isfinite(o)
    bad_nonfinite = r_finite & ~o_finite
    n = int(bad_nonfinite.sum())
    if n and acc.first_nonfinite is None:
        k = int(bad_nonfinite.nonzero()[0])
        acc.first_nonfinite = (start + k, float(r[k]), float(o[k]))
    acc.nonfinite += n
    # Where the reference is NaN/Inf the candidate must agree exactly (same NaN positions, same infs).
    nonfinite_mismatch = ~r_finite & ~((r == o) | (torch.isnan(r) & torch.isnan(o)))
    diff = torch.where(r_finite, (o - r).abs(), 0.0)
    bad = (r_finite & (diff > tol + tol * r.abs())) | nonfinite_mismatch
    n_bad = int(bad.sum())
    if n_bad and acc.first_bad is None:
        k = int(bad.nonzero()[0])
        acc.first_bad = (start + k, float(r[k]), float(o[k]))
    acc.bad += n_bad
    rf = torch.where(r_finite, r, 0.0)
    of = torch.where(r_finite, o, 0.0)
    acc.ref_sq += float(torch.linalg.vector_norm(rf)) ** 2
    acc.err_sq += float(torch.linalg.vector_norm(of - rf)) ** 2
    chunk_max, chunk_arg = diff.max(dim=0)
    if float(chunk_max) > acc.max_abs or start == 0:
        j = int(chunk_arg)
        acc.max_abs, acc.at_max_abs = float(chunk_max), (start + j, float(r[j]), float(o[j]))
    rel = (diff / r.abs().clamp_min(1e-12)).masked_fill(~r_finite, 0)
    acc.max_rel = max(acc.max_rel, float(rel.max()))
    ratio = diff / (tol + tol * r.abs().masked_fill(~r_finite, 0))
    ratio = ratio.masked_fill(nonfinite_mismatch, float("inf"))
    chunk_ratio, ratio_arg = ratio.max(dim=0)
    if float(chunk_ratio) > acc.max_ratio or start == 0:
        j = int(ratio_arg)
        acc.max_ratio, acc.at_max_ratio = float(chunk_ratio), (start + j, float(r[j]), float(o[j]))


def inputs_changed(before: list[Any], after: list[Any]) -> Evidence | None:
    """Evidence when any input tensor differs (bitwise, NaN-aware) after the candidate's call."""
    if len(before) != len(after):
        return Evidence(message="the candidate returned a different number of inputs than it was given")
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if not isinstance(b, torch.Tensor):
            continue
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return Evidence(message=f"input {i} changed its shape or dtype during forward", output_index=i)
        if b.dtype.is_complex:
            b, a = _real_view(b), _real_view(a)
        found = _first_difference(b, a, lambda bc, ac: ~((ac == bc) | ((ac != ac) & (bc != bc))))
        if found is not None:
            k, expected, actual = found
            return Evidence(
                message=f"forward wrote into input {i}; inputs must be left unchanged",
                output_index=i,
                first_mismatch_index=_index(k, b.shape),
                expected=expected,
                actual=actual,
            )
    return None


def inputs_left_wrong(
    before: list[Any], model_after: list[Any] | None, after: list[Any], rule: str
) -> Evidence | None:
    """`inputs_changed`, where a Model whose forward writes its inputs (`model_after`: what it
    left in them; None when it left them alone) lets the candidate do the same: its inputs are
    then right either untouched or as Model left them (compared as outputs are, within the
    tolerance, since a kernel's write rounds as its arithmetic does). The evidence is the one
    against the untouched inputs."""
    changed = inputs_changed(before, after)
    if (
        changed is None
        or model_after is None
        or compare_outputs(tuple(model_after), tuple(after), rule) is not None
    ):
        return changed
    return None
