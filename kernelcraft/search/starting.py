"""A tree's start: check the request and find its warm start (`plan_start`), then write the tree,
its root, the evaluated seed and the first step in one transaction (`create_tree`).

`SearchService.start` calls these in order, evaluating the seed (outside any transaction)
between them. Only `create_tree` writes the tree's rows; `plan_start` writes only the task's code.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kernelcraft.base.errors import UsageError
from kernelcraft.base.targets import KNOWN_TARGETS
from kernelcraft.base.voice import Voice
from kernelcraft.schema.evaluation import EvalResult
from kernelcraft.schema.tree import WarmStart
from kernelcraft.search import repository
from kernelcraft.search.policy import start_policy
from kernelcraft.search.records import Created, StartPlan
from kernelcraft.search.steps import issue_step
from kernelcraft.search.task import task_key
from kernelcraft.search.tree import iso
from kernelcraft.search.verdicts import record_verdict
from kernelcraft.store import Store

MAX_BUDGET = 10_000


def check_code(source: str, what: str, max_bytes: int) -> None:
    """Refuse empty source, or source over `max_bytes`, with what to do."""
    if not isinstance(source, str) or not source.strip():
        raise UsageError(f"{what} is empty; pass the full Python module as text")
    size = len(source.encode("utf-8"))
    if size > max_bytes:
        raise UsageError(f"{what} is {size} bytes, over the limit of {max_bytes}; shorten it")


async def put_code(store: Store, source: str) -> str:
    async with store.transaction():
        return await store.put_code(source)


async def plan_start(
    store: Store,
    task_source: str,
    *,
    task_name: str,
    seed_candidate: str | None,
    target: str,
    policy: str,
    preset: str | None,
    params: dict[str, Any] | None,
    budget: int,
    seed: int,
    client: str,
    max_code_bytes: int,
) -> StartPlan:
    """Check a `start` request and find its warm start; writes only the task's code."""
    if target not in KNOWN_TARGETS:
        raise UsageError(f"unknown target {target!r}; use one of: {', '.join(KNOWN_TARGETS)}")
    if not 1 <= budget <= MAX_BUDGET:
        raise UsageError(f"budget must be between 1 and {MAX_BUDGET} candidates, got {budget}")
    check_code(task_source, "the task", max_code_bytes)
    key = task_key(task_source, task_name)
    chosen = start_policy(policy, preset, params)
    digest = await put_code(store, task_source)
    warm: WarmStart | None = None
    if seed_candidate is None and chosen.params.warm_start:
        found = await repository.find_warm_start(store.conn, digest, key, target, client)
        if found is not None:
            warm, seed_candidate = found
    if seed_candidate is not None:
        check_code(seed_candidate, "the seed candidate", max_code_bytes)
    return StartPlan(
        task_source=task_source,
        task_name=task_name,
        task_hash=digest,
        task_key=key,
        target=target,
        policy=policy,
        params=chosen.params.model_dump(),
        budget=budget,
        seed=seed,
        client=client,
        seed_candidate=seed_candidate,
        warm=warm,
    )


async def create_tree(
    store: Store, plan: StartPlan, seed_result: EvalResult | None, now: datetime, voice: Voice
) -> Created:
    """One transaction: the tree, its root, the evaluated seed node if any, and the first step."""
    async with store.transaction() as conn:
        tree_id = await repository.insert_tree(
            conn,
            task_hash=plan.task_hash,
            task_key=plan.task_key,
            task_name=plan.task_name,
            target=plan.target,
            policy=plan.policy,
            params=plan.params,
            budget=plan.budget,
            seed=plan.seed,
            warm_start=plan.warm,
            client=plan.client,
            now=iso(now),
        )
        root = await repository.insert_node(
            conn,
            tree_id=tree_id,
            parent_id=None,
            kind="root",
            client=plan.client,
            now=iso(now),
            status="evaluated",
        )
        seed_id = None
        if plan.seed_candidate is not None and seed_result is not None:
            why = (
                f"warm start: the best kernel of tree {plan.warm.tree_id}"
                if plan.warm is not None
                else "the seed candidate given at start"
            )
            seed_id = await repository.insert_node(
                conn,
                tree_id=tree_id,
                parent_id=root,
                kind="large",
                client=plan.client,
                now=iso(now),
                seed=True,
                reason=why,
            )
            await record_verdict(
                conn,
                store,
                seed_id,
                plan.seed_candidate,
                seed_result,
                plan.params,
                client=plan.client,
                now=iso(now),
            )
        tree = await repository.load_tree(conn, tree_id, voice)
        step_node, note = await issue_step(conn, tree, plan.client, now, voice)
    return Created(tree, seed_id, step_node, note)
