"""MCP resources and prompts: read-only views a client can attach to a conversation.

Resources are JSON documents (the same pydantic models the tools return) or, for manual sections,
markdown. A tree's report (`trees://{tree_id}/report`, drawn as `trees://{tree_id}/report.html`)
is what `kernelcraft report --tree N` draws,
built from the database: the driver's token counts live in its run directory, not here, so they
are null. Static URIs get no request context from the SDK, so they read the running lifespan's
state from the `StateSlot`; templated ones get it from their Context.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from pydantic import BaseModel, Field

from kernelcraft.base.errors import KernelcraftError
from kernelcraft.base.targets import GPU_LIST, TARGET_LIST
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.report.build import from_tree
from kernelcraft.report.html import render_html
from kernelcraft.report.model import RunReport
from kernelcraft.report.steps import with_steps
from kernelcraft.schema.docs import section_markdown
from kernelcraft.schema.rules import RuleOut
from kernelcraft.schema.tree import NodeInfo, TreeView
from kernelcraft.server.auth import client_name
from kernelcraft.server.state import AppState, StateSlot
from kernelcraft.store import Store

JSON = "application/json"
MAX_ROW_ID = 2**63 - 1  # SQLite's largest integer


def row_id(text: str, what: str, where: str) -> int:
    """A URI's id segment as a row id (1 to 2**63-1), or a ResourceError saying what to pass."""
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_ROW_ID:
        raise ResourceError(f"{what} {text!r} is not a number from 1 to {MAX_ROW_ID}; {where}")
    return int(text)


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
        description=f"Active rules that apply to one target ({TARGET_LIST}) or family "
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


class SectionEntry(BaseModel):
    id: int
    uri: str = Field(description="Read this URI for the section's whole text.")
    heading_path: str
    file: str
    arch: str


class SectionListing(BaseModel):
    """Every section of the shipped hardware manuals."""

    sections: list[SectionEntry]


async def _list_sections(state: AppState) -> list[SectionEntry]:
    return [
        SectionEntry(
            id=r.id, uri=f"hwdocs://section/{r.id}", heading_path=r.heading_path, file=r.file, arch=r.arch
        )
        for r in await state.docs.list_sections()
    ]


def register_doc_resources(mcp: MCPServer[AppState], slot: StateSlot) -> None:
    @mcp.resource(
        "hwdocs://sections",
        name="hardware-manual-sections",
        title="Hardware manual sections",
        description=f"Every section of the hardware manuals ({GPU_LIST}, the Triton "
        "guide, the performance playbook), with the URI that reads it.",
        mime_type=JSON,
    )
    async def sections() -> str:
        return SectionListing(sections=await _list_sections(slot.current)).model_dump_json(indent=2)

    @mcp.resource(
        "hwdocs://section/{section_id}",
        name="hardware-manual-section",
        title="One hardware manual section",
        description="The whole text of one manual section, with its heading path, arch and sources.",
        mime_type="text/markdown",
    )
    async def section(section_id: str, ctx: Context[AppState]) -> str:
        state = ctx.request_context.lifespan_context
        number = row_id(section_id, "section id", "list them at hwdocs://sections")
        try:
            return section_markdown(await state.docs.get_section(number))
        except KernelcraftError as e:
            raise ResourceError(str(e)) from e


class TreeDocument(BaseModel):
    """A search tree: its settings, every node (without code), and its best kernel with code."""

    view: TreeView
    best: NodeInfo | None = Field(
        description="The best node so far, with its code; null before any correct kernel."
    )


