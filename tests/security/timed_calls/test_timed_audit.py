"""Class 9: the calls a profile times are not the calls verification checked. A forward honest
while verified and doing less while timed (a copy of an earlier answer captured into the timer's
CUDA graph, a copy after a count of calls) is caught by the audit of timed calls
(`engine/measure/audit.py`): the timed calls run on fresh draws of the inputs, and outputs of
calls chosen after they ran are checked by the reference. On the GPU only: without one nothing
is timed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelcraft.base import knobs

HERE = Path(__file__).resolve().parent
PROBES = HERE.parent / "probes"
CHEATS = HERE.parents[1] / "cheats"
SMALL = CHEATS / "task_scale.py"  # a few µs a call: timed in a CUDA graph
WIDE = PROBES / "task_wide_scale.py"  # ~100 µs a call: timed with events

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.fixture(scope="module")
def gpu_eval() -> Iterator[Callable[[Any], Any]]:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kernelcraft.engine.host.local import LocalEvaluator

    async def make() -> LocalEvaluator:
        ev = LocalEvaluator(settings=knobs.settings(), workers=2, device="cuda", protect_environ=False)
        await ev.start()
        return ev

    loop = asyncio.new_event_loop()
    ev = loop.run_until_complete(make())
    yield lambda job: loop.run_until_complete(ev.submit(job))
    loop.run_until_complete(ev.aclose())
    loop.close()


@pytest.mark.parametrize(
    ("task", "probe"), [(SMALL, "timed_capture_cache.py"), (WIDE, "timed_after_count.py")]
)
def test_a_forward_that_copies_an_earlier_answer_while_timed_fails_its_profile(
    gpu_eval, job_for, static_checks_off, task: Path, probe: str
) -> None:
    r = gpu_eval(job_for(task, PROBES / probe, stages=["verify", "profile"], trials=1))
    assert r.profile is not None and r.profile.failure_class == "forbidden_construct", r.profile
    assert not r.profile.speedup_vs_eager, r.profile
    assert r.profile.evidence is not None and "timed by the profile" in r.profile.evidence.message, r.profile
    assert r.failure_class == "forbidden_construct", r


def test_a_forward_that_turns_to_pytorch_after_a_count_of_calls_fails_its_profile(
    gpu_eval, job_for, static_checks_off
) -> None:
    r = gpu_eval(job_for(WIDE, PROBES / "timed_torch_after_count.py", stages=["verify", "profile"], trials=1))
    assert r.verify is not None and r.verify.correct, r.verify  # verification never saw call 31
    assert r.profile is not None and r.profile.failure_class == "pytorch_fallback", r.profile


@pytest.mark.parametrize(
    ("task", "candidate"),
    [(SMALL, CHEATS / "good.py"), (WIDE, CHEATS / "good.py"), (SMALL, PROBES / "honest_kept_buffer.py")],
)
def test_an_honest_forward_profiles_with_its_timed_calls_checked(
    gpu_eval, job_for, task: Path, candidate: Path
) -> None:
    r = gpu_eval(job_for(task, candidate, stages=["verify", "profile"], trials=1))
    assert r.verify is not None and r.verify.correct, r.verify
    assert r.profile is not None and r.profile.available and r.profile.failure_class is None, r.profile
    assert "timed calls on fresh inputs checked by the reference" in r.profile.message, r.profile.message
