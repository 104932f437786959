"""A run directory and the live progress display.

Layout of `--out DIR` (only the explore loop writes it):

    run.json         the tree id, where the tree lives (database path or server URL), the task
                     (path and sha256), the target: what a rerun with the same --out resumes
    steps.jsonl      one JSON object per step, appended and fsynced as each step ends
    prompts.jsonl    every call to the language model: its messages (each distinct system prompt
                     once), the tool it had to call, the answer and its usage (`llm.LoggedLLM`)
    best_kernel.py   the best correct kernel so far, a ready-to-import module (ModelNew)
    summary.json     the run's outcome, rewritten at the end (and on every resume)
    tree.json        the tree's report data as the server gave it at the end (`runreport.py`)
    report.html      the run's report, one self-contained page (`kernelcraft report` redraws it)

Files other than steps.jsonl are written atomically (temporary file, then rename), so a run killed
at any instant leaves each file whole.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress

from kernelcraft.base.errors import UsageError


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass
class RunDir:
    path: Path

    @property
    def run_file(self) -> Path:
        return self.path / "run.json"

    @property
    def steps_file(self) -> Path:
        return self.path / "steps.jsonl"

    @property
    def best_file(self) -> Path:
        return self.path / "best_kernel.py"

    @property
    def summary_file(self) -> Path:
        return self.path / "summary.json"

    @property
    def tree_file(self) -> Path:
        return self.path / "tree.json"

    @property
    def report_file(self) -> Path:
        return self.path / "report.html"

    def create(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create the run directory {self.path}: {e}; pick another --out") from e

    def load_run(self) -> dict[str, Any] | None:
        if not self.run_file.is_file():
            return None
        try:
            return dict(json.loads(self.run_file.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(
                f"{self.run_file} is unreadable ({e}); remove it to start a new tree in {self.path}"
            ) from e

    def save_run(self, data: dict[str, Any]) -> None:
        write_atomic(self.run_file, json.dumps(data, indent=2) + "\n")

    def steps(self) -> list[dict[str, Any]]:
        """Steps recorded so far. A last line cut short by a kill is ignored."""
        if not self.steps_file.is_file():
            return []
        out = []
        for line in self.steps_file.read_text(encoding="utf-8").splitlines():
            if line.strip().endswith("}"):
                try:  # noqa: PERF203 -- a line cut short by a kill must not stop the resume
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return out

    def append_step(self, record: dict[str, Any]) -> None:
        with self.steps_file.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def save_best(self, code: str, header: str) -> None:
        lines = "".join(f"# {line}\n" for line in header.splitlines())
        write_atomic(self.best_file, lines + code if code.endswith("\n") else lines + code + "\n")

    def save_summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.summary_file, json.dumps(summary, indent=2) + "\n")


@dataclass
class Progress:
    """The live display on stderr: on a terminal one bar (rich) of the steps done, with the time
    left and the run's status line beside it; otherwise (logs, CI) one plain line per update.
    `enabled=False` shows nothing."""

    total: int
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    enabled: bool = True
    _console: Console = field(init=False)
    _live: bool = field(init=False, default=False)
    _bar: RichProgress | None = field(init=False, default=None)
    _task: TaskID | None = field(init=False, default=None)
    _completed: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._console = Console(file=self.stream)
        self._live = self.enabled and self._console.is_terminal

    def line(
        self,
        *,
        step: int,
        best: str,
        failures: dict[str, int],
        tokens: int,
        cost: float | None,
        note: str = "",
    ) -> str:
        fails = (
            ", ".join(f"{k} {v}" for k, v in sorted(failures.items(), key=lambda kv: (-kv[1], kv[0])))
            or "none"
        )
        money = "cost n/a" if cost is None else f"${cost:.4f}"
        tail = f" | {note}" if note else ""
        return f"step {step} of {self.total} | best {best} | failures: {fails} | tokens {tokens:,} | {money}{tail}"

    def show(self, text: str, completed: int | None = None) -> None:
        """Update the display: `text` is the status line, `completed` the steps done (the bar only
        moves forward)."""
        if not self.enabled:
            return
        if completed is not None:
            self._completed = max(self._completed, min(completed, self.total))
        if not self._live:
            self.stream.write(text + "\n")
            self.stream.flush()
            return
        if self._bar is None:
            self._bar = RichProgress(
                BarColumn(bar_width=20),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=self._console,
            )
            self._task = self._bar.add_task("", total=self.total, completed=self._completed)
            self._bar.start()
        assert self._task is not None
        width = max(20, self._console.width - 50)
        self._bar.update(self._task, completed=self._completed, description=text[:width])

    def message(self, text: str) -> None:
        """A line of its own (above the bar on a terminal)."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
            return
        self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        """Leave the bar on the screen at its last state; later messages go below it."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
