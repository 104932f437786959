"""The server checked by a client nobody here wrote: the MCP Inspector CLI (pinned 2.12.0) launches
`kernelcraft serve` over stdio, lists the tools and calls verify_against_reference.

Needs npx and the npm registry (or a warm npx cache): run with `pytest -m inspector`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from server_support import CANDIDATE, REPO, TASK

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"

pytestmark = [
    pytest.mark.inspector,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed"),
]


def inspector(tmp_path: Path, *method: str) -> dict:
    # Everything after `--` is the Inspector's: the server command has dash-flags of its own.
    # The Inspector gives the server a restricted environment, so its variables go through -e.
    command = [
        "npx", "--yes", INSPECTOR, "--cli", sys.executable, "-m", "kernelcraft", "serve", "--",
        "-e", f"PYTHONPATH={REPO}",
        "-e", f"KERNELCRAFT_DB={tmp_path / 'inspector.db'}",
        "-e", f"KERNELCRAFT_HOME={tmp_path / 'home'}",
        "--format", "json", *method,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, f"inspector exited {done.returncode}: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def test_the_inspector_lists_the_tools(tmp_path: Path) -> None:
    listed = inspector(tmp_path, "--method", "tools/list")
    names = {tool["name"] for tool in listed["result"]["tools"]}
    assert names == {
        "compile_kernel",
        "verify_against_reference",
        "profile_kernel",
        "evaluate_level",
        "query_rules",
        "record_failure",
        "search_tree_step",
        "search_hw_docs",
        "search_examples",
    }


def test_the_inspector_verifies_a_correct_kernel(tmp_path: Path) -> None:
    arguments = json.dumps({"reference_code": TASK, "candidate_code": CANDIDATE, "trials": 2})
    called = inspector(
        tmp_path,
        "--method",
        "tools/call",
        "--tool-name",
        "verify_against_reference",
        "--tool-args-json",
        arguments,
    )
    result = called["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["correct"] is True
    assert result["structuredContent"]["interpreter"] is True
