"""A level in one command: `kernelcraft optimize FOLDER` — the explore loop over every task of a folder.

    summary = await optimize_level(LevelOptions(tasks_dir, run=OptimizeOptions(...), problems={1, 19}))

The tasks are found as `kernelcraft level` finds them (`level.tasks.find_tasks`: the folder's
`*.py`, numbered by KernelBench's leading problem id; `*_seed.py` are the tasks' seed kernels,
not tasks). Each task is one `optimize` run (`explore.py`, unchanged) in its own run directory,
`OUT/<task file stem>/`, with its own search tree; `tasks_parallel` of them run at once over one
session to one server, so they share its evaluator and its database, and so one rulebook. The
figures are `kernelcraft level`'s (`level.score`: fast_p over all tasks, the geometric mean over
the correct ones), read back from each task's run directory, so that a task finished by an
earlier invocation counts exactly as one finished now.

Resumable: a task whose run directory holds a finished run (its summary, for the tree its run.json
names, stopped by the tree's budget) is skipped; one whose run directory names a tree is resumed
(`optimize` re-offers the step in flight); the others start. `level.json` records the folder and
the database, so a rerun with the same `--out` finds the same trees.

Only this module writes OUT's own files (`level.json`, `summary.json`, `report.html`); each
task's directory belongs to its run. The figures come from `level.score`: its pure functions of
outcomes are this module's one import from `kernelcraft.level`, with `level.tasks`' file names
(`pyproject.toml` lets the agent import these two and nothing else of the level package).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from kernelcraft.agent.adapt import AdaptOptions, adapt, discover_tasks, rule_counts
from kernelcraft.agent.explore import OptimizeOptions, optimize
from kernelcraft.agent.judge import ModelJudge, judge_for
from kernelcraft.agent.llm import Usage, load_dotenv
from kernelcraft.agent.rundir import RunDir, write_atomic
from kernelcraft.agent.runloop import sha256_of
from kernelcraft.agent.session import ToolSession, open_session
from kernelcraft.base.errors import KernelcraftError, UsageError
from kernelcraft.base.level import FAST_P_THRESHOLDS, FastP, TaskOutcome
from kernelcraft.base.levelrun import (
    AdaptPhase,
    LearntRule,
    LevelRunSummary,
    OptimizedTask,
    TaskState,
    ThisRun,
)
from kernelcraft.base.presets import preset_config
from kernelcraft.level import score
from kernelcraft.level.tasks import LevelTask, find_tasks
from kernelcraft.report.build import from_run_dir
from kernelcraft.report.model import RunReport

LEVEL_FILE = "level.json"
ADAPT_FILE = "adapt.json"  # the adapt phase: the rule counts it started from, its figures once done
ADAPT_DIR = "adapt"  # its tasks' run directories
NO_MODEL_TO_ADAPT = (
    "no model to distil rules from failures (--llm none): the explore starts from the rulebook as it is"
)
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
NO_GPU = (
    "No GPU evaluated the candidates: correctness is real (Triton's CPU interpreter), speed was not "
    "measured, so fast_p above p = 0 and the geometric-mean speedup are unknown."
)
GPU = "Timed on the GPU: each task's best kernel against PyTorch eager and torch.compile."
# Why an optimize run stopped short of its tree's budget: a rerun continues it.
_SHORT_STOPS = ("LLM error", "token budget spent (", "dollar budget spent (")

# progress(tasks done, tasks in all, message)
LevelProgress = Callable[[int, int, str], Awaitable[None]]


@dataclass
class LevelOptions:
    """The folder, which of its tasks, how many at once, and what every task's run shares (`run`:
    its `task` and `out` are set per task)."""

    tasks_dir: Path
    run: OptimizeOptions
    problems: set[int] | None = None
    tasks_parallel: int = 4
    out: Path | None = None
    adapt_steps: int | None = None  # the adapt phase's steps per task; None: the preset's; 0: no phase
    adapt_tasks: Path | None = None  # the folder it adapts on; None: the level's own tasks

    def out_dir(self) -> Path:
        """--out, else ./kernelcraft-runs/<folder name>."""
        return self.out or Path("kernelcraft-runs") / self.tasks_dir.resolve().name


@dataclass(frozen=True)
class Planned:
    task: LevelTask
    run_dir: Path
    this_run: ThisRun


def level_of(tasks_dir: Path) -> int:
    """KernelBench's level from the folder's name (`level2` → 2); 0 for any other folder."""
    m = re.fullmatch(r"level_?([123])", tasks_dir.resolve().name)
    return int(m.group(1)) if m else 0


def find_level_tasks(tasks_dir: Path, problems: set[int] | None) -> list[LevelTask]:
    """The folder's tasks (`kernelcraft level`'s rules), seed kernels left out."""
    return find_tasks(tasks_dir, problems, skip_seeds=True)


def _json(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def finished_summary(run: RunDir, task_source: str) -> dict[str, Any] | None:
    """The run's summary when the run finished: written for the tree run.json names, for this
    task's source, and not stopped short (an LLM error, a token or dollar limit)."""
    meta = _json(run.run_file)
    summary = _json(run.summary_file)
    if meta is None or summary is None or summary.get("tree_id") != meta.get("tree_id"):
        return None
    if meta.get("task_sha256") != sha256_of(task_source):
        return None
    stopped = str(summary.get("stopped_because", ""))
    return None if any(s in stopped for s in _SHORT_STOPS) else summary


