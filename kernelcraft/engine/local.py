"""`LocalEvaluator`: compile, verify and profile candidates on this machine, in isolated workers.

    async with LocalEvaluator(workers=2) as ev:          # device="auto": the GPU if there is one
        result = await ev.submit(EvalJob(task_source=..., candidate_source=..., stages=["verify"]))

Per job: the sources are checked in this process with `ast` (unusable files raise `TaskError`
before any process starts; forbidden constructs become a `forbidden_construct` verdict). Then two
pre-started workers take roles (see `worker.py`): a trusted **reference** worker that makes the
inputs from secret seeds (`secrets`), computes and keeps the reference outputs and compares; and
a **candidate** worker that imports the candidate and runs it. Frames between them pass through
this process as opaque bytes; no tensor and no candidate object is ever decoded here. A candidate
that dies, exits early or hangs gets `runtime_crash` / `runtime_timeout` (its process group is
killed at the deadline); one that outgrows the memory limit `runtime_out_of_memory`.

Concurrency: any number of jobs may be submitted at once. Loading, importing and compiling run
concurrently (up to the pool's size), the reference's and the candidate's loading included. On a
GPU, every step that uses the GPU (loading models, making inputs, the reference's torch.compile,
verification trials) shares it with other jobs, and timing has it alone (`_GpuLock`): no other
job's GPU work overlaps a timing. Only Triton's compiler (CPU) runs outside the lock. Without a GPU, verify
runs in Triton's CPU interpreter and there is no lock. The job's `timeout_s` counts from the
moment its workers are assigned, minus the time spent waiting for the GPU.

Reference workers are kept: one that finished a job cleanly (every request answered, no error)
waits, idle, for the next job on the same task (`REFERENCE_IDLE_S`, at most the pool's size per
device), which saves a process start and the reference's set-up. It never imported candidate
code, so nothing of a candidate survives in it; it rebuilds `Model` for each job. Candidate
workers are never reused.

Only the evaluator owns its worker processes; callers hold one `LocalEvaluator` and `aclose()` it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import logging
import os
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kernelcraft.base.config import env_switch
from kernelcraft.base.errors import TaskError, UsageError
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
from kernelcraft.engine.loading import check_candidate, check_task
from kernelcraft.engine.pool import WorkerPool, WorkerProcess
from kernelcraft.engine.static import check_candidate_source

log = logging.getLogger(__name__)

SEED0 = 42  # KernelBench's weight seed: Model and ModelNew are built after manual_seed(SEED0)
WATCH_INTERVAL_S = 0.25
REAP_TIMEOUT_S = 15.0
_REAPING: set[asyncio.Future[Any]] = set()  # shielded reaper tasks (kept referenced until done)
# Timing runs interleaved rounds (candidate, then reference) until every timed callable over
# 50 µs (timing.SPREAD_CHECK_ABOVE_US) has an interquartile range within TARGET_SPREAD of its
# median, between the minimum and maximum number of rounds.
MIN_PROFILE_ROUNDS = 3
MAX_PROFILE_ROUNDS = 10
TARGET_SPREAD = 0.02
REFERENCE_IDLE_S = 300.0
# torch.compile of the reference costs seconds per process; its timing for a task on a GPU is
# measured once and reused for this long (the eager reference is still timed every evaluation,
# interleaved with the candidate).
COMPILED_REFERENCE_TTL_S = 1800.0
PROFILE_BUDGET_MS = 60.0
NO_GPU_MESSAGE = "timing needs a CUDA GPU and this machine has none; the roofline floor below is for {target}"


def _reap(coro: Any) -> asyncio.Future[Any]:
    """Run a worker's clean-up in the background, kept referenced until done."""
    task = asyncio.ensure_future(coro)
    _REAPING.add(task)
    task.add_done_callback(_REAPING.discard)
    return task


class _Stop(Exception):
    """The candidate failed: stop the job with this verdict."""

    def __init__(self, cls: FailureClass, evidence: Evidence) -> None:
        super().__init__(evidence.message)
        self.cls = cls
        self.evidence = evidence


