"""One evaluation job's progress on stderr, for `verify`, `compile`, `profile` and `tree`.

On a terminal it is one bar (rich) that only moves forward: the job's current message, the
percentage, the time spent and an estimate of the time left. Anywhere else (a pipe, a log, CI) it
is one plain line per message, `[ 10%    4.0s] trial 1 of 10`, and never a control character.
`quiet` shows nothing at all.

The engine already reports fractions that never go back (`JobState.progress`); the bar keeps
its own maximum too, so a caller that restarts its count cannot move it back either.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column


class JobProgress:
    """A progress callback (`await bar(fraction, message)`) drawn as one bar or as plain lines.

    Use it as a context manager around the job: the bar is drawn while inside and left on the
    screen, at its last state, when the job ends. `started`: the `time.perf_counter()` the plain
    lines count their seconds from (default: now)."""

    def __init__(
        self, *, stream: TextIO | None = None, quiet: bool = False, started: float | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.console = Console(file=self.stream, stderr=self.stream is sys.stderr)
        self.live = not quiet and self.console.is_terminal
        self.fraction = 0.0
        self.started = started if started is not None else time.perf_counter()
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> JobProgress:
        if self.live:
            self._bar = Progress(
                TextColumn("{task.description}", style="bold", table_column=Column(width=36, no_wrap=True)),
                BarColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self._task = self._bar.add_task("starting", total=100.0)
            self._bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    async def __call__(self, fraction: float, message: str) -> None:
        self.fraction = max(self.fraction, min(1.0, max(0.0, fraction)))
        if self.quiet:
            return
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=100.0 * self.fraction, description=message)
            return
        elapsed = time.perf_counter() - self.started
        self.stream.write(f"[{self.fraction:4.0%} {elapsed:6.1f}s] {message}\n")
        self.stream.flush()
