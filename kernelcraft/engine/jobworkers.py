"""One job's worker processes: taking them, loading them, reading them, letting them go.

`JobWorkers` is the half of a job (`job.py`) that talks to processes. It takes a reference worker
(a parked one from the `ReferencePool`, or a fresh one from the device's pool) and a candidate
worker and loads them; reads every answer under the job's deadline and the candidate's memory
watchdog; lends the stages the GPU lock (its wait does not count against the deadline); and at
the end kills every worker but a reference worker in sync, which it parks for the next job on the
task. A candidate's failure leaves any of these as `Stop`, carrying the verdict.

Used by one `Job` at a time; only the job's stages call it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from kernelcraft.base.errors import TaskError
from kernelcraft.base.evaluation import EvalJob, Evidence
from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.channel import Frame
from kernelcraft.engine.evaluator import ProgressCallback
from kernelcraft.engine.gpulock import Device
from kernelcraft.engine.pool import WorkerPool, WorkerProcess
from kernelcraft.engine.protocol import (
    IMPORTING_CANDIDATE,
    InputsMade,
    Load,
    Loaded,
    MakeInputs,
    Msg,
    NextJob,
    Reply,
    Request,
    TaskFailed,
    TaskReady,
    Verdict,
)
from kernelcraft.engine.references import ReferencePool, reap, task_key
from kernelcraft.engine.verdicts import evidence_from

log = logging.getLogger(__name__)

SEED0 = 42  # KernelBench's weight seed: Model and ModelNew are built after manual_seed(SEED0)
WATCH_INTERVAL_S = 0.25
REAP_TIMEOUT_S = 15.0

R = TypeVar("R", bound=Reply)


class Stop(Exception):
    """The candidate failed: stop the job with this verdict."""

    def __init__(self, cls: FailureClass, evidence: Evidence) -> None:
        super().__init__(evidence.message)
        self.cls = cls
        self.evidence = evidence


@dataclass(frozen=True)
class CandidateSettings:
    """What the evaluator imposes on every candidate process."""

    memory_limit_bytes: int | None
    """See `LocalEvaluator`'s `memory_limit_gb`; None: no limit."""
    sandbox: bool
    """The filesystem sandbox (`sandbox.py`; KERNELCRAFT_SANDBOX=off turns it off)."""