def _protect_environ() -> None:
    """Make this process non-dumpable, so that same-user processes (a candidate worker) cannot
    read its secrets from /proc/<pid>/environ or attach a debugger. Linux only; best effort."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_DUMPABLE = 4
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError) as e:
        log.warning("could not make the evaluator non-dumpable: %s", e)


class _GpuLock:
    """Verifications share the GPU; a timing has it alone. Fair to timings: once one waits, new
    verifications queue behind it. Releasing never awaits, so a cancelled job cannot leave the
    lock held."""

    def __init__(self) -> None:
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._waiters: list[asyncio.Future[None]] = []

    def busy(self) -> bool:
        return self._writer or self._readers > 0 or self._writers_waiting > 0

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def _wait(self) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    @contextlib.asynccontextmanager
    async def shared(self) -> Any:
        while self._writer or self._writers_waiting:
            await self._wait()
        self._readers += 1
        try:
            yield
        finally:
            self._readers -= 1
            self._wake()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> Any:
        self._writers_waiting += 1
        try:
            while self._writer or self._readers:
                await self._wait()
        finally:
            self._writers_waiting -= 1
            self._wake()
        self._writer = True
        try:
            yield
        finally:
            self._writer = False
            self._wake()


@dataclass
class _Device:
    kind: Literal["cuda", "cpu"]
    index: int | None
    pool: WorkerPool
    lock: _GpuLock
    jobs: int = 0
    compile_pool: WorkerPool | None = None
    """CPU only: workers without the interpreter, for the compile stage (started on first use)."""
    locked: bool = True
    """Jobs take `lock` (a GPU); without a GPU nothing is timed and jobs run without it."""


class LocalEvaluator:
    """Runs `EvalJob`s in pre-started, single-use worker processes on this machine.

    workers: workers kept started per device (each job uses two; three on a CPU-only machine
      when it also asks for the compile stage). Default: half the CPU cores, 4 to 8, per GPU; 2 without one.
    device: "auto" (a GPU when torch sees one), "cuda" or "cpu".
    memory_limit_gb: per candidate process: address-space limit on the CPU (RLIMIT_AS over what
      the warm worker already maps), a CUDA caching-allocator cap on a GPU, plus a resident-memory
      watchdog on both. None: no limit.
    scratch_dir: where worker directories (Triton caches, logs) go; a fresh temp dir by default.
    protect_environ: make this process non-dumpable (see `_protect_environ`).
    """

    def __init__(
        self,
        *,
        workers: int | None = None,
        device: Literal["auto", "cuda", "cpu"] = "auto",
        memory_limit_gb: float | None = 8.0,
        scratch_dir: str | Path | None = None,
        protect_environ: bool = True,
    ) -> None:
        if device not in ("auto", "cuda", "cpu"):
            raise UsageError(f"device must be 'auto', 'cuda' or 'cpu', not {device!r}")
        gpus = 0
        if device != "cpu":
            import torch

            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if device == "cuda" and gpus == 0:
                raise UsageError("device='cuda' was asked for but torch sees no CUDA GPU; use device='auto'")
        self._gpus = gpus
        # Each job takes two single-use workers, and a worker takes seconds to start (torch,
        # CUDA, inductor): enough of them must be warm to keep a GPU busy with a batch.
        default = max(4, min(8, (os.cpu_count() or 8) // 2)) if gpus else 2
        self._workers = workers or default
        self._memory_limit = int(memory_limit_gb * 1024**3) if memory_limit_gb else None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if scratch_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kernelcraft-eval-")
            self._scratch = Path(self._tmp.name)
        else:
            self._scratch = Path(scratch_dir)
            self._scratch.mkdir(parents=True, exist_ok=True)
        self._devices: list[_Device] | None = None
        self._closed = False
        self._active: set[WorkerProcess] = set()
        # KERNELCRAFT_SANDBOX=off turns the candidates' filesystem sandbox off (see sandbox.py).
        self._sandbox = env_switch("KERNELCRAFT_SANDBOX")
        # (task sha256, device index) -> (monotonic time measured, Timing of the compiled reference)
        self._compiled_reference: dict[tuple[str, int | None], tuple[float, Timing]] = {}
        # (task sha256, device index) -> idle reference workers, oldest first, with when they idled
        self._idle_refs: dict[tuple[str, int | None], list[tuple[float, WorkerProcess, WorkerPool]]] = {}
        # (task sha256, device index) -> its reference workers, busy or idle (at most
        # `_refs_per_task`; a job beyond that waits for one rather than starting another)
        self._refs: dict[tuple[str, int | None], set[WorkerProcess]] = {}
        self._refs_per_task = max(2, self._workers // 2)
        self._ref_starting: dict[tuple[str, int | None], int] = {}
        self._ref_waiters: dict[tuple[str, int | None], list[asyncio.Future[None]]] = {}
        if protect_environ:
            _protect_environ()

    @property
    def has_gpu(self) -> bool:
        return self._gpus > 0

    def active_worker_pids(self) -> list[int]:
        """Process ids of the workers that jobs hold right now (for tests and diagnostics)."""
        return [w.pid for w in self._active if w.pid is not None]

    def _ensure_started(self) -> list[_Device]:
        if self._closed:
            raise UsageError("this LocalEvaluator is closed; create a new one")
        if self._devices is None:
            if self._gpus:
                self._devices = [
                    _Device("cuda", i, WorkerPool(self._workers, "cuda", self._scratch, gpu=i), _GpuLock())
                    for i in range(self._gpus)
                ]
            else:
                self._devices = [
                    _Device(
                        "cpu",
                        None,
                        WorkerPool(self._workers, "cpu", self._scratch, interpret=True),
                        _GpuLock(),
                        compile_pool=WorkerPool(1, "cpu", self._scratch, interpret=False),
                        locked=False,
                    )
                ]
            for d in self._devices:
                d.pool.fill()
        return self._devices

    async def start(self) -> None:
        """Start the worker pools now instead of at the first `submit` (optional)."""
        self._ensure_started()

    async def __aenter__(self) -> LocalEvaluator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _take_reference(self, key: tuple[str, int | None]) -> WorkerProcess | None:
        """An idle reference worker for this task and device, if one is alive and fresh enough."""
        idle = self._idle_refs.get(key, [])
        while idle:
            since, w, pool = idle.pop()
            if w.alive() and time.monotonic() - since < REFERENCE_IDLE_S and w.frames.empty():
                return w
            self._retire_reference(key, w, pool)
        return None

    def _reserve_reference(self, key: tuple[str, int | None]) -> bool:
        """Reserve a place for a new reference worker of the task if it is under its cap (undo
        with `_started_reference`)."""
        live = len(self._refs.setdefault(key, set())) + self._ref_starting.get(key, 0)
        if live >= self._refs_per_task:
            return False
        self._ref_starting[key] = self._ref_starting.get(key, 0) + 1
        return True

    def _started_reference(self, key: tuple[str, int | None], w: WorkerProcess | None) -> None:
        self._ref_starting[key] -= 1
        if w is not None:
            self._refs[key].add(w)
        else:
            self._wake_reference_waiters(key)

    def _retire_reference(self, key: tuple[str, int | None], w: WorkerProcess, pool: WorkerPool) -> None:
        """Kill a parked reference worker now and reap it in the background."""
        self._forget_reference(key, w)
        w.kill()
        _reap(pool.release(w))

    def _forget_reference(self, key: tuple[str, int | None], w: WorkerProcess) -> None:
        """`w` no longer serves the task (killed or closed): wake the jobs waiting for a reference."""
        self._refs.get(key, set()).discard(w)
        self._wake_reference_waiters(key)

    def _wake_reference_waiters(self, key: tuple[str, int | None]) -> None:
        for fut in self._ref_waiters.pop(key, []):
            if not fut.done():
                fut.set_result(None)

    async def _reference_freed(self, key: tuple[str, int | None], timeout: float) -> None:
        """Wait until a reference of the task is parked or forgotten (or `timeout` passes)."""
        fut = asyncio.get_running_loop().create_future()
        self._ref_waiters.setdefault(key, []).append(fut)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(fut, timeout)

    def _keep_reference(self, key: tuple[str, int | None], w: WorkerProcess, pool: WorkerPool) -> None:
        """Park a reference worker that finished a job cleanly. Synchronous: it runs while a job
        is being torn down, perhaps cancelled. Closes stale ones and the oldest past the cap."""
        now = time.monotonic()
        self._idle_refs.setdefault(key, []).append((now, w, pool))
        self._wake_reference_waiters(key)
        parked = sorted(
            ((entry, k) for k, v in self._idle_refs.items() if k[1] == key[1] for entry in v),
            key=lambda t: t[0][0],
        )
        excess = len(parked) - self._workers
        for entry, k in parked:
            if excess <= 0 and now - entry[0] < REFERENCE_IDLE_S:
                continue
            self._idle_refs[k].remove(entry)
            excess -= 1
            self._retire_reference(k, entry[1], entry[2])

    def worker_start_modes(self) -> list[str]:
        """Per device: how its workers start ("fork" from the zygote, or "spawn (why)")."""
        return [d.pool.start_mode() for d in self._devices or []]

    def idle_reference_pids(self) -> list[int]:
        """Process ids of the reference workers kept for later jobs (for tests and diagnostics)."""
        return [w.pid for v in self._idle_refs.values() for _, w, _ in v if w.pid is not None]

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        idle = [(w, pool) for v in self._idle_refs.values() for _, w, pool in v]
        self._idle_refs.clear()
        await asyncio.gather(*(pool.release(w) for w, pool in idle), return_exceptions=True)
        if self._devices:
            pools = [p for d in self._devices for p in (d.pool, d.compile_pool) if p is not None]
            await asyncio.gather(*(p.aclose() for p in pools), return_exceptions=True)
        if self._tmp is not None:
            self._tmp.cleanup()

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        start = time.perf_counter()
        devices = self._ensure_started()
        check_task(job.task_source, job.task_name)
        tree = check_candidate(job.candidate_source, job.candidate_name)
        findings = check_candidate_source(tree)
        device = min(devices, key=lambda d: d.jobs)
        device.jobs += 1
        try:
            if findings:
                f = findings[0]
                ev = Evidence(
                    message=f"{job.candidate_name}:{f.line}: {f.message}", op=f.construct, line=f.line
                )
                result = _all_failed(job, FailureClass.FORBIDDEN_CONSTRUCT, ev, device)
            else:
                result = await _Job(self, job, device, progress).run()
        finally:
            device.jobs -= 1
        result.seconds = round(time.perf_counter() - start, 3)
        if result.verify is not None and not result.verify.seconds:
            result.verify.seconds = result.seconds
        return result


def _device_label(device: _Device, info: dict[str, Any] | None = None) -> str:
    if device.kind == "cpu":
        return "cpu (Triton interpreter)"
    name = (info or {}).get("device", "cuda:0").split("(", 1)
    return f"cuda:{device.index} ({name[1]}" if len(name) == 2 else f"cuda:{device.index}"


def _all_failed(job: EvalJob, cls: FailureClass, ev: Evidence, device: _Device) -> EvalResult:
    result = EvalResult()
    if "compile" in job.stages:
        result.compile = CompileResult(ok=False, failure_class=cls, evidence=ev)
    if "verify" in job.stages:
        result.verify = _verify_result(job, device, cls, ev)
    if "profile" in job.stages:
        result.profile = ProfileResult(
            available=False, message=f"not profiled: {ev.message}", failure_class=cls, evidence=ev
        )
    return result


def _verify_result(
    job: EvalJob, device: _Device, cls: FailureClass | None, ev: Evidence | None, **kw: Any
) -> VerifyResult:
    return VerifyResult(
        correct=cls is None,
        status="passed" if cls is None else cls.value,
        failure_class=cls,
        evidence=ev,
        trials=job.trials,
        device=kw.pop("device_label", _device_label(device)),
        interpreter=device.kind == "cpu",
        allowed_ops=list(job.allowed_ops),
        **kw,
    )


def _evidence(raw: Any, fallback: str) -> Evidence:
    """Evidence from a worker's message; a malformed one becomes a plain message."""
    if isinstance(raw, dict):
        with contextlib.suppress(ValueError, TypeError):
            return Evidence.model_validate(raw)
    return Evidence(message=fallback)


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
        hit = self.ev._compiled_reference.get(self.compiled_key)
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
            kept = self.ev._take_reference(key)
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
                self.ev._forget_reference(key, kept)
                continue
            if self.ev._reserve_reference(key):
                break
            # The task has its share of reference workers, all busy: one is soon free (a job
            # holds it a few seconds), which beats starting another process.
            await self.ev._reference_freed(key, 5.0)
        self.ref = None
        try:
            self.ref = await self.acquire()
        finally:
            self.ev._started_reference(key, self.ref)
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
            self.ev._keep_reference(self.compiled_key, ref, self.ref_pool)
        elif ref is not None:
            self.ev._forget_reference(self.compiled_key, ref)
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
            self.ev._compiled_reference[self.compiled_key] = (time.monotonic(), t["compiled"])
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


