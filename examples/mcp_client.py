"""Use kernelcraft from Python with the MCP SDK 2.x: start `kernelcraft serve` over stdio, read the
rules for a task, verify a kernel and print the verdict.

    python examples/mcp_client.py      # in the repository, with kernelcraft installed

The server keeps its state in $KERNELCRAFT_HOME (default ~/.kernelcraft). docs/clients.md quotes this
file and tests/repo/test_readme.py runs it.
"""

import os
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

SOFTMAX = Path(__file__).resolve().parent / "softmax"


async def main() -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kernelcraft", "serve"],
        # A stdio server inherits only a few variables (PATH, HOME, ...): pass the others.
        env={"KERNELCRAFT_HOME": os.environ.get("KERNELCRAFT_HOME", str(Path.home() / ".kernelcraft"))},
    )
    task = (SOFTMAX / "task.py").read_text()
    kernel = (SOFTMAX / "seed.py").read_text()
    async with Client(server) as client:
        tools = (await client.list_tools()).tools
        print("tools:", ", ".join(tool.name for tool in tools))

        found = await client.call_tool("query_rules", {"context": task, "limit": 3})
        for rule in found.structured_content["rules"]:  # the result as JSON: see the output schema
            print("rule:", rule["text"])

        async def progress(done: float, total: float | None, message: str | None) -> None:
            print(f"  {done:.0%} {message}")

        verdict = await client.call_tool(
            "verify_against_reference",
            {"reference_code": task, "candidate_code": kernel, "trials": 2},
            progress_callback=progress,
        )
        if verdict.is_error:  # a tool error: its text says what to fix
            sys.exit(verdict.content[0].text)
        result = verdict.structured_content  # a failing kernel is a verdict too: correct is False
        print("correct:", result["correct"], "-", result["failure_class"] or "passed", "on", result["device"])


if __name__ == "__main__":
    anyio.run(main)
