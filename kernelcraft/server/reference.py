"""docs/clients.md's table of every tool's arguments, written from the published schemas.

    python -m kernelcraft.server.reference docs/clients.md    # rewrites the table between its markers

`tests/repo/test_readme.py` checks that docs/clients.md holds exactly what `arguments_table` writes, so
the table cannot drift from the tools. Listing tools starts nothing: no database, no evaluator.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.types import Tool

from kernelcraft.base.config import Settings
from kernelcraft.server.app import create_server

BEGIN = "<!-- tool-arguments: written by `python -m kernelcraft.server.reference docs/clients.md` -->"
END = "<!-- /tool-arguments -->"
MAX_ENUM_SHOWN = 6  # a longer enum (the failure classes) shows its count, first and last names


async def published_tools() -> list[Tool]:
    """The tool list a client gets (the server is built, never started)."""
    # The database is opened by the server's lifespan, which listing tools never enters.
    return await create_server(Settings(db_path=Path("never-opened.db"))).list_tools()


def arguments_table(tools: list[Tool]) -> str:
    """One Markdown row per argument: tool, argument, type, default (or 'required'), description."""
    rows = ["| tool | argument | type | default | what it is |", "|---|---|---|---|---|"]
    for tool in tools:
        schema = tool.input_schema
        required = set(schema.get("required", []))
        for i, (name, prop) in enumerate(schema.get("properties", {}).items()):
            default = "required" if name in required else _value(prop.get("default"))
            cells = [f"`{tool.name}`" if i == 0 else "", f"`{name}`", _type(prop, schema), default]
            rows.append("| " + " | ".join([*cells, _cell(prop.get("description", ""))]) + " |")
    return "\n".join(rows)


def _type(prop: dict[str, Any], schema: dict[str, Any]) -> str:
    ref = prop.get("$ref")
    if isinstance(ref, str):
        return _type(schema["$defs"][ref.rsplit("/", 1)[-1]], schema)
    if "enum" in prop:
        values = [_value(v) for v in prop["enum"]]
        if len(values) > MAX_ENUM_SHOWN:
            return f"one of {len(values)}: {values[0]}, {values[1]} … {values[-1]}"
        return " \\| ".join(values)
    if "anyOf" in prop:
        return " or ".join(_type(branch, schema) for branch in prop["anyOf"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}), schema)}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"object of {_type(prop['additionalProperties'], schema)}"
    signs = (("exclusiveMinimum", ">"), ("minimum", "≥"), ("maximum", "≤"), ("exclusiveMaximum", "<"))
    bounds = [f"{sign} {prop[key]}" for key, sign in signs if key in prop]
    return f"{kind} ({', '.join(bounds)})" if bounds else str(kind)


def _value(value: Any) -> str:
    return "" if value is None else f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def rewrite(readme: str, table: str) -> str:
    """`readme` with the text between the markers replaced by `table`; ValueError without markers."""
    pattern = re.compile(re.escape(BEGIN) + r"\n(?:.*?\n)?" + re.escape(END), re.DOTALL)
    if not pattern.search(readme):
        raise ValueError(f"no table markers in the file: add the lines {BEGIN!r} and {END!r}")
    return pattern.sub(lambda _: f"{BEGIN}\n{table}\n{END}", readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "readme", type=Path, help="the file to rewrite, docs/clients.md (the table between its markers)"
    )
    args = parser.parse_args(argv)
    table = arguments_table(anyio.run(published_tools))
    try:
        args.readme.write_text(rewrite(args.readme.read_text(encoding="utf-8"), table), encoding="utf-8")
    except (OSError, ValueError) as e:
        print(f"kernelcraft.server.reference: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
