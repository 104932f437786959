"""Kept reference workers and the compiled reference's timings (moved from `local.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from kernelcraft.base.evaluation import Timing
from kernelcraft.engine.pool import WorkerPool, WorkerProcess

_REAPING: set[asyncio.Future[Any]] = set()  # shielded reaper tasks (kept referenced until done)
REFERENCE_IDLE_S = 300.0
# torch.compile of the reference costs seconds per process; its timing for a task on a GPU is
# measured once and reused for this long (the eager reference is still timed every evaluation,
# interleaved with the candidate).
COMPILED_REFERENCE_TTL_S = 1800.0


def _reap(coro: Any) -> asyncio.Future[Any]:
    """Run a worker's clean-up in the background, kept referenced until done."""
    task = asyncio.ensure_future(coro)
    _REAPING.add(task)
    task.add_done_callback(_REAPING.discard)
    return task


class ReferencePool:
    def __init__(self, workers: int) -> None:
        self._workers = workers
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

    def idle_reference_pids(self) -> list[int]:
        """Process ids of the reference workers kept for later jobs (for tests and diagnostics)."""
        return [w.pid for v in self._idle_refs.values() for _, w, _ in v if w.pid is not None]

    async def aclose(self) -> None:
        idle = [(w, pool) for v in self._idle_refs.values() for _, w, pool in v]
        self._idle_refs.clear()
        await asyncio.gather(*(pool.release(w) for w, pool in idle), return_exceptions=True)
