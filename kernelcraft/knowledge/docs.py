"""Retrieval over the hardware manuals in `kernelcraft/hw_docs/`.

Each manual is a markdown file in the format `hw_docs/FORMAT.md` describes (front matter with
title, arch and sources; `#`/`##`/`###` sections). `HwDocs.index()` splits every file into one
section per heading, with a heading path ("Hopper H100/H200 > Memory > L2"), and stores them in the
`documents`/`sections` tables with an FTS5 index. A file is re-indexed only when its sha256
changes; a file that disappeared is dropped. `search_hw_docs` ranks sections with BM25 (the heading
path weighs more than the body); with an arch, sections for other architectures are left out and
those for exactly that arch rank above arch-independent ones.

Who writes: `HwDocs.index()`, called by the server at start-up and by `kernelcraft docs search`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelcraft.base.errors import NotFoundError, UsageError
from kernelcraft.base.targets import KNOWN_ARCHES, arch_family
from kernelcraft.knowledge.text import fts_query
from kernelcraft.schema.docs import DocSection, IndexReport, SectionRef
from kernelcraft.store import Store

HW_DOCS_DIR = Path(__file__).resolve().parent.parent / "hw_docs"
SKIPPED_FILES = frozenset({"FORMAT.md", "README.md"})
SNIPPET_CHARS = 600
# BM25 column weights: heading_path, body. Headings name the topic; a match there means more.
HEADING_WEIGHT, BODY_WEIGHT = 4.0, 1.0
EXACT_ARCH_BOOST = 1.3


@dataclass
class ParsedSection:
    heading_path: str
    anchor: str
    arch: str
    body: str


@dataclass
class ParsedDoc:
    title: str
    arch: str
    sources: list[str]
    sections: list[ParsedSection] = field(default_factory=list)


def _norm_arch(value: str, where: str) -> str:
    parts = [p.strip().lower() for p in value.split(",") if p.strip()]
    if not parts:
        raise UsageError(f"{where}: arch is empty; use one of {', '.join(KNOWN_ARCHES)}")
    for p in parts:
        if p not in KNOWN_ARCHES:
            raise UsageError(
                f"{where}: unknown arch {p!r}; use one of {', '.join(KNOWN_ARCHES)} (see FORMAT.md)"
            )
    return ",".join(parts)


def _anchor(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def parse_doc(text: str, name: str) -> ParsedDoc:
    """Parse one manual (see hw_docs/FORMAT.md). UsageError naming the file and line on bad format."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise UsageError(f"{name}:1: a manual starts with a '---' front-matter block (see hw_docs/FORMAT.md)")
    meta: dict[str, str] = {}
    sources: list[str] = []
    end = None
    current_key = None
    for i, line in enumerate(lines[1:], 2):
        if line.strip() == "---":
            end = i
            break
        if line.startswith((" ", "\t")) and line.strip().startswith("- "):
            if current_key != "sources":
                raise UsageError(f"{name}:{i}: only 'sources' may have list items")
            sources.append(line.strip()[2:].strip())
            continue
        m = re.match(r"^([A-Za-z_]+):\s*(.*)$", line)
        if not m:
            if line.strip():
                raise UsageError(
                    f"{name}:{i}: expected 'key: value' in the front matter, got {line.strip()[:60]!r}"
                )
            continue
        current_key = m.group(1).lower()
        meta[current_key] = m.group(2).strip()
    if end is None:
        raise UsageError(f"{name}: the front matter has no closing '---' line")
    for key in ("title", "arch"):
        if not meta.get(key):
            raise UsageError(f"{name}: the front matter needs '{key}:' (see hw_docs/FORMAT.md)")
    if not sources:
        raise UsageError(f"{name}: the front matter needs a 'sources:' list with at least one item")
    title = meta["title"]
    doc = ParsedDoc(title=title, arch=_norm_arch(meta["arch"], name), sources=sources)

    stack: list[tuple[int, str]] = []
    heading: str | None = None
    body: list[str] = []
    in_fence = False
    ords: dict[str, int] = {}

    def flush() -> None:
        content = "\n".join(body).strip()
        path = " > ".join([title, *(h for _, h in stack)])
        arch = doc.arch
        first, _, rest = content.partition("\n")
        m = re.fullmatch(r"arch:\s*(\S.*)", first.strip())
        if m:
            arch = _norm_arch(m.group(1), f"{name} section {path!r}")
            content = rest.strip()
        if not content and heading is None:
            return
        anchor = _anchor(stack[-1][1]) if stack else "top"
        n = ords.get(anchor, 0)
        ords[anchor] = n + 1
        doc.sections.append(ParsedSection(path, anchor if n == 0 else f"{anchor}-{n}", arch, content))

    for line in lines[end:]:
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        m = None if in_fence else re.match(r"^(#{1,3})\s+(.+?)\s*#*\s*$", line)
        if m is None:
            body.append(line)
            continue
        level, text_ = len(m.group(1)), m.group(2).strip()
        if level == 1 and not doc.sections and not stack and not "\n".join(body).strip():
            # The document's own "# Title" line: not a section of its own.
            body = []
            continue
        flush()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text_))
        heading = text_
        body = []
    flush()
    return doc


def _doc_files(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.glob("*.md") if p.name not in SKIPPED_FILES and not p.name.startswith("_")
    )


def _row_to_section(row: Any, score: float, full: bool) -> DocSection:
    body = row["body"]
    if not full and len(body) > SNIPPET_CHARS:
        cut = body.rfind(" ", 0, SNIPPET_CHARS)
        body = body[: cut if cut > 0 else SNIPPET_CHARS] + " …"
    return DocSection(
        id=row["id"],
        title=row["title"],
        heading_path=row["heading_path"],
        file=row["path"],
        arch=row["arch"],
        snippet=body,
        score=score,
        sources=[s for s in row["sources"].split("\n") if s],
    )