PHYSICAL_FLOOR_FACTOR = 0.25
_MIN_SAMPLE_US = 0.01  # timing.MIN_SAMPLE_US, without importing torch here
"""A candidate median below this fraction of the physical floor is rejected (see ProfileResult)."""

# The GPU a timing ran on (from its name) -> the roofline peaks used for the physical floor.
# Measured ceilings where we have them (h200-measured), else datasheet peaks.
_DEVICE_PEAKS = (
    ("H200", "h200-measured"),
    ("H100", "h100-sxm"),
    ("A100", "sm_80"),
    ("L40S", "sm_89"),
    ("B200", "sm_100"),
    ("MI300X", "gfx942"),
)


def physical_floor_us(roof: Roofline, device: str) -> float:
    """The least time the reference's work can take on `device`: its bytes at the device's HBM
    bandwidth or its FLOPs at the device's fastest rate (any dtype, tensor cores), whichever is
    larger. Deliberately optimistic (fastest precision), so only impossible timings fall below it.
    An unknown device uses the roofline target's peaks."""
    from kernelcraft.engine.roofline import PEAKS

    gbps, tflops = roof.peak_gbps, roof.peak_tflops
    for needle, key in _DEVICE_PEAKS:
        if needle.lower() in device.lower() and key in PEAKS:
            gbps, tflops = PEAKS[key].gbps, max(PEAKS[key].tflops.values())
            break
    return max(roof.bytes / (gbps * 1e3), roof.flops / (tflops * 1e6))


