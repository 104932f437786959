"""How many bytes the tool list costs a client: `tools/list` from an in-process client.

    .venv/bin/python bench/bench_schema.py [--json]

A client keeps the tool list (names, descriptions, input and output schemas) in every session's
context, so its size is paid in tokens each time. Prints the size of the `tools/list` result as
JSON on the wire (compact, as the SDK sends it), the same indented by two spaces (how the MCP
Inspector's `--format json` prints it), and each tool's share of the compact size: its input
schema, its output schema and the rest (name, title, description, annotations).

The server runs with a fresh database in a temporary directory and an evaluator that is never
started (listing tools evaluates nothing).
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

from kernelcraft.base.config import Settings  # noqa: E402
from kernelcraft.engine.host.evaluator import ProgressCallback  # noqa: E402
from kernelcraft.schema.evaluation import EvalJob, EvalResult  # noqa: E402
from kernelcraft.server.app import create_server  # noqa: E402


class Unused:
    """The evaluator of a server that only lists its tools."""

    has_gpu = False

    def __init__(self, settings: Settings) -> None:
        pass

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        raise RuntimeError("bench_schema.py lists tools; it evaluates nothing")

    async def aclose(self) -> None:
        return None


def size(value: Any, indent: int | None = None) -> int:
    separators = (",", ":") if indent is None else (",", ": ")
    return len(json.dumps(value, indent=indent, separators=separators, ensure_ascii=False).encode("utf-8"))


async def measure() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        server = create_server(Settings(db_path=Path(home) / "kernelcraft.db"), Unused)
        async with Client(server) as client:
            listed = await client.list_tools()
    result = listed.model_dump(mode="json", by_alias=True, exclude_none=True)
    tools = {}
    for tool in result["tools"]:
        schemas = {"input": size(tool.get("inputSchema")), "output": size(tool.get("outputSchema"))}
        tools[tool["name"]] = {"bytes": size(tool), **schemas}
    return {"bytes": size(result), "bytes_indented": size(result, indent=2), "tools": tools}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = anyio.run(measure)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"tools/list: {figures['bytes']:,} bytes compact, {figures['bytes_indented']:,} indented")
    print(f"{'tool':26s} {'bytes':>8s} {'input':>8s} {'output':>8s}")
    for name, t in sorted(figures["tools"].items(), key=lambda kv: -kv[1]["bytes"]):
        print(f"{name:26s} {t['bytes']:8,d} {t['input']:8,d} {t['output']:8,d}")


if __name__ == "__main__":
    main()
