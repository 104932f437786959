"""A level run's figures: each task's read back from its run directory, the level's over them.

The figures are `kernelcraft level`'s (`level.score`: fast_p over all tasks, the geometric mean
over the correct ones), read back from each task's run directory, so that a task finished by an
earlier invocation counts exactly as one finished now; OUT/report.html shows them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

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


def task_result(p: Planned, state: TaskState, message: str | None) -> OptimizedTask:
    """A task's figures, read back from its run directory (the same whether it ran now or before)."""
    run = RunDir(p.run_dir)
    meta = read_json(run.run_file) or {}
    summary = read_json(run.summary_file) if run.summary_file.is_file() else None
    if summary is not None and summary.get("tree_id") != meta.get("tree_id"):
        summary = None
    steps = run.steps()
    tree = _tree_report(run) if summary is not None else None
    best = tree.node(tree.best_node_id) if tree is not None else None
    timed = bool(summary and summary.get("speedup_measured"))  # the server timed candidates (a GPU)
    usage = (summary or {}).get("usage") or (steps[-1].get("usage_total") if steps else None) or {}
    seconds = [n.eval_seconds for n in tree.nodes if n.eval_seconds is not None] if tree else []
    if p.this_run == "done earlier":
        message = (summary or {}).get("stopped_because")
    correct = (
        summary.get("best") is not None
        if summary is not None
        else meta.get("seed_outcome") == "correct" or any(s.get("outcome") == "correct" for s in steps)
    )
    if state == "finished" and summary is None:  # a run that never wrote its summary did not finish
        state = "unfinished"
    return OptimizedTask(
        problem_id=p.task.problem_id,
        name=p.task.name,
        run_dir=str(run.path),
        state=state,
        this_run="not run" if state == "skipped" else p.this_run,
        message=message,
        tree_id=meta.get("tree_id"),
        budget=meta.get("budget"),
        steps_done=len(steps),
        correct_steps=sum(1 for s in steps if s.get("outcome") == "correct"),
        correct=correct,
        timed=timed,
        speedup_vs_eager=best.speedup_vs_eager if timed and best is not None and correct else None,
        speedup_vs_compiled=best.speedup_vs_compiled if timed and best is not None and correct else None,
        tokens=int(usage.get("total_tokens", 0)),
        cost_usd=usage.get("cost_usd") if usage else 0.0,  # None: a model without a price
        gpu_seconds=round(sum(seconds), 1) if timed else None,
        evaluation_seconds=round(sum(seconds), 1),
        best_kernel=str(run.best_file) if run.best_file.is_file() else None,
        report=str(run.report_file) if run.report_file.is_file() else None,
    )


def summarize(
    opts: LevelOptions, base: OptimizeOptions, out: Path, tasks: Sequence[OptimizedTask]
) -> LevelRunSummary:
    """The level's figures over its tasks: fast_p and the geometric mean as `kernelcraft level`
    computes them (`level.score`), null where nothing was measured."""
    timed = any(t.timed for t in tasks)
    outcomes = [
        TaskOutcome(
            problem_id=t.problem_id,
            name=t.name,
            status="correct" if t.correct else "incorrect",
            speedup_vs_eager=t.speedup_vs_eager,
            speedup_vs_compiled=t.speedup_vs_compiled,
        )
        for t in tasks
    ]
    measured = {f.p: f for f in score.fast_p(outcomes, timed=timed)}
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
        finished=sum(1 for t in tasks if t.state == "finished"),
        done_earlier=sum(1 for t in tasks if t.this_run == "done earlier"),
        resumed=sum(1 for t in tasks if t.this_run == "resumed"),
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
