"""Threat: a candidate hides its compute from the op recorder and the knockout, both of which watch
from inside its own process: it reads a sentinel kernel's result on the host to tell a real run
from a knocked-out one, then computes in numpy or in PyTorch with the Python dispatch key excluded;
or it puts the interpreter's exact dot back only while its kernel runs. The replay (replay.py)
runs forward's recorded launches and ops again from the inputs, with no candidate code, and
the output must come out the same; interpreted launches check the TF32 emulation each time
(docs/security.md, "Verdict integrity")."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBES = Path(__file__).parents[1] / "probes"
CHEATS = Path(__file__).parents[2] / "cheats"


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["numpy_sentinel.py", "disable_dispatch_sentinel.py"])
def test_compute_out_of_the_recorders_sight_is_not_reproduced_by_the_replay(
    evaluator, job_for, static_checks_off, probe
) -> None:
    v = evaluator.submit(job_for(CHEATS / "task_scale.py", PROBES / probe, trials=1, gpu_check=None)).verify
    assert v is not None and not v.correct, v
    assert v.status == "forbidden_construct" and v.evidence is not None, v
    assert "replaying forward" in v.evidence.message, v.evidence.message


@pytest.mark.slow
def test_a_tensor_from_numpy_is_named_as_unaccounted_for(evaluator, job_for, static_checks_off) -> None:
    v = evaluator.submit(
        job_for(CHEATS / "task_scale.py", PROBES / "numpy_sentinel.py", trials=1, gpu_check=None)
    ).verify
    assert v is not None and v.evidence is not None
    assert (
        "no recorded op made" in v.evidence.message
        and "float32 tensor of shape [33, 65]" in v.evidence.message
    )


@pytest.mark.slow
def test_undoing_the_tf32_emulation_only_around_a_launch_is_refused(
    evaluator, job_for, static_checks_off
) -> None:
    job = job_for(PROBES / "task_matmul_fp32.py", PROBES / "tf32_transient.py", trials=1, gpu_check=None)
    v = evaluator.submit(job).verify
    assert v is not None and not v.correct, v
    assert v.status == "forbidden_construct" and v.evidence is not None, v
    assert "TF32 emulation undone" in v.evidence.message, v.evidence.message


@pytest.mark.slow
@pytest.mark.parametrize("candidate", ["good.py"])
def test_an_honest_kernel_replays_to_the_same_output(evaluator, job_for, candidate) -> None:
    v = evaluator.submit(
        job_for(CHEATS / "task_scale.py", CHEATS / candidate, trials=2, gpu_check=None)
    ).verify
    assert v is not None and v.correct, v


STATIC = ["disable_dispatch_sentinel.py", "tf32_transient.py", "borrowed_launch_code.py", "originals_swap.py"]


@pytest.mark.slow
@pytest.mark.parametrize("probe", STATIC)
def test_the_static_rules_refuse_the_introspection_these_probes_need(evaluator, job_for, probe) -> None:
    """The first layer: a probe that reaches the harness through torch._C, a function's globals or
    the dispatch-mode stack is refused before any process starts."""
    task = PROBES / "task_matmul_fp32.py" if probe.startswith("tf32") else CHEATS / "task_scale.py"
    v = evaluator.submit(job_for(task, PROBES / probe, trials=1, gpu_check=None)).verify
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert v.evidence.line is not None, v.evidence


# ---- on the GPU: the JIT path, the autotuner's benchmarking runs and CUDA memory ----

AUTOTUNED = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 256})], key=["n"])
@triton.jit
def affine_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        affine_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
        return y
"""


@pytest.mark.slow
@pytest.mark.gpu
def test_gpu_an_autotuned_kernel_replays_to_its_output(gpu_submit, job_for) -> None:
    v = gpu_submit(job_for(CHEATS / "task_scale.py", AUTOTUNED, trials=3))
    assert v is not None and v.correct, v


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("probe", ["numpy_sentinel.py", "disable_dispatch_sentinel.py"])
def test_gpu_compute_out_of_the_recorders_sight_fails_the_replay(
    gpu_submit, job_for, static_checks_off, probe
) -> None:
    v = gpu_submit(job_for(CHEATS / "task_scale.py", PROBES / probe, trials=1))
    assert v is not None and v.status == "forbidden_construct" and v.evidence is not None, v
    assert "replaying forward" in v.evidence.message, v.evidence.message
