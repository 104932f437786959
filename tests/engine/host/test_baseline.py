"""A baseline job's order on the GPU, read from the GPU lock's own record: the inputs share the GPU,
torch.compile's compile holds no lock (another job times meanwhile), one hold alone covers the
compiled model's first run and the timing rounds; rounds after the first reuse its estimates; the
reference is not parked. Scripted reference workers on a pretend GPU: no process, no CUDA."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from kernelcraft.engine.host.job.run import Job
from kernelcraft.engine.host.job.state import CandidateSettings
from kernelcraft.engine.host.job.timing import MIN_PROFILE_ROUNDS
from kernelcraft.engine.host.references import ReferencePool
from kernelcraft.engine.machine.gpulock import Device, GpuLock, Hold
from kernelcraft.engine.wire.channel import Frame
from kernelcraft.engine.wire.protocol import (
    GpuWanted,
    InputsMade,
    RooflineCounted,
    Samples,
    Sized,
    TaskReady,
    Timed,
    Warm,
)
from kernelcraft.schema.evaluation import EvalJob, EvalResult

REC = {"tensor": {"dtype": "float32", "shape": [4]}}
EAGER_US, COMPILED_US = 200.0, 150.0  # over samples.SPREAD_CHECK_ABOVE_US: the spread counts


class ScriptedReference:
    """Answers a baseline job as the reference worker does: a gated compile says `gpu_wanted`
    after `compile_s` and `warm` once told `run_compiled`; a timing round takes `round_s`. It
    notes each request with the time it came (`got`)."""

    def __init__(self, pid: int, compile_s: float, round_s: float, compile_error: str | None) -> None:
        self.pid = pid
        self.dir = Path("/nonexistent")
        self.info = {"type": "ready", "pid": pid, "device": "cuda:0 (NVIDIA H200)"}
        self.frames: asyncio.Queue[Frame | None] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.got: list[tuple[str, float]] = []
        self.compile_s, self.round_s, self.compile_error = compile_s, round_s, compile_error
        self.killed_for: str | None = None
        self._answering: set[asyncio.Task[None]] = set()
        self.spread = 0.0
        """Each round's samples spread evenly ±spread around its median (an IQR of about spread)."""
        self.drift = 0.0
        """Each round's median is this fraction above the last's."""
        self.rounds = 0
        self.compiling_until: asyncio.Future[Any] | None = None
        """Set: the compile lasts until this is done (at most 5 s), not `compile_s`."""

    async def send(self, header: dict[str, Any], blobs: list[bytes] | None = None) -> None:
        self.sent.append(header)
        self.got.append((str(header.get("op", "load")), time.perf_counter()))
        task = asyncio.ensure_future(self._answer(header))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer(self, h: dict[str, Any]) -> None:
        op = h.get("op")
        if op is None:
            answer = Sized(
                inputs_bytes=16,
                outputs_bytes=16,
                outputs_measured=True,
                elements=4,
                device_free=80 << 30,
                device_total=140 << 30,
            ).to_header()
        elif op == "next":
            answer = TaskReady(input_sets=1).to_header()
        elif op == "inputs":
            answer = InputsMade(inputs=[REC]).to_header()
        elif op == "roofline":
            answer = RooflineCounted(roofline=None, error="not counted here").to_header()
        elif op == "warmup_reference":
            if self.compiling_until is not None:
                await asyncio.wait([self.compiling_until], timeout=5.0)
            else:
                await asyncio.sleep(self.compile_s)
            if self.compile_error is not None:  # dynamo gave up before the gate
                answer = Warm(error=self.compile_error).to_header()
            else:
                answer = GpuWanted(compile_s=self.compile_s).to_header()
        elif op == "run_compiled":
            answer = Warm().to_header()
        elif op == "time_reference":
            await asyncio.sleep(self.round_s)
            scale = (1 + self.drift) ** self.rounds
            self.rounds += 1
            compiled = _samples(COMPILED_US * scale, self.spread) if h["compiled"] else None
            answer = Timed(eager=_samples(EAGER_US * scale, self.spread), compiled=compiled).to_header()
        else:
            raise AssertionError(f"a baseline job asked its reference for {op!r}")
        await self.frames.put(Frame(answer))

    def times(self, op: str) -> list[float]:
        return [t for o, t in self.got if o == op]

    def alive(self) -> bool:
        return self.killed_for is None

    def kill(self, reason: str | None = None) -> None:
        self.killed_for = self.killed_for or reason or "killed"

    def rss_bytes(self) -> int:
        return 0

    def limit(self, extra_tasks: int, memory_bytes: int | None) -> None:
        pass

    def out_of_memory(self) -> bool:
        return False

    async def wait_exit(self, timeout: float) -> int | None:
        return 0


