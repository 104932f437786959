"""Threat: a candidate's PyTorch compute goes unrecorded because it runs while a Triton launch is
in progress, where the op recorder lets Triton's own copies through: Python of the candidate's
that Triton calls during the launch (a Tensor subclass's `__torch_function__`, a method shadowed
on the kernel object), a replaced entry of the launcher's table of run methods, or the launcher's
own code run with forged globals (docs/security.md, "Verdict integrity"). The knockout skips the
launch, so it cannot see this work either. Each probe's kernel stores nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBES = Path(__file__).parents[1] / "probes"
TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"


@pytest.mark.slow
@pytest.mark.parametrize(
    "probe", ["subclass_arg.py", "kernel_attr_shadow.py", "originals_swap.py", "borrowed_launch_code.py"]
)
def test_pytorch_run_from_candidate_code_inside_a_launch_is_recorded(
    evaluator, job_for, static_checks_off, probe: str
) -> None:
    v = evaluator.submit(job_for(TASK, PROBES / probe, trials=1, gpu_check=None)).verify
    assert v is not None and not v.correct, v
    assert v.failure_class is not None and v.failure_class.value == "pytorch_fallback", v
    assert v.evidence is not None and "aten.relu" in v.evidence.message, v.evidence