def plan(tasks: Sequence[LevelTask], out: Path) -> list[Planned]:
    """What this invocation does with each task: skip it (finished earlier), resume it or start it."""
    planned = []
    for task in tasks:
        run = RunDir(out / task.path.stem)
        if finished_summary(run, task.path.read_text(encoding="utf-8")) is not None:
            this_run: ThisRun = "done earlier"
        elif run.run_file.is_file():
            this_run = "resumed"
        else:
            this_run = "ran"
        planned.append(Planned(task, run.path, this_run))
    return planned


def first_line(planned: Sequence[Planned], opts: LevelOptions, out: Path) -> str:
    """What this invocation will do, said first: a new run, or a resume and what it skips."""
    earlier = sum(1 for p in planned if p.this_run == "done earlier")
    resumed = sum(1 for p in planned if p.this_run == "resumed")
    new = len(planned) - earlier - resumed
    at_once = f"{min(opts.tasks_parallel, max(new + resumed, 1))} at a time"
    if earlier or resumed:
        return (
            f"Resuming the level run in {out}: {earlier} of {len(planned)} tasks finished earlier "
            f"(skipped), {resumed} resumed, {new} new ({at_once})."
        )
    return f"Optimising {len(planned)} tasks of {opts.tasks_dir} into {out} ({at_once})."


def _level_meta(opts: LevelOptions, out: Path) -> dict[str, Any]:
    """level.json: the folder and where the trees live; a rerun with another folder is refused."""
    from kernelcraft.base.config import default_db_path

    path = out / LEVEL_FILE
    meta = _json(path) if path.is_file() else None
    folder = str(opts.tasks_dir.resolve())
    if meta is not None and meta.get("tasks_dir") != folder:
        raise UsageError(
            f"{out} holds the level run of {meta.get('tasks_dir')}, not of {folder}; pick another --out"
        )
    server_url = opts.run.server_url or (meta or {}).get("server_url")
    db = opts.run.db_path or (Path(meta["db_path"]) if meta and meta.get("db_path") else None)
    fresh = {
        "version": 1,
        "tasks_dir": folder,
        "server_url": server_url,
        "db_path": None if server_url else str((db or default_db_path()).resolve()),
        "preset": opts.run.preset,
        "steps": opts.run.steps,
        "llm": opts.run.llm.kind,
    }
    write_atomic(path, json.dumps(fresh, indent=2) + "\n")
    return fresh


@asynccontextmanager
async def _session(
    opts: LevelOptions, meta: dict[str, Any], shared: ToolSession | None, judge: ModelJudge | None
) -> AsyncIterator[ToolSession]:
    if shared is not None:
        yield shared
        return
    async with open_session(
        server_url=meta["server_url"],
        token_env=opts.run.token_env,
        db_path=Path(meta["db_path"]) if meta["db_path"] else None,
        evaluator=opts.run.evaluator,
        ray_address=opts.run.ray_address,
        judge=judge,
    ) as session:
        yield session