def _samples(us: float, spread: float = 0.0) -> Samples:
    times = [us * (1 - spread + 2 * spread * i / 19) for i in range(20)]
    return Samples(times_us=times, method="cuda_events", sets=1, estimate_us=us)


class ScriptedPool:
    """Hands out one scripted reference per job, in order: (compile_s, round_s, compile_error)."""

    def __init__(self, *scripts: tuple[float, float, str | None]) -> None:
        self.scripts = list(scripts)
        self.started: list[ScriptedReference] = []
        self.released: list[ScriptedReference] = []
        self.first_compiles_until: asyncio.Future[Any] | None = None
        self.first_spread = self.first_drift = 0.0

    async def acquire(self) -> ScriptedReference:
        self.started.append(ScriptedReference(len(self.started) + 1, *self.scripts[len(self.started)]))
        if len(self.started) == 1:
            first = self.started[0]
            first.compiling_until, first.spread, first.drift = (
                self.first_compiles_until,
                self.first_spread,
                self.first_drift,
            )
        return self.started[-1]

    async def release(self, w: ScriptedReference) -> None:
        self.released.append(w)


async def _baselines(
    pool: ScriptedPool, jobs: int, *, first_compiles_until_last_ends: bool = False, alone: bool = False
) -> tuple[list[EvalResult], list[Job], GpuLock, ReferencePool]:
    lock = GpuLock()
    device = Device("cuda", 0, pool, lock)  # type: ignore[arg-type]
    refs = ReferencePool(per_task=2, idle_per_device=4)
    settings = CandidateSettings(memory_limit_bytes=None, sandbox=True)
    made = [
        Job(
            EvalJob(task_source=f"task {i}", stages=["baseline"]),
            device,
            refs,
            settings,
            set(),
            None,
            alone=alone,
        )
        for i in range(jobs)
    ]
    until = asyncio.get_running_loop().create_future()
    if first_compiles_until_last_ends:
        pool.first_compiles_until = until
    results = []
    for i, job in enumerate(made):  # one after the other, as a level's slots take them
        results.append(asyncio.ensure_future(job.run()))
        if i + 1 < jobs:
            await asyncio.sleep(0.005)
    if first_compiles_until_last_ends:
        results[-1].add_done_callback(lambda _: until.set_result(None))
    done = await asyncio.gather(*results)
    assert not lock.busy()
    return list(done), made, lock, refs


def _within(t: float, holds: list[Hold]) -> bool:
    return any(h.start <= t <= h.end for h in holds)


def _span(job: Job, name: str) -> tuple[float, float]:
    (found,) = [(a, b) for n, a, b in job.state.spans if n == name]
    return found


@pytest.mark.anyio
async def test_a_baseline_compiles_the_reference_while_another_job_times_alone() -> None:
    # job 1's compile lasts until job 2 has ended (5 s at most): job 2 must time meanwhile
    pool = ScriptedPool((0.0, 0.01, None), (0.01, 0.01, None))
    results, jobs, lock, _ = await _baselines(pool, 2, first_compiles_until_last_ends=True)
    for r in results:
        assert r.baseline is not None and r.baseline.available, r.baseline
        assert r.baseline.reference_compiled is not None
    alone = [h for h in lock.holds if h.mode == "exclusive"]
    assert [h.why for h in alone] == ["baseline timing"] * 2
    first_timing = alone[0]
    compile_start, compile_end = _span(jobs[0], "reference_compile")
    assert compile_start <= first_timing.start and first_timing.end <= compile_end, (
        "job 1's torch.compile kept job 2 from timing"
    )
    assert first_timing.end <= _span(jobs[1], "timing")[1]  # (that hold was job 2's)
    shared = [h for h in lock.holds if h.mode == "shared"]
    for ref in pool.started:
        # the compiled model's first run and every round: alone
        for t in ref.times("run_compiled") + ref.times("time_reference"):
            assert _within(t, alone), (ref.pid, ref.got)
        assert len(ref.times("time_reference")) == MIN_PROFILE_ROUNDS
        # the inputs and the roofline's counted run share the GPU; the compile holds nothing of it
        for t in ref.times("inputs") + ref.times("roofline"):
            assert _within(t, shared) and not _within(t, alone)
        (asked,) = ref.times("warmup_reference")
        assert not _within(asked, shared)
    assert lock.held_s["exclusive"] == pytest.approx(sum(h.end - h.start for h in alone))


