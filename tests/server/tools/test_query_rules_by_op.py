"""query_rules answers an op's name (issue 38): rules name constructs, not operators, so an op name
is widened to what its kernels are made of, and a query nothing matches gets the most broken
rules with a sentence saying so; never an empty answer without a word."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from server_support import NoEvaluations, settings_for

from kernelcraft.server.app import create_server


async def ask(tmp_path: Path, context: str) -> dict[str, Any]:
    async with Client(create_server(settings_for(tmp_path), NoEvaluations)) as client:
        result = await client.call_tool("query_rules", {"context": context, "limit": 3})
    assert not result.is_error and result.structured_content is not None
    data = dict(result.structured_content)
    data["text"] = result.content[0].text  # type: ignore[union-attr]
    return data


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("op", "word"),
    [("softmax", "tl.max"), ("LayerNorm", "tl.mean"), ("torch.bmm", "tl.dot"), ("log_softmax", "tl.sum")],
)
async def test_query_rules_finds_the_rules_of_an_ops_constructs_and_says_it_widened(
    tmp_path: Path, op: str, word: str
) -> None:
    data = await ask(tmp_path, op)
    assert data["rules"] and any(word in r["text"] for r in data["rules"])
    assert "rules name constructs, not operators" in data["note"]
    assert "Rules name constructs" in data["text"]


@pytest.mark.anyio
async def test_a_query_nothing_matches_gets_the_most_broken_rules_and_says_so(tmp_path: Path) -> None:
    data = await ask(tmp_path, "zzqx frobnicate")
    assert len(data["rules"]) == 3
    assert data["note"].startswith("no rule matched 'zzqx frobnicate'")
