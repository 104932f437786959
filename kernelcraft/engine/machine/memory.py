"""How much memory a job needs, whether it fits the device, and the per-device ledger.

The reference worker measures the task on the meta device before it allocates anything
(`sizing.py`: `get_inputs()`, `Model`'s parameters and buffers, and `forward`'s outputs when
forward runs on meta) and reports what the device has free (`torch.cuda.mem_get_info` on a GPU,
MemAvailable on the CPU) in its `Sized` message. From those figures:

- **A process's working set** is `params + 3 x inputs + 3 x outputs`: what the harness holds at
  its peak (the reference: its private inputs, the copy it shares, the inputs it reads back, its
  outputs and the candidate's two runs' outputs when comparing; the candidate: the shared inputs,
  the clones forward runs on, two runs' outputs), times `HEADROOM` for forward's intermediates and
  the allocator's rounding, plus `PROCESS_OVERHEAD` (a CUDA context, or torch's resident
  libraries on the CPU). When forward cannot run on meta, outputs are taken to be as large as
  the inputs.
- **A job needs** the reference's working set plus the candidate's.
- **The candidate's limit** is twice its working set (at least `MIN_CANDIDATE_LIMIT`), or the
  user's `--memory-limit-gb` when given: a runaway candidate is stopped, a candidate that needs
  a workspace is not.
- **The device's capacity** for our jobs is what it has free plus what our own jobs and kept
  reference workers hold (the estimates of them), at most `USABLE_FRACTION` of its total. A job
  that needs more than `USABLE_FRACTION` of the device is refused up front (`TaskError`: exit 2,
  one line with the figures); so is one that needs more than the capacity measured with nothing
  of ours on the device (no job in flight, none reserved, no kept reference). A job that fits
  the idle device is never refused because other jobs hold memory: it waits (first the least
  recently used kept reference workers are evicted, then it waits for running jobs to end), and
  `level --jobs N` and `optimize` queue behind each other for memory that way.
- **A job alone**: the estimates are estimates (cuDNN's workspaces, torch.compile's autotuning,
  the allocator's cache), so a job that ran out of memory while other jobs of ours held the
  device is run once more with the device to itself (`LocalEvaluator._run`): it reserves
  everything, waits for the running jobs to end, and no new job starts until it is done. So is
  a job whose candidate ran out of the limit sized here (not the user's `--memory-limit-gb`):
  run alone, the candidate may use the device's room beside the reference (at most half the
  host's available RAM, which the watchdog holds it to as well). A limit of ours is never the
  candidate's failure: running out of one is `harness_limit` (`LimitOwner`, `replies.limited`);
  running out of the device's whole room, or of the user's limit, is `runtime_out_of_memory`.
- **A job's memory is ours until its processes are gone**: a killed worker frees the GPU's memory
  only when it exits, so the reservation is released after the reaping, not at the kill; a job
  that measures the device in between counts it as ours and waits, instead of being refused.

`MemoryLedger` keeps one device's reservations; only jobs (`job/workers.py`) use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from kernelcraft.base.errors import TaskError
from kernelcraft.base.failures import FailureClass, is_out_of_memory
from kernelcraft.engine.wire.protocol import Sized
from kernelcraft.schema.evaluation import EvalResult

GIB = 1024**3
HEADROOM = 1.25
PROCESS_OVERHEAD = {"cuda": int(0.75 * GIB), "cpu": int(0.5 * GIB)}
MIN_CANDIDATE_LIMIT = 2 * GIB
USABLE_FRACTION = 0.95
LimitOwner = Literal["ours", "device", "user"]
"""Who set the candidate's memory limit: the harness from the task's sizes, the device (all the
room beside the reference, run alone), or the user (`--memory-limit-gb`). Running out of "ours"
is a harness limit; of the others, the candidate's `runtime_out_of_memory`."""
IDLE_REFERENCE_SHARE = 0.25
"""Kept (idle) reference workers hold at most this share of a device's memory."""


@dataclass(frozen=True)
class TaskSize:
    """A task's sizes as measured on the meta device (bytes), and the device's memory then."""

    inputs: int
    params: int
    outputs: int
    outputs_measured: bool
    device_free: int
    device_total: int

    @classmethod
    def of(cls, sized: Sized) -> TaskSize:
        """From the reference's measurement."""
        return cls(
            sized.inputs_bytes,
            sized.params_bytes,
            sized.outputs_bytes,
            sized.outputs_measured,
            sized.device_free,
            sized.device_total,
        )

    def working_set(self, kind: str) -> int:
        """One process's peak: see the module docstring."""
        body = self.params + 3 * self.inputs + 3 * self.outputs
        return int(HEADROOM * body) + PROCESS_OVERHEAD.get(kind, 0)

    def job_need(self, kind: str, *, candidate: bool = True) -> int:
        """The reference's working set, and the candidate's unless the job runs none (`baseline`)."""
        return (2 if candidate else 1) * self.working_set(kind)

    def held_when_idle(self, kind: str) -> int:
        """What a kept reference worker holds between jobs: its rebuilt Model and its process."""
        return self.params + PROCESS_OVERHEAD.get(kind, 0)

    def candidate_limit(self, kind: str, override: int | None) -> int:
        if override:
            return override
        return max(MIN_CANDIDATE_LIMIT, 2 * self.working_set(kind))

    def figures(self) -> str:
        out = "" if self.outputs_measured else " (estimated)"
        return f"inputs {gib(self.inputs)}, parameters {gib(self.params)}, outputs {gib(self.outputs)}{out}"


