"""Threat: on the CPU, a candidate switches off the interpreter's TF32 rounding (through a closure
or the replacement's globals) so that a TF32 dot, wrong on the GPU, passes. The guard holds the
replacement and what it calls by identity (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBES = Path(__file__).parents[1] / "probes"


@pytest.mark.slow
def test_a_candidate_cannot_undo_the_tf32_emulation(evaluator, job_for) -> None:
    job = job_for(PROBES / "task_matmul_fp32.py", PROBES / "tf32_undone.py", trials=1, gpu_check=None)
    v = evaluator.submit(job).verify
    assert v is not None and not v.correct, v
    assert v.status == "forbidden_construct" and v.evidence is not None, v
    assert "tf32" in v.evidence.message, v.evidence.message


@pytest.mark.slow
def test_a_tf32_mismatch_names_tf32_and_the_fix_and_other_verdicts_say_nothing_of_it(
    evaluator, job_for
) -> None:
    job = job_for(PROBES / "task_matmul_fp32.py", PROBES / "tf32_default.py", trials=1, gpu_check=None)
    v = evaluator.submit(job).verify
    assert v is not None and v.status == "numerical_mismatch" and v.evidence is not None, v
    assert "ran as TF32" in v.evidence.message and 'input_precision="ieee"' in v.evidence.message
    good = Path(__file__).parents[2] / "cheats"
    honest = evaluator.submit(
        job_for(good / "task_scale.py", good / "good.py", trials=1, gpu_check=None)
    ).verify
    assert honest is not None and honest.correct and not any("TF32" in n for n in honest.notes), honest.notes
