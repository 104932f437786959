"""The report's plots, as plotly figures built from a `RunReport` (pure functions, no I/O).

Why plotly: its figures are interactive (hover a node for its verdict and error, zoom a deep
tree) and it writes them as self-contained HTML with plotly.js inline, so a report opens offline
from a run directory or a CI artifact; it is a kept library, where hand-drawn SVG would be ours to
maintain. The tree has no layout engine to lean on in plotly, so `tree_layout` computes one.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import plotly.graph_objects as go

from kernelcraft.report.model import ReportNode, RunReport, Verdict

TEMPLATE = "simple_white"
COLOURS: dict[Verdict, str] = {
    "correct": "#2ca02c",
    "wrong": "#ff7f0e",
    "not_compiled": "#d62728",
    "abandoned": "#7f7f7f",
    "pending": "#c7c7c7",
    "root": "#1f77b4",
}
VERDICT_NAMES: dict[Verdict, str] = {
    "correct": "correct",
    "wrong": "wrong (compiled)",
    "not_compiled": "did not compile or crashed",
    "abandoned": "abandoned (no candidate)",
    "pending": "pending",
    "root": "root (the task)",
}
BASELINE_NAMES = {"eager": "PyTorch eager", "compiled": "torch.compile"}
SIZE_UNMEASURED = 14  # every node the same size: no speedup to size by
SIZE_MIN, SIZE_MAX = 6, 40


def tree_layout(nodes: Sequence[ReportNode]) -> dict[int, tuple[float, float]]:
    """(x, y) of each node: x its depth, y its place among the leaves (a leaf per row, in id
    order), a parent centred on its children. Iterative, so a long refinement chain is no limit."""
    ids = {n.id for n in nodes}
    children: dict[int | None, list[int]] = {}
    for n in sorted(nodes, key=lambda n: n.id):
        parent = n.parent_id if n.parent_id in ids else None
        children.setdefault(parent, []).append(n.id)
    depth: dict[int, int] = {}
    y: dict[int, float] = {}
    next_row = 0
    # (node, parent depth, expanded): a node is placed after its children (post-order)
    stack: list[tuple[int, int, bool]] = [(r, -1, False) for r in reversed(children.get(None, []))]
    while stack:
        node, parent_depth, expanded = stack.pop()
        kids = children.get(node, [])
        if expanded:
            y[node] = sum(y[k] for k in kids) / len(kids)
            continue
        depth[node] = parent_depth + 1
        if not kids:
            y[node] = float(next_row)
            next_row += 1
            continue
        stack.append((node, parent_depth, True))
        stack.extend((k, depth[node], False) for k in reversed(kids))
    return {i: (float(depth[i]), -y[i]) for i in depth}


def marker_size(node: ReportNode, measured: bool) -> float:
    if not measured:
        return SIZE_UNMEASURED
    if node.speedup is None or node.speedup <= 0:
        return SIZE_MIN + 2
    return min(max(14 + 10 * math.log2(node.speedup), SIZE_MIN), SIZE_MAX)


def _symbol(node: ReportNode) -> str:
    if node.seed:
        return "star"
    return {"root": "square", "large": "diamond", "small": "circle"}[node.kind]


def _hover(node: ReportNode, report: RunReport) -> str:
    kind = {"root": "root", "large": "large step (rewrite)", "small": "small step (refinement)"}[node.kind]
    head = f"<b>node {node.id}</b>{' · seed' if node.seed else ''} · {kind}"
    if node.proposer:
        head += f" by the {'LLM' if node.proposer == 'llm' else 'offline tuner'}"
    lines = [head, VERDICT_NAMES[node.verdict]]
    if node.failure_class is not None:
        lines[-1] += f": {node.failure_class.value}"
    if node.speedup is not None:
        lines.append(f"{node.speedup:.2f}× vs {BASELINE_NAMES.get(report.baseline, report.baseline)}")
    elif node.outcome == "correct":
        lines.append("speed not measured")
    if node.usage is not None and node.usage.total_tokens:
        lines.append(f"{node.usage.total_tokens:,} tokens")
    if node.error:
        lines.append(html.escape(node.error[:120]))
    if node.id == report.best_node_id:
        lines.append("<b>the best kernel</b>")
    return "<br>".join(lines)


def _edges(
    report: RunReport, pos: dict[int, tuple[float, float]], kind: str
) -> tuple[list[float | None], list[float | None]]:
    xs: list[float | None] = []
    ys: list[float | None] = []
    for n in report.nodes:
        if n.kind == kind and n.parent_id in pos and n.id in pos:
            (x0, y0), (x1, y1) = pos[n.parent_id], pos[n.id]
            xs += [x0, x1, None]
            ys += [y0, y1, None]
    return xs, ys


def _node_traces(
    report: RunReport, pos: dict[int, tuple[float, float]], verdict: Verdict
) -> list[go.Scatter]:
    """The nodes of one verdict, and their legend entry: a plain dot of the colour (the group's
    first symbol would otherwise stand for all of them)."""
    group = [n for n in report.nodes if n.verdict == verdict and n.id in pos]
    if not group:
        return []
    colour = COLOURS[verdict]
    best = [n.id == report.best_node_id for n in group]
    legend = go.Scatter(
        x=[None],
        y=[None],
        mode="markers",
        name=VERDICT_NAMES[verdict],
        legendgroup=verdict,
        marker={"color": colour, "size": 11, "symbol": "circle"},
    )
    nodes = go.Scatter(
        x=[pos[n.id][0] for n in group],
        y=[pos[n.id][1] for n in group],
        mode="markers+text",
        name=VERDICT_NAMES[verdict],
        legendgroup=verdict,
        showlegend=False,
        text=[str(n.id) for n in group],
        textposition="top center",
        hovertext=[_hover(n, report) for n in group],
        hoverinfo="text",
        marker={
            "color": colour,
            "size": [marker_size(n, report.speedup_measured) for n in group],
            "symbol": [_symbol(n) for n in group],
            "line": {
                "color": ["#d4a017" if b else "#333333" for b in best],
                "width": [4 if b else 1 for b in best],
            },
        },
    )
    return [legend, nodes]


def tree_figure(report: RunReport) -> go.Figure:
    """The tree left to right: edges dashed to large steps and solid to small ones, nodes coloured
    by verdict, shaped by kind, sized by speedup (when measured), the best one ringed in gold."""
    pos = tree_layout(report.nodes)
    fig = go.Figure()
    for kind, name, dash, colour in (
        ("small", "small step (refine a kernel)", "solid", "#9a9a9a"),
        ("large", "large step (a new kernel)", "dash", "#4c72b0"),
    ):
        edge_x, edge_y = _edges(report, pos, kind)
        if edge_x:
            line = {"dash": dash, "color": colour}
            fig.add_trace(
                go.Scatter(x=edge_x, y=edge_y, mode="lines", name=name, hoverinfo="skip", line=line)
            )
    for verdict in COLOURS:
        fig.add_traces(_node_traces(report, pos, verdict))
    ys = [p[1] for p in pos.values()] or [0.0]
    xs = [p[0] for p in pos.values()] or [0.0]
    rows = len({round(y, 3) for y in ys})
    fig.update_layout(
        template=TEMPLATE,
        xaxis={
            "title": "depth (steps from the root)",
            "dtick": 1,
            "zeroline": False,
            "range": [min(xs) - 0.3, max(xs) + 0.3],
        },
        yaxis={"visible": False, "range": [min(ys) - 0.6, max(ys) + 0.8]},
        height=max(300, 150 + 38 * rows),
        legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        margin={"t": 40, "b": 50, "l": 30, "r": 30},
    )
    return fig


def tree_caption(report: RunReport) -> str:
    """What the drawing's shapes and sizes mean (plain text: the page escapes it)."""
    sizing = (
        "A node's size grows with its speedup."
        if report.speedup_measured
        else "Every node is drawn the same size: speed was not measured."
    )
    return (
        "Nodes are coloured by verdict; ◆ a large step (a new kernel), ● a small step (a refinement of "
        "its parent), ★ the seed, ■ the root; a gold ring marks the best kernel. Dashed edges lead to "
        f"large steps, solid ones to small steps. {sizing} Hover a node for its verdict and error."
    )


