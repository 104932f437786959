"""What a candidate's verdict does to the tree: the evaluation job that reaches it, the node that
records it, and the rulebook entry a failure leaves.

`record_verdict` takes the connection of the caller's transaction; `learn_from_failure` opens its
own, after the verdict is committed, so a rulebook fault never loses a verdict.
"""

from __future__ import annotations

import logging
from typing import Any

import aiosqlite

from kernelcraft.base.errors import KernelcraftError
from kernelcraft.base.failures import FailureClass
from kernelcraft.base.knobs import TIMEOUT_S
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.schema.evaluation import EvalJob, EvalResult
from kernelcraft.search import repository
from kernelcraft.search.policy import failure_text, outcome_of, reward_for
from kernelcraft.search.tree import TreeRow
from kernelcraft.store import Store

logger = logging.getLogger(__name__)


def eval_job(
    task_source: str,
    task_name: str,
    candidate: str,
    target: str,
    *,
    trials: int,
    has_gpu: bool,
    correctness: str = "kernelcraft",
    timeout_s: float = TIMEOUT_S.default,
) -> EvalJob:
    """Verify on the CPU (Triton's interpreter); compile, verify and profile for `target` on a GPU;
    by the tree's correctness rule (its preset's: AdaExplore's for `adaexplore`), within the tree's
    deadline per candidate (`timeout_s`)."""
    return EvalJob(
        correctness="adaexplore" if correctness == "adaexplore" else "kernelcraft",
        task_source=task_source,
        candidate_source=candidate,
        task_name=task_name,
        stages=["compile", "verify", "profile"] if has_gpu else ["verify"],
        targets=[target],
        trials=trials,
        roofline_target=target,
        timeout_s=timeout_s,
    )


async def record_verdict(
    conn: aiosqlite.Connection,
    store: Store,
    node_id: int,
    code: str,
    result: EvalResult,
    params: dict[str, Any],
    *,
    client: str,
    now: str,
) -> None:
    """Inside a transaction: the candidate's code, its outcome, speedup (against the tree's
    `baseline`) and reward on its node, the reward back-propagated."""
    outcome, speedup = outcome_of(result, params.get("baseline", "eager"))
    digest = await store.put_code(code)
    await repository.record_evaluation(
        conn,
        node_id,
        code_hash=digest,
        verdict=result,
        outcome=outcome,
        speedup=speedup,
        reward=reward_for(outcome, speedup),
        client=client,
        now=now,
    )


async def learn_from_failure(
    store: Store,
    rulebook: Rulebook,
    tree: TreeRow,
    node_id: int,
    code: str,
    result: EvalResult,
    *,
    task_source: str,
    client: str,
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
        recorded = await rulebook.record_failure(
            code,
            error,
            reference_code=task_source,
            arch=tree.target,
            failure_class=FailureClass(fc) if fc is not None else None,
            task_hash=tree.task_hash,
            client=client,
            evaluated=True,
        )
        async with store.transaction() as conn:
            await repository.set_failure_id(conn, node_id, recorded.failure_id)
    except KernelcraftError:
        # The verdict is recorded already; a rulebook fault must not lose it.
        logger.exception("could not record the failure of a candidate of tree %s in the rulebook", tree.id)
