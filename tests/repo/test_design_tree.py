"""docs/design.md draws the package's tree (its top-level modules and packages, and each package's
rooms); this module fails when the drawing and kernelcraft/ differ."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "kernelcraft"


def drawn(page: str) -> set[str]:
    """The paths the drawing names under `kernelcraft/`: `engine`, `engine/host`, `store.py`."""
    block = re.search(r"```\npyproject\.toml .*?\n```", page, re.S)
    assert block is not None, "docs/design.md has no package tree (a code block opening with pyproject.toml)"
    names: set[str] = set()
    inside, parent = False, ""
    for line in block.group(0).splitlines():
        if line.startswith("kernelcraft/"):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            break  # the next top-level entry (tests/, examples/ ...)
        m = re.match(r"( +)(\S+)", line)
        if not inside or m is None or len(m.group(1)) > 4:
            continue  # a description's continuation line
        name = m.group(2).rstrip("/")
        if len(m.group(1)) == 2:
            parent = name
            names.add(name)
        else:
            names.add(f"{parent}/{name}")
    return names


def on_disk(package: Path) -> set[str]:
    """Top-level modules (but `__init__.py`) and folders, and each package's subpackages."""
    names: set[str] = set()
    for p in package.iterdir():
        if p.name.startswith(("_", ".")) and p.name != "__main__.py":
            continue
        if p.is_file() and p.suffix == ".py":
            names.add(p.name)
        elif p.is_dir():
            names.add(p.name)
            names |= {f"{p.name}/{s.name}" for s in p.iterdir() if (s / "__init__.py").is_file()}
    return names


def test_the_design_page_draws_the_package_as_it_is() -> None:
    page = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    drawing, disk = drawn(page), on_disk(PACKAGE)
    assert drawing == disk, (
        f"docs/design.md's tree and kernelcraft/ differ: drawn but absent {sorted(drawing - disk)}, "
        f"present but not drawn {sorted(disk - drawing)}"
    )


def test_the_tree_check_sees_a_room_that_is_not_drawn(tmp_path: Path) -> None:
    """The same check on a copy whose engine has a room the drawing lacks, and whose drawing names
    a module that is gone: both differences are reported."""
    pkg = tmp_path / "kernelcraft"
    for folder in ("engine/host", "engine/newroom", "cli"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "entry.py").write_text("")
    page = "```\npyproject.toml   x\nkernelcraft/\n  engine/   e\n    host/   h\n  cli/   c\n  store.py  s\n```\n"
    drawing, disk = drawn(page), on_disk(pkg)
    assert disk - drawing == {"engine/newroom", "entry.py"} and drawing - disk == {"store.py"}
