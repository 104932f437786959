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
    """An earlier tree whose best kernel seeded this one (KernelEvolve's warm start)."""

    tree_id: int = Field(description="The earlier tree.")
    node_id: int = Field(description="Its best node, whose code became this tree's seed.")
    match: Literal["task_hash", "operator_and_shapes"] = Field(
        description="'task_hash': the same task source; 'operator_and_shapes': the same Model, inputs "
        "and sizes once comments, docstrings and formatting are ignored."
    )
    speedup: float | None = Field(description="Its speedup in the earlier tree (null: not measured).")


class TreeInfo(BaseModel):
    id: int
    task_name: str
    task_hash: str = Field(description="sha256 of the task source.")
    target: str = Field(description="Target architecture, e.g. sm_90a.")
    policy: str = Field(description="'adaexplore', 'greedy' or 'beam'.")
    params: dict[str, ParamValue] = Field(description="The policy's parameters, defaults filled in.")
    budget: int = Field(description="Candidates the tree evaluates, the seed not counted.")
    seed: int = Field(description="Seed of the tree's random choices: the same seed replays the same steps.")
    status: Literal["running", "done"]
    steps_issued: int
    warm_start: WarmStart | None = None
    created_by: str
    created_at: str


class NodeInfo(BaseModel):
    """One node: a candidate kernel with its verdict, or a step still being written (pending)."""

    id: int
    tree_id: int
    parent_id: int | None
    kind: StepKind = Field(description="'root' (no code), 'large' (a new kernel) or 'small' (a refinement).")
    status: NodeStatus = Field(
        description="'pending' (a client holds the step), 'lapsed' (the lease expired with nothing "
        "submitted; a late submit still counts), 'evaluated'."
    )
    seed: bool = Field(default=False, description="The tree's seed candidate (not counted in the budget).")
    abandoned: bool = Field(
        default=False,
        description="The step was abandoned without a candidate: no code, outcome 'not_compiled', "
        "`error` says why. It is never expanded.",
    )
    step_index: int | None = None
    reason: str | None = Field(default=None, description="Why the policy chose this step.")
    outcome: Outcome | None = Field(
        default=None, description="'correct', 'wrong' (compiled) or 'not_compiled'."
    )
    failure_class: FailureClass | None = None
    failure_id: int | None = Field(
        default=None,
        description="The rulebook's id for this failure: pass it to record_failure with a proposed rule.",
    )
    error: str | None = Field(
        default=None,
        description="The failing stage's error: the candidate's traceback frames and the exceptions, trimmed.",
    )
    speedup: float | None = Field(
        default=None, description="Speedup over the PyTorch baseline; null if unmeasured."
    )
    candidate_us: float | None = Field(
        default=None, description="Median time of the candidate in µs (GPU only)."
    )
    reward: float | None = None
    visits: int = 0
    mean_value: float = 0.0
    max_reward: float = 0.0
    client: str
    created_at: str
    evaluated_at: str | None = None
    lease_expires_at: str | None = None
    code_hash: str | None = None
    code: str | None = Field(default=None, description="The candidate source (only where asked for).")
    verdict: EvalResult | None = Field(
        default=None, description="The full evaluation (only where asked for)."
    )


class ContextKernel(BaseModel):
    """A kernel shown to the model that writes the next step."""

    node_id: int
    kind: StepKind
    outcome: Outcome | None
    failure_class: FailureClass | None = None
    error: str | None = Field(default=None, description="Why it failed, when it did.")
    speedup: float | None = None
    candidate_us: float | None = None
    profile: str | None = Field(
        default=None,
        description="Its profile in words (roofline fraction and bound, registers, spills, shared memory); "
        "null without a GPU or when the tree's configuration leaves profiles out.",
    )
    code: str = Field(
        description="Its source. In a long chain, an older version's code beyond the step's token budget "
        "is replaced by a one-line comment saying so (its verdict stays)."
    )


class NextStep(BaseModel):
    """One step of the search for one client: write one candidate and submit it for `node_id`."""

    tree_id: int
    node_id: int = Field(description="Submit the candidate for this node id.")
    parent_id: int = Field(description="The node being expanded.")
    kind: Literal["large", "small"] = Field(
        description="'small': refine start_code; 'large': write a new kernel."
    )
    step_index: int
    client: str
    lease_expires_at: str = Field(
        description="Submit before this (UTC); a late submit still counts if budget is left."
    )
    reason: str = Field(description="Why the policy chose this node and kind.")
    task_name: str
    task_source: str = Field(description="The PyTorch reference module (Model, get_inputs, get_init_inputs).")
    target: str
    start_code: str | None = Field(default=None, description="Small step: the kernel to refine.")
    chain: list[ContextKernel] = Field(
        default_factory=list,
        description="Small step: the refinement chain since the last rewrite, oldest first.",
    )
    pool: list[ContextKernel] = Field(
        default_factory=list,
        description="Large step: the best correct kernel of each branch; beat all of them.",
    )
    speedup_to_beat: float | None = Field(
        default=None, description="Large step: the best speedup in the pool."
    )
    rules: list[RuleOut] = Field(
        default_factory=list,
        description="Active rulebook rules for this step: every one, or the most relevant few when the "
        "tree's configuration limits them (rules_in_prompt).",
    )
    manual_sections: list[DocSection] = Field(
        default_factory=list,
        description="The target's hardware-manual sections most relevant to the kernel's operations and "
        "its last failure (snippets; get_section gives the whole text).",
    )
    parent_profile: str | None = Field(
        default=None, description="The profile of the kernel this step starts from, in words (GPU only)."
    )
    speedup_measured: bool = Field(description="False without a GPU: only correctness is checked.")
    instructions: str = Field(description="What to do, written for a model that has never seen this tree.")


class OutcomeCounts(BaseModel):
    correct: int = 0
    wrong: int = 0
    not_compiled: int = 0
    pending: int = 0
    lapsed: int = 0


class StartResult(BaseModel):
    tree: TreeInfo
    seed_node: NodeInfo | None = Field(
        default=None, description="The evaluated seed candidate, if one was given."
    )
    warm_start: WarmStart | None = None
    next_step: NextStep | None
    message: str


class SubmitResult(BaseModel):
    node: NodeInfo = Field(description="The node just evaluated (or abandoned), with its verdict.")
    new_best: bool = Field(description="True when this candidate is now the tree's best.")
    best: NodeInfo | None = Field(description="The tree's best node (without code).")
    budget_left: int
    message: str = Field(description="One paragraph: the verdict in words.")
    next_step: NextStep | None
    next_step_note: str | None = Field(
        default=None, description="Why there is no next step, when there is none."
    )


class TreeStatus(BaseModel):
    tree: TreeInfo
    best: NodeInfo | None = Field(description="The best node so far, with code and verdict.")
    counts: OutcomeCounts
    budget_used: int
    budget_left: int
    next_step: NextStep | None
    next_step_note: str | None = None


class TreeView(BaseModel):
    tree: TreeInfo
    best_node_id: int | None
    nodes: list[NodeInfo] = Field(description="Every node in id order (code and verdict left out).")
