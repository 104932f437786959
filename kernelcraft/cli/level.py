"""The `level` subcommand: a whole folder of tasks against a folder of candidates, or timed alone.

    kernelcraft level TASKS_DIR CANDIDATES_DIR --out DIR [--problems 1-10,19] [--trials N] [--json]
    kernelcraft level TASKS_DIR --baseline --out DIR

Named `level` (KernelBench's word for a folder of problems) rather than `bench`, which in this
repository is the folder of kernelcraft's own benchmarks. The work is `kernelcraft.level`'s; this
module parses, draws the progress (one bar with the tasks done and the time left on a terminal,
one plain line per finished task elsewhere) and prints the summary. Exit 0 when every task has an
outcome, whatever its verdict; 2 for unusable arguments or folders.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column

from kernelcraft.base.errors import UsageError
from kernelcraft.base.knobs import LEVEL_TIMEOUT_S, TIMEOUT_S, TRIALS
from kernelcraft.cli.common import (
    EXIT_OK,
    Subcommands,
    add_device,
    add_json,
    check_trials,
    emit,
    knobs_of,
    run,
    seconds,
    within,
)
from kernelcraft.level.runner import LevelRun, default_jobs, run_level, workers_for
from kernelcraft.level.tasks import parse_problems
from kernelcraft.schema.level import LevelSummary


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "level",
        help="evaluate a folder of tasks (a KernelBench level) against a folder of candidates: "
        "verdicts, timings, fast_p; resumable",
    )
    p.add_argument("tasks_dir", metavar="TASKS_DIR", type=Path, help="folder of KernelBench-format tasks")
    p.add_argument(
        "candidates_dir",
        metavar="CANDIDATES_DIR",
        type=Path,
        nargs="?",
        help="folder of candidates: the task's file name, <problem_id>_*.py, or KernelBench's "
        "level_<L>_problem_<id>_sample_0_kernel.py",
    )
    p.add_argument(
        "--baseline",
        action="store_true",
        help="no candidates: time each task's reference, eager and torch.compile",
    )
    p.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="where results go; rerunning resumes from it"
    )
    p.add_argument("--problems", metavar="IDS", help="only these problem ids, e.g. 1-10,19")
    p.add_argument(
        "--trials", type=int, default=TRIALS.default, metavar="N", help="correctness trials per input set"
    )
    p.add_argument(
        "--timeout", type=seconds, default=LEVEL_TIMEOUT_S, metavar="S", help="deadline per task in seconds"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help=f"tasks evaluated at once (default: half the CPU cores, 2 to 8; here {default_jobs()})",
    )
    p.add_argument(
        "--level-key",
        metavar="KEY",
        help="the level's key in KernelBench's baseline files (default: from TASKS_DIR's name)",
    )
    p.add_argument("--restart", action="store_true", help="ignore the results already in --out")
    add_json(p, "the summary as one JSON object")
    add_device(p)
    p.set_defaults(func=cmd_level)


def level_run(args: argparse.Namespace) -> LevelRun:
    if (args.candidates_dir is None) == (not args.baseline):
        raise UsageError(
            "give CANDIDATES_DIR, or --baseline to time the references alone (not both)"
            if args.baseline
            else "give CANDIDATES_DIR (the folder of candidates), or --baseline to time the references alone"
        )
    check_trials(args.trials)
    within(TIMEOUT_S, args.timeout, "--timeout")
    jobs = default_jobs() if args.jobs is None else args.jobs
    if not 1 <= jobs <= 64:
        raise UsageError(f"--jobs must be between 1 and 64, not {jobs}")
    return LevelRun(
        tasks_dir=args.tasks_dir,
        out_dir=args.out,
        candidates_dir=args.candidates_dir,
        problems=parse_problems(args.problems) if args.problems else None,
        trials=args.trials,
        timeout_s=args.timeout,
        jobs=jobs,
        level_key=args.level_key,
        resume=not args.restart,
    )


class LevelBar:
    """Progress over a level's tasks: on a terminal one rich bar (tasks done of all, the last
    message, the time spent and left); elsewhere one plain line per finished task."""

    def __init__(self) -> None:
        self.console = Console(file=sys.stderr, stderr=True)
        self.started = time.perf_counter()
        self.done = -1
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> LevelBar:
        if self.console.is_terminal:
            self._bar = Progress(
                TextColumn("{task.description}", table_column=Column(width=44, no_wrap=True)),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self._task = self._bar.add_task("starting", total=None)
            self._bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    async def __call__(self, done: int, total: int, message: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done, total=total, description=message)
        elif done != self.done:
            elapsed = time.perf_counter() - self.started
            sys.stderr.write(f"[{done:>{len(str(total))}}/{total} {elapsed:7.1f}s] {message}\n")
            sys.stderr.flush()
        self.done = done


def cmd_level(args: argparse.Namespace) -> int:
    spec = level_run(args)

    async def main() -> LevelSummary:
        from kernelcraft.base.config import cache_file
        from kernelcraft.engine import COMPILED_TIMINGS_FILE, LocalEvaluator

        # Not entered: its workers start at the first job, so a run resumed to the end starts none.
        knobs = knobs_of(args)
        ev = LocalEvaluator(
            workers=workers_for(spec),
            device=args.device,
            timings_file=cache_file(knobs.paths, COMPILED_TIMINGS_FILE),
            settings=knobs,
        )
        try:
            with LevelBar() as bar:
                return await run_level(ev, spec, bar)
        finally:
            await ev.aclose()

    summary = run(main)
    emit(summary, args.json, render(summary))
    return EXIT_OK


def render(s: LevelSummary) -> str:
    lines = []
    for o in s.tasks:
        speed = ""
        if o.speedup_vs_eager is not None:
            speed = f"  x{o.speedup_vs_eager:.2f} eager"
            if o.speedup_vs_compiled is not None:
                speed += f", x{o.speedup_vs_compiled:.2f} torch.compile"
        elif o.eager is not None:
            speed = f"  eager {o.eager.median_us:.1f} µs"
            if o.compiled_ref is not None:
                speed += f", torch.compile {o.compiled_ref.median_us:.1f} µs"
        elif o.floor_us is not None and s.mode == "baseline":
            speed = f"  roofline floor {o.floor_us:.2f} µs"
        why = f" ({o.failure_class.value})" if o.failure_class is not None else ""
        lines.append(f"{o.problem_id:>4} {o.name:<44} {o.status}{why}{speed}")
    lines.append("")
    if s.mode == "candidates":
        lines.append(
            f"{s.correct} of {s.total} correct, {s.compiled} compiled, {s.missing} missing, "
            f"{s.task_errors} unusable tasks"
        )
        for f in s.fast_p:
            if s.timed:
                lines.append(
                    f"fast_{f.p:g}: {_pct(f.vs_eager)} vs eager, {_pct(f.vs_compiled)} vs torch.compile"
                )
            else:
                lines.append(f"fast_0 (the fraction correct; no timings without a GPU): {_pct(f.vs_eager)}")
        if s.geomean_speedup_vs_eager is not None:
            vs_c = s.geomean_speedup_vs_compiled
            lines.append(
                f"geometric-mean speedup (correct tasks): x{s.geomean_speedup_vs_eager:.3f} vs eager"
                + (f", x{vs_c:.3f} vs torch.compile" if vs_c is not None else "")
            )
    else:
        timed = sum(1 for o in s.tasks if o.status == "timed")
        lines.append(f"{timed} of {s.total} timed, {s.task_errors} unusable tasks")
    lines.append(s.message)
    if s.resumed:
        lines.append(f"{s.resumed} outcomes were read from an earlier run in {s.out_dir}")
    if s.candidates_left_out:
        n = len(s.candidates_left_out)
        lines.append(f"{n} candidate{'s' * (n != 1)} of tasks --problems left out (not evaluated)")
    if s.unmatched_candidates:
        lines.append(f"candidates that match no task (not evaluated): {', '.join(s.unmatched_candidates)}")
    lines.append(f"wrote {', '.join(sorted(s.files.values()))} in {s.seconds:.1f} s")
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"
