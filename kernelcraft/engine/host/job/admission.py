"""A job's admission: its reference worker taken, the task measured, the job admitted at the
task's sizes (for `JobWorkers` in `job/workers.py`, whose part of it `JobWorkers` here names).

The reference is a kept one (rebuilt while it was idle, `references.py`) or a fresh one, which
measures the task first (`Sized`): the job refuses a task that cannot fit the device or the
interpreter (`TaskError`, up front), reserves its memory on the device's ledger (`machine/memory.py`),
gives the candidate a memory limit sized to the task and, in the interpreter, the shrunk task
(`source/shrink.py`), and bounds what its workers may send by the task's sizes
(`wire/bounds.py`): what it learns is written to the job's `JobState` (`job/state.py`); the
processes it takes through `JobWorkers`' operations (the ones its `JobWorkers` protocol names).
Used by one `Job` at a time, through its `JobWorkers`.
"""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import AbstractAsyncContextManager
from typing import Literal, Protocol

from kernelcraft.base.errors import TaskError
from kernelcraft.engine.host.job.state import JobState
from kernelcraft.engine.host.references import Parked
from kernelcraft.engine.machine.memory import TaskSize, host_available, refusal
from kernelcraft.engine.machine.pool import WorkerPool, WorkerProcess
from kernelcraft.engine.source import divisors, reach, shrink
from kernelcraft.engine.wire import bounds as frame_bounds
from kernelcraft.engine.wire.channel import Frame
from kernelcraft.engine.wire.protocol import Msg, NextJob, Request, Sized, TaskReady


class JobWorkers(Protocol):
    """What admitting a job asks of its workers (`job.workers.JobWorkers`): operations on the
    processes; what the job learns (its measure, its limits, the deadline) goes to its `JobState`."""

    async def acquire(self, pool: WorkerPool | None = None) -> WorkerProcess: ...

    def hold(self, pool: WorkerPool, w: WorkerProcess) -> None: ...

    def set_reference(self, w: WorkerProcess, pool: WorkerPool, *, in_sync: bool) -> None: ...

    def drop_reference(self) -> None: ...

    def gpu_lock(self, *, exclusive: bool, why: str = "") -> AbstractAsyncContextManager[None]: ...

    async def load(
        self,
        w: WorkerProcess,
        role: Literal["reference", "candidate"],
        *,
        interpret: bool,
        full_size: bool = False,
    ) -> Frame: ...

    async def ask_ref(
        self, request: Request, blobs: list[bytes] | None = None, *, error_is_an_answer: bool = False
    ) -> Frame: ...

    def task_error(self, frame: Frame) -> None: ...


def size_pairs(sized: Sized) -> list[reach.Pair]:
    """The sizes a shrink changed, trial and full: its constants, the inputs' dimensions and
    element counts (what `reach.py` tries the candidate's branches on)."""
    pairs: list[reach.Pair] = [(name, new, old) for name, (old, new) in sized.shrunk.items()]
    for i, (small, full) in enumerate(zip(sized.trial_dims, sized.full_dims, strict=False)):
        if len(small) != len(full) or small == full:
            continue
        pairs += [
            (f"input {i + 1}'s dim {j}", a, b) for j, (a, b) in enumerate(zip(small, full, strict=True))
        ]
        pairs.append((f"input {i + 1}'s numel", math.prod(small), math.prod(full)))
    return [p for p in pairs if p[1] != p[2]]


async def start_reference(st: JobState, jw: JobWorkers) -> TaskReady:
    """A reference worker with the task loaded: a kept one (rebuilt while it was idle) or a
    fresh one, which measures the task first (`Sized`): the job checks it fits and reserves
    its memory (`size_up`) before the worker allocates anything."""
    sized = st.sized
    try:
        return await _start_reference(st, jw)
    except Exception as e:
        if not sized.done():
            sized.set_exception(e)
            sized.exception()  # retrieved: a job without a candidate never awaits it
        raise
    finally:
        sized.cancel()  # (no-op once set) a cancelled job's candidate stops waiting


async def _start_reference(st: JobState, jw: JobWorkers) -> TaskReady:
    t = time.perf_counter()
    key = st.key
    while True:
        kept = st.references.take(key)
        if kept is not None:
            ready = await _take_kept(st, jw, kept, t)
            if ready is not None:
                return ready
            continue
        if st.references.reserve(key):
            break
        # The task has its share of reference workers, all busy: one is soon free (a job
        # holds it a few seconds), which beats starting another process.
        await st.references.freed(key, 5.0)
    w: WorkerProcess | None = None
    try:
        w = await jw.acquire()
    finally:
        st.references.started(key, w)
    jw.set_reference(w, st.device.pool, in_sync=False)
    t = st.stage("workers", t)
    st.start_deadline()
    # The lock is taken only once a worker is held: a job waiting for a worker (or for
    # another job's reference) must not hold up a timing, which would hold up that job.
    async with jw.gpu_lock(exclusive=False):
        frame = await jw.load(w, "reference", interpret=st.interpret)
    try:
        sized: Sized | None = Sized.from_header(frame.header)
    except ValueError:
        sized = None
    if sized is not None:
        st.references.sizes[key] = sized
        if (
            sized.error is None
            and sized.shrunk_source is None
            and (sized.has_cpu_inputs or sized.elements <= shrink.SHRINK_ABOVE_ELEMENTS)
        ):  # runs at its own sizes whatever the candidate: no reference per candidate's divisors
            st.references.unshrunk.add(st.base_key)
    await size_up(st, w, sized, fresh=True)
    async with jw.gpu_lock(exclusive=False):  # building Model uses the GPU
        frame = await jw.ask_ref(NextJob())
    jw.task_error(frame)
    st.stage("reference", t)
    return TaskReady.from_header(frame.header)


