"""One evaluation job: its workers, its deadline and the stage logic (moved from `local.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

from kernelcraft.base.errors import TaskError
from kernelcraft.base.evaluation import (
    CompileResult,
    EvalJob,
    EvalResult,
    Evidence,
    KernelLaunch,
    ProfileResult,
    Roofline,
    TargetCompileResult,
    Timing,
    VerifyResult,
)
from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.channel import Frame
from kernelcraft.engine.evaluator import ProgressCallback
from kernelcraft.engine.gpulock import _Device
from kernelcraft.engine.pool import WorkerPool, WorkerProcess
from kernelcraft.engine.references import COMPILED_REFERENCE_TTL_S, _reap
from kernelcraft.engine.verdicts import _device_label, _evidence, _profile_result, _verify_result

if TYPE_CHECKING:
    from kernelcraft.engine.local import LocalEvaluator

log = logging.getLogger(__name__)

SEED0 = 42  # KernelBench's weight seed: Model and ModelNew are built after manual_seed(SEED0)
WATCH_INTERVAL_S = 0.25
REAP_TIMEOUT_S = 15.0
# Timing runs interleaved rounds (candidate, then reference) until every timed callable over
# 50 µs (timing.SPREAD_CHECK_ABOVE_US) has an interquartile range within TARGET_SPREAD of its
# median, between the minimum and maximum number of rounds.
MIN_PROFILE_ROUNDS = 3
MAX_PROFILE_ROUNDS = 10
TARGET_SPREAD = 0.02
PROFILE_BUDGET_MS = 60.0
NO_GPU_MESSAGE = "timing needs a CUDA GPU and this machine has none; the roofline floor below is for {target}"


class _Stop(Exception):
    """The candidate failed: stop the job with this verdict."""

    def __init__(self, cls: FailureClass, evidence: Evidence) -> None:
        super().__init__(evidence.message)
        self.cls = cls
        self.evidence = evidence


class _Job:
    """One submitted job: its workers, its deadline, and the stage logic."""

    def __init__(
        self, ev: LocalEvaluator, job: EvalJob, device: _Device, progress: ProgressCallback | None
    ) -> None:
        self.ev = ev
        self.job = job
        self.device = device
        self.progress_cb = progress
        self.deadline = float("inf")
        self.workers: list[tuple[WorkerPool, WorkerProcess]] = []
        self.ref: WorkerProcess | None = None
        self.input_sets = 1
        self.ref_has_inputs = False
        self.kernels: list[str] = []
        self.notes: list[str] = []
        self.compiled_key = (hashlib.sha256(job.task_source.encode()).hexdigest(), device.index)
        self.ref_pool: WorkerPool | None = None
        self.ref_in_sync = True
        """False from a request to the reference until its answer: a reference left mid-request
        (cancelled, timed out) or that reported an error is not kept for another job."""
        self.stages: dict[str, float] = {}

    def stage(self, name: str, since: float) -> float:
        """Add the time since `since` to stage `name`; returns now."""
        now = time.perf_counter()
        self.stages[name] = round(self.stages.get(name, 0.0) + now - since, 3)
        return now

    def cached_compiled_reference(self) -> Timing | None:
        hit = self.ev._references._compiled_reference.get(self.compiled_key)
        if hit is None or time.monotonic() - hit[0] > COMPILED_REFERENCE_TTL_S:
            return None
        return hit[1]

    async def progress(self, fraction: float, message: str) -> None:
        if self.progress_cb is not None:
            try:
                await self.progress_cb(min(1.0, max(0.0, fraction)), message)
            except Exception:  # a broken progress callback must not break the evaluation
                log.exception("progress callback failed")

    @property
    def interpret(self) -> bool:
        return self.device.kind == "cpu"

    # ---- workers ----

    async def acquire(self, pool: WorkerPool | None = None) -> WorkerProcess:
        pool = pool or self.device.pool
        w = await pool.acquire()
        self.workers.append((pool, w))
        self.ev._active.add(w)
        return w

    async def recv(self, w: WorkerProcess, *, candidate: bool) -> Frame:
        """The next frame from `w`, enforcing the deadline and the memory watchdog."""
        limit = self.ev._memory_limit
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                w.kill("timeout")
                who = "the candidate" if candidate else "the reference"
                raise _Stop(
                    FailureClass.RUNTIME_TIMEOUT,
                    Evidence(
                        message=f"{who} did not finish within the {self.job.timeout_s:g} s deadline; its process was killed"
                    ),
                )
            try:
                frame = await asyncio.wait_for(w.frames.get(), min(remaining, WATCH_INTERVAL_S))
            except asyncio.TimeoutError:
                if candidate and limit and w.rss_bytes() > limit:
                    w.kill("memory")
                    raise _Stop(
                        FailureClass.RUNTIME_OUT_OF_MEMORY,
                        Evidence(
                            message=f"the candidate's process used more than {limit / 1024**3:.1f} GiB of memory and was killed"
                        ),
                    ) from None
                continue
            if frame is None:
                raise await self.died(w, candidate=candidate)
            if frame.header.get("type") == "progress":
                await self.progress(0.0, str(frame.header.get("message", ""))[:200])
                continue
            return frame

    async def died(self, w: WorkerProcess, *, candidate: bool) -> _Stop:
        await w.wait_exit(5)
        if w.killed_for == "timeout":
            return _Stop(
                FailureClass.RUNTIME_TIMEOUT, Evidence(message="the deadline passed; the process was killed")
            )
        if w.killed_for == "memory":
            return _Stop(
                FailureClass.RUNTIME_OUT_OF_MEMORY,
                Evidence(message="the process used too much memory and was killed"),
            )
        how = w.exit_description()
        who = "the candidate's process" if candidate else "the reference process"
        return _Stop(
            FailureClass.RUNTIME_CRASH,
            Evidence(
                message=f"{who} {how} before reporting a result (output and exit codes are not results)",
                error_text=w.tail(2000) or None,
            ),
        )

    async def ask_ref(
        self, header: dict[str, Any], blobs: list[bytes] | None = None, *, error_is_an_answer: bool = False
    ) -> Frame:
        """One request to the reference worker and its answer. An answer with an error leaves the
        reference out of sync (not kept) unless `error_is_an_answer` (the request may fail for
        reasons that are not the process's: a model torch.compile or the roofline cannot handle)."""
        assert self.ref is not None
        self.ref_in_sync = False
        await self.ref.send(header, blobs)
        frame = await self.recv(self.ref, candidate=False)
        kind = frame.header.get("type")
        self.ref_in_sync = error_is_an_answer or (kind != "task_error" and "error" not in frame.header)
        return frame

    def start_deadline(self) -> None:
        if self.deadline == float("inf"):
            self.deadline = time.monotonic() + self.job.timeout_s

    async def start_reference(self) -> Frame:
        """A reference worker with the task loaded: a kept one (rebuilt for this job) or a fresh one."""
        t = time.perf_counter()
        key = self.compiled_key
        while True:
            kept = self.ev._references._take_reference(key)
            if kept is not None:
                self.ref, self.ref_pool = kept, self.device.pool
                self.workers.append((self.device.pool, kept))
                self.ev._active.add(kept)
                t = self.stage("workers", t)
                self.start_deadline()
                try:
                    async with self.gpu_lock(exclusive=False):  # rebuilding Model uses the GPU
                        frame = await self.ask_ref({"op": "next"})
                except _Stop:
                    frame = None
                if frame is not None and frame.header.get("type") == "task_ready":
                    self.stage("reference", t)
                    return frame
                kept.kill()  # broken between jobs; try another, or a fresh one
                self.ev._references._forget_reference(key, kept)
                continue
            if self.ev._references._reserve_reference(key):
                break
            # The task has its share of reference workers, all busy: one is soon free (a job
            # holds it a few seconds), which beats starting another process.
            await self.ev._references._reference_freed(key, 5.0)
        self.ref = None
        try:
            self.ref = await self.acquire()
        finally:
            self.ev._references._started_reference(key, self.ref)
        self.ref_pool = self.device.pool
        t = self.stage("workers", t)
        self.start_deadline()
        self.ref_in_sync = False
        # The lock is taken only once a worker is held: a job waiting for a worker (or for
        # another job's reference) must not hold up a timing, which would hold up that job.
        async with self.gpu_lock(exclusive=False):
            frame = await self.load(self.ref, "reference", interpret=self.interpret)
        self.ref_in_sync = frame.header.get("type") == "task_ready"
        self.stage("reference", t)
        return frame

    async def start_candidate(self) -> WorkerProcess:
        """A candidate worker with the candidate imported; `_Stop` when that fails."""
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

    async def load(self, w: WorkerProcess, role: str, *, interpret: bool) -> Frame:
        header: dict[str, Any] = {
            "role": role,
            "workdir": str(w.dir),
            "task_source": self.job.task_source,
            "seed0": SEED0,
            "interpret": interpret,
        }
        if role == "candidate":
            header["candidate_source"] = self.job.candidate_source
            header["sandbox"] = self.ev._sandbox
            header["allowed_ops"] = list(self.job.allowed_ops)
            header["memory_limit_bytes"] = self.ev._memory_limit
        await w.send(header)
        frame = await self.recv(w, candidate=role == "candidate")
        self.task_error(frame)
        return frame

    def task_error(self, frame: Frame) -> None:
        if frame.header.get("type") == "task_error":
            raise TaskError(
                f"the task failed while building Model or its inputs: {frame.header.get('summary', '')}\n"
                f"{frame.header.get('error', '')}",
                path=self.job.task_name,
            )

    def loaded(self, frame: Frame) -> None:
        """The candidate's "loaded" frame (or its failure); notes a sandbox that could not be set."""
        self.candidate_verdict(frame, "loaded")
        note = frame.header.get("sandbox_unavailable")
        if note and str(note)[:300] not in self.notes:
            self.notes.append(str(note)[:300])

    def candidate_verdict(self, frame: Frame, expected: str) -> None:
        """Raise `_Stop` unless the candidate's frame is of the expected type."""
        t = frame.header.get("type")
        if t == expected:
            return
        if t == "verdict":
            try:
                cls = FailureClass(frame.header.get("failure_class"))
            except ValueError:
                cls = FailureClass.RUNTIME_CRASH
            raise _Stop(cls, _evidence(frame.header.get("evidence"), "the candidate failed"))
        raise _Stop(
            FailureClass.RUNTIME_CRASH,
            Evidence(message=f"the candidate's process sent {str(t)[:40]!r} instead of {expected!r}"),
        )

    async def inputs(self, input_set: int) -> Frame:
        frame = await self.ask_ref({"op": "inputs", "set": input_set, "seed": secrets.randbits(62)})
        self.task_error(frame)
        self.ref_has_inputs = True
        return frame

    # ---- the job ----

    async def run(self) -> EvalResult:
        job = self.job
        result = EvalResult()
        try:
            await self.progress(0.0, "waiting for workers")
            wants_candidate = "verify" in job.stages or "profile" in job.stages
            compile_first = "compile" in job.stages
            # The reference and the candidate load at the same time, in their own processes (the
            # compile stage loads its own candidate, after the reference).
            loads: list[Any] = [self.start_reference()]
            if wants_candidate and not compile_first:
                loads.append(self.start_candidate())
            outcome = await asyncio.gather(*loads, return_exceptions=True)
            for o in outcome:  # the reference's failure (an unusable task) comes first
                if isinstance(o, BaseException) and not isinstance(o, _Stop):
                    raise o
            if isinstance(outcome[0], _Stop):
                raise outcome[0]
            ready = outcome[0]
            assert isinstance(ready, Frame)
            self.input_sets = int(ready.header.get("input_sets", 1))
            cand: WorkerProcess | None = None
            if len(outcome) > 1:
                if isinstance(outcome[1], _Stop):
                    self.fill_failed(result, outcome[1])
                    return result
                assert isinstance(outcome[1], WorkerProcess)
                cand = outcome[1]
            if compile_first:
                t = time.perf_counter()
                result.compile = await self.compile_stage()
                self.stage("compile", t)
                if not self.interpret:
                    cand = self.compile_worker
            if wants_candidate:
                if cand is None:
                    try:
                        cand = await self.start_candidate()
                    except _Stop as stop:
                        self.fill_failed(result, stop)
                        return result
                if not self.interpret:
                    t = time.perf_counter()
                    await self.warm_up(cand)
                    self.stage("kernels", t)
                if "verify" in job.stages:
                    async with self.gpu_lock(exclusive=False):
                        t = time.perf_counter()
                        result.verify = await self.verify_stage(cand)
                        self.stage("verify", t)
                if "profile" in job.stages:
                    if result.verify is not None and not result.verify.correct:
                        cls = result.verify.failure_class
                        result.profile = ProfileResult(
                            available=False,
                            message=f"not profiled: verify failed ({result.verify.status})",
                            failure_class=cls,
                            evidence=result.verify.evidence,
                        )
                    else:
                        async with self.gpu_lock(exclusive=True):
                            t = time.perf_counter()
                            result.profile = await self.profile_stage(cand)
                            self.stage("profile", t)
        except _Stop as stop:
            self.fill_failed(result, stop)
        finally:
            await self.release_workers()
            result.stage_seconds = dict(self.stages)
        return result

    async def release_workers(self) -> None:
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
            and not self.ev._closed
        )
        workers = [(pool, w) for pool, w in self.workers if not (keep and w is ref)]
        for _pool, w in self.workers:
            self.ev._active.discard(w)
        for _pool, w in workers:
            w.kill()
        if keep:
            assert ref is not None and self.ref_pool is not None
            self.ev._references._keep_reference(self.compiled_key, ref, self.ref_pool)
        elif ref is not None:
            self.ev._references._forget_reference(self.compiled_key, ref)
        if not workers:
            return
        reap = _reap(asyncio.gather(*(pool.release(w) for pool, w in workers), return_exceptions=True))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(reap), REAP_TIMEOUT_S)

    def fill_failed(self, result: EvalResult, stop: _Stop) -> None:
        job = self.job
        if "compile" in job.stages and result.compile is None:
            result.compile = CompileResult(ok=False, failure_class=stop.cls, evidence=stop.evidence)
        if "verify" in job.stages and result.verify is None:
            result.verify = _verify_result(
                job, self.device, stop.cls, stop.evidence, kernels_launched=self.kernels
            )
        if "profile" in job.stages and result.profile is None:
            result.profile = ProfileResult(
                available=False,
                message=f"not profiled: {stop.evidence.message}",
                failure_class=stop.cls,
                evidence=stop.evidence,
            )

    @contextlib.asynccontextmanager
    async def gpu_lock(self, *, exclusive: bool) -> Any:
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

    # ---- compile ----

    compile_worker: WorkerProcess | None = None

    async def compile_stage(self) -> CompileResult:
        """Discover launches (no kernel runs) and compile them for each target. On a CPU machine
        this worker imports the candidate without the interpreter, so real Triton compiles it."""
        start = time.perf_counter()
        w = await self.acquire(self.device.compile_pool)
        self.compile_worker = w
        await self.progress(0.05, "loading the candidate")
        try:
            self.loaded(await self.load(w, "candidate", interpret=False))
            inputs = await self.inputs(0)
            await self.progress(0.1, f"compiling for {', '.join(self.job.targets)}")
            await w.send(
                {"op": "compile", "targets": list(self.job.targets), "inputs": inputs.header["inputs"]},
                inputs.blobs,
            )
            frame = await self.recv(w, candidate=True)
            self.candidate_verdict(frame, "compiled")
        except _Stop as stop:
            if not self.interpret:
                raise
            return CompileResult(
                ok=False, failure_class=stop.cls, evidence=stop.evidence, seconds=time.perf_counter() - start
            )
        h = frame.header
        if "error" in h:
            from kernelcraft.base.failures import classify

            text = str(h.get("error", ""))
            cls = classify(text, "compile")
            return CompileResult(
                ok=False,
                failure_class=cls,
                evidence=Evidence(
                    message=f"launch discovery failed: {str(h.get('summary', ''))[:300]}", error_text=text
                ),
                seconds=time.perf_counter() - start,
            )
        try:
            launches = [KernelLaunch.model_validate(x) for x in h.get("launches", [])]
            targets = [TargetCompileResult.model_validate(x) for x in h.get("targets", [])]
        except ValueError:
            return CompileResult(
                ok=False,
                failure_class=FailureClass.RUNTIME_CRASH,
                evidence=Evidence(message="the compile worker sent a malformed result"),
            )
        failed = next((t for t in targets if not t.ok), None)
        if not launches:
            return CompileResult(
                ok=False,
                launches=[],
                targets=targets,
                failure_class=FailureClass.NO_TRITON_LAUNCH,
                evidence=Evidence(message="forward launched no Triton kernel"),
                seconds=time.perf_counter() - start,
            )
        return CompileResult(
            ok=failed is None,
            launches=launches,
            targets=targets,
            failure_class=failed.failure_class if failed else None,
            evidence=Evidence(message=f"{failed.target}: compilation failed", error_text=failed.error)
            if failed
            else None,
            seconds=round(time.perf_counter() - start, 3),
        )

    async def warm_up(self, cand: WorkerProcess) -> None:
        """Before the GPU lock: compile the candidate's kernels (no kernel runs) and, when
        profiling, torch.compile the reference."""
        assert self.ref is not None
        await self.progress(0.08, "compiling kernels")
        async with self.gpu_lock(exclusive=False):
            frame = await self.inputs(0)
        # Triton's compiler runs on the CPU: no lock, so other jobs' timings go on meanwhile.
        await cand.send({"op": "warmup", "inputs": frame.header["inputs"]}, frame.blobs)
        warm = await self.recv(cand, candidate=True)
        self.candidate_verdict(warm, "warm")
        if "profile" in self.job.stages and self.cached_compiled_reference() is None:
            await self.progress(0.09, "compiling the reference with torch.compile")
            async with self.gpu_lock(exclusive=False):  # inductor benchmarks on the GPU
                await self.ask_ref({"op": "warmup_reference"}, error_is_an_answer=True)

    # ---- verify ----

    async def verify_stage(self, cand: WorkerProcess) -> VerifyResult:
        assert self.ref is not None
        job = self.job
        total = self.input_sets * job.trials
        done = 0
        try:
            for s in range(self.input_sets):
                for t in range(job.trials):
                    await self.progress(0.1 + 0.8 * done / total, f"trial {done + 1} of {total}")
                    frame = await self.inputs(s)
                    await cand.send(
                        {"op": "run", "inputs": frame.header["inputs"], "determinism": s == 0 and t == 0},
                        frame.blobs,
                    )
                    out = await self.recv(cand, candidate=True)
                    self.candidate_verdict(out, "outputs")
                    h = out.header
                    names = h.get("kernels")
                    if isinstance(names, list):
                        self.kernels = list(dict.fromkeys([*self.kernels, *(str(n)[:200] for n in names)]))
                    cmp = await self.ask_ref(
                        {"op": "compare", "outputs": h.get("outputs"), "inputs_after": h.get("inputs_after")},
                        out.blobs,
                    )
                    if cmp.header.get("type") != "compared":
                        self.task_error(cmp)
                        raise _Stop(
                            FailureClass.RUNTIME_CRASH,
                            Evidence(message="the reference could not compare outputs"),
                        )
                    if cmp.header.get("failure_class"):
                        ev = _evidence(cmp.header.get("evidence"), "outputs differ")
                        ev.trial, ev.input_set = t, s
                        return _verify_result(
                            job,
                            self.device,
                            FailureClass(cmp.header["failure_class"]),
                            ev,
                            trials_passed=done,
                            input_sets=self.input_sets,
                            kernels_launched=self.kernels,
                            device_label=_device_label(self.device, cand.info),
                        )
                    done += 1
        except _Stop as stop:
            stop.evidence.trial = (
                stop.evidence.trial if stop.evidence.trial is not None else done % job.trials
            )
            return _verify_result(
                job,
                self.device,
                stop.cls,
                stop.evidence,
                trials_passed=done,
                input_sets=self.input_sets,
                kernels_launched=self.kernels,
                device_label=_device_label(self.device, cand.info),
            )
        notes = list(self.notes)
        if self.interpret:
            notes.append(
                "ran in Triton's CPU interpreter: races, out-of-bounds reads, TF32 and speed are not checked"
            )
        await self.progress(0.9, "verified")
        return _verify_result(
            job,
            self.device,
            None,
            None,
            trials_passed=done,
            input_sets=self.input_sets,
            kernels_launched=self.kernels,
            notes=notes,
            device_label=_device_label(self.device, cand.info),
        )

    # ---- profile ----

    async def roofline(self) -> tuple[Roofline | None, str | None]:
        frame = await self.ask_ref(
            {"op": "roofline", "target": self.job.roofline_target, "full_size": self.interpret},
            error_is_an_answer=True,
        )
        raw = frame.header.get("roofline")
        if raw is None:
            return None, str(frame.header.get("error", "the roofline could not be computed"))
        return Roofline.model_validate(raw), None

    async def profile_stage(self, cand: WorkerProcess) -> ProfileResult:
        start = time.perf_counter()
        if self.input_sets > 1 or not self.ref_has_inputs:
            # Verification ended on the last extra input set: time on get_inputs(), the task's own.
            frame = await self.inputs(0)
            if self.device.kind != "cpu":
                await cand.send({"op": "use_inputs", "inputs": frame.header["inputs"]}, frame.blobs)
                self.candidate_verdict(await self.recv(cand, candidate=True), "ok")
        roof, roof_error = await self.roofline()
        if self.device.kind == "cpu":
            message = NO_GPU_MESSAGE.format(target=self.job.roofline_target)
            if roof_error:
                message += f" (roofline unavailable: {roof_error[:300]})"
            return ProfileResult(
                available=False, message=message, roofline=roof, seconds=round(time.perf_counter() - start, 3)
            )
        return await self.time_on_gpu(cand, roof, start)

    async def time_on_gpu(self, cand: WorkerProcess, roof: Roofline | None, start: float) -> ProfileResult:
        """Interleave rounds of candidate and reference timing (each in its own process, on the
        same inputs), then summarise each side's samples."""
        assert self.ref is not None
        from kernelcraft.engine import timing

        samples: dict[str, list[float]] = {"candidate": [], "eager": [], "compiled": []}
        methods: dict[str, str] = {}
        sets: dict[str, int] = {}
        cached = self.cached_compiled_reference()
        ref_keys = ("eager",) if cached is not None else ("eager", "compiled")
        rounds = 0
        while rounds < MIN_PROFILE_ROUNDS or (
            rounds < MAX_PROFILE_ROUNDS
            and not all(timing.spread_within(samples[k], TARGET_SPREAD) for k in ("candidate", *ref_keys))
        ):
            rounds += 1
            await self.progress(0.9 + 0.1 * (rounds - 1) / MAX_PROFILE_ROUNDS, f"timing, round {rounds}")
            await cand.send(
                {
                    "op": "time_candidate",
                    "budget_ms": PROFILE_BUDGET_MS,
                    "method": methods.get("candidate", "auto"),
                }
            )
            frame = await self.recv(cand, candidate=True)
            self.candidate_verdict(frame, "timed")
            if "error" in frame.header:
                raise _Stop(
                    FailureClass.RUNTIME_ERROR,
                    Evidence(message="timing the candidate failed", error_text=str(frame.header["error"])),
                )
            try:
                samples["candidate"] += [float(x) for x in frame.header["candidate"]["times_us"]]
                methods["candidate"] = str(frame.header["candidate"]["method"])
                sets["candidate"] = int(frame.header["candidate"].get("sets", 1))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise _Stop(
                    FailureClass.RUNTIME_CRASH, Evidence(message=f"the candidate sent malformed timings: {e}")
                ) from e
            frame = await self.ask_ref(
                {
                    "op": "time_reference",
                    "budget_ms": PROFILE_BUDGET_MS,
                    "methods": {k: methods[k] for k in ref_keys if k in methods},
                    "compiled": cached is None,
                }
            )
            if "error" in frame.header:
                return ProfileResult(
                    available=False,
                    message=f"timing the reference failed: {str(frame.header['error'])[-500:]}",
                    roofline=roof,
                )
            for k in ref_keys:
                samples[k] += [float(x) for x in frame.header[k]["times_us"]]
                methods[k] = str(frame.header[k]["method"])
                sets[k] = int(frame.header[k].get("sets", 1))
        t = {
            k: timing.summarize(samples[k], methods[k], sets.get(k, 1))  # type: ignore[arg-type]
            for k in ("candidate", *ref_keys)
        }
        if cached is None:
            self.ev._references._compiled_reference[self.compiled_key] = (time.monotonic(), t["compiled"])
        else:
            t["compiled"] = cached
        result = _profile_result(
            t["candidate"],
            t["eager"],
            t["compiled"],
            roof,
            _device_label(self.device, cand.info),
            round(time.perf_counter() - start, 3),
        )
        result.message += f"; {rounds} interleaved rounds"
        if cached is not None:
            result.message += (
                "; the torch.compile reference was timed by an earlier evaluation of this task "
                f"(reused for {COMPILED_REFERENCE_TTL_S / 60:.0f} min)"
            )
        return result
