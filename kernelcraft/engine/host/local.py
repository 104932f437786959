"""`LocalEvaluator`: compile, verify and profile candidates on this machine, in isolated workers.

    async with LocalEvaluator(settings=knobs, workers=2) as ev:  # device="auto": the GPU if any
        result = await ev.submit(EvalJob(task_source=..., candidate_source=..., stages=["verify"]))

Per job: the sources are checked in this process with `ast` (unusable files raise `TaskError`
before any process starts; forbidden constructs become a `forbidden_construct` verdict). Then two
workers (pre-started, or with `lazy=True` started in parallel for the job) take roles (see `worker/main.py`): a trusted **reference** worker that makes the
inputs from secret seeds (`secrets`), computes and keeps the reference outputs and compares; and
a **candidate** worker that imports the candidate and runs it. Frames between them pass through
this process as opaque bytes; no tensor and no candidate object is ever decoded here. A candidate
that dies, exits early or hangs gets `runtime_crash` / `runtime_timeout` (its process group is
killed at the deadline); one that outgrows the memory limit `runtime_out_of_memory`.

Memory and size: the reference measures the task on the meta device before anything is allocated;
a task that cannot fit the device is refused (`TaskError`), each candidate's memory limit is sized
to its task, and the device's memory is shared out by a ledger that evicts idle kept references
(`memory.py`). Without a GPU, a KernelBench task too large for the interpreter runs at shrunk
sizes (`shrink.py`; `EvalJob.full_size` or the `shrink` setting off opts out), or is refused.

Settings: the evaluator takes the `Knobs` its entry point read (`settings=`, `base/knobs.py`) and
hands them to its pools (the zygote switch, the box's mode, the caches) and its jobs (the box,
shrinking); it reads no environment variable of ours itself.

Concurrency: any number of jobs may be submitted at once. Loading, importing and compiling run
concurrently (up to the pool's size), the reference's and the candidate's loading included. On a
GPU, every step that uses the GPU (loading models, making inputs, the reference's torch.compile,
verification trials) shares it with other jobs, and timing has it alone (`gpulock.py`): no other
job's GPU work overlaps a timing. Only Triton's compiler (CPU) runs outside the lock, and a
baseline's torch.compile up to its first run (`worker/refcompile.py`). Without a GPU, verify
runs in Triton's CPU interpreter and there is no lock. The job's `timeout_s` counts from the
moment its workers are assigned, minus the time spent waiting for the GPU or for other jobs' device memory.

Reference workers are kept: one that finished a job cleanly (every request answered, no error)
waits, idle, for the next job on the same task (`references.py`, at most the pool's size per
device), which saves a process start and the reference's set-up. It never imported candidate
code, so nothing of a candidate survives in it; it rebuilds `Model` for each job. Candidate
workers are never reused.

Where the rest lives: one job's stages in `job/run.py` (its timing in `job/timing.py`), its processes in `job/workers.py`, the messages
on the pipe in `protocol.py`, the result builders in `verdicts.py`.

Only the evaluator owns its worker processes; callers hold one `LocalEvaluator` and `aclose()` it.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from kernelcraft.base.errors import TaskError, UsageError
from kernelcraft.base.failures import FailureClass
from kernelcraft.base.knobs import Knobs
from kernelcraft.engine.host.evaluator import ProgressCallback
from kernelcraft.engine.host.job.run import Job
from kernelcraft.engine.host.job.state import CandidateSettings, add_up
from kernelcraft.engine.host.references import ReferencePool
from kernelcraft.engine.host.verdicts import all_failed
from kernelcraft.engine.machine import prestart
from kernelcraft.engine.machine.gpulock import Device, GpuLock
from kernelcraft.engine.machine.memory import ran_out
from kernelcraft.engine.machine.pool import WorkerPool, WorkerProcess
from kernelcraft.engine.source import shrink
from kernelcraft.engine.source.intake import take_in
from kernelcraft.schema.evaluation import (
    EvalJob,
    EvalResult,
    Evidence,
)

log = logging.getLogger(__name__)


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


class LocalEvaluator:
    """Runs `EvalJob`s in single-use worker processes on this machine.

    workers: workers kept started per device, or (lazy) started at once at most (each job uses
      two; three on a CPU-only machine when it also asks for the compile stage). Default: half the CPU cores, 4 to 8, per GPU; 2 without one.
    device: "auto" (a GPU when torch sees one), "cuda" or "cpu".
    memory_limit_gb: a cap on every candidate process; None (default): each job's limit is sized
      to its task (`memory.py`: twice the harness's working set, at least 2 GiB). Applied as an
      address-space limit on the CPU (RLIMIT_AS over what the warm worker already maps), a CUDA
      caching-allocator cap on a GPU, plus a resident-memory watchdog on both. A task that cannot
      fit the device's memory is refused before anything runs (`TaskError`).
    scratch_dir: where worker directories (Triton caches, logs) go; a fresh temp dir by default.
    protect_environ: make this process non-dumpable (see `_protect_environ`).
    lazy: start no worker before a job asks for one, and only those it needs (a one-off command:
      the zygote alone starts early); otherwise `workers` are kept ready (a server).
    timings_file: where the compiled reference's timings outlive this process (`timingcache.py`:
      the next process profiling the same task skips its torch.compile); None: in memory only.
    settings: every setting, as the entry point read them (`knobs.settings()`; a test builds its
      own `Knobs`): the box, shrinking, the zygote, the bytecode and prebuilt caches and their home.
    """

    def __init__(
        self,
        *,
        workers: int | None = None,
        device: Literal["auto", "cuda", "cpu"] = "auto",
        memory_limit_gb: float | None = None,
        scratch_dir: str | Path | None = None,
        protect_environ: bool = True,
        lazy: bool = False,
        timings_file: Path | None = None,
        settings: Knobs,
    ) -> None:
        if device not in ("auto", "cuda", "cpu"):
            raise UsageError(f"device must be 'auto', 'cuda' or 'cpu', not {device!r}")
        gpus = prestart.gpu_count(device)
        if device == "cuda" and gpus == 0:
            raise UsageError("device='cuda' was asked for but torch sees no CUDA GPU; use device='auto'")
        self._gpus = gpus
        self._lazy = lazy
        self.settings = settings
        # Each job takes two single-use workers, and a worker takes seconds to start (torch,
        # CUDA, inductor): enough of them must be warm to keep a GPU busy with a batch.
        default = max(4, min(8, (os.cpu_count() or 8) // 2)) if gpus else 2
        self._workers = workers or default
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        # A one-off command's zygote may have started before its command line was read.
        self._head = (
            prestart.take("cuda" if gpus else "cpu", 0 if gpus else None, not gpus)
            if lazy and scratch_dir is None
            else None
        )
        if self._head is not None:
            log.debug("the zygote started as the command did (prestart.py)")
            self._tmp = self._head.scratch
            self._scratch = Path(self._tmp.name)
        elif scratch_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kernelcraft-eval-")
            self._scratch = Path(self._tmp.name)
        else:
            self._scratch = Path(scratch_dir)
            self._scratch.mkdir(parents=True, exist_ok=True)
        self._devices: list[Device] | None = None
        self._closed = False
        self._active: set[WorkerProcess] = set()
        self._candidates = CandidateSettings(
            memory_limit_bytes=int(memory_limit_gb * 1024**3) if memory_limit_gb else None,
            # the `sandbox` setting off turns the candidates' box off (see box/__init__.py).
            sandbox=settings.engine.sandbox,
            # the `shrink` setting off runs KernelBench sizes in the interpreter (see shrink.py).
            shrink=settings.engine.shrink,
        )
        # A task gets a few reference workers (a job beyond them waits for one); a device keeps
        # at most as many idle ones as it has workers.
        self._references = ReferencePool(
            per_task=max(2, self._workers // 2),
            idle_per_device=self._workers,
            timings_file=timings_file,
            settings=settings,
        )
        if protect_environ:
            _protect_environ()

    @property
    def has_gpu(self) -> bool:
        return self._gpus > 0

    @property
    def parallel_jobs(self) -> int:
        """About how many jobs run at once: two workers each, on every device (a team server's
        fair queue admits this many, `server/fairness.py`)."""
        return max(1, self._workers // 2) * max(1, self._gpus)

    @property
    def workers(self) -> int:
        """Workers kept started per device (a job takes two)."""
        return self._workers

    def active_worker_pids(self) -> list[int]:
        """Process ids of the workers that jobs hold right now (for tests and diagnostics)."""
        return [w.pid for w in self._active if w.pid is not None]

    def _ensure_started(self) -> list[Device]:
        if self._closed:
            raise UsageError("this LocalEvaluator is closed; create a new one")
        if self._devices is None:
            lazy, scratch, settings = self._lazy, self._scratch, self.settings
            head = self._head.zygote if self._head is not None else None
            if self._gpus:
                self._devices = [
                    Device(
                        "cuda",
                        i,
                        WorkerPool(
                            self._workers,
                            "cuda",
                            scratch,
                            gpu=i,
                            lazy=lazy,
                            zygote=head if i == 0 else None,
                            settings=settings,
                        ),
                        GpuLock(),
                    )
                    for i in range(self._gpus)
                ]
            else:
                self._devices = [
                    Device(
                        "cpu",
                        None,
                        WorkerPool(
                            self._workers,
                            "cpu",
                            scratch,
                            interpret=True,
                            lazy=lazy,
                            zygote=head,
                            settings=settings,
                        ),
                        GpuLock(),
                        compile_pool=WorkerPool(
                            1, "cpu", scratch, interpret=False, lazy=True, settings=settings
                        ),
                        locked=False,
                    )
                ]
            for d in self._devices:
                d.pool.warm_up()
        return self._devices

    async def start(self) -> None:
        """Start the worker pools now instead of at the first `submit` (optional)."""
        self._ensure_started()

    async def __aenter__(self) -> LocalEvaluator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def worker_start_modes(self) -> list[str]:
        """Per device: how its workers start ("fork" from the zygote, or "spawn (why)")."""
        return [d.pool.start_mode() for d in self._devices or []]

    def idle_reference_pids(self) -> list[int]:
        """Process ids of the reference workers kept for later jobs (for tests and diagnostics)."""
        return self._references.idle_pids()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._devices is None and self._head is not None:  # started early, never used
            self._head.zygote.kill()
        await self._references.aclose()
        if self._devices:
            pools = [p for d in self._devices for p in (d.pool, d.compile_pool) if p is not None]
            await asyncio.gather(*(p.aclose() for p in pools), return_exceptions=True)
        if self._tmp is not None:
            self._tmp.cleanup()

    async def _run(self, spec: EvalJob, device: Device, progress: ProgressCallback | None) -> EvalResult:
        """The job, and once more with the device's memory to itself when it ran out of memory
        while other jobs held some (`memory.py`: their estimates can fall short)."""
        job = Job(spec, device, self._references, self._candidates, self._active, progress)
        try:
            result: EvalResult | TaskError = await job.run()
        except TaskError as e:
            result = e
        # A limit of ours (other jobs beside it, or the candidate's limit sized to the task) is
        # never the candidate's verdict: run it once more with the device to itself, the candidate
        # allowed the room beside the reference (at most half the host's available RAM).
        ours = job.state.shared or not self._candidates.memory_limit_bytes
        if not (ours and ran_out(result)):
            if isinstance(result, TaskError):
                raise result
            return result
        why = "beside other jobs" if job.state.shared else f"under its {_gib(job.state.memory_limit)} limit"
        log.info("%s ran out of memory %s: running it again alone", spec.task_name, why)
        again = Job(spec, device, self._references, self._candidates, self._active, progress, alone=True)
        result = await again.run()
        room = "" if spec.baseline_only else f" ({_gib(again.state.memory_limit)} for the candidate)"
        note = f"run again with the device's memory to itself{room}: it ran out of memory {why}"
        if result.verify is not None:
            result.verify.notes.append(note)
        for timed in (result.profile, result.baseline):
            if timed is not None:
                timed.message = f"{timed.message}; {note}" if timed.message else note
        return result

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        start = time.perf_counter()
        findings = take_in(job).findings  # a source that is no task or candidate: before anything starts
        if job.cpu_sizes:  # names that are not the task's size constants: refused here (exit 2)
            shrink.given(job.task_source, job.cpu_sizes, job.task_name)
        devices = self._ensure_started()
        device = min(devices, key=lambda d: d.jobs)
        device.jobs += 1
        if device.compile_pool is not None and not findings and (job.gpu_check or "compile" in job.stages):
            # Its zygote imports torch and Triton (seconds): beside the trials, not after them.
            device.compile_pool.warm_up()
        try:
            if findings:
                f = findings[0]
                ev = Evidence(
                    message=f"{job.candidate_name}:{f.line}: {f.message}", op=f.construct, line=f.line
                )
                result = all_failed(job, FailureClass.FORBIDDEN_CONSTRUCT, ev, device)
            else:
                result = await self._run(job, device, progress)
        finally:
            device.jobs -= 1
        result.seconds = round(time.perf_counter() - start, 3)
        result.stage_seconds = add_up(result.stage_seconds, result.seconds)
        if result.verify is not None:
            result.verify.seconds = result.seconds
            result.verify.stage_seconds = dict(result.stage_seconds)
        return result


def _gib(n: int | None) -> str:
    return f"{n / 1024**3:.1f} GiB" if n else "unlimited"
