"""Pre-started, single-use worker processes.

A `WorkerPool` keeps `size` workers started (torch and Triton imported, CUDA initialised on a GPU)
and hands each out once; every hand-out starts a replacement in the background. A `WorkerProcess`
is one worker: its own session (process group), a scrubbed environment, its own scratch directory
(Triton cache included), stdout/stderr to a log file, and a socket pair as the only channel.
`kill()` kills the whole process group. Workers are forked from the pool's zygote (`zygote.py`:
torch and the harness imported once) and, when it is unavailable, spawned as
`python -m kernelcraft.engine.worker.main` (the `zygote` setting off, KERNELCRAFT_ZYGOTE=off,
forces this). A pool takes the `Knobs` its evaluator was given (`base/knobs.py`) and writes what a
worker needs of them into the worker's environment (`wire/childenv.py`).

Only `local.py` (and `ray_evaluator.py`, for `scrubbed_env`) uses this module; nothing here imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelcraft.base import bytecode
from kernelcraft.base.errors import KernelcraftError
from kernelcraft.base.failures import is_out_of_memory
from kernelcraft.base.knobs import Knobs
from kernelcraft.engine import box
from kernelcraft.engine.box import cgroup, environment, shmsweep
from kernelcraft.engine.startup import logfile, prebuilt
from kernelcraft.engine.startup.zygote import ForkedChild, Zygote, ZygoteUnavailable
from kernelcraft.engine.wire import bounds as frame_bounds
from kernelcraft.engine.wire import childenv
from kernelcraft.engine.wire.channel import Bounds, ChannelError, Frame, FrameRefused, read_frame, write_frame

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 180.0
OUT_OF_MEMORY_RETRY_S = 2.0
"""A worker that could not start for want of device memory is retried after this (times the
failures in a row): other jobs' memory frees as they end."""
TAIL_BYTES = 4000
FRAMES_QUEUED = 4
"""Frames read ahead of the job: then the reader waits, the socket fills and the worker's sends
block (backpressure: a worker cannot pile frames up in the parent's memory)."""


class WorkerError(KernelcraftError):
    """A worker process could not be started or broke the protocol. A fault of the evaluator or
    of this machine (missing torch, out of memory), not a verdict on a candidate."""


