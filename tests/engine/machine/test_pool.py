"""The worker pool and its zygote: forked workers start fast, stay as clean as spawned ones, and
the pool falls back to spawning when the zygote is gone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from kernelcraft.base import knobs
from kernelcraft.base.knobs import EngineSettings, Knobs
from kernelcraft.engine.machine.pool import WorkerError, WorkerPool, WorkerProcess

pytestmark = pytest.mark.slow  # every test starts worker processes


async def _job_env(w: WorkerProcess) -> dict[str, str]:
    """Ask a worker (as a reference) to build a task whose Model reports its process state."""
    task = """
import os, tempfile, torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x
def get_inputs():
    return [torch.zeros(1)]
def get_init_inputs():
    return []
import json
from torch._inductor.runtime.cache_dir_utils import cache_dir
# (on stdout, its log: its own directory is a tmpfs the parent does not see, box/mounts.py)
print("STATE=" + json.dumps({"env": dict(os.environ), "tmp": tempfile.gettempdir(), "cwd": os.getcwd(),
      "sid": os.getsid(0), "pid": os.getpid(), "inductor": cache_dir()}), flush=True)
"""
    await w.send({"role": "reference", "workdir": str(w.dir), "task_source": task, "seed0": 42})
    frame = await asyncio.wait_for(w.frames.get(), 60)
    assert frame is not None and frame.header["type"] == "sized", frame  # the task is loaded, measured
    import json

    line = next(x for x in w.tail(64_000).splitlines() if x.startswith("STATE="))
    return json.loads(line.removeprefix("STATE="))


@pytest.mark.anyio
async def test_workers_are_forked_from_the_zygote_with_their_own_session_home_and_no_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELCRAFT_TEST_SECRET_TOKEN", "s3cr3t")
    # What inductor's first use leaves in a process's environment (a zygote's, or the server's)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "shared-inductor-cache"))
    async with contextlib.aclosing(
        WorkerPool(2, "cpu", tmp_path, interpret=True, settings=knobs.settings())
    ) as pool:
        a = await pool.acquire()
        b = await pool.acquire()
        assert a.forked and b.forked and a.pid != b.pid
        # what its start cost, by phase, for `kernelcraft -v` (the H200's slow first verdict)
        assert set(a.info["startup"]) == {"box", "imports", "device"}
        assert all(v >= 0 for v in a.info["startup"].values())
        state = await _job_env(a)
        # its own session and process group, led by the process the pool started (which, in a
        # PID namespace, is the worker's keeper: box/__init__.py)
        assert os.getsid(a.info["pid"]) == os.getpgid(a.info["pid"]) == a.pid
        assert state["env"]["HOME"] == state["env"]["TMPDIR"] == str(a.dir)
        assert state["tmp"] == str(a.dir) and state["cwd"] == str(a.dir)
        assert state["env"]["TRITON_CACHE_DIR"] == str(a.dir / "triton-cache")
        assert state["inductor"] == str(a.dir / "inductor-cache")  # the reference's torch.compile
        assert state["env"]["TRITON_INTERPRET"] == "1"
        assert not any("SECRET" in k or "s3cr3t" in v for k, v in state["env"].items())
        await pool.release(a)
        await pool.release(b)


@pytest.mark.anyio
async def test_a_forked_workers_exit_status_names_the_signal(tmp_path: Path) -> None:
    async with contextlib.aclosing(
        WorkerPool(1, "cpu", tmp_path, interpret=True, settings=knobs.settings())
    ) as pool:
        w = await pool.acquire()
        assert w.forked and w.pid is not None
        os.kill(w.pid, signal.SIGTERM)
        assert await w.wait_exit(10) == -signal.SIGTERM
        assert w.exit_description() == "killed by signal SIGTERM"
        assert await w.frames.get() is None  # the channel closed with it
        await pool.release(w)


@pytest.mark.anyio
async def test_forked_workers_start_in_a_fraction_of_a_spawned_workers_time(tmp_path: Path) -> None:
    # Not a speed target (bench/ measures those): a check that the pool really forks, i.e. that
    # six more workers do not each pay torch's import.
    async with contextlib.aclosing(
        WorkerPool(1, "cpu", tmp_path, interpret=True, settings=knobs.settings())
    ) as pool:
        await pool.release(await pool.acquire())  # the zygote has imported everything
        start = time.perf_counter()
        for _ in range(6):
            await pool.release(await pool.acquire())
        elapsed = time.perf_counter() - start
    assert elapsed < 6 * 1.0


@pytest.mark.anyio
async def test_the_pool_spawns_workers_when_the_zygote_dies(tmp_path: Path) -> None:
    async with contextlib.aclosing(
        WorkerPool(1, "cpu", tmp_path, interpret=True, settings=knobs.settings())
    ) as pool:
        first = await pool.acquire()
        assert first.forked
        zygote = pool._zygote
        assert zygote is not None and zygote._proc is not None
        os.killpg(zygote._proc.pid, signal.SIGKILL)
        await pool.release(first)
        for _ in range(50):
            if zygote.broken:
                break
            await asyncio.sleep(0.1)
        assert zygote.broken
        w = await pool.acquire()
        while w.forked:  # one may have been forked before the zygote died
            await pool.release(w)
            w = await pool.acquire()
        assert w.alive() and w.info["type"] == "ready"
        await pool.release(w)


@pytest.mark.anyio
async def test_kernelcraft_zygote_off_spawns_every_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    off = Knobs(engine=EngineSettings(zygote=False))
    async with contextlib.aclosing(WorkerPool(1, "cpu", tmp_path, interpret=True, settings=off)) as pool:
        w = await pool.acquire()
        assert not w.forked and w.alive()
        await pool.release(w)


def test_a_one_off_commands_workers_leave_dynamo_and_inductor_to_the_job_that_needs_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernelcraft.engine.machine import pool
    from kernelcraft.engine.worker import main as worker

    lazy = pool.base_env("cuda", 0, interpret=False, lazy=True, settings=knobs.settings())
    kept = pool.base_env("cuda", 0, interpret=False, lazy=False, settings=knobs.settings())
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # a GPU pool's (and the compile pool's)
    monkeypatch.setenv("KERNELCRAFT_WORKER_IMPORTS", lazy["KERNELCRAFT_WORKER_IMPORTS"])
    assert [name for name, _ in worker.import_stages(cuda=True)] == ["base", "triton"]
    assert [name for name, _ in worker.import_stages(cuda=False)] == ["base", "triton"]
    assert "KERNELCRAFT_WORKER_IMPORTS" not in kept
    # where workers cannot read the zygote's bytecode (base/bytecode.py), dynamo stays in the zygote
    monkeypatch.setenv("KERNELCRAFT_WORKER_IMPORTS", "lazy-inductor")
    assert [name for name, _ in worker.import_stages(cuda=True)] == ["base", "dynamo", "triton"]
    monkeypatch.delenv("KERNELCRAFT_WORKER_IMPORTS")
    assert [name for name, _ in worker.import_stages(cuda=True)] == ["base", "dynamo", "triton", "inductor"]
    assert [name for name, _ in worker.import_stages(cuda=False)] == ["base", "dynamo", "triton"]
    # the interpreter's pools compile nothing: Triton's compiler is not warmed for them
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert [name for name, _ in worker.import_stages(cuda=False)] == ["base", "dynamo"]


@pytest.mark.anyio
async def test_a_worker_that_could_not_start_for_want_of_memory_is_retried_and_the_zygote_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # KernelBench level 1 on the H200, eight jobs at once: a forked worker's CUDA context found the
    # GPU full. That is the device's state, not the zygote's: the next start may fork again.
    real = WorkerProcess.wait_ready
    failed: list[WorkerProcess] = []

    async def first_runs_out(self: WorkerProcess, timeout: float) -> None:
        if not failed:
            failed.append(self)
            raise WorkerError(
                "a worker exited while starting: torch.AcceleratorError: CUDA error: out of memory"
            )
        await real(self, timeout)

    monkeypatch.setattr(WorkerProcess, "wait_ready", first_runs_out)
    monkeypatch.setattr("kernelcraft.engine.machine.pool.OUT_OF_MEMORY_RETRY_S", 0.0)
    async with contextlib.aclosing(
        WorkerPool(1, "cpu", tmp_path, interpret=True, lazy=True, settings=knobs.settings())
    ) as pool:
        w = await asyncio.wait_for(pool.acquire(), 60)
        assert failed and w is not failed[0] and w.alive()
        assert w.forked and pool._zygote is not None and pool._zygote.broken is None
        await pool.release(w)
