"""A step's life in the database: handed out, claimed for an evaluation, and described to the client.

`issue_step` runs the policy on a snapshot of the tree and inserts the pending node and its lease;
`pending_step` and `claim_step` check and renew that lease when a candidate (or an abandon) comes
back; `describe_step` builds what the client writes the step from: the context kernels (a chain's
code within the tree's token budget), the active rules, the hardware-manual sections and profiles
(KernelEvolve's feedback, where the tree's configuration asks for them) and the instructions. The
first three take the connection of the caller's
transaction (`SearchService`'s); `describe_step` only reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

import aiosqlite

from kernelcraft.base.errors import BudgetError, NotFoundError, UsageError
from kernelcraft.base.voice import Voice
from kernelcraft.knowledge.docs import HwDocs
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.schema.docs import DocSection
from kernelcraft.schema.evaluation import EvalResult
from kernelcraft.schema.presets import CHARS_PER_TOKEN, PoolUse, SearchConfig
from kernelcraft.schema.rules import RuleOut
from kernelcraft.schema.tree import ContextKernel, NextStep, NodeInfo
from kernelcraft.search import feedback, instructions, repository
from kernelcraft.search.messages import NO_GPU_NOTE, budget_held, budget_spent
from kernelcraft.search.policy import large_pool, make_policy, outcome_of, small_chain, step_rng
from kernelcraft.search.tree import TreeRow, context_kernel, iso, node_info, snapshot_from_rows
from kernelcraft.store import Store

# While the evaluator runs, a claimed lease is held at least this long.
CLAIM_SECONDS = 900.0
# "Every active rule": more than a rulebook holds.
ALL_RULES = 100_000


async def issue_step(
    conn: aiosqlite.Connection, tree: TreeRow, client: str, now: datetime, voice: Voice
) -> tuple[int | None, str | None]:
    """Inside a transaction: pick the next step, insert its pending node and lease.

    Returns the new node's id, or None and why no step is handed out (the budget is spent, or
    held by other clients' open steps).
    """
    now_s = iso(now)
    used, open_ = await repository.budget_usage(conn, tree.id, now_s)
    if used >= tree.budget:
        return None, budget_spent(tree, used, voice)
    if used + open_ >= tree.budget:
        return None, budget_held(tree, used, open_)
    policy = make_policy(tree.policy, tree.params)
    params: SearchConfig = policy.params
    snap = snapshot_from_rows(await repository.node_rows(conn, tree.id), now_s)
    rng = step_rng(tree.seed, tree.steps_issued)
    decision = policy.decide(snap, rng)
    if decision.kind == "small":
        context = small_chain(snap, decision.parent_id, params.memory)
    else:
        context = large_pool(snap, decision.parent_id, params.pool_size, rng)
    node_id = await repository.insert_node(
        conn,
        tree_id=tree.id,
        parent_id=decision.parent_id,
        kind=decision.kind,
        client=client,
        now=now_s,
        step_index=tree.steps_issued,
        reason=decision.reason,
        context_ids=context,
    )
    expires = iso(now + timedelta(seconds=params.lease_seconds))
    await repository.insert_lease(
        conn, node_id, tree.id, client=client, kind=decision.kind, now=now_s, expires=expires
    )
    await repository.count_issued_step(conn, tree.id, now_s)
    return node_id, None


async def pending_step(
    conn: aiosqlite.Connection,
    tree: TreeRow,
    node_id: int,
    voice: Voice,
    evaluated: EvalResult | None = None,
) -> aiosqlite.Row:
    """The node of `tree` a candidate (or an abandon) is for, if it still waits for one.

    `evaluated`: the verdict already reached, named in the error when the node has one already.

    Raises:
        NotFoundError: no such node.
        UsageError: the node belongs to another tree, is the root, or already has a verdict.
    """
    row = await repository.step_row(conn, node_id)
    if row is None:
        raise NotFoundError(
            f"no node {node_id}; submit for the node_id of a step of tree {tree.id} "
            f"({voice.tree_status(tree.id)} shows your next step)"
        )
    if row["tree_id"] != tree.id:
        raise UsageError(
            f"node {node_id} belongs to tree {row['tree_id']}, not tree {tree.id}; "
            f"submit it with tree_id={row['tree_id']}"
        )
    if row["kind"] == "root":
        raise UsageError(f"node {node_id} is the root of tree {tree.id}; submit for the node_id of a step")
    if row["status"] == "evaluated":
        lost = (
            f" (this submission's verdict, {outcome_of(evaluated)[0]}, was not recorded)" if evaluated else ""
        )
        raise UsageError(
            f"node {node_id} of tree {tree.id} already has a verdict ({row['outcome']}){lost}; each step "
            f"takes one candidate: ask for a new step with {voice.new_step(tree.id)}"
        )
    return row


async def claim_step(
    conn: aiosqlite.Connection, tree: TreeRow, row: aiosqlite.Row, client: str, now: datetime, voice: Voice
) -> None:
    """Renew the node's lease for the evaluation; a lapsed lease is reopened if budget allows.

    Raises:
        BudgetError: the budget is spent, or (for a lapsed lease) held by other open steps.
    """
    used, open_ = await repository.budget_usage(conn, tree.id, iso(now))
    if used >= tree.budget:
        raise BudgetError(budget_spent(tree, used, voice))
    hold = iso(now + timedelta(seconds=max(CLAIM_SECONDS, float(tree.params.get("lease_seconds", 0)))))
    expires = row["lease_expires_at"]
    if expires is not None and expires > iso(now):
        await repository.extend_lease(conn, row["id"], hold)
        return
    if used + open_ >= tree.budget:
        raise BudgetError(
            f"the lease on node {row['id']} lapsed and tree {tree.id}'s remaining budget is held by "
            f"{open_} other open step(s) ({used} of {tree.budget} evaluated); wait for them and retry, "
            f"or start a new tree"
        )
    await repository.reopen_lease(
        conn, row["id"], tree.id, client=client, kind=row["kind"], now=iso(now), until=hold
    )


@dataclass(frozen=True)
class StepContext:
    """What a step shows besides its task: the kernels (chain or pool), the kernel it starts from,
    and how much of the chain's code the token budget left out."""

    kernels: list[ContextKernel]
    parent: NodeInfo | None
    parent_profile: str | None
    omitted: int


