"""A fair queue by client in front of a team server's evaluator.

The evaluator takes jobs first come, first served: on a team server one client's six slow jobs
made another client's one job wait 87 s behind them. `FairQueue` wraps the evaluator of a server
with more than one client (`state.open_app_state`): at most `slots` jobs are in the evaluator at
once (about what it runs in parallel), and when one ends the next job to enter is the waiting one
whose client has the fewest jobs in flight, then the fewest recent device-seconds (seconds its
jobs held the evaluator, halved every `HALF_LIFE_S`), then the oldest. A client alone on the
server still gets every slot; a second client's job enters as soon as any slot frees.

The client is the one the request belongs to (`auth.client_name`, read when the job is
submitted); a waiting job reports its place through the job's progress callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from kernelcraft.engine import Evaluator, ProgressCallback
from kernelcraft.schema.evaluation import EvalJob, EvalResult

HALF_LIFE_S = 600.0
"""How fast a client's device-seconds are forgotten."""
DEFAULT_SLOTS = 4
"""Slots for an evaluator that does not say how many jobs it runs at once (`parallel_jobs`)."""


@dataclass
class _Usage:
    in_flight: int = 0
    seconds: float = 0.0
    """Device-seconds, decayed to `at`."""
    at: float = 0.0

    def decayed(self, now: float) -> float:
        return self.seconds * math.pow(0.5, max(0.0, now - self.at) / HALF_LIFE_S)


class FairQueue:
    """An `Evaluator` that admits jobs to `inner` fairly by client (see the module docstring)."""

    def __init__(
        self,
        inner: Evaluator,
        client: Callable[[], str],
        slots: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.client = client
        self.slots = max(1, slots or int(getattr(inner, "parallel_jobs", DEFAULT_SLOTS)))
        self.clock = clock
        self.usage: dict[str, _Usage] = {}
        self.waiting: list[tuple[str, int, asyncio.Future[None]]] = []
        self.running = 0
        self._serial = itertools.count()

    @property
    def has_gpu(self) -> bool:
        return self.inner.has_gpu

    async def aclose(self) -> None:
        await self.inner.aclose()

    def in_flight(self, client: str) -> int:
        return self.usage[client].in_flight if client in self.usage else 0

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        who = self.client()
        await self._enter(who, progress)
        started = self.clock()
        try:
            return await self.inner.submit(job, progress)
        finally:
            self._leave(who, self.clock() - started)

    async def _enter(self, who: str, progress: ProgressCallback | None) -> None:
        usage = self.usage.setdefault(who, _Usage(at=self.clock()))
        if self.running < self.slots and not self.waiting:
            self.running += 1
            usage.in_flight += 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (who, next(self._serial), granted)
        self.waiting.append(entry)
        if progress is not None:
            ahead = sum(1 for w, _s, _f in self.waiting if w != who) + self.running
            with contextlib.suppress(Exception):  # a broken callback must not lose the job
                await progress(0.0, f"queued behind {ahead} jobs (a fair share per client)")
        try:
            await granted
        except asyncio.CancelledError:
            if entry in self.waiting:
                self.waiting.remove(entry)
            elif granted.done() and not granted.cancelled():
                self._leave(who, 0.0)  # granted as it was cancelled: hand the slot on
            raise

    def _leave(self, who: str, seconds: float) -> None:
        now = self.clock()
        usage = self.usage[who]
        usage.seconds, usage.at = usage.decayed(now) + max(0.0, seconds), now
        usage.in_flight -= 1
        self.running -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Admit waiting jobs while slots are free: fewest in flight, least recent device time, oldest."""
        now = self.clock()
        while self.running < self.slots and self.waiting:
            best = min(
                self.waiting,
                key=lambda e: (self.usage[e[0]].in_flight, self.usage[e[0]].decayed(now), e[1]),
            )
            self.waiting.remove(best)
            who, _serial, granted = best
            if granted.done():  # cancelled while waiting
                continue
            self.running += 1
            self.usage[who].in_flight += 1
            granted.set_result(None)
