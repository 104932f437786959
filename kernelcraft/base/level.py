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

from kernelcraft.base.evaluation import Timing
from kernelcraft.base.failures import FailureClass

LevelMode = Literal["candidates", "baseline"]

TaskStatus = Literal["correct", "incorrect", "missing", "task_error", "timed", "untimed"]
"""candidates: correct / incorrect (a failure class says why) / missing (no candidate file) /
task_error (the task itself is unusable). baseline: timed / untimed (no GPU, or the timing failed:
the message says which) / task_error."""

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0)


class TaskOutcome(BaseModel):
    """One task's verdict and timings."""

    problem_id: int = Field(description="KernelBench's problem id: the task file's leading number.")
    name: str = Field(description="The task's file name, e.g. '19_ReLU.py'.")
    candidate: str | None = Field(default=None, description="The candidate's file name; None if missing.")
    status: TaskStatus
    compiled: bool = Field(
        default=False, description="The candidate loaded and its kernels compiled (KernelBench's 'compiled')."
    )
    failure_class: FailureClass | None = None
    message: str | None = Field(default=None, description="Why it failed, or how it was timed.")
    trials: str | None = Field(default=None, description="Correctness trials passed, 'passed / total'.")
    candidate_time: Timing | None = None
    eager: Timing | None = Field(default=None, description="The reference in eager mode.")
    compiled_ref: Timing | None = Field(default=None, description="The reference under torch.compile.")
    speedup_vs_eager: float | None = None
    speedup_vs_compiled: float | None = None
    floor_us: float | None = Field(
        default=None, description="The roofline floor on the roofline target (H200: sm_90a), in µs."
    )
    device: str | None = None
    seconds: float = Field(default=0.0, description="Wall time of this task's evaluation.")
    mode: LevelMode = "candidates"
    timed: bool = Field(default=False, description="Asked for GPU timings (False without a GPU).")
    task_sha: str = Field(default="", description="sha256 of the task source: a changed task is re-run.")
    candidate_sha: str | None = Field(default=None, description="sha256 of the candidate source.")


class FastP(BaseModel):
    """fast_p at one threshold: the fraction of ALL tasks that are correct and more than p times
    faster than the baseline (missing candidates and failures count against)."""

    p: float
    vs_eager: float | None = Field(default=None, description="Against the reference in eager mode.")
    vs_compiled: float | None = Field(default=None, description="Against the reference under torch.compile.")


class LevelSummary(BaseModel):
    """A level run: counts, fast_p, the geometric-mean speedup and every task's outcome."""

    mode: LevelMode
    tasks_dir: str
    candidates_dir: str | None = None
    out_dir: str
    timed: bool = Field(description="True when timings were taken (a GPU); without one, verdicts only.")
    message: str = Field(default="", description="What the figures rest on, e.g. that timings need a GPU.")
    total: int = Field(description="Tasks in the level (after any --problems selection).")
    correct: int = 0
    compiled: int = 0
    missing: int = 0
    task_errors: int = 0
    resumed: int = Field(default=0, description="Tasks whose outcome was read from an earlier run.")
    fast_p: list[FastP] = Field(
        default_factory=list, description="Per threshold p (0, 0.5, 1, 1.5, 2; only p=0 without a GPU)."
    )
    geomean_speedup_vs_eager: float | None = Field(
        default=None, description="Geometric mean of the speedup over the correct, timed tasks."
    )
    geomean_speedup_vs_compiled: float | None = None
    unmatched_candidates: list[str] = Field(
        default_factory=list, description="Candidate files that match no task (not evaluated)."
    )
    files: dict[str, str] = Field(default_factory=dict, description="What the run wrote, by role.")
    seconds: float = 0.0
    tasks: list[TaskOutcome] = Field(default_factory=list)
