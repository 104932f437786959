"""What the README and docs/clients.md promise a user of the MCP server: the table of tool
arguments, the Python client example, and the committed `.mcp.json` working from any directory of
the repository; and that the README stays short and every relative link of the documentation
resolves."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from server_support import REPO

from kernelcraft.server.reference import arguments_table, published_tools, rewrite

README = REPO / "README.md"
CLIENTS = REPO / "docs" / "clients.md"
CLIENT_EXAMPLE = REPO / "examples" / "mcp_client.py"


@pytest.mark.anyio
async def test_the_tool_table_is_the_one_the_published_schemas_give() -> None:
    clients = CLIENTS.read_text(encoding="utf-8")
    table = arguments_table(await published_tools())
    assert "| `search_tree_step` | `action` |" in table and "| `query_rules` | `context` |" in table
    assert rewrite(clients, table) == clients, (
        "regenerate it: python -m kernelcraft.server.reference docs/clients.md"
    )


def test_the_table_is_rewritten_between_its_markers_and_only_there() -> None:
    begin, end = (
        "<!-- tool-arguments: written by `python -m kernelcraft.server.reference docs/clients.md` -->",
        "<!-- /tool-arguments -->",
    )
    text = f"before\n{begin}\nold table\n{end}\nafter\n"
    assert rewrite(text, "| new |") == f"before\n{begin}\n| new |\n{end}\nafter\n"
    with pytest.raises(ValueError, match="no table markers"):
        rewrite("no markers here", "| new |")


def test_the_clients_page_quotes_the_python_client_example_whole() -> None:
    assert CLIENT_EXAMPLE.read_text(encoding="utf-8").rstrip("\n") in CLIENTS.read_text(encoding="utf-8")


def test_the_clients_page_gives_the_inspector_its_state_and_says_which_node_it_needs() -> None:
    clients = CLIENTS.read_text(encoding="utf-8")
    assert "-e KERNELCRAFT_HOME=" in clients and "Node ≥ 22.19" in clients


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_short_and_every_relative_link_of_the_docs_resolves() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150, "move the detail into docs/"
    broken = []
    for page in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for target in _LINK.findall(page.read_text(encoding="utf-8")):
            path = target.split("#", 1)[0]
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or not path:  # a URL, or an anchor on the page
                continue
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == []


@pytest.mark.slow
def test_the_python_client_example_runs_against_the_stdio_server(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KERNELCRAFT_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, str(CLIENT_EXAMPLE)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tools: query_rules, record_failure" in done.stdout and "rule: You cannot" in done.stdout
    assert "trial 1 of" in done.stdout and "correct: True - passed on cpu" in done.stdout
    assert (tmp_path / "home" / "kernelcraft.db").exists()


# ---------------------------------------------------------------------------- .mcp.json

_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def claude_code_expands(value: str, env: dict[str, str]) -> str:
    """Claude Code's expansion in .mcp.json: `${VAR}` (left as written when unset) and
    `${VAR:-default}`; a bare `$VAR` or `$(...)` is left for the shell."""

    def one(m: re.Match[str]) -> str:
        if m[1] in env:
            return env[m[1]]
        return m[2] if m[2] is not None else m[0]

    return _VARIABLE.sub(one, value)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("started_in", ["a subdirectory", "outside, with CLAUDE_PROJECT_DIR"])
async def test_the_committed_mcp_json_starts_the_server_in_the_repository_root_from_anywhere(
    tmp_path: Path, started_in: str
) -> None:
    config = json.loads((REPO / ".mcp.json").read_text())["mcpServers"]["kernelcraft-dev"]
    # Stands in for .venv/bin/python: notes the directory the server starts in, where .venv/bin/python
    # and .kc-home/ are looked for, then runs this Python.
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\npwd > "{tmp_path / "cwd"}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    env = {"KERNELCRAFT_PYTHON": str(python), "KERNELCRAFT_HOME": str(tmp_path / "home")}  # Claude Code's
    cwd = REPO / "tests" / "fixtures" / "tasks"
    if started_in.startswith("outside"):
        env["CLAUDE_PROJECT_DIR"], cwd = str(REPO), tmp_path
    params = StdioServerParameters(
        command=claude_code_expands(config["command"], env),
        args=[claude_code_expands(arg, env) for arg in config["args"]],
        env={name: claude_code_expands(value, env) for name, value in config["env"].items()},
        cwd=str(cwd),
    )
    with anyio.fail_after(120):
        async with Client(params) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
    assert "search_tree_step" in names
    assert Path((tmp_path / "cwd").read_text().strip()).resolve() == REPO.resolve()
    assert (tmp_path / "home" / "kernelcraft.db").exists()
