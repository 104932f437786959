"""Threat: a float64 task judged with float32's tolerance lets a kernel that computes in float32
pass. Tolerance follows the output dtype, and the verdict states it (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBES = Path(__file__).parents[1] / "probes"


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "correct"), [("float64", True), ("float32", False)])
def test_float64_output_is_held_to_float64_tolerance(
    evaluator, job_for, precision: str, correct: bool
) -> None:
    source = (PROBES / "fp64_in_fp32.py").read_text().replace('"float64"  #', f"{precision!r}  #", 1)
    v = evaluator.submit(job_for(PROBES / "task_fp64.py", source, trials=1)).verify
    assert v is not None and v.correct is correct, v
    assert v.tolerance is not None and v.tolerance.startswith("float64: atol=rtol=1e-07"), v.tolerance
    if not correct:
        assert v.status == "numerical_mismatch", v
