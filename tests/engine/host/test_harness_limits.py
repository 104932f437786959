"""A limit kernelcraft sets is never the candidate's failure (issue 37): the harness_limit class,
what maps onto it, and that nothing learns from it or rewards it. No processes: the pure
functions and the ledger."""

from __future__ import annotations

import asyncio

import pytest

from kernelcraft.base.errors import TaskError
from kernelcraft.base.failures import NOT_THE_CANDIDATES, FailureClass
from kernelcraft.engine.host.replies import Stop, deadline_stop, expect_candidate, limited, memory_stop
from kernelcraft.engine.machine.memory import GIB, MemoryLedger, TaskSize, ran_out
from kernelcraft.engine.wire.channel import Frame
from kernelcraft.engine.wire.protocol import Msg, Verdict
from kernelcraft.engine.worker.room import limit_message, replay_fraction
from kernelcraft.schema.evaluation import EvalResult, Evidence, VerifyResult
from kernelcraft.search.policy import outcome_of, reward_for

HARNESS = FailureClass.HARNESS_LIMIT


def test_a_harness_limit_is_its_own_class_that_no_rule_is_learnt_from() -> None:
    from kernelcraft.agent.loop.runloop import learns_from

    assert HARNESS.value == "harness_limit" and HARNESS.stage == "harness"
    assert HARNESS in NOT_THE_CANDIDATES

    class Node:
        failure_class = HARNESS

    assert not learns_from(Node())  # type: ignore[arg-type]


def test_a_harness_limit_is_never_rewarded_above_a_wrong_kernel() -> None:
    """A candidate can always reach a limit on purpose: reaching one must not pay."""
    failed = VerifyResult(
        correct=False, status="harness_limit", failure_class=HARNESS, trials=1, device="cpu", interpreter=True
    )
    outcome, speedup = outcome_of(EvalResult(verify=failed))
    assert outcome == "wrong" and speedup is None
    assert reward_for(outcome, speedup) <= reward_for("wrong", None)


def test_the_watchdogs_kill_under_a_limit_of_ours_is_a_harness_limit_with_the_figures() -> None:
    stop = memory_stop(int(4.39 * GIB), owner="ours")
    assert stop.cls is HARNESS
    assert "harness limit" in stop.evidence.message and "4.4 GiB" in stop.evidence.message
    assert "not the candidate's failure" in stop.evidence.message
    assert memory_stop(GIB, owner="user").cls is FailureClass.RUNTIME_OUT_OF_MEMORY
    device = memory_stop(GIB, owner="device")
    assert (
        device.cls is FailureClass.RUNTIME_OUT_OF_MEMORY and "beside the reference" in device.evidence.message
    )


def test_the_candidates_own_out_of_memory_under_our_cap_becomes_a_harness_limit() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 576.00 MiB (4.39 GiB allowed)"
    stop = limited(Stop(FailureClass.RUNTIME_OUT_OF_MEMORY, Evidence(message=oom)), int(4.39 * GIB), "ours")
    assert stop.cls is HARNESS and "4.39 GiB, sized from the task" in stop.evidence.message
    assert "576.00 MiB" in stop.evidence.message  # torch's own figures kept
    user = limited(Stop(FailureClass.RUNTIME_OUT_OF_MEMORY, Evidence(message=oom)), GIB, "user")
    assert user.cls is FailureClass.RUNTIME_OUT_OF_MEMORY
    other = limited(Stop(FailureClass.NUMERICAL_MISMATCH, Evidence(message="differ")), GIB, "ours")
    assert other.cls is FailureClass.NUMERICAL_MISMATCH


def test_a_candidate_cannot_claim_a_harness_limit_for_itself() -> None:
    verdict = Verdict(failure_class="harness_limit", evidence={"message": "not my fault"})
    with pytest.raises(Stop) as raised:
        expect_candidate(Frame(verdict.to_header(), []), Msg.OUTPUTS)
    assert raised.value.cls is FailureClass.RUNTIME_ERROR


