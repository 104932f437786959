"""The results of evaluating a whole level: one `TaskOutcome` per task, and the `LevelSummary`.

A level is a folder of KernelBench-format tasks (KernelBench's `level1/` or any folder of them),
evaluated against a folder of candidates (`mode="candidates"`) or timed alone (`mode="baseline"`).
`kernelcraft level` prints these models with `--json`, the `evaluate_level` MCP tool returns the
summary, and each outcome is one line of the run's `results.jsonl`. Field descriptions are written
for a model reading the JSON schema.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kernelcraft.base.failures import FailureClass
from kernelcraft.base.targets import DEFAULT_TARGET
from kernelcraft.schema.evaluation import Timing

LevelMode = Literal["candidates", "baseline"]

TaskStatus = Literal["correct", "incorrect", "harness_limit", "missing", "task_error", "timed", "untimed"]
"""candidates: correct / incorrect (a failure class says why) / harness_limit (a limit kernelcraft
set was reached: neither correct nor the candidate's failure; the message has the figures) /
missing (no candidate file) /
task_error (the task itself is unusable). baseline: timed / untimed (no GPU, or the timing failed:
the message says which) / task_error."""

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0)


class TaskOutcome(BaseModel):
    problem_id: int = Field(description="The file's leading number.")
    name: str
    candidate: str | None = Field(default=None, description="Its file; null: missing.")
    status: TaskStatus
    compiled: bool = Field(default=False, description="Loaded, kernels compiled.")
    failure_class: FailureClass | None = None
    message: str | None = Field(default=None, description="Why it failed, or how timed.")
    error_text: str | None = Field(
        default=None, description="The failure's error text, its last 1,500 characters."
    )
    trials: str | None = Field(default=None, description="'passed / total'.")
    candidate_time: Timing | None = None
    eager: Timing | None = Field(default=None, description="The reference, eager.")
    compiled_ref: Timing | None = Field(default=None, description="The reference, torch.compile.")
    speedup_vs_eager: float | None = None
    speedup_vs_compiled: float | None = None
    floor_us: float | None = Field(default=None, description=f"Roofline floor ({DEFAULT_TARGET}).")
    device: str | None = None
    seconds: float = 0.0
    stage_seconds: dict[str, float] = Field(
        default_factory=dict, description="Where its seconds went, by stage (the evaluator's)."
    )
    mode: LevelMode = "candidates"
    timed: bool = Field(default=False, description="GPU timings asked for.")
    task_sha: str = Field(default="", description="A changed task is re-run.")
    candidate_sha: str | None = None


class FastP(BaseModel):
    """The share of ALL tasks correct and over p times faster."""

    p: float
    vs_eager: float | None = None
    vs_compiled: float | None = None


class LevelSummary(BaseModel):
    """A level run: counts, fast_p, the geometric-mean speedup and every task's outcome."""

    mode: LevelMode
    tasks_dir: str
    candidates_dir: str | None = None
    out_dir: str
    timed: bool = Field(description="Timings were taken (a GPU).")
    message: str = Field(default="", description="What the figures rest on.")
    total: int = Field(description="Tasks (after --problems).")
    correct: int = 0
    compiled: int = 0
    missing: int = 0
    task_errors: int = 0
    resumed: int = Field(default=0, description="Read from an earlier run.")
    fast_p: list[FastP] = Field(default_factory=list, description="p = 0, 0.5, 1, 1.5, 2 (0 without a GPU).")
    geomean_speedup_vs_eager: float | None = Field(default=None, description="Over the correct, timed tasks.")
    geomean_speedup_vs_compiled: float | None = None
    unmatched_candidates: list[str] = Field(
        default_factory=list, description="Candidate files that match no task of the folder."
    )
    candidates_left_out: list[str] = Field(
        default_factory=list, description="Candidates of the tasks --problems left out (not evaluated)."
    )
    files: dict[str, str] = Field(default_factory=dict, description="Written, by role.")
    seconds: float = 0.0
    jobs: int | None = Field(default=None, description="Tasks evaluated at once.")
    stage_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="The tasks evaluated in this run: their seconds summed by stage ('timing': the GPU held alone).",
    )
    tasks: list[TaskOutcome] = Field(default_factory=list)
