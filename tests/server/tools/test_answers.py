"""Tool answers sized for an assistant's context window (issue 26): the data once, as structured
content, and a summary as text; a tree's rules and manual sections in full once per client; and
the driver, whose every LLM call starts afresh, still gets whole steps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from search_scripted import TASK, ScriptedEvaluator, candidate

from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.base.config import Settings
from kernelcraft.base.knobs import Knobs, ServerSettings
from kernelcraft.server.app import create_server

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import bench_answers  # noqa: E402


def test_a_scripted_session_stays_within_the_answer_budgets() -> None:
    rows = anyio.run(bench_answers.session, False)
    assert len(rows) >= 12
    over = [r for r in rows if not r["within"] or r["error"]]
    assert not over, over
    start = next(r for r in rows if r["answer"] == "search_tree_step start")
    assert start["structured_bytes"] <= 16_000 and start["text_bytes"] < 1_000


@pytest.mark.anyio
async def test_the_text_is_a_summary_unless_the_host_needs_the_json(tmp_path: Path) -> None:
    code = candidate("correct")
    for mode in ("summary", "json"):
        server = ServerSettings(text_content=mode)  # type: ignore[arg-type]
        settings = Settings(db_path=tmp_path / f"{mode}.db", knobs=Knobs(server=server))
        async with Client(create_server(settings, lambda _: ScriptedEvaluator())) as client:
            r = await client.call_tool(
                "verify_against_reference", {"reference_code": TASK, "candidate_code": code}
            )
        text = r.content[0].text  # type: ignore[union-attr]
        assert r.structured_content is not None and r.structured_content["correct"] is True
        if mode == "summary":
            assert text.startswith("correct") and "structured content" in text and "{" not in text
        else:
            assert json.loads(text) == r.structured_content


@pytest.mark.anyio
async def test_rules_and_manual_sections_go_in_full_once_per_client_and_tree(tmp_path: Path) -> None:
    settings = Settings(db_path=tmp_path / "k.db")
    async with Client(create_server(settings, lambda _: ScriptedEvaluator())) as client:
        start = await client.call_tool(
            "search_tree_step",
            {
                "action": "start",
                "reference_code": TASK,
                "candidate_code": candidate("correct 1.0"),
                "budget": 6,
            },
        )
        first = start.structured_content["start"]["next_step"]  # type: ignore[index]
        sent = {r["id"] for r in first["rules"]}
        assert 0 < len(sent) <= 6 and all(m["snippet"] for m in first["manual_sections"])
        again = await client.call_tool(
            "search_tree_step",
            {
                "action": "submit",
                "tree_id": first["tree_id"],
                "node_id": first["node_id"],
                "candidate_code": candidate("correct 1.2"),
            },
        )
        step = again.structured_content["submit"]["next_step"]  # type: ignore[index]
    assert not sent & {r["id"] for r in step["rules"]}  # new rules only
    repeated = [m for m in step["manual_sections"] if m["id"] in {s["id"] for s in first["manual_sections"]}]
    assert all(m["snippet"] == "" for m in repeated)  # sent before: the entry, not the text
    assert "rules://active/" in step["instructions"]


@pytest.mark.anyio
async def test_the_driver_gets_whole_steps_with_every_active_rule(tmp_path: Path) -> None:
    settings = Settings(db_path=tmp_path / "k.db")
    async with Client(create_server(settings, lambda _: ScriptedEvaluator())) as client:
        session = ToolSession(client, "a test server")
        started = await session.start(
            TASK,
            task_name="t.py",
            seed_code=candidate("correct 1.0"),
            target="sm_90a",
            budget=4,
            seed=0,
            policy="adaexplore",
        )
        active = await client.read_resource("rules://active/sm_90a")
        every = json.loads(active.contents[0].text)["rules"]  # type: ignore[union-attr]
        assert started.next_step is not None
        assert {r.id for r in started.next_step.rules} == {r["id"] for r in every}
        nxt = await session.submit(started.tree.id, started.next_step.node_id, candidate("correct 1.1"))
    assert nxt.next_step is not None and len(nxt.next_step.rules) == len(every)
    assert all(m.snippet for m in nxt.next_step.manual_sections)
