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

Only this module and `levelsummary.py` write OUT's own files (`level.json`, `summary.json`,
`report.html`); each task's directory belongs to its run. `levelplan.py` decides what runs,
`levelsummary.py` reads the figures back. The figures come from `level.score`: its pure functions of
outcomes are `levelsummary.py`'s one import from `kernelcraft.level`, with `level.tasks`' file names
in `levelplan.py` (`pyproject.toml` lets the agent import these two and nothing else of the level
package).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from kernelcraft.agent.batch.adapt import AdaptOptions, adapt, discover_tasks, rule_counts
from kernelcraft.agent.batch.levelplan import (
    LevelOptions,
    Planned,
    find_level_tasks,
    first_line,
    level_of,
    plan,
    read_json,
    stopped_short,
)
from kernelcraft.agent.batch.levelsummary import summarize, task_result, write_level_report
from kernelcraft.agent.llm.config import load_dotenv
from kernelcraft.agent.llm.core import Usage
from kernelcraft.agent.llm.judge import ModelJudge, judge_for
from kernelcraft.agent.loop.explore import optimize
from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.rundir import RunDir, write_atomic
from kernelcraft.agent.loop.session import ToolSession, driver_knobs, open_session
from kernelcraft.base.errors import KernelcraftError, UsageError
from kernelcraft.schema.levelrun import (
    AdaptPhase,
    LearntRule,
    LevelRunSummary,
    TaskState,
    ThisRun,
)
from kernelcraft.schema.presets import preset_config

LEVEL_FILE = "level.json"
ADAPT_FILE = "adapt.json"  # the adapt phase: the rule counts it started from, its figures once done
ADAPT_DIR = "adapt"  # its tasks' run directories
NO_MODEL_TO_ADAPT = (
    "no model to distil rules from failures (--llm none): the explore starts from the rulebook as it is"
)
SUMMARY_FILE = "summary.json"
# progress(tasks done, tasks in all, message)
LevelProgress = Callable[[int, int, str], Awaitable[None]]


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
        knobs=opts.run.knobs,
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
    record = read_json(path) if path.is_file() else None
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
        knobs=base.knobs,
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
        if "error" in t or stopped_short(str(t.get("stopped_because") or ""))
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
    return ("unfinished" if stopped_short(stopped) else "finished"), stopped


def _level_meta(opts: LevelOptions, out: Path) -> dict[str, Any]:
    """level.json: the folder and where the trees live; a rerun with another folder is refused."""
    from kernelcraft.base.config import default_db_path

    paths = driver_knobs(opts.run.knobs).paths
    path = out / LEVEL_FILE
    meta = read_json(path) if path.is_file() else None
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
        "db_path": None if server_url else str((db or default_db_path(paths)).resolve()),
        "preset": opts.run.preset,
        "steps": opts.run.steps,
        "llm": opts.run.llm.kind,
    }
    write_atomic(path, json.dumps(fresh, indent=2) + "\n")
    return fresh
