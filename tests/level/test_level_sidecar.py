"""`kernelcraft level` reads each task's CPU sizes from its sidecar file (`foo.cpu.json`) as
`verify` does, and a sidecar it cannot read is that task's error, not the run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from kernelcraft.base.errors import TaskError
from kernelcraft.level.runner import LevelRun, evaluate_task
from kernelcraft.level.tasks import LevelTask
from kernelcraft.schema.evaluation import EvalJob

TASK = (
    "import torch\n\nbatch_size = 4096\ndim = 512\n\n\nclass Model(torch.nn.Module):\n"
    "    def forward(self, x):\n        return torch.relu(x)\n\n\n"
    "def get_inputs():\n    return [torch.rand(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n"
)
CANDIDATE = (
    "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
)


class Recording:
    """An evaluator that keeps each job it is given and answers as for a task it cannot build."""

    def __init__(self) -> None:
        self.jobs: list[EvalJob] = []

    async def submit(self, job: EvalJob, *args: Any, **kwargs: Any) -> Any:
        self.jobs.append(job)
        raise TaskError("recorded")


def _evaluate(tmp_path: Path, sidecar: str | None, *, baseline: bool) -> tuple[Any, Recording]:
    task = tmp_path / "19_ReLU.py"
    task.write_text(TASK)
    cand = tmp_path / "19_ReLU_new.py"
    cand.write_text(CANDIDATE)
    if sidecar is not None:
        (tmp_path / "19_ReLU.cpu.json").write_text(sidecar)
    run = LevelRun(
        tasks_dir=tmp_path, out_dir=tmp_path / "out", candidates_dir=None if baseline else tmp_path
    )
    evaluator = Recording()
    level_task = LevelTask(19, task, None if baseline else cand)
    source = None if baseline else CANDIDATE

    async def go() -> Any:
        return await evaluate_task(evaluator, run, level_task, TASK, source, timed=False)  # type: ignore[arg-type]

    return anyio.run(go), evaluator


def test_level_gives_each_job_the_cpu_sizes_of_its_tasks_sidecar_file(tmp_path: Path) -> None:
    for baseline in (False, True):
        _outcome, evaluator = _evaluate(tmp_path, '{"batch_size": 16, "dim": 32}', baseline=baseline)
        (job,) = evaluator.jobs
        assert job.cpu_sizes == {"batch_size": 16, "dim": 32}
    (tmp_path / "none").mkdir()
    _outcome, evaluator = _evaluate(tmp_path / "none", None, baseline=False)
    (job,) = evaluator.jobs
    assert job.cpu_sizes is None


def test_a_sidecar_level_cannot_read_is_that_tasks_error_naming_the_file(tmp_path: Path) -> None:
    outcome, evaluator = _evaluate(tmp_path, '{"batch_size": "16"}', baseline=False)
    assert evaluator.jobs == []
    assert outcome.status == "task_error" and "19_ReLU.cpu.json" in outcome.message
    assert "size constants" in outcome.message
