"""One job's worker processes: taking them, loading them, reading them, letting them go.

`JobWorkers` is the part of a job (`job/run.py`) that talks to processes. It takes a reference worker
(a parked one from the `ReferencePool`, or a fresh one from the device's pool) and a candidate
worker and loads them; reads every answer under the job's deadline and the candidate's memory
watchdog; lends the stages the GPU lock (its wait does not count against the deadline); and at
the end kills every worker but a reference worker in sync, which it parks for the next job on the
task. A candidate's failure leaves any of these as `Stop`, carrying the verdict (what an answer,
a silence or a death means: `replies.py`).

Before the candidate loads, the reference measures the task and the job is admitted at its sizes
(`job/admission.py`). The reference's own timeout or death is the task's (`TaskError`), never the
candidate's, except while it reads the candidate's outputs.

Its own state is the processes' (which it holds, which may be believed, whether the reference may
be kept); what the job learns through them (the candidate's word as it loads, the inputs' seed,
the deadline's pauses, notes and stage spans) it writes to the job's `JobState` (`job/state.py`).
Used by one `Job` at a time; only the job's parts call it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from kernelcraft.base.failures import FailureClass
from kernelcraft.engine import box
from kernelcraft.engine.box import cgroup
from kernelcraft.engine.host import compilefacts
from kernelcraft.engine.host.job import admission
from kernelcraft.engine.host.job.state import JobState
from kernelcraft.engine.host.references import reap
from kernelcraft.engine.host.replies import (
    R,
    Stop,
    deadline_stop,
    death_stop,
    expect_candidate,
    limited,
    memory_stop,
    raise_if_task_failed,
    read_candidate,
)
from kernelcraft.engine.machine.memory import IDLE_REFERENCE_SHARE
from kernelcraft.engine.machine.pool import WorkerPool, WorkerProcess
from kernelcraft.engine.wire.channel import Frame
from kernelcraft.engine.wire.protocol import (
    FOUND_LAUNCHES,
    IMPORTING_CANDIDATE,
    AuditTimed,
    Compare,
    FreshReplay,
    InputsMade,
    Load,
    Loaded,
    MakeInputs,
    Msg,
    Request,
    TaskReady,
)
from kernelcraft.schema.evaluation import Evidence

SEED0 = 42  # KernelBench's weight seed: Model and ModelNew are built after manual_seed(SEED0)
WATCH_INTERVAL_S = 0.25
REAP_TIMEOUT_S = 15.0


class JobWorkers:
    """The workers of one job: taking them, loading them, reading their answers, letting them go.

    Its state is the processes' (which it holds, whether the reference may be kept); what the job
    learns is the `JobState`'s. active: the evaluator's set of workers that jobs hold (this job
    adds and removes its own)."""

    def __init__(self, state: JobState, active: set[WorkerProcess]) -> None:
        self.state = state
        self.active = active
        self.held: list[tuple[WorkerPool, WorkerProcess]] = []
        self.limits: dict[int, int | None] = {}
        """id() of each candidate worker -> its memory limit (the watchdog's)."""
        self.ref_reading_candidate = False
        self.ref_rerunning = False
        self.ran_candidate_kernels = False
        """The reference re-ran the candidate's kernels (the fresh-input replay): it is not kept."""
        self.ref: WorkerProcess | None = None
        self.ref_pool: WorkerPool | None = None
        self.ref_in_sync = True
        """False from a request to the reference until its answer: a reference left mid-request
        (cancelled, timed out) or that reported an error is not kept for another job."""
        self.ref_has_inputs = False
        self.untrusted: set[int] = set()
        """id() of each worker that said it is importing the candidate: its word is not the task's."""
        self.compiling: list[tuple[WorkerProcess, str, list[str]]] = []
        """Each candidate worker that runs Triton's compiler, its `KernelCache` key and the Triton
        keys it was given (`compilefacts.keep_compiled`)."""

    # ---- taking and loading workers ----

    async def acquire(self, pool: WorkerPool | None = None) -> WorkerProcess:
        """A worker of `pool` (the device's by default), held by this job."""
        pool = pool or self.state.device.pool
        w = await pool.acquire()
        self.hold(pool, w)
        return w

    def hold(self, pool: WorkerPool, w: WorkerProcess) -> None:
        """Hold `w` (of `pool`) for this job: it goes with the job's other workers (`release`)."""
        self.held.append((pool, w))
        self.active.add(w)

    def set_reference(self, w: WorkerProcess, pool: WorkerPool, *, in_sync: bool) -> None:
        """`w` (of `pool`, held) is the job's reference worker; `in_sync`: between requests (a
        kept one), or not (a fresh one, loading: not kept if the job ends there)."""
        self.ref, self.ref_pool, self.ref_in_sync = w, pool, in_sync

    def drop_reference(self) -> None:
        """The reference worker broke before the job used it (it is killed): none for now."""
        self.ref = None

    async def start_reference(self) -> TaskReady:
        """A reference worker with the task loaded, the job admitted at its sizes (`job/admission.py`)."""
        return await admission.start_reference(self.state, self)

    async def start_candidate(self) -> WorkerProcess:
        """A candidate worker with the candidate imported; `Stop` when that fails. It is loaded
        once the reference has measured the task (its memory limit and task source come from it)."""
        t = time.perf_counter()
        cand = await self.acquire()
        await asyncio.shield(self.state.sized)
        t = self.state.stage("workers", t)
        self.state.start_deadline()
        await self.state.progress(0.05, "loading the candidate")
        async with self.gpu_lock(exclusive=False):
            frame = await self.load(cand, "candidate", interpret=self.state.interpret)
        self.loaded(frame)
        self.state.stage("candidate", t)
        return cand

    async def load(
        self,
        w: WorkerProcess,
        role: Literal["reference", "candidate"],
        *,
        interpret: bool,
        full_size: bool = False,
    ) -> Frame:
        """Give `w` its job; its first answer (a `TaskError` when the task itself fails).
        `full_size`: a candidate also gets the task as given where the trials run on a shrunk
        copy (the compile stage on the CPU, which finds launches at the task's real shapes on the
        meta device); it builds `ModelNew` at the trials' sizes, under the job's memory limit."""
        st = self.state
        spec, settings = st.spec, st.settings
        if role == "candidate":
            self.limits[id(w)] = st.memory_limit
        load = self.load_message(w, role, interpret=interpret, full_size=full_size)
        compiled: list[bytes] | None = None
        if role == "candidate":
            w.bounds = st.bounds
            if not w.interpret:  # what this candidate compiled before, for its compiler (`kernelcache.py`)
                key = st.references.kernels.key(spec, str(w.info.get("device", "")))
                names, compiled = await asyncio.to_thread(st.references.kernels.entry, key)
                if names:
                    load.compiled = names
                self.compiling.append((w, key, sorted({n.split("/")[0] for n in names})))
        if role == "candidate" and settings.sandbox:
            # before it imports the candidate: its processes, and its memory with its children's
            w.limit(box.CANDIDATE_TASKS, cgroup.memory_for(st.device.kind, st.memory_limit))
        elif settings.sandbox:  # the task is client code too: its processes, its memory with its children's
            w.limit(box.REFERENCE_TASKS, cgroup.reference_memory())
        await w.send(load.to_header(), compiled)
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

    async def start_replacement(self, w: WorkerProcess) -> bool:
        """Load a fresh worker as this job's reference (`ReferencePool.replace`): whether it
        measured the task."""
        if self.state.settings.sandbox:
            w.limit(box.REFERENCE_TASKS, cgroup.reference_memory())
        await w.send(self.load_message(w, "reference", interpret=self.state.interpret).to_header())
        frame = await w.frames.get()
        while frame is not None and frame.header.get("type") == Msg.PROGRESS:
            frame = await w.frames.get()
        return frame is not None and frame.header.get("type") == Msg.SIZED

    def load_message(
        self,
        w: WorkerProcess,
        role: Literal["reference", "candidate"],
        *,
        interpret: bool,
        full_size: bool = False,
    ) -> Load:
        """The `Load` that gives `w` its job (`load`)."""
        st = self.state
        spec, settings = st.spec, st.settings
        # Only what was given goes on the wire: the candidate's settings, for a candidate.
        given: dict[str, Any]
        if role == "candidate":
            limit = st.memory_limit
            given = {
                "candidate_source": spec.candidate_source,
                "sandbox": settings.sandbox,
                "allowed_ops": list(spec.allowed_ops),
                "memory_limit_bytes": limit,
            }
            if full_size and st.task_source != spec.task_source:
                given["full_task_source"] = spec.task_source
        else:
            given = {"full_size": True} if st.full_size and interpret else {}
            if interpret and spec.cpu_sizes and not st.full_size:
                given["cpu_sizes"] = dict(spec.cpu_sizes)
            elif interpret and not st.full_size and st.key != st.base_key:
                given["cpu_divisors"] = st.divisors.canonical()
                given["cpu_untiled"] = list(st.untiled)
                given["cpu_flat"] = st.flat
        source = st.task_source if role == "candidate" else spec.task_source
        if spec.model_mode != "train":
            given["model_mode"] = spec.model_mode
        if spec.correctness != "kernelcraft":
            given["correctness"] = spec.correctness
        return Load(
            role=role, workdir=str(w.dir), task_source=source, seed0=SEED0, interpret=interpret, **given
        )

    def loaded(self, frame: Frame) -> None:
        """The candidate's "loaded" frame (or its failure); notes a sandbox that could not be set
        and keeps what ModelNew says its parameters are (`Job.fresh_parameters`)."""
        loaded = self.read(frame, Loaded)
        self.state.candidate_parameters = loaded.parameters
        self.state.candidate_initial = loaded.initial_values
        note = loaded.sandbox_unavailable
        if note and note[:300] not in self.state.notes:
            self.state.notes.append(note[:300])

    # ---- reading answers ----

    async def recv(self, w: WorkerProcess, *, candidate: bool) -> Frame:
        """The next frame from `w`, enforcing the deadline and the memory watchdog."""
        st = self.state
        limit = self.limits.get(id(w))
        while True:
            remaining = st.deadline - time.monotonic()
            if remaining <= 0:
                w.kill("timeout")
                compiling = any(w is x and p is st.device.compile_pool for p, x in self.held)
                raise deadline_stop(
                    candidate=candidate,
                    reading_candidate=self.ref_reading_candidate,
                    timeout_s=st.spec.timeout_s,
                    task_name=st.spec.task_name,
                    interpreter=st.interpret and not compiling,  # the trials' interpreter
                    rerunning=self.ref_rerunning,
                )
            waited = False
            try:
                frame = await asyncio.wait_for(w.frames.get(), min(remaining, WATCH_INTERVAL_S))
            except asyncio.TimeoutError:
                frame, waited = None, True
            # Its memory cgroup's OOM killer may have ended a child, not the worker: the candidate
            # went past its limit all the same (`box/cgroup.py`).
            if candidate and limit and (w.out_of_memory() or (waited and w.rss_bytes() > limit)):
                w.kill("memory")
                raise memory_stop(limit, owner=st.limit_owner) from None
            if waited:
                continue
            if frame is None:
                raise await self.died(w, candidate=candidate)
            if frame.header.get("type") == Msg.PROGRESS:  # read as sent: a candidate may send anything
                message = str(frame.header.get("message", ""))[:200]
                if candidate and message == IMPORTING_CANDIDATE:
                    self.untrusted.add(id(w))
                if candidate and message.startswith(FOUND_LAUNCHES):
                    st.found_launches = message
                await st.progress(None, message)
                continue
            return frame

    async def died(self, w: WorkerProcess, *, candidate: bool) -> Stop:
        await w.wait_exit(5)
        if candidate and w.killed_for is None and w.out_of_memory():
            w.killed_for = "memory"  # the kernel's OOM killer, in its memory cgroup
        stop = death_stop(
            w,
            candidate=candidate,
            reading_candidate=self.ref_reading_candidate,
            task_name=self.state.spec.task_name,
        )
        return limited(stop, self.limits.get(id(w)), self.state.limit_owner) if candidate else stop

    def read(self, frame: Frame, cls: type[R]) -> R:
        """The candidate's answer of type `cls` (`replies.read_candidate`)."""
        try:
            return read_candidate(frame, cls)
        except Stop as stop:
            raise limited(stop, self.state.memory_limit, self.state.limit_owner) from None

    def candidate_verdict(self, frame: Frame, expected: Msg) -> None:
        try:
            expect_candidate(frame, expected)
        except Stop as stop:
            raise limited(stop, self.state.memory_limit, self.state.limit_owner) from None

    def task_error(self, frame: Frame) -> None:
        raise_if_task_failed(frame, self.state.spec.task_name)

    # ---- the reference ----

    async def ask_ref(
        self, request: Request, blobs: list[bytes] | None = None, *, error_is_an_answer: bool = False
    ) -> Frame:
        """One request to the reference worker and its answer. An answer with an error leaves the
        reference out of sync (not kept) unless `error_is_an_answer` (the request may fail for
        reasons that are not the process's: a model torch.compile or the roofline cannot handle)."""
        assert self.ref is not None
        self.ref_in_sync = False
        # Reading the candidate's outputs, the reference may break or hang on what it was sent.
        self.ref_reading_candidate = isinstance(request, (Compare, FreshReplay, AuditTimed))
        self.ref_rerunning = isinstance(request, FreshReplay)  # the candidate's kernels, in the interpreter
        # Re-running the candidate's record, it runs the candidate's kernels: it is not kept after.
        self.ran_candidate_kernels = self.ran_candidate_kernels or isinstance(request, FreshReplay)
        await self.ref.send(request.to_header(), blobs)
        frame = await self.recv(self.ref, candidate=False)
        kind = frame.header.get("type")
        # A reference that wants the GPU (a gated torch.compile: `worker/refcompile.py`) waits for
        # its next request: it is mid-request until then.
        self.ref_in_sync = kind != Msg.GPU_WANTED and (
            error_is_an_answer or (kind != Msg.TASK_ERROR and "error" not in frame.header)
        )
        return frame

    async def inputs(self, input_set: int, scale: float | None = None) -> tuple[InputsMade, list[bytes]]:
        """New inputs of one trial from the reference (a secret seed; floating-point inputs times
        `scale`, the small-magnitude trial): the message and its blobs."""
        said = {"scale": scale} if scale is not None else {}
        self.state.input_seed = secrets.randbits(62)  # the verdict's evidence names it (a replay by hand)
        frame = await self.ask_ref(MakeInputs(input_set=input_set, seed=self.state.input_seed, **said))
        self.task_error(frame)
        self.ref_has_inputs = True
        return InputsMade.from_header(frame.header), frame.blobs

    async def own_inputs(self, *, again: bool) -> tuple[InputsMade, list[bytes]] | None:
        """The task's own inputs (`get_inputs()`, input set 0) in the reference, drawn when it
        holds none or `again` (its last were another set's); None when it holds them already."""
        if not again and self.ref_has_inputs:
            return None
        return await self.inputs(0)

    def reference_info(self) -> dict[str, Any] | None:
        """What the reference worker said of itself as it started (its device among it)."""
        return self.ref.info if self.ref is not None else None

    # ---- the GPU and the end ----

    async def keep_compiled(self) -> None:
        """At the end of a job that passed: what its candidate workers compiled beyond what they
        were given, kept for the candidate's next process (`compilefacts.keep_compiled`)."""
        if not self.compiling:
            return
        t = time.perf_counter()
        await compilefacts.keep_compiled(self.compiling, self.state.references.kernels)
        self.state.stage("keep_compiled", t)

    @contextlib.asynccontextmanager
    async def gpu_lock(self, *, exclusive: bool, why: str = "") -> AsyncIterator[None]:
        """The GPU, shared with other jobs' verifications or, to time, alone (`why`: what for, in
        the lock's record)."""
        if not self.state.device.locked:
            yield
            return
        waited = time.monotonic()
        t = time.perf_counter()
        if self.state.device.lock.busy():
            await self.state.progress(0.1, "waiting for the GPU")
        lock = self.state.device.lock.exclusive(why) if exclusive else self.state.device.lock.shared(why)
        async with lock:
            self.state.deadline += time.monotonic() - waited
            self.state.stage("gpu_wait", t)
            yield

    async def release(self) -> None:
        """Kill every worker of this job (but keep a reference worker that is in sync and
        error-free for the next job on the task), then reap them. The kill and the keeping are
        synchronous and come before any await: under cancellation (anyio cancels again at every
        await until the task ends) an await here may be cancelled at once, and the processes must
        be dead or parked regardless. The reaping (wait, close the channel, remove the scratch
        dir) runs in a shielded task, so a repeated cancellation cannot stop it; we wait for it
        at most `REAP_TIMEOUT_S`."""
        st = self.state
        ref = self.ref
        keep = (
            ref is not None
            and self.ref_pool is not None
            and self.ref_in_sync
            and not self.ran_candidate_kernels
            # A baseline job is a level's: its task comes once, and a reference parked for it would
            # hold device memory and take the GPU to rebuild its Model while other tasks time.
            and not st.spec.baseline_only
            and ref.alive()
            and ref.frames.empty()
            and not st.references.closed
        )
        workers = [(pool, w) for pool, w in self.held if not (keep and w is ref)]
        for _pool, w in self.held:
            self.active.discard(w)
        for _pool, w in workers:
            w.kill()
        ledger, job = st.device.memory, id(st)
        st.shared = ledger.shared(job)
        capacity = st.device.memory.capacity
        parking: dict[str, Any] = {
            "held": st.held_when_idle,
            "budget": int(capacity * IDLE_REFERENCE_SHARE) if capacity else None,
            "lock": st.device.lock.shared if st.device.locked else contextlib.nullcontext,
        }
        if keep:
            assert ref is not None and self.ref_pool is not None
            st.references.keep(st.key, ref, self.ref_pool, **parking)
        elif ref is not None:
            st.references.forget(st.key, ref)
            if (
                self.ref_in_sync
                and self.ran_candidate_kernels
                and self.ref_pool is not None
                and not self.ref_pool.lazy
            ):
                # clean but for the candidate's kernels it re-ran: a fresh one for the next job
                st.references.replace(st.key, self.ref_pool, self.start_replacement, **parking)
        if not workers:
            ledger.release(job)
            return
        reap_all = reap(asyncio.gather(*(pool.release(w) for pool, w in workers), return_exceptions=True))
        # The job's memory is free once its processes are gone, not when they are told to go: a
        # job that measured the device before then would see ours as someone else's and be refused.
        reap_all.add_done_callback(lambda _done: ledger.release(job))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(reap_all), REAP_TIMEOUT_S)
