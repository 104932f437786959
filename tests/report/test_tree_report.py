"""A report for any tree, however it was built (issue 38): a tree stepped over MCP is drawn by the
resource trees://{id}/report.html and by `kernelcraft report --tree N`, each step with what it
changed, its compiled kernels and the roofline floor where known, and the rules in play."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from bench.scripted import ScriptedEvaluator
from kernelcraft.base.config import Settings
from kernelcraft.cli import main
from kernelcraft.server.app import create_server

TASK = (Path(__file__).resolve().parents[2] / "bench" / "tasks" / "softmax.py").read_text()
KERNEL = (Path(__file__).resolve().parents[2] / "bench" / "tasks" / "softmax_triton.py").read_text()


async def mcp_tree(db: Path) -> tuple[int, str, str]:
    """A tree built over MCP: a seed, a failing step and a correct one; its report as JSON and HTML."""
    server = create_server(Settings(db_path=db), lambda _: ScriptedEvaluator())
    async with Client(server) as client:
        started = await client.call_tool(
            "search_tree_step",
            {"action": "start", "reference_code": TASK, "candidate_code": f"# verdict: correct\n{KERNEL}"},
        )
        data = (started.structured_content or {})["start"]
        tree, step = data["tree"]["id"], data["next_step"]
        for i, verdict in enumerate(["compile", "correct"]):
            changed = KERNEL.replace("num_warps", f"num_warps=4 if {i} else num_warps", 1)
            sent = await client.call_tool(
                "search_tree_step",
                {"action": "submit", "tree_id": tree, "node_id": step["node_id"],
                 "candidate_code": f"# verdict: {verdict}\n{changed}"},
            )  # fmt: skip
            step = (sent.structured_content or {})["submit"]["next_step"]
        page = await client.read_resource(f"trees://{tree}/report.html")
        data_read = await client.read_resource(f"trees://{tree}/report")
    html = "".join(getattr(c, "text", "") for c in page.contents)
    return tree, html, "".join(getattr(c, "text", "") for c in data_read.contents)


@pytest.mark.anyio
async def test_a_tree_built_over_mcp_has_a_report_page_with_each_steps_change_and_the_rules(
    tmp_path: Path,
) -> None:
    tree, html, data = await mcp_tree(tmp_path / "kc.db")
    assert html.startswith("<!DOCTYPE html>") or "<html" in html
    assert "Step by step" in html and "what changed" in html and "Rules in play" in html
    assert "+++ this step" in html and "num_warps=4 if" in html  # the diff against its parent
    report = json.loads(data)
    steps = [
        n for n in report["nodes"] if n["kind"] != "root" and not n["seed"] and n["status"] == "evaluated"
    ]
    assert steps and all(n["change"] for n in steps)
    assert report["rules"]


def test_kernelcraft_report_draws_a_tree_of_the_database_by_its_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree, _, _ = anyio.run(mcp_tree, tmp_path / "kc.db")
    out = tmp_path / "page.html"
    with pytest.raises(SystemExit) as exc:
        main(["report", "--tree", str(tree), "--db", str(tmp_path / "kc.db"), "--out", str(out)])
    assert (exc.value.code or 0) == 0, capsys.readouterr().err
    assert "Step by step" in out.read_text() and f"tree {tree}" in capsys.readouterr().out


def test_kernelcraft_report_wants_a_run_directory_or_a_tree(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["report"])
    assert exc.value.code != 0 and "--tree" in capsys.readouterr().err
