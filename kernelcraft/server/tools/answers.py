"""What a tool answer carries: the data once, as structured content, and a few lines for people.

The SDK's default answer repeats the whole result as indented JSON in the text content, next to
the same data as structured content: twice the bytes in an assistant's context for nothing (a
search step was 97 KB, 52 KB of it the repeat). Every kernelcraft tool answers through `answer`:
the structured content is the result (validated against the tool's output schema, as before),
and the text content is `summary(result)`, a few lines that say what happened.

A host that shows its model only the text content (some connectors do) gets the data there with
`KERNELCRAFT_TEXT_CONTENT=json` (`Settings.text_content`): the text is then the compact JSON, and
the structured content stays.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from kernelcraft.base.config import Settings
from kernelcraft.server.words import MCP_WORDS

MAX_SUMMARY_CHARS = 600
OPENING_CHARS = 900
"""How much of a manual section a search result or a search step quotes (by section_id: all)."""


def opening(text: str) -> str:
    """The start of a manual section's text, cut at a word, marked when cut."""
    return clip(text, OPENING_CHARS, sentences=False)


def clip(text: str, limit: int, *, sentences: bool = True) -> str:
    """`text` within about `limit` characters: whole, or cut after its last whole sentence (else
    word) that fits, and marked " …". Never cut mid-word."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = text[:limit]
    if sentences:
        end = max(head.rfind(". "), head.rfind("; "))
        if end > limit // 3:
            return head[: end + 1].rstrip(";") + " …"
    cut = head.rfind(" ")
    return head[: cut if cut > limit // 3 else limit].rstrip(" ,;:") + " …"


def answer(result: Any, settings: Settings | None) -> Any:
    """The tool's result as sent: structured content and a summary (or the compact JSON)."""
    if not isinstance(result, BaseModel):
        return result
    data = result.model_dump(mode="json", by_alias=True)
    # The command line's reader (the driver's in-process server) keeps the engine's own words.
    mcp = settings is None or settings.audience == "mcp"
    data = MCP_WORDS.data(data) if mcp else data
    if settings is not None and settings.text_content == "json":
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    else:
        text = MCP_WORDS.text(summary(result)) if mcp else summary(result)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def summary(result: BaseModel) -> str:
    """A few lines for a person reading the answer; the data is in the structured content."""
    name = type(result).__name__
    special = _SUMMARIES.get(name)
    text = special(result) if special is not None else _generic(result)
    text = clip(text, MAX_SUMMARY_CHARS)
    return f"{text}\n(The whole answer is in the structured content.)"


def _generic(result: BaseModel) -> str:
    """The result's type and its short scalar fields."""
    parts = []
    for key, value in result:
        if isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 160):
            parts.append(f"{key}: {value}")
        elif isinstance(value, list):
            parts.append(f"{key}: {len(value)} item(s)")
    return f"{type(result).__name__}: " + "; ".join(parts[:8])


def _evidence(result: Any) -> str:
    ev = getattr(result, "evidence", None)
    return f": {clip(ev.message, 300)}" if ev is not None and getattr(ev, "message", None) else ""


def _verify(r: Any) -> str:
    head = "correct" if r.correct else f"incorrect ({r.status})"
    notes = f" Notes: {' | '.join(clip(n, 160) for n in r.notes[:2])}" if r.notes else ""
    return f"{head}{_evidence(r)} [{r.device}]{notes}"


def _profile(r: Any) -> str:
    why = "".join(f"; {line}" for line in (getattr(r, "why", None) or [])[:3])
    if not r.available:
        return f"not timed{_evidence(r)}{why}"
    parts = [f"{r.speedup_vs_eager:.2f}x eager" if r.speedup_vs_eager else None]
    parts.append(f"{r.speedup_vs_compiled:.2f}x torch.compile" if r.speedup_vs_compiled else None)
    parts.append(f"{r.roofline_fraction:.0%} of the roofline floor" if r.roofline_fraction else None)
    where = "".join(
        f"; {side}: " + ", ".join(f"{k.name} {k.share:.0%}" for k in kernels[:2])
        for side, kernels in r.kernels.items()
    )
    unstable = f"; may not repeat within 5%: {r.unstable}" if getattr(r, "unstable", None) else ""
    return "timed: " + ", ".join(p for p in parts if p) + _evidence(r) + where + why + unstable


def _compile(r: Any) -> str:
    targets = getattr(r, "targets", []) or []
    done = ", ".join(f"{t.target} {'ok' if t.ok else 'failed'}" for t in targets)
    return f"compile {'ok' if r.ok else 'failed'}{_evidence(r)} ({done})"


def _rules(r: Any) -> str:
    rules = getattr(r, "rules", [])
    lines = [f"- {clip(x.text, 140)}" for x in rules[:5]]
    more = f"\n… and {len(rules) - 5} more" if len(rules) > 5 else ""
    note = getattr(r, "note", None)
    said = f"{note[0].upper()}{note[1:]}.\n" if note else ""
    return f"{said}{len(rules)} rule(s):\n" + "\n".join(lines) + more


def _search(r: Any) -> str:
    action = r.action
    if action == "start" and r.start is not None:
        s = r.start
        said = s.message.split(" Next: ")[0]  # the step is said below
        return f"{clip(said, 360)}{_step(s.next_step, None)}"
    if action == "submit" and r.submit is not None:
        s = r.submit
        return f"{clip(s.message, 300)} Budget left: {s.budget_left}.{_step(s.next_step, s.next_step_note)}"
    if action == "abandon" and r.abandon is not None:
        s = r.abandon
        return (
            f"Node {s.node.id} abandoned. Budget left: {s.budget_left}.{_step(s.next_step, s.next_step_note)}"
        )
    if action == "share":
        return f"The tree is shared with: {', '.join(r.shared_with or []) or 'nobody'}."
    if r.status is not None:
        s = r.status
        best = (
            f"Its best is node {s.best.id} ({s.best.outcome})"
            if s.best is not None
            else "No kernel is judged yet"
        )
        return (
            f"Tree {s.tree.id}: {best}; budget used {s.budget_used}, left {s.budget_left}."
            f"{_step(s.next_step, s.next_step_note)}"
        )
    return _generic(r)


def _step(step: Any, note: str | None) -> str:
    if step is None:
        return f" No next step{': ' + clip(note, 200).rstrip('.') if note else ''}."
    return (
        f" Next: a {step.kind} step, node {step.node_id} ({clip(step.reason, 160)}); its instructions, "
        "kernels, rules and manual sections are in next_step."
    )


_SUMMARIES = {
    "VerifyResult": _verify,
    "ProfileResult": _profile,
    "CompileResult": _compile,
    "RuleList": _rules,
    "SearchStep": _search,
}