def _timing_note(name: str, t: Timing) -> str:
    how = f"{t.method}, {t.sets} rotating input sets" if t.sets > 1 else t.method
    if t.method == "cuda_events":
        how += ", L2 flushed before each repetition"
    if t.clipped:
        how += f", {t.clipped} of {t.reps} samples at or below the harness overhead (clipped)"
    return f"{name}: {how}"


def _profile_result(
    cand: Timing,
    eager: Timing,
    compiled: Timing,
    roof: Roofline | None,
    device: str,
    seconds: float,
) -> ProfileResult:
    """The profile from the three merged timings; rejects a candidate timing below the physical
    floor (`available=True`, `failure_class=forbidden_construct`, no speedups)."""
    message = "; ".join(
        _timing_note(n, t) for n, t in (("candidate", cand), ("eager", eager), ("compiled", compiled))
    )
    result = ProfileResult(
        available=True,
        message=message,
        device=device,
        candidate=cand,
        reference_eager=eager,
        reference_compiled=compiled,
        roofline=roof,
        seconds=seconds,
    )
    floor = physical_floor_us(roof, device) if roof is not None else 0.0
    too_fast = cand.median_us < PHYSICAL_FLOOR_FACTOR * floor
    if too_fast or cand.median_us <= _MIN_SAMPLE_US or cand.clipped * 2 >= cand.reps:
        why = (
            f"below {PHYSICAL_FLOOR_FACTOR:g}x the physical floor {floor:.2f} µs "
            f"(the reference's bytes at {device}'s HBM bandwidth / FLOPs at its peak rate)"
            if too_fast
            else "at or below the harness's own overhead in most samples"
        )
        result.failure_class = FailureClass.FORBIDDEN_CONSTRUCT
        result.evidence = Evidence(
            message=f"timing below the physical floor: the candidate's median {cand.median_us:.3f} µs is {why}; "
            "the kernel cannot be this fast (work hidden from the timer, or not done); rejected",
            op="timing",
        )
        result.message = f"rejected: {result.evidence.message} ({message})"
        return result
    result.speedup_vs_eager = eager.median_us / cand.median_us
    result.speedup_vs_compiled = compiled.median_us / cand.median_us
    if roof is not None:
        result.achieved_gbps = roof.bytes / cand.median_us / 1e3
        result.achieved_tflops = roof.flops / cand.median_us / 1e6
        result.roofline_fraction = roof.floor_us / cand.median_us
    return result
