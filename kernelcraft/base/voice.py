"""Who reads a sentence, and how it names what to do next: one voice per audience.

The search service and the rulebook answer two audiences: an MCP client (an assistant, which
can call tools and read resources but has no shell into the server's machine) and a person at
the command line (who runs `kernelcraft` commands). A sentence that tells its reader what to do
next names that reader's action: `search_tree_step(action='status', tree_id=1)` for the first,
`kernelcraft tree status 1` for the second. A layer that writes such a sentence is handed the
`Voice` of its caller (the server builds its services with `MCP_VOICE`, the command line with
`CLI_VOICE`) and asks it for the words; it never writes either audience's command itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Audience = Literal["mcp", "cli"]


@dataclass(frozen=True)
class Voice:
    """How one audience is told to do each thing a kernelcraft answer may send it to do."""

    audience: Audience

    @property
    def mcp(self) -> bool:
        return self.audience == "mcp"

    def tree_status(self, tree_id: int) -> str:
        """Shows a tree's best kernel and the reader's next step."""
        if self.mcp:
            return f"search_tree_step(action='status', tree_id={tree_id})"
        return f"`kernelcraft tree status {tree_id}`"

    def new_step(self, tree_id: int) -> str:
        """Hands the reader one more step of a tree."""
        if self.mcp:
            return f"search_tree_step(action='next', tree_id={tree_id})"
        return f"`kernelcraft tree status {tree_id}`"

    def start_tree(self) -> str:
        """Starts a new search tree."""
        if self.mcp:
            return "search_tree_step(action='start', reference_code=...)"
        return "`kernelcraft tree start TASK.py`"

    def list_rules(self) -> str:
        """Lists the rulebook's rules."""
        if self.mcp:
            return "query_rules, or the resource rules://active"
        return "`kernelcraft rules list`"

    def teach(self, failure_id: int) -> str | None:
        """How a recorded failure gets the rule it teaches (None: this audience has no way)."""
        if self.mcp:
            return (
                f"call record_failure with failure_id={failure_id}, the candidate, its error and a rule "
                "('You cannot ...') to teach the rulebook"
            )
        return None

    def tree_report(self, tree_id: int) -> str:
        """Draws a tree's report."""
        if self.mcp:
            return f"the resource trees://{tree_id}/report"
        return f"`kernelcraft report --tree {tree_id}`"


MCP_VOICE = Voice("mcp")
CLI_VOICE = Voice("cli")
