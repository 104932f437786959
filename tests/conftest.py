"""Shared fixtures: one CPU `LocalEvaluator` for the session, driven from a background event loop.

Secrets are planted in the environment before its workers start, so tests can check that no
candidate ever sees them.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelcraft.base import knobs

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PLANTED_SECRETS = {
    "KC_TEST_API_KEY": "sk-planted-secret-1f9a",
    "ANTHROPIC_BASE_URL": "https://planted-secret-2b7c.example",
    "KC_TEST_DB_PASSWORD": "planted-secret-3c1d",
    # Names no denylist would catch: the worker's environment is an allowlist (box/environment.py).
    "DATABASE_URL": "postgres://kc:planted-secret-4d2e@db.internal/kc",
    "KC_TEST_SETTINGS_BLOB": "planted-secret-5e3f",
    "AWS_SESSION": "planted-secret-6f40",
}


class EvalRunner:
    """Submits jobs to one LocalEvaluator running on a private event loop thread."""

    def __init__(self) -> None:
        from kernelcraft.engine.host.local import LocalEvaluator

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.evaluator = LocalEvaluator(
            settings=knobs.settings(), workers=2, device="cpu", memory_limit_gb=2.0, protect_environ=False
        )
        self.call(self.evaluator.start())

    def call(self, coro, timeout: float = 300):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, job, progress=None):  # type: ignore[no-untyped-def]
        return self.call(self.evaluator.submit(job, progress), timeout=job.timeout_s + 240)

    def close(self) -> None:
        self.call(self.evaluator.aclose(), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def static_checks_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the static rules (static.py) in this test's jobs, so that a probe they would refuse
    reaches the dynamic check the test is about: every layer must hold on its own."""
    monkeypatch.setattr("kernelcraft.engine.source.intake.check_candidate_source", lambda *a, **k: [])


@pytest.fixture(scope="session")
def evaluator() -> Iterator[EvalRunner]:
    saved = {k: os.environ.get(k) for k in PLANTED_SECRETS}
    os.environ.update(PLANTED_SECRETS)
    runner = EvalRunner()
    try:
        yield runner
    finally:
        runner.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def job_for() -> Callable[..., object]:
    """job_for(task_path, candidate_path_or_source, **EvalJob fields)."""
    from kernelcraft.schema.evaluation import EvalJob

    def make(task: Path, candidate: Path | str, **kw: object) -> EvalJob:
        cand_src = candidate.read_text() if isinstance(candidate, Path) else candidate
        name = candidate.name if isinstance(candidate, Path) else "candidate.py"
        return EvalJob(
            task_source=task.read_text(),
            candidate_source=cand_src,
            task_name=task.name,
            candidate_name=name,
            **kw,
        )  # type: ignore[arg-type]

    return make


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Async tests (`@pytest.mark.anyio`) run on asyncio, as the server does."""
    return "asyncio"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Any]:
    """An in-process MCP client of a fresh server (its own database) that never evaluates."""
    from mcp import Client
    from server_support import NoEvaluations, settings_for

    from kernelcraft.server.app import create_server

    async with Client(create_server(settings_for(tmp_path), NoEvaluations)) as c:
        yield c


@pytest.fixture(scope="session")
def gpu_submit():  # type: ignore[no-untyped-def]
    """submit(job) -> VerifyResult on a CUDA LocalEvaluator (skips without a GPU)."""
    import asyncio

    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kernelcraft.engine.host.local import LocalEvaluator

    loop = asyncio.new_event_loop()
    ev = LocalEvaluator(settings=knobs.settings(), workers=2, device="cuda", protect_environ=False)
    loop.run_until_complete(ev.start())
    yield lambda job: loop.run_until_complete(ev.submit(job)).verify
    loop.run_until_complete(ev.aclose())
    loop.close()
