"""The rulebook: one-line rules distilled from failed candidates, shared by every client.

AdaExplore's Adapt stage, kept in SQLite. Every failed candidate is recorded with its failure
class. A proposed rule — one sentence starting "You cannot …", or "no guidance" — is compared with
the existing rules (FTS5 candidates, then `text.is_near_duplicate`): a near-duplicate gets its
count incremented and the failure linked as evidence; otherwise a new rule starts at count 1 as a
candidate. A rule becomes active when its count reaches `activation_count` (3, as in AdaExplore).
Without a proposed rule the failure is linked to the rule its class maps to, when exactly one fits.

`query_rules` ranks active rules for a context (a task, a kernel, an error text) by BM25 over
FTS5, weighted by count and by scope (dsl and architecture family).

Scopes: a rule learnt from a failure on one architecture family is scoped to it; when the same rule
is proposed from another family it becomes general (arch_family NULL). Retired rules are never
returned or reactivated; they still absorb near-duplicates so a retired mistake is not relearnt.

Who writes: the server's (or the CLI's) Rulebook, through `Store.transaction()`. Seeds
(`seed_rules.jsonl`) are imported by `import_seed()`, which the server calls at start-up.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

import aiosqlite
from pydantic import ValidationError

from kernelcraft.base.errors import NotFoundError, UsageError
from kernelcraft.base.failures import FailureClass, classify, diagnosis
from kernelcraft.base.rules import (
    MAX_RULE_CHARS,
    NO_GUIDANCE,
    FailureRecorded,
    ImportResult,
    RuleAction,
    RuleLine,
    RuleOut,
    RuleScope,
    RuleStatus,
)
from kernelcraft.base.targets import arch_family
from kernelcraft.knowledge.text import fts_query, is_near_duplicate, normalize_rule, rule_similarity
from kernelcraft.store import Store, utcnow

# Scope weights in query ranking: a rule for the asked family beats a general one, which beats
# one for another family (still shown if nothing better matches: most Triton rules carry over).
SCOPE_MATCH, SCOPE_GENERAL, SCOPE_OTHER = 1.25, 1.0, 0.3
# Candidates fetched from FTS5 per result slot before re-weighting by count and scope.
OVERFETCH = 4


def rule_uid(norm_text: str) -> str:
    """Stable across databases: the same normalised text gets the same uid everywhere."""
    import hashlib

    return "r-" + hashlib.sha256(norm_text.encode("utf-8")).hexdigest()[:16]


def validate_rule(rule: str) -> str | None:
    """The rule as stored (stripped, one line), or None for "no guidance". UsageError otherwise."""
    text = " ".join(rule.split())
    if normalize_rule(text) == NO_GUIDANCE:
        return None
    if not text.startswith("You cannot "):
        raise UsageError(
            f"a rule must be one sentence starting 'You cannot …' (AdaExplore's form), or 'no guidance'; "
            f"got {text[:80]!r}. Rewrite it as the one thing the kernel must not do"
        )
    if len(text) > MAX_RULE_CHARS:
        raise UsageError(f"a rule is one sentence of at most {MAX_RULE_CHARS} characters; got {len(text)}")
    # A sentence end followed by a capital letter inside the text means two sentences.
    if re.search(r"[.!?;]\s+[A-Z]", text) or "\n" in rule.strip():
        raise UsageError(
            f"a rule must be exactly one sentence (no fixes, no explanation); got {text[:80]!r}. "
            "Keep only the 'You cannot …' sentence"
        )
    return text


_RULE_COLUMNS = "r.id, r.uid, r.text, r.count, r.status, r.dsl, r.arch_family, r.op_category, r.reason, r.failure_class, r.seed"


async def _rows(conn: aiosqlite.Connection, sql: str, params: Any = ()) -> list[Any]:
    return list(await conn.execute_fetchall(sql, params))


def _rule_out(row: Any, score: float = 0.0) -> RuleOut:
    fc = row["failure_class"]
    return RuleOut(
        id=row["id"],
        uid=row["uid"],
        text=row["text"],
        count=row["count"],
        status=row["status"],
        scope=RuleScope(dsl=row["dsl"], arch_family=row["arch_family"], op_category=row["op_category"]),
        reason=row["reason"],
        failure_class=FailureClass(fc) if fc in FailureClass._value2member_map_ else None,
        score=score,
        seed=bool(row["seed"]),
    )


def _scope_weight(rule_family: str | None, family: str | None) -> float:
    if rule_family is None or family is None:
        return SCOPE_GENERAL
    return SCOPE_MATCH if rule_family == family else SCOPE_OTHER


def _count_weight(count: int) -> float:
    return 1.0 + 0.2 * math.log(max(count, 1))


class Rulebook:
    """The rulebook over one open Store. Cheap to construct; holds no state besides the store."""

    def __init__(self, store: Store, activation_count: int = 3) -> None:
        if activation_count < 1:
            raise UsageError(f"activation_count must be at least 1, got {activation_count}")
        self.store = store
        self.activation_count = activation_count

    # ------------------------------------------------------------------ writing

    async def record_failure(
        self,
        candidate_code: str,
        error: str,
        *,
        reference_code: str | None = None,
        arch: str | None = None,
        rule: str | None = None,
        failure_class: FailureClass | None = None,
        task_hash: str | None = None,
        client: str = "local",
        stage: str | None = None,
        op_category: str | None = None,
        failure_id: int | None = None,
    ) -> FailureRecorded:
        """Store a failed candidate with its class and learn from it (see the module docstring).

        `failure_class` given is used as is; otherwise `classify(error, stage)` decides. `rule` is
        a proposed "You cannot …" sentence or "no guidance"; anything else raises UsageError before
        anything is written.

        `failure_id` names a failure already recorded (the search tree records every failed
        candidate and returns its id on the node): the proposed rule attaches to it instead of a
        second copy of the failure being stored, and a rule never counts one failure twice.
        """
        proposed = validate_rule(rule) if rule is not None else None
        family = arch_family(arch)
        attaching = failure_id is not None
        async with self.store.transaction() as conn:
            if failure_id is not None:
                rows = await _rows(conn, "SELECT class FROM failures WHERE id = ?", (failure_id,))
                if not rows:
                    raise NotFoundError(
                        f"no failure {failure_id} in the rulebook; omit failure_id to record the failure itself"
                    )
                cls = FailureClass(rows[0][0])
            else:
                cls = failure_class if failure_class is not None else classify(error, stage)
                code_digest = await self.store.put_code(candidate_code)
                ref_digest = await self.store.put_code(reference_code) if reference_code is not None else None
                cur = await conn.execute(
                    "INSERT INTO failures (class, error_text, code_hash, reference_hash, task_hash, arch, client,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (cls.value, error, code_digest, ref_digest, task_hash, arch, client, utcnow()),
                )
                failure_id = cur.lastrowid
                assert failure_id is not None
            if proposed is not None:
                rule_id, action = await self._add_or_increment(
                    conn,
                    proposed,
                    family=family,
                    cls=cls,
                    client=client,
                    failure_id=failure_id,
                    op_category=op_category,
                )
            else:
                # An attached failure was linked to its class's rule when it was first recorded.
                found = None if attaching else await self._rule_for_class(conn, cls, error)
                if found is None:
                    return FailureRecorded(
                        failure_id=failure_id, failure_class=cls, rule_action="none", activated=False
                    )
                rule_id, action = found, "linked"
                await conn.execute(
                    "UPDATE rules SET count = count + 1, updated_at = ? WHERE id = ?", (utcnow(), rule_id)
                )
            await conn.execute(
                "INSERT INTO rule_evidence (rule_id, failure_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (rule_id, failure_id),
            )
            activated = await self._maybe_activate(conn, rule_id)
            out = await self._get(conn, rule_id)
        return FailureRecorded(
            failure_id=failure_id, failure_class=cls, rule=out, rule_action=action, activated=activated
        )

    async def _add_or_increment(
        self,
        conn: aiosqlite.Connection,
        text: str,
        *,
        family: str | None,
        cls: FailureClass,
        client: str,
        failure_id: int | None,
        op_category: str | None,
    ) -> tuple[int, RuleAction]:
        norm = normalize_rule(text)
        match = await self._find_duplicate(conn, norm)
        now = utcnow()
        if match is not None:
            rule_id, rule_family = match
            if failure_id is not None and await _rows(
                conn,
                "SELECT 1 FROM rule_evidence WHERE rule_id = ? AND failure_id = ?",
                (rule_id, failure_id),
            ):
                return rule_id, "linked"  # this failure already counts for this rule
            # The same rule from another family is a general one.
            new_family = rule_family if rule_family == family else None
            await conn.execute(
                "UPDATE rules SET count = count + 1, arch_family = ?, updated_at = ? WHERE id = ?",
                (new_family, now, rule_id),
            )
            return rule_id, "incremented"
        cur = await conn.execute(
            "INSERT INTO rules (uid, text, norm_text, count, status, dsl, arch_family, op_category, failure_class,"
            " seed, created_by, created_at, updated_at, source_failure_id)"
            " VALUES (?, ?, ?, 1, 'candidate', 'triton', ?, ?, ?, 0, ?, ?, ?, ?)",
            (rule_uid(norm), text, norm, family, op_category, cls.value, client, now, now, failure_id),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid, "created"

    async def _find_duplicate(self, conn: aiosqlite.Connection, norm: str) -> tuple[int, str | None] | None:
        rows = await _rows(conn, "SELECT id, arch_family FROM rules WHERE norm_text = ?", (norm,))
        if rows:
            return rows[0][0], rows[0][1]
        q = fts_query(norm)
        if q is None:
            return None
        rows = await _rows(
            conn,
            "SELECT r.id, r.arch_family, r.norm_text FROM"
            " (SELECT rowid, rank FROM rules_fts WHERE rules_fts MATCH ? ORDER BY rank LIMIT 20) f"
            " JOIN rules r ON r.id = f.rowid ORDER BY f.rank",
            (q,),
        )
        best: tuple[float, int, str | None] | None = None
        for rid, fam, other in rows:
            if is_near_duplicate(norm, other):
                sim = rule_similarity(norm, other)
                if best is None or sim > best[0]:
                    best = (sim, rid, fam)
        return (best[1], best[2]) if best else None

    async def _rule_for_class(self, conn: aiosqlite.Connection, cls: FailureClass, error: str) -> int | None:
        """The non-retired rule for this class that best matches the error; the only one if the
        text matches none; None when several exist and none matches."""
        rows = await _rows(
            conn,
            "SELECT id FROM rules WHERE failure_class = ? AND status != 'retired' ORDER BY count DESC, id LIMIT 200",
            (cls.value,),
        )
        if not rows:
            return None
        ids = [int(r[0]) for r in rows]
        q = fts_query(diagnosis(error)) or fts_query(error)
        if q is not None and len(ids) > 1:
            marks = ",".join("?" * len(ids))
            hit = await _rows(
                conn,
                f"SELECT rowid FROM rules_fts WHERE rules_fts MATCH ? AND rowid IN ({marks}) ORDER BY rank LIMIT 1",
                (q, *ids),
            )
            if hit:
                return int(hit[0][0])
        return ids[0] if len(ids) == 1 else None

    async def _maybe_activate(self, conn: aiosqlite.Connection, rule_id: int) -> bool:
        cur = await conn.execute(
            "UPDATE rules SET status = 'active' WHERE id = ? AND status = 'candidate' AND count >= ?",
            (rule_id, self.activation_count),
        )
        return cur.rowcount > 0

    async def _get(self, conn: aiosqlite.Connection, rule_id: int) -> RuleOut:
        rows = await _rows(conn, f"SELECT {_RULE_COLUMNS} FROM rules r WHERE r.id = ?", (rule_id,))
        return _rule_out(rows[0])

    async def set_status(self, uid: str, status: RuleStatus) -> RuleOut:
        """Retire a rule (or restore one). NotFoundError-like UsageError when the uid is unknown."""
        async with self.store.transaction() as conn:
            cur = await conn.execute(
                "UPDATE rules SET status = ?, updated_at = ? WHERE uid = ?", (status, utcnow(), uid)
            )
            if cur.rowcount == 0:
                from kernelcraft.base.errors import NotFoundError

                raise NotFoundError(f"no rule with uid {uid!r}; list them with `kernelcraft rules list`")
            rows = await _rows(conn, f"SELECT {_RULE_COLUMNS} FROM rules r WHERE r.uid = ?", (uid,))
        return _rule_out(rows[0])

    # ------------------------------------------------------------------ reading

    async def query_rules(
        self, context: str, *, arch: str | None = None, dsl: str = "triton", limit: int = 10
    ) -> list[RuleOut]:
        """Active rules ranked for `context` (any text: a task, a kernel, an error message).

        score = BM25 relevance × (1 + 0.2·ln count) × scope weight (1.25 same architecture family,
        1.0 general, 0.3 another family). With an empty context (no searchable word), the rules most
        often broken for the arch: active rules of that family or general, by count.
        """
        if limit < 1:
            return []
        family = arch_family(arch)
        # For a Triton error text, search with the diagnosis only: the kernel source a
        # CompilationError quotes (pointers, offsets, masks) would outvote the few words that say
        # what went wrong.
        q = fts_query(diagnosis(context or "")) or fts_query(context or "")
        conn = self.store.conn
        if q is None:
            rows = await _rows(
                conn,
                f"SELECT {_RULE_COLUMNS} FROM rules r WHERE r.status = 'active' AND r.dsl = ?"
                " AND (r.arch_family IS NULL OR r.arch_family = ?) ORDER BY r.count DESC, r.id LIMIT ?",
                (dsl, family if family is not None else "", limit * OVERFETCH),
            )
            scored = [(r["count"] * _scope_weight(r["arch_family"], family), r) for r in rows]
        else:
            rows = await _rows(
                conn,
                f"SELECT {_RULE_COLUMNS}, bm25(rules_fts, 1.0, 0.4) AS bm FROM rules_fts"
                " JOIN rules r ON r.id = rules_fts.rowid"
                " WHERE rules_fts MATCH ? AND r.status = 'active' AND r.dsl = ? ORDER BY bm LIMIT ?",
                (q, dsl, limit * OVERFETCH),
            )
            scored = [
                (-r["bm"] * _count_weight(r["count"]) * _scope_weight(r["arch_family"], family), r)
                for r in rows
            ]
        scored.sort(key=lambda sr: (-sr[0], sr[1]["id"]))
        return [_rule_out(r, s) for s, r in scored[:limit]]

    async def list_rules(self, status: RuleStatus | None = None, arch: str | None = None) -> list[RuleOut]:
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
        sql = f"SELECT {_RULE_COLUMNS} FROM rules r"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = await _rows(self.store.conn, sql + " ORDER BY r.count DESC, r.id", params)
        return [_rule_out(r) for r in rows]

    async def evidence(self, uid: str, limit: int = 20) -> list[int]:
        """Ids of the failures linked to a rule, newest first."""
        rows = await _rows(
            self.store.conn,
            "SELECT e.failure_id FROM rule_evidence e JOIN rules r ON r.id = e.rule_id WHERE r.uid = ?"
            " ORDER BY e.failure_id DESC LIMIT ?",
            (uid, limit),
        )
        return [int(r[0]) for r in rows]

    # ------------------------------------------------------------------ sharing

    async def database_id(self) -> str:
        """This database's own id, written into exported lines as their origin."""
        async with self.store.transaction() as conn:
            rows = await _rows(conn, "SELECT value FROM knowledge_meta WHERE key = 'database_id'")
            if rows:
                return str(rows[0][0])
            value = uuid.uuid4().hex
            await conn.execute("INSERT INTO knowledge_meta (key, value) VALUES ('database_id', ?)", (value,))
            return value

    async def export_jsonl(self, path: str | Path) -> int:
        """Write every rule, one JSON object a line (see `RuleLine`), sorted by uid. Returns the count."""
        origin = await self.database_id()
        rows = await _rows(
            self.store.conn,
            f"SELECT {_RULE_COLUMNS}, r.created_by, r.created_at, r.updated_at FROM rules r ORDER BY r.uid",
        )
        target = Path(path)
        try:
            with target.open("w", encoding="utf-8") as f:
                for r in rows:
                    out = _rule_out(r)
                    line = RuleLine(
                        uid=out.uid,
                        text=out.text,
                        reason=out.reason,
                        count=out.count,
                        status=out.status,
                        scope=out.scope,
                        failure_class=out.failure_class,
                        seed=out.seed,
                        created_by=r["created_by"],
                        created_at=r["created_at"],
                        updated_at=r["updated_at"],
                        origin=origin,
                    )
                    f.write(line.model_dump_json(exclude_none=True) + "\n")
        except OSError as e:
            raise UsageError(f"cannot write {target}: {e.strerror}; choose another file") from e
        return len(rows)

    async def import_jsonl(self, path: str | Path, *, client: str = "import") -> ImportResult:
        """Merge rules from a JSON Lines file by normalised text.

        A new text is inserted with its uid, count, status, scope and provenance (created_by,
        created_at). A known text gets the file's count added. Counts are tracked per origin (the
        exporting database, or the file path for hand-written lines), so importing the same file
        again adds only what grew since: re-importing is safe. Status: retired stays retired; an
        active line activates; otherwise the activation threshold decides.
        """
        lines = _read_rule_lines(Path(path))
        fallback_origin = "file:" + str(Path(path).resolve())
        result = ImportResult(lines=len(lines))
        async with self.store.transaction() as conn:
            for line in lines:
                action = await self._merge_line(
                    conn, line, origin=line.origin or fallback_origin, client=client
                )
                setattr(result, action, getattr(result, action) + 1)
        return result

    async def _merge_line(
        self, conn: aiosqlite.Connection, line: RuleLine, *, origin: str, client: str
    ) -> str:
        text = validate_rule(line.text)
        if text is None:
            return "unchanged"
        norm = normalize_rule(text)
        now = utcnow()
        rows = await _rows(conn, "SELECT id, count, status FROM rules WHERE norm_text = ?", (norm,))
        if not rows:
            uid = line.uid or rule_uid(norm)
            if await _rows(conn, "SELECT 1 FROM rules WHERE uid = ?", (uid,)):
                uid = rule_uid(norm)
            status = line.status
            if status == "candidate" and line.count >= self.activation_count:
                status = "active"
            cur = await conn.execute(
                "INSERT INTO rules (uid, text, norm_text, reason, count, status, dsl, arch_family, op_category,"
                " failure_class, seed, created_by, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    uid,
                    text,
                    norm,
                    line.reason,
                    line.count,
                    status,
                    line.scope.dsl,
                    line.scope.arch_family,
                    line.scope.op_category,
                    line.failure_class.value if line.failure_class else None,
                    int(line.seed),
                    line.created_by or client,
                    line.created_at or now,
                    now,
                ),
            )
            await conn.execute(
                "INSERT INTO rule_imports (rule_id, origin, count) VALUES (?, ?, ?)",
                (cur.lastrowid, origin, line.count),
            )
            return "created"
        rule_id, _count, status = rows[0]
        prev = await _rows(
            conn, "SELECT count FROM rule_imports WHERE rule_id = ? AND origin = ?", (rule_id, origin)
        )
        delta = line.count - (int(prev[0][0]) if prev else 0)
        await conn.execute(
            "INSERT INTO rule_imports (rule_id, origin, count) VALUES (?, ?, ?)"
            " ON CONFLICT(rule_id, origin) DO UPDATE SET count = max(count, excluded.count)",
            (rule_id, origin, line.count),
        )
        new_status = status
        if status == "candidate" and line.status == "active":
            new_status = "active"
        if delta <= 0 and new_status == status:
            return "unchanged"
        await conn.execute(
            "UPDATE rules SET count = count + ?, status = ?, reason = coalesce(reason, ?), updated_at = ? WHERE id = ?",
            (max(delta, 0), new_status, line.reason, now, rule_id),
        )
        await self._maybe_activate(conn, rule_id)
        return "merged"

    async def import_seed(self) -> int:
        """Import the shipped seed rules (status active, seed) that are not yet present; returns how
        many were added. Idempotent: call it at every start. A retired seed stays retired."""
        text = (
            resources.files("kernelcraft.knowledge").joinpath("seed_rules.jsonl").read_text(encoding="utf-8")
        )
        lines = _parse_rule_lines(text, "seed_rules.jsonl")
        added = 0
        now = utcnow()
        async with self.store.transaction() as conn:
            for line in lines:
                rule = validate_rule(line.text)
                if rule is None:
                    continue
                norm = normalize_rule(rule)
                cur = await conn.execute(
                    "INSERT INTO rules (uid, text, norm_text, reason, count, status, dsl, arch_family, op_category,"
                    " failure_class, seed, created_by, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, 1, 'seed', ?, ?) ON CONFLICT(norm_text) DO NOTHING",
                    (
                        rule_uid(norm),
                        rule,
                        norm,
                        line.reason,
                        max(line.count, 1),
                        line.scope.dsl,
                        line.scope.arch_family,
                        line.scope.op_category,
                        line.failure_class.value if line.failure_class else None,
                        now,
                        now,
                    ),
                )
                added += cur.rowcount
        return added


def _read_rule_lines(path: Path) -> list[RuleLine]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise UsageError(f"{path} does not exist; give the path of a rules .jsonl file") from e
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {path}: {e}; give a UTF-8 JSON Lines file") from e
    return _parse_rule_lines(text, str(path))


def _parse_rule_lines(text: str, name: str) -> list[RuleLine]:
    """Parse and validate every line first, so a bad file changes nothing."""
    lines = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = RuleLine.model_validate(json.loads(raw))
        except (json.JSONDecodeError, ValidationError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UsageError(
                f"{name}:{n}: not a rule line ({first}); each line is a JSON object with at least 'text'"
            ) from e
        try:
            validate_rule(line.text)
        except UsageError as e:
            raise UsageError(f"{name}:{n}: {e}") from e
        lines.append(line)
    return lines