async def describe_step(
    store: Store,
    rulebook: Rulebook,
    docs: HwDocs | None,
    tree_id: int,
    node_id: int,
    *,
    now: str,
    has_gpu: bool,
) -> NextStep:
    """The full step for a pending node: context kernels, rules, manual sections and instructions."""
    conn = store.conn
    tree = await repository.load_tree(conn, tree_id)
    config = make_policy(tree.policy, tree.params).params
    row = (await repository.node_rows(conn, tree_id, node_ids=[node_id]))[0]
    ctx = await step_context(store, tree, row, config, now)
    task_source = await store.get_code(tree.task_hash) or ""
    small = row["kind"] == "small"
    start_code = ctx.parent.code if small and ctx.parent is not None else None
    rules = await step_rules(
        rulebook,
        config,
        task_source,
        start_code or (ctx.kernels[-1].code or "" if ctx.kernels else ""),
        tree.target,
    )
    manuals = await step_manuals(docs, config, tree.target, task_source, ctx)
    pool = [] if small else ctx.kernels
    chain = ctx.kernels if small else []
    measured = [k.speedup for k in pool if k.speedup is not None]
    to_beat = max(measured) if measured else None
    feedback_text = instructions.Feedback(
        manuals=manuals,
        parent_profile=ctx.parent_profile,
        context_tokens=config.context_tokens,
        omitted=ctx.omitted,
    )
    return NextStep(
        tree_id=tree_id,
        node_id=node_id,
        parent_id=row["parent_id"],
        kind=row["kind"],
        step_index=row["step_index"],
        client=row["lease_client"] or row["client"],
        lease_expires_at=row["lease_expires_at"] or now,
        reason=row["reason"] or "",
        task_name=tree.task_name,
        task_source=task_source,
        target=tree.target,
        start_code=start_code,
        chain=chain,
        pool=pool,
        speedup_to_beat=to_beat,
        rules=rules,
        manual_sections=manuals,
        parent_profile=ctx.parent_profile,
        speedup_measured=has_gpu,
        instructions=_instructions(
            tree, row, chain, pool, to_beat, rules, feedback_text, has_gpu=has_gpu, pool_use=config.pool_use
        ),
    )


async def step_context(
    store: Store, tree: TreeRow, row: aiosqlite.Row, config: SearchConfig, now: str
) -> StepContext:
    """The step's context kernels with their profiles (if the tree wants them), a small step's
    chain cut to the token budget, and the node the step starts from."""
    context_ids: list[int] = json.loads(row["context_ids"] or "[]")
    wanted = list(dict.fromkeys([*context_ids, row["parent_id"]]))
    rows = {
        r["id"]: r for r in await repository.node_rows(store.conn, tree.id, node_ids=wanted, with_code=True)
    }
    infos = {i: node_info(r, now, with_code=True, with_verdict=True) for i, r in rows.items()}

    def profile(info: NodeInfo) -> str | None:
        return feedback.profile_words(info.verdict, tree.target) if config.profile_feedback else None

    kernels = [context_kernel(infos[i], profile(infos[i])) for i in context_ids]
    omitted = 0
    if row["kind"] == "small":
        kernels, omitted = fit_chain(kernels, config.context_tokens)
    parent = infos.get(row["parent_id"])
    if parent is not None and parent.kind == "root":
        parent = None
    return StepContext(kernels, parent, profile(parent) if parent is not None else None, omitted)


