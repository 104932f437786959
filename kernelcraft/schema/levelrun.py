"""The results of optimising a whole level: one `OptimizedTask` per task, and the `LevelRunSummary`.

`kernelcraft optimize FOLDER` runs the tree search on every task of a folder (a KernelBench
level) and prints a `LevelRunSummary` (`--json`); `report.level` draws it as the level's page.
The figures are KernelBench's and AdaExplore's: the fraction of tasks with a correct kernel,
fast_p (`schema.level.FastP`: the share of ALL tasks correct and more than p times faster, against
eager and against `torch.compile`) and the geometric-mean speedup of the correct tasks, with the
tokens, dollars and GPU seconds spent. A figure that was not measured is null, never 0: without
a GPU no speedup exists, so fast_p above p = 0 and the geometric mean are null; a model without a
price leaves the dollars null.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kernelcraft.schema.level import FastP

TaskState = Literal["finished", "unfinished", "skipped", "error"]
"""finished: its search ran to its end (the tree's budget spent); unfinished: it stopped short
(interrupted, or a token or dollar limit) and a rerun resumes it; skipped: it could not start
(the message says why: no seed kernel for `--llm none`, a task that does not parse); error: the
LLM or the server failed during its run (a rerun resumes it)."""

ThisRun = Literal["ran", "resumed", "done earlier", "not run"]
"""What this invocation did with the task: started it, resumed an earlier run of it, found it
finished by an earlier run (and skipped it), or could not start it."""


class OptimizedTask(BaseModel):
    """One task of a level run: its search, its best kernel's speed and what it cost."""

    problem_id: int = Field(description="The file's leading number (its position without one).")
    name: str = Field(description="The task's file name.")
    run_dir: str = Field(description="Its optimize run directory (`kernelcraft report` redraws it).")
    state: TaskState
    this_run: ThisRun
    message: str | None = Field(default=None, description="Why it stopped, or why it could not start.")
    tree_id: int | None = None
    budget: int | None = Field(default=None, description="Candidates its tree may evaluate.")
    steps_done: int = 0
    correct_steps: int = Field(default=0, description="Steps whose candidate was correct.")
    correct: bool = Field(default=False, description="A correct kernel was found.")
    timed: bool = Field(default=False, description="Its candidates were timed (a GPU).")
    speedup_vs_eager: float | None = Field(
        default=None, description="The best kernel's, over PyTorch eager; null: not measured."
    )
    speedup_vs_compiled: float | None = Field(
        default=None, description="The best kernel's, over torch.compile; null: not measured."
    )
    tokens: int = 0
    cost_usd: float | None = Field(default=None, description="Null: the model has no price.")
    gpu_seconds: float | None = Field(
        default=None,
        description="Wall time of its evaluations on the GPU (each from submission); null without a GPU.",
    )
    evaluation_seconds: float = Field(default=0.0, description="The same on whatever evaluated them.")
    best_kernel: str | None = Field(default=None, description="Its best_kernel.py, if any.")
    report: str | None = Field(default=None, description="Its report.html, if written.")


AdaptState = Literal["finished", "unfinished", "skipped"]


class LearntRule(BaseModel):
    """An active rule whose count grew during the adapt phase."""

    text: str
    count: int
    gained: int = Field(description="Failures the phase added to it.")
    status: str


class AdaptPhase(BaseModel):
    """AdaExplore's Adapt before the level's Explore: short explores that grow the one rulebook
    (`kernelcraft adapt`'s loop), run once per level run (a rerun skips a finished phase)."""

    state: AdaptState = Field(
        description="finished; unfinished (stopped short: a rerun resumes it); skipped (why: message)."
    )
    this_run: ThisRun
    message: str | None = Field(default=None, description="Why it was skipped or stopped.")
    tasks_dir: str | None = None
    steps_per_task: int = 0
    tasks: int = Field(default=0, description="Tasks it explored.")
    rules_learnt: list[LearntRule] = Field(
        default_factory=list, description="Active rules whose counts grew, most grown first."
    )
    tokens: int = Field(default=0, description="Its explores' and its duplicate judge's.")
    cost_usd: float | None = Field(default=0.0, description="Null: the model has no price.")


class LevelRunSummary(BaseModel):
    """A level run: per task and in all, the correct rate, fast_p, the geometric mean and costs."""

    tasks_dir: str
    out_dir: str
    preset: str
    steps_per_task: int
    llm: str
    model: str | None = None
    timed: bool = Field(description="Speedups were measured (a GPU evaluated the candidates).")
    message: str = Field(default="", description="What the figures rest on.")
    total: int = Field(description="Tasks (after --problems).")
    finished: int = 0
    done_earlier: int = Field(default=0, description="Tasks an earlier invocation had finished.")
    resumed: int = Field(default=0, description="Tasks an earlier invocation had started.")
    correct: int = Field(default=0, description="Tasks with a correct kernel.")
    correct_rate: float = Field(default=0.0, description="correct / total.")
    fast_p: list[FastP] = Field(
        default_factory=list,
        description="p = 0, 0.5, 1, 1.5, 2; above p = 0 null when no speedup was measured.",
    )
    geomean_speedup_vs_eager: float | None = Field(
        default=None, description="Over the correct, timed tasks; null: none measured."
    )
    geomean_speedup_vs_compiled: float | None = None
    tokens: int = 0
    cost_usd: float | None = Field(default=None, description="Null when no task's model has a price.")
    gpu_seconds: float | None = Field(default=None, description="Null without a GPU.")
    seconds: float = Field(default=0.0, description="This invocation's wall time.")
    report: str | None = Field(default=None, description="The level's page, linking each task's report.")
    adapt: AdaptPhase | None = Field(
        default=None, description="The adapt phase before the explore (its figures apart from the tasks')."
    )
    tasks: list[OptimizedTask] = Field(default_factory=list)

    def fast(self, p: float) -> FastP | None:
        return next((f for f in self.fast_p if f.p == p), None)
