"""Threat: a CPU verdict passes a kernel the GPU compiler refuses (Python in a kernel body that only
the interpreter runs), also when forward launches a decoy that compiles wherever the interpreter
is off. Without a GPU, a passing verify also compiles, for `EvalJob.gpu_check` (sm_90a), exactly
the kernels the trials launched (each distinct trial's record), from their recorded source in a worker that loads neither
the task nor the candidate (`worker/kernels.py`), and fails with the compiler's message
(docs/security.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBES = Path(__file__).parents[1] / "probes"
TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["jit_global.py"])
def test_a_kernel_the_gpu_compiler_refuses_fails_a_cpu_verify(evaluator, job_for, probe: str) -> None:
    v = evaluator.submit(job_for(TASK, PROBES / probe, trials=1, gpu_check="sm_90a")).verify
    assert v is not None and not v.correct, v
    assert v.status.startswith("compile_") and v.evidence is not None, v
    assert "the compiler for sm_90a rejects it" in v.evidence.message, v.evidence.message


@pytest.mark.slow
def test_the_gpu_check_compiles_the_kernel_the_trials_ran_not_a_decoy(
    evaluator, job_for, static_checks_off
) -> None:
    """Forward launches another kernel where the interpreter is off: what is compiled is the
    first trial's kernel, from its recorded source, so the compiler still refuses it."""
    v = evaluator.submit(job_for(TASK, PROBES / "gpu_check_decoy.py", trials=1, gpu_check="sm_90a")).verify
    assert v is not None and not v.correct, v
    assert v.status.startswith("compile_") and v.evidence is not None, v
    assert "the compiler for sm_90a rejects it" in v.evidence.message, v.evidence.message
    assert "SCALE" in (v.evidence.message + (v.evidence.error_text or "")), v.evidence


@pytest.mark.slow
def test_a_kernel_body_that_calls_numpy_fails_before_the_gpu_check(evaluator, job_for) -> None:
    """Python in a kernel body (numpy here) is refused earlier, by the fresh-input replay, which
    rebuilds kernels from their source only when the body is Triton language."""
    v = evaluator.submit(job_for(TASK, PROBES / "jit_python_call.py", trials=1, gpu_check="sm_90a")).verify
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert "reads 'np'" in v.evidence.message and "numpy" in v.evidence.message, v.evidence.message


@pytest.mark.slow
def test_without_the_check_the_interpreter_alone_passes_it(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(TASK, PROBES / "jit_global.py", trials=1, gpu_check=None)).verify
    assert v is not None and v.correct, v


@pytest.mark.slow
def test_the_gpu_check_compiles_the_kernels_of_every_trial_not_only_the_first(
    evaluator, job_for, static_checks_off
) -> None:
    """Forward launches a kernel the GPU compiler refuses only from its second call on: every
    trial's record is compiled, not the first's alone."""
    v = evaluator.submit(
        job_for(TASK, PROBES / "gpu_check_later_trial.py", trials=2, gpu_check="sm_90a")
    ).verify
    assert v is not None and not v.correct, v
    assert v.status.startswith("compile_") and v.evidence is not None, v
    assert "the compiler for sm_90a rejects it" in v.evidence.message, v.evidence.message
