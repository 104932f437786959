"""The package's layering, as docs/development.md draws it, checked on every import in `kernelcraft/`.

    cli ─→ agent ─→ server ─→ search ─→ engine, knowledge ─→ store ─→ base

A layer imports only the layers this table allows (and itself). The agent speaks MCP: its one
use of the server is to start an in-process one. Engine and knowledge are siblings and never
import each other. `level` (whole KernelBench levels) sits beside search: it imports the engine and
base, and cli and server use it. `report` is a leaf beside the chain: it imports only base, and cli, agent and
server draw with it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kernelcraft"

ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "store": {"base"},
    "engine": {"base"},
    "knowledge": {"store", "base"},
    "search": {"engine", "knowledge", "store", "base"},
    "level": {"engine", "base"},
    "server": {"search", "level", "engine", "knowledge", "report", "store", "base"},
    "agent": {"server", "report", "base"},
    "cli": {"agent", "server", "search", "level", "engine", "knowledge", "report", "store", "base"},
    "report": {"base"},
}
# The package root (`kernelcraft/__init__.py`, `__main__.py`, `entry.py`) only names the version and
# runs the CLI (after base's bytecode cache and the engine's head start, before the CLI's imports).
ROOT_MODULES = {"__init__": {"base"}, "__main__": {"entry"}, "entry": {"base", "engine", "cli"}}
# The agent's one door into the server: building the in-process server it then talks MCP to.
AGENT_SERVER_IMPORTS = {"kernelcraft.server.app"}


def layer_of(module: str) -> str:
    """'kernelcraft.engine.local' → 'engine'; 'kernelcraft' (the version) → 'base'."""
    parts = module.split(".")
    if len(parts) == 1:
        return "base"
    return parts[1].removesuffix(".py")


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every kernelcraft module a file imports, anywhere in it (also inside functions)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kernelcraft"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "kernelcraft":
                found.append((node.lineno, node.module))
    return found


def own_layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 else rel.stem


def violations() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = own_layer(path)
        allowed = ALLOWED.get(layer, ROOT_MODULES.get(layer))
        assert allowed is not None, (
            f"{path}: not in any layer; add it to docs/development.md's graph and ALLOWED"
        )
        for line, module in imports_of(path):
            target = layer_of(module)
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            if target != layer and target not in allowed:
                bad.append(f"{where}: {layer} imports {module} ({target})")
            elif layer == "agent" and target == "server" and module not in AGENT_SERVER_IMPORTS:
                bad.append(f"{where}: the agent imports {module}; it may only start the in-process server")
    return bad


def test_every_import_follows_the_layering():
    assert violations() == []


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    fake = tmp_path / "kernelcraft"
    (fake / "engine").mkdir(parents=True)
    (fake / "engine" / "x.py").write_text("def f():\n    from kernelcraft.search import service\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)
    assert violations() == ["kernelcraft/engine/x.py:2: engine imports kernelcraft.search (search)"]


def test_the_development_page_draws_the_same_graph():
    page = (PACKAGE.parent / "docs" / "development.md").read_text()
    assert "cli ─→ agent ─→ server ─→ search ─→ engine, knowledge ─→ store ─→ base" in page
    assert "`report` is a leaf beside this chain: it imports only `base`" in page
    for layer in ALLOWED:
        assert f"`kernelcraft/{layer}" in page, (
            f"docs/development.md's table of packages has no row for {layer}"
        )
