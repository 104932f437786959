"""The docs name the tests that prove them (docs/security.md: "a row without a test is not a
promise"); this module fails when a page names a test file or a test that does not exist, and
when tests/security/'s folders stop mirroring security.md's "Attack classes" table (one folder a
class, in the table's order, the class's row naming every module of its folder)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
SECURITY = TESTS / "security"
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
# `tests/security/box/test_no_sockets.py::test_a_name` or `test_no_sockets.py::test_a_name`; a
# name that ends in a `*` or sits in a longer path (`bench/tests/...`) is not a test's path.
NAMED = re.compile(r"(?<![\w/.-])((?:tests/[\w/]+/)?test_\w+\.py)(?:::(\w+))?")


def named_tests(text: str) -> list[tuple[str, str | None]]:
    return [(path, name or None) for path, name in NAMED.findall(text)]


def modules_by_file_name() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for module in TESTS.rglob("test_*.py"):
        found.setdefault(module.name, []).append(module)
    return found


def defines(module: Path, name: str) -> bool:
    tree = ast.parse(module.read_text())
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name
        for node in ast.walk(tree)
    )


def missing_on(text: str) -> list[str]:
    """What a page names that the tests do not hold: a path that is no file, a bare file name no
    folder of tests/ holds, a `::name` its module does not define."""
    by_name = modules_by_file_name()
    missing = []
    for path, name in named_tests(text):
        if "/" in path:
            modules = [REPO / path] if (REPO / path).is_file() else []
        else:
            modules = by_name.get(path, [])
        if not modules:
            missing.append(path)
        elif name is not None and not any(defines(m, name) for m in modules):
            missing.append(f"{path}::{name}")
    return missing


def test_every_test_a_page_names_exists() -> None:
    missing = {str(page.relative_to(REPO)): gone for page in PAGES if (gone := missing_on(page.read_text()))}
    assert not missing, f"pages name tests that do not exist (moved or renamed?): {missing}"


def test_a_page_naming_a_moved_test_file_or_a_renamed_test_fails_the_check() -> None:
    """The check itself: a path from before the class folders, a test name no module defines and
    a bare file name no folder holds are each caught; the current paths are not."""
    page = (
        "`tests/security/test_no_sockets.py`, "
        "`tests/security/box/test_no_sockets.py::test_that_was_never_written`, "
        "`test_nothing_by_this_name.py`, "
        "`tests/security/box/test_no_sockets.py`, `tests/repo/test_layers.py::test_the_development_page_draws_each_layers_contract`"
    )
    assert missing_on(page) == [
        "tests/security/test_no_sockets.py",
        "tests/security/box/test_no_sockets.py::test_that_was_never_written",
        "test_nothing_by_this_name.py",
    ]


def attack_class_rows() -> list[str]:
    page = (REPO / "docs" / "security.md").read_text()
    section = page.split("## Attack classes", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if re.match(r"\| \*\*\d+\. ", line)]


def test_tests_security_has_one_folder_per_attack_class_in_the_tables_order() -> None:
    rows = attack_class_rows()
    assert rows, "docs/security.md has no Attack classes table"
    folders = []
    for row in rows:
        tests_cell = row.rstrip(" |").rsplit(" | ", 1)[1]
        named = {p for p, _ in named_tests(tests_cell) if p.startswith("tests/security/")}
        classes = {Path(p).parent.name for p in named}
        assert len(classes) == 1, f"a class's row names tests/security/ folders {sorted(classes)}: {row[:60]}"
        (folder,) = classes
        modules = {f"tests/security/{folder}/{m.name}" for m in (SECURITY / folder).glob("test_*.py")}
        assert modules <= named, f"the row of {folder}/ does not name {sorted(modules - named)}"
        folders.append(folder)
    on_disk = {p.name for p in SECURITY.iterdir() if p.is_dir() and p.name not in {"probes", "__pycache__"}}
    assert len(folders) == len(set(folders)) and set(folders) == on_disk, (
        f"security.md's classes {folders}, tests/security/'s folders {sorted(on_disk)}"
    )
    assert not list(SECURITY.glob("test_*.py")), "a security test outside its class's folder"
