"""The driver is an MCP client like any other (issue 38): its answers leave out what it sent and
quote a line of each manual section, and its session fills each step back in for its prompts."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from bench.scripted import ScriptedEvaluator
from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.base.config import Settings
from kernelcraft.server.app import create_server

TASKS = Path(__file__).resolve().parents[3] / "bench" / "tasks"


@pytest.mark.anyio
async def test_the_drivers_session_fills_in_the_task_its_kernels_and_the_manual_sections(
    tmp_path: Path,
) -> None:
    task = (TASKS / "softmax.py").read_text()
    seed = "# verdict: correct\n" + (TASKS / "softmax_triton.py").read_text()
    server = create_server(Settings(db_path=tmp_path / "kc.db"), lambda _: ScriptedEvaluator())
    async with Client(server) as client:
        raw = await client.call_tool(
            "search_tree_step", {"action": "start", "reference_code": task, "candidate_code": seed}
        )
        sent = (raw.structured_content or {})["start"]["next_step"]
        assert sent["task_source"] is None and sent["start_code"] is None  # the client has them
        assert sent["manual_sections"] and all(len(m["snippet"]) <= 120 for m in sent["manual_sections"])
        session = ToolSession(client, "in-process")
        started = await session.start(
            task, task_name="softmax", seed_code=seed, target="sm_90a", budget=3, seed=0, policy="adaexplore"
        )
    step = started.next_step
    assert step is not None and step.task_source == task
    assert step.start_code == seed and step.chain[-1].code == seed
    assert step.manual_sections and any(len(m.snippet) > 300 for m in step.manual_sections)
