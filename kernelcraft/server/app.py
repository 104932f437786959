"""The MCP server: one `MCPServer` whose lifespan owns the database and the evaluator.

`create_server(settings)` builds the server; the transports (`kernelcraft/cli/server.py`) only run
it. The lifespan enters `open_app_state` (`state.py`: the one Store, the evaluator, the rulebook
with its seed rules, the hardware-manual index and the search service, closed in reverse order);
the tools (`tools/`, one registry: `tools.TOOLS`), resources (`resources.py`) and prompts (`prompts.py`) reach them through
`AppState`.

Only this process writes to the database on behalf of clients; candidate code never runs here
(the evaluator runs it in worker processes), so a crashing candidate is a verdict, not a fault.
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, InputRequiredResult
from mcp.types import Tool as MCPTool
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kernelcraft import __version__
from kernelcraft.base.config import Settings
from kernelcraft.base.voice import CLI_VOICE, MCP_VOICE
from kernelcraft.knowledge.dedup import RuleJudge
from kernelcraft.server.auth import HttpAuth
from kernelcraft.server.prompts import register_prompts
from kernelcraft.server.resources import (
    register_doc_resources,
    register_rule_resources,
    register_tree_resources,
)
from kernelcraft.server.schema import listed, published
from kernelcraft.server.state import (
    AppState,
    EvaluatorFactory,
    StateSlot,
    default_evaluator_factory,
    open_app_state,
)
from kernelcraft.server.tools import register_tools
from kernelcraft.server.words import MCP_WORDS

logger = logging.getLogger(__name__)

SERVER_NAME = "kernelcraft"

INSTRUCTIONS = """\
kernelcraft helps you write fast, correct Triton kernels for PyTorch operators.
A task is a KernelBench-format module (class Model, get_inputs, get_init_inputs); a candidate is a
module with class ModelNew whose forward launches @triton.jit kernels. Pass both as source text.
Before writing a kernel, call query_rules with the task or the op's name (rules learnt from
earlier failures), search_hw_docs for the target's hardware facts and search_examples for a verified
kernel of the same op family to start from. Check a candidate with verify_against_reference. For a
full optimisation, use search_tree_step (start, then submit one candidate per step, following each
next_step). Failures: search_tree_step records each failed candidate itself and its answer gives
the node's failure_id; verify_against_reference records nothing. Either way, when a failure
teaches a general lesson, call record_failure with a rule ('You cannot ...'), passing the
failure_id for a search step, so the rulebook learns.
"""


class KernelcraftServer(MCPServer[AppState]):
    """MCPServer that publishes compact tool schemas (`schema.py`), refuses argument names a tool
    does not take, and whose argument and unknown-tool errors tell the model how to recover.

    Only the SDK's public API. The published list is built on the first `list_tools` and kept
    (registering a tool starts it again); a call checks its argument names against it.
    """

    _published: dict[str, MCPTool] | None = None

    def add_tool(self, *args: Any, **kwargs: Any) -> None:
        self._published = None
        super().add_tool(*args, **kwargs)

    def remove_tool(self, name: str) -> None:
        self._published = None
        super().remove_tool(name)

    async def list_tools(self) -> list[MCPTool]:
        return list((await self._published_tools()).values())

    async def _published_tools(self) -> dict[str, MCPTool]:
        if self._published is None:
            self._published = {tool.name: tool for tool in listed(await super().list_tools())}
        return self._published

    async def described_output(self, name: str) -> dict[str, Any] | None:
        """The tool's output schema with every field's description (the resource schemas://{tool})."""
        tool = next((t for t in published(await super().list_tools()) if t.name == name), None)
        return tool.output_schema if tool is not None else None

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[AppState, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tool = (await self._published_tools()).get(name)
        if tool is not None:
            check_argument_names(tool, arguments)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):
                raise ToolError(describe_invalid_arguments(name, e.__cause__)) from e.__cause__
            if tool is None:
                known = ", ".join(await self._published_tools())
                raise ToolError(f"unknown tool {name!r}; this server has: {known}") from None
            # The client's own frames only: no server path, no memory address (`words.py`).
            raise ToolError(MCP_WORDS.error(str(e))) from e


def check_argument_names(tool: MCPTool, arguments: dict[str, Any]) -> None:
    """Refuse argument names the tool does not take (a misspelt name is not silently ignored)."""
    accepted = list(tool.input_schema.get("properties", {}))
    unknown = [name for name in arguments if name not in accepted]
    if unknown:
        names = ", ".join(repr(n) for n in unknown)
        raise ToolError(
            f"Error executing tool {tool.name}: unknown argument{'s' if len(unknown) > 1 else ''} {names}; "
            f"{tool.name} takes: {', '.join(accepted)}. Rename or drop it and call the tool again"
        )


def describe_invalid_arguments(tool: str, error: ValidationError) -> str:
    """One line per bad argument, then what to do."""
    problems = []
    for err in error.errors():
        where = ".".join(str(part) for part in err["loc"]) or "arguments"
        problems.append(f"{where}: {err['msg']}")
    return (
        f"Error executing tool {tool}: invalid arguments ({'; '.join(problems)}). "
        "Fix them to match the tool's input schema and call it again"
    )


def freeze_heap() -> None:
    """Move every object alive now out of the garbage collector's sight (`gc.freeze`).

    A started server holds ~240k long-lived objects (torch, pydantic, the SDK). Each full
    collection walked all of them: a 90-125 ms stop of the event loop every few seconds under
    load, which every request in flight waited out (it was most of bench_server.py's HTTP p99).
    Frozen objects are still freed by reference counting; only cycles among them go unlooked-for.
    """
    gc.collect()  # start-up's garbage is freed first, not kept forever
    gc.freeze()


def create_server(
    settings: Settings,
    evaluator_factory: EvaluatorFactory = default_evaluator_factory,
    *,
    auth: HttpAuth | None = None,
    freeze_after_start: bool = False,
    judge: RuleJudge | None = None,
) -> MCPServer[AppState]:
    """Build the kernelcraft MCP server.

    `evaluator_factory(settings)` makes the evaluator when the server starts (tests may pass a
    lighter one); `auth` turns on bearer-token checks for the HTTP transport (see `auth.py`).
    `freeze_after_start` is for a process that serves until it is stopped (`kernelcraft serve`):
    once the lifespan has started, `freeze_heap()`. `judge`: the model that merges near-duplicate
    rules (`knowledge/dedup.py`); None: text similarity alone, said once in the log.
    """
    slot = StateSlot()

    @asynccontextmanager
    async def lifespan(server: MCPServer[AppState]) -> AsyncIterator[AppState]:
        clients = len(auth.clients) if auth else 1
        async with open_app_state(
            settings,
            evaluator_factory,
            clients=clients,
            judge=judge,
            voice=CLI_VOICE if settings.audience == "cli" else MCP_VOICE,
        ) as state:
            slot.stack.append(state)
            try:
                if freeze_after_start:
                    freeze_heap()
                logger.info("kernelcraft server ready (database %s)", settings.db_path)
                yield state
            finally:
                slot.stack.remove(state)

    mcp = KernelcraftServer(
        SERVER_NAME,
        title="kernelcraft",
        instructions=INSTRUCTIONS,
        version=__version__,
        lifespan=lifespan,
        token_verifier=auth.verifier if auth else None,
        auth=auth.settings if auth else None,
        log_level="INFO",
    )

    register_tools(mcp)
    register_rule_resources(mcp, slot)
    register_doc_resources(mcp, slot)
    register_tree_resources(mcp)
    register_prompts(mcp)

    @mcp.resource(
        "schemas://{tool}",
        name="tool-result-schema",
        title="A tool's result, described",
        description="The output schema of one tool with every field's description (tools/list gives types).",
        mime_type="application/json",
    )
    async def tool_result_schema(tool: str) -> str:
        schema = await mcp.described_output(tool)
        if schema is None:
            known = ", ".join(t.name for t in await mcp.list_tools() if t.output_schema)
            raise ResourceError(f"no tool {tool!r} with a result schema; one of: {known}")
        return json.dumps(schema, indent=1, ensure_ascii=False)

    @mcp.custom_route("/health", methods=["GET"])
    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "server": SERVER_NAME, "version": __version__})

    return mcp