@pytest.mark.anyio
async def test_baseline_rounds_after_the_first_reuse_its_estimates_and_the_reference_is_not_parked() -> None:
    pool = ScriptedPool((0.002, 0.002, None))
    (result,), _, _, refs = await _baselines(pool, 1)
    assert result.baseline is not None and result.baseline.available
    (ref,) = pool.started
    rounds = [h for h in ref.sent if h.get("op") == "time_reference"]
    assert "estimates" not in rounds[0]
    assert all(h["estimates"] == {"eager": EAGER_US, "compiled": COMPILED_US} for h in rounds[1:])
    assert [h for h in ref.sent if h.get("op") == "warmup_reference"] == [
        {"op": "warmup_reference", "gated": True}
    ]
    assert refs.idle_pids() == [] and ref.killed_for is not None and pool.released == [ref]
    assert {"reference_compile", "timing"} <= set(result.stage_seconds)


@pytest.mark.anyio
async def test_a_reference_torch_compile_cannot_handle_is_timed_eager_alone_with_the_reason() -> None:
    pool = ScriptedPool((0.0, 0.0, "Unsupported: a data-dependent branch"))
    (result,), _, lock, _ = await _baselines(pool, 1)
    b = result.baseline
    assert b is not None and b.available and b.reference_compiled is None and b.reference_eager is not None
    assert "torch.compile failed: Unsupported: a data-dependent branch" in b.message
    (ref,) = pool.started
    assert ref.times("run_compiled") == []
    assert all(h["compiled"] is False for h in ref.sent if h.get("op") == "time_reference")
    alone = [h for h in lock.holds if h.mode == "exclusive"]
    assert all(_within(t, alone) for t in ref.times("time_reference"))


@pytest.mark.anyio
async def test_torch_compile_out_of_memory_beside_other_jobs_asks_for_a_run_alone_and_alone_keeps_eager() -> (
    None
):
    from kernelcraft.engine.machine.memory import ran_out

    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    (result,), _, _, _ = await _baselines(ScriptedPool((0.0, 0.0, oom)), 1)
    b = result.baseline
    assert b is not None and not b.available and "torch.compile's first run ran out of memory" in b.message
    assert ran_out(result)  # the evaluator runs it again with the device to itself
    (alone,), _, _, _ = await _baselines(ScriptedPool((0.0, 0.0, oom)), 1, alone=True)
    b = alone.baseline
    assert b is not None and b.available and b.reference_eager is not None and b.reference_compiled is None
    assert "torch.compile failed: OutOfMemoryError" in b.message


@pytest.mark.anyio
async def test_a_baseline_whose_samples_spread_stops_once_its_median_is_steady() -> None:
    """Samples spread ±5% (IQR over the 2% target) but the same median every round: three rounds,
    where a profile's rule asks for all ten; a median that keeps moving asks for more."""
    from kernelcraft.engine.host.job.timing import MAX_PROFILE_ROUNDS

    pool = ScriptedPool((0.0, 0.0, None))
    pool.first_spread = 0.05
    (steady,), _, _, _ = await _baselines(pool, 1)
    assert (
        steady.baseline is not None and f"{MIN_PROFILE_ROUNDS} interleaved rounds" in steady.baseline.message
    )
    assert pool.started[0].rounds == MIN_PROFILE_ROUNDS
    pool = ScriptedPool((0.0, 0.0, None))
    pool.first_spread, pool.first_drift = 0.05, 0.02  # 2% a round: never steady
    (moving,), _, _, _ = await _baselines(pool, 1)
    assert moving.baseline is not None and MIN_PROFILE_ROUNDS < pool.started[0].rounds <= MAX_PROFILE_ROUNDS
