"""Applying a tuner's `old -> new` edits to a kernel's source.

An edit applies when its `old` text occurs exactly once in the source as it stands after the edits
before it. Anything else (not found, ambiguous, empty, not a string) is an `EditError` whose message
is written for the model that will read it. `apply_edits` stops at the first such edit (the
proposer's retry shows the model why); `apply_what_applies` is AdaExplore's `str_replace`: each
edit that does not apply is skipped, the others are applied, and with none the kernel is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class EditError(ValueError):
    """An edit that cannot be applied; the message says which one and why."""


@dataclass(frozen=True)
class Edit:
    old: str
    new: str


def parse_edits(raw: Any) -> list[Edit]:
    """Validate the `edits` argument of a `submit_edits` call."""
    if not isinstance(raw, list) or not raw:
        raise EditError("submit_edits needs a non-empty list `edits` of {old, new} objects")
    edits = []
    for i, item in enumerate(raw, 1):
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("old"), str)
            or not isinstance(item.get("new"), str)
        ):
            raise EditError(
                f"edit {i} is not an object with string fields `old` and `new`: {str(item)[:120]!r}"
            )
        edits.append(Edit(item["old"], item["new"]))
    return edits


def _excerpt(text: str, limit: int = 80) -> str:
    one_line = text.strip().replace("\n", "\\n")
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


def apply_edits(source: str, edits: list[Edit]) -> str:
    """Apply `edits` in order; raise `EditError` at the first one that does not apply."""
    for i, edit in enumerate(edits, 1):
        problem = why_not(source, edit, i)
        if problem is not None:
            raise EditError(problem)
        source = source.replace(edit.old, edit.new, 1)
    return source


def apply_what_applies(source: str, edits: list[Edit]) -> tuple[str, list[str]]:
    """Apply each edit that applies, in order, skipping the others; the result and why each skipped
    edit was skipped."""
    skipped = []
    for i, edit in enumerate(edits, 1):
        problem = why_not(source, edit, i)
        if problem is None:
            source = source.replace(edit.old, edit.new, 1)
        else:
            skipped.append(problem)
    return source, skipped


def why_not(source: str, edit: Edit, i: int) -> str | None:
    """Why edit `i` does not apply to `source` (None when its `old` text occurs exactly once)."""
    if not edit.old:
        return f"edit {i} has an empty `old`: quote the exact text to replace"
    count = source.count(edit.old)
    if count == 0:
        hint = ""
        if edit.old.strip() and source.count(edit.old.strip()) == 1:
            hint = " (it matches once if leading/trailing whitespace is dropped: copy the text exactly)"
        return f"edit {i} does not apply: its `old` text {_excerpt(edit.old)!r} is not in the kernel{hint}"
    if count > 1:
        return (
            f"edit {i} is ambiguous: its `old` text {_excerpt(edit.old)!r} occurs {count} times; "
            "include more surrounding lines so it occurs once"
        )
    return None
