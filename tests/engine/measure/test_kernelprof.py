"""Profiles that say where the time goes (issue 29): each side's kernels, by name, per forward."""

from __future__ import annotations

import pytest

from kernelcraft.base import knobs
from kernelcraft.engine.measure import kernelprof
from kernelcraft.schema.evaluation import KernelTime, ProfileResult
from kernelcraft.search.feedback import profile_words


def test_kernels_are_summed_per_forward_largest_first_with_the_rest_folded() -> None:
    totals = {f"k{i}": [3.0, float(3 * (i + 1))] for i in range(10)}  # 3 forwards
    rows = kernelprof.summarise(totals, 3)
    assert [r["name"] for r in rows[:2]] == ["k9", "k8"] and rows[0]["us"] == 10.0 and rows[0]["calls"] == 1
    assert rows[-1]["name"] == "(2 other kernels)" and len(rows) == kernelprof.TOP + 1
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, abs=1e-3)


def test_template_arguments_are_folded_out_of_library_kernel_names() -> None:
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3> >(int, X, Y)"
    assert kernelprof._short(name) == "at::native::vectorized_elementwise_kernel<…>(int, X, Y)"


def test_the_breakdown_reaches_the_profile_in_words() -> None:
    prof = ProfileResult(
        available=True,
        kernels={
            "candidate": [KernelTime(name="softmax_kernel", calls=1, us=12.5, share=0.97)],
            "eager": [KernelTime(name="cunn_SoftMaxForward<…>", calls=1, us=20.0, share=1.0)],
        },
    )
    from kernelcraft.schema.evaluation import EvalResult

    words = profile_words(EvalResult(profile=prof), "sm_90a") or ""
    assert (
        "its GPU time: softmax_kernel 97% (12.5 µs)" in words
        and "PyTorch eager's: cunn_SoftMaxForward" in words
    )


@pytest.mark.gpu
def test_gpu_a_profile_names_the_kernels_of_both_sides(gpu_submit, job_for) -> None:  # noqa: ARG001
    import asyncio
    from pathlib import Path

    from kernelcraft.engine.host.local import LocalEvaluator

    examples = Path(__file__).resolve().parents[3] / "examples" / "softmax"

    async def go():  # type: ignore[no-untyped-def]
        ev = LocalEvaluator(settings=knobs.settings(), workers=2, device="cuda", protect_environ=False)
        await ev.start()
        try:
            return await ev.submit(
                job_for(examples / "task.py", examples / "seed.py", stages=["verify", "profile"])
            )
        finally:
            await ev.aclose()

    result = asyncio.new_event_loop().run_until_complete(go())
    prof = result.profile
    assert prof is not None and prof.available, prof
    assert prof.kernels.get("candidate") and prof.kernels["candidate"][0].name.startswith("softmax_kernel"), (
        prof.kernels
    )
    assert prof.kernels.get("eager"), prof.kernels
