"""The GPU lock and the per-device record of `LocalEvaluator`.

On a GPU, verification trials (and every other step that uses the GPU) share it with other jobs,
and a timing has it alone: `GpuLock` is a read/write lock over asyncio, fair to the writer. One
`Device` per GPU (or one for the CPU) holds its worker pools, its lock and its memory ledger. Written by
`LocalEvaluator` only; jobs take the lock through `Job.gpu_lock`.

The lock keeps its own record: every hold's mode, what it was for, when it was taken and let go
(`holds`, the last `RECORDED` of them), and the seconds held in each mode since it was made
(`held_s`). Tests read the order of a job's steps from it, and a level run says from it how much
of its time the GPU spent timing alone (`level/runner.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from kernelcraft.engine.machine.memory import MemoryLedger
from kernelcraft.engine.machine.pool import WorkerPool

RECORDED = 4096
"""The holds a lock remembers (the oldest are forgotten first)."""

Mode = Literal["shared", "exclusive"]


@dataclass(frozen=True)
class Hold:
    """One hold of the lock: its mode, what it was for, when it was taken and let go
    (`time.perf_counter()`)."""

    mode: Mode
    why: str
    start: float
    end: float

    def overlaps(self, start: float, end: float) -> bool:
        return self.start < end and start < self.end


class GpuLock:
    """Verifications share the GPU; a timing has it alone. Phase-fair: once a timing waits, new
    verifications queue behind it, and those that waited through a timing go before the next
    one. So a timing waits at most for the verifications already in (short steps), and a
    verification (a level's task loading its reference, say) for at most one timing, where
    preferring timings outright would hold every other task's next step until no timing is left
    to wait, then leave the GPU idle while they all catch up. Releasing never awaits, so a
    cancelled job cannot leave the lock held. Each hold is recorded (`holds`, `held_s`)."""

    def __init__(self) -> None:
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._readers_waiting: set[object] = set()
        self._admitted: set[object] = set()
        """Waiting verifications that a timing's end let in ahead of the timings still waiting."""
        self._waiters: list[asyncio.Future[None]] = []
        self.holds: deque[Hold] = deque(maxlen=RECORDED)
        """The last `RECORDED` holds, in the order they ended."""
        self.held_s: dict[Mode, float] = {"shared": 0.0, "exclusive": 0.0}
        """Seconds held in each mode since the lock was made (shared holds that overlap add up)."""

    def _record(self, mode: Mode, why: str, start: float) -> None:
        end = time.perf_counter()
        self.holds.append(Hold(mode, why, start, end))
        self.held_s[mode] += end - start

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
    async def shared(self, why: str = "") -> AsyncIterator[None]:
        me = object()
        self._readers_waiting.add(me)
        try:
            while self._writer or (self._writers_waiting and me not in self._admitted):
                await self._wait()
        finally:
            self._readers_waiting.discard(me)
            if me in self._admitted:
                self._admitted.discard(me)
                self._wake()  # (cancelled while let in: a timing may wait for it)
        self._readers += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self._readers -= 1
            self._record("shared", why, start)
            self._wake()

    @contextlib.asynccontextmanager
    async def exclusive(self, why: str = "") -> AsyncIterator[None]:
        self._writers_waiting += 1
        try:
            while self._writer or self._readers or self._admitted:
                await self._wait()
        finally:
            self._writers_waiting -= 1
            self._wake()
        self._writer = True
        start = time.perf_counter()
        try:
            yield
        finally:
            self._writer = False
            self._admitted |= self._readers_waiting  # they waited through this timing: they go next
            self._record("exclusive", why, start)
            self._wake()


@dataclass
class Device:
    """One GPU (or the CPU) of the evaluator: its workers, its lock and how many jobs use it."""

    kind: Literal["cuda", "cpu"]
    index: int | None
    pool: WorkerPool
    lock: GpuLock
    jobs: int = 0
    compile_pool: WorkerPool | None = None
    """CPU only: workers without the interpreter, for the compile stage (started on first use)."""
    locked: bool = True
    """Jobs take `lock` (a GPU); without a GPU nothing is timed and jobs run without it."""
    memory: MemoryLedger = field(init=False)
    """What the jobs on this device reserved of its memory (`memory.py`)."""

    def __post_init__(self) -> None:
        self.memory = MemoryLedger(self.kind)
