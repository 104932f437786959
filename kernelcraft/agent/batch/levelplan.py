"""A level run's plan: the folder's tasks, and what this invocation does with each.

The tasks are found as `kernelcraft level` finds them (`level.tasks.find_tasks`); a task whose run
directory holds a finished run (its summary, for the tree its run.json names, for this task's
source, not stopped short) is skipped, one whose run directory names a tree is resumed, the others
start. `levelrun.optimize_level` runs the plan; `levelsummary` reads the figures back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.rundir import RunDir
from kernelcraft.agent.loop.runloop import sha256_of
from kernelcraft.base.errors import KernelcraftError, UsageError
from kernelcraft.level.tasks import LevelTask, find_tasks, python_files
from kernelcraft.schema.levelrun import (
    ThisRun,
)

_MODEL = re.compile(r"^class Model\b", re.M)
_MODEL_NEW = re.compile(r"^class ModelNew\b", re.M)

# Why an optimize run stopped short of its tree's budget: a rerun continues it.
SHORT_STOPS = ("LLM error", "token budget spent (", "dollar budget spent (")


def _error_names(cls: type[BaseException]) -> set[str]:
    return {cls.__name__}.union(*(_error_names(sub) for sub in cls.__subclasses__()))


def stopped_short(stopped: str) -> bool:
    """Whether a run stopped short of its tree's budget, so a rerun continues it: an LLM error, a
    token or dollar limit, or any of kernelcraft's errors (a run that raised one writes
    '<its class>: <its sentence>' as its stop, `runloop.Explorer.explore`)."""
    if any(s in stopped for s in SHORT_STOPS):
        return True
    return stopped.split(":", 1)[0].strip() in _error_names(KernelcraftError)


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
    """The folder's tasks (`kernelcraft level`'s rules), seed kernels left out. Another kernel in
    the folder (a file that defines ModelNew and no Model, as `19_relu_triton.py` beside
    `19_relu.py`) is refused by name, with the name that makes it its task's seed: taken for a task,
    it would fail as one, or clash with its task's problem id."""
    files = [p for p in python_files(tasks_dir, "the tasks folder") if not p.stem.endswith("_seed")]
    texts = {p: p.read_text(encoding="utf-8", errors="replace") for p in files}
    kernels = [p for p, t in texts.items() if _MODEL_NEW.search(t) and not _MODEL.search(t)]
    if kernels:
        kernel = kernels[0]
        owners = [p.stem for p, t in texts.items() if _MODEL.search(t) and kernel.stem.startswith(p.stem)]
        seed = f"{max(owners, key=len)}_seed.py" if owners else "<task>_seed.py"
        raise UsageError(
            f"{kernel} defines ModelNew and no Model: a kernel, not a task. In a folder a task's seed "
            f"kernel is named {seed} beside its task; rename it so, or move it out of {tasks_dir}"
        )
    return find_tasks(tasks_dir, problems, skip_seeds=True)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def finished_summary(run: RunDir, task_source: str) -> dict[str, Any] | None:
    """The run's summary when the run finished: written for the tree run.json names, for this
    task's source, and not stopped short (`stopped_short`)."""
    meta = read_json(run.run_file)
    summary = read_json(run.summary_file)
    if meta is None or summary is None or summary.get("tree_id") != meta.get("tree_id"):
        return None
    if meta.get("task_sha256") != sha256_of(task_source):
        return None
    stopped = str(summary.get("stopped_because", ""))
    return None if stopped_short(stopped) else summary


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
