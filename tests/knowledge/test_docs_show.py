"""A whole manual section is reachable the way answers say: `kernelcraft docs show ID`, and the step
instructions name a tool the server has (`search_hw_docs(section_id=…)`, no `get_section`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelcraft.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_docs_show_prints_the_section_that_search_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KERNELCRAFT_HOME", str(tmp_path))
    with pytest.raises(SystemExit) as e:
        main(["docs", "search", "shared memory per SM", "--limit", "1"])
    assert e.value.code == 0
    found = re.match(r"\[(\d+)\] (.+?)  \(", capsys.readouterr().out)
    assert found is not None
    with pytest.raises(SystemExit) as e:
        main(["docs", "show", found.group(1)])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"# {found.group(2)}") and "Sources:" in out


def test_step_instructions_name_only_tools_the_server_has() -> None:
    import json

    # the server's tools as tests/server/tools/test_server_tools.py holds them to its snapshot
    listing = json.loads((ROOT / "tests" / "snapshots" / "list_tools.json").read_text())
    registered = {t["name"] for t in (listing if isinstance(listing, list) else listing["tools"])}
    text = (ROOT / "kernelcraft" / "search" / "instructions.py").read_text()
    named = set(re.findall(r"\b([a-z]+(?:_[a-z]+)+)\(", text))
    tools_named = {
        n for n in named if n in registered or n.startswith(("get_", "search_", "query_", "record_"))
    }
    assert tools_named and tools_named <= registered, tools_named - registered
