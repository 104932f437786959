"""`ReferencePool`: the reference workers kept between jobs, and the compiled reference's timings.

A reference worker that finished a job cleanly (every request answered, no error) waits, idle, for
the next job on the same task and device (`REFERENCE_IDLE_S`, at most `idle_per_device` parked per
device), which saves a process start and the reference's set-up. It never imported candidate code,
so nothing of a candidate survives in it; it rebuilds `Model` for each job. A task has at most
`per_task` reference workers, busy or idle: a job beyond that waits for one to come free.

torch.compile of the reference costs seconds per process: its timing for a task on a GPU is
measured once and reused for `COMPILED_REFERENCE_TTL_S`.

Both caches are keyed by `TaskKey`. Only `LocalEvaluator` and its jobs use a pool; every method
but `freed` and `aclose` is synchronous, so a job being torn down (perhaps cancelled) can park or
forget its reference without awaiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable
from typing import Any

from kernelcraft.base.evaluation import Timing
from kernelcraft.engine.pool import WorkerPool, WorkerProcess

REFERENCE_IDLE_S = 300.0
# The eager reference is still timed every evaluation, interleaved with the candidate.
COMPILED_REFERENCE_TTL_S = 1800.0

TaskKey = tuple[str, int | None]
"""(sha256 of the task's source, device index): what a reference worker and a timing serve."""

_REAPING: set[asyncio.Future[Any]] = set()  # shielded reaper tasks (kept referenced until done)


def task_key(task_source: str, device_index: int | None) -> TaskKey:
    return hashlib.sha256(task_source.encode()).hexdigest(), device_index


def reap(work: Awaitable[Any]) -> asyncio.Future[Any]:
    """Run a worker's clean-up in the background, kept referenced until done."""
    task = asyncio.ensure_future(work)
    _REAPING.add(task)
    task.add_done_callback(_REAPING.discard)
    return task


class ReferencePool:
    """Reference workers per task and device, busy or parked, and the compiled reference's timings.

    A job asks `take` for a parked worker; failing that, `reserve`s a place under the task's cap
    (and reports the outcome with `started`), or waits with `freed`. At its end it `keep`s a
    worker in sync or `forget`s it."""

    def __init__(self, *, per_task: int, idle_per_device: int) -> None:
        self.per_task = per_task
        self.idle_per_device = idle_per_device
        self.closed = False
        # key -> (monotonic time measured, Timing of the compiled reference)
        self._compiled: dict[TaskKey, tuple[float, Timing]] = {}
        # key -> idle reference workers, oldest first, with when they idled
        self._idle: dict[TaskKey, list[tuple[float, WorkerProcess, WorkerPool]]] = {}
        # key -> its reference workers, busy or idle (at most `per_task`)
        self._live: dict[TaskKey, set[WorkerProcess]] = {}
        self._starting: dict[TaskKey, int] = {}
        self._waiters: dict[TaskKey, list[asyncio.Future[None]]] = {}

    # ---- reference workers ----

    def take(self, key: TaskKey) -> WorkerProcess | None:
        """An idle reference worker for this task and device, if one is alive and fresh enough."""
        idle = self._idle.get(key, [])
        while idle:
            since, w, pool = idle.pop()
            if w.alive() and time.monotonic() - since < REFERENCE_IDLE_S and w.frames.empty():
                return w
            self._retire(key, w, pool)
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

    def keep(self, key: TaskKey, w: WorkerProcess, pool: WorkerPool) -> None:
        """Park a reference worker that finished a job cleanly. Synchronous: it runs while a job
        is being torn down, perhaps cancelled. Closes stale ones and the oldest past the cap."""
        now = time.monotonic()
        self._idle.setdefault(key, []).append((now, w, pool))
        self._wake(key)
        parked = sorted(
            ((entry, k) for k, v in self._idle.items() if k[1] == key[1] for entry in v),
            key=lambda t: t[0][0],
        )
        excess = len(parked) - self.idle_per_device
        for entry, k in parked:
            if excess <= 0 and now - entry[0] < REFERENCE_IDLE_S:
                continue
            self._idle[k].remove(entry)
            excess -= 1
            self._retire(k, entry[1], entry[2])

    def idle_pids(self) -> list[int]:
        """Process ids of the parked reference workers (for tests and diagnostics)."""
        return [w.pid for v in self._idle.values() for _, w, _ in v if w.pid is not None]

    def _retire(self, key: TaskKey, w: WorkerProcess, pool: WorkerPool) -> None:
        """Kill a parked reference worker now and reap it in the background."""
        self.forget(key, w)
        w.kill()
        reap(pool.release(w))

    def _wake(self, key: TaskKey) -> None:
        for fut in self._waiters.pop(key, []):
            if not fut.done():
                fut.set_result(None)

    # ---- the compiled reference's timings ----

    def compiled_timing(self, key: TaskKey) -> Timing | None:
        """The compiled reference's timing for the task, if measured within the TTL."""
        hit = self._compiled.get(key)
        if hit is None or time.monotonic() - hit[0] > COMPILED_REFERENCE_TTL_S:
            return None
        return hit[1]

    def remember_compiled(self, key: TaskKey, timing: Timing) -> None:
        self._compiled[key] = (time.monotonic(), timing)

    async def aclose(self) -> None:
        """Stop keeping workers (jobs still running no longer park theirs) and release the parked."""
        self.closed = True
        idle = [(w, pool) for v in self._idle.values() for _, w, pool in v]
        self._idle.clear()
        await asyncio.gather(*(pool.release(w) for w, pool in idle), return_exceptions=True)
