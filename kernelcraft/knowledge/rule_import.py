"""Sharing rules between databases: JSON Lines export and import, and the shipped seed rules.

A rules file holds one `RuleLine` a line. Export writes every rule with this database's id as its
origin; import merges by normalised text and tracks imported counts per origin, so importing the
same file twice adds nothing the second time. These are operator actions (`kernelcraft rules
import`, the server's start-up seeding), not client writes: an imported line may arrive active,
and an imported count activates a rule at the plain activation count, without the corroboration
that learning from clients' failures needs (`Rulebook`).

Who writes: `Rulebook.export_jsonl`, `import_jsonl` and `import_seed` delegate here, each in one
`Store.transaction()`.
"""

from __future__ import annotations

import json
import math
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

import aiosqlite
from pydantic import ValidationError

from kernelcraft.base.errors import UsageError
from kernelcraft.base.files import read_text
from kernelcraft.knowledge.retrieval import row_failure_class, row_scope
from kernelcraft.knowledge.text import normalize_rule, rule_uid, validate_rule
from kernelcraft.schema.rules import MAX_RULE_CHARS, ImportResult, RuleLine
from kernelcraft.store import Store, utcnow

SEED_FILE = "seed_rules.jsonl"


async def database_id(store: Store) -> str:
    """This database's own id, written into exported lines as their origin."""
    async with store.transaction() as conn:
        rows = list(await conn.execute_fetchall("SELECT value FROM knowledge_meta WHERE key = 'database_id'"))
        if rows:
            return str(rows[0][0])
        value = uuid.uuid4().hex
        await conn.execute("INSERT INTO knowledge_meta (key, value) VALUES ('database_id', ?)", (value,))
        return value


