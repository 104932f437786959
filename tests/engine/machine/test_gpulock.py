"""The GPU lock: timings alone, verifications together, phase-fair between them, and its record of
every hold (`engine/machine/gpulock.py`). Asyncio only: no process, no GPU."""

from __future__ import annotations

import asyncio
import random

import pytest

from kernelcraft.engine.machine.gpulock import GpuLock


async def _hold(lock: GpuLock, mode: str, name: str, seconds: float, log: list[str]) -> None:
    async with lock.exclusive(name) if mode == "exclusive" else lock.shared(name):
        log.append(f"+{name}")
        await asyncio.sleep(seconds)
        log.append(f"-{name}")


@pytest.mark.anyio
async def test_a_verification_that_waited_through_a_timing_goes_before_the_next_timing() -> None:
    lock, log = GpuLock(), []
    t1 = asyncio.ensure_future(_hold(lock, "exclusive", "t1", 0.03, log))
    await asyncio.sleep(0.005)
    t2 = asyncio.ensure_future(_hold(lock, "exclusive", "t2", 0.01, log))  # waits for t1
    await asyncio.sleep(0.005)
    v1 = asyncio.ensure_future(_hold(lock, "shared", "v1", 0.02, log))  # waits through t1
    await asyncio.sleep(0.03)  # t1 over, v1 in
    v2 = asyncio.ensure_future(_hold(lock, "shared", "v2", 0.0, log))  # came while t2 waits: after it
    await asyncio.gather(t1, t2, v1, v2)
    assert log == ["+t1", "-t1", "+v1", "-v1", "+t2", "-t2", "+v2", "-v2"]
    assert not lock.busy() and [h.why for h in lock.holds] == ["t1", "v1", "t2", "v2"]


@pytest.mark.anyio
async def test_a_verification_let_in_but_cancelled_holds_no_timing_back() -> None:
    lock, log = GpuLock(), []
    t1 = asyncio.ensure_future(_hold(lock, "exclusive", "t1", 0.02, log))
    await asyncio.sleep(0.005)
    t2 = asyncio.ensure_future(_hold(lock, "exclusive", "t2", 0.0, log))
    v1 = asyncio.ensure_future(_hold(lock, "shared", "v1", 0.0, log))
    await asyncio.sleep(0.005)
    assert not t1.done()
    await asyncio.sleep(0.02)  # t1 has ended: v1 is let in ahead of t2, then cancelled before it runs
    v1.cancel()
    await asyncio.wait_for(asyncio.gather(t1, t2, v1, return_exceptions=True), 1.0)
    assert "+t2" in log and not lock.busy()


@pytest.mark.anyio
async def test_under_random_load_no_timing_overlaps_anything_and_everything_ends() -> None:
    """200 holds, a third timings, some cancelled while waiting or holding: the lock's record has no
    timing beside another hold, none waits forever, nothing is left held."""
    rng = random.Random(7)
    lock, log = GpuLock(), []
    tasks = []
    for i in range(200):
        mode = "exclusive" if rng.random() < 0.33 else "shared"
        tasks.append(asyncio.ensure_future(_hold(lock, mode, f"{mode[0]}{i}", rng.random() * 0.003, log)))
        if rng.random() < 0.1:
            asyncio.get_running_loop().call_later(rng.random() * 0.01, tasks[-1].cancel)
        await asyncio.sleep(rng.random() * 0.001)
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10.0)
    assert not lock.busy() and not lock._admitted and not lock._readers_waiting
    holds = list(lock.holds)
    for h in holds:
        if h.mode == "exclusive":
            assert not [o for o in holds if o is not h and o.overlaps(h.start, h.end)], h
    assert lock.held_s["exclusive"] == pytest.approx(
        sum(h.end - h.start for h in holds if h.mode == "exclusive")
    )
