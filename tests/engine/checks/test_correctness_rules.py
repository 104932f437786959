"""Two correctness rules (issue 27): kernelcraft's (no PyTorch compute in forward, tolerances by
dtype with a relative-L2 check, the knockout) and AdaExplore's (PyTorch allowed beside at least one
Triton launch, atol=rtol=5e-2), so that AdaExplore's experiment can be run as its harness judged
it. The verdict says which rule it applied and lists the PyTorch ops left."""

from __future__ import annotations

from pathlib import Path

import pytest

MODES = Path(__file__).parents[2] / "fixtures" / "modes"
TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"


@pytest.mark.slow
def test_pytorch_beside_a_kernel_passes_adaexplores_rule_only_and_is_listed(evaluator, job_for) -> None:
    cand = MODES / "torch_relu_triton_affine.py"
    strict = evaluator.submit(job_for(TASK, cand, trials=1)).verify
    assert strict is not None and strict.status == "pytorch_fallback", strict
    loose = evaluator.submit(job_for(TASK, cand, trials=2, correctness="adaexplore")).verify
    assert loose is not None and loose.correct, loose
    assert any("AdaExplore's rule" in n and "aten.relu" in n for n in loose.notes), loose.notes
    assert loose.tolerance is not None and "atol=rtol=0.05" in loose.tolerance


@pytest.mark.slow
def test_adaexplores_tolerance_is_5e_2(evaluator, job_for) -> None:
    cand = MODES / "triton_affine_off_by_1e2.py"
    strict = evaluator.submit(job_for(TASK, cand, trials=1)).verify
    assert strict is not None and strict.status == "numerical_mismatch", strict
    loose = evaluator.submit(job_for(TASK, cand, trials=1, correctness="adaexplore")).verify
    assert loose is not None and loose.correct, loose


def test_the_adaexplore_preset_judges_by_adaexplores_rule() -> None:
    from kernelcraft.schema.presets import PRESETS

    assert PRESETS["adaexplore"]["correctness"] == "adaexplore"
    assert PRESETS["kernelcraft"]["correctness"] == "kernelcraft"
