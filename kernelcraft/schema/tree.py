"""The search tree as clients see it: trees, nodes, steps and the results of start/submit/status.

These models cross the protocol (MCP structured content, `--json`); the search layer fills them
from its tables (`kernelcraft.search.repository`, `kernelcraft.search.tree`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kernelcraft.base.failures import FailureClass
from kernelcraft.schema.docs import DocSection
from kernelcraft.schema.evaluation import EvalResult
from kernelcraft.schema.rules import RuleOut

StepKind = Literal["root", "large", "small"]
Outcome = Literal["not_compiled", "wrong", "correct"]
NodeStatus = Literal["pending", "lapsed", "evaluated"]
ParamValue = int | float | str | bool


class WarmStart(BaseModel):
    """The tree whose best kernel seeded this one."""

    tree_id: int
    node_id: int = Field(description="Its best node, this tree's seed.")
    match: Literal["task_hash", "operator_and_shapes"] = Field(
        description="Same source, or same Model, inputs and sizes."
    )
    speedup: float | None


class TreeInfo(BaseModel):
    id: int
    task_name: str
    task_hash: str = Field(description="sha256 of the source.")
    target: str
    policy: str
    params: dict[str, ParamValue] = Field(description="Defaults filled in.")
    budget: int = Field(description="Seed not counted.")
    seed: int
    status: Literal["running", "done"]
    steps_issued: int
    warm_start: WarmStart | None = None
    created_by: str
    created_at: str


class NodeInfo(BaseModel):
    """A candidate and its verdict, or a pending step."""

    id: int
    tree_id: int
    parent_id: int | None
    kind: StepKind = Field(description="'large': a new kernel; 'small': a refinement.")
    status: NodeStatus = Field(description="'lapsed': lease expired (late submits count).")
    seed: bool = Field(default=False, description="Outside the budget.")
    abandoned: bool = Field(default=False, description="Given up (`error` says why); never expanded.")
    step_index: int | None = None
    reason: str | None = None
    outcome: Outcome | None = None
    failure_class: FailureClass | None = None
    failure_id: int | None = Field(default=None, description="Pass it to record_failure with a rule.")
    error: str | None = Field(default=None, description="The candidate's frames and exceptions, trimmed.")
    speedup: float | None = Field(default=None, description="Over PyTorch; null: unmeasured.")
    candidate_us: float | None = Field(default=None, description="Median, µs (GPU only).")
    reward: float | None = None
    visits: int = 0
    mean_value: float = 0.0
    max_reward: float = 0.0
    client: str
    created_at: str
    evaluated_at: str | None = None
    lease_expires_at: str | None = None
    code_hash: str | None = None
    code: str | None = Field(default=None, description="Where asked for.")
    verdict: EvalResult | None = Field(default=None, description="Where asked for.")


class ContextKernel(BaseModel):
    node_id: int
    kind: StepKind
    outcome: Outcome | None
    failure_class: FailureClass | None = None
    error: str | None = None
    speedup: float | None = None
    candidate_us: float | None = None
    profile: str | None = Field(default=None, description="In words (GPU only).")
    code: str | None = Field(
        default=None,
        description="Null: you have it (you sent it, or an earlier answer did); a note past the token budget.",
    )


class NextStep(BaseModel):
    """Your step: write one candidate, submit it for node_id."""

    tree_id: int
    node_id: int
    parent_id: int = Field(description="The node being expanded.")
    kind: Literal["large", "small"] = Field(
        description="'small': refine start_code; 'large': write a new kernel."
    )
    step_index: int
    client: str
    lease_expires_at: str = Field(description="Submit by then (UTC); late counts if budget is left.")
    reason: str = Field(description="Why the policy chose it.")
    task_name: str
    task_source: str | None = Field(
        default=None, description="Null: the task you passed to start (resource trees://{tree_id}/task)."
    )
    target: str
    start_code: str | None = Field(
        default=None, description="Small step: parent_id's kernel to refine; null: you have it."
    )
    chain: list[ContextKernel] = Field(
        default_factory=list,
        description="Small step: refinements since the last rewrite.",
    )
    pool: list[ContextKernel] = Field(
        default_factory=list,
        description="Large step: each branch's best kernel; beat them all.",
    )
    speedup_to_beat: float | None = Field(default=None, description="Large step: the pool's best.")
    rules: list[RuleOut] = Field(
        default_factory=list,
        description="All active, or the most relevant.",
    )
    manual_sections: list[DocSection] = Field(
        default_factory=list,
        description="For this kernel and its last failure.",
    )
    parent_profile: str | None = Field(default=None, description="In words (GPU only).")
    speedup_measured: bool = Field(description="False without a GPU.")
    instructions: str = Field(description="What to do, for a model new to it.")


class OutcomeCounts(BaseModel):
    correct: int = 0
    wrong: int = 0
    not_compiled: int = 0
    pending: int = 0
    lapsed: int = 0


class StartResult(BaseModel):
    tree: TreeInfo
    seed_node: NodeInfo | None = Field(default=None, description="The evaluated seed, if given.")
    warm_start: WarmStart | None = None
    next_step: NextStep | None
    message: str


class SubmitResult(BaseModel):
    node: NodeInfo = Field(description="Just evaluated or abandoned.")
    new_best: bool
    best_id: int | None = Field(default=None, description="The tree's best node.")
    best: NodeInfo | None = Field(description="Without code; null: node, or as sent before.")
    budget_left: int
    message: str = Field(description="The verdict in words.")
    next_step: NextStep | None
    next_step_note: str | None = Field(default=None, description="Why there is none.")


class TreeStatus(BaseModel):
    tree: TreeInfo
    best: NodeInfo | None = Field(description="With code and verdict.")
    counts: OutcomeCounts
    budget_used: int
    budget_left: int
    next_step: NextStep | None
    next_step_note: str | None = None


class TreeView(BaseModel):
    tree: TreeInfo
    best_node_id: int | None
    nodes: list[NodeInfo] = Field(description="Every node in id order (code and verdict left out).")


BUDGET_HELD = "remaining budget is held by"
"""The words of a search answer that hands out no step because open steps hold the rest of the
budget (`search/messages.budget_held`): not spent, just out."""


def is_budget_held(note: str | None) -> bool:
    """Whether `note` says the budget is held by open steps (not spent): a parallel lane's early end."""
    return note is not None and BUDGET_HELD in note
