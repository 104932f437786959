"""Every run ends (issue 39 item 1): `optimize --parallel 4` against an evaluator whose timings
mimic the H200's (verifications overlap, a timing has the device alone, steps finish out of
order), one of whose evaluations never finishes. The run stops saying which limit stopped it,
keeps its steps, and a rerun with the same --out resumes the open steps and spends the budget."""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path

import pytest
from mcp import Client

from kernelcraft.agent.llm.config import LLMConfig
from kernelcraft.agent.loop.explore import optimize
from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.base.config import Settings
from kernelcraft.base.errors import KernelcraftError
from kernelcraft.engine.host.evaluator import ProgressCallback
from kernelcraft.schema.evaluation import EvalJob, EvalResult
from kernelcraft.server.app import create_server

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from bench.scripted import ScriptedEvaluator  # noqa: E402

TASK = ROOT / "examples" / "elementwise" / "task.py"
SEED = "# verdict: correct 1.0\n" + (ROOT / "examples" / "elementwise" / "seed.py").read_text()


class GpuLikeEvaluator(ScriptedEvaluator):
    """Jobs load and verify side by side for a random while, then time with the device alone (as
    `GpuLock` orders them on a GPU), so they finish out of their order; job `stuck` (0 is the seed)
    waits forever for the device, as the H200 run's last step did."""

    def __init__(self, *, stuck: int | None, seed: int) -> None:
        super().__init__(has_gpu=True)
        self.stuck = stuck
        self.rng = random.Random(seed)
        self.device = asyncio.Lock()
        self.deadlines: list[float] = []

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        n = len(self.deadlines)  # jobs in the order they came
        self.deadlines.append(job.timeout_s)
        if n == self.stuck:
            await asyncio.Event().wait()
        await asyncio.sleep(self.rng.uniform(0.01, 0.12))  # workers, loading, verification trials
        async with self.device:
            await asyncio.sleep(0.005)  # the timing, alone on the device
        return await super().submit(job, progress)


def ours(e: BaseException) -> KernelcraftError:
    """The error of ours inside the task groups' exception groups (as the CLI reports it)."""
    while not isinstance(e, KernelcraftError):
        inner = getattr(e, "exceptions", None)
        if not inner:
            raise e
        e = inner[0]
    return e


async def run_once(tmp: Path, evaluator: GpuLikeEvaluator, *, grace_s: float) -> dict:
    settings = Settings(db_path=tmp / "kc.db", eval_grace_s=grace_s)
    opts = OptimizeOptions(
        task=TASK,
        seed=tmp / "seed.py",
        steps=8,
        parallel=4,
        llm=LLMConfig(kind="none"),
        out=tmp / "run",
        db_path=tmp / "kc.db",
        progress=False,
        params={"timeout_s": 0.2},
    )
    async with Client(create_server(settings, lambda _s: evaluator)) as client:
        return await optimize(opts, session=ToolSession(client, "the test's server"))


@pytest.mark.anyio
@pytest.mark.parametrize("stuck", [5, 7])
async def test_a_parallel_run_whose_evaluation_never_ends_stops_saying_why_and_resumes(
    tmp_path: Path, stuck: int
) -> None:
    (tmp_path / "seed.py").write_text(SEED)
    hung = GpuLikeEvaluator(stuck=stuck, seed=stuck)
    with pytest.raises(BaseException) as raised:
        await asyncio.wait_for(run_once(tmp_path, hung, grace_s=0.5), 30)
    stop = ours(raised.value)
    assert "did not finish within" in str(stop)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "did not finish within" in summary["stopped_because"], summary
    assert str(stop) in summary["stopped_because"]
    assert set(hung.deadlines) == {0.2}  # the tree's deadline reached every job
    done = summary["steps_done"]
    assert done < 8

    resumed = await asyncio.wait_for(
        run_once(tmp_path, GpuLikeEvaluator(stuck=None, seed=1), grace_s=0.5), 30
    )
    assert resumed["steps_done"] == 8, resumed
    assert "budget is spent" in resumed["stopped_because"], resumed["stopped_because"]


@pytest.mark.anyio
async def test_a_parallel_run_with_steps_finishing_out_of_order_spends_its_whole_budget(
    tmp_path: Path,
) -> None:
    (tmp_path / "seed.py").write_text(SEED)
    summary = await asyncio.wait_for(
        run_once(tmp_path, GpuLikeEvaluator(stuck=None, seed=3), grace_s=0.5), 30
    )
    assert summary["steps_done"] == 8
    assert "budget is spent" in summary["stopped_because"]
