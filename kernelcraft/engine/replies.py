"""What a worker's answer means to the job: the candidate's verdict (`Stop`), a malformed or
unexpected message (the candidate's fault), or the trusted task failing (`TaskError`, unusable
input). Pure functions over frames; `JobWorkers` applies them.
"""

from __future__ import annotations

from typing import TypeVar

from kernelcraft.base.errors import TaskError
from kernelcraft.base.evaluation import Evidence
from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.channel import Frame
from kernelcraft.engine.protocol import Msg, Reply, TaskFailed, Verdict
from kernelcraft.engine.verdicts import evidence_from

R = TypeVar("R", bound=Reply)


class Stop(Exception):
    """The candidate failed: stop the job with this verdict."""

    def __init__(self, cls: FailureClass, evidence: Evidence) -> None:
        super().__init__(evidence.message)
        self.cls = cls
        self.evidence = evidence


def read_candidate(frame: Frame, cls: type[R]) -> R:
    """The candidate's answer of type `cls`; `Stop` on a verdict, another message or a
    malformed one."""
    expect_candidate(frame, cls.TAG)
    try:
        return cls.from_header(frame.header)
    except ValueError as e:
        raise Stop(
            FailureClass.RUNTIME_CRASH,
            Evidence(
                message=f"the candidate's process sent a malformed {cls.TAG.value!r} message: {e}"[:500]
            ),
        ) from e


def expect_candidate(frame: Frame, expected: Msg) -> None:
    """Raise `Stop` unless the candidate's frame is of the expected type."""
    t = frame.header.get("type")
    if t == expected:
        return
    if t == Msg.VERDICT:
        try:
            verdict = Verdict.from_header(frame.header)
        except ValueError:
            verdict = Verdict()
        try:
            cls = FailureClass(verdict.failure_class)
        except ValueError:
            cls = FailureClass.RUNTIME_CRASH
        raise Stop(cls, evidence_from(verdict.evidence, "the candidate failed"))
    raise Stop(
        FailureClass.RUNTIME_CRASH,
        Evidence(message=f"the candidate's process sent {str(t)[:40]!r} instead of {expected.value!r}"),
    )


def raise_if_task_failed(frame: Frame, task_name: str) -> None:
    """Raise `TaskError` if the worker says the task itself failed."""
    if frame.header.get("type") != Msg.TASK_ERROR:
        return
    try:
        failed = TaskFailed.from_header(frame.header)
    except ValueError:
        failed = TaskFailed(summary="(the worker's task_error message was malformed)")
    raise TaskError(
        f"the task failed while {failed.doing}: {failed.summary}\n{failed.error}",
        path=task_name,
    )
