"""The Ray evaluator: routing (no Ray), the secrets an actor may hold, and on a small local Ray
cluster of two simulated nodes: verdicts equal to the local evaluator's, an actor killed under a
job, and a parallel optimize run."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelcraft.base import knobs
from kernelcraft.base.errors import InfrastructureError
from kernelcraft.base.knobs import EngineSettings, Knobs
from kernelcraft.engine.cluster.routing import Router, Slot

ROOT = Path(__file__).resolve().parents[3]
CHEATS = ROOT / "tests" / "cheats"
TASK, OTHER = "a" * 64, "b" * 64


# ------------------------------------------------------------------------------- the router


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def router(n: int = 3, capacity: int = 1, clock: Clock | None = None) -> Router:
    return Router([Slot(f"actor-{i}", capacity=capacity) for i in range(n)], clock=clock or Clock())


@pytest.mark.anyio
async def test_the_router_sends_a_task_back_to_the_actor_that_keeps_its_reference() -> None:
    r = router(capacity=2)
    first = await r.acquire(TASK)
    await r.release(first, TASK, served=True)
    other = await r.acquire(OTHER)  # another task: the least busy actor, first by name
    assert (first.name, other.name) == ("actor-0", "actor-0")
    await r.release(other, OTHER, served=True)
    r.slots["actor-0"].tasks.pop(TASK)
    r.slots["actor-2"].tasks[TASK] = r.clock()
    assert (await r.acquire(TASK)).name == "actor-2"


@pytest.mark.anyio
async def test_the_router_prefers_a_free_actor_to_waiting_for_the_busy_one_that_keeps_the_task() -> None:
    clock = Clock()
    r = router(n=2, clock=clock)
    keeper = await r.acquire(TASK)
    await r.release(keeper, TASK, served=True)
    busy = await r.acquire(TASK)
    assert busy.name == "actor-0"
    assert (await r.acquire(TASK)).name == "actor-1"  # actor-0 is full: the free one, not a wait
    clock.now += 10_000  # past the reference's idle time: actor-0 keeps nothing any more
    await r.release(busy, TASK, served=False)
    assert not r.keeps(r.slots["actor-0"], TASK)


@pytest.mark.anyio
async def test_the_router_queues_jobs_when_every_actor_is_full_and_refuses_when_none_is_alive() -> None:
    r = router(n=1)
    slot = await r.acquire(TASK)
    waiter = asyncio.ensure_future(r.acquire(OTHER))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    await r.release(slot, TASK, served=True)
    assert (await asyncio.wait_for(waiter, 1)).name == "actor-0"
    with pytest.raises(InfrastructureError, match="no evaluation actor is left"):
        await r.acquire(TASK, exclude=["actor-0"])
    await r.lost(slot)
    assert slot.tasks == {}
    with pytest.raises(InfrastructureError, match="no evaluation actor is left"):
        await r.acquire(TASK)
    await r.revived(slot)
    slot.running = 0
    assert (await r.acquire(TASK)).name == "actor-0"


# ------------------------------------------------------------- several steps for one client


@pytest.mark.anyio
async def test_next_hands_one_client_a_second_step_while_status_re_offers_its_oldest(client: Any) -> None:
    task = (CHEATS / "task_scale.py").read_text()

    async def step(args: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool("search_tree_step", args)
        assert not result.is_error, result.content
        return dict(result.structured_content)

    started = await step({"action": "start", "reference_code": task, "budget": 3})
    tree, first = started["start"]["tree"]["id"], started["start"]["next_step"]["node_id"]
    second = (await step({"action": "next", "tree_id": tree}))["status"]["next_step"]["node_id"]
    third = (await step({"action": "next", "tree_id": tree}))["status"]["next_step"]["node_id"]
    assert len({first, second, third}) == 3
    again = await step({"action": "status", "tree_id": tree})
    assert again["status"]["next_step"]["node_id"] == first
    held = await step({"action": "next", "tree_id": tree})  # all three of the budget are out
    assert held["status"]["next_step"] is None and "held" in held["status"]["next_step_note"]


# ------------------------------------------------------------------ environments and imports


def test_a_local_ray_cluster_starts_without_the_servers_secrets_or_our_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernelcraft.engine.cluster.ray_evaluator import _environment_for_ray

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-planted")
    monkeypatch.setenv("KERNELCRAFT_TOKENS", "t=alice")
    monkeypatch.setenv("KERNELCRAFT_SANDBOX", "off")
    with _environment_for_ray():
        assert "ANTHROPIC_API_KEY" not in os.environ and "KERNELCRAFT_TOKENS" not in os.environ
        assert "KERNELCRAFT_SANDBOX" not in os.environ  # the actors get the driver's as an argument
        assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    assert os.environ["ANTHROPIC_API_KEY"] == "sk-planted" and os.environ["KERNELCRAFT_TOKENS"] == "t=alice"
    assert os.environ["KERNELCRAFT_SANDBOX"] == "off"


def test_an_actor_refuses_to_start_where_the_environment_holds_a_servers_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernelcraft.base.errors import UsageError
    from kernelcraft.engine.cluster.ray_evaluator import EvalActor

    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted")
    with pytest.raises(UsageError, match="holds OPENAI_API_KEY.*ray start"):
        EvalActor(workers=1, memory_limit_gb=1.0, engine=EngineSettings())


def test_a_worker_under_a_ray_actor_gets_the_actors_physical_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelcraft.engine.machine.pool import base_env

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,3")
    assert base_env("cuda", 1, interpret=False, settings=Knobs())["CUDA_VISIBLE_DEVICES"] == "3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert base_env("cuda", 1, interpret=False, settings=Knobs())["CUDA_VISIBLE_DEVICES"] == "1"


@pytest.mark.slow
def test_the_default_local_evaluator_never_imports_ray() -> None:
    code = (
        "import sys, kernelcraft.cli, kernelcraft.server.app\n"
        "from kernelcraft.base.config import Settings\n"
        "from kernelcraft.server.state import default_evaluator_factory\n"
        "default_evaluator_factory(Settings(db_path='x.db'))\n"
        "assert 'ray' not in sys.modules, 'ray was imported'"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------- on a Ray cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """Two simulated nodes of two CPUs each (one actor each), started as the evaluator would.
    The tests that use it hold one evaluator at a time: two would not fit."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from kernelcraft.engine.cluster.ray_evaluator import _environment_for_ray

    small = {"num_cpus": 2, "object_store_memory": 80 * 1024**2}
    with _environment_for_ray():
        c = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
        c.add_node(**small)
        ray.init(address=c.address, log_to_driver=False)
    try:
        yield c.address
    finally:
        ray.shutdown()
        c.shutdown()


