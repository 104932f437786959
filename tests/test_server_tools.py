"""Every MCP tool and every error path, through an in-process `Client(server)`: what a model sees."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from server_support import REPO, NoEvaluations, failure_clients, settings_for

from kernelcraft.config import Settings
from kernelcraft.server.app import create_server

SNAPSHOT = REPO / "tests" / "snapshots" / "list_tools.json"

RULE = "You cannot format strings with f-strings inside a jitted function body."
SEED_RULE = "You cannot use tl.arange with a range whose length is not a power of two."
ARANGE_ERROR = "ValueError: arange's range must be a power of 2"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    async with Client(create_server(settings_for(tmp_path), NoEvaluations)) as c:
        yield c


def error_text(result: Any) -> str:
    assert result.is_error, f"expected a tool error, got {result.structured_content}"
    return "\n".join(block.text for block in result.content if block.type == "text")


# ---------------------------------------------------------------------------- the tool list


def tool_listing(tools: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "annotations": t.annotations.model_dump(mode="json", exclude_none=True),
            "input_schema": t.input_schema,
        }
        for t in sorted(tools, key=lambda t: t.name)
    ]


@pytest.mark.anyio
async def test_the_tool_list_matches_the_snapshot(client: Client) -> None:
    """Regenerate after a deliberate change: KERNELCRAFT_UPDATE_SNAPSHOTS=1 pytest tests/test_server_tools.py"""
    listing = tool_listing((await client.list_tools()).tools)
    if os.environ.get("KERNELCRAFT_UPDATE_SNAPSHOTS"):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(listing, indent=2, sort_keys=True) + "\n")
    assert listing == json.loads(SNAPSHOT.read_text())


@pytest.mark.anyio
async def test_every_tool_sets_all_four_annotations_and_describes_every_parameter(client: Client) -> None:
    for tool in (await client.list_tools()).tools:
        a = tool.annotations
        assert a is not None, tool.name
        hints = (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
        assert None not in hints, tool.name
        assert a.open_world_hint is False and a.destructive_hint is False, tool.name
        assert tool.description and tool.output_schema, tool.name
        for name, schema in tool.input_schema["properties"].items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"


# ---------------------------------------------------------------------------- knowledge


@pytest.mark.anyio
async def test_a_rule_recorded_three_times_becomes_active_and_query_rules_returns_it(client: Client) -> None:
    for _ in range(3):
        result = await client.call_tool(
            "record_failure",
            {"candidate_code": "class ModelNew: ...", "error": ARANGE_ERROR, "rule": RULE, "arch": "sm_90a"},
        )
        assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["activated"] is True
    assert result.structured_content["failure_class"] == "compile_arange_not_pow2"

    found = await client.call_tool("query_rules", {"context": "f-strings in my jitted function", "arch": "sm_90a"})
    assert not found.is_error, found.content
    assert found.structured_content is not None
    assert found.structured_content["rules"][0]["text"] == RULE


@pytest.mark.anyio
async def test_the_seed_rulebook_is_imported_on_first_start(client: Client) -> None:
    found = await client.call_tool("query_rules", {"context": "tl.arange with 100 elements"})
    assert found.structured_content is not None
    assert SEED_RULE in [rule["text"] for rule in found.structured_content["rules"]]


@pytest.mark.anyio
async def test_record_failure_over_an_in_process_client_is_attributed_to_local(tmp_path: Path) -> None:
    async with Client(create_server(settings_for(tmp_path), NoEvaluations)) as client:
        result = await client.call_tool("record_failure", {"candidate_code": "x = 1", "error": ARANGE_ERROR})
        assert not result.is_error, result.content
    assert failure_clients(tmp_path / "kernelcraft.db") == ["local"]


@pytest.mark.anyio
async def test_a_rule_not_in_you_cannot_form_is_a_tool_error_saying_how_to_rewrite_it(client: Client) -> None:
    result = await client.call_tool(
        "record_failure", {"candidate_code": "x", "error": ARANGE_ERROR, "rule": "Use powers of two."}
    )
    assert "You cannot" in error_text(result) and "Rewrite" in error_text(result)


@pytest.mark.anyio
async def test_an_unknown_arch_is_a_tool_error_naming_the_known_ones(client: Client) -> None:
    result = await client.call_tool("query_rules", {"context": "softmax", "arch": "pascal"})
    text = error_text(result)
    assert "unknown architecture 'pascal'" in text and "sm_90a" in text


@pytest.mark.anyio
async def test_code_over_one_megabyte_is_refused_with_what_to_do(client: Client) -> None:
    big = "# padding\n" * 100_001
    result = await client.call_tool("record_failure", {"candidate_code": big, "error": ARANGE_ERROR})
    text = error_text(result)
    assert "candidate_code is 1,000,010 bytes, over the 1,000,000-byte limit" in text and "retry" in text


@pytest.mark.anyio
async def test_the_code_limit_comes_from_the_settings(tmp_path: Path) -> None:
    settings = Settings(db_path=tmp_path / "k.db", max_code_bytes=100)
    async with Client(create_server(settings, NoEvaluations)) as client:
        result = await client.call_tool("query_rules", {"context": "x" * 101})
        assert "over the 100-byte limit" in error_text(result)


@pytest.mark.anyio
async def test_a_malformed_argument_is_a_tool_error_saying_what_to_fix(client: Client) -> None:
    result = await client.call_tool("query_rules", {"context": "softmax", "limit": "ten"})
    text = error_text(result)
    assert "invalid arguments (limit: Input should be a valid integer" in text
    assert "match the tool's input schema" in text


@pytest.mark.anyio
async def test_a_missing_argument_is_a_tool_error_naming_it(client: Client) -> None:
    result = await client.call_tool("record_failure", {"error": ARANGE_ERROR})
    assert "candidate_code: Field required" in error_text(result)


@pytest.mark.anyio
async def test_an_unknown_tool_is_a_tool_error_listing_the_tools(client: Client) -> None:
    result = await client.call_tool("write_kernel_for_me", {})
    text = error_text(result)
    assert "unknown tool 'write_kernel_for_me'" in text and "query_rules" in text
