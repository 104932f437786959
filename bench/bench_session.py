"""An assistant's 50-step budget, measured: the bytes a search costs a client's context, step by step.

    .venv/bin/python bench/bench_session.py [--steps N] [--scripted] [--json]

Drives the real server (`create_server`, seed rulebook and manuals loaded) through the SDK's
in-process MCP client, as an assistant would: `tools/list`, then a search tree on the cookbook's
softmax task started with its ~7 KB kernel, then `--steps` submits of kernels of the same size:
one that does not compile (`tl.exp2` misspelt: the interpreter's AttributeError and the compiler's
error, real tracebacks), one that computes a wrong result (the short path divides by s + 1), then
correct variants, then the tree's status. By default the evaluator is the real one (Triton's CPU
interpreter, and the AOT compile for sm_90a), so the verdicts, tracebacks and notes are what a
client gets; `--scripted` answers from marker lines instead (seconds, no compiler: what
`tests/server/tools/test_answer_budgets.py` runs).

For each answer: the bytes as sent (the JSON-RPC result, compact), its structured content and
its text content. Budgets (issue 38): `tools/list` <= 24 KB; a step's answer <= 8 KB with a
~6 KB kernel, not growing with the chain.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kernelcraft.base import knobs  # noqa: E402
from kernelcraft.base.config import Settings  # noqa: E402
from kernelcraft.engine.host.evaluator import Evaluator  # noqa: E402
from kernelcraft.server.app import create_server  # noqa: E402

ENTRY = REPO / "kernelcraft" / "knowledge" / "cookbook" / "entries" / "softmax"
TOOLS_LIST_BUDGET = 24_000
STEP_BUDGET = 8_000


def task() -> str:
    return (ENTRY / "task.py").read_text()


def kernels(marker: Callable[[str], str] | None = None) -> dict[str, str]:
    """The session's candidates, each about 7 KB: the seed, a compile failure, a wrong result and
    correct variants. `marker(verdict)`: a first line for a scripted evaluator."""
    seed = (ENTRY / "kernel.py").read_text()
    mark = marker or (lambda _: "")
    return {
        "seed": mark("correct") + seed,
        "compile": mark("compile") + seed.replace("tl.exp2(", "tl.exp3("),
        "wrong": mark("wrong") + seed.replace("y = e / s", "y = e / (s + 1.0)"),
        **{
            f"correct {i}": mark("correct")
            + seed.replace("num_warps=min(16,", f"num_warps=min({16 >> (i % 3)},")
            + f"\n# variant {i}\n"
            for i in range(1, 60)
        },
    }


def wire_bytes(result: Any) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def _row(label: str, result: Any) -> dict[str, Any]:
    text = sum(len(c.text.encode()) for c in result.content if getattr(c, "type", "") == "text")
    structured = result.structured_content
    return {
        "answer": label,
        "wire_bytes": wire_bytes(result),
        "structured_bytes": len(json.dumps(structured, separators=(",", ":"), ensure_ascii=False).encode())
        if structured is not None
        else 0,
        "text_bytes": text,
        "error": bool(result.is_error),
        "text": " ".join(getattr(c, "text", "") for c in result.content),
        "structured": json.dumps(structured, ensure_ascii=False) if structured is not None else "",
    }


async def session(
    evaluator_factory: Callable[[Settings], Evaluator], candidates: dict[str, str], steps: int
) -> list[dict[str, Any]]:
    """The scripted assistant: tools/list, start, `steps` submits, status. One row per answer."""
    rows: list[dict[str, Any]] = []
    order = ["compile", "wrong", *[k for k in candidates if k.startswith("correct ")]][:steps]
    with tempfile.TemporaryDirectory() as home:
        server = create_server(Settings(db_path=Path(home) / "kernelcraft.db"), evaluator_factory)
        async with Client(server) as client:
            listed = await client.list_tools()
            size = len(listed.model_dump_json(by_alias=True, exclude_none=True).encode())
            rows.append({"answer": "tools/list", "wire_bytes": size, "structured_bytes": 0, "text_bytes": 0})
            started = await client.call_tool(
                "search_tree_step",
                {
                    "action": "start",
                    "reference_code": task(),
                    "candidate_code": candidates["seed"],
                    "budget": 50,
                },
            )
            rows.append(_row("start", started))
            data = (started.structured_content or {})["start"]
            tree, step = data["tree"]["id"], data["next_step"]
            for i, name in enumerate(order):
                if step is None:
                    break
                submitted = await client.call_tool(
                    "search_tree_step",
                    {
                        "action": "submit",
                        "tree_id": tree,
                        "node_id": step["node_id"],
                        "candidate_code": candidates[name],
                    },
                )
                rows.append(_row(f"submit {i + 1} ({name}; next: {step['kind']})", submitted))
                step = (submitted.structured_content or {})["submit"]["next_step"]
            status = await client.call_tool("search_tree_step", {"action": "status", "tree_id": tree})
            rows.append(_row("status", status))
    return rows


def _scripted(_: Settings) -> Evaluator:
    from bench.scripted import ScriptedEvaluator

    return ScriptedEvaluator()


def _real(_: Settings) -> Evaluator:
    from kernelcraft.engine.host.local import LocalEvaluator

    return LocalEvaluator(settings=knobs.settings(), workers=1, device="cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="submits after the start (default 8)")
    parser.add_argument("--scripted", action="store_true", help="the scripted evaluator (no compiler)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    marker = (lambda v: f"# verdict: {v}\n") if args.scripted else None
    rows = anyio.run(session, _scripted if args.scripted else _real, kernels(marker), args.steps)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    head = {
        "machine": f"{platform.node()} ({platform.machine()}, {platform.processor() or 'cpu'})",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "commit": commit.stdout.strip(),
        "evaluator": "scripted" if args.scripted else "LocalEvaluator (CPU interpreter)",
        "kernel_bytes": len(kernels()["seed"].encode()),
    }
    if args.json:
        print(
            json.dumps(
                {"run": head, "rows": [{k: v for k, v in r.items() if k != "structured"} for r in rows]},
                indent=2,
            )
        )
        return
    print(" · ".join(f"{k}: {v}" for k, v in head.items()))
    print("| answer | as sent (B) | structured (B) | text (B) | budget (B) |")
    print("|---|---|---|---|---|")
    for r in rows:
        budget = TOOLS_LIST_BUDGET if r["answer"] == "tools/list" else STEP_BUDGET
        flag = "" if r["wire_bytes"] <= budget else " OVER"
        err = " (error)" if r.get("error") else ""
        print(
            f"| {r['answer']}{err} | {r['wire_bytes']:,} | {r['structured_bytes']:,} | {r['text_bytes']:,} | "
            f"{budget:,}{flag} |"
        )
    for r in rows[1:]:
        print(f"\n{r['answer']}: {r.get('text', '')}")


if __name__ == "__main__":
    main()
