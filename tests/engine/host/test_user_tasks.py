"""Honest kernels for tasks written as a user writes them must be judged correct.

Each task in tests/fixtures/user_tasks/ is a KernelBench-format file (`Model`, `get_inputs`,
`get_init_inputs`, module-level sizes) with an honest Triton `ModelNew` beside it (`*_triton.py`),
chosen for what the examples do not cover: a tuple of outputs, int64 and bool inputs, fp16/bf16
inputs and a bf16 answer, a transposed input, in-place ops in the reference, a registered buffer,
several constructor arguments, a 0-dim answer, a scale read back with `.item()` and divided on the
host, `@triton.autotune` over three configs, a helper that launches two kernels, a constexpr chosen
from the input's shape, a task too large for the interpreter run at its sidecar's CPU sizes
(`09_*.cpu.json`), a split-K kernel under `@triton.heuristics` and an autotune that zeroes its
output, a Python int input with a list of a sum and an int64 argmax, a dict from an fp16
`tl.dot`, and libdevice's tanh in a kernel reading a module-level `tl.constexpr`. A refusal here
wrongs an honest user: each one found so far had its class fixed in the engine
(docs/evaluation.md names each).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcraft.level.sidecar import sidecar_sizes

TASKS = Path(__file__).parents[2] / "fixtures" / "user_tasks"
NAMES = sorted(p.stem for p in TASKS.glob("*.py") if not p.stem.endswith("_triton"))


def test_every_user_task_has_an_honest_kernel_beside_it() -> None:
    assert len(NAMES) >= 8
    assert all((TASKS / f"{name}_triton.py").is_file() for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_verify_passes_an_honest_kernel_for_a_task_written_as_a_user_would(evaluator, job_for, name) -> None:
    task = TASKS / f"{name}.py"
    # trials=3: each autotune config runs a trial. No GPU check (sm_90a compiles, ~2.5 s a task
    # on a cold cache): the stdio client's run of these tasks compiles them (docs/evaluation.md).
    job = job_for(task, TASKS / f"{name}_triton.py", trials=3, cpu_sizes=sidecar_sizes(task), gpu_check=None)
    v = evaluator.submit(job).verify
    assert v is not None and v.correct, (v.status, v.evidence) if v is not None else None