async def optimize_level(
    opts: LevelOptions,
    progress: LevelProgress | None = None,
    session: ToolSession | None = None,
    judge: ModelJudge | None = None,
) -> LevelRunSummary:
    """Adapt, then optimise every task of the folder (resuming an earlier invocation); the
    summary, also written to OUT/summary.json, and the level's page, OUT/report.html. `session`: a
    session already open (tests), whose server's duplicate judge is `judge` (its usage is counted);
    without one, one session to the server the options name, judging with the run's model."""
    started = time.monotonic()
    load_dotenv()
    if opts.tasks_parallel < 1:
        raise UsageError(f"--tasks-parallel must be at least 1, not {opts.tasks_parallel}")
    if opts.run.dry_run:
        raise UsageError("--dry-run shows one task's first prompt: give a task file, not a folder")
    tasks = find_level_tasks(opts.tasks_dir, opts.problems)
    out = opts.out_dir()
    RunDir(out).create()
    meta = _level_meta(opts, out)
    planned = plan(tasks, out)
    done = sum(1 for p in planned if p.this_run == "done earlier")
    outcomes: dict[int, tuple[TaskState, str | None]] = {}

    async def say(message: str) -> None:
        if progress is not None:
            await progress(done, len(planned), message)

    await say(first_line(planned, opts, out))
    base = dataclasses.replace(
        opts.run,
        level=opts.run.level or level_of(opts.tasks_dir),
        db_path=Path(meta["db_path"]) if meta["db_path"] else None,
        server_url=meta["server_url"],
        progress=False,  # one line per task instead: the tasks' own bars would interleave
    )
    slots = anyio.Semaphore(opts.tasks_parallel)
    if session is None:
        judge = judge_for(base.llm, base.server_url)

    async def one(p: Planned, tools: ToolSession) -> None:
        nonlocal done
        async with slots:
            await say(f"{p.task.name}: {'resuming' if p.this_run == 'resumed' else 'started'}")
            outcomes[p.task.problem_id] = await run_task(p, base, tools)
            done += 1
            state, message = outcomes[p.task.problem_id]
            await say(f"{p.task.name}: {state}" + (f" ({message})" if message else ""))

    try:
        async with _session(opts, meta, session, judge) as tools:
            phase = await adapt_phase(opts, base, out, [p.task.path for p in planned], tools, judge, say)
            async with anyio.create_task_group() as group:
                for p in planned:
                    if p.this_run != "done earlier":
                        group.start_soon(one, p, tools)
    finally:
        if judge is not None and session is None:
            await judge.aclose()
    results = [task_result(p, *outcomes.get(p.task.problem_id, ("finished", None))) for p in planned]
    summary = summarize(opts, base, out, results)
    summary.adapt = phase
    summary.seconds = round(time.monotonic() - started, 1)
    summary.report = write_level_report(out, summary)
    write_atomic(out / SUMMARY_FILE, summary.model_dump_json(indent=2) + "\n")
    return summary


async def adapt_phase(
    opts: LevelOptions,
    base: OptimizeOptions,
    out: Path,
    level_tasks: list[Path],
    tools: ToolSession,
    judge: ModelJudge | None,
    say: Callable[[str], Awaitable[None]],
) -> AdaptPhase:
    """AdaExplore's Adapt before the explore: `kernelcraft adapt`'s loop (`adapt.py`) over the
    level's tasks (or `adapt_tasks`), into the same session and so the same rulebook, learning
    rules whatever the preset. Once per level run: OUT/adapt.json keeps the rule counts it started
    from and, once finished, its figures, so a rerun skips a finished phase and resumes an
    unfinished one (its trees in OUT/adapt/ resume as any optimize run does). Its tokens and
    dollars are its explores' and its duplicate judge's; the judge's calls of an invocation that
    was killed (SIGKILL) are not counted."""
    steps = opts.adapt_steps if opts.adapt_steps is not None else preset_config(base.preset).adapt_steps
    if steps == 0:
        return AdaptPhase(state="skipped", this_run="not run", message="--adapt-steps 0")
    if base.llm.kind == "none":
        return AdaptPhase(state="skipped", this_run="not run", message=NO_MODEL_TO_ADAPT)
    path = out / ADAPT_FILE
    record = _json(path) if path.is_file() else None
    if record is not None and (record.get("phase") or {}).get("state") == "finished":
        await say("adapt phase: finished earlier (skipped)")
        return AdaptPhase.model_validate({**record["phase"], "this_run": "done earlier"})
    tasks = discover_tasks(opts.adapt_tasks) if opts.adapt_tasks is not None else level_tasks
    cap = len(tasks)  # --max-tokens and --max-dollars bound each task: the phase's bound is theirs all
    adapt_opts = AdaptOptions(
        tasks_dir=opts.adapt_tasks or opts.tasks_dir,
        tasks=tasks,
        steps=steps,
        preset=base.preset,
        level=base.level,
        llm=base.llm,
        out=out / ADAPT_DIR,
        target=base.target,
        server_url=base.server_url,
        token_env=base.token_env,
        db_path=base.db_path,
        max_total_tokens=base.max_total_tokens * cap if base.max_total_tokens is not None else None,
        max_dollars=base.max_dollars * cap if base.max_dollars is not None else None,
        progress=False,
        evaluator=base.evaluator,
        ray_address=base.ray_address,
    )
    before = dict(record["rules_before"]) if record is not None else await rule_counts(adapt_opts, tools)
    judged = Usage.from_dict(record.get("judge_usage") or {}) if record is not None else Usage()
    record = {"rules_before": before, "judge_usage": judged.to_dict(), "phase": None}
    write_atomic(path, json.dumps(record, indent=2) + "\n")
    at_start = dataclasses.replace(judge.usage.total) if judge is not None else Usage()
    await say(f"adapt phase: {len(tasks)} tasks at {steps} steps each, learning rules")
    this_run: ThisRun = "resumed" if (out / ADAPT_DIR).is_dir() else "ran"
    phase: AdaptPhase | None = None
    try:
        report = await adapt(adapt_opts, tools, before, print_report=False)
        phase = _phase(report, this_run, adapt_opts, steps, len(tasks))
    finally:
        if judge is not None:
            judged.add(_minus(judge.usage.total, at_start))
        record["judge_usage"] = judged.to_dict()
        if phase is not None:
            phase.tokens += judged.total_tokens
            if phase.cost_usd is not None:
                phase.cost_usd = (
                    None if judged.cost_usd is None else round(phase.cost_usd + judged.cost_usd, 4)
                )
            record["phase"] = phase.model_dump()
        write_atomic(path, json.dumps(record, indent=2) + "\n")
    await say(f"adapt phase: {phase.state}, {len(phase.rules_learnt)} rules learnt")
    return phase


