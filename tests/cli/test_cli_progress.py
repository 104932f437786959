"""Progress displays: one bar per job that only moves forward on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io
import re

import pytest

from kernelcraft.agent.loop.rundir import Progress
from kernelcraft.cli.progress import JobProgress


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as stderr does in an interactive shell."""

    def isatty(self) -> bool:
        return True


def percents(text: str) -> list[int]:
    return [int(p) for p in re.findall(r"(\d+)%", text)]


@pytest.mark.anyio
async def test_a_job_off_a_terminal_prints_plain_lines_whose_percentage_never_goes_back() -> None:
    out = io.StringIO()
    with JobProgress(stream=out) as bar:
        await bar(0.05, "loading the candidate")
        await bar(0.0, "importing the candidate")  # a stage that restarts its own count
        await bar(0.5, "trial 1 of 2")
        await bar(1.0, "done")
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    lines = text.splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "loading the candidate",
        "importing the candidate",
        "trial 1 of 2",
        "done",
    ]
    assert percents(text) == [5, 5, 50, 100]


@pytest.mark.anyio
async def test_a_quiet_job_prints_nothing() -> None:
    out = Terminal()
    with JobProgress(stream=out, quiet=True) as bar:
        await bar(0.5, "trial 1 of 2")
    assert out.getvalue() == ""


@pytest.mark.anyio
async def test_a_job_on_a_terminal_draws_one_bar_that_ends_at_100_percent_with_the_time_left() -> None:
    out = Terminal()
    with JobProgress(stream=out) as bar:
        await bar(0.3, "trial 2 of 10")
        await bar(0.1, "importing the candidate")
        await bar(1.0, "done")
    text = out.getvalue()
    assert "\x1b[" in text and "━" in text  # drawn in place, with a bar
    assert "left" in text and "done" in text
    assert percents(text)[-1] == 100 and sorted(percents(text)) == percents(text)
    assert "trial 2 of 10" not in text.splitlines()[-1]  # the bar is redrawn, not one line per message


def test_the_run_display_off_a_terminal_is_one_plain_line_per_update() -> None:
    out = io.StringIO()
    p = Progress(3, stream=out)
    p.message("tree 1 started")
    p.show(p.line(step=1, best="none correct yet", failures={}, tokens=0, cost=None), completed=0)
    p.show(p.line(step=1, best="1.20x (node 2)", failures={}, tokens=10, cost=0.5), completed=1)
    p.done()
    lines = out.getvalue().splitlines()
    assert lines[0] == "tree 1 started" and lines[1].startswith("step 1 of 3 | best none")
    assert "\x1b" not in out.getvalue() and len(lines) == 3


def test_the_run_display_on_a_terminal_is_a_bar_of_steps_done_with_the_time_left() -> None:
    out = Terminal()
    p = Progress(4, stream=out)
    p.show("step 1 of 4 | best none", completed=0)
    p.show("step 2 of 4 | best 1.1x", completed=2)
    p.show("step 2 of 4 | late", completed=1)  # never back
    p.message("a message above the bar")
    p.done()
    text = out.getvalue()
    assert "2/4" in text and "1/4" not in text and "left" in text
    assert "a message above the bar" in text
    assert Progress(4, stream=Terminal(), enabled=False)._live is False
