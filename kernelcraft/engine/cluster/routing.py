"""`Router`: which evaluation actor takes a job (for `RayEvaluator`; plain Python, no Ray).

Each actor (`Slot`) runs up to `capacity` jobs at once. A job goes to a free slot, preferring one
that served the same task within `keep_s` (its local evaluator probably still keeps that task's
reference worker and compiled-reference timing, see `references.py`), then the least busy one,
then the first by name. When every live slot is full the job waits, first come first served. A
slot marked `lost` (its actor or node died) takes no job until it is `revived`; a job that must
avoid some slots (its retry) names them in `exclude`, and is refused with `InfrastructureError`
when no live slot is left to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kernelcraft.base.errors import InfrastructureError
from kernelcraft.engine.host.references import REFERENCE_IDLE_S


@dataclass
class Slot:
    """One actor as the router sees it."""

    name: str
    capacity: int = 2
    running: int = 0
    alive: bool = True
    where: str = ""  # the node it runs on, for messages
    tasks: dict[str, float] = field(default_factory=dict)  # task sha256 -> when last served

    @property
    def free(self) -> bool:
        return self.alive and self.running < self.capacity


class Router:
    def __init__(
        self,
        slots: Iterable[Slot],
        *,
        keep_s: float = REFERENCE_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slots = {s.name: s for s in slots}
        self.keep_s = keep_s
        self.clock = clock
        self._changed: asyncio.Condition | None = None

    def keeps(self, slot: Slot, task: str) -> bool:
        served = slot.tasks.get(task)
        return served is not None and self.clock() - served < self.keep_s

    def choose(self, task: str, exclude: Iterable[str] = ()) -> Slot | None:
        """The free slot a job of `task` should take now, or None when every allowed slot is full."""
        banned = set(exclude)
        free = [s for s in self.slots.values() if s.free and s.name not in banned]
        if not free:
            return None
        return min(free, key=lambda s: (not self.keeps(s, task), s.running, s.name))

    def usable(self, exclude: Iterable[str] = ()) -> list[Slot]:
        banned = set(exclude)
        return [s for s in self.slots.values() if s.alive and s.name not in banned]

    async def acquire(self, task: str, exclude: Iterable[str] = ()) -> Slot:
        """Wait for a free slot (see `choose`) and count the job on it.

        Raises:
            InfrastructureError: no live slot is left outside `exclude`.
        """
        exclude = list(exclude)
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            while True:
                if not self.usable(exclude):
                    dead = ", ".join(f"{s.name} ({s.where or 'unknown node'})" for s in self.slots.values())
                    raise InfrastructureError(
                        f"no evaluation actor is left to run the job (actors: {dead}; dead or excluded): "
                        "check the Ray cluster (`ray status`) and restart the evaluator"
                    )
                slot = self.choose(task, exclude)
                if slot is not None:
                    slot.running += 1
                    return slot
                await self._changed.wait()

    async def release(self, slot: Slot, task: str, *, served: bool) -> None:
        """The job left the slot; `served`: it finished there (so the slot now keeps the task)."""
        slot.running -= 1
        if served:
            slot.tasks[task] = self.clock()
            stale = [t for t, when in slot.tasks.items() if self.clock() - when >= self.keep_s]
            for t in stale:
                del slot.tasks[t]
        await self._notify()

    async def lost(self, slot: Slot) -> None:
        """The slot's actor died: it takes no job, and what it kept is gone."""
        slot.alive = False
        slot.tasks.clear()
        await self._notify()

    async def revived(self, slot: Slot) -> None:
        slot.alive = True
        await self._notify()

    async def _notify(self) -> None:
        if self._changed is None:
            return
        async with self._changed:
            self._changed.notify_all()
