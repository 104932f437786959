"""Threat: on the CPU, a candidate switches off the interpreter's TF32 rounding (through a closure
or the replacement's globals) so that a TF32 dot, wrong on the GPU, passes. The guard holds the
replacement and what it calls by identity (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBES = Path(__file__).parent / "probes"


@pytest.mark.slow
def test_a_candidate_cannot_undo_the_tf32_emulation(evaluator, job_for) -> None:
    job = job_for(PROBES / "task_matmul_fp32.py", PROBES / "tf32_undone.py", trials=1, gpu_check=None)
    v = evaluator.submit(job).verify
    assert v is not None and not v.correct, v
    assert v.status == "forbidden_construct" and v.evidence is not None, v
    assert "tf32" in v.evidence.message, v.evidence.message
