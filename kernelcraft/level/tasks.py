"""Finding a level's tasks and matching each to its candidate file.

Tasks are the `*.py` files of a folder (files starting with `_` are not tasks). KernelBench names
them `<problem_id>_<Name>.py` (`19_ReLU.py`): the leading number is the problem id. In a folder
where some file has no such number, every task's id is its 1-based position in name order.

A task's candidate, in the candidates folder, is (first match wins, two at one rank is an error):
  1. the file of the same name (`19_ReLU.py`),
  2. any `<problem_id>_*.py` (`19_relu_triton.py`),
  3. KernelBench's generated name `level_<L>_problem_<problem_id>_sample_0_kernel.py`
     (its `runs/<run_name>/` folder can be given as it is).
Ranks 2 and 3 need KernelBench numbering. Pure functions over file names; nothing is read here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kernelcraft.base.errors import UsageError

_NUMBERED = re.compile(r"^(\d+)_.*\.py$")
_KERNELBENCH_RUN = re.compile(r"^level_\d+_problem_(\d+)_sample_0_kernel\.py$")


@dataclass(frozen=True)
class LevelTask:
    problem_id: int
    path: Path
    candidate: Path | None = None

    @property
    def name(self) -> str:
        return self.path.name


def python_files(folder: Path, what: str) -> list[Path]:
    if not folder.is_dir():
        raise UsageError(f"{what} {folder} is not a folder; give the folder that holds the .py files")
    return sorted(
        p for p in folder.iterdir() if p.suffix == ".py" and p.is_file() and not p.name.startswith("_")
    )


def find_tasks(
    tasks_dir: Path, problems: set[int] | None = None, *, skip_seeds: bool = False
) -> list[LevelTask]:
    """The folder's tasks in problem-id order, only `problems` if given. `skip_seeds`: leave out
    `*_seed.py` (`optimize`'s seed kernels, which lie beside their tasks)."""
    files = python_files(tasks_dir, "the tasks folder")
    if skip_seeds:
        files = [p for p in files if not p.stem.endswith("_seed")]
    if not files:
        raise UsageError(f"the tasks folder {tasks_dir} has no .py files; give a KernelBench level folder")
    numbers = [_NUMBERED.match(p.name) for p in files]
    if all(numbers):
        ids = [int(m.group(1)) for m in numbers if m]
    else:
        ids = list(range(1, len(files) + 1))
    seen: dict[int, Path] = {}
    for i, p in zip(ids, files, strict=True):
        if i in seen:
            raise UsageError(f"two tasks have problem id {i}: {seen[i].name} and {p.name}; rename one")
        seen[i] = p
    tasks = sorted((LevelTask(i, p) for i, p in seen.items()), key=lambda t: t.problem_id)
    if problems is not None:
        unknown = sorted(problems - set(seen))
        if unknown:
            raise UsageError(f"no task has problem id {', '.join(map(str, unknown))} in {tasks_dir}")
        tasks = [t for t in tasks if t.problem_id in problems]
    return tasks


@dataclass(frozen=True)
class Matched:
    """The selected tasks with their candidates, and the candidate files left unevaluated."""

    tasks: list[LevelTask]
    unmatched: list[str]  # match no task of the folder
    left_out: list[str]  # match a task `problems` left out


def match_candidates(
    tasks: list[LevelTask], candidates_dir: Path, problems: set[int] | None = None
) -> Matched:
    """Each of the folder's `tasks` (all of them, so that a candidate of a task left out is not
    taken for one that matches none) with its candidate, keeping those `problems` selects."""
    files = python_files(candidates_dir, "the candidates folder")
    numbered = all(_NUMBERED.match(t.name) for t in tasks)
    used: set[Path] = set()
    left_out: list[Path] = []
    matched = []
    for task in tasks:
        if problems is not None and task.problem_id not in problems:
            left_out += _candidates_of(task, files, numbered)
            continue
        found = _candidates_of(task, files, numbered)
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise UsageError(
                f"task {task.name} has {len(found)} candidates ({names}); keep one per problem id"
            )
        if found:
            used.add(found[0])
        matched.append(LevelTask(task.problem_id, task.path, found[0] if found else None))
    unmatched = [p.name for p in files if p not in used and p not in left_out]
    return Matched(matched, unmatched, sorted(p.name for p in set(left_out)))


def _candidates_of(task: LevelTask, files: list[Path], numbered: bool) -> list[Path]:
    """The task's candidates by the first rule that finds any: its file name, its problem id as a
    prefix, KernelBench's generated name."""
    ranks = [
        [p for p in files if p.name == task.name],
        [p for p in files if numbered and p.name.startswith(f"{task.problem_id}_") and p.name != task.name],
        [p for p in files if numbered and _run_id(p.name) == task.problem_id],
    ]
    return next((r for r in ranks if r), [])


def _run_id(name: str) -> int | None:
    m = _KERNELBENCH_RUN.match(name)
    return int(m.group(1)) if m else None


def parse_problems(text: str) -> set[int]:
    """'1-10,19' → {1, ..., 10, 19}; a UsageError saying the form otherwise."""
    ids: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise UsageError(f"problems {text!r}: write problem ids and ranges, e.g. 1-10,19") from None
        if first < 1 or last < first:
            raise UsageError(f"problems {text!r}: {part!r} is not a range of ids from 1 up")
        ids.update(range(first, last + 1))
    return ids