def host_available() -> int:
    """The machine's available RAM (MemAvailable; 0 when unknown): the watchdog holds a candidate's
    host memory to its limit too, so a limit raised to the GPU's room stays within the host's."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n < 10 * GIB else f"{n / GIB:.0f} GiB"


def refusal(task: str, size: TaskSize, kind: str, capacity: int, *, candidate: bool = True) -> TaskError:
    where = "GPU" if kind == "cuda" else "machine's RAM"
    holders = "the reference and the candidate each hold" if candidate else "the reference holds"
    return TaskError(
        f"does not fit: a job needs about {gib(size.job_need(kind, candidate=candidate))} ({size.figures()}; "
        f"{holders} ~3 copies) but the {where} has {gib(capacity)} for jobs "
        f"({gib(size.device_free)} free of {gib(size.device_total)}); make get_inputs() smaller"
        + (" or define get_cpu_inputs()" if kind == "cpu" else "")
        + " (refused before anything ran)",
        path=task,
    )


def ran_out(outcome: EvalResult | TaskError) -> bool:
    """Whether a job's outcome is memory running out: the candidate's verdict, the reference's
    timing, or an unusable task whose reason is memory."""
    if isinstance(outcome, TaskError):
        return is_out_of_memory(str(outcome))
    if outcome.failure_class is FailureClass.RUNTIME_OUT_OF_MEMORY:
        return True
    if outcome.failure_class is FailureClass.HARNESS_LIMIT:  # a memory limit of ours, not the time's
        parts = (outcome.compile, outcome.verify, outcome.profile)
        return any(p is not None and p.evidence is not None and "memory" in p.evidence.message for p in parts)
    timed = [p for p in (outcome.profile, outcome.baseline) if p is not None and not p.available]
    return any(is_out_of_memory(p.message) for p in timed)


class MemoryLedger:
    """One device's memory: what running jobs reserved, and their wait for room.

    `idle_bytes` and `evict` are the reference pool's: what kept references hold on this device,
    and a call that evicts the least recently used of them until `n` bytes are freed (returning
    what it freed once their processes are gone)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.reserved: dict[int, int] = {}
        self.capacity: int | None = None
        self.usable: int | None = None
        """`USABLE_FRACTION` of the device: more than this never fits."""
        self.measured_alone = False
        """Whether `capacity` was measured with nothing of ours on the device. Otherwise it rests on
        the estimates of what our jobs hold, and a job it seems too small for waits for ours to
        end rather than being refused (torch.compile's workspaces, the allocator's cache: our
        processes can hold more than their estimates)."""
        self._changed: asyncio.Event = asyncio.Event()
        self._shared: set[int] = set()
        """Jobs that held a reservation while another job did."""
        self._alone_waiting = 0

    def learn(self, size: TaskSize, idle_bytes: int, others_in_flight: int = 0) -> int | None:
        """The capacity for our jobs, from a fresh measurement of the device (None: unknown).
        `others_in_flight`: other jobs submitted to this device, reserved or not yet (a job still
        measuring its task, or whose processes are still going, can hold memory no reservation
        shows); with any, the measurement is not of the device without us, so nothing is refused
        on it but a job larger than the device: it waits for them instead."""
        if not size.device_total:
            return self.capacity
        ours = sum(self.reserved.values()) + idle_bytes
        self.usable = int(size.device_total * USABLE_FRACTION)
        self.capacity = min(self.usable, size.device_free + ours)
        self.measured_alone = ours == 0 and others_in_flight == 0
        return self.capacity

    async def admit(
        self,
        job: int,
        need: int,
        refuse: Callable[[int], TaskError],
        idle_bytes: Callable[[], int],
        evict: Callable[[int], Awaitable[int]],
        *,
        alone: bool = False,
    ) -> None:
        """Reserve `need` bytes for `job`, evicting idle references or waiting for other jobs;
        raise `refuse(capacity)` when it can never fit. `alone`: the device to itself (all of it
        reserved once no other job holds any; new jobs wait behind it)."""
        self._alone_waiting += alone
        try:
            while (grant := await self._grant(need, refuse, idle_bytes, evict, alone)) is None:
                self._changed.clear()
                await self._changed.wait()
        finally:
            self._alone_waiting -= alone
            self._changed.set()
        if self.reserved:
            self._shared.update([job, *self.reserved])
        self.reserved[job] = grant

    async def _grant(
        self,
        need: int,
        refuse: Callable[[int], TaskError],
        idle_bytes: Callable[[], int],
        evict: Callable[[int], Awaitable[int]],
        alone: bool,
    ) -> int | None:
        """What to reserve for a job that needs `need` now, or None: wait for another job to end."""
        while True:
            capacity = self.capacity
            if capacity is not None and self.usable is not None and need > self.usable:
                raise refuse(min(capacity, self.usable))
            if capacity is not None and need > capacity and self.measured_alone:
                raise refuse(capacity)
            if alone:
                if self.reserved:
                    return None
                if idle_bytes() > 0:
                    await evict(idle_bytes())
                return max(need, capacity or 0)
            if self._alone_waiting:  # a job waits to run alone: nothing new starts before it
                return None
            if capacity is None:
                return need
            available = capacity - sum(self.reserved.values()) - idle_bytes()
            if need <= available:
                return need
            if idle_bytes() > 0 and await evict(need - available) > 0:
                continue
            # nothing of ours to wait for: the estimate is all we have
            return None if self.reserved else need

    def shared(self, job: int) -> bool:
        """Whether another job held a reservation while `job` held its own."""
        return job in self._shared

    def release(self, job: int) -> bool:
        """Free `job`'s reservation (once its processes are gone: `JobWorkers.release`); whether
        another job held one at the same time."""
        if self.reserved.pop(job, None) is not None:
            self._changed.set()
        shared = job in self._shared
        self._shared.discard(job)
        return shared
