"""The package's layering: import-linter's contracts in pyproject.toml, run by `lint-imports` in
CI, are the rule; docs/development.md draws the layers contract, and this module checks that the
drawing is the contract and that the contracts catch an upward import."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "kernelcraft"


def contracts() -> list[dict]:  # type: ignore[type-arg]
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["contracts"])


def drawn_layers() -> list[str]:
    page = (REPO / "docs" / "development.md").read_text()
    block = re.search(r"<!-- layers: .*? -->\n```\n(.*?)```\n<!-- /layers -->", page, re.S)
    assert block is not None, "docs/development.md has no layers drawing between its markers"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_development_page_draws_the_layers_contract() -> None:
    (layers,) = [c for c in contracts() if c["type"] == "layers"]
    want = [
        " | ".join(part.strip().removeprefix("kernelcraft.") for part in row.split("|"))
        for row in layers["layers"]
    ]
    assert drawn_layers() == want


def test_every_package_is_in_a_layer_and_has_a_row_on_the_page() -> None:
    (layers,) = [c for c in contracts() if c["type"] == "layers"]
    named = {p.strip().removeprefix("kernelcraft.") for row in layers["layers"] for p in row.split("|")}
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    packages |= {"store", "entry"}
    assert packages <= named, f"not in any layer: {sorted(packages - named)}"
    page = (REPO / "docs" / "development.md").read_text()
    for name in sorted(named - {"entry"}):
        assert f"`kernelcraft/{name}" in page, (
            f"docs/development.md's table of packages has no row for {name}"
        )


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
