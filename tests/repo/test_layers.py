"""The package's layering: import-linter's contracts in pyproject.toml, run by `lint-imports` in
CI, are the rule; docs/development.md draws each layers contract, and this module checks that the
drawings are the contracts and that the contracts catch an upward import."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "kernelcraft"


def contracts() -> list[dict]:  # type: ignore[type-arg]
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["contracts"])


def layers_contracts() -> dict[str, list[str]]:
    """Each layers contract's rows, named without the prefix its modules share."""
    out = {}
    for contract in contracts():
        if contract["type"] != "layers":
            continue
        names = [p.strip() for row in contract["layers"] for p in row.split("|")]
        prefix = os.path.commonprefix(names)
        prefix = prefix[: prefix.rfind(".") + 1]
        out[contract["name"]] = [
            " | ".join(part.strip().removeprefix(prefix) for part in row.split("|"))
            for row in contract["layers"]
        ]
    return out


def drawings() -> dict[str, list[str]]:
    page = (REPO / "docs" / "development.md").read_text()
    blocks = re.findall(r"<!-- layers: (.*?) -->\n```\n(.*?)```\n<!-- /layers -->", page, re.S)
    return {name: [line.strip() for line in body.splitlines() if line.strip()] for name, body in blocks}


def test_the_development_page_draws_each_layers_contract() -> None:
    assert drawings() == layers_contracts()


def test_every_package_is_in_a_layer_and_has_a_row_on_the_page() -> None:
    (named,) = [set(" | ".join(rows).split(" | ")) for rows in layers_contracts().values() if "cli" in rows]
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    packages |= {"store", "entry"}
    assert packages <= named, f"not in any layer: {sorted(packages - named)}"
    page = (REPO / "docs" / "development.md").read_text()
    for name in sorted(named - {"entry"}):
        assert f"`kernelcraft/{name}" in page, (
            f"docs/development.md's table of packages has no row for {name}"
        )


def test_every_engine_room_is_in_the_rooms_contract_small_and_says_what_it_may_import() -> None:
    (rooms,) = [rows for rows in layers_contracts().values() if "host" in rows]
    named = set(" | ".join(rooms).split(" | "))
    engine = PACKAGE / "engine"
    found = {p.name for p in engine.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert found == named, f"rooms on disk {sorted(found)}, in the contract {sorted(named)}"
    assert not [p.name for p in engine.glob("*.py") if p.name != "__init__.py"], "a module outside a room"
    for room in sorted(found):
        modules = [p for p in (engine / room).glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= 12, f"engine/{room}/ holds {len(modules)} modules"
        doc = (ast.get_docstring(ast.parse((engine / room / "__init__.py").read_text())) or "").lower()
        assert "import" in doc and "called by" in doc, f"engine/{room}/__init__.py: say what it may import"


def test_the_contracts_catch_an_upward_import_inside_a_function(tmp_path: Path) -> None:
    """The same contracts on a two-layer copy: an import of a higher layer, written inside a
    function and relative, breaks them (import-linter sees both)."""
    pkg = tmp_path / "fakepkg"
    for layer in ("low", "high"):
        (pkg / layer).mkdir(parents=True)
        (pkg / layer / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "high" / "a.py").write_text("from ..low import b\n")
    (pkg / "low" / "b.py").write_text("def f():\n    from ..high import a\n    return a\n")
    config = tmp_path / "contracts.toml"
    config.write_text(
        textwrap.dedent(
            """
            [tool.importlinter]
            root_package = "fakepkg"

            [[tool.importlinter.contracts]]
            name = "layers"
            type = "layers"
            layers = ["fakepkg.high", "fakepkg.low"]
            """
        )
    )
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--config", str(config), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode != 0 and "fakepkg.low.b -> fakepkg.high.a" in done.stdout, (
        done.stdout + done.stderr
    )


def test_tests_are_laid_out_like_the_package() -> None:
    """Each test module sits in the folder of the package it tests (or security/, repo/)."""
    tests = REPO / "tests"
    assert not sorted(p.name for p in tests.glob("test_*.py")), "a test module outside a folder"
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    allowed = packages | {"security", "repo"}
    folders = {p.parent.name for p in tests.glob("*/test_*.py")}
    assert folders <= allowed, f"test folders that are no package: {sorted(folders - allowed)}"


def test_engine_tests_sit_in_the_folder_of_the_room_they_test() -> None:
    """tests/engine/<room>/ for each room's tests; tests/engine/ itself holds only the door's
    (`kernelcraft/engine/__init__.py`)."""
    engine_tests = REPO / "tests" / "engine"
    rooms = {p.name for p in (PACKAGE / "engine").iterdir() if (p / "__init__.py").exists()}
    folders = {p.parent.name for p in engine_tests.glob("*/test_*.py")}
    assert folders <= rooms, f"tests/engine/ folders that are no room: {sorted(folders - rooms)}"
    loose = sorted(p.name for p in engine_tests.glob("test_*.py"))
    assert loose == ["test_door.py"], f"engine tests outside a room's folder: {loose}"
    for folder in sorted(folders):
        modules = list((engine_tests / folder).glob("test_*.py"))
        assert len(modules) <= 12, f"tests/engine/{folder}/ holds {len(modules)} modules"


def test_no_folder_of_the_package_or_its_tests_holds_more_than_12_modules() -> None:
    """A folder that grows past 12 modules is split by concern into rooms (issue 40), in the
    package and in tests/ alike. Data is not modules: the cookbook's entries (each a task and a
    kernel), and the files tests hand to the evaluator (tests/fixtures/, tests/cheats/,
    tests/security/probes/)."""
    data = [
        PACKAGE / "knowledge" / "cookbook" / "entries",
        REPO / "tests" / "fixtures",
        REPO / "tests" / "cheats",
        REPO / "tests" / "security" / "probes",
    ]
    package = [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists())]
    tests = [REPO / "tests", *(p for p in (REPO / "tests").rglob("*") if p.is_dir())]
    crowded = {
        str(folder.relative_to(REPO)): n
        for folder in (*package, *tests)
        if not any(d in (folder, *folder.parents) for d in data)
        and (n := len([m for m in folder.glob("*.py") if m.name not in {"__init__.py", "conftest.py"}])) > 12
    }
    assert not crowded, f"folders over 12 modules: {crowded}"


def test_a_test_folder_inside_a_packages_tests_is_a_room_of_that_package() -> None:
    """tests/<package>/<room>/ only where kernelcraft/<package>/<room>/ is a package (engine's
    rooms, server/tools); tests/security/<class>/ mirrors security.md's attack classes instead
    (tests/repo/test_docs_name_tests.py checks those)."""
    tests = REPO / "tests"
    for module in tests.glob("*/*/test_*.py"):
        package, room = module.parent.parent.name, module.parent.name
        if package == "security":
            continue
        assert (PACKAGE / package / room / "__init__.py").exists(), (
            f"tests/{package}/{room}/ mirrors no room: kernelcraft/{package}/{room}/ is not a package"
        )
