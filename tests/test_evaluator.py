"""LocalEvaluator: examples pass, input sets are enforced, profile without a GPU, progress, GPU cases."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES

CHEATS = Path(__file__).parent / "cheats"


@pytest.mark.parametrize("example", sorted(p.parent.name for p in EXAMPLES.glob("*/seed.py")))
def test_every_example_seed_passes_its_task(evaluator, job_for, example: str) -> None:
    v = evaluator.submit(
        job_for(EXAMPLES / example / "task.py", EXAMPLES / example / "seed.py", trials=2)
    ).verify
    assert v is not None and v.correct, v
    assert v.trials_passed == 2 * v.input_sets


def test_a_candidate_hardcoding_the_default_shape_fails_the_extra_input_set(evaluator, job_for) -> None:
    seed = (EXAMPLES / "elementwise" / "seed.py").read_text()
    hardcoded = seed.replace("n_elements = x.numel()", "n_elements = 37 * 129")
    v = evaluator.submit(job_for(EXAMPLES / "elementwise" / "task.py", hardcoded, trials=1)).verify
    assert v is not None and not v.correct
    assert v.evidence is not None and v.evidence.input_set == 1 and v.trials_passed == 1


def test_a_runtime_import_error_is_a_load_error_verdict(evaluator, job_for) -> None:
    src = "import no_such_module_kc\n" + (CHEATS / "good.py").read_text()
    v = evaluator.submit(job_for(CHEATS / "task_scale.py", src, trials=1)).verify
    assert v is not None and v.status == "load_error" and "no_such_module_kc" in (v.evidence.error_text or "")


def test_a_kernel_error_in_the_interpreter_gets_a_compile_class(evaluator, job_for) -> None:
    src = (CHEATS / "good.py").read_text().replace("tl.maximum(x, 0.0)", "tl.no_such_function(x)")
    v = evaluator.submit(job_for(CHEATS / "task_scale.py", src, trials=1)).verify
    assert v is not None and not v.correct and v.status == "compile_unknown_api", v


def test_profile_without_a_gpu_gives_the_roofline_floor(evaluator, job_for) -> None:
    r = evaluator.submit(
        job_for(
            EXAMPLES / "softmax" / "task.py",
            EXAMPLES / "softmax" / "seed.py",
            stages=["verify", "profile"],
            trials=1,
            roofline_target="sm_100",
        )
    )
    p = r.profile
    assert p is not None and not p.available and "needs a CUDA GPU" in p.message
    assert (
        p.roofline is not None and p.roofline.target == "sm_100" and p.roofline.bytes >= 2 * 8192 * 4000 * 4
    )


def test_progress_reports_trials(evaluator, job_for) -> None:
    seen: list[str] = []

    async def progress(fraction: float, message: str) -> None:
        assert 0.0 <= fraction <= 1.0
        seen.append(message)

    evaluator.submit(job_for(CHEATS / "task_scale.py", CHEATS / "good.py", trials=2), progress)
    assert "trial 1 of 2" in seen and "trial 2 of 2" in seen


def test_a_batch_submitted_at_once_gets_one_result_each(evaluator, job_for) -> None:
    jobs = [
        job_for(CHEATS / "task_scale.py", CHEATS / name, trials=1)
        for name in ("good.py", "nan_output.py", "good.py")
    ]

    async def batch():  # type: ignore[no-untyped-def]
        return await asyncio.gather(*(evaluator.evaluator.submit(j) for j in jobs))

    results = evaluator.call(batch())
    assert [r.verify.status for r in results] == ["passed", "nan_or_inf", "passed"]


# ---- GPU cases (run on the H200; skipped without CUDA) ----

gpu = pytest.mark.gpu


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.fixture(scope="module")
def gpu_eval():  # type: ignore[no-untyped-def]
    if not _cuda():
        pytest.skip("needs a CUDA GPU")
    from kernelcraft.tools.local import LocalEvaluator

    async def make():  # type: ignore[no-untyped-def]
        ev = LocalEvaluator(workers=2, device="cuda", protect_environ=False)
        await ev.start()
        return ev

    loop = asyncio.new_event_loop()
    ev = loop.run_until_complete(make())
    yield lambda job: loop.run_until_complete(ev.submit(job))
    loop.run_until_complete(ev.aclose())
    loop.close()


@gpu
def test_gpu_seed_passes_and_profiles(gpu_eval, job_for) -> None:
    r = gpu_eval(
        job_for(
            EXAMPLES / "softmax" / "task.py",
            EXAMPLES / "softmax" / "seed.py",
            stages=["compile", "verify", "profile"],
        )
    )
    assert r.verify.correct, r.verify
    assert r.profile.available and r.profile.candidate.median_us > 0 and r.profile.speedup_vs_eager
    assert not r.verify.interpreter


@gpu
def test_gpu_side_stream_work_is_not_hidden_from_the_timer(gpu_eval, job_for) -> None:
    task = EXAMPLES / "softmax" / "task.py"
    seed = (EXAMPLES / "softmax" / "seed.py").read_text()
    hidden = seed.replace(
        "    softmax_kernel[(n_rows,)](",
        "    s = getattr(torch.cuda, 'Str' + 'eam')()\n"
        "    getattr(torch.cuda, 'set_' + 'stream')(s)\n"
        "    softmax_kernel[(n_rows,)](",
    )
    assert hidden != seed
    honest = gpu_eval(job_for(task, seed, stages=["verify", "profile"], trials=1)).profile
    sneaky = gpu_eval(job_for(task, hidden, stages=["verify", "profile"], trials=1))
    if sneaky.verify.correct:
        assert sneaky.profile.candidate.median_us >= 0.5 * honest.candidate.median_us, (
            sneaky.profile,
            honest,
        )


@gpu
def test_gpu_stale_memory_is_not_the_reference_output(gpu_eval, job_for) -> None:
    v = gpu_eval(job_for(CHEATS / "task_scale.py", CHEATS / "uninitialised.py")).verify
    assert v is not None and not v.correct


@gpu
def test_gpu_illegal_access_then_a_second_evaluation_succeeds(gpu_eval, job_for) -> None:
    src = (
        (CHEATS / "good.py")
        .read_text()
        .replace(
            "mask=mask)\n    tl.store", "mask=mask)\n    tl.store(y_ptr + offs + (1 << 40), x)\n    tl.store"
        )
    )
    v = gpu_eval(job_for(CHEATS / "task_scale.py", src, trials=1)).verify
    assert v is not None and not v.correct and v.status.startswith("runtime_")
    v2 = gpu_eval(job_for(CHEATS / "task_scale.py", CHEATS / "good.py", trials=1)).verify
    assert v2 is not None and v2.correct, v2
