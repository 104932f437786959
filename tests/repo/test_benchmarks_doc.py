"""docs/benchmarks.md says how to get each of its figures again: a table with one row per section,
each naming the machine, the date, the commit and the command, and linking to its section."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
TABLE = "## How to reproduce each figure"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _sections_and_rows() -> tuple[dict[str, str], list[list[str]]]:
    text = DOC.read_text(encoding="utf-8")
    headings = [m.group(2) for m in re.finditer(r"^(##+) (.+)$", text, re.MULTILINE)]
    sections = {slug(h): h for h in headings if h != TABLE.removeprefix("## ")}
    table = text.split(TABLE, 1)[1].split("\n## ", 1)[0]
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("| [")
    ]
    return sections, rows


def test_every_benchmark_section_has_a_row_with_machine_date_commit_and_command() -> None:
    sections, rows = _sections_and_rows()
    linked = {}
    for row in rows:
        m = re.fullmatch(r"\[.+\]\(#([^)]+)\)", row[0])
        assert m is not None, f"a row's first cell links to its section: {row[0]}"
        assert m.group(1) in sections, f"the row {row[0]} links to no section of the page"
        linked[m.group(1)] = row
        machine, date, commit, command = row[1:5]
        assert machine and re.fullmatch(r"2026-\d\d-\d\d", date), row
        assert re.search(r"`[0-9a-f]{7}`", commit), f"{row[0]}: no commit"
        assert "`" in command and ("bench/" in command or "kernelcraft" in command), f"{row[0]}: no command"
    missing = [h for s, h in sections.items() if s not in linked]
    assert not missing, "sections without a row in the table: " + "; ".join(missing)
