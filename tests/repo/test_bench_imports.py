"""The benchmarks stand on their own: nothing in `bench/` imports from `tests/` (they share
`bench/support.py` instead), so a change to a test helper cannot break a benchmark run on the GPU."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# `tests` as a package, and the test helpers by the names pytest puts on the path.
TEST_MODULES = {"tests", "conftest"} | {p.stem for p in (REPO / "tests").glob("*.py")}


def test_no_benchmark_imports_from_tests() -> None:
    found = []
    for path in sorted((REPO / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [
                f"{path.relative_to(REPO)}:{node.lineno}: {n}"
                for n in names
                if n.split(".")[0] in TEST_MODULES
            ]
    assert found == [], "bench/ imports from tests/ (use bench/support.py):\n" + "\n".join(found)
