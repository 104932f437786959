"""Shared pieces of the MCP server tests (tests/test_server_*.py)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from bench.support import free_port, wait_healthy  # noqa: F401  (one copy: bench's)
from kernelcraft.base.config import Settings
from kernelcraft.engine.host.evaluator import Evaluator, ProgressCallback
from kernelcraft.schema.evaluation import EvalJob, EvalResult

REPO = Path(__file__).resolve().parent.parent

# The benchmark tasks of bench/tasks/, the same a load test sends.
TASKS = REPO / "bench" / "tasks"

# A tiny KernelBench-format task (a scaled residual add) and a correct Triton candidate: 400 elements,
# so the interpreter verifies it in well under a second once the workers are up.
TASK = (TASKS / "scaled_add.py").read_text()
CANDIDATE = (TASKS / "scaled_add_triton.py").read_text()


class NoEvaluations:
    """For tests that never evaluate a kernel: starting the real evaluator's worker pool would only
    cost time on a 2-core machine. Any job is a test bug, so it fails loudly."""

    has_gpu = False

    def __init__(self, settings: Settings | None = None) -> None:
        self.closed = False

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        raise AssertionError("this test server has no evaluator; use the LocalEvaluator fixture")

    async def aclose(self) -> None:
        self.closed = True


class LentEvaluator:
    """Lends one warm evaluator (a module's or a session's fixture) to a test's server: the
    server's lifespan closes what it was given, and the fixture closes the evaluator itself."""

    def __init__(self, inner: Evaluator) -> None:
        self.inner = inner

    @property
    def has_gpu(self) -> bool:
        return self.inner.has_gpu

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        return await self.inner.submit(job, progress)

    async def aclose(self) -> None:
        pass


def settings_for(tmp_path: Path) -> Settings:
    return Settings(db_path=tmp_path / "kernelcraft.db")


def failure_clients(db_path: Path) -> list[str]:
    """Who the database says wrote each failure, oldest first."""
    with sqlite3.connect(db_path) as conn:
        return [r[0] for r in conn.execute("SELECT client FROM failures ORDER BY id")]


def subprocess_env(db_path: Path, **extra: str) -> dict[str, str]:
    """The environment a `kernelcraft serve` child needs: the stdio client passes only a whitelist."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(db_path.parent)),
        "PYTHONPATH": str(REPO),
        "KERNELCRAFT_DB": str(db_path),
        "KERNELCRAFT_HOME": str(db_path.parent / "home"),
    }
    env.update(extra)
    return env
