"""Each step of a tree in a report: what it changed, what its kernels compiled to, and the rules
in play; and the page section that lists them.

A step's change is a unified diff of its kernel against its parent's (the kernel it refined, or,
for a large step from the root, nothing to compare with: its first lines), cut to
`MAX_DIFF_LINES`; a tuner's step changes only settings, and the diff shows exactly those lines.
Its compiled kernels in words are its profile's (`ProfileResult.why`) or, without a GPU, its
compile result's (registers, spills, occupancy); the roofline floor is the node's `roofline`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from html import escape

from kernelcraft.report.model import RunReport
from kernelcraft.schema.kernelwords import compiled_words
from kernelcraft.schema.tree import NodeInfo, TreeView

MAX_DIFF_LINES = 60


def change_of(code: str | None, parent_code: str | None) -> str | None:
    """The step's change as a unified diff against its parent's kernel (None: no code)."""
    if code is None:
        return None
    if parent_code is None:
        head = code.splitlines()[:MAX_DIFF_LINES]
        return "\n".join(["(a new kernel: no parent kernel to compare with)", *head])
    lines = list(
        difflib.unified_diff(
            parent_code.splitlines(), code.splitlines(), "parent", "this step", n=1, lineterm=""
        )
    )
    if not lines:
        return "(the same code as its parent)"
    cut = len(lines) - MAX_DIFF_LINES
    return "\n".join(lines[:MAX_DIFF_LINES] + ([f"… {cut} more diff lines"] if cut > 0 else []))


def compiled_of(node: NodeInfo, target: str) -> list[str]:
    """A node's compiled kernels in words (registers, spills, occupancy, the dot unit)."""
    verdict = node.verdict
    if verdict is None:
        return []
    if verdict.profile is not None and verdict.profile.why:
        return list(verdict.profile.why)
    return compiled_words(verdict.compile, target) if verdict.compile is not None else []


def with_steps(report: RunReport, view: TreeView, codes: Mapping[int, str], rules: list[str]) -> RunReport:
    """`report` with each node's change, compiled words, and the rules in play."""
    by_id = {n.id: n for n in view.nodes}
    nodes = []
    for node in report.nodes:
        info = by_id.get(node.id)
        if info is None or node.kind == "root":
            nodes.append(node)
            continue
        parent = codes.get(info.parent_id) if info.parent_id is not None else None
        nodes.append(
            node.model_copy(
                update={
                    "change": change_of(codes.get(node.id), parent),
                    "compiled": compiled_of(info, view.tree.target),
                }
            )
        )
    return report.model_copy(update={"nodes": nodes, "rules": rules})


def steps_section(report: RunReport) -> str:
    """Every step in order: its verdict, its speed against the roofline floor, its compiled kernels,
    and what it changed; then the rules in play."""
    rows = []
    steps = sorted(
        (n for n in report.nodes if n.kind != "root"),
        key=lambda n: (n.step_index is None and not n.seed, n.step_index or 0, n.id),
    )
    for n in steps:
        label = "seed" if n.seed else f"step {n.step_index}" if n.step_index is not None else "step"
        speed = f"{n.speedup:.2f}×" if n.speedup is not None else "not timed"
        moved = f"tuner: {', '.join(n.tuner_axes)}" if n.tuner_axes else ""
        took = f"{n.step_seconds:.1f} s" if n.step_seconds is not None else ""
        facts = [f"{n.verdict}", speed, moved, took, n.roofline or "", n.error or ""]
        compiled = "".join(f"<li>{escape(w)}</li>" for w in n.compiled)
        change = (
            f"<details><summary>what changed</summary><pre>{escape(n.change)}</pre></details>"
            if n.change
            else ""
        )
        rows.append(
            f"<tr><td>{escape(label)}</td><td>node {n.id} ({escape(n.kind)})</td>"
            f"<td>{escape('; '.join(f for f in facts if f))}</td>"
            f"<td><ul>{compiled}</ul></td><td>{change}</td></tr>"
        )
    table = (
        "<table><tr><th>step</th><th>node</th><th>verdict, speed, axes moved, time, roofline floor</th>"
        f"<th>compiled (registers, occupancy)</th><th>change</th></tr>{''.join(rows)}</table>"
    )
    rules = "".join(f"<li>{escape(r)}</li>" for r in report.rules)
    in_play = (
        f'<h3>Rules in play</h3><p class="muted">The active rules ranked for this task, advice quoted as data.</p><ul>{rules}</ul>'
        if report.rules
        else ""
    )
    return table + in_play


def tuner_section(report: RunReport) -> str:
    """The offline tuner's steps per axis: how many, their time, new bests and the best gain."""
    if not report.tuner_axes:
        return '<p class="muted">The offline tuner wrote no step.</p>'
    rows = "".join(
        f"<tr><td>{escape(a.axis)}</td><td>{a.steps}</td><td>{a.seconds:.1f} s</td>"
        f"<td>{a.median_seconds:.1f} s</td><td>{a.new_best}</td>"
        f"<td>{'not timed' if a.best_gain is None else f'{a.best_gain:.2f}×'}</td></tr>"
        for a in report.tuner_axes
    )
    return (
        '<p class="muted">Each axis the tuner moved along, in the order it first moved them (the axes that '
        "matter for the kernel's family come first); a step moving two axes counts for both. The gain is "
        "the kernel it started from over the step's time.</p>"
        "<table><tr><th>axis</th><th>steps</th><th>time</th><th>median step</th><th>new bests</th>"
        f"<th>best gain</th></tr>{rows}</table>"
    )
