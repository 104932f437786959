"""Search-tree state in the one SQLite database (its client-facing models: `kernelcraft.base.tree`).

Tables (migration `m002_search_tree` in `kernelcraft/store.py`):

- `trees`: the task (its source lives in `code`, content-addressed), a normalised operator-and-
  shapes key for warm starts, target arch, policy and its parameters (JSON), budget, seed,
  `steps_issued` (the step counter that seeds each step's generator, so a tree replays), status.
- `nodes`: parent, step kind (root, large, small), content-addressed code, the verdict (an
  `EvalResult` as JSON), outcome, failure class, speedup, reward, visits, value sum, max reward,
  the client that wrote it and when. A node is created `pending` when its step is handed out and
  becomes `evaluated` when its candidate is recorded. A step abandoned without a candidate
  (`SearchService.abandon`) is `evaluated` too, outcome `not_compiled`, with no code and no
  verdict: `abandoned_reason` says why.
- `leases`: which client holds the step that will fill a pending node, until when.

Only `SearchService` writes these tables, always inside `Store.transaction()`; the functions here
take the open connection of that transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import aiosqlite

from kernelcraft.base.errors import NotFoundError
from kernelcraft.base.evaluation import EvalResult
from kernelcraft.base.failures import FailureClass
from kernelcraft.base.tree import (
    ContextKernel,
    NodeInfo,
    NodeStatus,
    Outcome,
    StepKind,
    TreeInfo,
    TreeView,
    WarmStart,
)
from kernelcraft.search.policy import SnapNode, Snapshot, failure_text

MAX_ERROR_CHARS = 2000

# ------------------------------------------------------------------------------------- database


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


async def load_tree(conn: aiosqlite.Connection, tree_id: int) -> TreeRow:
    rows = list(await conn.execute_fetchall("SELECT * FROM trees WHERE id = ?", (tree_id,)))
    if not rows:
        raise NotFoundError(
            f"no search tree {tree_id} in this database; start one with `kernelcraft tree start`"
        )
    r = rows[0]
    return TreeRow(
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


async def insert_tree(
    conn: aiosqlite.Connection,
    *,
    task_hash: str,
    task_key: str,
    task_name: str,
    target: str,
    policy: str,
    params: dict[str, Any],
    budget: int,
    seed: int,
    warm_start: WarmStart | None,
    client: str,
    now: str,
) -> int:
    cur = await conn.execute(
        "INSERT INTO trees (task_hash, task_key, task_name, target, policy, params, budget, seed, warm_start,"
        " created_by, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            task_hash,
            task_key,
            task_name,
            target,
            policy,
            json.dumps(params, sort_keys=True),
            budget,
            seed,
            warm_start.model_dump_json() if warm_start else None,
            client,
            now,
            now,
        ),
    )
    assert cur.lastrowid is not None
    return cur.lastrowid


async def insert_node(
    conn: aiosqlite.Connection,
    *,
    tree_id: int,
    parent_id: int | None,
    kind: StepKind,
    client: str,
    now: str,
    status: Literal["pending", "evaluated"] = "pending",
    seed: bool = False,
    step_index: int | None = None,
    reason: str | None = None,
    context_ids: list[int] | None = None,
) -> int:
    cur = await conn.execute(
        "INSERT INTO nodes (tree_id, parent_id, kind, seed, status, step_index, reason, context_ids, client,"
        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            tree_id,
            parent_id,
            kind,
            int(seed),
            status,
            step_index,
            reason,
            json.dumps(context_ids) if context_ids is not None else None,
            client,
            now,
        ),
    )
    assert cur.lastrowid is not None
    return cur.lastrowid


async def ancestors(conn: aiosqlite.Connection, node_id: int) -> list[int]:
    """The node and its ancestors, root first (recursive CTE)."""
    rows = await conn.execute_fetchall(
        "WITH RECURSIVE up(id, parent_id, depth) AS ("
        "  SELECT id, parent_id, 0 FROM nodes WHERE id = ?"
        "  UNION ALL SELECT n.id, n.parent_id, up.depth + 1 FROM nodes n JOIN up ON n.id = up.parent_id)"
        " SELECT id FROM up ORDER BY depth DESC",
        (node_id,),
    )
    return [r[0] for r in rows]


async def siblings(conn: aiosqlite.Connection, node_id: int) -> list[int]:
    """The other children of the node's parent, in creation order."""
    rows = await conn.execute_fetchall(
        "SELECT s.id FROM nodes n JOIN nodes s ON s.parent_id = n.parent_id AND s.id != n.id WHERE n.id = ? ORDER BY s.id",
        (node_id,),
    )
    return [r[0] for r in rows]


