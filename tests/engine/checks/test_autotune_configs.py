"""Every @triton.autotune config is checked in the interpreter, one a trial (checks/autotune.py):
a config the GPU's autotuner might pick that computes the wrong thing fails the verdict, naming
it, and a verdict says which configs ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcraft.engine.checks.autotune import MAX_PICKS, Coverage

TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"

CANDIDATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE": 512, "SLOPPY": 0}), triton.Config({"BLOCK_SIZE": 256, "SLOPPY": 0}),
             triton.Config({"BLOCK_SIZE": 1024, "SLOPPY": SLOPPY_LAST})],
    key=["n_elements"],
)
@triton.jit
def relu_affine_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr, SLOPPY: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.maximum(x, 0.0) * 2.0 + 1.0
    if SLOPPY:
        y = y + 0.5
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, n)
        return y
"""


@pytest.mark.slow
def test_a_wrong_autotune_config_fails_the_verdict_even_when_the_first_is_right(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(TASK, CANDIDATE.replace("SLOPPY_LAST", "1"), trials=1)).verify
    assert v is not None and not v.correct and v.status == "numerical_mismatch", v
    assert v.evidence is not None and "config 3 of 3 of relu_affine_kernel" in v.evidence.message
    assert "BLOCK_SIZE: 1024" in v.evidence.message


@pytest.mark.slow
def test_a_verdict_says_each_autotune_config_ran_a_trial(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(TASK, CANDIDATE.replace("SLOPPY_LAST", "0"), trials=2)).verify
    assert v is not None and v.correct, v
    assert any("each of relu_affine_kernel's 3 configs ran a trial" in n for n in v.notes), v.notes


def _report(kernel: str, index: int, n: int) -> list[dict[str, object]]:
    return [{"kernel": kernel, "index": index, "configs": [f"BLOCK: {16 << i}" for i in range(n)]}]


def test_configs_past_the_trials_get_a_trial_each_up_to_the_cap_and_the_rest_are_named() -> None:
    cov = Coverage()
    assert cov.add(_report("k", 0, 20)) == "config 1 of 20 of k (BLOCK: 16)"
    assert list(cov.picks_left(5)) == list(range(5, MAX_PICKS))
    for pick in range(1, MAX_PICKS):
        cov.add(_report("k", pick, 20))
    (note,) = cov.notes()
    assert f"{MAX_PICKS} of k's 20 configs ran a trial" in note
    assert f"not checked: {MAX_PICKS + 1}: BLOCK: {16 << MAX_PICKS}" in note and "and -" not in note


def test_a_malformed_autotune_report_is_ignored_not_trusted() -> None:
    cov = Coverage()
    assert cov.add([{"kernel": "k", "index": 9, "configs": ["a"]}, {"nonsense": 1}, "x"]) == ""  # type: ignore[list-item]
    assert cov.kernels == {} and cov.notes() == [] and list(cov.picks_left(3)) == []
