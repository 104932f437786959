"""The search tables' rows as the service reads them, and their client-facing models.

`TreeRow` is a `trees` row; the functions here turn rows of `nodes` (as
`repository.node_rows` reads them, lease columns joined) into what clients see
(`kernelcraft.schema.tree`) and into the policies' `Snapshot`. They read rows only: every SQL
statement of the search layer lives in `repository.py`, which describes the tables.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import aiosqlite

from kernelcraft.base.errortext import candidate_part
from kernelcraft.base.failures import FailureClass
from kernelcraft.schema.evaluation import EvalResult
from kernelcraft.schema.tree import (
    ContextKernel,
    NodeInfo,
    NodeStatus,
    OutcomeCounts,
    TreeInfo,
    WarmStart,
)
from kernelcraft.search.policy import SnapNode, Snapshot, failure_text

MAX_ERROR_CHARS = 2000


def iso(t: datetime) -> str:
    """A timestamp as the tables hold it: ISO 8601 with microseconds, so that text order is time order."""
    return t.isoformat(timespec="microseconds")


@dataclass(frozen=True)
class TreeRow:
    id: int
    task_hash: str
    task_key: str
    task_name: str
    target: str
    policy: str
    params: dict[str, Any]
    budget: int
    seed: int
    steps_issued: int
    status: Literal["running", "done"]
    warm_start: WarmStart | None
    created_by: str
    created_at: str

    @classmethod
    def from_row(cls, r: aiosqlite.Row) -> TreeRow:
        return cls(
            id=r["id"],
            task_hash=r["task_hash"],
            task_key=r["task_key"],
            task_name=r["task_name"],
            target=r["target"],
            policy=r["policy"],
            params=json.loads(r["params"]),
            budget=r["budget"],
            seed=r["seed"],
            steps_issued=r["steps_issued"],
            status=r["status"],
            warm_start=WarmStart.model_validate_json(r["warm_start"]) if r["warm_start"] else None,
            created_by=r["created_by"],
            created_at=r["created_at"],
        )

    def info(self) -> TreeInfo:
        return TreeInfo(
            id=self.id,
            task_name=self.task_name,
            task_hash=self.task_hash,
            target=self.target,
            policy=self.policy,
            params=self.params,
            budget=self.budget,
            seed=self.seed,
            status=self.status,
            steps_issued=self.steps_issued,
            warm_start=self.warm_start,
            created_by=self.created_by,
            created_at=self.created_at,
        )


def is_abandoned(row: aiosqlite.Row) -> bool:
    return row["abandoned_reason"] is not None


def row_status(row: aiosqlite.Row, now: str) -> NodeStatus:
    if row["status"] == "evaluated":
        return "evaluated"
    expires = row["lease_expires_at"]
    return "pending" if expires is not None and expires > now else "lapsed"


def snapshot_from_rows(rows: list[aiosqlite.Row], now: str) -> Snapshot:
    nodes = []
    for r in rows:
        status = row_status(r, now)
        nodes.append(
            SnapNode(
                id=r["id"],
                parent_id=r["parent_id"],
                kind=r["kind"],
                status="evaluated" if status == "evaluated" else "pending",
                in_flight=status == "pending",
                seed=bool(r["seed"]),
                abandoned=is_abandoned(r),
                outcome=r["outcome"],
                speedup=r["speedup"],
                reward=r["reward"],
                visits=r["visits"],
                value_sum=r["value_sum"],
                max_reward=r["max_reward"],
            )
        )
    return Snapshot(nodes)


def outcome_counts(rows: list[aiosqlite.Row], now: str) -> OutcomeCounts:
    """The tree's steps by outcome (evaluated) or by status (pending, lapsed); root and seed aside."""
    counts: Counter[str] = Counter()
    for r in rows:
        if r["kind"] == "root" or r["seed"]:
            continue
        status = row_status(r, now)
        counts[r["outcome"] if status == "evaluated" else status] += 1
    return OutcomeCounts(**counts)


def trim(text: str | None, limit: int = MAX_ERROR_CHARS) -> str | None:
    if text is None or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"


def node_info(
    row: aiosqlite.Row, now: str, *, with_code: bool = False, with_verdict: bool = False
) -> NodeInfo:
    abandoned = is_abandoned(row)
    verdict = EvalResult.model_validate_json(row["verdict"]) if row["verdict"] else None
    error = None
    if verdict is not None and row["outcome"] != "correct":
        # The candidate's frames and the exceptions: the harness's frames say nothing to its author.
        error = trim(candidate_part(failure_text(verdict) or "") or None)
    if abandoned:
        error = trim(row["abandoned_reason"])
    fc = row["failure_class"]
    candidate_us = None
    if verdict is not None and verdict.profile is not None and verdict.profile.candidate is not None:
        candidate_us = verdict.profile.candidate.median_us
    visits = row["visits"]
    return NodeInfo(
        id=row["id"],
        tree_id=row["tree_id"],
        parent_id=row["parent_id"],
        kind=row["kind"],
        status=row_status(row, now),
        seed=bool(row["seed"]),
        abandoned=abandoned,
        step_index=row["step_index"],
        reason=row["reason"],
        outcome=row["outcome"],
        failure_class=FailureClass(fc) if fc else None,
        failure_id=row["failure_id"],
        error=error,
        speedup=row["speedup"],
        candidate_us=candidate_us,
        reward=row["reward"],
        visits=visits,
        mean_value=row["value_sum"] / visits if visits else 0.0,
        max_reward=row["max_reward"],
        client=row["client"],
        created_at=row["created_at"],
        evaluated_at=row["evaluated_at"],
        lease_expires_at=row["lease_expires_at"] if row["status"] == "pending" else None,
        code_hash=row["code_hash"],
        code=row["source"] if with_code and "source" in row.keys() else None,
        verdict=verdict if with_verdict else None,
    )


def context_kernel(info: NodeInfo, profile: str | None = None) -> ContextKernel:
    assert info.code is not None, "context kernels are read with their code"
    return ContextKernel(
        node_id=info.id,
        kind=info.kind,
        outcome=info.outcome,
        failure_class=info.failure_class,
        error=info.error,
        speedup=info.speedup,
        candidate_us=info.candidate_us,
        profile=profile,
        code=info.code,
    )
