"""Threat: an answer that does not come from the kernels. Forward's host code computes the answer
from the inputs (in numpy or Python) and hands it to a kernel as a scalar argument, or writes it
with a PyTorch fill; or, under Triton's interpreter, a kernel body does the work in Python. The
same-input replay re-uses forward's host numbers on the same inputs, so it reproduces all of it.
The fresh-input replay (replay/fresh.py) re-runs forward's record in the reference worker, with no
candidate Python and kernels rebuilt from their recorded source, on inputs drawn from a seed the
candidate never saw, and must get the reference's answer for them (docs/security.md, "Verdict
integrity"). Honest kernels (autotuned, `.item()`-driven sizes, views, in-place kernels, several
launches, @triton.jit helpers) must still pass: the cookbook's entries are the wider honest set
(tests/knowledge/cookbook/test_cookbook.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBES = Path(__file__).parents[1] / "probes"
CHEATS = Path(__file__).parents[2] / "cheats"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "probe"),
    [
        ("task_rowsum.py", "fresh_host_scalar.py"),
        ("task_rowsum.py", "fresh_fill.py"),
        ("task_rowsum.py", "fresh_sentinel.py"),
        ("task_positives.py", "fresh_host_count.py"),
        ("task_maxnorm.py", "fresh_traced_constant.py"),
        ("task_rowsum.py", "fresh_traced_reads.py"),
    ],
)
def test_an_answer_computed_on_the_host_fails_the_fresh_input_replay(
    evaluator, job_for, static_checks_off, task, probe
) -> None:
    v = evaluator.submit(job_for(PROBES / task, PROBES / probe, trials=1, gpu_check=None)).verify
    assert v is not None and not v.correct, v
    assert v.status == "forbidden_construct" and v.evidence is not None, v
    assert v.evidence.op == "fresh replay", v.evidence
    assert "fresh inputs the candidate never saw" in v.evidence.message, v.evidence.message


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["fresh_later_trial.py", "fresh_trial_by_content.py"])
def test_a_candidate_honest_on_one_trial_and_cheating_on_another_fails_the_fresh_input_replay(
    evaluator, job_for, static_checks_off, probe
) -> None:
    """Every trial's record is re-run, so no trial is the one a candidate can keep honest: one
    counts its calls, the other tells the small-magnitude trial by its values."""
    v = evaluator.submit(job_for(PROBES / "task_rowsum.py", PROBES / probe, trials=2, gpu_check=None)).verify
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert v.evidence.op == "fresh replay", v.evidence
    assert "fresh inputs the candidate never saw" in v.evidence.message, v.evidence.message


@pytest.mark.slow
def test_a_record_that_crashes_the_reference_on_fresh_inputs_is_the_fresh_replays_verdict(
    evaluator, job_for, static_checks_off
) -> None:
    job = job_for(
        PROBES / "task_positives.py", PROBES / "fresh_host_count_crash.py", trials=1, gpu_check=None
    )
    v = evaluator.submit(job).verify
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert v.evidence.op == "fresh replay", v.evidence
    assert "crashed the reference worker" in v.evidence.message, v.evidence.message


@pytest.mark.slow
def test_a_kernel_body_that_calls_python_is_refused_by_the_fresh_input_replay(
    evaluator, job_for, static_checks_off
) -> None:
    job = job_for(PROBES / "task_rowsum.py", PROBES / "fresh_numpy_body.py", trials=1, gpu_check=None)
    v = evaluator.submit(job).verify
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert v.evidence.op == "fresh replay", v.evidence
    assert "reads 'rows_in_numpy'" in v.evidence.message, v.evidence.message


@pytest.mark.slow
def test_a_record_that_names_another_kernel_than_the_one_that_ran_is_held_to_the_source(
    evaluator, job_for, static_checks_off
) -> None:
    """The record is the candidate's word: a clean kernel named in place of one that works in
    numpy is caught on the submitted source, which the parent reads itself."""
    job = job_for(PROBES / "task_rowsum.py", PROBES / "fresh_lying_record.py", trials=1, gpu_check=None)
    v = evaluator.submit(job).verify
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert v.evidence.op == "fresh replay", v.evidence
    assert "reads 'rows_in_numpy', a plain Python function" in v.evidence.message, v.evidence.message


AUTOTUNED = (
    (Path(__file__).parent / "test_verdict_replay.py").read_text().split('AUTOTUNED = """')[1].split('"""')[0]
)


HONEST = [
    (PROBES / "task_positives.py", PROBES / "honest_compact.py"),
    (PROBES / "task_rowsum.py", PROBES / "honest_rows_helper.py"),
    (CHEATS / "task_scale.py", AUTOTUNED),
    (PROBES / "task_maxnorm.py", PROBES / "honest_host_scale.py"),
    (CHEATS / "task_scale.py", PROBES / "honest_tensor_descriptor.py"),
]
"""Honest kernels the fresh-input replay must pass, on the CPU and on a GPU alike."""
HONEST_IDS = [
    "item-driven-size",
    "helper-views-launches",
    "autotuned",
    "host-scale-from-a-read",
    "tensor-descriptors",
]


@pytest.mark.slow
@pytest.mark.parametrize(("task", "candidate"), HONEST, ids=HONEST_IDS)
def test_an_honest_kernel_passes_the_fresh_input_replay(evaluator, job_for, task, candidate) -> None:
    v = evaluator.submit(job_for(task, candidate, trials=2, gpu_check=None)).verify
    assert v is not None and v.correct, (v.status, v.evidence) if v else None


# ---- on the GPU: kernels rebuilt as JITFunctions in the reference, kept tensors over CUDA IPC ----

HOSTILE = [
    ("task_rowsum.py", "fresh_host_scalar.py"),
    ("task_rowsum.py", "fresh_fill.py"),
    ("task_rowsum.py", "fresh_sentinel.py"),
    ("task_positives.py", "fresh_host_count.py"),
    ("task_maxnorm.py", "fresh_traced_constant.py"),
    ("task_rowsum.py", "fresh_traced_reads.py"),
]


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize(("task", "probe"), HOSTILE)
def test_gpu_an_answer_computed_on_the_host_fails_the_fresh_input_replay(
    gpu_submit, job_for, static_checks_off, task, probe
) -> None:
    v = gpu_submit(job_for(PROBES / task, PROBES / probe, trials=1))
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert v.evidence.op == "fresh replay", v.evidence


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize(("task", "candidate"), HONEST, ids=HONEST_IDS)
def test_gpu_an_honest_kernel_passes_the_fresh_input_replay(gpu_submit, job_for, task, candidate) -> None:
    v = gpu_submit(job_for(task, candidate, trials=3))
    assert v is not None and v.correct, (v.status, v.evidence) if v else None


@pytest.mark.slow
def test_a_host_number_derived_past_what_is_traced_fails_with_words_that_say_what_to_write(
    evaluator, job_for
) -> None:
    """`math.sqrt` of a read value is not traced: the verdict names the limit and the way round."""
    job = job_for(PROBES / "task_maxnorm.py", PROBES / "honest_host_sqrt.py", trials=1, gpu_check=None)
    v = evaluator.submit(job).verify
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert "math.sqrt" in v.evidence.message and "** 0.5" in v.evidence.message, v.evidence.message


@pytest.mark.slow
def test_a_record_claiming_other_input_shapes_than_the_trials_is_refused_not_skipped(
    evaluator, job_for, static_checks_off
) -> None:
    """The record's input shapes are the candidate's word: a record claiming shapes the fresh draw
    does not have once skipped the re-run as a task whose shapes vary (a numpy answer passed as
    correct); the reference now holds them to the shapes it made for the trial."""
    job = job_for(PROBES / "task_rowsum.py", PROBES / "fresh_forged_input_shape.py", trials=1, gpu_check=None)
    v = evaluator.submit(job).verify
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert v.evidence.op == "fresh replay", v.evidence
    assert "is not the one of the trial's forward" in v.evidence.message, v.evidence.message


@pytest.mark.slow
def test_an_honest_kernel_on_a_task_whose_shapes_vary_between_draws_passes(evaluator, job_for) -> None:
    job = job_for(
        PROBES / "task_rowsum_varying.py", PROBES / "honest_rows_helper.py", trials=2, gpu_check=None
    )
    v = evaluator.submit(job).verify
    assert v is not None and v.correct, (v.status, v.evidence)


@pytest.mark.slow
def test_a_kernel_that_copies_the_references_answer_from_its_memory_fails_the_fresh_input_replay(
    evaluator, job_for, static_checks_off
) -> None:
    """Under the interpreter a kernel's pointer is a raw address of the process running it: with
    Model's answer for the fresh inputs computed before the re-run, a kernel computing two rows of
    six found the rest by scanning below its input and passed as correct (4 of 11 runs).
    The record now re-runs in a child forked before the answer exists (`replay/untouched.py`)."""
    job = job_for(
        PROBES / "task_rowsum.py", PROBES / "fresh_reads_reference_memory.py", trials=1, gpu_check=None
    )
    v = evaluator.submit(job).verify
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert v.evidence.op == "fresh replay", v.evidence
    assert "fresh inputs the candidate never saw" in v.evidence.message, v.evidence.message


@pytest.mark.slow
@pytest.mark.gpu
def test_gpu_a_kernel_that_reads_the_references_answer_beside_its_shared_inputs_is_refused(
    gpu_submit, job_for, static_checks_off
) -> None:
    v = gpu_submit(job_for(PROBES / "task_rowsum.py", PROBES / "gpu_ipc_reads_reference_answer.py", trials=2))
    assert v is not None and not v.correct, v
    print("ipc-reads-reference-answer:", v.status, v.evidence)
