"""The search service: start a tree, hand out steps, take candidates back, report status.

`SearchService` is what the MCP tool `search_tree_step` and the `kernelcraft tree` commands call.
All state lives in SQLite, so any number of server processes may share one database and a
restarted server continues where it stopped.

A step's life: the policy picks a node and a kind inside one `BEGIN IMMEDIATE` transaction, which
inserts a pending child node and a lease for the asking client (so two clients never get the same
step, and steps in flight count as virtual losses for the next selection). `submit` claims the
lease (renewing it while the evaluator runs), evaluates the candidate outside any transaction,
then records the verdict, back-propagates the reward and issues the client's next step in a
second transaction. A lease that lapsed still accepts its candidate while budget is left. `abandon` closes a
step that produced no candidate (the client's model wrote nothing usable): the node fails with
the client's reason and reward 0, without an evaluation and without a rulebook entry.

Budget: the number of evaluated candidates (the seed is free). A step is only handed out while
evaluated + open leases < budget, so the budget is never overrun.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import aiosqlite

from kernelcraft.base.errors import BudgetError, KernelcraftError, NotFoundError, UsageError
from kernelcraft.base.evaluation import EvalJob, EvalResult
from kernelcraft.base.failures import FailureClass
from kernelcraft.base.rules import RuleOut
from kernelcraft.base.targets import KNOWN_TARGETS
from kernelcraft.base.tree import (
    NextStep,
    NodeInfo,
    OutcomeCounts,
    StartResult,
    SubmitResult,
    TreeStatus,
    TreeView,
    WarmStart,
)
from kernelcraft.engine.evaluator import Evaluator, ProgressCallback
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.search import instructions
from kernelcraft.search.policy import (
    CommonParams,
    failure_text,
    large_pool,
    make_policy,
    outcome_of,
    reward_for,
    small_chain,
    step_rng,
)
from kernelcraft.search.task import task_key
from kernelcraft.search.tree import (
    TreeRow,
    best_node_id,
    context_kernel,
    insert_node,
    insert_tree,
    load_tree,
    node_info,
    node_rows,
    record_abandoned,
    record_evaluation,
    row_status,
    snapshot_from_rows,
    tree_view,
    trim,
)
from kernelcraft.store import Store

logger = logging.getLogger(__name__)

MAX_BUDGET = 10_000
# While the evaluator runs, a claimed lease is held at least this long.
CLAIM_SECONDS = 900.0
NO_GPU_NOTE = (
    "speedup unknown: no GPU — correctness was checked in Triton's interpreter; the search scores a "
    "correct kernel as parity (1.0×) until it is timed on a GPU"
)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="microseconds")


@dataclass(frozen=True)
class _Closed:
    """What `_after_step` leaves for the step's result: the tree as it now stands, its best node,
    the next step handed out (or why none was) and the budget used."""

    tree: TreeRow
    best_id: int | None
    step_node: int | None
    note: str | None
    used_after: int


class SearchService:
    """Search trees over one open Store. Every method is safe to call from concurrent tasks."""

    def __init__(
        self,
        store: Store,
        evaluator: Evaluator,
        rulebook: Rulebook,
        *,
        max_code_bytes: int = 1_000_000,
        trials: int = 5,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store = store
        self.evaluator = evaluator
        self.rulebook = rulebook
        self.max_code_bytes = max_code_bytes
        self.trials = trials
        self._clock = clock or (lambda: datetime.now(timezone.utc))

    def _now(self) -> datetime:
        return self._clock()

    # ------------------------------------------------------------------------------- start

    async def start(
        self,
        task_source: str,
        *,
        task_name: str = "task.py",
        seed_candidate: str | None = None,
        target: str = "sm_90a",
        policy: str = "adaexplore",
        params: dict[str, Any] | None = None,
        budget: int = 50,
        seed: int = 0,
        client: str = "local",
        progress: ProgressCallback | None = None,
    ) -> StartResult:
        """A new tree for `task_source` and its first step.

        With `seed_candidate`, or without one when an earlier tree on the same target has a correct
        kernel for the same task (same source, or same operator and shapes) and the policy's
        `warm_start` is on, that kernel is evaluated and becomes the root's first large-step child.

        Raises:
            UsageError: unknown target or policy, bad parameters, a budget out of range.
            TaskError: the task is not a KernelBench module.
        """
        if target not in KNOWN_TARGETS:
            raise UsageError(f"unknown target {target!r}; use one of: {', '.join(KNOWN_TARGETS)}")
        if not 1 <= budget <= MAX_BUDGET:
            raise UsageError(f"budget must be between 1 and {MAX_BUDGET} candidates, got {budget}")
        self._check_code(task_source, "the task")
        key = task_key(task_source, task_name)
        chosen = make_policy(policy, params)
        params_dict = chosen.params.model_dump()
        digest = await self._put_code(task_source)

        warm: WarmStart | None = None
        if seed_candidate is None and chosen.params.warm_start:
            warm, seed_candidate = await self._find_warm_start(digest, key, target)
        if seed_candidate is not None:
            self._check_code(seed_candidate, "the seed candidate")

        seed_result = None
        if seed_candidate is not None:
            seed_result = await self._evaluate(task_source, task_name, seed_candidate, target, progress)

        now = self._now()
        async with self.store.transaction() as conn:
            tree_id = await insert_tree(
                conn,
                task_hash=digest,
                task_key=key,
                task_name=task_name,
                target=target,
                policy=policy,
                params=params_dict,
                budget=budget,
                seed=seed,
                warm_start=warm,
                client=client,
                now=_iso(now),
            )
            root = await insert_node(
                conn,
                tree_id=tree_id,
                parent_id=None,
                kind="root",
                client=client,
                now=_iso(now),
                status="evaluated",
            )
            seed_id = None
            if seed_candidate is not None and seed_result is not None:
                why = (
                    f"warm start: the best kernel of tree {warm.tree_id}"
                    if warm is not None
                    else "the seed candidate given at start"
                )
                seed_id = await insert_node(
                    conn,
                    tree_id=tree_id,
                    parent_id=root,
                    kind="large",
                    client=client,
                    now=_iso(now),
                    seed=True,
                    reason=why,
                )
                await self._record(conn, seed_id, seed_candidate, seed_result, params_dict, client, now)
            tree = await load_tree(conn, tree_id)
            step_node, note = await self._issue(conn, tree, client, now)

        seed_info = None
        if seed_id is not None and seed_result is not None:
            await self._learn(tree, seed_id, seed_candidate or "", seed_result, task_source, client)
            seed_info = await self._node(tree_id, seed_id, with_code=False, with_verdict=True)
        step = await self._next_step(tree_id, step_node) if step_node is not None else None
        tree = await self._tree(tree_id)
        parts = [
            f"Started tree {tree_id} for {task_name} on {target} with policy {policy} and a budget of {budget}."
        ]
        if warm is not None:
            parts.append(
                f"Warm start: seeded with node {warm.node_id}, the best kernel of tree {warm.tree_id} "
                f"(matched by {warm.match.replace('_', ' ')})."
            )
        if seed_info is not None:
            parts.append(f"Seed (node {seed_info.id}): {self._verdict_words(seed_info)}")
        if not self.evaluator.has_gpu:
            parts.append(NO_GPU_NOTE + ".")
        parts.append(f"Next: {step.kind} step, submit for node {step.node_id}." if step else (note or ""))
        return StartResult(
            tree=tree.info(), seed_node=seed_info, warm_start=warm, next_step=step, message=" ".join(parts)
        )

    async def _find_warm_start(
        self, digest: str, key: str, target: str
    ) -> tuple[WarmStart | None, str | None]:
        rows = list(
            await self.store.conn.execute_fetchall(
                "SELECT t.id AS tree_id, n.id AS node_id, n.speedup, t.task_hash = ? AS same_hash, c.source"
                " FROM trees t JOIN nodes n ON n.tree_id = t.id JOIN code c ON c.hash = n.code_hash"
                " WHERE t.target = ? AND (t.task_hash = ? OR t.task_key = ?)"
                " AND n.status = 'evaluated' AND n.outcome = 'correct'"
                " ORDER BY n.reward DESC, same_hash DESC, n.id LIMIT 1",
                (digest, target, digest, key),
            )
        )
        if not rows:
            return None, None
        r = rows[0]
        warm = WarmStart(
            tree_id=r["tree_id"],
            node_id=r["node_id"],
            match="task_hash" if r["same_hash"] else "operator_and_shapes",
            speedup=r["speedup"],
        )
        return warm, r["source"]

    # ------------------------------------------------------------------------------ submit

    async def submit(
        self,
        tree_id: int,
        node_id: int,
        candidate_code: str,
        *,
        client: str = "local",
        progress: ProgressCallback | None = None,
    ) -> SubmitResult:
        """Evaluate the candidate written for `node_id`, record it, and hand `client` its next step.

        Raises:
            NotFoundError: no such tree or node.
            UsageError: the node belongs to another tree, is the root, or already has a verdict;
                the code is empty or too large.
            BudgetError: the tree's budget is spent (or fully handed out, for a lapsed lease).
        """
        self._check_code(candidate_code, "the candidate")
        now = self._now()
        async with self.store.transaction() as conn:
            tree = await load_tree(conn, tree_id)
            row = await self._pending_row(conn, tree, node_id, now)
            await self._claim(conn, tree, row, client, now)
            task_source = await self.store.get_code(tree.task_hash)
        assert task_source is not None

        result = await self._evaluate(task_source, tree.task_name, candidate_code, tree.target, progress)

        now = self._now()
        async with self.store.transaction() as conn:
            tree = await load_tree(conn, tree_id)
            best_before = await self._best_id(conn, tree_id)
            row = await self._pending_row(conn, tree, node_id, now, evaluated=result)
            used, _ = await self._usage(conn, tree_id, _iso(now))
            if used >= tree.budget:
                raise BudgetError(
                    self._budget_spent(tree, used) + f" (the candidate's verdict was not recorded: "
                    f"{outcome_of(result)[0]})"
                )
            await self._record(conn, node_id, candidate_code, result, tree.params, client, now)
            closed = await self._after_step(conn, tree, used, client, now)

        await self._learn(closed.tree, node_id, candidate_code, result, task_source, client)
        return await self._step_result(closed, node_id, best_before)

    async def abandon(
        self, tree_id: int, node_id: int, reason: str, *, client: str = "local"
    ) -> SubmitResult:
        """Close the step for `node_id` without a candidate: it produced nothing to evaluate.

        The node becomes a failed step (outcome not_compiled, reward 0, `error` the reason, no code),
        its reward is back-propagated and the step counts against the budget, like a submit; nothing
        is evaluated and nothing goes to the rulebook (there is no code to learn from). The policy
        then treats it as a failed step: the next step from its parent is of the other kind.

        Raises:
            NotFoundError: no such tree or node.
            UsageError: the node belongs to another tree, is the root, or already has a verdict;
                the reason is empty.
            BudgetError: the tree's budget is spent (or fully handed out, for a lapsed lease).
        """
        if not isinstance(reason, str) or not reason.strip():
            raise UsageError("the reason is empty; say in a sentence why the step produced no candidate")
        why = trim(reason.strip()) or ""
        now = self._now()
        async with self.store.transaction() as conn:
            tree = await load_tree(conn, tree_id)
            row = await self._pending_row(conn, tree, node_id, now)
            await self._claim(conn, tree, row, client, now)
            used, _ = await self._usage(conn, tree_id, _iso(now))
            await record_abandoned(
                conn,
                node_id,
                reason=why,
                reward=reward_for("not_compiled", None),
                client=client,
                now=_iso(now),
            )
            closed = await self._after_step(conn, tree, used, client, now)
        return await self._step_result(closed, node_id, best_before=None)

    async def _after_step(
        self, conn: aiosqlite.Connection, tree: TreeRow, used: int, client: str, now: datetime
    ) -> _Closed:
        """After a node is closed (submitted or abandoned): mark the tree done when that step
        spent its budget, then hand `client` its next step."""
        if used + 1 >= tree.budget:
            await conn.execute(
                "UPDATE trees SET status = 'done', updated_at = ? WHERE id = ?", (_iso(now), tree.id)
            )
        best_id = await self._best_id(conn, tree.id)
        tree = await load_tree(conn, tree.id)
        step_node, note = await self._issue(conn, tree, client, now)
        used_after, _ = await self._usage(conn, tree.id, _iso(now))
        return _Closed(tree, best_id, step_node, note, used_after)

    async def _step_result(self, closed: _Closed, node_id: int, best_before: int | None) -> SubmitResult:
        tree = closed.tree
        node = await self._node(tree.id, node_id, with_code=False, with_verdict=True)
        best_id = closed.best_id
        best = await self._node(tree.id, best_id, with_code=False) if best_id is not None else None
        new_best = best_id == node_id and best_before != node_id
        step = await self._next_step(tree.id, closed.step_node) if closed.step_node is not None else None
        message = f"Node {node_id}: {self._verdict_words(node)}"
        if new_best:
            message += " This is the tree's best kernel so far."
        elif best is not None:
            message += f" The tree's best is node {best.id} ({self._short(best)})."
        return SubmitResult(
            node=node,
            new_best=new_best,
            best=best,
            budget_left=max(tree.budget - closed.used_after, 0),
            message=message,
            next_step=step,
            next_step_note=None if step is not None else closed.note,
        )

    async def _pending_row(
        self,
        conn: aiosqlite.Connection,
        tree: TreeRow,
        node_id: int,
        now: datetime,
        evaluated: EvalResult | None = None,
    ) -> aiosqlite.Row:
        rows = list(
            await conn.execute_fetchall(
                "SELECT n.id, n.tree_id, n.kind, n.status, n.outcome, l.expires_at AS lease_expires_at"
                " FROM nodes n LEFT JOIN leases l ON l.node_id = n.id WHERE n.id = ?",
                (node_id,),
            )
        )
        if not rows:
            raise NotFoundError(
                f"no node {node_id}; submit for the node_id of a step of tree {tree.id} "
                f"(`kernelcraft tree status {tree.id}` shows your next step)"
            )
        row = rows[0]
        if row["tree_id"] != tree.id:
            raise UsageError(
                f"node {node_id} belongs to tree {row['tree_id']}, not tree {tree.id}; "
                f"submit it with tree_id={row['tree_id']}"
            )
        if row["kind"] == "root":
            raise UsageError(
                f"node {node_id} is the root of tree {tree.id}; submit for the node_id of a step"
            )
        if row["status"] == "evaluated":
            lost = (
                f" (this submission's verdict, {outcome_of(evaluated)[0]}, was not recorded)"
                if evaluated
                else ""
            )
            raise UsageError(
                f"node {node_id} of tree {tree.id} already has a verdict ({row['outcome']}){lost}; each step "
                f"takes one candidate: ask for a new step with `kernelcraft tree status {tree.id}`"
            )
        return row

    async def _claim(
        self, conn: aiosqlite.Connection, tree: TreeRow, row: aiosqlite.Row, client: str, now: datetime
    ) -> None:
        """Renew the node's lease for the evaluation; a lapsed lease is reopened if budget allows."""
        used, open_ = await self._usage(conn, tree.id, _iso(now))
        if used >= tree.budget:
            raise BudgetError(self._budget_spent(tree, used))
        hold = _iso(now + timedelta(seconds=max(CLAIM_SECONDS, float(tree.params.get("lease_seconds", 0)))))
        expires = row["lease_expires_at"]
        if expires is not None and expires > _iso(now):
            await conn.execute(
                "UPDATE leases SET expires_at = max(expires_at, ?) WHERE node_id = ?", (hold, row["id"])
            )
            return
        if used + open_ >= tree.budget:
            raise BudgetError(
                f"the lease on node {row['id']} lapsed and tree {tree.id}'s remaining budget is held by "
                f"{open_} other open step(s) ({used} of {tree.budget} evaluated); wait for them and retry, "
                f"or start a new tree"
            )
        await conn.execute(
            "INSERT INTO leases (node_id, tree_id, client, kind, issued_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(node_id) DO UPDATE SET expires_at = excluded.expires_at, client = excluded.client",
            (row["id"], tree.id, client, row["kind"], _iso(now), hold),
        )

    # ------------------------------------------------------------------------- status, show

    async def next_step(self, tree_id: int, *, client: str = "local") -> tuple[NextStep | None, str | None]:
        """A new step of the tree for `client` (one more lease), or None with the reason.

        For parallel workers: each call hands out a different step. `status` instead re-offers the
        client's open step.
        """
        now = self._now()
        async with self.store.transaction() as conn:
            tree = await load_tree(conn, tree_id)
            step_node, note = await self._issue(conn, tree, client, now)
        return (await self._next_step(tree_id, step_node) if step_node is not None else None), note

    async def status(self, tree_id: int, *, client: str = "local") -> TreeStatus:
        """Best node (with code and verdict), counts by outcome, budget, and `client`'s next step:
        the step it already holds if any (so a restarted client picks up where it stopped), else
        a new one.

        Raises:
            NotFoundError: no such tree.
        """
        now = self._now()
        async with self.store.transaction() as conn:
            tree = await load_tree(conn, tree_id)
            held = list(
                await conn.execute_fetchall(
                    "SELECT l.node_id FROM leases l JOIN nodes n ON n.id = l.node_id WHERE l.tree_id = ?"
                    " AND l.client = ? AND n.status = 'pending' AND l.expires_at > ? ORDER BY l.node_id LIMIT 1",
                    (tree_id, client, _iso(now)),
                )
            )
            note = None
            if held:
                step_node: int | None = held[0][0]
            else:
                step_node, note = await self._issue(conn, tree, client, now)
            tree = await load_tree(conn, tree_id)
            best_id = await self._best_id(conn, tree_id)
            rows = await node_rows(conn, tree_id)
            used, _ = await self._usage(conn, tree_id, _iso(now))
        counts = OutcomeCounts()
        for r in rows:
            if r["kind"] == "root" or r["seed"]:
                continue
            status = row_status(r, _iso(now))
            key = r["outcome"] if status == "evaluated" else status
            setattr(counts, key, getattr(counts, key) + 1)
        best = (
            await self._node(tree_id, best_id, with_code=True, with_verdict=True)
            if best_id is not None
            else None
        )
        step = await self._next_step(tree_id, step_node) if step_node is not None else None
        return TreeStatus(
            tree=tree.info(),
            best=best,
            counts=counts,
            budget_used=used,
            budget_left=max(tree.budget - used, 0),
            next_step=step,
            next_step_note=None if step is not None else note,
        )

    async def show(self, tree_id: int) -> TreeView:
        """Every node of the tree (no code), in id order.

        Raises:
            NotFoundError: no such tree.
        """
        return await tree_view(self.store.conn, tree_id, _iso(self._now()))

    # --------------------------------------------------------------------------- internals

    def _check_code(self, source: str, what: str) -> None:
        if not isinstance(source, str) or not source.strip():
            raise UsageError(f"{what} is empty; pass the full Python module as text")
        size = len(source.encode("utf-8"))
        if size > self.max_code_bytes:
            raise UsageError(f"{what} is {size} bytes, over the limit of {self.max_code_bytes}; shorten it")

    async def _put_code(self, source: str) -> str:
        async with self.store.transaction():
            return await self.store.put_code(source)

    async def _evaluate(
        self, task_source: str, task_name: str, candidate: str, target: str, progress: ProgressCallback | None
    ) -> EvalResult:
        gpu = self.evaluator.has_gpu
        job = EvalJob(
            task_source=task_source,
            candidate_source=candidate,
            task_name=task_name,
            stages=["compile", "verify", "profile"] if gpu else ["verify"],
            targets=[target],
            trials=self.trials,
            roofline_target=target,
        )
        return await self.evaluator.submit(job, progress)

    async def _record(
        self,
        conn: aiosqlite.Connection,
        node_id: int,
        code: str,
        result: EvalResult,
        params: dict[str, Any],
        client: str,
        now: datetime,
    ) -> None:
        outcome, speedup = outcome_of(result, params.get("baseline", "eager"))
        digest = await self.store.put_code(code)
        await record_evaluation(
            conn,
            node_id,
            code_hash=digest,
            verdict=result,
            outcome=outcome,
            speedup=speedup,
            reward=reward_for(outcome, speedup),
            client=client,
            now=_iso(now),
        )

    async def _learn(
        self, tree: TreeRow, node_id: int, code: str, result: EvalResult, task_source: str, client: str
    ) -> None:
        """A failed candidate goes to the rulebook with its class and error text; the node keeps
        the failure's id so a rule proposed later attaches to it (`record_failure(failure_id=…)`)."""
        outcome, _ = outcome_of(result)
        if outcome == "correct":
            return
        fc = result.failure_class
        error = failure_text(result) or (
            f"verdict {fc.value}" if fc else "the candidate failed without an error text"
        )
        try:
            recorded = await self.rulebook.record_failure(
                code,
                error,
                reference_code=task_source,
                arch=tree.target,
                failure_class=FailureClass(fc) if fc is not None else None,
                task_hash=tree.task_hash,
                client=client,
            )
            async with self.store.transaction() as conn:
                await conn.execute(
                    "UPDATE nodes SET failure_id = ? WHERE id = ?", (recorded.failure_id, node_id)
                )
        except KernelcraftError:
            # The verdict is recorded already; a rulebook fault must not lose it.
            logger.exception(
                "could not record the failure of a candidate of tree %s in the rulebook", tree.id
            )

    async def _usage(self, conn: aiosqlite.Connection, tree_id: int, now: str) -> tuple[int, int]:
        """(evaluated candidates, the seed not counted; steps handed out and not yet submitted or lapsed)."""
        rows = list(
            await conn.execute_fetchall(
                "SELECT"
                " (SELECT count(*) FROM nodes WHERE tree_id = ? AND status = 'evaluated' AND kind != 'root' AND seed = 0),"
                " (SELECT count(*) FROM nodes n JOIN leases l ON l.node_id = n.id"
                "   WHERE n.tree_id = ? AND n.status = 'pending' AND l.expires_at > ?)",
                (tree_id, tree_id, now),
            )
        )
        return rows[0][0], rows[0][1]

    async def _best_id(self, conn: aiosqlite.Connection, tree_id: int) -> int | None:
        return await best_node_id(conn, tree_id)

    def _budget_spent(self, tree: TreeRow, used: int) -> str:
        return (
            f"tree {tree.id}'s budget is spent: {used} of {tree.budget} candidates evaluated; "
            f"`kernelcraft tree status {tree.id}` shows the best kernel, and a new tree for this task "
            f"starts from it (warm start)"
        )

    async def _issue(
        self, conn: aiosqlite.Connection, tree: TreeRow, client: str, now: datetime
    ) -> tuple[int | None, str | None]:
        """Inside a transaction: pick the next step, insert its pending node and lease."""
        now_s = _iso(now)
        used, open_ = await self._usage(conn, tree.id, now_s)
        if used >= tree.budget:
            return None, self._budget_spent(tree, used)
        if used + open_ >= tree.budget:
            return None, (
                f"tree {tree.id}'s remaining budget is held by {open_} open step(s) of other clients "
                f"({used} of {tree.budget} evaluated); ask again after they are submitted or their leases lapse"
            )
        policy = make_policy(tree.policy, tree.params)
        params: CommonParams = policy.params
        snap = snapshot_from_rows(await node_rows(conn, tree.id), now_s)
        rng = step_rng(tree.seed, tree.steps_issued)
        decision = policy.decide(snap, rng)
        if decision.kind == "small":
            context = small_chain(snap, decision.parent_id, params.memory)
        else:
            context = large_pool(snap, decision.parent_id, params.pool_size, rng)
        node_id = await insert_node(
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
        expires = _iso(now + timedelta(seconds=params.lease_seconds))
        await conn.execute(
            "INSERT INTO leases (node_id, tree_id, client, kind, issued_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
            (node_id, tree.id, client, decision.kind, now_s, expires),
        )
        await conn.execute(
            "UPDATE trees SET steps_issued = steps_issued + 1, updated_at = ? WHERE id = ?", (now_s, tree.id)
        )
        return node_id, None

    async def _tree(self, tree_id: int) -> TreeRow:
        return await load_tree(self.store.conn, tree_id)

    async def _node(
        self, tree_id: int, node_id: int, *, with_code: bool, with_verdict: bool = False
    ) -> NodeInfo:
        rows = await node_rows(self.store.conn, tree_id, node_ids=[node_id], with_code=with_code)
        return node_info(rows[0], _iso(self._now()), with_code=with_code, with_verdict=with_verdict)

    async def _next_step(self, tree_id: int, node_id: int) -> NextStep:
        """The full step for a pending node: context kernels, rules and instructions."""
        conn = self.store.conn
        tree = await load_tree(conn, tree_id)
        now = _iso(self._now())
        row = (await node_rows(conn, tree_id, node_ids=[node_id]))[0]
        context_ids: list[int] = json.loads(row["context_ids"] or "[]")
        ctx_rows = {r["id"]: r for r in await node_rows(conn, tree_id, node_ids=context_ids, with_code=True)}
        context = [context_kernel(node_info(ctx_rows[i], now, with_code=True)) for i in context_ids]
        task_source = await self.store.get_code(tree.task_hash) or ""
        parent_code = None
        if row["kind"] == "small":
            parent_rows = await node_rows(conn, tree_id, node_ids=[row["parent_id"]], with_code=True)
            parent_code = parent_rows[0]["source"]
        rules = await self._rules(
            task_source, parent_code or (context[-1].code if context else ""), tree.target
        )
        gpu = self.evaluator.has_gpu
        pool = context if row["kind"] == "large" else []
        chain = context if row["kind"] == "small" else []
        measured = [k.speedup for k in pool if k.speedup is not None]
        to_beat = max(measured) if measured else None
        if row["kind"] == "small":
            text = instructions.small_step(
                task_name=tree.task_name,
                target=tree.target,
                tree_id=tree_id,
                node_id=node_id,
                parent_id=row["parent_id"],
                chain=chain,
                rules=rules,
                speedup_measured=gpu,
            )
        else:
            text = instructions.large_step(
                task_name=tree.task_name,
                target=tree.target,
                tree_id=tree_id,
                node_id=node_id,
                pool=pool,
                speedup_to_beat=to_beat,
                rules=rules,
                speedup_measured=gpu,
            )
        if not gpu:
            text += f"\n\nNote: {NO_GPU_NOTE}."
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
            speedup_measured=gpu,
            instructions=text,
        )

    async def _rules(self, task_source: str, code: str, target: str) -> list[RuleOut]:
        rules = await self.rulebook.query_rules(f"{task_source}\n{code}", arch=target, dsl="triton", limit=10)
        return [r for r in rules if r.status == "active"]

    @staticmethod
    def _short(node: NodeInfo) -> str:
        if node.abandoned:
            return "abandoned"
        if node.outcome == "correct":
            return (
                f"correct, {node.speedup:.2f}×" if node.speedup is not None else "correct, speed not measured"
            )
        return node.outcome or node.status

    @staticmethod
    def _verdict_words(node: NodeInfo) -> str:
        reward = f"reward {node.reward:.3f}" if node.reward is not None else "no reward"
        if node.abandoned:
            first = (node.error or "").strip().splitlines()
            return f"abandoned without a candidate{': ' + first[0] if first else ''}; {reward}."
        if node.outcome == "correct":
            if node.speedup is not None:
                timing = f" (candidate {node.candidate_us:.1f} µs)" if node.candidate_us is not None else ""
                return f"correct, {node.speedup:.2f}× vs PyTorch{timing}; {reward}."
            return f"correct; speedup unknown (no GPU timing); {reward}."
        cls = node.failure_class.value if node.failure_class else "failed"
        first = (node.error or "").strip().splitlines()
        detail = f": {first[0]}" if first else ""
        label = "did not compile" if node.outcome == "not_compiled" else "compiled but wrong"
        return f"{label} ({cls}){detail}; {reward}."
