"""How the rulebook finds rules for a context: FTS5 over their text and reason, and for an error
text, the rules about what the error points at before the rest.

Reads only, on the connection the caller gives; `Rulebook.query_rules` weighs (count, scope) and
cuts what these return. An error text is told from source code or prose by `looks_like_error`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiosqlite

from kernelcraft.base.errortext import looks_like_error, pointed_names
from kernelcraft.base.failures import classify
from kernelcraft.knowledge.text import fts_phrases

RULE_COLUMNS = "r.id, r.uid, r.text, r.count, r.status, r.dsl, r.arch_family, r.op_category, r.reason, r.failure_class, r.seed"
Order = Callable[[Any], tuple[bool, ...]]


async def matching(conn: aiosqlite.Connection, query: str, dsl: str, limit: int) -> list[Any]:
    """Active rules of `dsl` matching the FTS5 `query`, with their BM25 (`bm`), best first."""
    return list(
        await conn.execute_fetchall(
            f"SELECT {RULE_COLUMNS}, bm25(rules_fts, 1.0, 0.4) AS bm FROM rules_fts"
            " JOIN rules r ON r.id = rules_fts.rowid"
            " WHERE rules_fts MATCH ? AND r.status = 'active' AND r.dsl = ? ORDER BY bm LIMIT ?",
            (query, dsl, limit),
        )
    )


async def error_order(
    conn: aiosqlite.Connection, context: str, dsl: str, rows: list[Any], limit: int
) -> tuple[list[Any], Order]:
    """For an error text: `rows` with the rules about what it points at added, and what ranks
    first — rules of its failure class (`classify`), then among them those that say an API it
    points at as a phrase (`tl.tanh` under its caret or in its message, not tl.math.tanh), then
    those that say another name under its caret (`x_ptr`). Any other context: `rows` as they are,
    nothing first."""
    if not looks_like_error(context):
        return rows, lambda r: ()
    names = pointed_names(context)
    apis = await _naming(conn, [n for n in names if "." in n], dsl, limit)
    others = await _naming(conn, [n for n in names if "." not in n], dsl, limit)
    rows = [*rows, *await _by_id(conn, (apis | others) - {r["id"] for r in rows})]
    cls = classify(context).value
    return rows, lambda r: (r["failure_class"] != cls, r["id"] not in apis, r["id"] not in others)


async def _naming(conn: aiosqlite.Connection, names: list[str], dsl: str, limit: int) -> set[int]:
    """Ids of the active rules that say one of `names` as a phrase."""
    phrases = fts_phrases(names)
    return {r["id"] for r in await matching(conn, phrases, dsl, limit)} if phrases else set()


async def _by_id(conn: aiosqlite.Connection, ids: set[int]) -> list[Any]:
    """Rules `ids`, with a BM25 of 0: no word of the query matched them."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    sql = f"SELECT {RULE_COLUMNS}, 0.0 AS bm FROM rules r WHERE r.id IN ({marks})"
    return list(await conn.execute_fetchall(sql, list(ids)))
