"""The MCP tools, one registry: `TOOLS` lists them in the order the server publishes them.

A tool is one async function with its registration, `@tool(title=..., annotations=...)`
(`common.py`): its name is the function's, its description the docstring, its input schema the
signature (`inputs.py`'s annotated types). `create_server` registers exactly `TOOLS`
(`register_tools`); the tests read the same tuple. A module per layer a tool calls: the rulebook
(`knowledge.py`), the engine (`engine.py`), whole levels (`level.py`), the search tree
(`search.py`), the hardware manuals (`docs.py`), the cookbook (`cookbook.py`).
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from kernelcraft.server.state import AppState
from kernelcraft.server.tools.common import Tool
from kernelcraft.server.tools.cookbook import search_examples
from kernelcraft.server.tools.docs import search_hw_docs
from kernelcraft.server.tools.engine import compile_kernel, profile_kernel, verify_against_reference
from kernelcraft.server.tools.knowledge import query_rules, record_failure
from kernelcraft.server.tools.level import evaluate_level
from kernelcraft.server.tools.search import search_tree_step

TOOLS: tuple[Tool, ...] = (
    query_rules,
    record_failure,
    compile_kernel,
    verify_against_reference,
    profile_kernel,
    evaluate_level,
    search_tree_step,
    search_hw_docs,
    search_examples,
)


def register_tools(mcp: MCPServer[AppState]) -> None:
    """Register every tool of `TOOLS` on the server, in order."""
    for t in TOOLS:
        t.register(mcp)
