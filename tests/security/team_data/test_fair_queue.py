"""Threat: on a team server one client's slow jobs starve another's (six slow jobs made another
client's one job wait 87 s). A team server's evaluator sits behind a fair queue by client
(`server/fairness.py`): jobs in flight per client, then recent device-seconds (docs/security.md,
"Server state and clients"). A scripted evaluator whose jobs end when the test says so stands in
for slow jobs: no sleeps, every wait bounded."""

from __future__ import annotations

import asyncio
import contextvars
from pathlib import Path

import pytest

from kernelcraft.schema.evaluation import EvalJob, EvalResult
from kernelcraft.server.fairness import FairQueue

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="local")


class Held:
    """An evaluator whose jobs run until `finish(tag)`; records the order they started in."""

    has_gpu = False

    def __init__(self) -> None:
        self.started: list[str] = []
        self.ends: dict[str, asyncio.Event] = {}

    async def submit(self, job: EvalJob, progress: object = None) -> EvalResult:
        tag = job.candidate_name
        self.started.append(tag)
        self.ends[tag] = asyncio.Event()
        await self.ends[tag].wait()
        return EvalResult()

    def finish(self, tag: str) -> None:
        self.ends[tag].set()

    async def aclose(self) -> None:
        pass


def _job(tag: str) -> EvalJob:
    return EvalJob(task_source="x", candidate_source="y", candidate_name=tag)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def _submit_as(queue: FairQueue, who: str, tag: str) -> EvalResult:
    WHO.set(who)
    return await queue.submit(_job(tag))


@pytest.mark.anyio
async def test_one_clients_six_slow_jobs_do_not_make_anothers_job_wait_behind_them() -> None:
    inner = Held()
    queue = FairQueue(inner, WHO.get, slots=2)
    tasks = [asyncio.create_task(_submit_as(queue, "alice", f"a{i}")) for i in range(6)]
    await _settle()
    bob = asyncio.create_task(_submit_as(queue, "bob", "b0"))
    await _settle()
    assert inner.started == ["a0", "a1"]  # alice alone took every slot
    inner.finish("a0")
    await _settle()
    assert inner.started == ["a0", "a1", "b0"]  # bob's job is next, not alice's four others
    for tag in ("a1", "b0", "a2", "a3", "a4", "a5"):
        await _settle()
        inner.finish(tag)
    await asyncio.wait_for(asyncio.gather(*tasks, bob), 5)
    assert sorted(inner.started) == ["a0", "a1", "a2", "a3", "a4", "a5", "b0"]
    assert queue.running == 0 and not queue.waiting


@pytest.mark.anyio
async def test_between_clients_with_as_many_jobs_in_flight_the_one_that_used_less_device_time_goes_first() -> (
    None
):
    now = [0.0]
    inner = Held()
    queue = FairQueue(inner, WHO.get, slots=1, clock=lambda: now[0])
    first = asyncio.create_task(_submit_as(queue, "alice", "a0"))
    await _settle()
    now[0] += 120.0  # alice's job held the evaluator for two minutes
    waiting = [
        asyncio.create_task(_submit_as(queue, "alice", "a1")),
        asyncio.create_task(_submit_as(queue, "carol", "c0")),
    ]
    await _settle()
    inner.finish("a0")
    await _settle()
    assert inner.started == ["a0", "c0"]  # carol (no device time) before alice's second job
    inner.finish("c0")
    await _settle()
    inner.finish("a1")
    await asyncio.wait_for(asyncio.gather(first, *waiting), 5)


@pytest.mark.anyio
async def test_a_job_cancelled_while_it_waits_gives_up_its_place_and_no_slot_leaks() -> None:
    inner = Held()
    queue = FairQueue(inner, WHO.get, slots=1)
    running = asyncio.create_task(_submit_as(queue, "alice", "a0"))
    await _settle()
    gone = asyncio.create_task(_submit_as(queue, "bob", "b0"))
    await _settle()
    gone.cancel()
    await _settle()
    inner.finish("a0")
    await asyncio.wait_for(running, 5)
    assert queue.running == 0 and not queue.waiting and inner.started == ["a0"]
    late = asyncio.create_task(_submit_as(queue, "bob", "b1"))
    await _settle()
    assert inner.started == ["a0", "b1"]
    inner.finish("b1")
    await asyncio.wait_for(late, 5)


@pytest.mark.anyio
async def test_a_team_servers_evaluator_is_behind_the_fair_queue_and_a_single_clients_is_not(
    tmp_path: Path,
) -> None:
    from kernelcraft.base.config import Settings
    from kernelcraft.server.state import open_app_state

    settings = Settings(db_path=tmp_path / "kc.db")
    async with open_app_state(settings, lambda _s: Held(), clients=2) as team:
        assert isinstance(team.evaluator, FairQueue) and team.search.evaluator is team.evaluator
    async with open_app_state(settings, lambda _s: Held(), clients=1) as alone:
        assert isinstance(alone.evaluator, Held)
