"""KernelBench's semantics by default: Model and ModelNew run as constructed (training mode), as
KernelBench's harness runs them, so a BatchNorm kernel on batch statistics is right; `--eval-mode`
(`model_mode='eval'`) judges eval mode, where only running statistics are. The verdict says which,
and only where the task has a module whose mode matters."""

from __future__ import annotations

from pathlib import Path

import pytest

MODES = Path(__file__).parents[2] / "fixtures" / "modes"
CHEATS = Path(__file__).parents[2] / "cheats"
COOKBOOK_BN = (
    Path(__file__).parents[3]
    / "kernelcraft"
    / "knowledge"
    / "cookbook"
    / "entries"
    / "batchnorm"
    / "kernel.py"
)
BATCH_STATS = "batch_norm(x, self.bn.weight, self.bn.bias, self.bn.eps, training=True)"
RUNNING_STATS = (
    "batch_norm(x, self.bn.weight, self.bn.bias, self.bn.eps, training=False, "
    "running_mean=self.bn.running_mean, running_var=self.bn.running_var)"
)


def bn_candidate(statistics: str) -> str:
    """The cookbook's BatchNorm kernel with its forward on batch or on running statistics."""
    source = COOKBOOK_BN.read_text()
    assert BATCH_STATS in source
    return source.replace(BATCH_STATS, statistics)


@pytest.mark.slow
def test_batchnorm_is_judged_in_training_mode_by_default_and_says_so(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(MODES / "task_bn.py", bn_candidate(BATCH_STATS), trials=2)).verify
    assert v is not None and v.correct, v
    assert any("training mode, as KernelBench's harness does: BatchNorm2d" in n for n in v.notes), v.notes
    wrong = evaluator.submit(job_for(MODES / "task_bn.py", bn_candidate(RUNNING_STATS), trials=1)).verify
    assert wrong is not None and wrong.status == "numerical_mismatch", wrong


@pytest.mark.slow
def test_eval_mode_judges_running_statistics(evaluator, job_for) -> None:
    job = job_for(MODES / "task_bn.py", bn_candidate(RUNNING_STATS), trials=2, model_mode="eval")
    v = evaluator.submit(job).verify
    assert v is not None and v.correct, v
    assert any("eval mode (model_mode='eval')" in n for n in v.notes), v.notes
    wrong = evaluator.submit(
        job_for(MODES / "task_bn.py", bn_candidate(BATCH_STATS), trials=1, model_mode="eval")
    ).verify
    assert wrong is not None and wrong.status == "numerical_mismatch", wrong


@pytest.mark.slow
def test_a_task_without_mode_sensitive_modules_gets_no_note_of_it(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(CHEATS / "task_scale.py", CHEATS / "good.py", trials=1)).verify
    assert v is not None and v.correct and not any("mode" in n for n in v.notes), v.notes


@pytest.mark.slow
def test_plain_verify_output_shows_the_tolerance_and_the_notes(tmp_path: Path) -> None:
    """Issue 26: the notes (the mode, the sizes used, the interpreter's limits) and the tolerance
    show in the plain output too, not only with --json."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "KERNELCRAFT_HOME": str(tmp_path)}
    candidate = tmp_path / "bn_batch_stats.py"
    candidate.write_text(bn_candidate(BATCH_STATS))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelcraft",
            "verify",
            str(MODES / "task_bn.py"),
            str(candidate),
            "--trials",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("PASSED") and lines[1].startswith("tolerance: float32: atol=rtol=0.0001")
    assert any(line.startswith("note: ran Model and ModelNew in training mode") for line in lines)


def test_a_mismatch_where_model_has_dropout_in_training_mode_says_its_output_is_random() -> None:
    """A kernel written for inference skips dropout; against Model's random training-mode output
    it can only fail, and the words must say why and what judges it (eval mode)."""
    from kernelcraft.engine.host.verdicts import DROPOUT_HINT, mode_note, random_in_training

    kinds = ["BatchNorm2d", "Dropout", "MultiheadAttention"]
    assert random_in_training(kinds) == ["Dropout", "MultiheadAttention"]
    note = mode_note("train", kinds)
    assert "BatchNorm2d used batch statistics; Dropout, MultiheadAttention drew random masks" in note
    assert "Dropout drew" not in mode_note("train", ["BatchNorm2d"])
    assert "no kernel computes it" in DROPOUT_HINT.format(kinds="Dropout")
