"""The `search_tree_step` MCP tool: one tool for every action on a search tree (start, submit,
status, abandon, next), a thin layer over `SearchService` (`search/service.py`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from kernelcraft.base.targets import DEFAULT_TARGET, Target
from kernelcraft.schema.presets import PresetName
from kernelcraft.schema.tree import StartResult, SubmitResult, TreeStatus
from kernelcraft.server.auth import client_name
from kernelcraft.server.state import AppState
from kernelcraft.server.tools import economy
from kernelcraft.server.tools.common import APPENDS, app_state, check_size, progress_to, tool, tool_errors
from kernelcraft.server.tools.inputs import MAX_INT64

SearchAction = Literal["start", "submit", "status", "abandon", "next", "share"]


class SearchStep(BaseModel):
    """One of start, submit, status, abandon is set: the action's ('status' for 'next')."""

    action: SearchAction = Field(description="The field holding the result ('status' for next).")
    start: StartResult | None = None
    submit: SubmitResult | None = None
    status: TreeStatus | None = Field(default=None, description="For 'status' and 'next'.")
    shared_with: list[str] | None = Field(default=None, description="For 'share': who may read the tree.")
    abandon: SubmitResult | None = None


def _require(action: str, **given: object) -> None:
    missing = [name for name, value in given.items() if value is None]
    if missing:
        raise ToolError(
            f"action {action!r} needs {', '.join(missing)}; pass them and call search_tree_step again"
        )


@tool(title="Step a kernel search tree", annotations=APPENDS)
async def search_tree_step(
    ctx: Context[AppState],
    action: Annotated[
        SearchAction,
        Field(
            description="'start' (reference_code): a tree, your first step; 'submit' (node_id, "
            "candidate_code): the verdict, your next step; 'status': the best kernel; 'abandon' "
            "(node_id, reason); 'next': one more step; 'share' (share_with). All but start take tree_id.",
        ),
    ],
    reference_code: Annotated[
        str | None,
        Field(
            description="start: the task's source (a KernelBench module).",
        ),
    ] = None,
    candidate_code: Annotated[
        str | None,
        Field(
            description="submit: your kernel for the step; start: a seed kernel, if any.",
        ),
    ] = None,
    tree_id: Annotated[
        int | None,
        Field(ge=1, le=MAX_INT64, description="All but start: the tree's id (from start)."),
    ] = None,
    node_id: Annotated[
        int | None,
        Field(ge=1, le=MAX_INT64, description="submit, abandon: the step's node_id."),
    ] = None,
    reason: Annotated[
        str | None,
        Field(description="abandon: why you wrote no candidate."),
    ] = None,
    share_with: Annotated[
        str | None,
        Field(description="share: a client to let read the tree, or '*' for all."),
    ] = None,
    target: Annotated[
        Target,
        Field(description="start: the GPU the kernels are for."),
    ] = DEFAULT_TARGET,
    policy: Annotated[
        str,
        Field(description="start: 'adaexplore', 'greedy' or 'beam'."),
    ] = "adaexplore",
    preset: Annotated[
        PresetName | None,
        Field(
            description="start: 'kernelcraft' (default: AdaExplore plus manuals and profiles) or "
            "'adaexplore'."
        ),
    ] = None,
    budget: Annotated[
        int, Field(ge=1, le=10_000, description="start: how many candidates the tree evaluates.")
    ] = 50,
    seed: Annotated[
        int,
        Field(
            ge=-MAX_INT64 - 1,
            le=MAX_INT64,
            description="start: the seed of its random choices.",
        ),
    ] = 0,
    policy_params: Annotated[
        dict[str, int | float | str | bool] | None,
        Field(description="start: over the preset's, e.g. {'p_large': 0.3} or {'level': 3} (KernelBench)."),
    ] = None,
    task_name: Annotated[
        str | None,
        Field(description="start: the task's file name; omit to name the tree after its operator."),
    ] = None,
) -> SearchStep:
    """A tree search over kernels (AdaExplore): the server picks what to try, you write it.
    'start', then 'submit' each next_step as its instructions say until the budget is spent;
    'abandon' a step you cannot write."""
    step = await _search_action(
        ctx,
        action,
        reference_code=reference_code,
        candidate_code=candidate_code,
        tree_id=tree_id,
        node_id=node_id,
        reason=reason,
        target=target,
        policy=policy,
        preset=preset,
        policy_params=policy_params,
        budget=budget,
        seed=seed,
        task_name=task_name,
        share_with=share_with,
    )
    state = app_state(ctx)
    return economise(step, state, economy.reader_of(state, ctx.session, client_name()))


async def _search_action(
    ctx: Context[AppState],
    action: SearchAction,
    *,
    reference_code: str | None,
    candidate_code: str | None,
    tree_id: int | None,
    node_id: int | None,
    reason: str | None,
    target: Target,
    policy: str,
    preset: PresetName | None,
    policy_params: dict[str, int | float | str | bool] | None,
    budget: int,
    seed: int,
    task_name: str | None,
    share_with: str | None = None,
) -> SearchStep:
    """What search_tree_step does for one action, its arguments checked by the tool's schema."""
    state = app_state(ctx)
    client = client_name()
    reader = economy.reader_of(state, ctx.session, client)
    for name, code in (
        ("reference_code", reference_code),
        ("candidate_code", candidate_code),
        ("reason", reason),
    ):
        check_size(state, name, code)
    with tool_errors():
        if action == "start":
            _require(action, reference_code=reference_code)
            assert reference_code is not None
            started = await state.search.start(
                reference_code,
                task_name=task_name,
                seed_candidate=candidate_code,
                target=target,
                policy=policy,
                preset=preset,
                params=dict(policy_params) if policy_params else None,
                budget=budget,
                seed=seed,
                client=client,
                progress=progress_to(ctx),
            )
            economy.client_sent(state, started.tree.id, reader, task=True)
            if candidate_code is not None and started.warm_start is None:
                economy.client_sent(state, started.tree.id, reader, code=candidate_code)
            return SearchStep(action=action, start=started)
        if action == "submit":
            _require(action, tree_id=tree_id, node_id=node_id, candidate_code=candidate_code)
            assert tree_id is not None and node_id is not None and candidate_code is not None
            economy.client_sent(state, tree_id, reader, code=candidate_code)
            submitted = await state.search.submit(
                tree_id, node_id, candidate_code, client=client, progress=progress_to(ctx)
            )
            return SearchStep(action=action, submit=submitted)
        if action == "abandon":
            _require(action, tree_id=tree_id, node_id=node_id, reason=reason)
            assert tree_id is not None and node_id is not None and reason is not None
            abandoned = await state.search.abandon(tree_id, node_id, reason, client=client)
            return SearchStep(action=action, abandon=abandoned)
        _require(action, tree_id=tree_id)
        assert tree_id is not None
        if action == "share":
            _require(action, share_with=share_with)
            assert share_with is not None
            shared = await state.search.share(tree_id, share_with, client=client)
            return SearchStep(action=action, shared_with=shared)
        status = await state.search.status(tree_id, client=client, new_step=action == "next")
        return SearchStep(action=action, status=status)


def economise(step: SearchStep, state: AppState, client: str) -> SearchStep:
    """The answer as sent: nothing the client holds sent again (`economy.py`)."""
    for holder in (step.start, step.submit, step.abandon, step.status):
        if holder is not None:
            economy.economise(holder, state, client)
    return step
