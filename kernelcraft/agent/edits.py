"""Applying a tuner's `old -> new` edits to a kernel's source.

An edit applies when its `old` text occurs exactly once in the source as it stands after the edits
before it. Anything else (not found, ambiguous, empty, not a string) is an `EditError` whose message
is the failed step's reason, written for the model that will read it in the next step's context.
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
        if not edit.old:
            raise EditError(f"edit {i} has an empty `old`: quote the exact text to replace")
        count = source.count(edit.old)
        if count == 0:
            hint = ""
            if edit.old.strip() and source.count(edit.old.strip()) == 1:
                hint = " (it matches once if leading/trailing whitespace is dropped: copy the text exactly)"
            raise EditError(
                f"edit {i} does not apply: its `old` text {_excerpt(edit.old)!r} is not in the kernel{hint}"
            )
        if count > 1:
            raise EditError(
                f"edit {i} is ambiguous: its `old` text {_excerpt(edit.old)!r} occurs {count} times; "
                "include more surrounding lines so it occurs once"
            )
        source = source.replace(edit.old, edit.new, 1)
    return source
