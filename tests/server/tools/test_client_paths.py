"""Folders a client names over MCP (issue 38): an empty or relative one is refused with what to
pass, and nothing lands in the server's working directory."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from server_support import NoEvaluations, settings_for

from kernelcraft.server.app import create_server
from kernelcraft.server.state import AppState
from kernelcraft.server.tools.economy import reader_of
from kernelcraft.server.tools.inputs import client_folder


async def call_level(tmp_path: Path, **args: Any) -> str:
    async with Client(create_server(settings_for(tmp_path), NoEvaluations)) as client:
        result = await client.call_tool("evaluate_level", args)
    assert result.is_error
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"tasks_dir": "", "out_dir": ""}, "tasks_dir is empty"),
        ({"tasks_dir": "   ", "out_dir": "/tmp/x"}, "tasks_dir is empty"),
        ({"tasks_dir": "level1", "out_dir": "/tmp/x"}, "tasks_dir 'level1' is relative"),
        ({"tasks_dir": "/no/such/level", "out_dir": "/tmp/x"}, "is not a folder on the server's machine"),
    ],
)
async def test_evaluate_level_refuses_an_empty_or_relative_folder_and_writes_nothing_in_its_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: dict[str, str], said: str
) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "model.py").write_text("print('not a task')\n")
    monkeypatch.chdir(cwd)
    text = await call_level(tmp_path, **args)
    assert said in text
    assert sorted(p.name for p in cwd.iterdir()) == ["model.py"]


@pytest.mark.anyio
async def test_evaluate_level_refuses_a_relative_or_file_out_dir(tmp_path: Path) -> None:
    tasks = tmp_path / "level1"
    tasks.mkdir()
    text = await call_level(tmp_path, tasks_dir=str(tasks), out_dir="results")
    assert "out_dir 'results' is relative" in text
    (tmp_path / "afile").write_text("")
    text = await call_level(tmp_path, tasks_dir=str(tasks), out_dir=str(tmp_path / "afile"))
    assert "is a file, not a folder" in text


def test_a_folder_a_client_names_is_absolute_with_the_servers_home_for_a_tilde(tmp_path: Path) -> None:
    assert client_folder(str(tmp_path), "tasks_dir", must_exist=True) == tmp_path
    assert client_folder("~/results", "out_dir", must_exist=False) == Path.home() / "results"


def test_each_mcp_session_of_a_client_is_a_reader_of_its_own() -> None:
    class Session:
        pass

    state = AppState.__new__(AppState)
    state.readers = weakref.WeakKeyDictionary()
    one, two = Session(), Session()
    assert reader_of(state, one, "alice") == reader_of(state, one, "alice")
    assert reader_of(state, one, "alice") != reader_of(state, two, "alice")
