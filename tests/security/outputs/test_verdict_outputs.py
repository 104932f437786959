"""Threat: the parent is not holding the candidate to what it asked for (docs/security.md, class
"what comes back"). What forward hands back is frozen to plain tensors and containers inside the
recorded region (`worker/freeze.py`): a container or a tensor that runs the candidate's code when
the harness reads it, after the recorders close, is refused, whichever way it gets that code run
(a list's `__iter__`, a tuple's `__len__`, a dict key's `__hash__`, a Tensor subclass, a forged
`__class__`, an input whose class was swapped, a torch function or dispatch mode left active).
Then the parent and the reference hold the answer to the reference's: as many output sets as runs
asked for (zero is not "nothing differs"), the reference's structure, and every part of a
complex output."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBES = Path(__file__).parents[1] / "probes"
TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"

# probe -> (task, the verdict it must get, words its message must hold)
EXPECTED = {
    "out_lazy_list.py": (TASK, "forbidden_construct", "is a Lazy"),
    "out_lazy_tuple.py": (TASK, "forbidden_construct", "is a Lazy"),
    "out_dict_key_hash.py": (TASK, "forbidden_construct", "key of type Key"),
    "out_tensor_subclass.py": (TASK, "forbidden_construct", "Tensor subclass (Lazy)"),
    "out_forged_class.py": (TASK, "forbidden_construct", "is a Liar"),
    "out_input_class_swap.py": (TASK, "forbidden_construct", "an input after forward"),
    "out_none.py": (TASK, "wrong_shape", "a sequence of 0"),
    # on the CPU the forged set meets a trial ("0 output set(s)"), on a GPU the warm-up ("where the harness asked")
    "out_forged_zero_sets.py": (TASK, "forbidden_construct", "the candidate's process sent"),
    "out_complex_imag.py": (PROBES / "task_complex.py", "numerical_mismatch", "differ"),
    "out_function_mode_left.py": (TASK, "forbidden_construct", "torch function mode"),
    "out_dispatch_mode_left.py": (TASK, "forbidden_construct", "dispatch mode"),
}


@pytest.mark.slow
@pytest.mark.parametrize("probe", sorted(EXPECTED))
def test_verify_refuses_outputs_that_are_not_what_the_reference_returns(
    evaluator, job_for, static_checks_off, probe: str
) -> None:
    task, cls, words = EXPECTED[probe]
    v = evaluator.submit(job_for(task, PROBES / probe, trials=1, gpu_check=None)).verify
    assert v is not None and not v.correct, v
    assert v.failure_class is not None and v.failure_class.value == cls, v
    assert v.evidence is not None and words in v.evidence.message, v.evidence


@pytest.mark.slow
def test_verify_passes_a_complex_output_computed_in_full(evaluator, job_for) -> None:
    v = evaluator.submit(
        job_for(PROBES / "task_complex.py", PROBES / "complex_honest.py", trials=1, gpu_check=None)
    ).verify
    assert v is not None and v.correct, v


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("probe", sorted(EXPECTED))
def test_gpu_verify_refuses_outputs_that_are_not_what_the_reference_returns(
    gpu_submit, job_for, static_checks_off, probe: str
) -> None:
    task, cls, words = EXPECTED[probe]
    v = gpu_submit(job_for(task, PROBES / probe, trials=1))
    assert v is not None and not v.correct and v.failure_class is not None, v
    assert v.failure_class.value == cls, (v.status, v.evidence)
    assert v.evidence is not None and words in v.evidence.message, v.evidence
