"""The hardware manuals' tool: `search_hw_docs` (sections by words, or one section whole)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from kernelcraft.schema.docs import DocSection
from kernelcraft.server.state import AppState
from kernelcraft.server.tools.answers import opening
from kernelcraft.server.tools.common import (
    READ_ONLY,
    app_state,
    check_size,
    tool,
    tool_errors,
)
from kernelcraft.server.tools.inputs import (
    MAX_INT64,
    Arch,
)


class DocResults(BaseModel):
    """Sections of the hardware manuals, best match first."""

    sections: list[DocSection] = Field(description="Best match first.")


@tool(title="Search the hardware manuals", annotations=READ_ONLY)
async def search_hw_docs(
    ctx: Context[AppState],
    query: Annotated[
        str | None,
        Field(
            description="What you need to know, e.g. 'shared memory per SM', 'wgmma', 'LDS size MI300X'.",
        ),
    ] = None,
    arch: Arch = None,
    limit: Annotated[int, Field(ge=1, le=20, description="How many sections to return.")] = 3,
    section_id: Annotated[
        int | None,
        Field(ge=1, le=MAX_INT64, description="Instead of a query: a section's id, for its whole text."),
    ] = None,
) -> DocResults:
    """Search the hardware manuals (A100, L40S, H100/H200, B200, MI300X, Triton, performance):
    memory, tensor cores, occupancy, failing Triton constructs."""
    state = app_state(ctx)
    if (query is None or not query.strip()) == (section_id is None):
        raise ToolError("pass either query (words to search for) or section_id (from an earlier result)")
    with tool_errors():
        if section_id is not None:
            return DocResults(sections=[await state.docs.get_section(section_id)])
        assert query is not None
        check_size(state, "query", query)
        found = await state.docs.search_hw_docs(query, arch=arch, limit=limit)
        # A match is a pointer: its opening, no sources; section_id gives the whole section.
        return DocResults(
            sections=[s.model_copy(update={"snippet": opening(s.snippet), "sources": []}) for s in found]
        )
