"""The search tables in the one SQLite database: every SQL statement of the search layer.

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
take the open connection of that transaction (or the store's connection, to read). Rows become
models in `tree.py`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import aiosqlite

from kernelcraft.base.errors import NotFoundError
from kernelcraft.base.voice import CLI_VOICE, Voice
from kernelcraft.schema.evaluation import EvalResult
from kernelcraft.schema.tree import Outcome, StepKind, TreeView, WarmStart
from kernelcraft.search.policy import UNKNOWN_SPEEDUP_AS
from kernelcraft.search.tree import TreeRow, node_info

# AdaExplore's ranking (compiled, correct, speedup) as an ORDER BY over `nodes` (alias n); an
# unmeasured speedup (no GPU) counts as parity, as in `policy.score`.
BY_SCORE = (
    "(n.outcome IN ('wrong', 'correct')) DESC, (n.outcome = 'correct') DESC,"
    f" (CASE WHEN n.outcome = 'correct' THEN coalesce(n.speedup, {UNKNOWN_SPEEDUP_AS}) ELSE 0 END) DESC"
)

# ---------------------------------------------------------------------------------------- trees


async def load_tree(conn: aiosqlite.Connection, tree_id: int, voice: Voice = CLI_VOICE) -> TreeRow:
    """The tree; `voice`: who is told how to start one when there is none."""
    rows = list(await conn.execute_fetchall("SELECT * FROM trees WHERE id = ?", (tree_id,)))
    if not rows:
        where = "this server's database" if voice.mcp else "this database"
        raise NotFoundError(f"no search tree {tree_id} in {where}; start one with {voice.start_tree()}")
    return TreeRow.from_row(rows[0])


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


async def mark_done(conn: aiosqlite.Connection, tree_id: int, now: str) -> None:
    await conn.execute("UPDATE trees SET status = 'done', updated_at = ? WHERE id = ?", (now, tree_id))


async def count_issued_step(conn: aiosqlite.Connection, tree_id: int, now: str) -> None:
    """One more step handed out: the counter that seeds the next step's generator."""
    await conn.execute(
        "UPDATE trees SET steps_issued = steps_issued + 1, updated_at = ? WHERE id = ?", (now, tree_id)
    )


async def find_warm_start(
    conn: aiosqlite.Connection, task_hash: str, task_key: str, target: str, client: str
) -> tuple[WarmStart, str] | None:
    """The best correct kernel (highest speedup) of an earlier tree on `target` for the same task
    (same source, or same operator and shapes), with its source; the same source wins a tie. Only
    trees `client` may read: its own and those shared with it (a kernel is its author's work)."""
    rows = list(
        await conn.execute_fetchall(
            "SELECT t.id AS tree_id, n.id AS node_id, n.speedup, t.task_hash = ? AS same_hash, c.source"
            " FROM trees t JOIN nodes n ON n.tree_id = t.id JOIN code c ON c.hash = n.code_hash"
            " WHERE t.target = ? AND (t.task_hash = ? OR t.task_key = ?)"
            " AND (t.created_by = ? OR EXISTS (SELECT 1 FROM tree_shares s"
            "   WHERE s.tree_id = t.id AND s.client IN (?, '*')))"
            " AND n.status = 'evaluated' AND n.outcome = 'correct'"
            f" ORDER BY {BY_SCORE}, same_hash DESC, n.id LIMIT 1",
            (task_hash, target, task_hash, task_key, client, client),
        )
    )
    if not rows:
        return None
    r = rows[0]
    warm = WarmStart(
        tree_id=r["tree_id"],
        node_id=r["node_id"],
        match="task_hash" if r["same_hash"] else "operator_and_shapes",
        speedup=r["speedup"],
    )
    return warm, r["source"]


async def budget_usage(conn: aiosqlite.Connection, tree_id: int, now: str) -> tuple[int, int]:
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


# ---------------------------------------------------------------------------------------- nodes


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


async def set_failure_id(conn: aiosqlite.Connection, node_id: int, failure_id: int) -> None:
    """The rulebook's failure recorded for the node's candidate."""
    await conn.execute("UPDATE nodes SET failure_id = ? WHERE id = ?", (failure_id, node_id))


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


async def step_row(conn: aiosqlite.Connection, node_id: int) -> aiosqlite.Row | None:
    """The node a candidate is submitted for (any tree), with its lease's expiry; None if none."""
    rows = list(
        await conn.execute_fetchall(
            "SELECT n.id, n.tree_id, n.kind, n.status, n.outcome, l.expires_at AS lease_expires_at"
            " FROM nodes n LEFT JOIN leases l ON l.node_id = n.id WHERE n.id = ?",
            (node_id,),
        )
    )
    return rows[0] if rows else None


async def best_node_id(conn: aiosqlite.Connection, tree_id: int) -> int | None:
    """The evaluated node ranked highest by (compiled, correct, speedup), the earliest on ties
    (abandoned steps have no kernel, so they are never the best)."""
    rows = list(
        await conn.execute_fetchall(
            "SELECT n.id FROM nodes n WHERE n.tree_id = ? AND n.status = 'evaluated' AND n.kind != 'root'"
            " AND n.code_hash IS NOT NULL"
            f" ORDER BY {BY_SCORE}, n.id LIMIT 1",
            (tree_id,),
        )
    )
    return rows[0][0] if rows else None


async def tree_view(
    conn: aiosqlite.Connection, tree_id: int, now: str, *, with_verdicts: bool = False
) -> TreeView:
    """Every node of the tree without code (with its verdict if asked), for `show` (reads only)."""
    tree = await load_tree(conn, tree_id)
    rows = await node_rows(conn, tree_id)
    return TreeView(
        tree=tree.info(),
        best_node_id=await best_node_id(conn, tree_id),
        nodes=[node_info(r, now, with_verdict=with_verdicts) for r in rows],
    )


# --------------------------------------------------------------------------------------- leases


async def insert_lease(
    conn: aiosqlite.Connection, node_id: int, tree_id: int, *, client: str, kind: str, now: str, expires: str
) -> None:
    """`client` holds the new step that fills `node_id` until `expires`."""
    await conn.execute(
        "INSERT INTO leases (node_id, tree_id, client, kind, issued_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
        (node_id, tree_id, client, kind, now, expires),
    )


async def extend_lease(conn: aiosqlite.Connection, node_id: int, until: str) -> None:
    """A live lease is held at least `until`."""
    await conn.execute(
        "UPDATE leases SET expires_at = max(expires_at, ?) WHERE node_id = ?", (until, node_id)
    )


async def reopen_lease(
    conn: aiosqlite.Connection, node_id: int, tree_id: int, *, client: str, kind: str, now: str, until: str
) -> None:
    """A lapsed (or missing) lease becomes `client`'s again, until `until`."""
    await conn.execute(
        "INSERT INTO leases (node_id, tree_id, client, kind, issued_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(node_id) DO UPDATE SET expires_at = excluded.expires_at, client = excluded.client",
        (node_id, tree_id, client, kind, now, until),
    )


async def held_step(conn: aiosqlite.Connection, tree_id: int, client: str, now: str) -> int | None:
    """The pending node of the oldest live lease `client` holds on the tree, if any."""
    held = list(
        await conn.execute_fetchall(
            "SELECT l.node_id FROM leases l JOIN nodes n ON n.id = l.node_id WHERE l.tree_id = ?"
            " AND l.client = ? AND n.status = 'pending' AND l.expires_at > ? ORDER BY l.node_id LIMIT 1",
            (tree_id, client, now),
        )
    )
    return held[0][0] if held else None
