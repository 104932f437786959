"""The tools' one registry (`kernelcraft.server.tools.TOOLS`): the server publishes exactly its
tools, in its order, each with the title, hints and description its registration gives."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from mcp import Client
from server_support import NoEvaluations, settings_for

from kernelcraft.server.app import create_server
from kernelcraft.server.tools import TOOLS, register_tools
from kernelcraft.server.tools.common import Tool

TOOLS_DIR = Path(__file__).resolve().parents[3] / "kernelcraft" / "server" / "tools"


@pytest.mark.anyio
async def test_the_server_publishes_exactly_the_registrys_tools_in_its_order(tmp_path: Path) -> None:
    server = create_server(settings_for(tmp_path), NoEvaluations)
    async with Client(server) as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == [t.name for t in TOOLS]
    for published, registered in zip(listed, TOOLS, strict=True):
        assert published.annotations == registered.annotations  # (titles are not published: schema.py)
        assert published.description and published.description == registered.fn.__doc__


def test_each_tool_in_the_registry_is_named_once() -> None:
    names = [t.name for t in TOOLS]
    assert len(set(names)) == len(names) and all(isinstance(t, Tool) for t in TOOLS)


def test_every_tool_a_module_of_tools_defines_is_in_the_registry() -> None:
    """A handler written with `@tool(...)` but left out of `TOOLS` would never be published."""
    defined = set()
    for module in TOOLS_DIR.glob("*.py"):
        for node in ast.parse(module.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and any(
                isinstance(d, ast.Call) and getattr(d.func, "id", None) == "tool" for d in node.decorator_list
            ):
                defined.add(node.name)
    assert defined == {t.name for t in TOOLS}


def test_registering_the_registry_twice_on_one_server_keeps_one_of_each(tmp_path: Path) -> None:
    server = create_server(settings_for(tmp_path), NoEvaluations)
    register_tools(server)  # the SDK keeps the first registration of a name
    held = {t.name: t for t in server._tool_manager.list_tools()}
    assert sorted(held) == sorted(t.name for t in TOOLS)
    assert all(held[t.name].title == t.title for t in TOOLS)
