"""A step's life in the database: handed out, claimed for an evaluation, and described to the client.

`issue_step` runs the policy on a snapshot of the tree and inserts the pending node and its lease;
`pending_step` and `claim_step` check and renew that lease when a candidate (or an abandon) comes
back; `describe_step` builds what the client writes the step from: the context kernels, the active
rules that match, and the instructions. The first three take the connection of the caller's
transaction (`SearchService`'s); `describe_step` only reads.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import aiosqlite

from kernelcraft.base.errors import BudgetError, NotFoundError, UsageError
from kernelcraft.base.evaluation import EvalResult
from kernelcraft.base.rules import RuleOut
from kernelcraft.base.tree import ContextKernel, NextStep
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.search import instructions, repository
from kernelcraft.search.messages import NO_GPU_NOTE, budget_held, budget_spent
from kernelcraft.search.policy import CommonParams, large_pool, make_policy, outcome_of, small_chain, step_rng
from kernelcraft.search.tree import TreeRow, context_kernel, iso, node_info, snapshot_from_rows
from kernelcraft.store import Store

# While the evaluator runs, a claimed lease is held at least this long.
CLAIM_SECONDS = 900.0


async def issue_step(
    conn: aiosqlite.Connection, tree: TreeRow, client: str, now: datetime
) -> tuple[int | None, str | None]:
    """Inside a transaction: pick the next step, insert its pending node and lease.

    Returns the new node's id, or None and why no step is handed out (the budget is spent, or
    held by other clients' open steps).
    """
    now_s = iso(now)
    used, open_ = await repository.budget_usage(conn, tree.id, now_s)
    if used >= tree.budget:
        return None, budget_spent(tree, used)
    if used + open_ >= tree.budget:
        return None, budget_held(tree, used, open_)
    policy = make_policy(tree.policy, tree.params)
    params: CommonParams = policy.params
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
    conn: aiosqlite.Connection, tree: TreeRow, node_id: int, evaluated: EvalResult | None = None
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
            f"(`kernelcraft tree status {tree.id}` shows your next step)"
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
            f"takes one candidate: ask for a new step with `kernelcraft tree status {tree.id}`"
        )
    return row


async def claim_step(
    conn: aiosqlite.Connection, tree: TreeRow, row: aiosqlite.Row, client: str, now: datetime
) -> None:
    """Renew the node's lease for the evaluation; a lapsed lease is reopened if budget allows.

    Raises:
        BudgetError: the budget is spent, or (for a lapsed lease) held by other open steps.
    """
    used, open_ = await repository.budget_usage(conn, tree.id, iso(now))
    if used >= tree.budget:
        raise BudgetError(budget_spent(tree, used))
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


async def describe_step(
    store: Store, rulebook: Rulebook, tree_id: int, node_id: int, *, now: str, has_gpu: bool
) -> NextStep:
    """The full step for a pending node: context kernels, rules and instructions."""
    conn = store.conn
    tree = await repository.load_tree(conn, tree_id)
    row = (await repository.node_rows(conn, tree_id, node_ids=[node_id]))[0]
    context_ids: list[int] = json.loads(row["context_ids"] or "[]")
    ctx_rows = {
        r["id"]: r for r in await repository.node_rows(conn, tree_id, node_ids=context_ids, with_code=True)
    }
    context = [context_kernel(node_info(ctx_rows[i], now, with_code=True)) for i in context_ids]
    task_source = await store.get_code(tree.task_hash) or ""
    parent_code = None
    if row["kind"] == "small":
        parent_rows = await repository.node_rows(conn, tree_id, node_ids=[row["parent_id"]], with_code=True)
        parent_code = parent_rows[0]["source"]
    rules = await active_rules(
        rulebook, task_source, parent_code or (context[-1].code if context else ""), tree.target
    )
    pool = context if row["kind"] == "large" else []
    chain = context if row["kind"] == "small" else []
    measured = [k.speedup for k in pool if k.speedup is not None]
    to_beat = max(measured) if measured else None
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
        start_code=parent_code,
        chain=chain,
        pool=pool,
        speedup_to_beat=to_beat,
        rules=rules,
        speedup_measured=has_gpu,
        instructions=_instructions(tree, row, chain, pool, to_beat, rules, has_gpu=has_gpu),
    )


def _instructions(
    tree: TreeRow,
    row: aiosqlite.Row,
    chain: list[ContextKernel],
    pool: list[ContextKernel],
    to_beat: float | None,
    rules: list[RuleOut],
    *,
    has_gpu: bool,
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
            speedup_measured=has_gpu,
        )
    if not has_gpu:
        text += f"\n\nNote: {NO_GPU_NOTE}."
    return text


async def active_rules(rulebook: Rulebook, task_source: str, code: str, target: str) -> list[RuleOut]:
    """The active rules that match the task and the kernel the step starts from."""
    rules = await rulebook.query_rules(f"{task_source}\n{code}", arch=target, dsl="triton", limit=10)
    return [r for r in rules if r.status == "active"]
