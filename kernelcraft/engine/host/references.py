"""`ReferencePool`: the reference workers kept between jobs, and the compiled reference's timings.

A reference worker that finished a job cleanly (every request answered, no error) waits, idle, for
the next job on the same task and device (`REFERENCE_IDLE_S`, at most `idle_per_device` parked per
device), which saves a process start and the reference's set-up. It never imported candidate code,
so nothing of a candidate survives in it; it rebuilds `Model` for each job. A task has at most
`per_task` reference workers, busy or idle: a job beyond that waits for one to come free. A
reference that re-ran a candidate's kernels (the fresh-input replay) is never kept; `replace`
starts a fresh one in its place, in the background, and parks it.

Memory: a worker is parked with a `NextJob` sent at once, so it frees its last job's inputs and
outputs and rebuilds `Model` while idle (off the next job's path); it then holds its parameters
and its process (`memory.TaskSize.held_when_idle`). Parked workers hold at most a budget of the
device's memory (`keep`'s `budget`: the oldest go first), and a job that needs the memory evicts
the least recently parked (`evict`). The task's measured sizes (`Sized`) are kept per task too,
for the jobs that take a kept worker.

torch.compile of the reference costs seconds per process: its timing for a task on a GPU is
measured once and reused for `timingcache.TTL_S`, across processes when the pool is given a file
(`timingcache.py`); the eager reference is still timed in every evaluation, interleaved with the
candidate.

Both caches are keyed by `TaskKey`. Only `LocalEvaluator` and its jobs use a pool; every method
but `freed` and `aclose` is synchronous, so a job being torn down (perhaps cancelled) can park or
forget its reference without awaiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcraft.base.errors import KernelcraftError
from kernelcraft.base.knobs import Knobs
from kernelcraft.engine.host.compilefacts import CompileFacts
from kernelcraft.engine.machine.kernelcache import KernelCache
from kernelcraft.engine.machine.pool import WorkerPool, WorkerProcess
from kernelcraft.engine.measure import timingcache
from kernelcraft.engine.wire.channel import Frame
from kernelcraft.engine.wire.protocol import NextJob, Sized
from kernelcraft.schema.evaluation import Timing

log = logging.getLogger(__name__)

REFERENCE_IDLE_S = 300.0
KERNELS_FOLDER = "kernels"
"""Beside the compiled timings' file: the candidates' compiled kernels (`kernelcache.py`)."""
REBUILD_TIMEOUT_S = 120.0
REPLACE_FROM_JOB = 2
"""A reference that cannot be kept is replaced from the task's second such job on (`replace`)."""

TaskKey = tuple[str, int | None]
"""(sha256 of the task's source, device index): what a reference worker and a timing serve."""

_REAPING: set[asyncio.Future[Any]] = set()  # shielded reaper tasks (kept referenced until done)


def task_key(task_source: str, device_index: int | None, variant: str = "") -> TaskKey:
    """`variant`: what else changes what the worker loads (a full-size run of a task whose
    interpreter trials are otherwise shrunk)."""
    return hashlib.sha256((task_source + variant).encode()).hexdigest(), device_index


def reap(work: Awaitable[Any]) -> asyncio.Future[Any]:
    """Run a worker's clean-up in the background, kept referenced until done."""
    task = asyncio.ensure_future(work)
    _REAPING.add(task)
    task.add_done_callback(_REAPING.discard)
    return task


@dataclass
class Parked:
    """An idle reference worker: when it was parked, what it holds, and its rebuild for the
    next job (`NextJob` sent at park time; the task resolves to its answer, None if none came)."""

    since: float
    worker: WorkerProcess
    pool: WorkerPool
    held: int
    rebuilt: asyncio.Future[Frame | None]


async def _rebuild(w: WorkerProcess, lock: Callable[[], AbstractAsyncContextManager[Any]]) -> Frame | None:
    """Send a parked reference `NextJob` (it drops its job's tensors, rebuilds Model); its answer."""
    try:
        async with lock():  # rebuilding Model uses the GPU: not during another job's timing
            await w.send(NextJob().to_header())
            return await asyncio.wait_for(w.frames.get(), REBUILD_TIMEOUT_S)
    except (asyncio.TimeoutError, OSError, ConnectionError):
        return None


