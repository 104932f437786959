"""Evaluating a level: every task against its candidate (or the reference alone), resumable.

    summary = await run_level(evaluator, LevelRun(tasks_dir, out_dir, candidates_dir=...))

Each task is one job on the evaluator: `verify` (and `profile` on a GPU) for a candidate, or
`baseline` for the reference alone. Its outcome is appended to `OUT/results.jsonl` as soon as it
is known, so a run that stops (Ctrl-C, a crash, a lost machine) loses at most the tasks in flight:
rerunning with the same out dir skips every task whose outcome is there for the same task source,
the same candidate source, the same mode and the same timing (GPU or not). At the end the
summary (`summary.json`) and KernelBench's files (`kernelbench.py`) are written from the outcomes.

A candidate's failure, a missing candidate and an unusable task are outcomes, never errors; errors
are for unusable arguments (no such folder, two candidates for one task) and faults of ours.
Only this module writes the out dir.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from kernelcraft.base.errors import TaskError, UsageError
from kernelcraft.base.failures import FailureClass
from kernelcraft.base.knobs import LEVEL_TIMEOUT_S, TRIALS
from kernelcraft.engine import Evaluator, check_candidate, check_task
from kernelcraft.level import kernelbench, score
from kernelcraft.level.sidecar import sidecar_sizes
from kernelcraft.level.tasks import LevelTask, find_tasks, match_candidates
from kernelcraft.schema.evaluation import EvalJob, EvalResult
from kernelcraft.schema.level import LevelMode, LevelSummary, TaskOutcome

log = logging.getLogger(__name__)

RESULTS = "results.jsonl"
SUMMARY = "summary.json"
NO_GPU = (
    "timings need a CUDA GPU and this machine has none: verdicts only (Triton's interpreter), fast_p at p=0"
)

# progress(tasks done, tasks in all, message)
LevelProgress = Callable[[int, int, str], Awaitable[None]]


def machine_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 4


def default_jobs(cores: int | None = None) -> int:
    """Tasks evaluated at once unless told: half the cores, 2 to 8 (the H200 machine's 16: 8).
    Each task's own process does CPU work (loading the task, torch.compile's compile, the
    interpreter's trials) while others use the GPU; the other half of the cores keeps the
    timing process and inductor's compile threads from waiting for one."""
    return max(2, min(8, (cores if cores is not None else machine_cores()) // 2))


def workers_for(run: LevelRun) -> int:
    """The evaluator's warm workers for a level run: a candidate job takes two (the reference and
    the candidate), a baseline job one, plus two starting for the next tasks."""
    return 2 * run.jobs if run.mode == "candidates" else run.jobs + 2


@dataclass
class LevelRun:
    """What to evaluate and how. No `candidates_dir`: baseline mode (the reference alone)."""

    tasks_dir: Path
    out_dir: Path
    candidates_dir: Path | None = None
    problems: set[int] | None = None
    trials: int = int(TRIALS.default)
    timeout_s: float = LEVEL_TIMEOUT_S
    jobs: int = field(default_factory=default_jobs)
    level_key: str | None = None
    """The level's key in KernelBench's baseline files ('level1'); default: from the folder's name."""
    resume: bool = True

    @property
    def mode(self) -> LevelMode:
        return "baseline" if self.candidates_dir is None else "candidates"


@dataclass
class _Progress:
    total: int
    report: LevelProgress | None
    done: int = 0

    async def say(self, message: str) -> None:
        if self.report is not None:
            await self.report(self.done, self.total, message)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read_results(path: Path) -> list[TaskOutcome]:
    """The outcomes an earlier run appended; a line that does not parse (a run killed mid-write)
    is skipped."""
    if not path.exists():
        return []
    found = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            found.append(TaskOutcome.model_validate_json(line))
        except ValueError:
            log.warning(
                "%s:%d is not an outcome (a run stopped while writing it?); that task runs again", path, n
            )
    return found


def level_key_of(tasks_dir: Path) -> str:
    m = re.fullmatch(r"level_?(\d+)", tasks_dir.resolve().name)
    return f"level{m.group(1)}" if m else tasks_dir.resolve().name


async def run_level(
    evaluator: Evaluator, run: LevelRun, progress: LevelProgress | None = None
) -> LevelSummary:
    started = time.perf_counter()
    if not 1 <= run.jobs <= 64:
        raise UsageError(f"jobs must be between 1 and 64, not {run.jobs}")
    tasks = find_tasks(run.tasks_dir, run.problems)  # refuses a problem id the folder lacks
    unmatched: list[str] = []
    left_out: list[str] = []
    if run.candidates_dir is not None:
        matched = match_candidates(find_tasks(run.tasks_dir), run.candidates_dir, run.problems)
        tasks, unmatched, left_out = matched.tasks, matched.unmatched, matched.left_out
    try:
        run.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the out dir {run.out_dir}: {e.strerror or e}") from e
    timed = evaluator.has_gpu
    results_path = run.out_dir / RESULTS
    earlier = read_results(results_path) if run.resume else []
    outcomes: dict[int, TaskOutcome] = {}
    todo: list[tuple[LevelTask, str, str | None]] = []
    for task in tasks:
        task_source, cand_source = _read(task)
        key = (task.name, sha(task_source), sha(cand_source) if cand_source is not None else None)
        done = [
            o
            for o in earlier
            if (o.name, o.task_sha, o.candidate_sha) == key and (o.mode, o.timed) == (run.mode, timed)
        ]
        if done:
            outcomes[task.problem_id] = done[-1]
        else:
            todo.append((task, task_source, cand_source))
    resumed = len(outcomes)
    bar = _Progress(total=len(tasks), report=progress, done=resumed)
    await bar.say(
        f"{resumed} of {len(tasks)} tasks done in an earlier run" if resumed else f"{len(tasks)} tasks"
    )
    slots = anyio.Semaphore(run.jobs)

    async def one(task: LevelTask, task_source: str, cand_source: str | None) -> None:
        async with slots:
            await bar.say(f"{task.name}: started")
            outcome = await evaluate_task(evaluator, run, task, task_source, cand_source, timed=timed)
            with results_path.open("a", encoding="utf-8") as f:
                f.write(outcome.model_dump_json() + "\n")
            outcomes[task.problem_id] = outcome
            bar.done += 1
            await bar.say(f"{task.name}: {describe(outcome)}")

    async with anyio.create_task_group() as group:
        for task, task_source, cand_source in todo:
            group.start_soon(one, task, task_source, cand_source)
    ordered = [outcomes[t.problem_id] for t in tasks]
    summary = summarize(run, ordered, timed=timed, resumed=resumed, unmatched=unmatched, left_out=left_out)
    summary.seconds = round(time.perf_counter() - started, 3)
    summary.stage_seconds = stage_totals([outcomes[t.problem_id] for t, _, _ in todo])
    summary.jobs = run.jobs
    write_files(run, summary)
    return summary


def stage_totals(outcomes: Sequence[TaskOutcome]) -> dict[str, float]:
    """Where the tasks' seconds went, summed per stage (`EvalResult.stage_seconds`): with a GPU,
    a baseline's "timing" is the GPU held alone, the bound a level run cannot go under."""
    totals: dict[str, float] = {}
    for o in outcomes:
        for stage, s in o.stage_seconds.items():
            totals[stage] = totals.get(stage, 0.0) + s
    return {k: round(v, 3) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def _read(task: LevelTask) -> tuple[str, str | None]:
    def text(p: Path) -> str:
        try:
            return p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read {p}: {e}") from e

    return text(task.path), text(task.candidate) if task.candidate is not None else None


async def evaluate_task(
    evaluator: Evaluator,
    run: LevelRun,
    task: LevelTask,
    task_source: str,
    cand_source: str | None,
    *,
    timed: bool,
) -> TaskOutcome:
    """One task's outcome: a verdict (or the reference's timings), never an exception for what the
    task or the candidate did."""
    start = time.perf_counter()
    base = TaskOutcome(
        problem_id=task.problem_id,
        name=task.name,
        candidate=task.candidate.name if task.candidate is not None else None,
        status="missing",
        mode=run.mode,
        timed=timed,
        task_sha=sha(task_source),
        candidate_sha=sha(cand_source) if cand_source is not None else None,
    )
    try:
        check_task(task_source, task.name)
    except TaskError as e:
        return base.model_copy(update={"status": "task_error", "message": str(e)})
    try:
        given = sidecar_sizes(task.path)  # foo.cpu.json: the interpreter's sizes, as verify reads them
    except UsageError as e:
        return base.model_copy(update={"status": "task_error", "message": str(e)})
    if run.mode == "baseline":
        job = EvalJob(
            task_source=task_source,
            task_name=task.name,
            stages=["baseline"],
            timeout_s=run.timeout_s,
            cpu_sizes=given,
        )
    elif cand_source is None:
        return base.model_copy(update={"message": "no candidate file for this task"})
    else:
        try:
            check_candidate(cand_source, base.candidate or "candidate.py")
        except TaskError as e:
            update = {"status": "incorrect", "failure_class": FailureClass.LOAD_ERROR, "message": str(e)}
            return base.model_copy(update=update)
        job = EvalJob(
            task_source=task_source,
            candidate_source=cand_source,
            task_name=task.name,
            candidate_name=base.candidate or "candidate.py",
            stages=["verify", "profile"] if timed else ["verify"],
            trials=run.trials,
            timeout_s=run.timeout_s,
            cpu_sizes=given,
        )
    try:
        result = await evaluator.submit(job)
    except TaskError as e:  # the task itself: its reference could not be built, or cannot fit
        return base.model_copy(update={"status": "task_error", "message": str(e)})
    outcome = from_result(base, result)
    outcome.seconds = round(time.perf_counter() - start, 3)
    outcome.stage_seconds = dict(result.stage_seconds)
    return outcome


def from_result(base: TaskOutcome, result: EvalResult) -> TaskOutcome:
    update: dict[str, Any] = {}
    if result.baseline is not None:
        b = result.baseline
        update = {
            "status": "timed" if b.available else ("task_error" if b.failure_class else "untimed"),
            "failure_class": b.failure_class,
            "message": b.evidence.message if b.evidence else b.message,
            "eager": b.reference_eager,
            "compiled_ref": b.reference_compiled,
            "floor_us": b.roofline.floor_us if b.roofline else None,
            "device": b.device,
        }
        return base.model_copy(update=update)
    v, p = result.verify, result.profile
    assert v is not None, "a candidate job answers with its verify stage"
    cls = v.failure_class or (p.failure_class if p is not None else None)
    ev = v.evidence or (p.evidence if p is not None else None)
    update = {
        "status": "correct"
        if cls is None
        else ("harness_limit" if cls is FailureClass.HARNESS_LIMIT else "incorrect"),
        "compiled": cls is None or cls.compiled,
        "failure_class": cls,
        "message": ev.message if ev is not None else (p.message if p is not None else None),
        "error_text": ev.error_text[-1500:] if ev is not None and ev.error_text else None,
        "trials": f"{v.trials_passed} / {v.trials_total}",
        "device": (p.device if p is not None and p.device else None) or v.device,
    }
    if p is not None and p.available:
        update |= {
            "candidate_time": p.candidate,
            "eager": p.reference_eager,
            "compiled_ref": p.reference_compiled,
            "speedup_vs_eager": p.speedup_vs_eager,
            "speedup_vs_compiled": p.speedup_vs_compiled,
            "floor_us": p.roofline.floor_us if p.roofline else None,
        }
    return base.model_copy(update=update)


def describe(o: TaskOutcome) -> str:
    """One short phrase for a progress line."""
    if o.status == "correct" and o.speedup_vs_eager is not None:
        vs_c = f", x{o.speedup_vs_compiled:.2f} vs torch.compile" if o.speedup_vs_compiled else ""
        return f"correct, x{o.speedup_vs_eager:.2f} vs eager{vs_c}"
    if o.status == "timed" and o.eager is not None:
        c = f", torch.compile {o.compiled_ref.median_us:.1f} µs" if o.compiled_ref else ""
        return f"eager {o.eager.median_us:.1f} µs{c}"
    if o.failure_class is not None:
        return f"{o.status} ({o.failure_class.value})"
    if o.floor_us is not None:
        return f"{o.status}, roofline floor {o.floor_us:.2f} µs"
    return o.status


def summarize(
    run: LevelRun,
    outcomes: Sequence[TaskOutcome],
    *,
    timed: bool,
    resumed: int,
    unmatched: list[str],
    left_out: Sequence[str] = (),
) -> LevelSummary:
    correct = [o for o in outcomes if o.status == "correct"]
    message = NO_GPU if not timed else "timed on the GPU: candidate and reference interleaved"
    if run.mode == "baseline":
        message = (
            "the reference alone, eager and torch.compile"
            if timed
            else NO_GPU.split(":")[0] + ": the references loaded, roofline floors only"
        )
    return LevelSummary(
        mode=run.mode,
        tasks_dir=str(run.tasks_dir),
        candidates_dir=str(run.candidates_dir) if run.candidates_dir is not None else None,
        out_dir=str(run.out_dir),
        timed=timed,
        message=message,
        total=len(outcomes),
        correct=len(correct),
        compiled=sum(1 for o in outcomes if o.compiled),
        missing=sum(1 for o in outcomes if o.status == "missing"),
        task_errors=sum(1 for o in outcomes if o.status == "task_error"),
        resumed=resumed,
        fast_p=score.fast_p(outcomes, timed=timed) if run.mode == "candidates" else [],
        geomean_speedup_vs_eager=score.geomean([o.speedup_vs_eager for o in correct]),
        geomean_speedup_vs_compiled=score.geomean([o.speedup_vs_compiled for o in correct]),
        unmatched_candidates=unmatched,
        candidates_left_out=list(left_out),
        tasks=list(outcomes),
    )


def write_files(run: LevelRun, summary: LevelSummary) -> None:
    """summary.json, and KernelBench's files where they have content."""
    out = run.out_dir
    files = {"results": out / RESULTS, "summary": out / SUMMARY}
    contents: dict[Path, Any] = {}
    if run.mode == "candidates":
        files["kernelbench_eval_results"] = out / kernelbench.EVAL_RESULTS
        contents[files["kernelbench_eval_results"]] = kernelbench.eval_results(summary.tasks)
    if summary.timed:
        eager, compiled = kernelbench.baseline_times(
            summary.tasks, run.level_key or level_key_of(run.tasks_dir)
        )
        files["kernelbench_baseline_eager"] = out / kernelbench.BASELINE_EAGER
        files["kernelbench_baseline_compiled"] = out / kernelbench.BASELINE_COMPILED
        contents[files["kernelbench_baseline_eager"]] = eager
        contents[files["kernelbench_baseline_compiled"]] = compiled
    summary.files = {k: str(v) for k, v in files.items()}
    for path, data in contents.items():
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (out / SUMMARY).write_text(summary.model_dump_json(indent=2) + "\n", encoding="utf-8")
