"""How the rulebook finds rules for a context: FTS5 over their text and reason, and for an error
text, the rules about what the error points at before the rest; weighed by count and scope
(`ranked`, what `Rulebook.query_rules` returns), and listed (`listed`).

Reads only, on the connection the caller gives. An error text is told from source code or prose
by `looks_like_error`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import aiosqlite

from kernelcraft.base.errors import UsageError
from kernelcraft.base.errortext import looks_like_error, pointed_names
from kernelcraft.base.failures import FailureClass, classify, diagnosis
from kernelcraft.base.targets import arch_family
from kernelcraft.knowledge.opwords import op_families, op_words
from kernelcraft.knowledge.text import fts_phrases, fts_query, fts_terms
from kernelcraft.schema.rules import RuleOut, RuleScope, RuleStatus

RULE_COLUMNS = "r.id, r.uid, r.text, r.count, r.status, r.dsl, r.arch_family, r.op_category, r.reason, r.failure_class, r.seed"
Order = Callable[[Any], tuple[bool, ...]]

# Scope weights in query ranking: a rule for the asked family beats a general one, which beats
# one for another family (still shown if nothing better matches: most Triton rules carry over).
SCOPE_MATCH, SCOPE_GENERAL, SCOPE_OTHER = 1.25, 1.0, 0.3
# Candidates fetched from FTS5 per result slot before re-weighting by count and scope.
OVERFETCH = 4
# A context of at most this many search terms is a query (an op's name, a few words), whose op
# names are widened to the words rules use (`searched`); a longer one is a task or a kernel.
QUERY_TERMS = 8


def row_scope(row: Any) -> RuleScope:
    """A rules row's scope columns as the model."""
    return RuleScope(dsl=row["dsl"], arch_family=row["arch_family"], op_category=row["op_category"])


def row_failure_class(row: Any) -> FailureClass | None:
    """A rules row's failure class, or None (none recorded, or a class this version does not know)."""
    fc = row["failure_class"]
    return FailureClass(fc) if fc in FailureClass._value2member_map_ else None


def rule_out(row: Any, score: float = 0.0) -> RuleOut:
    """A rules row (`RULE_COLUMNS`) as the wire model."""
    return RuleOut(
        id=row["id"],
        uid=row["uid"],
        text=row["text"],
        count=row["count"],
        status=row["status"],
        scope=row_scope(row),
        reason=row["reason"],
        failure_class=row_failure_class(row),
        score=score,
        seed=bool(row["seed"]),
    )


def _scope_weight(rule_family: str | None, family: str | None) -> float:
    if rule_family is None or family is None:
        return SCOPE_GENERAL
    return SCOPE_MATCH if rule_family == family else SCOPE_OTHER


def _count_weight(count: int) -> float:
    return 1.0 + 0.2 * math.log(max(count, 1))


async def ranked(
    conn: aiosqlite.Connection, context: str, *, arch: str | None, dsl: str, limit: int
) -> list[RuleOut]:
    """Active rules ranked for `context` (any text: a task, a kernel, an error message).

    score = BM25 relevance × (1 + 0.2·ln count) × scope weight (1.25 same architecture family,
    1.0 general, 0.3 another family). An error text is read for its exceptions only (`diagnosis`:
    no traceback frames, no quoted kernel source), and the rules about what it points at rank
    first (`error_order`). With an empty context (no searchable word), the rules most often
    broken for the arch: active rules of that family or general, by count.
    """
    if limit < 1:
        return []
    family = arch_family(arch)
    # For a Triton error text, search with the diagnosis only: the kernel source a
    # CompilationError quotes (pointers, offsets, masks) would outvote the few words that say
    # what went wrong.
    wide = searched(context or "")
    q = fts_query(diagnosis(wide)) or fts_query(wide)
    if q is None:
        rows = list(
            await conn.execute_fetchall(
                f"SELECT {RULE_COLUMNS} FROM rules r WHERE r.status = 'active' AND r.dsl = ?"
                " AND (r.arch_family IS NULL OR r.arch_family = ?) ORDER BY r.count DESC, r.id LIMIT ?",
                (dsl, family if family is not None else "", limit * OVERFETCH),
            )
        )
        scored = [(r["count"] * _scope_weight(r["arch_family"], family), r) for r in rows]
        first: Order = lambda r: ()  # noqa: E731
    else:
        rows = await matching(conn, q, dsl, limit * OVERFETCH)
        rows, first = await error_order(conn, context, dsl, rows, limit * OVERFETCH)
        scored = [
            (-r["bm"] * _count_weight(r["count"]) * _scope_weight(r["arch_family"], family), r) for r in rows
        ]
    scored.sort(key=lambda sr: (*first(sr[1]), -sr[0], sr[1]["id"]))
    return [rule_out(r, s) for s, r in scored[:limit]]


async def found(
    conn: aiosqlite.Connection, context: str, *, arch: str | None, dsl: str, limit: int
) -> tuple[list[RuleOut], str | None]:
    """`ranked`, and a sentence when the search was not the context's words alone: the construct
    words an op name was widened to (`searched`), or, when no rule matched, that the answer holds
    the rules most often broken for the arch instead (never an empty answer without a word)."""
    rules = await ranked(conn, context, arch=arch, dsl=dsl, limit=limit)
    families = op_families(context) if searched(context) != context else []
    widened = (
        f"rules name constructs, not operators: the search added what {' and '.join(families)} "
        f"kernels are made of ({op_words(context)})"
        if families
        else None
    )
    if rules or not context.strip():
        return rules, widened
    fallback = await ranked(conn, "", arch=arch, dsl=dsl, limit=limit)
    said = f"no rule matched {context.strip()[:80]!r}"
    return fallback, f"{said}; these are the rules most often broken{' for ' + arch if arch else ''}"


def searched(context: str) -> str:
    """What a query-like context (a few words, not code or an error) searches for: its words and
    the construct words of the op names it holds (`opwords`: 'softmax' also searches for the
    reductions and exponentials softmax kernels are made of). Other contexts: their own words."""
    if looks_like_error(context) or len(fts_terms(context)) > QUERY_TERMS:
        return context
    extra = op_words(context)
    return f"{context} {extra}" if extra else context


async def listed(conn: aiosqlite.Connection, status: RuleStatus | None, arch: str | None) -> list[RuleOut]:
    """Every rule (of `status`, scoped to `arch`'s family or general), most counted first."""
    family = arch_family(arch)
    where: list[str] = []
    params: list[str] = []
    if status is not None:
        if status not in ("candidate", "active", "retired"):
            raise UsageError(f"unknown status {status!r}; use candidate, active or retired")
        where.append("r.status = ?")
        params.append(status)
    if family is not None:
        where.append("(r.arch_family IS NULL OR r.arch_family = ?)")
        params.append(family)
    sql = f"SELECT {RULE_COLUMNS} FROM rules r"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = await conn.execute_fetchall(sql + " ORDER BY r.count DESC, r.id", params)
    return [rule_out(r) for r in rows]


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