def evaluated_in_order(report: RunReport) -> list[ReportNode]:
    """The candidates in the order the tree issued them (the seed first)."""
    done = [n for n in report.nodes if n.kind != "root" and n.status == "evaluated"]
    return sorted(done, key=lambda n: (not n.seed, n.step_index if n.step_index is not None else n.id, n.id))


def running_best(values: Sequence[float | None]) -> list[float | None]:
    out: list[float | None] = []
    best: float | None = None
    for v in values:
        if v is not None and (best is None or v > best):
            best = v
        out.append(best)
    return out


def speedup_figure(report: RunReport) -> go.Figure:
    """Best speedup so far over the steps, against eager and torch.compile (what was measured)."""
    order = evaluated_in_order(report)
    steps = list(range(len(order)))
    series = [
        ("vs PyTorch eager", [n.speedup_vs_eager for n in order], "#1f77b4"),
        ("vs torch.compile", [n.speedup_vs_compiled for n in order], "#9467bd"),
    ]
    if all(v is None for _, values, _ in series for v in values):
        label = f"vs {BASELINE_NAMES.get(report.baseline, report.baseline)}"
        series = [(label, [n.speedup for n in order], "#1f77b4")]
    fig = go.Figure()
    for name, values, colour in series:
        if all(v is None for v in values):
            continue
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=running_best(values),
                mode="lines",
                line_shape="hv",
                name=f"best {name}",
                line={"color": colour, "width": 3},
            )
        )
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=values,
                mode="markers",
                name=f"each candidate {name}",
                opacity=0.5,
                marker={"color": colour, "size": 7},
                hovertext=[f"node {n.id}" for n in order],
                hoverinfo="text+y",
            )
        )
    fig.add_hline(y=1.0, line={"dash": "dot", "color": "#555555"}, annotation_text="parity (1×)")
    fig.update_layout(
        template=TEMPLATE,
        xaxis={"title": "step (0: the seed)", "dtick": 1 if len(steps) <= 30 else None},
        yaxis={"title": "speedup (×)", "rangemode": "tozero"},
        legend={"orientation": "h", "y": -0.2},
        height=420,
    )
    return fig


