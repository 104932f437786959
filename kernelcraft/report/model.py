"""The data of a run's report: what `render_html` draws and what the report resource returns.

A `RunReport` is filled in two stages. The tree's part (every node with its verdict, the speedups
against eager and `torch.compile`, the seed's and the best kernel's code) comes from the database,
through the search tree's models (`report.build.from_tree`): the server's
`trees://{tree_id}/report` resource stops there. The driver's part (who wrote each step, tokens
and dollars, why the run stopped) exists only in the run directory (`steps.jsonl`,
`summary.json`), so it is optional here and `report.build.from_run_dir` adds it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kernelcraft.base.failures import FailureClass
from kernelcraft.schema.tree import NodeStatus, Outcome, StepKind

# What the tree drawing colours a node by: its outcome, or why it has none.
Verdict = Literal["correct", "wrong", "not_compiled", "abandoned", "pending", "root"]


class TokenUsage(BaseModel):
    """Tokens and dollars of LLM calls, as the driver counts them (`steps.jsonl`'s `usage`)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    thinking_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = Field(
        default=0.0, description="US dollars; null when the model has no price (a local model)."
    )


class ReportNode(BaseModel):
    """One node of the tree, with what the report shows of it."""

    id: int
    parent_id: int | None
    kind: StepKind = Field(description="'root', 'large' (a new kernel) or 'small' (a refinement).")
    verdict: Verdict = Field(description="What the drawing colours the node by.")
    seed: bool = False
    status: NodeStatus = "evaluated"
    step_index: int | None = Field(default=None, description="The order the policy issued the step in.")
    outcome: Outcome | None = None
    failure_class: FailureClass | None = None
    error: str | None = Field(default=None, description="The error's telling line, trimmed.")
    speedup: float | None = Field(
        default=None, description="Against the tree's baseline; null if unmeasured."
    )
    speedup_vs_eager: float | None = None
    speedup_vs_compiled: float | None = Field(default=None, description="Against torch.compile.")
    candidate_us: float | None = Field(default=None, description="Median time in µs (GPU only).")
    roofline: str | None = Field(
        default=None,
        description="The fraction of its roofline floor it runs at and the floor's terms (GPU only).",
    )
    reward: float | None = None
    eval_seconds: float | None = Field(
        default=None,
        description="The evaluation's wall time from its submission (the verdict's); null when not known.",
    )
    proposer: Literal["llm", "tuner"] | None = Field(
        default=None, description="Who wrote the step (from steps.jsonl); null when not known."
    )
    usage: TokenUsage | None = Field(default=None, description="The step's tokens (from steps.jsonl).")
    tuner_axes: list[str] = Field(
        default_factory=list,
        description="The axes a tuner step moved along ('tile M', 'warps', 'cookbook', ...; from steps.jsonl).",
    )
    step_seconds: float | None = Field(
        default=None, description="The step's wall time, writing and evaluation (from steps.jsonl)."
    )
    change: str | None = Field(default=None, description="A diff of its kernel against its parent's.")
    compiled: list[str] = Field(default_factory=list, description="Its compiled kernels in words.")


class TunerAxis(BaseModel):
    """What the offline tuner's steps along one axis cost and gave (summary.json's `tuner_axis_seconds`)."""

    axis: str = Field(description="'tile M', 'block', 'warps', 'split-K', 'precision', 'cookbook', ...")
    steps: int
    seconds: float = Field(description="The steps' total wall time.")
    median_seconds: float
    new_best: int = Field(description="How many of its steps found a new best kernel.")
    best_gain: float | None = Field(
        default=None,
        description="The most a step made its kernel faster than the kernel it started from "
        "(its time over the step's); null when untimed (no GPU).",
    )


class RunReport(BaseModel):
    """One search tree, and where known the run that drove it."""

    tree_id: int
    task_name: str
    target: str
    policy: str
    baseline: str = Field(description="What `speedup` is measured against: 'eager' or 'compiled'.")
    budget: int
    speedup_measured: bool = Field(
        description="False when no candidate was timed (no GPU): every correct kernel then scores the same."
    )
    speed_note: str | None = Field(
        default=None, description="Why speedups are missing, when they are; the page shows it."
    )
    best_node_id: int | None
    nodes: list[ReportNode] = Field(description="Every node in id order.")
    failures_by_class: dict[str, int] = Field(
        description="Failed candidates by failure class; steps abandoned without a candidate as 'abandoned'."
    )
    seed_code: str | None = Field(default=None, description="The tree's seed kernel, if it had one.")
    best_code: str | None = Field(default=None, description="The best kernel's code.")
    rules: list[str] = Field(default_factory=list, description="The active rules ranked for the task.")
    best_why: list[str] = Field(
        default_factory=list,
        description="The best kernel's compiled kernels in words: registers, occupancy, what its "
        "tl.dot ran on (from its verdict; a GPU run's).",
    )
    # The driver's part: only the run directory knows it.
    llm: str | None = Field(default=None, description="The run's --llm ('anthropic', 'openai', 'none').")
    model: str | None = None
    usage: TokenUsage | None = Field(
        default=None, description="The run's tokens and dollars; null when not known (not in the database)."
    )
    stopped_because: str | None = None
    run_dir: str | None = None
    tuner_axes: list[TunerAxis] = Field(
        default_factory=list, description="The offline tuner's steps per axis, in the order it moved them."
    )

    def node(self, node_id: int | None) -> ReportNode | None:
        return next((n for n in self.nodes if n.id == node_id), None)
