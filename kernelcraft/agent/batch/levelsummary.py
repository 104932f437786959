"""A level run's figures: each task's read back from its run directory, the level's over them.

The figures are `kernelcraft level`'s (`level.score`: fast_p over all tasks, the geometric mean
over the correct ones), read back from each task's run directory, so that a task finished by an
earlier invocation counts exactly as one finished now; OUT/report.html shows them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcraft.agent.batch.levelplan import LevelOptions, Planned, read_json
from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.rundir import RunDir, write_atomic
from kernelcraft.base.errors import UsageError
from kernelcraft.level import score
from kernelcraft.report.build import from_run_dir
from kernelcraft.report.model import RunReport
from kernelcraft.schema.level import FAST_P_THRESHOLDS, FastP, TaskOutcome
from kernelcraft.schema.levelrun import (
    LevelRunSummary,
    OptimizedTask,
    TaskState,
)

REPORT_FILE = "report.html"
NO_GPU = (
    "No GPU evaluated the candidates: correctness is real (Triton's CPU interpreter), speed was not "
    "measured, so fast_p above p = 0 and the geometric-mean speedup are unknown."
)
GPU = "Timed on the GPU: each task's best kernel against PyTorch eager and torch.compile."


def _tree_report(run: RunDir) -> RunReport | None:
    if not run.tree_file.is_file():
        return None
    try:
        return from_run_dir(run.path)
    except UsageError:
        return None


@dataclass(frozen=True)
class _Record:
    """What a task's run directory holds: run.json, the summary of the tree it names (None when
    there is none or it is another tree's), the steps and, with a summary, the tree's report."""

    run: RunDir
    meta: dict[str, Any]
    summary: dict[str, Any] | None
    steps: list[dict[str, Any]]
    tree: RunReport | None

    @classmethod
    def read(cls, run: RunDir) -> _Record:
        meta = read_json(run.run_file) or {}
        summary = read_json(run.summary_file) if run.summary_file.is_file() else None
        if summary is not None and summary.get("tree_id") != meta.get("tree_id"):
            summary = None
        return cls(run, meta, summary, run.steps(), _tree_report(run) if summary is not None else None)

    @property
    def timed(self) -> bool:
        """The server timed candidates (a GPU)."""
        return bool(self.summary and self.summary.get("speedup_measured"))

    @property
    def correct(self) -> bool:
        """A correct kernel: the summary's best, else the seed's or a step's outcome."""
        if self.summary is not None:
            return self.summary.get("best") is not None
        return self.meta.get("seed_outcome") == "correct" or any(
            s.get("outcome") == "correct" for s in self.steps
        )

    @property
    def usage(self) -> dict[str, Any]:
        """The run's tokens and dollars: the summary's, else the last step's running total."""
        last = self.steps[-1].get("usage_total") if self.steps else None
        return dict((self.summary or {}).get("usage") or last or {})

    def speedups(self) -> tuple[float | None, float | None]:
        """The best kernel's speedups over eager and torch.compile, where it was timed and correct."""
        best = self.tree.node(self.tree.best_node_id) if self.tree is not None else None
        if best is None or not (self.timed and self.correct):
            return None, None
        return best.speedup_vs_eager, best.speedup_vs_compiled

    def eval_seconds(self) -> float:
        nodes = self.tree.nodes if self.tree is not None else []
        return round(sum(n.eval_seconds for n in nodes if n.eval_seconds is not None), 1)


def task_result(p: Planned, state: TaskState, message: str | None) -> OptimizedTask:
    """A task's figures, read back from its run directory (the same whether it ran now or before)."""
    record = _Record.read(RunDir(p.run_dir))
    run, usage = record.run, record.usage
    if p.this_run == "done earlier":
        message = (record.summary or {}).get("stopped_because")
    if state == "finished" and record.summary is None:  # a run that never wrote its summary did not finish
        state = "unfinished"
    eager, compiled = record.speedups()
    return OptimizedTask(
        problem_id=p.task.problem_id,
        name=p.task.name,
        run_dir=str(run.path),
        state=state,
        this_run="not run" if state == "skipped" else p.this_run,
        message=message,
        tree_id=record.meta.get("tree_id"),
        budget=record.meta.get("budget"),
        steps_done=len(record.steps),
        correct_steps=sum(1 for s in record.steps if s.get("outcome") == "correct"),
        correct=record.correct,
        timed=record.timed,
        speedup_vs_eager=eager,
        speedup_vs_compiled=compiled,
        tokens=int(usage.get("total_tokens", 0)),
        cost_usd=usage.get("cost_usd") if usage else 0.0,  # None: a model without a price
        gpu_seconds=record.eval_seconds() if record.timed else None,
        evaluation_seconds=record.eval_seconds(),
        best_kernel=str(run.best_file) if run.best_file.is_file() else None,
        report=str(run.report_file) if run.report_file.is_file() else None,
    )


def _outcome(t: OptimizedTask) -> TaskOutcome:
    """A task as `level.score` counts it."""
    return TaskOutcome(
        problem_id=t.problem_id,
        name=t.name,
        status="correct" if t.correct else "incorrect",
        speedup_vs_eager=t.speedup_vs_eager,
        speedup_vs_compiled=t.speedup_vs_compiled,
    )


def _count(tasks: Sequence[OptimizedTask], **equal: str) -> int:
    """How many tasks have every field of `equal` at its value."""
    return sum(1 for t in tasks if all(getattr(t, k) == v for k, v in equal.items()))


def summarize(
    opts: LevelOptions, base: OptimizeOptions, out: Path, tasks: Sequence[OptimizedTask]
) -> LevelRunSummary:
    """The level's figures over its tasks: fast_p and the geometric mean as `kernelcraft level`
    computes them (`level.score`), null where nothing was measured."""
    timed = any(t.timed for t in tasks)
    measured = {f.p: f for f in score.fast_p([_outcome(t) for t in tasks], timed=timed)}
    correct = [t for t in tasks if t.correct]
    costs = [t.cost_usd for t in tasks if t.cost_usd is not None]
    return LevelRunSummary(
        tasks_dir=str(opts.tasks_dir),
        out_dir=str(out),
        preset=base.preset,
        steps_per_task=base.steps,
        llm=base.llm.kind,
        model=base.llm.model,
        timed=timed,
        message=GPU if timed else NO_GPU,
        total=len(tasks),
        finished=_count(tasks, state="finished"),
        done_earlier=_count(tasks, this_run="done earlier"),
        resumed=_count(tasks, this_run="resumed"),
        correct=len(correct),
        correct_rate=len(correct) / len(tasks) if tasks else 0.0,
        fast_p=[measured.get(p, FastP(p=p)) for p in FAST_P_THRESHOLDS],
        geomean_speedup_vs_eager=score.geomean([t.speedup_vs_eager for t in correct]),
        geomean_speedup_vs_compiled=score.geomean([t.speedup_vs_compiled for t in correct]),
        tokens=sum(t.tokens for t in tasks),
        cost_usd=round(sum(costs), 4) if costs else None,
        gpu_seconds=round(sum(t.gpu_seconds or 0.0 for t in tasks), 1) if timed else None,
        tasks=list(tasks),
    )


def write_level_report(out: Path, summary: LevelRunSummary) -> str:
    """OUT/report.html: the level's figures and a row per task linking its own report."""
    from kernelcraft.report.level import render_level_html

    links = {
        t.problem_id: os.path.relpath(t.report, out) if t.report is not None else None for t in summary.tasks
    }
    path = out / REPORT_FILE
    write_atomic(path, render_level_html(summary, links))
    return str(path)