def failures_figure(report: RunReport) -> go.Figure:
    items = sorted(report.failures_by_class.items(), key=lambda kv: (kv[1], kv[0]))
    fig = go.Figure(
        go.Bar(
            x=[v for _, v in items],
            y=[k for k, _ in items],
            orientation="h",
            marker={"color": "#d62728"},
            text=[str(v) for _, v in items],
            textposition="auto",
        )
    )
    fig.update_layout(
        template=TEMPLATE,
        xaxis={"title": "candidates", "dtick": 1 if max(v for _, v in items) <= 10 else None},
        height=max(240, 60 + 36 * len(items)),
        margin={"l": 220, "t": 30},
    )
    return fig


def tokens_figure(report: RunReport) -> go.Figure:
    """Tokens of each step by kind, with the run's cumulative cost where the model has a price."""
    order = [n for n in evaluated_in_order(report) if n.usage is not None]
    steps = [f"node {n.id}" for n in order]
    fig = go.Figure()
    for field, name in (
        ("input_tokens", "input"),
        ("output_tokens", "output"),
        ("cache_read_input_tokens", "cache read"),
        ("cache_creation_input_tokens", "cache write"),
    ):
        values = [getattr(n.usage, field) for n in order]
        if any(values):
            fig.add_trace(go.Bar(x=steps, y=values, name=f"{name} tokens"))
    costs = [n.usage.cost_usd if n.usage is not None else None for n in order]
    if costs and all(c is not None for c in costs):
        total, cumulative = 0.0, []
        for c in costs:
            total += c or 0.0
            cumulative.append(round(total, 6))
        fig.add_trace(
            go.Scatter(x=steps, y=cumulative, name="cost so far ($)", yaxis="y2", mode="lines+markers")
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="stack",
        yaxis={"title": "tokens", "rangemode": "tozero"},
        yaxis2={
            "title": "US dollars",
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "rangemode": "tozero",
        },
        legend={"orientation": "h", "y": -0.25},
        height=400,
    )
    return fig
