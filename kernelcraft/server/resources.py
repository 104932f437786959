"""MCP resources and prompts: read-only views a client can attach to a conversation.

Resources are JSON documents (the same pydantic models the tools return) or, for manual sections,
markdown. Static URIs get no request context from the SDK, so they read the running lifespan's
state from the `StateSlot`; templated ones get it from their Context.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from pydantic import BaseModel, Field

from kernelcraft.errors import KernelcraftError
from kernelcraft.knowledge.rulebook import RuleOut
from kernelcraft.server.state import AppState, StateSlot

JSON = "application/json"


class RuleSet(BaseModel):
    """The active rules, most counted first."""

    arch: str | None = Field(description="The architecture the rules were filtered for; null for all.")
    rules: list[RuleOut]


def register_rule_resources(mcp: MCPServer[AppState], slot: StateSlot) -> None:
    @mcp.resource(
        "rules://active",
        name="active-rules",
        title="Active rules",
        description="Every active rule of the shared rulebook (learnt from failures and seeded), most counted first.",
        mime_type=JSON,
    )
    async def active_rules() -> str:
        rules = await slot.current.rulebook.list_rules(status="active")
        return RuleSet(arch=None, rules=rules).model_dump_json(indent=2)

    @mcp.resource(
        "rules://active/{arch}",
        name="active-rules-for-arch",
        title="Active rules for one architecture",
        description="Active rules that apply to one target (sm_80, sm_89, sm_90a, sm_100, gfx942) or family "
        "(nvidia, amd): those scoped to its family and the general ones.",
        mime_type=JSON,
    )
    async def active_rules_for_arch(arch: str, ctx: Context[AppState]) -> str:
        state = ctx.request_context.lifespan_context
        try:
            rules = await state.rulebook.list_rules(status="active", arch=arch)
        except KernelcraftError as e:
            raise ResourceError(str(e)) from e
        return RuleSet(arch=arch, rules=rules).model_dump_json(indent=2)