def _line_of(row: Any, origin: str) -> RuleLine:
    return RuleLine(
        uid=row["uid"],
        text=row["text"],
        reason=row["reason"],
        count=row["count"],
        status=row["status"],
        scope=row_scope(row),
        failure_class=row_failure_class(row),
        seed=bool(row["seed"]),
        created_by=row["created_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        origin=origin,
    )


async def export_jsonl(store: Store, path: str | Path) -> int:
    """Write every rule, one JSON object a line (see `RuleLine`), sorted by uid. Returns the count."""
    origin = await database_id(store)
    rows = list(
        await store.conn.execute_fetchall(
            "SELECT uid, text, reason, count, status, dsl, arch_family, op_category, failure_class, seed,"
            " created_by, created_at, updated_at FROM rules ORDER BY uid"
        )
    )
    target = Path(path)
    try:
        with target.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(_line_of(row, origin).model_dump_json(exclude_none=True) + "\n")
    except OSError as e:
        raise UsageError(f"cannot write {target}: {e.strerror}; choose another file") from e
    return len(rows)


ADAEXPLORE_SEPARATOR = "||"


async def export_adaexplore(store: Store, path: str | Path) -> int:
    """Write AdaExplore's memory file: `rule text||count`, a line per rule not retired, most
    counted first (AdaExplore uses a rule once its count reaches 3). Returns the count."""
    rows = list(
        await store.conn.execute_fetchall(
            "SELECT text, count FROM rules WHERE status != 'retired' ORDER BY count DESC, uid"
        )
    )
    target = Path(path)
    try:
        with target.open("w", encoding="utf-8") as f:
            for text, count in rows:
                f.write(f"{' '.join(str(text).split())}{ADAEXPLORE_SEPARATOR}{int(count)}\n")
    except OSError as e:
        raise UsageError(f"cannot write {target}: {e.strerror}; choose another file") from e
    return len(rows)


def parse_adaexplore(text: str, name: str) -> list[RuleLine]:
    """Every `rule text||count` line of an AdaExplore memory file, each checked first: a bad file
    changes nothing. The count is a number as AdaExplore writes it (`34.0`: its memory keeps
    counts as floats), rounded to a whole count; a `no guidance` line (AdaExplore's answer when a
    failure teaches nothing general) is read and skipped."""
    lines = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        body, sep, count = raw.rpartition(ADAEXPLORE_SEPARATOR)
        number = _count(count) if sep else None
        if number is None:
            raise UsageError(
                f"{name}:{n}: not an AdaExplore memory line; each line is 'rule text||count' "
                f"(a count of 0 or more, such as 3 or 34.0), got {raw[:80]!r}"
            )
        try:
            rule = validate_rule(body)
        except UsageError as e:
            raise UsageError(f"{name}:{n}: {e}") from e
        if rule is None:  # "no guidance"
            continue
        lines.append(RuleLine(text=rule, count=number, status="candidate"))
    return lines


def _count(text: str) -> int | None:
    """A memory line's count (`3`, `34.0`, `2.5`) as a whole count, or None when it is not a
    finite number of 0 or more."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return round(value) if math.isfinite(value) and value >= 0 else None


async def import_adaexplore(
    store: Store, path: str | Path, *, activation_count: int, client: str = "import"
) -> ImportResult:
    """Merge an AdaExplore memory file (`rule text||count` lines) by normalised text, as
    `import_jsonl` merges its lines: counts add once per file (re-importing is safe), and a rule
    whose count reaches `activation_count` (3, as AdaExplore) is active. An operator's import is
    trusted: no corroboration by clients."""
    file = Path(path)
    text = read_text(file, "the AdaExplore memory file ('rule text||count' lines)")
    lines = parse_adaexplore(text, str(file))
    origin = "adaexplore:" + str(file.resolve())
    result = ImportResult(lines=len(lines))
    async with store.transaction() as conn:
        for line in lines:
            action = await _merge_line(
                conn, line, origin=origin, client=client, activation_count=activation_count
            )
            setattr(result, action, getattr(result, action) + 1)
    return result


async def import_jsonl(
    store: Store, path: str | Path, *, activation_count: int, client: str = "import"
) -> ImportResult:
    """Merge rules from a JSON Lines file by normalised text.

    A new text is inserted with its uid, count, status, scope and provenance (created_by,
    created_at). A known text gets the file's count added. Counts are tracked per origin (the
    exporting database, or the file path for hand-written lines), so importing the same file
    again adds only what grew since: re-importing is safe. Status: retired stays retired; an
    active line activates; otherwise the activation count decides.
    """
    lines = _read_rule_lines(Path(path))
    fallback_origin = "file:" + str(Path(path).resolve())
    result = ImportResult(lines=len(lines))
    async with store.transaction() as conn:
        for line in lines:
            action = await _merge_line(
                conn,
                line,
                origin=line.origin or fallback_origin,
                client=client,
                activation_count=activation_count,
            )
            setattr(result, action, getattr(result, action) + 1)
    return result


async def _merge_line(
    conn: aiosqlite.Connection, line: RuleLine, *, origin: str, client: str, activation_count: int
) -> str:
    text = validate_rule(line.text)
    if text is None:
        return "unchanged"
    norm = normalize_rule(text)
    now = utcnow()
    rows = list(
        await conn.execute_fetchall("SELECT id, count, status FROM rules WHERE norm_text = ?", (norm,))
    )
    if not rows:
        uid = line.uid or rule_uid(norm)
        if list(await conn.execute_fetchall("SELECT 1 FROM rules WHERE uid = ?", (uid,))):
            uid = rule_uid(norm)
        status = line.status
        if status == "candidate" and line.count >= activation_count:
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
    prev = list(
        await conn.execute_fetchall(
            "SELECT count FROM rule_imports WHERE rule_id = ? AND origin = ?", (rule_id, origin)
        )
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
    await conn.execute(
        "UPDATE rules SET status = 'active' WHERE id = ? AND status = 'candidate' AND count >= ?",
        (rule_id, activation_count),
    )
    return "merged"


async def import_seed(store: Store) -> int:
    """Import the shipped seed rules (status active, seed) that are not yet present; returns how
    many were added. Idempotent: call it at every start. A retired seed stays retired."""
    text = resources.files("kernelcraft.knowledge").joinpath(SEED_FILE).read_text(encoding="utf-8")
    lines = _parse_rule_lines(text, SEED_FILE)
    added = 0
    now = utcnow()
    async with store.transaction() as conn:
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
    return _parse_rule_lines(read_text(path, "the rules file (JSON Lines)"), str(path))


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
        # The reason is shown beside the rule wherever a model reads it: held to the same bound.
        if line.reason is not None and (len(line.reason) > MAX_RULE_CHARS or "\n" in line.reason.strip()):
            raise UsageError(
                f"{name}:{n}: a rule's reason is one line of at most {MAX_RULE_CHARS} characters; shorten it"
            )
        lines.append(line)
    return lines
