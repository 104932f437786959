"""`render_html(report)`: the report as one self-contained HTML page (pure: a string in, no I/O).

plotly.js is inlined once in the page's head and each figure is a div that draws itself, so the
file opens offline. Without measured speedups the page says so in a box at the top and in place of
the speedup curve, rather than draw a flat line that would read as "no progress".
"""

from __future__ import annotations

import difflib
from collections import Counter
from html import escape

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from kernelcraft.report.figures import (
    BASELINE_NAMES,
    failures_figure,
    speedup_figure,
    tokens_figure,
    tree_caption,
    tree_figure,
)
from kernelcraft.report.model import RunReport
from kernelcraft.report.steps import steps_section, tuner_section

PLOT_CONFIG = {"displaylogo": False, "responsive": True}
DIFF_CONTEXT_LINES = 5

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; padding-bottom: 0.3rem; }
table.facts td { padding: 0.15rem 1rem 0.15rem 0; vertical-align: top; }
table.facts td:first-child { color: #666; white-space: nowrap; }
.notice { border: 2px solid #d4a017; background: #fff8e1; padding: 0.8rem 1rem; border-radius: 6px;
          font-weight: 500; }
.muted { color: #666; }
pre { background: #f6f8fa; padding: 0.8rem; overflow-x: auto; font-size: 0.85rem; }
table.diff { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.8rem; border-collapse: collapse;
             width: 100%; }
table.diff td { padding: 0 0.4rem; vertical-align: top; white-space: pre-wrap; }
table.diff th { background: #f0f0f0; padding: 0.3rem; }
.diff_header { background: #f0f0f0; color: #888; text-align: right; }
td.diff_header { text-align: right; }
.diff_next { background: #f0f0f0; }
.diff_add { background: #ccffd8; }
.diff_chg { background: #fff5b1; }
.diff_sub { background: #ffd7d5; }
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
<script type="text/javascript">{plotlyjs}</script>
</head>
<body>
{body}
</body>
</html>
"""


def figure_html(fig: go.Figure, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG)


def section(title: str, anchor: str, body: str) -> str:
    return f'<section id="{anchor}">\n<h2>{escape(title)}</h2>\n{body}\n</section>'


def _best_words(report: RunReport) -> str:
    best = report.node(report.best_node_id)
    if best is None:
        return "no correct kernel"
    what = f"node {best.id}{' (the seed)' if best.seed else ''}"
    if best.speedup is None:
        return f"{what}: correct, speed not measured"
    against = BASELINE_NAMES.get(report.baseline, report.baseline)
    extra = []
    if best.speedup_vs_compiled is not None:
        extra.append(f"{best.speedup_vs_compiled:.2f}× vs torch.compile")
    if best.candidate_us is not None:
        extra.append(f"{best.candidate_us:.1f} µs")
    if best.roofline is not None:
        extra.append(best.roofline)
    return f"{what}: {best.speedup:.2f}× vs {against}" + (f" ({', '.join(extra)})" if extra else "")


def _usage_words(report: RunReport) -> str:
    if report.usage is None:
        return "not recorded here (the driver records tokens in the run directory's steps.jsonl)"
    u = report.usage
    cost = "price unknown (unpriced model)" if u.cost_usd is None else f"${u.cost_usd:.4f}"
    return f"{u.total_tokens:,} tokens in {u.calls} LLM calls, {cost}"


def facts(report: RunReport) -> str:
    # The steps, as the budget counts them (the search's `budget_usage`): the seed is evaluated at
    # the start, outside the budget, and said apart, so these figures match the run's summary.
    steps = [n for n in report.nodes if n.kind != "root" and not n.seed and n.status == "evaluated"]
    seed = next((n for n in report.nodes if n.seed and n.status == "evaluated"), None)
    verdicts = Counter(n.verdict for n in steps)
    proposers = Counter(n.proposer for n in steps if n.proposer)
    rows = [
        ("task", report.task_name),
        ("tree", f"{report.tree_id} ({report.policy}, budget {report.budget}, target {report.target})"),
        (
            "steps",
            f"{len(steps)} of the budget's {report.budget} evaluated: {verdicts['correct']} correct, "
            f"{verdicts['wrong']} wrong, {verdicts['not_compiled']} not compiled, "
            f"{verdicts['abandoned']} abandoned",
        ),
    ]
    if seed is not None:
        rows.append(
            (
                "seed",
                f"node {seed.id}, {seed.verdict.replace('_', ' ')} (evaluated at the start, outside the budget)",
            )
        )
    rows.append(("best", _best_words(report)))
    if report.best_why:
        rows.append(("why it runs as it does", "; ".join(report.best_why)))
    if proposers:
        rows.append(("written by", ", ".join(f"{k}: {v} steps" for k, v in sorted(proposers.items()))))
    if report.llm is not None:
        rows.append(("LLM", report.llm + (f" ({report.model})" if report.model else "")))
    rows.append(("tokens and cost", _usage_words(report)))
    if report.stopped_because:
        rows.append(("stopped", report.stopped_because))
    if report.run_dir:
        rows.append(("run directory", report.run_dir))
    cells = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts">{cells}</table>'


def speed_section(report: RunReport) -> str:
    if not report.speedup_measured:
        return (
            '<p class="notice" id="speed-not-measured">No curve: speed was not measured (see the note at the '
            "top), and a curve of unmeasured speedups would be a flat line that means nothing.</p>"
        )
    return figure_html(speedup_figure(report), "speedup")


def failures_section(report: RunReport) -> str:
    if not report.failures_by_class:
        return '<p class="muted">No candidate failed.</p>'
    return figure_html(failures_figure(report), "failures")


def tokens_section(report: RunReport) -> str:
    words = f"<p>{escape(_usage_words(report))}.</p>"
    spent = any(n.usage is not None and n.usage.total_tokens for n in report.nodes)
    if spent:
        caption = '<p class="muted">Tokens of each step by kind; steps the offline tuner wrote cost none.</p>'
        return words + caption + figure_html(tokens_figure(report), "tokens")
    if report.usage is not None and all(n.proposer in (None, "tuner") for n in report.nodes):
        return words + '<p class="muted">The offline tuner wrote every step: no tokens were spent.</p>'
    return words


def diff_section(report: RunReport) -> str:
    best = report.node(report.best_node_id)
    if report.best_code is None or best is None:
        return '<p class="muted">No correct kernel: nothing to set beside the seed.</p>'
    code = f"<details><summary>the best kernel (node {best.id})</summary><pre>{escape(report.best_code)}</pre></details>"
    if report.seed_code is None:
        return f'<p class="muted">The tree had no seed kernel to compare with.</p>{code}'
    if best.seed or report.seed_code == report.best_code:
        why = (
            " Without measured speed every correct kernel scores the same, and the earliest one (the seed) "
            "stays the best."
            if not report.speedup_measured
            else ""
        )
        return f'<p class="notice">The best kernel is the seed itself: no step improved on it.{escape(why)}</p>{code}'
    seed = next((n for n in report.nodes if n.seed), None)
    table = difflib.HtmlDiff(wrapcolumn=90).make_table(
        report.seed_code.splitlines(),
        report.best_code.splitlines(),
        fromdesc=f"seed (node {seed.id})" if seed else "seed",
        todesc=f"best (node {best.id})",
        context=True,
        numlines=DIFF_CONTEXT_LINES,
    )
    legend = '<p class="muted"><span class="diff_add">added</span> <span class="diff_chg">changed</span> <span class="diff_sub">deleted</span></p>'
    return legend + table


def render_html(report: RunReport) -> str:
    title = f"kernelcraft report: {report.task_name}, tree {report.tree_id}"
    parts = [f"<h1>{escape(title)}</h1>", facts(report)]
    if not report.speedup_measured:
        parts.append(f'<p class="notice">{escape(report.speed_note or "Speed was not measured.")}</p>')
    parts += [
        section(
            "The search tree",
            "tree-section",
            f'<p class="muted">{escape(tree_caption(report))}</p>' + figure_html(tree_figure(report), "tree"),
        ),
        section("Best speedup over the steps", "speedup-section", speed_section(report)),
        section("Failures by class", "failures-section", failures_section(report)),
        section("Tokens and cost", "tokens-section", tokens_section(report)),
        section("The best kernel beside the seed", "diff-section", diff_section(report)),
        section("Step by step", "steps-section", steps_section(report)),
    ]
    if report.tuner_axes:
        parts.append(section("The offline tuner's axes", "tuner-section", tuner_section(report)))
    return PAGE.format(title=escape(title), style=STYLE, plotlyjs=get_plotlyjs(), body="\n".join(parts))
