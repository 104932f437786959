"""A level run's figures in words and as a page (pure: a summary in, text out; no I/O).

`figure_rows` gives the level's table in the shape of KernelBench's and AdaExplore's (the correct
rate, fast_1 and fast_2 against eager and against `torch.compile`, the geometric-mean speedup,
tokens, dollars, GPU seconds), saying "unknown" and why where a figure was not measured; `task_rows`
one row per task. The CLI prints them (`kernelcraft optimize FOLDER`) and `render_level_html` draws
them as the level's page, each task linking its own report.
"""

from __future__ import annotations

from html import escape

from kernelcraft.report.html import STYLE
from kernelcraft.schema.levelrun import LevelRunSummary, OptimizedTask

NO_SPEED = "unknown (no GPU)"
NO_PRICE = "unknown (unpriced model)"

TASK_COLUMNS = (
    "id",
    "task",
    "state",
    "steps",
    "correct",
    "× eager",
    "× torch.compile",
    "tokens",
    "dollars",
    "GPU s",
)


def _ratio(x: float | None, timed: bool) -> str:
    if x is None:
        return NO_SPEED if not timed else "—"
    return f"{x:.2f}×"


def _share(x: float | None, timed: bool) -> str:
    return NO_SPEED if x is None or not timed else f"{x:.2f}"


def _dollars(x: float | None) -> str:
    return NO_PRICE if x is None else f"${x:,.2f}"


def figure_rows(s: LevelRunSummary) -> list[tuple[str, str, str]]:
    """(figure, against eager, against torch.compile) for the whole level."""
    f1, f2 = s.fast(1.0), s.fast(2.0)
    correct = f"{s.correct} of {s.total} ({s.correct_rate:.0%})"
    gpu = NO_SPEED if s.gpu_seconds is None else f"{s.gpu_seconds:,.1f}"
    return [
        ("correct", correct, ""),
        (
            "fast_1",
            _share(f1.vs_eager if f1 else None, s.timed),
            _share(f1.vs_compiled if f1 else None, s.timed),
        ),
        (
            "fast_2",
            _share(f2.vs_eager if f2 else None, s.timed),
            _share(f2.vs_compiled if f2 else None, s.timed),
        ),
        (
            "geomean speedup",
            _ratio(s.geomean_speedup_vs_eager, s.timed),
            _ratio(s.geomean_speedup_vs_compiled, s.timed),
        ),
        ("tokens", f"{s.tokens:,}", ""),
        ("dollars", _dollars(s.cost_usd), ""),
        ("GPU seconds", gpu, ""),
    ]


def task_row(t: OptimizedTask) -> tuple[str, ...]:
    steps = f"{t.steps_done}/{t.budget}" if t.budget is not None else str(t.steps_done)
    gpu = NO_SPEED if t.gpu_seconds is None else f"{t.gpu_seconds:,.1f}"
    ok = "yes" if t.correct else "no"
    return (
        str(t.problem_id),
        t.name,
        t.state if t.this_run != "done earlier" else f"{t.state} (earlier)",
        steps,
        ok,
        _ratio(t.speedup_vs_eager, t.timed) if t.correct else "—",
        _ratio(t.speedup_vs_compiled, t.timed) if t.correct else "—",
        f"{t.tokens:,}",
        _dollars(t.cost_usd),
        gpu,
    )


def render_level_html(s: LevelRunSummary, links: dict[int, str | None]) -> str:
    """The level's page; `links`: each task's report, relative to the page (None: not written)."""
    title = f"kernelcraft level run: {s.tasks_dir}"
    head = "".join(f"<th>{escape(c)}</th>" for c in ("", "vs eager", "vs torch.compile"))
    figures = "".join(
        f"<tr><td>{escape(a)}</td><td>{escape(b)}</td><td>{escape(c)}</td></tr>" for a, b, c in figure_rows(s)
    )
    rows = []
    for t in s.tasks:
        cells = [escape(c) for c in task_row(t)]
        link = links.get(t.problem_id)
        if link is not None:
            cells[1] = f'<a href="{escape(link)}">{cells[1]}</a>'
        why = (
            f'<br><span class="muted">{escape(t.message)}</span>'
            if t.message and t.state != "finished"
            else ""
        )
        cells[2] += why
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    task_head = "".join(f"<th>{escape(c)}</th>" for c in TASK_COLUMNS)
    model = f" ({s.model})" if s.model else ""
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">{s.total} tasks, preset {escape(s.preset)}, {s.steps_per_task} steps a task, '
        f"LLM {escape(s.llm + model)}; run directory {escape(s.out_dir)}.</p>",
        f'<p class="notice">{escape(s.message)}</p>' if not s.timed else f"<p>{escape(s.message)}</p>",
        "<h2>The level</h2>",
        f'<table class="facts"><tr>{head}</tr>{figures}</table>',
        '<p class="muted">fast_p: the share of all tasks whose best kernel is correct and more than p times '
        "faster (KernelBench's definition); the geometric mean is over the correct tasks.</p>",
        "<h2>Each task</h2>",
        f'<table class="facts"><tr>{task_head}</tr>{"".join(rows)}</table>',
    ]
    return PAGE.format(title=escape(title), style=STYLE, body="\n".join(body))


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
{body}
</body>
</html>
"""
