"""The search tree as clients see it: trees, nodes, steps and the results of start/submit/status.

These models cross the protocol (MCP structured content, `--json`); the search layer fills them
from its tables (`kernelcraft.search.repository`, `kernelcraft.search.tree`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kernelcraft.base.docs import DocSection
from kernelcraft.base.evaluation import EvalResult
from kernelcraft.base.failures import FailureClass
from kernelcraft.base.rules import RuleOut

StepKind = Literal["root", "large", "small"]
Outcome = Literal["not_compiled", "wrong", "correct"]
NodeStatus = Literal["pending", "lapsed", "evaluated"]
ParamValue = int | float | str | bool


class WarmStart(BaseModel):
    """The earlier tree whose best kernel seeded this one."""

    tree_id: int = Field(description="The earlier tree.")
    node_id: int = Field(description="Its best node, now this tree's seed.")
    match: Literal["task_hash", "operator_and_shapes"] = Field(
        description="Same task source, or same Model, inputs and sizes (prose and layout aside)."
    )
    speedup: float | None = Field(description="Its speedup there (null: unmeasured).")


class TreeInfo(BaseModel):
    id: int
    task_name: str
    task_hash: str = Field(description="sha256 of the task source.")
    target: str = Field(description="e.g. sm_90a.")
    policy: str = Field(description="'adaexplore', 'greedy' or 'beam'.")
    params: dict[str, ParamValue] = Field(description="Policy parameters, defaults filled in.")
    budget: int = Field(description="Candidates to evaluate (seed not counted).")
    seed: int = Field(description="Seed of its random choices (replayable).")
    status: Literal["running", "done"]
    steps_issued: int
    warm_start: WarmStart | None = None
    created_by: str
    created_at: str


class NodeInfo(BaseModel):
    """A candidate with its verdict, or a step being written (pending)."""

    id: int
    tree_id: int
    parent_id: int | None
    kind: StepKind = Field(description="'large': a new kernel; 'small': a refinement.")
    status: NodeStatus = Field(description="'lapsed': lease expired (a late submit still counts).")
    seed: bool = Field(default=False, description="The tree's seed (not in the budget).")
    abandoned: bool = Field(
        default=False,
        description="Given up without a candidate (`error` says why); never expanded.",
    )
    step_index: int | None = None
    reason: str | None = Field(default=None, description="Why the policy chose it.")
    outcome: Outcome | None = Field(default=None, description="'wrong': compiled, but wrong.")
    failure_class: FailureClass | None = None
    failure_id: int | None = Field(
        default=None,
        description="Its failure in the rulebook: pass it to record_failure with a rule.",
    )
    error: str | None = Field(
        default=None,
        description="The candidate's traceback frames and the exceptions, trimmed.",
    )
    speedup: float | None = Field(default=None, description="Over the PyTorch baseline; null: unmeasured.")
    candidate_us: float | None = Field(default=None, description="Median time, µs (GPU only).")
    reward: float | None = None
    visits: int = 0
    mean_value: float = 0.0
    max_reward: float = 0.0
    client: str
    created_at: str
    evaluated_at: str | None = None
    lease_expires_at: str | None = None
    code_hash: str | None = None
    code: str | None = Field(default=None, description="Its source (where asked for).")
    verdict: EvalResult | None = Field(default=None, description="The whole evaluation (where asked for).")


class ContextKernel(BaseModel):
    """A kernel shown for the next step."""

    node_id: int
    kind: StepKind
    outcome: Outcome | None
    failure_class: FailureClass | None = None
    error: str | None = Field(default=None, description="Why it failed, if it did.")
    speedup: float | None = None
    candidate_us: float | None = None
    profile: str | None = Field(
        default=None,
        description="Its profile in words (roofline, registers, spills, shared memory); GPU only.",
    )
    code: str = Field(
        description="Its source; in a long chain, an older version's past the token budget is a one-line note."
    )


class NextStep(BaseModel):
    """Your step: write one candidate and submit it for `node_id`."""

    tree_id: int
    node_id: int = Field(description="Submit the candidate for this node.")
    parent_id: int = Field(description="The node being expanded.")
    kind: Literal["large", "small"] = Field(
        description="'small': refine start_code; 'large': write a new kernel."
    )
    step_index: int
    client: str
    lease_expires_at: str = Field(
        description="Submit before this (UTC); late still counts if budget is left."
    )
    reason: str = Field(description="Why the policy chose it.")
    task_name: str
    task_source: str = Field(description="The task: Model, get_inputs, get_init_inputs.")
    target: str
    start_code: str | None = Field(default=None, description="Small step: the kernel to refine.")
    chain: list[ContextKernel] = Field(
        default_factory=list,
        description="Small step: refinements since the last rewrite, oldest first.",
    )
    pool: list[ContextKernel] = Field(
        default_factory=list,
        description="Large step: each branch's best kernel; beat them all.",
    )
    speedup_to_beat: float | None = Field(default=None, description="Large step: the pool's best speedup.")
    rules: list[RuleOut] = Field(
        default_factory=list,
        description="Active rules for this step: all, or the most relevant few (rules_in_prompt).",
    )
    manual_sections: list[DocSection] = Field(
        default_factory=list,
        description="Manual sections for the kernel and its last failure (snippets; section_id for all).",
    )
    parent_profile: str | None = Field(
        default=None, description="The profile of the kernel to start from, in words (GPU only)."
    )
    speedup_measured: bool = Field(description="False without a GPU (correctness only).")
    instructions: str = Field(description="What to do, for a model new to this tree.")


class OutcomeCounts(BaseModel):
    correct: int = 0
    wrong: int = 0
    not_compiled: int = 0
    pending: int = 0
    lapsed: int = 0


class StartResult(BaseModel):
    tree: TreeInfo
    seed_node: NodeInfo | None = Field(default=None, description="The evaluated seed, if one was given.")
    warm_start: WarmStart | None = None
    next_step: NextStep | None
    message: str


class SubmitResult(BaseModel):
    node: NodeInfo = Field(description="The node just evaluated or abandoned.")
    new_best: bool = Field(description="It is now the tree's best.")
    best: NodeInfo | None = Field(description="The best node (without code).")
    budget_left: int
    message: str = Field(description="The verdict in words.")
    next_step: NextStep | None
    next_step_note: str | None = Field(default=None, description="Why there is no next step.")


class TreeStatus(BaseModel):
    tree: TreeInfo
    best: NodeInfo | None = Field(description="The best node, with code and verdict.")
    counts: OutcomeCounts
    budget_used: int
    budget_left: int
    next_step: NextStep | None
    next_step_note: str | None = None


class TreeView(BaseModel):
    tree: TreeInfo
    best_node_id: int | None
    nodes: list[NodeInfo] = Field(description="Every node in id order (code and verdict left out).")
