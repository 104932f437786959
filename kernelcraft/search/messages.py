"""The sentences the search service answers with: verdicts in words, why no step is handed out,
and what `start` did. Pure functions over the client-facing models."""

from __future__ import annotations

from kernelcraft.base.errortext import error_line
from kernelcraft.base.failures import FailureClass
from kernelcraft.base.voice import Voice
from kernelcraft.schema.tree import BUDGET_HELD, NextStep, NodeInfo, WarmStart
from kernelcraft.search.tree import TreeRow

NO_GPU_NOTE = (
    "speedup unknown: no GPU — correctness was checked in Triton's interpreter; the search scores a "
    "correct kernel as parity (1.0×) until it is timed on a GPU"
)


def budget_spent(tree: TreeRow, used: int, voice: Voice) -> str:
    return (
        f"tree {tree.id}'s budget is spent: {used} of {tree.budget} candidates evaluated; "
        f"{voice.tree_status(tree.id)} shows its best kernel, and a new tree for this task "
        f"starts from it when it is correct (warm start)"
    )


def budget_held(tree: TreeRow, used: int, open_: int) -> str:
    return (
        f"tree {tree.id}'s {BUDGET_HELD} {open_} open step(s) still being written or evaluated "
        f"({used} of {tree.budget} evaluated); ask again after they are submitted or their leases lapse"
    )


def short_verdict(node: NodeInfo) -> str:
    if node.abandoned:
        return "abandoned"
    if node.outcome == "correct":
        return f"correct, {node.speedup:.2f}×" if node.speedup is not None else "correct, speed not measured"
    return node.outcome or node.status


def verdict_words(node: NodeInfo) -> str:
    reward = f"reward {node.reward:.3f}" if node.reward is not None else "no reward"
    if node.abandoned:
        first = (node.error or "").strip().splitlines()
        return f"abandoned without a candidate{': ' + first[0] if first else ''}; {reward}."
    if node.outcome == "correct":
        if node.speedup is not None:
            timing = f" (candidate {node.candidate_us:.1f} µs)" if node.candidate_us is not None else ""
            return f"correct, {node.speedup:.2f}× vs PyTorch{timing}; {reward}."
        return f"correct; speedup unknown (no GPU timing); {reward}."
    cls = failure_words(node.failure_class)
    summary = error_line(node.error or "")
    detail = f": {summary}" if summary else ""
    label = "did not compile" if node.outcome == "not_compiled" else "compiled but wrong"
    return f"{label} ({cls}){detail}; {reward}."


def failure_words(failure_class: FailureClass | None) -> str:
    """A failure class as words ('numerical mismatch'), never its enum's repr."""
    return failure_class.value.replace("_", " ") if failure_class is not None else "failed"


def start_message(
    tree: TreeRow,
    warm: WarmStart | None,
    seed: NodeInfo | None,
    step: NextStep | None,
    note: str | None,
    *,
    has_gpu: bool,
) -> str:
    parts = [
        f"Started tree {tree.id} for {tree.task_name} on {tree.target} with policy {tree.policy} "
        f"(preset {tree.params.get('preset', 'kernelcraft')}) and a budget of {tree.budget}."
    ]
    if warm is not None:
        parts.append(
            f"Warm start: seeded with node {warm.node_id}, the best kernel of tree {warm.tree_id} "
            f"(matched by {warm.match.replace('_', ' ')})."
        )
    if seed is not None:
        parts.append(f"Seed (node {seed.id}): {verdict_words(seed)}")
    if not has_gpu and step is None:  # a step's instructions say it
        parts.append(NO_GPU_NOTE + ".")
    parts.append(f"Next: {step.kind} step, submit for node {step.node_id}." if step else (note or ""))
    return " ".join(parts)


def step_message(node: NodeInfo, *, new_best: bool, best: NodeInfo | None, voice: Voice) -> str:
    """What `submit` and `abandon` say about the node they closed; a failure says it was recorded
    (its failure_id) and how its rule is taught, in the reader's words."""
    message = f"Node {node.id}: {verdict_words(node)}"
    if node.failure_id is not None:
        teach = voice.teach(node.failure_id)
        message += f" Recorded as failure {node.failure_id}" + (f"; {teach}." if teach else ".")
    if new_best:
        message += " This is the tree's best kernel so far."
    elif best is not None:
        message += f" The tree's best is node {best.id} ({short_verdict(best)})."
    return message