def _minus(after: Usage, before: Usage) -> Usage:
    cost = None if after.cost_usd is None or before.cost_usd is None else after.cost_usd - before.cost_usd
    return Usage(
        input_tokens=after.input_tokens - before.input_tokens,
        output_tokens=after.output_tokens - before.output_tokens,
        cache_creation_input_tokens=after.cache_creation_input_tokens - before.cache_creation_input_tokens,
        cache_read_input_tokens=after.cache_read_input_tokens - before.cache_read_input_tokens,
        thinking_tokens=after.thinking_tokens - before.thinking_tokens,
        calls=after.calls - before.calls,
        cost_usd=cost,
    )


def _phase(
    report: dict[str, Any], this_run: ThisRun, a: AdaptOptions, steps: int, n_tasks: int
) -> AdaptPhase:
    """The phase's outcome from adapt's report: finished when every task ran to its end (a task
    that could not start is skipped, as in `adapt`), else unfinished with the first reason."""
    short = [
        t.get("error") or t.get("stopped_because")
        for t in report["tasks"]
        if "error" in t or any(s in str(t.get("stopped_because") or "") for s in _SHORT_STOPS)
    ]
    if len(report["tasks"]) < n_tasks and not short:
        short = ["stopped before its last task"]
    usage = report["usage"]
    return AdaptPhase(
        state="unfinished" if short else "finished",
        this_run=this_run,
        message=short[0] if short else None,
        tasks_dir=str(a.tasks_dir),
        steps_per_task=steps,
        tasks=len(report["tasks"]),
        rules_learnt=[LearntRule.model_validate(r) for r in report["rules_learnt"]],
        tokens=int(usage["total_tokens"]),
        cost_usd=usage["cost_usd"],
    )


async def run_task(p: Planned, base: OptimizeOptions, tools: ToolSession) -> tuple[TaskState, str | None]:
    """One task's optimize run over the shared session: how it ended, and why."""
    opts = dataclasses.replace(base, task=p.task.path, out=p.run_dir, seed=None)
    try:
        summary = await optimize(opts, tools)
    except UsageError as e:  # it could not start: no seed for --llm none, a task that does not load
        return "skipped", str(e)
    except KernelcraftError as e:  # the LLM or the server failed during its run
        return "error", str(e)
    stopped = str(summary.get("stopped_because", ""))
    return ("unfinished" if any(s in stopped for s in _SHORT_STOPS) else "finished"), stopped


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
    meta = _json(run.run_file) or {}
    summary = _json(run.summary_file) if run.summary_file.is_file() else None
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
