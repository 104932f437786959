"""The text `kernelcraft optimize FOLDER` prints at its end: the level's summary, a row per task,
the figures and the adapt phase's line (`cli/agent.py` runs the command; `report/level.py` holds
the columns and figures it shares with the HTML page)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelcraft.schema.levelrun import AdaptPhase, LevelRunSummary


def render_level(s: LevelRunSummary) -> str:
    """The level's summary: what this invocation did first, a row per task, then the figures."""
    from kernelcraft.report.level import TASK_COLUMNS, figure_rows, task_row

    new = s.total - s.done_earlier - s.resumed
    first = (
        f"Resumed the level run in {s.out_dir}: {s.done_earlier} of {s.total} tasks finished earlier "
        f"(skipped), {s.resumed} resumed, {new} new."
        if s.done_earlier or s.resumed
        else f"Level run of {s.total} tasks in {s.out_dir}."
    )
    rows = [TASK_COLUMNS, *(task_row(t) for t in s.tasks)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(TASK_COLUMNS))]
    lines = [first, ""]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    figures = [("", "vs eager", "vs torch.compile"), *figure_rows(s)]
    fw = [max(len(r[i]) for r in figures) for i in range(3)]
    lines.append("")
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, fw, strict=True)).rstrip() for r in figures]
    lines += ["", s.message]
    if s.adapt is not None:
        lines.append(adapt_line(s.adapt))
    for t in s.tasks:
        if t.state in ("skipped", "error", "unfinished") and t.message:
            lines.append(f"{t.name}: {t.state}: {t.message}")
    if s.report:
        lines.append(f"Report: {s.report} (open it in a browser; each task's report is linked)")
    return "\n".join(lines)


def adapt_line(a: AdaptPhase) -> str:
    """The adapt phase in one line: what it did, the rules it taught, what it cost."""
    from kernelcraft.agent.loop.runwords import steps_words

    if a.state == "skipped":
        return f"Adapt phase: skipped ({a.message})."
    earlier = " (finished earlier)" if a.this_run == "done earlier" else ""
    dollars = "unknown (unpriced model)" if a.cost_usd is None else f"${a.cost_usd:.2f}"
    line = (
        f"Adapt phase{earlier}: {a.state}, {a.tasks} tasks at {steps_words(a.steps_per_task)}, "
        f"{len(a.rules_learnt)} active rules learnt or grown, {a.tokens:,} tokens, {dollars}."
    )
    return line + (f" {a.message}" if a.message and a.state != "finished" else "")