def test_a_harness_limit_is_run_again_alone_like_running_out_of_memory() -> None:
    limited_verdict = VerifyResult(
        correct=False,
        status="harness_limit",
        failure_class=HARNESS,
        evidence=memory_stop(GIB, owner="ours").evidence,
        trials=1,
        device="cpu",
        interpreter=True,
    )
    assert ran_out(EvalResult(verify=limited_verdict))


def test_the_replay_gets_forwards_memory_on_top_of_the_candidates_limit_never_past_the_device() -> None:
    assert replay_fraction(4 * GIB, 2 * GIB, 140 * GIB) == pytest.approx(6 / 140)
    assert replay_fraction(100 * GIB, 60 * GIB, 140 * GIB) == 1.0
    text = limit_message("OutOfMemoryError: CUDA out of memory", int(4.39 * GIB), 576 * 1024**2)
    assert text.startswith("harness limit: replaying forward")
    assert "4.39 GiB" in text and "0.56 GiB forward needed" in text and "harness did not see" not in text


def _size(need: int, *, free: int, total: int) -> TaskSize:
    return TaskSize(need, 0, need, True, free, total)


async def _no_evict(n: int) -> int:
    return 0


@pytest.mark.anyio
async def test_a_job_that_fits_the_idle_device_waits_while_other_jobs_are_in_flight_instead_of_a_refusal() -> (
    None
):
    """KernelBench level 1 #46 with --jobs 4 on the H200: 34 GiB needed, 34 GiB free of 140 while
    the other jobs (no reservation of theirs yet visible) held the rest: it must wait, not be refused."""
    ledger = MemoryLedger("cuda")
    ledger.learn(_size(GIB, free=34 * GIB, total=140 * GIB), idle_bytes=0, others_in_flight=3)
    assert not ledger.measured_alone
    ledger.reserved[7] = 60 * GIB  # one of them reserves
    waiting = asyncio.ensure_future(
        ledger.admit(1, 40 * GIB, lambda cap: TaskError(f"refused at {cap}"), lambda: 0, _no_evict)
    )
    await asyncio.sleep(0.05)
    assert not waiting.done()
    ledger.release(7)
    await asyncio.wait_for(waiting, 1)
    assert ledger.reserved == {1: 40 * GIB}
    # With nothing of ours anywhere, the same measurement is exact: the job is refused.
    alone = MemoryLedger("cuda")
    alone.learn(_size(GIB, free=34 * GIB, total=140 * GIB), idle_bytes=0, others_in_flight=0)
    with pytest.raises(TaskError, match="refused at"):
        await alone.admit(1, 40 * GIB, lambda cap: TaskError(f"refused at {cap}"), lambda: 0, _no_evict)


def test_the_interpreters_deadline_is_a_harness_limit_and_is_not_run_again_for_memory() -> None:
    stop = deadline_stop(
        candidate=True, reading_candidate=False, timeout_s=300, task_name="t", interpreter=True
    )
    assert stop.cls is HARNESS and "300 s deadline in Triton's CPU interpreter" in stop.evidence.message
    assert "--cpu-sizes" in stop.evidence.message
    gpu = deadline_stop(candidate=True, reading_candidate=False, timeout_s=300, task_name="t")
    assert gpu.cls is FailureClass.RUNTIME_TIMEOUT
    # The fresh-input replay runs the candidate's kernels in the reference worker's interpreter:
    # at a large task's sizes it was "the reference did not finish" (runtime_timeout) after the
    # trials passed.
    replay = deadline_stop(
        candidate=False,
        reading_candidate=True,
        timeout_s=300,
        task_name="t",
        interpreter=True,
        rerunning=True,
    )
    assert replay.cls is HARNESS and "fresh-input replay" in replay.evidence.message
    comparing = deadline_stop(
        candidate=False, reading_candidate=True, timeout_s=300, task_name="t", interpreter=True
    )
    assert comparing.cls is FailureClass.RUNTIME_TIMEOUT
    timed_out = VerifyResult(
        correct=False,
        status="harness_limit",
        failure_class=HARNESS,
        evidence=stop.evidence,
        trials=1,
        device="cpu",
        interpreter=True,
    )
    assert not ran_out(EvalResult(verify=timed_out))  # more memory would not help it