def _arch_matches(section_arch: str, arch: str, family: str | None) -> tuple[bool, bool]:
    """(relevant, exact) for a section's arch list against the asked arch."""
    arches = section_arch.split(",")
    if arch in arches:
        return True, True
    if "any" in arches:
        return True, False
    if family is not None and arch == family:
        return any(arch_family(a) == family for a in arches), False
    return False, False


class HwDocs:
    """Index and search the manuals of one folder (default: the shipped `kernelcraft/hw_docs/`)."""

    def __init__(self, store: Store, folder: str | Path | None = None) -> None:
        self.store = store
        self.folder = Path(folder) if folder is not None else HW_DOCS_DIR

    async def index(self) -> IndexReport:
        """(Re)index changed files, drop vanished ones. Parses everything before writing anything."""
        if not self.folder.is_dir():
            raise UsageError(f"{self.folder} is not a folder of manuals; check the installation")
        report = IndexReport()
        files = _doc_files(self.folder)
        rows = await self.store.conn.execute_fetchall("SELECT id, path, sha256 FROM documents")
        known = {r["path"]: (r["id"], r["sha256"]) for r in rows}
        parsed: list[tuple[str, str, ParsedDoc]] = []
        for path in files:
            raw = path.read_bytes()
            digest = hashlib.sha256(raw).hexdigest()
            if known.get(path.name, (None, None))[1] == digest:
                report.unchanged.append(path.name)
                continue
            parsed.append((path.name, digest, parse_doc(raw.decode("utf-8"), path.name)))
        gone = sorted(set(known) - {p.name for p in files})
        if not parsed and not gone:
            return report
        async with self.store.transaction() as conn:
            for name in gone:
                await conn.execute("DELETE FROM sections WHERE document_id = ?", (known[name][0],))
                await conn.execute("DELETE FROM documents WHERE id = ?", (known[name][0],))
                report.removed.append(name)
            for name, digest, doc in parsed:
                if name in known:
                    await conn.execute("DELETE FROM sections WHERE document_id = ?", (known[name][0],))
                    await conn.execute("DELETE FROM documents WHERE id = ?", (known[name][0],))
                cur = await conn.execute(
                    "INSERT INTO documents (path, title, arch, sources, sha256) VALUES (?, ?, ?, ?, ?)",
                    (name, doc.title, doc.arch, "\n".join(doc.sources), digest),
                )
                await conn.executemany(
                    "INSERT INTO sections (document_id, ord, heading_path, anchor, arch, body) VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (cur.lastrowid, i, s.heading_path, s.anchor, s.arch, s.body)
                        for i, s in enumerate(doc.sections)
                    ],
                )
                report.indexed.append(name)
                report.sections += len(doc.sections)
        return report

    async def search_hw_docs(self, query: str, arch: str | None = None, limit: int = 5) -> list[DocSection]:
        """Sections ranked for `query` by BM25; with `arch` (a target such as sm_90a, or a family:
        nvidia, amd), only sections for that arch or for any arch, exact matches boosted."""
        if limit < 1:
            return []
        a = arch.strip().lower() if arch else None
        family = arch_family(a) if a else None
        if a is not None and a not in KNOWN_ARCHES and a not in ("nvidia", "amd"):
            raise UsageError(
                f"unknown arch {arch!r} for the manuals; use one of {', '.join(KNOWN_ARCHES)}, nvidia, amd"
            )
        q = fts_query(query)
        if q is None:
            return []
        rows = await self.store.conn.execute_fetchall(
            "SELECT s.id, s.heading_path, s.arch, s.body, d.title, d.path, d.sources,"
            f" bm25(sections_fts, {HEADING_WEIGHT}, {BODY_WEIGHT}) AS bm"
            " FROM sections_fts JOIN sections s ON s.id = sections_fts.rowid"
            " JOIN documents d ON d.id = s.document_id"
            " WHERE sections_fts MATCH ? ORDER BY bm LIMIT ?",
            (q, max(limit * 8, 40)),
        )
        scored = []
        for r in rows:
            score = -r["bm"]
            if a is not None:
                relevant, exact = _arch_matches(r["arch"], a, family)
                if not relevant:
                    continue
                if exact:
                    score *= EXACT_ARCH_BOOST
            scored.append((score, r))
        scored.sort(key=lambda sr: (-sr[0], sr[1]["id"]))
        return [_row_to_section(r, s, full=False) for s, r in scored[:limit]]

    async def list_sections(self) -> list[SectionRef]:
        """Every indexed section, manual by manual in document order."""
        rows = await self.store.conn.execute_fetchall(
            "SELECT s.id, s.heading_path, s.arch, d.path, d.arch AS doc_arch FROM sections s"
            " JOIN documents d ON d.id = s.document_id ORDER BY d.path, s.ord"
        )
        return [
            SectionRef(
                id=r["id"],
                heading_path=r["heading_path"],
                file=r["path"],
                arch=r["arch"] or r["doc_arch"] or "any",
            )
            for r in rows
        ]

    async def get_section(self, section_id: int) -> DocSection:
        """One whole section. NotFoundError when the id is unknown."""
        rows = list(
            await self.store.conn.execute_fetchall(
                "SELECT s.id, s.heading_path, s.arch, s.body, d.title, d.path, d.sources"
                " FROM sections s JOIN documents d ON d.id = s.document_id WHERE s.id = ?",
                (section_id,),
            )
        )
        if not rows:
            raise NotFoundError(f"no manual section with id {section_id}; search with search_hw_docs first")
        return _row_to_section(rows[0], 0.0, full=True)
