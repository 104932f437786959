"""How many bytes each tool answer costs an assistant's context: a scripted MCP session.

    .venv/bin/python bench/bench_answers.py [--gpu] [--json]

An in-process MCP client (the SDK's `Client` on the real server, seed rulebook and hardware
manuals loaded) plays an assistant's session: a search tree on a KernelBench-sized softmax started
with a seed kernel, six steps submitted with mixed verdicts, its status, then every other tool once.
The evaluator is a scripted one (`bench/scripted.py`: each candidate carries its verdict), so the
session runs in seconds without a GPU; `--gpu` makes it say it measured
speedups and profiles, as on a GPU (larger feedback). For each answer it prints the compact JSON of
its structured content, the bytes of its text content, and the whole result as sent; the targets
(issue 26) are start <= 16 KB and submit <= 12 KB of structured content, other tools <= 4 KB, and a
text content that is a summary, never the JSON again.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


from bench.scripted import ScriptedEvaluator  # noqa: E402
from bench.support import task_source  # noqa: E402
from kernelcraft.base.config import Settings  # noqa: E402
from kernelcraft.server.app import create_server  # noqa: E402

TARGETS = {
    "search_tree_step start": 16_000,
    "search_tree_step submit": 12_000,
    "search_tree_step status": 12_000,
}
OTHER_TARGET = 4_000
VERDICTS = ["correct 1.4", "wrong", "compile", "correct 1.9", "crash", "correct 2.2"]


def _compact(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


def _measure(name: str, result: Any) -> dict[str, Any]:
    text = sum(len(c.text.encode()) for c in result.content if getattr(c, "type", "") == "text")
    structured = _compact(result.structured_content) if result.structured_content is not None else 0
    wire = len(result.model_dump_json(by_alias=True, exclude_none=True).encode())
    target = TARGETS.get(name, OTHER_TARGET)
    return {
        "answer": name,
        "structured_bytes": structured,
        "text_bytes": text,
        "wire_bytes": wire,
        "target_bytes": target,
        "within": structured <= target and text <= max(2_000, structured // 4),
        "error": bool(result.is_error),
    }


def _candidate(base: str, verdict: str) -> str:
    return f"# verdict: {verdict}\n{base}"


async def session(gpu: bool) -> list[dict[str, Any]]:
    task = task_source("softmax")
    kernel = task_source("softmax_triton")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(db_path=Path(home) / "kernelcraft.db")
        server = create_server(settings, lambda _: ScriptedEvaluator(has_gpu=gpu))
        async with Client(server) as client:

            async def call(name: str, label: str, **args: Any) -> Any:
                result = await client.call_tool(name, args)
                rows.append(_measure(label, result))
                return result

            started = await call(
                "search_tree_step",
                "search_tree_step start",
                action="start",
                reference_code=task,
                candidate_code=_candidate(kernel, "correct 1.1"),
                budget=len(VERDICTS) + 2,
            )
            data = started.structured_content or {}
            tree = data["start"]["tree"]["id"]
            step = data["start"]["next_step"]
            for verdict in VERDICTS:
                if step is None:
                    break
                submitted = await call(
                    "search_tree_step",
                    "search_tree_step submit",
                    action="submit",
                    tree_id=tree,
                    node_id=step["node_id"],
                    candidate_code=_candidate(kernel, verdict),
                )
                step = (submitted.structured_content or {})["submit"]["next_step"]
            await call("search_tree_step", "search_tree_step status", action="status", tree_id=tree)
            await call("query_rules", "query_rules", context=task)
            await call("search_hw_docs", "search_hw_docs", query="shared memory per SM on H100")
            await call("search_examples", "search_examples", query="softmax over the last dimension")
            good = _candidate(kernel, "correct 1.3")
            await call(
                "verify_against_reference",
                "verify_against_reference",
                reference_code=task,
                candidate_code=good,
            )
            if gpu:  # the scripted evaluator compiles and times only as a GPU would
                await call("profile_kernel", "profile_kernel", reference_code=task, candidate_code=good)
            await call(
                "record_failure",
                "record_failure",
                candidate_code=_candidate(kernel, "compile"),
                error="AttributeError: module 'triton.language' has no attribute 'tanh'",
                failure_class="compile_unknown_api",
                rule="You cannot call tl.tanh in Triton 3.x; use tl.math or write it with tl.exp.",
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", action="store_true", help="the scripted evaluator says it has a GPU")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    rows = anyio.run(session, args.gpu)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| answer | structured (B) | text (B) | as sent (B) | target (B) | within |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['answer']} | {r['structured_bytes']:,} | {r['text_bytes']:,} | {r['wire_bytes']:,} | "
            f"{r['target_bytes']:,} | {'yes' if r['within'] else 'NO'}{' (error)' if r['error'] else ''} |"
        )


if __name__ == "__main__":
    main()
