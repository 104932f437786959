"""How many tasks a level runs at once, the workers it keeps warm for them, and where its tasks'
seconds went (pure functions of `level/runner.py`)."""

from __future__ import annotations

from pathlib import Path

from kernelcraft.level.runner import LevelRun, default_jobs, stage_totals, workers_for
from kernelcraft.schema.level import TaskOutcome


def test_a_level_runs_half_the_cores_at_once_from_two_to_eight() -> None:
    assert [default_jobs(c) for c in (1, 2, 5, 8, 16, 64)] == [2, 2, 2, 4, 8, 8]
    assert LevelRun(Path("t"), Path("o")).jobs == default_jobs()


def test_a_baseline_keeps_one_worker_a_task_warm_and_candidates_two() -> None:
    assert workers_for(LevelRun(Path("t"), Path("o"), jobs=8)) == 10  # the reference alone, two starting
    assert workers_for(LevelRun(Path("t"), Path("o"), candidates_dir=Path("c"), jobs=8)) == 16


def test_a_level_sums_its_tasks_seconds_by_stage_largest_first() -> None:
    def outcome(i: int, stages: dict[str, float]) -> TaskOutcome:
        return TaskOutcome(problem_id=i, name=f"{i}.py", status="timed", stage_seconds=stages)

    totals = stage_totals(
        [outcome(1, {"timing": 1.25, "reference_compile": 3.0}), outcome(2, {"timing": 0.5})]
    )
    assert totals == {"reference_compile": 3.0, "timing": 1.75}
    assert list(totals) == ["reference_compile", "timing"]
