"""One real `kernelcraft serve` over stdio, as Claude Desktop launches it: a child process with a
whitelisted environment, the protocol on its stdout and nothing else there."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from server_support import REPO, failure_clients, subprocess_env


@pytest.mark.slow
@pytest.mark.anyio
async def test_kernelcraft_serve_speaks_mcp_over_stdio_and_records_writes_as_local(tmp_path: Path) -> None:
    db = tmp_path / "stdio.db"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "kernelcraft", "serve"], env=subprocess_env(db), cwd=str(REPO)
    )
    with anyio.fail_after(120):
        async with Client(params) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"query_rules", "record_failure"} <= names

            recorded = await client.call_tool(
                "record_failure",
                {
                    "candidate_code": "class ModelNew: ...",
                    "error": "ValueError: arange's range must be a power of 2",
                    "rule": "You cannot pass a range that is not a power of two to tl.arange.",
                },
            )
            assert not recorded.is_error, recorded.content
            assert recorded.structured_content is not None
            assert recorded.structured_content["failure_class"] == "compile_arange_not_pow2"

            rules = await client.call_tool(
                "query_rules", {"context": "tl.arange power of two", "arch": "sm_90a"}
            )
            assert not rules.is_error, rules.content
    assert failure_clients(db) == ["local"]