async def _take_kept(st: JobState, jw: JobWorkers, kept: Parked, t: float) -> TaskReady | None:
    """Hold a kept reference worker and read its answer to the `NextJob` it got when parked;
    None when it broke meanwhile (it is killed: the caller tries another)."""
    w = kept.worker
    jw.hold(kept.pool, w)
    jw.set_reference(w, kept.pool, in_sync=True)  # it answers the `NextJob` it got when parked
    t = st.stage("workers", t)
    st.start_deadline()
    await size_up(st, w, st.references.sizes.get(st.key), fresh=False)
    try:
        frame = await asyncio.wait_for(asyncio.shield(kept.rebuilt), max(0.1, st.deadline - time.monotonic()))
    except (asyncio.TimeoutError, asyncio.CancelledError):
        if not kept.rebuilt.cancelled():
            raise
        frame = None
    if frame is not None and frame.header.get("type") == Msg.TASK_READY:
        st.stage("reference", t)
        return TaskReady.from_header(frame.header)
    w.kill()  # broken between jobs; try another, or a fresh one
    st.references.forget(st.key, w)
    jw.drop_reference()
    return None


async def size_up(st: JobState, ref: WorkerProcess, sized: Sized | None, *, fresh: bool) -> None:
    """Whether the job can run at the task's measured sizes (`TaskError` when not: too big
    for the device, or for the interpreter), its memory reserved, and what the candidate gets:
    its memory limit and the task's source (a shrunk one in the interpreter: `shrink.py`).
    `ref`: the job's reference worker, whose frames are bounded by the task's sizes too."""
    kind, override = st.device.kind, st.settings.memory_limit_bytes
    if sized is not None and sized.error is not None and st.interpret and st.spec.cpu_sizes:
        raise TaskError(
            f"--cpu-sizes: the task at the sizes given does not build: {sized.error}",
            path=st.spec.task_name,
        )
    if sized is None or sized.error is not None:
        st.memory_limit = override or (sized.device_free // 2 if sized and sized.device_free else None)
        bound_frames(st, ref, sized)
        st.sized.set_result(sized)
        return
    # Only the trials run the interpreter: compile and the roofline never refuse for its limits.
    trials = "verify" in st.spec.stages
    if st.interpret and trials and not st.full_size and not sized.has_cpu_inputs:
        shrink.check_interpreter_work(
            sized.elements, sized.shapes, st.spec.task_name, sized.params_bytes, sized.not_shrunk
        )
        if sized.not_shrunk:
            st.notes.append(f"ran at the task's own sizes: {sized.not_shrunk}"[:600])
    size = TaskSize.of(sized)
    index, ledger = st.device.index, st.device.memory
    if fresh:
        ledger.learn(size, st.references.idle_bytes(index), others_in_flight=max(0, st.device.jobs - 1))
    st.held_when_idle = size.held_when_idle(kind)
    candidate = not st.spec.baseline_only  # a baseline job runs the reference alone
    waited, t = time.monotonic(), time.perf_counter()
    await ledger.admit(
        id(st),
        size.job_need(kind, candidate=candidate),
        lambda capacity: refusal(st.spec.task_name, size, kind, capacity, candidate=candidate),
        lambda: st.references.idle_bytes(index),
        lambda n: st.references.evict(index, n),
        alone=st.alone,
    )
    st.deadline += time.monotonic() - waited  # waiting for other jobs' memory is not this job's time
    st.stage("memory_wait", t)
    st.memory_limit = size.candidate_limit(kind, override)
    if st.alone and not override:  # run again with room: what the device has beside the reference
        room = ledger.reserved.get(id(st), 0) - size.working_set(kind)
        st.memory_limit = max(st.memory_limit, min(room, host_available() // 2))
        st.device_bound = st.memory_limit >= room
    if sized.shrunk_source is not None:
        st.task_source = sized.shrunk_source
        st.notes.append(shrink.describe(sized.shrunk, sized.shapes, given=bool(st.spec.cpu_sizes)))
        st.notes.extend(reach.note(st.spec.candidate_source, size_pairs(sized)))
        said = divisors.note(st.divisors, sized.multiples, sized.multiples_dropped, st.untiled, st.flat)
        if said is not None:  # a warning comes first, as the probe's below
            st.notes.insert(0 if said.startswith("warning:") else len(st.notes), said)
    if sized.probe is not None:
        # A warning that the trials cannot tell a kernel from one that ignores its inputs
        # comes first: a reader of a passing verdict must not miss it.
        at = 0 if sized.probe.startswith("warning:") else len(st.notes)
        st.notes.insert(at, sized.probe[:800])
    bound_frames(st, ref, sized)
    st.sized.set_result(sized)


def bound_frames(st: JobState, ref: WorkerProcess, sized: Sized | None) -> None:
    """Bound what the job's workers may send by the task's measured sizes (`wire/bounds.py`):
    the candidate's as it loads, the reference's (`ref`) now."""
    if sized is None or sized.error is not None or not sized.outputs_measured:
        st.bounds = frame_bounds.unsized(st.memory_limit)
    else:
        st.bounds = frame_bounds.for_task(sized.inputs_bytes, sized.outputs_bytes, sized.params_bytes)
    ref.bounds = st.bounds
