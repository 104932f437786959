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

Where the parts live: the SQL in `repository.py`, rows to models in `tree.py`, a step's issue,
claim and context in `steps.py`, recording a verdict and learning from it in `verdicts.py`, the
sentences in `messages.py`, the policies in `policy.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import aiosqlite

from kernelcraft.base.errors import BudgetError, InfrastructureError, NotFoundError, UsageError
from kernelcraft.base.knobs import EVAL_GRACE_S, TIMEOUT_S, TRIALS, eval_wait_s
from kernelcraft.base.targets import DEFAULT_TARGET
from kernelcraft.base.voice import CLI_VOICE, Voice
from kernelcraft.engine import Evaluator, ProgressCallback
from kernelcraft.knowledge.docs import HwDocs
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.schema.evaluation import EvalResult
from kernelcraft.schema.tree import (
    NextStep,
    NodeInfo,
    StartResult,
    SubmitResult,
    TreeStatus,
    TreeView,
)
from kernelcraft.search import repository
from kernelcraft.search.messages import budget_spent, start_message, step_message
from kernelcraft.search.policy import outcome_of, reward_for
from kernelcraft.search.records import Closed, Created, StartPlan
from kernelcraft.search.starting import check_code, create_tree, plan_start
from kernelcraft.search.steps import claim_step, describe_step, issue_step, pending_step
from kernelcraft.search.task import task_label
from kernelcraft.search.tree import TreeRow, iso, node_info, outcome_counts, trim
from kernelcraft.search.verdicts import eval_job, learn_from_failure, record_verdict
from kernelcraft.store import Store


class SearchService:
    """Search trees over one open Store. Every method is safe to call from concurrent tasks."""

    def __init__(
        self,
        store: Store,
        evaluator: Evaluator,
        rulebook: Rulebook,
        *,
        docs: HwDocs | None = None,
        max_code_bytes: int = 1_000_000,
        trials: int = int(TRIALS.default),
        clock: Callable[[], datetime] | None = None,
        eval_grace_s: float = EVAL_GRACE_S,
        voice: Voice = CLI_VOICE,
    ) -> None:
        self.store = store
        self.evaluator = evaluator
        self.rulebook = rulebook
        # The manuals' index lives in the same database (`HwDocs.index()` fills it at start-up).
        self.docs = docs if docs is not None else HwDocs(store)
        self.max_code_bytes = max_code_bytes
        self.trials = trials
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self.eval_grace_s = eval_grace_s
        self._evaluating = 0  # evaluations of this service in flight (each may wait for the others)
        # Who reads the service's sentences: the server's clients (MCP) or the command line.
        self.voice = voice

    def _now(self) -> datetime:
        return self._clock()

    # ------------------------------------------------------------------------------- start

    async def start(
        self,
        task_source: str,
        *,
        task_name: str | None = None,
        seed_candidate: str | None = None,
        target: str = DEFAULT_TARGET,
        policy: str = "adaexplore",
        preset: str | None = None,
        params: dict[str, Any] | None = None,
        budget: int = 50,
        seed: int = 0,
        client: str = "local",
        progress: ProgressCallback | None = None,
    ) -> StartResult:
        """A new tree for `task_source` and its first step.

        The tree's configuration is the `preset`'s (`kernelcraft.schema.presets`; default kernelcraft)
        for the task's KernelBench `level` (a key of `params`), with `params` on top; the tree
        records all of it, preset name included.

        `task_name` names the tree; without one it is named after the task's operator (`task_label`).
        With `seed_candidate`, or without one when an earlier tree on the same target has a correct
        kernel for the same task (same source, or same operator and shapes) and the policy's
        `warm_start` is on, that kernel is evaluated and becomes the root's first large-step child.

        Raises:
            UsageError: unknown target, policy or preset, bad parameters, a budget out of range.
            TaskError: the task is not a KernelBench module.
        """
        task_name = task_name or task_label(task_source)
        plan = await plan_start(
            self.store,
            task_source,
            task_name=task_name,
            seed_candidate=seed_candidate,
            target=target,
            policy=policy,
            preset=preset,
            params=params,
            budget=budget,
            seed=seed,
            client=client,
            max_code_bytes=self.max_code_bytes,
        )
        seed_result = None
        if plan.seed_candidate is not None:
            seed_result = await self._evaluate(
                task_source, task_name, plan.seed_candidate, target, progress, plan.params
            )
        created = await create_tree(self.store, plan, seed_result, self._now(), self.voice)
        if created.seed_id is not None and seed_result is not None:
            await self._learn(
                created.tree, created.seed_id, plan.seed_candidate or "", seed_result, task_source, client
            )
        return await self._describe_start(plan, created)

    async def _describe_start(self, plan: StartPlan, created: Created) -> StartResult:
        tree_id = created.tree.id
        seed_info = None
        if created.seed_id is not None:
            seed_info = await self._node(tree_id, created.seed_id, with_code=False, with_verdict=True)
        step = await self._next_step(tree_id, created.step_node) if created.step_node is not None else None
        tree = await repository.load_tree(self.store.conn, tree_id, self.voice)
        message = start_message(
            tree, plan.warm, seed_info, step, created.note, has_gpu=self.evaluator.has_gpu
        )
        return StartResult(
            tree=tree.info(), seed_node=seed_info, warm_start=plan.warm, next_step=step, message=message
        )

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
            tree = await self._owned(conn, tree_id, client)
            row = await pending_step(conn, tree, node_id, self.voice)
            await claim_step(conn, tree, row, client, now, self.voice)
            task_source = await self.store.get_code(tree.task_hash)
        assert task_source is not None

        result = await self._evaluate(
            task_source, tree.task_name, candidate_code, tree.target, progress, tree.params
        )

        now = self._now()
        async with self.store.transaction() as conn:
            tree = await repository.load_tree(conn, tree_id, self.voice)
            best_before = await repository.best_node_id(conn, tree_id)
            row = await pending_step(conn, tree, node_id, self.voice, evaluated=result)
            used, _ = await repository.budget_usage(conn, tree_id, iso(now))
            if used >= tree.budget:
                raise BudgetError(
                    budget_spent(tree, used, self.voice) + f" (the candidate's verdict was not recorded: "
                    f"{outcome_of(result)[0]})"
                )
            await record_verdict(
                conn, self.store, node_id, candidate_code, result, tree.params, client=client, now=iso(now)
            )
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
            tree = await self._owned(conn, tree_id, client)
            row = await pending_step(conn, tree, node_id, self.voice)
            await claim_step(conn, tree, row, client, now, self.voice)
            used, _ = await repository.budget_usage(conn, tree_id, iso(now))
            await repository.record_abandoned(
                conn,
                node_id,
                reason=why,
                reward=reward_for("not_compiled", None),
                client=client,
                now=iso(now),
            )
            closed = await self._after_step(conn, tree, used, client, now)
        return await self._step_result(closed, node_id, best_before=None)

    async def _after_step(
        self, conn: aiosqlite.Connection, tree: TreeRow, used: int, client: str, now: datetime
    ) -> Closed:
        """After a node is closed (submitted or abandoned): mark the tree done when that step
        spent its budget, then hand `client` its next step."""
        if used + 1 >= tree.budget:
            await repository.mark_done(conn, tree.id, iso(now))
        best_id = await repository.best_node_id(conn, tree.id)
        tree = await repository.load_tree(conn, tree.id, self.voice)
        step_node, note = await issue_step(conn, tree, client, now, self.voice)
        used_after, _ = await repository.budget_usage(conn, tree.id, iso(now))
        return Closed(tree, best_id, step_node, note, used_after)

    async def _step_result(self, closed: Closed, node_id: int, best_before: int | None) -> SubmitResult:
        tree = closed.tree
        node = await self._node(tree.id, node_id, with_code=False, with_verdict=True)
        best_id = closed.best_id
        best = await self._node(tree.id, best_id, with_code=False) if best_id is not None else None
        new_best = best_id == node_id and best_before != node_id
        step = await self._next_step(tree.id, closed.step_node) if closed.step_node is not None else None
        return SubmitResult(
            node=node,
            new_best=new_best,
            best_id=best_id,
            best=best,
            budget_left=max(tree.budget - closed.used_after, 0),
            message=step_message(node, new_best=new_best, best=best, voice=self.voice),
            next_step=step,
            next_step_note=None if step is not None else closed.note,
        )

    # ------------------------------------------------------------------------- status, show

    async def next_step(self, tree_id: int, *, client: str = "local") -> tuple[NextStep | None, str | None]:
        """A new step of the tree for `client` (one more lease), or None with the reason.

        For parallel workers: each call hands out a different step. `status` instead re-offers the
        client's open step.
        """
        now = self._now()
        async with self.store.transaction() as conn:
            tree = await self._owned(conn, tree_id, client)
            step_node, note = await issue_step(conn, tree, client, now, self.voice)
        return (await self._next_step(tree_id, step_node) if step_node is not None else None), note

    async def status(self, tree_id: int, *, client: str = "local", new_step: bool = False) -> TreeStatus:
        """Best node (with code and verdict), counts by outcome, budget, and `client`'s next step:
        the step it already holds if any (so a restarted client picks up where it stopped), else
        a new one. `new_step`: always a new one (a client writing several steps at once).

        Raises:
            NotFoundError: no such tree.
        """
        now = self._now()
        async with self.store.transaction() as conn:
            tree = await self._owned(conn, tree_id, client)
            note = None
            step_node = None if new_step else await repository.held_step(conn, tree_id, client, iso(now))
            if step_node is None:
                step_node, note = await issue_step(conn, tree, client, now, self.voice)
            tree = await repository.load_tree(conn, tree_id, self.voice)
            best_id = await repository.best_node_id(conn, tree_id)
            rows = await repository.node_rows(conn, tree_id)
            used, _ = await repository.budget_usage(conn, tree_id, iso(now))
        best = (
            await self._node(tree_id, best_id, with_code=True, with_verdict=True)
            if best_id is not None
            else None
        )
        step = await self._next_step(tree_id, step_node) if step_node is not None else None
        return TreeStatus(
            tree=tree.info(),
            best=best,
            counts=outcome_counts(rows, iso(now)),
            budget_used=used,
            budget_left=max(tree.budget - used, 0),
            next_step=step,
            next_step_note=None if step is not None else note,
        )

    async def show(self, tree_id: int, *, with_verdicts: bool = False, client: str | None = None) -> TreeView:
        """Every node of the tree (no code; its verdict if asked), in id order. `client`: the
        asking client, who must own the tree (None: the operator, on the command line).

        Raises:
            NotFoundError: no such tree (of this client's, or shared with it).
        """
        if client is not None:
            await self._readable(self.store.conn, tree_id, client)
        return await repository.tree_view(
            self.store.conn, tree_id, iso(self._now()), with_verdicts=with_verdicts
        )

    # --------------------------------------------------------------------------- internals

    async def share(self, tree_id: int, with_client: str, *, client: str = "local") -> list[str]:
        """Let `with_client` ('*': every client) read the tree `client` owns: its nodes, verdicts
        and best kernel (`show`, the trees:// resources). Reading only: stepping, submitting and
        abandoning stay the owner's. Returns every client the tree is now shared with.

        Raises:
            NotFoundError: no such tree of this client's.
            UsageError: an empty or over-long client name.
        """
        name = with_client.strip() if isinstance(with_client, str) else ""
        if not name or len(name) > 200 or any(c.isspace() for c in name):
            raise UsageError("share_with must be a client's name (one word, at most 200 characters) or '*'")
        async with self.store.transaction() as conn:
            await self._owned(conn, tree_id, client)
            if name != client:
                await conn.execute(
                    "INSERT OR IGNORE INTO tree_shares (tree_id, client, shared_at) VALUES (?, ?, ?)",
                    (tree_id, name, iso(self._now())),
                )
            cur = await conn.execute(
                "SELECT client FROM tree_shares WHERE tree_id = ? ORDER BY client", (tree_id,)
            )
            return [row[0] for row in await cur.fetchall()]

    async def _readable(self, conn: aiosqlite.Connection, tree_id: int, client: str) -> TreeRow:
        """The tree, when `client` started it or its owner shared it with `client` (or with '*')."""
        tree = await repository.load_tree(conn, tree_id, self.voice)
        if tree.created_by == client:
            return tree
        cur = await conn.execute(
            "SELECT 1 FROM tree_shares WHERE tree_id = ? AND client IN (?, '*')", (tree_id, client)
        )
        if await cur.fetchone() is None:
            raise NotFoundError(
                f"search tree {tree_id} belongs to another client, who has not shared it with you; "
                f"start your own with {self.voice.start_tree()}"
            )
        return tree

    async def _owned(self, conn: aiosqlite.Connection, tree_id: int, client: str) -> TreeRow:
        """The tree, when `client` started it. A tree is its client's: another client can neither
        step, submit into nor abandon it, and reads it only where the owner shared it (`share`;
        its kernels are that client's work). Told apart from a missing tree only by the words,
        never by what it shows."""
        tree = await repository.load_tree(conn, tree_id, self.voice)
        if tree.created_by != client:
            raise NotFoundError(
                f"search tree {tree_id} belongs to another client; start your own with "
                f"{self.voice.start_tree()}"
            )
        return tree

    def _check_code(self, source: str, what: str) -> None:
        check_code(source, what, self.max_code_bytes)

    async def _evaluate(
        self,
        task_source: str,
        task_name: str,
        candidate: str,
        target: str,
        progress: ProgressCallback | None,
        params: dict[str, Any],
    ) -> EvalResult:
        job = eval_job(
            task_source,
            task_name,
            candidate,
            target,
            trials=self.trials,
            has_gpu=self.evaluator.has_gpu,
            correctness=str(params.get("correctness", "kernelcraft")),
            timeout_s=float(params.get("timeout_s", TIMEOUT_S.default)),
        )
        # The evaluator's deadline counts from the moment the job's workers are assigned, and a
        # job may wait for other jobs' GPU turns first: bounded here, so no submit waits forever.
        bound = eval_wait_s(job.timeout_s, self._evaluating, self.eval_grace_s)
        self._evaluating += 1
        try:
            return await asyncio.wait_for(self.evaluator.submit(job, progress), bound)
        except asyncio.TimeoutError:
            raise InfrastructureError(
                f"the evaluation did not finish within {bound:g} s (its deadline {job.timeout_s:g} s, "
                f"{self._evaluating - 1} other evaluation(s) in flight, {self.eval_grace_s:g} s for workers "
                "and the GPU): the evaluator is stuck; its log says on what. The step stays open: "
                "submit it again, or rerun with the same --out to resume"
            ) from None
        finally:
            self._evaluating -= 1

    async def _learn(
        self, tree: TreeRow, node_id: int, code: str, result: EvalResult, task_source: str, client: str
    ) -> None:
        await learn_from_failure(
            self.store, self.rulebook, tree, node_id, code, result, task_source=task_source, client=client
        )

    async def _node(
        self, tree_id: int, node_id: int, *, with_code: bool, with_verdict: bool = False
    ) -> NodeInfo:
        rows = await repository.node_rows(self.store.conn, tree_id, node_ids=[node_id], with_code=with_code)
        return node_info(rows[0], iso(self._now()), with_code=with_code, with_verdict=with_verdict)

    async def _next_step(self, tree_id: int, node_id: int) -> NextStep:
        return await describe_step(
            self.store,
            self.rulebook,
            self.docs,
            tree_id,
            node_id,
            now=iso(self._now()),
            has_gpu=self.evaluator.has_gpu,
        )