def scrubbed_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of the environment a worker inherits: an allowlist (`box/environment.py`),
    so no secret whatever its name (a database URL's password), no setting of ours, no
    Triton variable that substitutes or dumps kernels."""
    return environment.worker_env(base)


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[3])


def base_env(
    device: str, gpu: int | None, interpret: bool, lazy: bool = False, *, settings: Knobs
) -> dict[str, str]:
    """The environment every worker of a pool shares (its zygote's): scrubbed, with the package
    importable, Triton's interpreter on or off, the GPU chosen, the box `settings` ask for, bytecode
    kept where Python keeps none (`base/bytecode.py`), and (`lazy`) the imports a job may not need
    (dynamo, inductor) left to the job that needs them."""
    env = scrubbed_env()
    ours = bytecode.add_to_env(env, settings)
    # Measuring most tasks on meta imports dynamo: where kernelcraft keeps the bytecode, a lazy
    # pool's zygote imports it once (0.9 s on the H200, beside Triton's key) rather than leave it
    # to each job's reference worker; elsewhere a small task's verdict does without it.
    imports = ("lazy-inductor" if ours else "lazy") if lazy else None
    env.update(childenv.worker_env(device=device, box=box.mode(device, settings.engine), imports=imports))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
    # Triton 3.9 warns that its FMA-fusion default will flip in 3.10; pin today's default so a
    # Triton upgrade does not silently change candidates' rounding.
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    # Triton reads TRITON_INTERPRET when `@triton.jit` decorates, including triton.language's own
    # helpers at `import triton`: it must be set (or not) before the worker imports triton.
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    if device == "cuda" and gpu is not None:
        # `gpu` counts the GPUs this process sees: under a CUDA_VISIBLE_DEVICES (a Ray actor's),
        # the worker must get the same physical GPU, not the machine's GPU of that index.
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[gpu] if gpu < len(visible) else str(gpu)
    if device == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def own_env(workdir: Path) -> dict[str, str]:
    """What differs per worker: its directory as HOME, TMPDIR and Triton's and inductor's caches
    (the candidate's box lets it write there and nowhere else). Inductor's is named outright: its
    first use sets TORCHINDUCTOR_CACHE_DIR in the environment, so a zygote that imported inductor
    would hand every fork its own temporary directory (closed to a worker that left root: H200)."""
    return {
        **childenv.own_dir(str(workdir)),
        "TRITON_CACHE_DIR": str(workdir / "triton-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor-cache"),
        "TRITON_HOME": str(workdir),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
    }


class WorkerProcess:
    """One worker child and its channel. Frames it sends are read by a reader task within
    `bounds` (which the job tightens once it knows the task's sizes) into a short queue."""

    def __init__(
        self, device: str, base_dir: Path, gpu: int | None, interpret: bool = False, *, settings: Knobs
    ) -> None:
        self.device = device
        self.settings = settings
        self.interpret = interpret
        self.gpu = gpu
        self.dir = Path(tempfile.mkdtemp(prefix="worker-", dir=base_dir))
        self.log_path = self.dir / "output.log"
        self.log_fd: int | None = logfile.create(self.log_path)
        """The log as the parent opened it, before the worker started: its only way to read it
        (`logfile.py`: the worker may replace the path with a link)."""
        self.frames: asyncio.Queue[Frame | None] = asyncio.Queue(FRAMES_QUEUED)
        self.bounds: Bounds = frame_bounds.starting()
        """What its next frame may carry (`wire/bounds.py`): read for each frame."""
        self.refused: str | None = None
        """Why its channel was closed on a frame over its bounds (it is killed: `killed_for` "frame")."""
        self.info: dict[str, Any] = {}
        self.proc: subprocess.Popen[bytes] | ForkedChild | None = None
        self.forked = False
        self.killed_for: str | None = None
        self.cgroup: cgroup.Groups | None = None
        """Its cgroups (processes, memory), once it runs a candidate (`limit`)."""
        self.born = time.time()
        """When it was made: what it leaves in the machine's /dev/shm after this goes (shmsweep.py)."""
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None

    async def start(self, zygote: Zygote | None = None) -> None:
        """Fork the worker from `zygote`, or spawn it when there is none (or it fails)."""
        if self.device == "cuda":  # Triton's C helpers, built once (prebuilt.py)
            prebuilt.seed(Path(own_env(self.dir)["TRITON_CACHE_DIR"]), self.settings)
        parent_sock, child_sock = socket.socketpair()
        try:
            if zygote is not None:
                try:
                    self.proc = await zygote.fork(child_sock, self.dir, self.log_fd, own_env(self.dir))
                    self.forked = True
                except ZygoteUnavailable:
                    pass
            if self.proc is None:
                env = base_env(self.device, self.gpu, self.interpret, settings=self.settings) | own_env(
                    self.dir
                )
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "kernelcraft.engine.worker.main", str(child_sock.fileno())],
                    pass_fds=(child_sock.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=self.log_fd,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.dir,
                    start_new_session=True,
                )
        finally:
            child_sock.close()
        reader, self._writer = await asyncio.open_unix_connection(sock=parent_sock)
        self._reader_task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                await self.frames.put(await read_frame(reader, self.bounds))
        except FrameRefused as e:
            self.refused = f"the harness refused {e}"
            self.kill("frame")
            log.debug("worker %s: %s", self.pid, self.refused)
        except ChannelError as e:
            log.debug("worker %s channel closed: %s", self.pid, e)
        finally:
            await self.frames.put(None)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    async def send(self, header: dict[str, Any], blobs: list[bytes] | None = None) -> None:
        if self._writer is None:
            raise WorkerError("worker not started")
        await write_frame(self._writer, header, blobs)

    async def wait_ready(self, timeout: float) -> None:
        try:
            frame = await asyncio.wait_for(self.frames.get(), timeout)
        except asyncio.TimeoutError as e:
            self.kill()
            raise WorkerError(
                f"a worker did not start within {timeout:.0f} s; log tail: {self.tail()}"
            ) from e
        if frame is None or frame.header.get("type") != "ready":
            self.kill()
            await self.wait_exit(5)
            raise WorkerError(
                f"a worker exited while starting ({self.exit_description()}); is torch/triton importable "
                f"by {sys.executable}? Log tail: {self.tail()}"
            )
        self.info = frame.header
        log.debug("worker %s ready: start-up by phase %s s", self.pid, frame.header.get("startup"))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_bytes(self) -> int:
        """Resident memory of the worker (0 when unknown): the process its ready frame names,
        which in a PID namespace is not the process started (the keeper, see box/__init__.py)."""
        try:
            with open(f"/proc/{self.info.get('pid', self.pid)}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def kill(self, reason: str | None = None) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if reason and self.killed_for is None:
            self.killed_for = reason
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def wait_exit(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        proc = self.proc
        loop = asyncio.get_running_loop()

        async def wait() -> int:
            if isinstance(proc, ForkedChild):
                return await proc.wait()
            return await loop.run_in_executor(None, proc.wait)

        try:
            return await asyncio.wait_for(wait(), timeout)
        except asyncio.TimeoutError:
            self.kill()
            try:
                return await asyncio.wait_for(wait(), 10)
            except asyncio.TimeoutError:  # a forked child whose zygote no longer reports exits
                return None

    def exit_description(self) -> str:
        code = self.proc.poll() if self.proc else None
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with code {code}"

    def tail(self, limit: int = TAIL_BYTES) -> str:
        """The end of the worker's log, read through the descriptor opened before it started."""
        return logfile.tail(self.log_fd, limit)

    def limit(self, extra_tasks: int | None, memory_bytes: int | None) -> None:
        """Put the worker in cgroups of its own: `extra_tasks` more processes and threads, and
        `memory_bytes` of memory for it and its children (`box/cgroup.py`; best effort)."""
        pid = self.info.get("pid", self.pid)
        if self.cgroup is None and isinstance(pid, int):
            self.cgroup = cgroup.confine(pid, extra_tasks, memory_bytes)

    def out_of_memory(self) -> bool:
        """Whether the kernel's OOM killer ended a process of its memory cgroup."""
        return cgroup.oom_killed(self.cgroup)

    async def close(self) -> None:
        """Kill the process group (and what is left in its pids cgroup), reap it, and remove its
        scratch directory."""
        self.kill()
        await self.wait_exit(10)
        cgroup.release(self.cgroup)
        self.cgroup = None
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task
        logfile.close(self.log_fd)
        self.log_fd = None
        shutil.rmtree(self.dir, ignore_errors=True)
        # A CPU worker's /dev/shm was its own (mounts.py) unless the box could not cover it.
        await asyncio.to_thread(shmsweep.sweep, self.born)


def reachable(base_dir: Path) -> None:
    """Let workers that leave root (box/__init__.py) reach their directories in `base_dir`."""
    if os.geteuid() == 0:
        base_dir.chmod(base_dir.stat().st_mode | 0o011)


class WorkerPool:
    """Up to `size` workers starting at once for one device; each is handed out once. `interpret`:
    workers run Triton's CPU interpreter (set before they import triton). `lazy`: no worker is
    started before a job asks for one (the zygote alone starts early), and workers import only
    what every job needs; otherwise `size` workers are kept ready (a server's throughput).
    `zygote`: one started already (`prestart.py`), taken if it has this pool's environment.
    `settings`: what the evaluator was given (the zygote switch, the box, the caches)."""

    def __init__(
        self,
        size: int,
        device: str,
        base_dir: Path,
        gpu: int | None = None,
        interpret: bool = False,
        lazy: bool = False,
        zygote: Zygote | None = None,
        *,
        settings: Knobs,
    ) -> None:
        self.size = max(1, size)
        self.settings = settings
        self.lazy = lazy
        self._waiting = 0
        self.interpret = interpret
        self.device = device
        self.gpu = gpu
        self.base_dir = base_dir
        self._ready: asyncio.Queue[WorkerProcess] = asyncio.Queue()
        self._starting: set[asyncio.Task[None]] = set()
        self._failures = 0
        self._error: WorkerError | None = None
        self._closed = False
        self._all: set[WorkerProcess] = set()
        self.started = 0
        """Workers started so far (a diagnostic)."""
        reachable(base_dir)
        self._zygote: Zygote | None = None
        self._zygote_task: asyncio.Task[Zygote | None] | None = None
        env = base_env(device, gpu, interpret, lazy, settings=settings)
        if device == "cuda":
            prebuilt.build_in_background(env, settings)
        if zygote is not None and not (settings.engine.zygote and zygote.started_for(env)):  # another's
            zygote.kill()
            zygote = None
        if zygote is None and settings.engine.zygote:
            zygote = Zygote(
                env,
                Path(tempfile.mkdtemp(prefix="zygote-", dir=base_dir)) / "output.log",
                cuda=device == "cuda",
            )
        self._zygote = zygote

    def start_mode(self) -> str:
        """How this pool starts workers: "fork" (from its zygote) or "spawn (why)"."""
        if self._zygote is None:
            return "spawn (KERNELCRAFT_ZYGOTE=off)"
        if self._zygote.broken is not None:
            return f"spawn ({self._zygote.broken[:300]})"
        if self._zygote.deferred:
            return f"fork (each worker imports {', '.join(self._zygote.deferred)} itself)"
        return "fork"

    async def _zygote_ready(self) -> Zygote | None:
        """The pool's zygote once it has imported everything; None when it is unavailable."""
        if self._zygote is None or self._zygote.broken is not None:
            return None
        try:
            await self._zygote.start(STARTUP_TIMEOUT_S)
        except (ZygoteUnavailable, asyncio.TimeoutError):
            return None
        return self._zygote

    def warm_up(self) -> None:
        """Start what should be ready before the first job: the zygote (lazy), or `size` workers."""
        if not self.lazy:
            self.fill()
        elif self._zygote is not None and self._zygote_task is None:
            self._zygote_task = asyncio.create_task(self._zygote_ready())

    def fill(self) -> None:
        """Start workers until as many are ready or starting as are wanted: `size` (or, when
        lazy, as many as acquirers wait for, at most `size`)."""
        wanted = min(self.size, self._waiting) if self.lazy else self.size
        while not self._closed and self._ready.qsize() + len(self._starting) < wanted:
            task = asyncio.create_task(self._start_one())
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    async def _start_one(self) -> None:
        w = WorkerProcess(self.device, self.base_dir, self.gpu, self.interpret, settings=self.settings)
        self.started += 1
        self._all.add(w)
        try:
            await w.start(await self._zygote_ready())
            await w.wait_ready(STARTUP_TIMEOUT_S)
        except (WorkerError, OSError) as e:
            self._all.discard(w)
            await w.close()
            short_of_memory = is_out_of_memory(str(e))  # the device's state, not the start's
            if w.forked and self._zygote is not None and not short_of_memory:
                # Whatever broke a forked worker would break the next: spawn from now on (and do
                # not count it towards giving up: the spawned replacement is a different start).
                self._zygote.disable(f"a forked worker failed to start: {str(e)[:500]}")
                await self._zygote.aclose()
                self._refill()
                return
            self._failures += 1
            log.warning("worker start failed (%d in a row): %s", self._failures, e)
            if self._failures >= 3:
                self._error = e if isinstance(e, WorkerError) else WorkerError(str(e))
                self._wake()
            else:
                if short_of_memory:  # other jobs' memory frees as they end
                    await asyncio.sleep(OUT_OF_MEMORY_RETRY_S * self._failures)
                self._refill()
            return
        self._failures = 0
        if self._closed:
            self._all.discard(w)
            await w.close()
            return
        await self._ready.put(w)

    def _refill(self) -> None:
        """From a failed start: start its replacement (this start no longer counts as one)."""
        task = asyncio.current_task()
        if task is not None:
            self._starting.discard(task)
        self.fill()

    def _wake(self) -> None:
        # Unblock acquirers after repeated start failures; they re-check `_error`.
        for _ in range(self.size * 2):
            self._ready.put_nowait(_BROKEN)  # type: ignore[arg-type]

    async def acquire(self) -> WorkerProcess:
        """A ready worker (waiting for one to start if none is); starts a replacement."""
        while True:
            if self._error is not None:
                raise self._error
            if self._closed:
                raise WorkerError("the evaluator is closed")
            self._waiting += 1
            try:
                self.fill()
                w = await asyncio.wait_for(self._ready.get(), STARTUP_TIMEOUT_S + 30)
            except asyncio.TimeoutError as e:
                raise WorkerError(f"no worker became ready within {STARTUP_TIMEOUT_S + 30:.0f} s") from e
            finally:
                self._waiting -= 1
            if w is _BROKEN:
                continue
            if not w.alive():
                self._all.discard(w)
                await w.close()
                continue
            self.fill()
            return w

    async def release(self, w: WorkerProcess) -> None:
        self._all.discard(w)
        await w.close()

    async def aclose(self) -> None:
        self._closed = True
        starting = [*self._starting, *([self._zygote_task] if self._zygote_task else [])]
        for task in starting:
            task.cancel()
        for task in starting:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await asyncio.gather(*(w.close() for w in list(self._all)), return_exceptions=True)
        self._all.clear()
        if self._zygote is not None:
            await self._zygote.aclose()


_BROKEN: Any = object()