def register_tree_resources(mcp: MCPServer[AppState]) -> None:
    @mcp.resource(
        "trees://{tree_id}",
        name="search-tree",
        title="A kernel search tree",
        description="One search tree (from search_tree_step): its task, policy and budget, every node with "
        "its verdict, and the best kernel's code.",
        mime_type=JSON,
    )
    async def tree(tree_id: str, ctx: Context[AppState]) -> str:
        state = ctx.request_context.lifespan_context
        view = await _show(state, tree_id, with_verdicts=False)
        best = next((n for n in view.nodes if n.id == view.best_node_id), None)
        if best is not None and best.code_hash is not None:
            best = best.model_copy(update={"code": await state.store.get_code(best.code_hash)})
        return TreeDocument(view=view, best=best).model_dump_json(indent=2)

    @mcp.resource(
        "trees://{tree_id}/report",
        name="search-tree-report",
        title="A kernel search tree's report",
        description="The data of a tree's report (what trees://{tree_id}/report.html draws): every node with its "
        "verdict and speedups against PyTorch eager and torch.compile, failures by class, the seed's and "
        "the best kernel's code. Token usage is the driver's and is not in the database: null here.",
        mime_type=JSON,
    )
    async def tree_report(tree_id: str, ctx: Context[AppState]) -> str:
        state = ctx.request_context.lifespan_context
        view = await _show(state, tree_id, with_verdicts=True)
        return (await build_report(state, view)).model_dump_json(indent=2)

    @mcp.resource(
        "trees://{tree_id}/task",
        name="search-tree-task",
        title="A search tree's task",
        description="The task's source (the reference_code passed to start), which steps leave out.",
        mime_type="text/x-python",
    )
    async def tree_task(tree_id: str, ctx: Context[AppState]) -> str:
        state = ctx.request_context.lifespan_context
        view = await _show(state, tree_id, with_verdicts=False)
        return await state.store.get_code(view.tree.task_hash) or ""

    @mcp.resource(
        "trees://{tree_id}/nodes/{node_id}/code",
        name="search-tree-node-code",
        title="A node's kernel",
        description="The code of one node of a search tree, which answers name by id once sent.",
        mime_type="text/x-python",
    )
    async def node_code(tree_id: str, node_id: str, ctx: Context[AppState]) -> str:
        state = ctx.request_context.lifespan_context
        view = await _show(state, tree_id, with_verdicts=False)
        number = row_id(node_id, "node id", "a step's node_id or parent_id names one")
        node = next((n for n in view.nodes if n.id == number), None)
        code = await state.store.get_code(node.code_hash) if node and node.code_hash else None
        if code is None:
            raise ResourceError(
                f"tree {view.tree.id} has no node {number} with code; its nodes are in trees://{view.tree.id}"
            )
        return code

    @mcp.resource(
        "trees://{tree_id}/report.html",
        name="search-tree-report-html",
        title="A kernel search tree's report, drawn",
        description="The tree's report as one HTML page (what `trees://{tree_id}/report` holds, drawn): the "
        "tree, the speedup over the steps, failures by class, each step's change, compiled kernels and "
        "roofline floor, and the rules in play. Save it and open it in a browser.",
        mime_type="text/html",
    )
    async def tree_report_html(tree_id: str, ctx: Context[AppState]) -> str:
        state = ctx.request_context.lifespan_context
        view = await _show(state, tree_id, with_verdicts=True)
        return render_html(await build_report(state, view))


async def _show(state: AppState, tree_id: str, *, with_verdicts: bool) -> TreeView:
    number = row_id(tree_id, "tree id", "search_tree_step start returns one")
    try:
        return await state.search.show(number, with_verdicts=with_verdicts, client=client_name())
    except KernelcraftError as e:
        raise ResourceError(str(e)) from e


async def build_report(state: AppState, view: TreeView) -> RunReport:
    return await tree_report(state.store, state.rulebook, view)


async def tree_report(store: Store, rulebook: Rulebook, view: TreeView) -> RunReport:
    """The tree's report, however the tree was built (over MCP, the command line or the driver):
    the view's nodes, with the seed's and the best kernel's code, each step's change against its
    parent and its compiled kernels, and the rules in play (`report.steps`). `kernelcraft report
    --tree N` and the trees://{tree_id}/report resources draw it."""
    codes = {n.id: code for n in view.nodes if n.code_hash and (code := await store.get_code(n.code_hash))}
    seed = next((n for n in view.nodes if n.seed), None)
    report = from_tree(
        view,
        seed_code=codes.get(seed.id) if seed else None,
        best_code=codes.get(view.best_node_id) if view.best_node_id is not None else None,
    )
    task = await store.get_code(view.tree.task_hash) or ""
    rules = await rulebook.query_rules(task, arch=view.tree.target, limit=RULES_IN_REPORT)
    return with_steps(report, view, codes, [r.text for r in rules])


RULES_IN_REPORT = 8
