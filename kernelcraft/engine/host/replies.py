"""What a worker's answer means to the job: the candidate's verdict (`Stop`), a malformed or
unexpected message (the candidate's fault), or the trusted task failing (`TaskError`, unusable
input); and what its silence or death means (`deadline_stop`, `memory_stop`, `death_stop`): the
reference's own timeout or death is the task's, never the candidate's, except while it reads the
candidate's outputs. Pure functions; `JobWorkers` applies them.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from kernelcraft.base.errors import TaskError
from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.host.verdicts import evidence_from
from kernelcraft.engine.machine.memory import LimitOwner
from kernelcraft.engine.wire.channel import Frame
from kernelcraft.engine.wire.protocol import Msg, Reply, TaskFailed, Verdict
from kernelcraft.schema.evaluation import Evidence

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
        if cls is FailureClass.HARNESS_LIMIT:  # only the host says a limit of its own was reached
            cls = FailureClass.RUNTIME_ERROR
        raise Stop(cls, evidence_from(verdict.evidence, "the candidate failed"))
    if t == Msg.TASK_ERROR:
        raise Stop(
            FailureClass.RUNTIME_CRASH,
            Evidence(message=f"the candidate's process sent {str(t)[:40]!r} instead of {expected.value!r}"),
        )
    # The worker's own code answers each request with its reply or a verdict: any other message
    # on the channel was written there by the candidate's code (a forged `outputs` during the
    # GPU's warm-up, say).
    raise Stop(
        FailureClass.FORBIDDEN_CONSTRUCT,
        Evidence(
            message=f"the candidate's process sent {str(t)[:40]!r} where the harness asked for "
            f"{expected.value!r}: a message the harness did not ask for is the candidate's code writing "
            "to the harness's channel",
            op="channel",
        ),
    )


def raise_if_task_failed(frame: Frame, task_name: str) -> None:
    """Raise `TaskError` if the worker says the task itself failed."""
    if frame.header.get("type") != Msg.TASK_ERROR:
        return
    try:
        failed = TaskFailed.from_header(frame.header)
    except ValueError:
        failed = TaskFailed(summary="(the worker's task_error message was malformed)")
    hint = ""
    if "not compiled with CUDA" in failed.summary:  # a task written for a GPU, run without one
        hint = (
            "; this machine has no GPU: make the task's tensors without naming a device (drop .cuda() "
            "and device='cuda'), as KernelBench's tasks do: the harness makes them on the device it runs"
        )
    raise TaskError(
        f"the task failed while {failed.doing}: {failed.summary}{hint}\n{failed.error}",
        path=task_name,
    )


class Exited(Protocol):
    """A worker process that is gone (`pool.WorkerProcess`)."""

    killed_for: str | None
    refused: str | None
    """Why the harness closed its channel on a frame over its bounds (`killed_for` "frame")."""

    def exit_description(self) -> str: ...

    def tail(self, limit: int = ...) -> str: ...


def deadline_stop(
    *,
    candidate: bool,
    reading_candidate: bool,
    timeout_s: float,
    task_name: str,
    interpreter: bool = False,
    rerunning: bool = False,
) -> Stop:
    """The verdict when the job's deadline passed waiting on a worker; `TaskError` when it was the
    reference at its own work (not reading the candidate's outputs). A candidate running its
    trials in Triton's interpreter (`interpreter`), or the reference re-running its kernels there
    on fresh inputs (`rerunning`: the fresh-input replay), reached a harness limit: the
    interpreter's speed is ours, not the kernel's (a kernel that never ends looks the same here;
    a GPU tells them apart, and a harness limit never scores above a wrong kernel)."""
    if not candidate and not reading_candidate:
        raise TaskError(
            f"the reference (the task's own Model and inputs) did not finish within the {timeout_s:g} s "
            "deadline; this is not the candidate's verdict: give it more time (--timeout) or smaller "
            "sizes (get_cpu_inputs() without a GPU)",
            path=task_name,
        )
    if rerunning and interpreter and not candidate:
        return Stop(
            FailureClass.HARNESS_LIMIT,
            Evidence(
                message=f"harness limit: re-running the candidate's kernels on fresh inputs (the fresh-input "
                f"replay, in the reference worker) did not finish within the {timeout_s:g} s deadline in "
                "Triton's CPU interpreter, which runs a kernel's programs one at a time; the trials had "
                f"passed. Give it more time (--timeout) or smaller sizes (--cpu-sizes); {NOT_THEIRS}",
                op="fresh replay",
            ),
        )
    if candidate and interpreter:
        return Stop(
            FailureClass.HARNESS_LIMIT,
            Evidence(
                message=f"harness limit: the candidate did not finish within the {timeout_s:g} s deadline "
                "in Triton's CPU interpreter, which runs a kernel's programs one at a time (a kernel fast "
                "on a GPU can take minutes here); its process was killed. Give it more time (--timeout) "
                f"or smaller sizes (--cpu-sizes); {NOT_THEIRS}"
            ),
        )
    who = "the candidate" if candidate else "the reference"
    return Stop(
        FailureClass.RUNTIME_TIMEOUT,
        Evidence(message=f"{who} did not finish within the {timeout_s:g} s deadline; its process was killed"),
    )


def memory_stop(limit: int, *, owner: LimitOwner) -> Stop:
    """The verdict on a candidate the memory watchdog killed. `owner` (`memory.LimitOwner`): a
    limit the harness sized ("ours": a harness limit, never the candidate's failure; the evaluator
    runs the job again alone with more before it stands), the device's whole room beside the
    reference ("device"), or the user's `--memory-limit-gb` ("user")."""
    figures = f"the candidate's process used more than {limit / 1024**3:.1f} GiB of memory"
    if owner == "ours":
        return Stop(
            FailureClass.HARNESS_LIMIT,
            Evidence(
                message=f"harness limit: {figures}, the limit kernelcraft sized from the task; {NOT_THEIRS}"
            ),
        )
    whose = (
        "the room the device has beside the reference" if owner == "device" else "the --memory-limit-gb limit"
    )
    return Stop(FailureClass.RUNTIME_OUT_OF_MEMORY, Evidence(message=f"{figures} ({whose}) and was killed"))


NOT_THEIRS = "a limit kernelcraft set, not the candidate's failure (and not a pass)"


def limited(stop: Stop, limit: int | None, owner: LimitOwner) -> Stop:
    """The candidate's own out-of-memory verdict under a limit of ours is a harness limit, with
    the figures; any other verdict stands."""
    if stop.cls is not FailureClass.RUNTIME_OUT_OF_MEMORY or owner != "ours":
        return stop
    cap = f" ({limit / 1024**3:.2f} GiB, sized from the task)" if limit else ""
    ev = stop.evidence
    ev.message = (
        f"harness limit: memory ran out under the cap kernelcraft set{cap}; {NOT_THEIRS}: {ev.message}"[:2000]
    )
    return Stop(FailureClass.HARNESS_LIMIT, ev)


def death_stop(w: Exited, *, candidate: bool, reading_candidate: bool, task_name: str) -> Stop:
    """The verdict on a worker whose channel closed before it answered; `TaskError` when it was the
    reference at its own work and nobody killed it."""
    if w.killed_for == "frame" and (candidate or reading_candidate):
        who = "the candidate's process" if candidate else "the reference, reading the candidate's outputs,"
        return Stop(
            FailureClass.RUNTIME_CRASH,
            Evidence(message=f"{who} sent what the job does not expect: {w.refused}; its process was killed"),
        )
    if w.killed_for == "frame":
        raise TaskError(
            f"the reference process (the task's own Model and inputs) sent what the job does not expect: "
            f"{w.refused}; this is not the candidate's verdict",
            path=task_name,
        )
    if not candidate and not reading_candidate and w.killed_for is None:
        raise TaskError(
            f"the reference process (the task's own Model and inputs) {w.exit_description()}; this "
            f"is not the candidate's verdict (out of memory?). Its output: {w.tail(600).strip() or '(none)'}",
            path=task_name,
        )
    if w.killed_for == "timeout":
        return Stop(
            FailureClass.RUNTIME_TIMEOUT, Evidence(message="the deadline passed; the process was killed")
        )
    if w.killed_for == "memory":
        return Stop(
            FailureClass.RUNTIME_OUT_OF_MEMORY,
            Evidence(message="the process used too much memory and was killed"),
        )
    who = "the candidate's process" if candidate else "the reference process"
    return Stop(
        FailureClass.RUNTIME_CRASH,
        Evidence(
            message=f"{who} {w.exit_description()} before reporting a result (output and exit codes are not results)",
            error_text=w.tail(2000) or None,
        ),
    )
