"""Threat: a candidate gets a verdict of "correct" for work its kernels did not do, through Python
that Triton runs around a launch (hooks, a grid callable, heuristics), through the op recorder's
own state, or through a custom op named like an allowed one (docs/security.md, "Verdict
integrity"). Each probe's kernel stores nothing; the output comes from PyTorch."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBES = Path(__file__).parents[1] / "probes"
TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"

# probe -> the verdict it must get
EXPECTED = {
    "hook_pre_run.py": "forbidden_construct",
    "hook_autotune.py": "forbidden_construct",
    "hook_autotune_post.py": "forbidden_construct",
    "hook_config.py": "forbidden_construct",
    "hook_launch_enter.py": "forbidden_construct",
    "hook_grid.py": "pytorch_fallback",
    "hook_heuristics.py": "pytorch_fallback",
    "dodge_launch_flag.py": "pytorch_fallback",
    "custom_op_clone.py": "pytorch_fallback",
}


@pytest.mark.slow
@pytest.mark.parametrize("probe", sorted(EXPECTED))
def test_work_done_around_a_launch_is_not_the_kernels(
    evaluator, job_for, static_checks_off, probe: str
) -> None:
    result = evaluator.submit(job_for(TASK, PROBES / probe, trials=1))
    v = result.verify
    assert v is not None and not v.correct, result
    assert v.failure_class is not None and v.failure_class.value == EXPECTED[probe], v