class ReferencePool:
    """Reference workers per task and device, busy or parked, and the compiled reference's timings.

    A job asks `take` for a parked worker; failing that, `reserve`s a place under the task's cap
    (and reports the outcome with `started`), or waits with `freed`. At its end it `keep`s a
    worker in sync or `forget`s it."""

    def __init__(
        self,
        *,
        per_task: int,
        idle_per_device: int,
        timings_file: Path | None = None,
        settings: Knobs | None = None,
    ) -> None:
        self.per_task = per_task
        self.idle_per_device = idle_per_device
        self.closed = False
        self._compiled = timingcache.CompiledTimings(timings_file)
        self.compile_facts = CompileFacts()
        """Each candidate's compile facts per task and target, for the jobs after (`compilefacts.py`)."""
        self.kernels = KernelCache(
            timings_file.parent / KERNELS_FOLDER if timings_file is not None else None, settings=settings
        )
        """What each candidate's processes compiled, for its next process (`kernelcache.py`): kept
        beside the compiled timings when those outlive this process, else for this process alone."""
        # key -> idle reference workers, oldest first
        self._idle: dict[TaskKey, list[Parked]] = {}
        self.sizes: dict[TaskKey, Sized] = {}
        """The task's measurement by its first reference worker (kept workers do not re-send it)."""
        self.unshrunk: set[TaskKey] = set()
        """Tasks (`JobState.base_key`) the interpreter runs at their own sizes whatever the
        candidate (small enough, or with `get_cpu_inputs`): a candidate's divisors do not give
        them a reference of their own."""
        # key -> its reference workers, busy or idle (at most `per_task`)
        self._live: dict[TaskKey, set[WorkerProcess]] = {}
        self._starting: dict[TaskKey, int] = {}
        self._waiters: dict[TaskKey, list[asyncio.Future[None]]] = {}
        self._jobs: dict[TaskKey, int] = {}
        """Jobs whose reference could not be kept, per task (`replace`)."""
        self._replacing: set[asyncio.Future[Any]] = set()

    # ---- reference workers ----

    def take(self, key: TaskKey) -> Parked | None:
        """An idle reference worker for this task and device, if one is alive and fresh enough
        (await its `rebuilt` for its answer to the `NextJob` it was sent when parked)."""
        idle = self._idle.get(key, [])
        while idle:
            p = idle.pop()
            if p.worker.alive() and time.monotonic() - p.since < REFERENCE_IDLE_S:
                return p
            self._retire(key, p)
        return None

    def reserve(self, key: TaskKey) -> bool:
        """Reserve a place for a new reference worker of the task if it is under its cap (report
        the outcome with `started`)."""
        live = len(self._live.setdefault(key, set())) + self._starting.get(key, 0)
        if live >= self.per_task:
            return False
        self._starting[key] = self._starting.get(key, 0) + 1
        return True

    def started(self, key: TaskKey, w: WorkerProcess | None) -> None:
        """The worker `reserve` made room for (None: none was started)."""
        self._starting[key] -= 1
        if w is not None:
            self._live[key].add(w)
        else:
            self._wake(key)

    def forget(self, key: TaskKey, w: WorkerProcess) -> None:
        """`w` no longer serves the task (killed or closed): wake the jobs waiting for a reference."""
        self._live.get(key, set()).discard(w)
        self._wake(key)

    async def freed(self, key: TaskKey, timeout: float) -> None:
        """Wait until a reference of the task is parked or forgotten (or `timeout` passes)."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(fut)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(fut, timeout)

    def keep(
        self,
        key: TaskKey,
        w: WorkerProcess,
        pool: WorkerPool,
        *,
        held: int = 0,
        budget: int | None = None,
        lock: Callable[[], AbstractAsyncContextManager[Any]] = contextlib.nullcontext,  # type: ignore[assignment]
    ) -> None:
        """Park a reference worker that finished a job cleanly, holding `held` bytes once rebuilt,
        and send it `NextJob` (under `lock`). Synchronous: it runs while a job is being torn down,
        perhaps cancelled. Closes stale ones, and the oldest past the cap or the memory `budget`."""
        now = time.monotonic()
        rebuilt = asyncio.ensure_future(_rebuild(w, lock))
        self._idle.setdefault(key, []).append(Parked(now, w, pool, held, rebuilt))
        self._wake(key)
        parked = self._parked(key[1])
        excess = len(parked) - self.idle_per_device
        over = sum(p.held for p, _ in parked) - budget if budget is not None else 0
        for p, k in parked:
            if excess <= 0 and over <= 0 and now - p.since < REFERENCE_IDLE_S:
                continue
            self._idle[k].remove(p)
            excess -= 1
            over -= p.held
            self._retire(k, p)

    def replace(
        self,
        key: TaskKey,
        pool: WorkerPool,
        start: Callable[[WorkerProcess], Awaitable[bool]],
        *,
        held: int = 0,
        budget: int | None = None,
        lock: Callable[[], AbstractAsyncContextManager[Any]] = contextlib.nullcontext,  # type: ignore[assignment]
    ) -> None:
        """In place of a reference worker that finished a job cleanly but cannot be kept (it re-ran
        the candidate's kernels: `job/replay.py`), start a fresh one in the background and park it
        (`keep`), so that the next job on the task takes a reference that never ran candidate code
        instead of starting one. `start(w)` gives it the job's `Load` and says whether it measured
        the task. Only from a task's second job on (a task evaluated once is not worth a process),
        within the task's cap; synchronous, like `keep`."""
        self._jobs[key] = self._jobs.get(key, 0) + 1
        if self.closed or self._jobs[key] < REPLACE_FROM_JOB or not self.reserve(key):
            return
        replacing = reap(self._replacement(key, pool, start, held, budget, lock))
        self._replacing.add(replacing)
        replacing.add_done_callback(self._replacing.discard)

    async def _replacement(
        self,
        key: TaskKey,
        pool: WorkerPool,
        start: Callable[[WorkerProcess], Awaitable[bool]],
        held: int,
        budget: int | None,
        lock: Callable[[], AbstractAsyncContextManager[Any]],
    ) -> None:
        w: WorkerProcess | None = None
        try:
            w = await pool.acquire()
        except (OSError, KernelcraftError) as e:
            log.debug("no replacement reference: %s", e)
        finally:
            self.started(key, w)
        if w is None:
            return
        try:
            async with lock():
                ready = await asyncio.wait_for(start(w), REBUILD_TIMEOUT_S)
        except (asyncio.TimeoutError, OSError, ConnectionError, KernelcraftError):
            ready = False
        if ready and not self.closed and w.alive():
            self.keep(key, w, pool, held=held, budget=budget, lock=lock)
            return
        self.forget(key, w)
        w.kill()
        await pool.release(w)

    async def settled(self) -> None:
        """Wait for the work this pool does between jobs: replacements started (`replace`) and
        parked workers' rebuilds (for tests and a clean shutdown)."""
        await asyncio.gather(*self._replacing, return_exceptions=True)
        await asyncio.gather(*(p.rebuilt for v in self._idle.values() for p in v), return_exceptions=True)

    def _parked(self, device: int | None) -> list[tuple[Parked, TaskKey]]:
        """The device's parked workers, least recently parked first."""
        return sorted(
            ((p, k) for k, v in self._idle.items() if k[1] == device for p in v), key=lambda t: t[0].since
        )

    def idle_bytes(self, device: int | None) -> int:
        """What the device's parked reference workers hold."""
        return sum(p.held for p, _ in self._parked(device))

    async def evict(self, device: int | None, wanted: int) -> int:
        """Close the device's least recently parked workers until `wanted` bytes are freed (or
        none is left); returns the bytes freed, once their processes are gone."""
        freed, gone = 0, []
        for p, k in self._parked(device):
            if freed >= wanted:
                break
            self._idle[k].remove(p)
            self.forget(k, p.worker)
            p.worker.kill()
            p.rebuilt.cancel()
            gone.append(p.pool.release(p.worker))
            freed += p.held
        await asyncio.gather(*gone, return_exceptions=True)
        return freed

    def idle_pids(self) -> list[int]:
        """Process ids of the parked reference workers (for tests and diagnostics)."""
        return [p.worker.pid for v in self._idle.values() for p in v if p.worker.pid is not None]

    def _retire(self, key: TaskKey, p: Parked) -> None:
        """Kill a parked reference worker now and reap it in the background."""
        self.forget(key, p.worker)
        p.worker.kill()
        p.rebuilt.cancel()
        reap(p.pool.release(p.worker))

    def _wake(self, key: TaskKey) -> None:
        for fut in self._waiters.pop(key, []):
            if not fut.done():
                fut.set_result(None)

    # ---- the compiled reference's timings ----

    def compiled_timing(self, key: TaskKey, device: str) -> Timing | None:
        """The compiled reference's timing for the task on `device` (as its worker names it), if
        measured within the TTL (by this process, or by another through the file)."""
        return self._compiled.get(self._compiled.entry(key[0], key[1], device))

    def remember_compiled(self, key: TaskKey, device: str, timing: Timing) -> None:
        self._compiled.put(self._compiled.entry(key[0], key[1], device), timing)

    async def aclose(self) -> None:
        """Stop keeping workers (jobs still running no longer park theirs) and release the parked."""
        self.closed = True
        self.kernels.close()
        for r in self._replacing:
            r.cancel()
        await asyncio.gather(*self._replacing, return_exceptions=True)
        idle = [p for v in self._idle.values() for p in v]
        self._idle.clear()
        for p in idle:
            p.rebuilt.cancel()
        await asyncio.gather(*(p.pool.release(p.worker) for p in idle), return_exceptions=True)