# Every engine setting away from its default, each in another accepted spelling (issue 39 item 2,
# issue 40 item 1): what the driver read is what every actor runs with. One actor, started once;
# tests/base/test_knobs.py reads every spelling of every setting through the prestart, a pool and
# the box, and checks that each gives the one `EngineSettings` this hands the actor.
AWAY_FROM_DEFAULTS = {
    "KERNELCRAFT_SANDBOX": " Off ",
    "KERNELCRAFT_SANDBOX_PIDNS": "NO",
    "KERNELCRAFT_SANDBOX_IDENTITY": " Root",
    "KERNELCRAFT_ZYGOTE": "false",
    "KERNELCRAFT_SHRINK": "0",
    "KERNELCRAFT_PREBUILT": "OFF",
    "KERNELCRAFT_BYTECODE_CACHE": "No",
}


@pytest.mark.slow
def test_a_ray_actor_runs_with_the_engine_settings_the_driver_read_however_they_were_spelt(
    cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelcraft.base.knobs import load
    from kernelcraft.engine.cluster.ray_evaluator import RayEvaluator

    assert set(AWAY_FROM_DEFAULTS) == set(EngineSettings.env_names())
    for name, text in AWAY_FROM_DEFAULTS.items():
        monkeypatch.setenv(name, text)
    driver = knobs.settings()  # this test is the driver's entry point
    assert all(getattr(driver.engine, f) != getattr(EngineSettings(), f) for f in vars(EngineSettings()))
    loop = Loop()
    ev = RayEvaluator(settings=driver, actors=1, workers=1, memory_limit_gb=1.0)
    try:
        loop.call(ev.start())
        (seen,) = ev.described.values()
    finally:
        loop.call(ev.aclose(), timeout=120)
        loop.close()
    # the actor's own environment holds none of them: they came as the actor's argument
    assert load(seen["settings"]).engine == driver.engine
    assert seen["start_modes"] == ["spawn (KERNELCRAFT_ZYGOTE=off)"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_optimize_keeps_two_steps_in_flight_on_the_ray_evaluator(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelcraft.agent.llm.config import LLMConfig
    from kernelcraft.agent.loop.explore import optimize
    from kernelcraft.agent.loop.options import OptimizeOptions

    monkeypatch.setenv("KERNELCRAFT_HOME", str(tmp_path / "home"))
    out, db = tmp_path / "run", tmp_path / "kc.db"
    opts = OptimizeOptions(
        task=ROOT / "examples" / "elementwise" / "task.py",
        steps=4,
        parallel=2,
        llm=LLMConfig(kind="none"),
        out=out,
        db_path=db,
        progress=False,
        evaluator="ray",
        ray_address=cluster,
    )
    summary = await optimize(opts)
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert summary["steps_done"] == 4 and len(steps) == 4
    configs = {json.dumps(s["tuner"]["config"], sort_keys=True) for s in steps}
    assert len(configs) == 4  # parallel lanes never propose the same configuration
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT id, created_at, evaluated_at FROM nodes WHERE kind != 'root' AND seed = 0 ORDER BY id"
        ).fetchall()
    assert len(rows) == 4
    # the second step was handed out before the first had its verdict: two were in flight
    assert rows[1][1] < rows[0][2]


class Loop:
    """A private event loop thread, so that a test can kill an actor while a job runs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def spawn(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Any, timeout: float = 300) -> Any:
        return self.spawn(coro).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def ray_eval(cluster: str) -> Iterator[tuple[Any, Loop]]:
    from kernelcraft.engine.cluster.ray_evaluator import RayEvaluator

    loop = Loop()
    ev = RayEvaluator(settings=knobs.settings(), workers=2, memory_limit_gb=2.0)
    loop.call(ev.start())
    try:
        yield ev, loop
    finally:
        loop.call(ev.aclose(), timeout=120)
        loop.close()


def verdict(result: Any) -> tuple[Any, ...]:
    v = result.verify
    return (v.correct, v.status, v.failure_class, v.trials, v.trials_passed, v.input_sets, v.device)


@pytest.mark.slow
def test_ray_verdicts_equal_the_local_evaluators_and_a_task_stays_with_its_actor(
    ray_eval: tuple[Any, Loop], evaluator: Any, job_for: Any
) -> None:
    ev, loop = ray_eval
    assert len(ev.handles) == 2 and not ev.has_gpu
    jobs = [
        job_for(CHEATS / "task_scale.py", CHEATS / name, trials=1) for name in ("good.py", "nan_output.py")
    ]
    seen: list[str] = []

    async def progress(fraction: float, message: str) -> None:
        seen.append(message)

    remote = [loop.call(ev.submit(job, progress)) for job in jobs]
    local = [evaluator.submit(job) for job in jobs]
    assert [verdict(r) for r in remote] == [verdict(r) for r in local]
    assert [r.verify.status for r in remote] == ["passed", "nan_or_inf"]
    assert seen, "the actor's progress reached the driver"
    (task, actor), (task2, actor2) = list(ev.placements)[-2:]
    assert task == task2 and actor == actor2  # the second job went where the reference is kept


@pytest.mark.slow
def test_an_actor_killed_under_a_job_is_an_infrastructure_fault_and_the_job_runs_again_elsewhere(
    ray_eval: tuple[Any, Loop], job_for: Any
) -> None:
    ev, loop = ray_eval
    seen: list[str] = []

    async def progress(fraction: float, message: str) -> None:
        seen.append(message)

    # correct, and slow enough (a second per forward) to be killed under
    slow = (
        (CHEATS / "good.py")
        .read_text()
        .replace("    def forward(self, x):\n", "    def forward(self, x):\n        time.sleep(1.0)\n")
    )
    job = job_for(CHEATS / "task_scale.py", "import time\n" + slow, trials=2)
    running = loop.spawn(ev.submit(job, progress))
    deadline = time.monotonic() + 120
    while not seen and time.monotonic() < deadline:  # the job has reached its actor's evaluator
        time.sleep(0.1)
    busy = [s for s in ev.router.slots.values() if s.running]
    assert len(busy) == 1 and not running.done(), "the job is running on one actor"
    import ray

    ray.kill(ev.handles[busy[0].name], no_restart=True)
    result = running.result(240)
    assert result.verify.correct  # a verdict from the other actor, not from the dead one
    assert ev.placements[-1][1] != busy[0].name
    assert len(ev.faults) == 1 and f"{busy[0].name} on" in ev.faults[0] and "died" in ev.faults[0]
    assert any("died under the job (not a verdict)" in m for m in seen)
    assert not busy[0].alive
