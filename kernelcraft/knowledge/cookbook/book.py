"""Loading the cookbook and finding entries in it.

`load_cookbook()` reads `index.json` and each entry's `task.py` docstring once per process (the
files ship inside the package). `Cookbook.search(query)` ranks entries with SQLite FTS5's BM25
in an in-memory table (the rulebook's and the manuals' search, the same query building:
`knowledge.text.fts_query`), its words weighted by column: the ops and KernelBench problems an
entry names count most. A query that is a KernelBench task's source is first reduced to what
its Model does (`task_terms`: the torch calls and nn modules of `forward` and `__init__`, and
the class docstring), so pasting a task finds the kernel for it.
"""

from __future__ import annotations

import ast
import functools
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from kernelcraft.base.errors import UsageError
from kernelcraft.knowledge.text import fts_query
from kernelcraft.schema.cookbook import FAMILIES, CookbookEntry, CookbookExample, CookbookFigure, figure_line

ROOT = Path(__file__).resolve().parent
INDEX = ROOT / "index.json"
ENTRIES = ROOT / "entries"

# BM25 weights of the FTS columns, in table order: id, title, family, summary, ops, kernelbench, conditions.
WEIGHTS = (4.0, 1.0, 3.0, 0.3, 6.0, 1.0, 0.2)
# Names in a task's source that say nothing about its op.
TASK_NOISE = frozenset(
    """
    torch nn functional self super init forward module model tensor shape size dim view reshape
    contiguous get_inputs get_init_inputs rand randn randint float cuda device dtype return
    """.split()
)


@dataclass
class Cookbook:
    entries: tuple[CookbookEntry, ...]
    root: Path = ENTRIES

    @functools.cached_property
    def _index(self) -> _Index:
        return _Index(self.entries)

    def get(self, entry_id: str) -> CookbookEntry:
        for e in self.entries:
            if e.id == entry_id:
                return e
        known = ", ".join(e.id for e in self.entries)
        raise UsageError(f"no cookbook entry {entry_id!r}; the entries are: {known}")

    def kernel_code(self, entry_id: str) -> str:
        return (self.root / self.get(entry_id).id / "kernel.py").read_text(encoding="utf-8")

    def task_code(self, entry_id: str) -> str:
        return (self.root / self.get(entry_id).id / "task.py").read_text(encoding="utf-8")

    def example(self, entry_id: str, score: float = 0.0, with_code: bool = True) -> CookbookExample:
        e = self.get(entry_id)
        return CookbookExample(
            id=e.id,
            family=e.family,
            summary=f"{e.title}. {e.summary} Task: {e.task}",
            conditions=e.conditions,
            precision=e.precision,
            figures=[figure_line(f) for f in e.figures],
            score=round(score, 3),
            kernel_code=self.kernel_code(entry_id) if with_code else "",
            task_code=self.task_code(entry_id) if with_code else "",
        )

    def listed(self, family: str | None = None) -> list[CookbookEntry]:
        check_family(family)
        return [e for e in self.entries if family is None or e.family == family]

    def search(
        self, query: str, family: str | None = None, limit: int = 3, with_code: bool = True
    ) -> list[CookbookExample]:
        """Entries for `query` (words, an op name, a KernelBench problem, or a task's source), best
        first; only `family`'s when given. Nothing matches: an empty list."""
        check_family(family)
        text = task_terms(query) if looks_like_task(query) else query
        match = fts_query(text)
        if match is None:
            return []
        scores = self._index.rank(match)
        ranked = sorted(
            (e for e in self.entries if e.id in scores and (family is None or e.family == family)),
            key=lambda e: -scores[e.id],
        )
        return [self.example(e.id, scores[e.id], with_code) for e in ranked[:limit]]

    def best_for_task(self, task_source: str) -> CookbookExample | None:
        """The entry whose kernel best fits a KernelBench task, with its code; None if none fits."""
        found = self.search(task_source, limit=1)
        return found[0] if found else None


class _Index:
    """An in-memory FTS5 table over the entries (built once per process)."""

    def __init__(self, entries: tuple[CookbookEntry, ...]) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.execute(
            "CREATE VIRTUAL TABLE cookbook USING fts5(id, title, family, summary, ops, kernelbench, conditions, "
            "tokenize = 'unicode61')"
        )
        self.db.executemany(
            "INSERT INTO cookbook VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    e.id.replace("_", " "),
                    e.title,
                    e.family.replace("_", " "),
                    f"{e.summary} {e.task}",
                    " ".join(e.ops),
                    " ".join(k.split("/", 1)[-1].replace("_", " ") for k in e.kernelbench),
                    " ".join(e.conditions),
                )
                for e in entries
            ],
        )
        self.ids = [e.id for e in entries]

    def rank(self, match: str) -> dict[str, float]:
        weights = ", ".join(str(w) for w in WEIGHTS)
        rows = self.db.execute(
            f"SELECT rowid, -bm25(cookbook, {weights}) FROM cookbook WHERE cookbook MATCH ?", (match,)
        ).fetchall()
        return {self.ids[rowid - 1]: float(score) for rowid, score in rows}


def check_family(family: str | None) -> None:
    if family is not None and family not in FAMILIES:
        raise UsageError(f"no family {family!r}; the families are: {', '.join(FAMILIES)}")


def looks_like_task(text: str) -> bool:
    """Whether `text` is the source of a KernelBench task (a `class Model` with a forward)."""
    return "class Model" in text and "def forward" in text


def task_terms(source: str) -> str:
    """What a task's Model does, as search words: the names its `__init__` and `forward` call or
    read (torch.matmul, nn.Conv2d, F.gelu, .softmax, torch.cumsum ...) and the docstrings of the
    module and of Model. Source
    that does not parse is returned as it is."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source
    words: list[str] = [ast.get_docstring(tree) or ""]
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"):
        doc = ast.get_docstring(cls)
        if doc:
            words.append(doc)
        for fn in (
            n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in ("__init__", "forward")
        ):
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute):
                    words.append(node.attr)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    words.append(node.func.id)
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                    words.append("matmul")
    kept = [w for w in words if w.lower() not in TASK_NOISE]
    return " ".join(kept) or source


@functools.cache
def load_cookbook(root: Path = ROOT) -> Cookbook:
    """The cookbook under `root` (default: the package's own), read once per process."""
    data = json.loads((root / "index.json").read_text(encoding="utf-8"))
    entries = []
    for raw in data["entries"]:
        folder = root / "entries" / raw["id"]
        task_doc = ast.get_docstring(ast.parse((folder / "task.py").read_text(encoding="utf-8"))) or ""
        entries.append(CookbookEntry.model_validate({**raw, "task": " ".join(task_doc.split())}))
    return Cookbook(tuple(entries), root / "entries")


def with_figures(index: Path, figures: dict[str, list[CookbookFigure]]) -> int:
    """Rewrite `index` (an index.json) with each entry's figures replaced by `figures[id]`; entries
    not named keep theirs. Returns how many entries changed. Only `bench_cookbook.py` calls it."""
    data = json.loads(index.read_text(encoding="utf-8"))
    changed = 0
    for raw in data["entries"]:
        if raw["id"] in figures:
            raw["figures"] = [f.model_dump() for f in figures[raw["id"]]]
            changed += 1
    index.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return changed