async def record_evaluation(
    conn: aiosqlite.Connection,
    node_id: int,
    *,
    code_hash: str,
    verdict: EvalResult,
    outcome: Outcome,
    speedup: float | None,
    reward: float,
    client: str,
    now: str,
) -> None:
    """Fill a pending node with its verdict, release its lease and back-propagate the reward."""
    fc = verdict.failure_class if outcome != "correct" else None
    await conn.execute(
        "UPDATE nodes SET status = 'evaluated', code_hash = ?, verdict = ?, outcome = ?, failure_class = ?,"
        " speedup = ?, reward = ?, client = ?, evaluated_at = ? WHERE id = ?",
        (
            code_hash,
            verdict.model_dump_json(),
            outcome,
            fc.value if fc is not None else None,
            speedup,
            reward,
            client,
            now,
            node_id,
        ),
    )
    await conn.execute("UPDATE leases SET released_at = ? WHERE node_id = ?", (now, node_id))
    await backpropagate(conn, node_id, reward)


async def record_abandoned(
    conn: aiosqlite.Connection, node_id: int, *, reason: str, reward: float, client: str, now: str
) -> None:
    """Close a pending node whose step produced no candidate: no code, no verdict, outcome
    not_compiled, and the reason; release its lease and back-propagate the reward."""
    await conn.execute(
        "UPDATE nodes SET status = 'evaluated', code_hash = NULL, verdict = NULL, abandoned_reason = ?,"
        " outcome = 'not_compiled', failure_class = NULL, speedup = NULL, reward = ?, client = ?,"
        " evaluated_at = ? WHERE id = ?",
        (reason, reward, client, now, node_id),
    )
    await conn.execute("UPDATE leases SET released_at = ? WHERE node_id = ?", (now, node_id))
    await backpropagate(conn, node_id, reward)


def is_abandoned(row: aiosqlite.Row) -> bool:
    return row["abandoned_reason"] is not None


async def backpropagate(conn: aiosqlite.Connection, node_id: int, reward: float) -> None:
    """visits += 1, value_sum += reward, max_reward = max(max_reward, reward) on the node and its ancestors."""
    await conn.execute(
        "WITH RECURSIVE up(id, parent_id) AS ("
        "  SELECT id, parent_id FROM nodes WHERE id = ?"
        "  UNION ALL SELECT n.id, n.parent_id FROM nodes n JOIN up ON n.id = up.parent_id)"
        " UPDATE nodes SET visits = visits + 1, value_sum = value_sum + ?, max_reward = max(max_reward, ?)"
        " WHERE id IN (SELECT id FROM up)",
        (node_id, reward, reward),
    )


_NODE_COLUMNS = (
    "n.id, n.tree_id, n.parent_id, n.kind, n.seed, n.status, n.step_index, n.reason, n.context_ids, n.code_hash,"
    " n.verdict, n.outcome, n.failure_class, n.speedup, n.reward, n.visits, n.value_sum, n.max_reward, n.client,"
    " n.created_at, n.evaluated_at, n.failure_id, n.abandoned_reason, l.expires_at AS lease_expires_at, l.client AS lease_client"
)


async def node_rows(
    conn: aiosqlite.Connection, tree_id: int, *, node_ids: list[int] | None = None, with_code: bool = False
) -> list[aiosqlite.Row]:
    """Rows of the tree's nodes (or just `node_ids`), id order, lease columns joined."""
    sql = f"SELECT {_NODE_COLUMNS}{', c.source' if with_code else ''} FROM nodes n"
    sql += " LEFT JOIN leases l ON l.node_id = n.id"
    if with_code:
        sql += " LEFT JOIN code c ON c.hash = n.code_hash"
    sql += " WHERE n.tree_id = ?"
    params: list[Any] = [tree_id]
    if node_ids is not None:
        sql += f" AND n.id IN ({','.join('?' * len(node_ids))})"
        params += node_ids
    return list(await conn.execute_fetchall(sql + " ORDER BY n.id", params))


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
    error = trim(failure_text(verdict)) if verdict is not None and row["outcome"] != "correct" else None
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


def context_kernel(info: NodeInfo) -> ContextKernel:
    assert info.code is not None, "context kernels are read with their code"
    return ContextKernel(
        node_id=info.id,
        kind=info.kind,
        outcome=info.outcome,
        failure_class=info.failure_class,
        error=info.error,
        speedup=info.speedup,
        candidate_us=info.candidate_us,
        code=info.code,
    )


async def best_node_id(conn: aiosqlite.Connection, tree_id: int) -> int | None:
    """The evaluated node with the highest reward, the earliest on ties (abandoned steps have no
    kernel, so they are never the best)."""
    rows = list(
        await conn.execute_fetchall(
            "SELECT id FROM nodes WHERE tree_id = ? AND status = 'evaluated' AND kind != 'root'"
            " AND code_hash IS NOT NULL"
            " ORDER BY reward DESC, id LIMIT 1",
            (tree_id,),
        )
    )
    return rows[0][0] if rows else None


async def tree_view(conn: aiosqlite.Connection, tree_id: int, now: str) -> TreeView:
    """Every node of the tree without code, for `show` (reads only)."""
    tree = await load_tree(conn, tree_id)
    rows = await node_rows(conn, tree_id)
    return TreeView(
        tree=tree.info(),
        best_node_id=await best_node_id(conn, tree_id),
        nodes=[node_info(r, now) for r in rows],
    )