class JobWorkers:
    """The workers of one job, its deadline, its stage times and its place on the GPU.

    active: the evaluator's set of workers that jobs hold (this job adds and removes its own)."""

    def __init__(
        self,
        spec: EvalJob,
        device: Device,
        references: ReferencePool,
        settings: CandidateSettings,
        active: set[WorkerProcess],
        progress: ProgressCallback | None,
    ) -> None:
        self.spec = spec
        self.device = device
        self.references = references
        self.settings = settings
        self.active = active
        self.progress_cb = progress
        self.deadline = float("inf")
        self.held: list[tuple[WorkerPool, WorkerProcess]] = []
        self.key = task_key(spec.task_source, device.index)
        self.ref: WorkerProcess | None = None
        self.ref_pool: WorkerPool | None = None
        self.ref_in_sync = True
        """False from a request to the reference until its answer: a reference left mid-request
        (cancelled, timed out) or that reported an error is not kept for another job."""
        self.ref_has_inputs = False
        self.untrusted: set[int] = set()
        """id() of each worker that said it is importing the candidate: its word is not the task's."""
        self.notes: list[str] = []
        self.stages: dict[str, float] = {}
        self.fraction = 0.0
        """The highest fraction reported so far: the job's progress only moves forward."""

    @property
    def interpret(self) -> bool:
        return self.device.kind == "cpu"

    def stage(self, name: str, since: float) -> float:
        """Add the time since `since` to stage `name`; returns now."""
        now = time.perf_counter()
        self.stages[name] = round(self.stages.get(name, 0.0) + now - since, 3)
        return now

    async def progress(self, fraction: float | None, message: str) -> None:
        """Report `message` at `fraction` (0..1), or at the current fraction when None (a worker's
        own messages). A fraction below one already reported is raised to it: stages that start
        their own counts never move the job's progress back."""
        self.fraction = max(self.fraction, min(1.0, fraction if fraction is not None else 0.0))
        if self.progress_cb is not None:
            try:
                await self.progress_cb(self.fraction, message)
            except Exception:  # a broken progress callback must not break the evaluation
                log.exception("progress callback failed")

    def start_deadline(self) -> None:
        if self.deadline == float("inf"):
            self.deadline = time.monotonic() + self.spec.timeout_s

    # ---- taking and loading workers ----

    async def acquire(self, pool: WorkerPool | None = None) -> WorkerProcess:
        pool = pool or self.device.pool
        w = await pool.acquire()
        self.held.append((pool, w))
        self.active.add(w)
        return w

    async def start_reference(self) -> TaskReady:
        """A reference worker with the task loaded: a kept one (rebuilt for this job) or a fresh one."""
        t = time.perf_counter()
        key = self.key
        while True:
            kept = self.references.take(key)
            if kept is not None:
                self.ref, self.ref_pool = kept, self.device.pool
                self.held.append((self.device.pool, kept))
                self.active.add(kept)
                t = self.stage("workers", t)
                self.start_deadline()
                try:
                    async with self.gpu_lock(exclusive=False):  # rebuilding Model uses the GPU
                        frame: Frame | None = await self.ask_ref(NextJob())
                except Stop:
                    frame = None
                if frame is not None and frame.header.get("type") == Msg.TASK_READY:
                    self.stage("reference", t)
                    return TaskReady.from_header(frame.header)
                kept.kill()  # broken between jobs; try another, or a fresh one
                self.references.forget(key, kept)
                continue
            if self.references.reserve(key):
                break
            # The task has its share of reference workers, all busy: one is soon free (a job
            # holds it a few seconds), which beats starting another process.
            await self.references.freed(key, 5.0)
        self.ref = None
        try:
            self.ref = await self.acquire()
        finally:
            self.references.started(key, self.ref)
        self.ref_pool = self.device.pool
        t = self.stage("workers", t)
        self.start_deadline()
        self.ref_in_sync = False
        # The lock is taken only once a worker is held: a job waiting for a worker (or for
        # another job's reference) must not hold up a timing, which would hold up that job.
        async with self.gpu_lock(exclusive=False):
            frame = await self.load(self.ref, "reference", interpret=self.interpret)
        self.ref_in_sync = frame.header.get("type") == Msg.TASK_READY
        self.stage("reference", t)
        return TaskReady.from_header(frame.header) if self.ref_in_sync else TaskReady()

    async def start_candidate(self) -> WorkerProcess:
        """A candidate worker with the candidate imported; `Stop` when that fails."""
        t = time.perf_counter()
        cand = await self.acquire()
        t = self.stage("workers", t)
        self.start_deadline()
        await self.progress(0.05, "loading the candidate")
        async with self.gpu_lock(exclusive=False):
            frame = await self.load(cand, "candidate", interpret=self.interpret)
        self.loaded(frame)
        self.stage("candidate", t)
        return cand

    async def load(
        self, w: WorkerProcess, role: Literal["reference", "candidate"], *, interpret: bool
    ) -> Frame:
        """Give `w` its job; its first answer (a `TaskError` when the task itself fails)."""
        spec, settings = self.spec, self.settings
        # Only what was given goes on the wire: the candidate's settings, for a candidate.
        given: dict[str, Any] = (
            {
                "candidate_source": spec.candidate_source,
                "sandbox": settings.sandbox,
                "allowed_ops": list(spec.allowed_ops),
                "memory_limit_bytes": settings.memory_limit_bytes,
            }
            if role == "candidate"
            else {}
        )
        load = Load(
            role=role,
            workdir=str(w.dir),
            task_source=spec.task_source,
            seed0=SEED0,
            interpret=interpret,
            **given,
        )
        await w.send(load.to_header())
        frame = await self.recv(w, candidate=role == "candidate")
        if id(w) in self.untrusted and frame.header.get("type") == Msg.TASK_ERROR:
            # Only the trusted part of a candidate worker (before it imports the candidate) may
            # say the task failed: after, the message could be the candidate's, dodging a verdict.
            raise Stop(
                FailureClass.FORBIDDEN_CONSTRUCT,
                Evidence(
                    message="the candidate's process claimed, after importing the candidate, that the task failed"
                ),
            )
        self.task_error(frame)
        return frame

    def loaded(self, frame: Frame) -> None:
        """The candidate's "loaded" frame (or its failure); notes a sandbox that could not be set."""
        note = self.read(frame, Loaded).sandbox_unavailable
        if note and note[:300] not in self.notes:
            self.notes.append(note[:300])

    # ---- reading answers ----

    async def recv(self, w: WorkerProcess, *, candidate: bool) -> Frame:
        """The next frame from `w`, enforcing the deadline and the memory watchdog."""
        limit = self.settings.memory_limit_bytes
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                w.kill("timeout")
                who = "the candidate" if candidate else "the reference"
                raise Stop(
                    FailureClass.RUNTIME_TIMEOUT,
                    Evidence(
                        message=f"{who} did not finish within the {self.spec.timeout_s:g} s deadline; its process was killed"
                    ),
                )
            try:
                frame = await asyncio.wait_for(w.frames.get(), min(remaining, WATCH_INTERVAL_S))
            except asyncio.TimeoutError:
                if candidate and limit and w.rss_bytes() > limit:
                    w.kill("memory")
                    raise Stop(
                        FailureClass.RUNTIME_OUT_OF_MEMORY,
                        Evidence(
                            message=f"the candidate's process used more than {limit / 1024**3:.1f} GiB of memory and was killed"
                        ),
                    ) from None
                continue
            if frame is None:
                raise await self.died(w, candidate=candidate)
            if frame.header.get("type") == Msg.PROGRESS:  # read as sent: a candidate may send anything
                message = str(frame.header.get("message", ""))[:200]
                if candidate and message == IMPORTING_CANDIDATE:
                    self.untrusted.add(id(w))
                await self.progress(None, message)
                continue
            return frame

    async def died(self, w: WorkerProcess, *, candidate: bool) -> Stop:
        await w.wait_exit(5)
        if w.killed_for == "timeout":
            return Stop(
                FailureClass.RUNTIME_TIMEOUT, Evidence(message="the deadline passed; the process was killed")
            )
        if w.killed_for == "memory":
            return Stop(
                FailureClass.RUNTIME_OUT_OF_MEMORY,
                Evidence(message="the process used too much memory and was killed"),
            )
        how = w.exit_description()
        who = "the candidate's process" if candidate else "the reference process"
        return Stop(
            FailureClass.RUNTIME_CRASH,
            Evidence(
                message=f"{who} {how} before reporting a result (output and exit codes are not results)",
                error_text=w.tail(2000) or None,
            ),
        )

    def read(self, frame: Frame, cls: type[R]) -> R:
        """The candidate's answer of type `cls`; `Stop` on a verdict, another message or a
        malformed one."""
        self.candidate_verdict(frame, cls.TAG)
        try:
            return cls.from_header(frame.header)
        except ValueError as e:
            raise Stop(
                FailureClass.RUNTIME_CRASH,
                Evidence(
                    message=f"the candidate's process sent a malformed {cls.TAG.value!r} message: {e}"[:500]
                ),
            ) from e

    def candidate_verdict(self, frame: Frame, expected: Msg) -> None:
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

    def task_error(self, frame: Frame) -> None:
        """Raise `TaskError` if the worker says the task itself failed."""
        if frame.header.get("type") != Msg.TASK_ERROR:
            return
        try:
            failed = TaskFailed.from_header(frame.header)
        except ValueError:
            failed = TaskFailed(summary="(the worker's task_error message was malformed)")
        raise TaskError(
            f"the task failed while building Model or its inputs: {failed.summary}\n{failed.error}",
            path=self.spec.task_name,
        )

    # ---- the reference ----

    async def ask_ref(
        self, request: Request, blobs: list[bytes] | None = None, *, error_is_an_answer: bool = False
    ) -> Frame:
        """One request to the reference worker and its answer. An answer with an error leaves the
        reference out of sync (not kept) unless `error_is_an_answer` (the request may fail for
        reasons that are not the process's: a model torch.compile or the roofline cannot handle)."""
        assert self.ref is not None
        self.ref_in_sync = False
        await self.ref.send(request.to_header(), blobs)
        frame = await self.recv(self.ref, candidate=False)
        kind = frame.header.get("type")
        self.ref_in_sync = error_is_an_answer or (kind != Msg.TASK_ERROR and "error" not in frame.header)
        return frame

    async def inputs(self, input_set: int) -> tuple[InputsMade, list[bytes]]:
        """New inputs of one trial from the reference (a secret seed): the message and its blobs."""
        frame = await self.ask_ref(MakeInputs(input_set=input_set, seed=secrets.randbits(62)))
        self.task_error(frame)
        self.ref_has_inputs = True
        return InputsMade.from_header(frame.header), frame.blobs

    # ---- the GPU and the end ----

    @contextlib.asynccontextmanager
    async def gpu_lock(self, *, exclusive: bool) -> AsyncIterator[None]:
        """The GPU, shared with other jobs' verifications or, to time, alone."""
        if not self.device.locked:
            yield
            return
        waited = time.monotonic()
        t = time.perf_counter()
        if self.device.lock.busy():
            await self.progress(0.1, "waiting for the GPU")
        lock = self.device.lock.exclusive() if exclusive else self.device.lock.shared()
        async with lock:
            self.deadline += time.monotonic() - waited
            self.stage("gpu_wait", t)
            yield

    async def release(self) -> None:
        """Kill every worker of this job (but keep a reference worker that is in sync and
        error-free for the next job on the task), then reap them. The kill and the keeping are
        synchronous and come before any await: under cancellation (anyio cancels again at every
        await until the task ends) an await here may be cancelled at once, and the processes must
        be dead or parked regardless. The reaping (wait, close the channel, remove the scratch
        dir) runs in a shielded task, so a repeated cancellation cannot stop it; we wait for it
        at most `REAP_TIMEOUT_S`."""
        ref = self.ref
        keep = (
            ref is not None
            and self.ref_pool is not None
            and self.ref_in_sync
            and ref.alive()
            and ref.frames.empty()
            and not self.references.closed
        )
        workers = [(pool, w) for pool, w in self.held if not (keep and w is ref)]
        for _pool, w in self.held:
            self.active.discard(w)
        for _pool, w in workers:
            w.kill()
        if keep:
            assert ref is not None and self.ref_pool is not None
            self.references.keep(self.key, ref, self.ref_pool)
        elif ref is not None:
            self.references.forget(self.key, ref)
        if not workers:
            return
        reap_all = reap(asyncio.gather(*(pool.release(w) for pool, w in workers), return_exceptions=True))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(reap_all), REAP_TIMEOUT_S)
