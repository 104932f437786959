"""The `search_examples` MCP tool: find verified kernels in the cookbook
(`kernelcraft/knowledge/cookbook/`) by words, an op, a KernelBench problem or a task's source.

Read-only and static (the cookbook ships with the package), so it needs no server state. Its
examples are advice for the writer; no verdict reads them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from kernelcraft.knowledge.cookbook import load_cookbook
from kernelcraft.schema.cookbook import CookbookExample
from kernelcraft.server.tools.common import READ_ONLY, tool, tool_errors


class Examples(BaseModel):
    """Cookbook kernels, best match first."""

    examples: list[CookbookExample]


@tool(title="Search the cookbook", annotations=READ_ONLY)
async def search_examples(
    query: Annotated[str, Field(max_length=200_000, description="An op, words, or your task's source.")],
    family: Annotated[str | None, Field(description="Only this family: gemm, norm, attention, ...")] = None,
    limit: Annotated[int, Field(ge=1, le=10, description="How many.")] = 3,
    include_code: Annotated[bool, Field(description="With the kernel's and task's code.")] = False,
) -> Examples:
    """Verified Triton kernels for KernelBench's ops (GEMM, norms, softmax, attention, conv,
    ...) with H200 timings."""
    with tool_errors():
        found = load_cookbook().search(query, family=family, limit=limit, with_code=include_code)
    return Examples(examples=found)