def fit_chain(chain: list[ContextKernel], tokens: int) -> tuple[list[ContextKernel], int]:
    """The chain with the code of its newest versions kept within about `tokens` tokens (the newest,
    the kernel to refine, always whole); older versions' code becomes a one-line note, their
    verdicts stay. Returns the chain and how many versions lost their code."""
    budget = tokens * CHARS_PER_TOKEN
    out: list[ContextKernel] = []
    omitted = 0
    for i, k in enumerate(reversed(chain)):
        size = len(k.code or "")
        if i == 0 or size <= budget:
            budget -= size
            out.append(k)
            continue
        budget = 0  # older versions never jump ahead of a newer one that did not fit
        omitted += 1
        note = (
            f"# code of node {k.node_id} left out: the chain's code is kept within about {tokens} tokens, "
            "newest first; its verdict is above\n"
        )
        out.append(k.model_copy(update={"code": note}))
    return out[::-1], omitted


async def step_rules(
    rulebook: Rulebook, config: SearchConfig, task_source: str, code: str, target: str
) -> list[RuleOut]:
    """Every active rule for the target (AdaExplore), or the `rules_in_prompt` that best match the
    task and the kernel the step starts from; in both, those that match them first."""
    # Every active rule (AdaExplore's prompt holds them all), ranked for the task all the same: an
    # answer that carries only some of them (an MCP client's context) carries the task's first.
    limit = config.rules_in_prompt or ALL_RULES
    rules = await rulebook.query_rules(f"{task_source}\n{code}", arch=target, dsl="triton", limit=limit)
    if config.rules_in_prompt == 0:
        ranked_ids = {r.id for r in rules}
        rest = [r for r in await rulebook.list_rules(status="active", arch=target) if r.id not in ranked_ids]
        rules = [*rules, *rest]
    return [r for r in rules if r.status == "active"]


async def step_manuals(
    docs: HwDocs | None, config: SearchConfig, target: str, task_source: str, ctx: StepContext
) -> list[DocSection]:
    """The `manual_sections` sections of the target's manuals that best match the kernel's
    operations and its last failure (KernelEvolve's retrieval)."""
    if docs is None or config.manual_sections == 0:
        return []
    parent = ctx.parent
    failed = [k for k in ctx.kernels if k.outcome != "correct"]
    last = failed[-1] if failed else None
    if parent is not None and parent.outcome != "correct":
        failure_class, error = parent.failure_class, parent.error
    elif last is not None:
        failure_class, error = last.failure_class, last.error
    else:
        failure_class, error = None, None
    code = parent.code if parent is not None else "\n".join(k.code or "" for k in ctx.kernels)
    verdict = parent.verdict if parent is not None else None
    query = feedback.manual_query(
        task_source,
        code,
        failure_class=failure_class,
        error=error,
        bound=feedback.bound_of(verdict),
        spills=feedback.spills_of(verdict),
    )
    return await feedback.manual_sections(docs, query, target, config.manual_sections)


def _instructions(
    tree: TreeRow,
    row: aiosqlite.Row,
    chain: list[ContextKernel],
    pool: list[ContextKernel],
    to_beat: float | None,
    rules: list[RuleOut],
    extra: instructions.Feedback,
    *,
    has_gpu: bool,
    pool_use: PoolUse,
) -> str:
    """The step's instructions, written for a model that has never seen the tree."""
    if row["kind"] == "small":
        text = instructions.small_step(
            task_name=tree.task_name,
            target=tree.target,
            tree_id=tree.id,
            node_id=row["id"],
            parent_id=row["parent_id"],
            chain=chain,
            rules=rules,
            feedback=extra,
            speedup_measured=has_gpu,
        )
    else:
        text = instructions.large_step(
            task_name=tree.task_name,
            target=tree.target,
            tree_id=tree.id,
            node_id=row["id"],
            pool=pool,
            speedup_to_beat=to_beat,
            rules=rules,
            feedback=extra,
            speedup_measured=has_gpu,
            pool_use=pool_use,
        )
    if not has_gpu:
        text += f"\n\nNote: {NO_GPU_NOTE}."
    return text
