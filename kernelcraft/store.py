"""The one SQLite database: rulebook, failures, hardware manuals, search trees.

One file under KERNELCRAFT_HOME (or `--db`), opened through aiosqlite in WAL mode with a busy
timeout, so several processes (a server, a CLI, a teammate's agent) can share it. The schema is a
list of named migrations, each applied once and recorded in `_migrations`; a migration is never
edited once released: add a new one at the end of `MIGRATIONS`.

Code is content-addressed: `code.hash = sha256(source)`, inserted with ON CONFLICT DO NOTHING.

Who writes what: the knowledge layer owns failures, rules, rule_evidence, documents and sections;
the search layer owns trees and nodes. Candidate processes never get a connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sqlite3
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import aiosqlite

from kernelcraft.base.config import private
from kernelcraft.base.errors import StalledError, StoreError
from kernelcraft.base.files import kind_of

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 10_000
# A transaction is a few statements; one waiting this long for another is stuck behind a fault.
TX_WAIT_S = 120.0


def utcnow() -> str:
    """Timestamps are ISO 8601 UTC strings with microseconds, so they sort as text."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def code_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Migration:
    name: str
    apply: str | Callable[[aiosqlite.Connection], Awaitable[None]]


M001_INITIAL = """
CREATE TABLE code (
    hash TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE failures (
    id INTEGER PRIMARY KEY,
    class TEXT NOT NULL,
    error_text TEXT NOT NULL,
    code_hash TEXT REFERENCES code(hash),
    reference_hash TEXT REFERENCES code(hash),
    task_hash TEXT,
    arch TEXT,
    client TEXT NOT NULL DEFAULT 'local',
    created_at TEXT NOT NULL
);
CREATE INDEX failures_class ON failures(class);
CREATE INDEX failures_arch ON failures(arch);

CREATE TABLE rules (
    id INTEGER PRIMARY KEY,
    uid TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL,
    norm_text TEXT NOT NULL UNIQUE,
    reason TEXT,
    count INTEGER NOT NULL DEFAULT 1,
    status TEXT NOT NULL DEFAULT 'candidate' CHECK (status IN ('candidate', 'active', 'retired')),
    dsl TEXT NOT NULL DEFAULT 'triton',
    arch_family TEXT,
    op_category TEXT,
    failure_class TEXT,
    seed INTEGER NOT NULL DEFAULT 0,
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    source_failure_id INTEGER REFERENCES failures(id)
);
CREATE INDEX rules_status ON rules(status, count DESC);

CREATE TABLE rule_evidence (
    rule_id INTEGER NOT NULL REFERENCES rules(id),
    failure_id INTEGER NOT NULL REFERENCES failures(id),
    PRIMARY KEY (rule_id, failure_id)
);
CREATE INDEX rule_evidence_failure ON rule_evidence(failure_id);

CREATE VIRTUAL TABLE rules_fts USING fts5(
    text, reason, content='rules', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER rules_ai AFTER INSERT ON rules BEGIN
    INSERT INTO rules_fts(rowid, text, reason) VALUES (new.id, new.text, coalesce(new.reason, ''));
END;
CREATE TRIGGER rules_ad AFTER DELETE ON rules BEGIN
    INSERT INTO rules_fts(rules_fts, rowid, text, reason) VALUES ('delete', old.id, old.text, coalesce(old.reason, ''));
END;
CREATE TRIGGER rules_au AFTER UPDATE OF text, reason ON rules BEGIN
    INSERT INTO rules_fts(rules_fts, rowid, text, reason) VALUES ('delete', old.id, old.text, coalesce(old.reason, ''));
    INSERT INTO rules_fts(rowid, text, reason) VALUES (new.id, new.text, coalesce(new.reason, ''));
END;

CREATE TABLE documents (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    arch TEXT,
    sources TEXT NOT NULL DEFAULT '',
    sha256 TEXT NOT NULL
);

CREATE TABLE sections (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ord INTEGER NOT NULL,
    heading_path TEXT NOT NULL,
    anchor TEXT NOT NULL,
    arch TEXT,
    body TEXT NOT NULL,
    UNIQUE (document_id, ord)
);
CREATE VIRTUAL TABLE sections_fts USING fts5(
    heading_path, body, content='sections', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER sections_ai AFTER INSERT ON sections BEGIN
    INSERT INTO sections_fts(rowid, heading_path, body) VALUES (new.id, new.heading_path, new.body);
END;
CREATE TRIGGER sections_ad AFTER DELETE ON sections BEGIN
    INSERT INTO sections_fts(sections_fts, rowid, heading_path, body) VALUES ('delete', old.id, old.heading_path, old.body);
END;
"""

# The knowledge layer's additions after m001: its database id (the origin written into exported
# rules) and per-origin imported counts, which make `rules import` of the same file idempotent;
# the index finds the rules a failure class maps to.
M003_KNOWLEDGE_IMPORTS = """
CREATE TABLE knowledge_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE rule_imports (
    rule_id INTEGER NOT NULL REFERENCES rules(id) ON DELETE CASCADE,
    origin TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (rule_id, origin)
);

CREATE INDEX rules_failure_class ON rules(failure_class, status);
"""

# The search layer's tables (kernelcraft/search/repository.py): trees, their nodes, and the leases that
# hand one step of a tree to one client. Budget counts evaluated candidates, the seed excluded.
M002_SEARCH_TREE = """
CREATE TABLE trees (
    id INTEGER PRIMARY KEY,
    task_hash TEXT NOT NULL REFERENCES code(hash),
    task_key TEXT NOT NULL,
    task_name TEXT NOT NULL,
    target TEXT NOT NULL,
    policy TEXT NOT NULL,
    params TEXT NOT NULL,
    budget INTEGER NOT NULL CHECK (budget >= 1),
    seed INTEGER NOT NULL,
    steps_issued INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done')),
    warm_start TEXT,
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX trees_task_hash ON trees(task_hash, target);
CREATE INDEX trees_task_key ON trees(task_key, target);

CREATE TABLE nodes (
    id INTEGER PRIMARY KEY,
    tree_id INTEGER NOT NULL REFERENCES trees(id),
    parent_id INTEGER REFERENCES nodes(id),
    kind TEXT NOT NULL CHECK (kind IN ('root', 'large', 'small')),
    seed INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL CHECK (status IN ('pending', 'evaluated')),
    step_index INTEGER,
    reason TEXT,
    context_ids TEXT,
    code_hash TEXT REFERENCES code(hash),
    verdict TEXT,
    outcome TEXT CHECK (outcome IN ('not_compiled', 'wrong', 'correct')),
    failure_class TEXT,
    speedup REAL,
    reward REAL,
    visits INTEGER NOT NULL DEFAULT 0,
    value_sum REAL NOT NULL DEFAULT 0,
    max_reward REAL NOT NULL DEFAULT 0,
    client TEXT NOT NULL,
    created_at TEXT NOT NULL,
    evaluated_at TEXT
);
CREATE INDEX nodes_tree ON nodes(tree_id, status);
CREATE INDEX nodes_parent ON nodes(parent_id);

CREATE TABLE leases (
    node_id INTEGER PRIMARY KEY REFERENCES nodes(id),
    tree_id INTEGER NOT NULL REFERENCES trees(id),
    client TEXT NOT NULL,
    kind TEXT NOT NULL,
    issued_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    released_at TEXT
);
CREATE INDEX leases_tree ON leases(tree_id, released_at, expires_at);
"""

M006_EVALUATED_FAILURES = """
ALTER TABLE failures ADD COLUMN evaluated INTEGER NOT NULL DEFAULT 0;
UPDATE failures SET evaluated = 1 WHERE id IN (SELECT failure_id FROM nodes WHERE failure_id IS NOT NULL);
ALTER TABLE rule_evidence ADD COLUMN proposed INTEGER NOT NULL DEFAULT 0;
"""

# Append-only: names are identifiers, the list order is the order applied. The search layer
# appends its m002 migration; the knowledge layer's m003 does not depend on it.
MIGRATIONS: list[Migration] = [
    Migration("m001_initial", M001_INITIAL),
    Migration("m003_knowledge_imports", M003_KNOWLEDGE_IMPORTS),
    Migration("m002_search_tree", M002_SEARCH_TREE),
    # The rulebook failure a failed node was recorded as, so a rule proposed later attaches to it.
    Migration(
        "m004_node_failure", "ALTER TABLE nodes ADD COLUMN failure_id INTEGER REFERENCES failures(id);"
    ),
    # A step closed without a candidate (SearchService.abandon): why, in place of a verdict.
    Migration("m005_abandoned_steps", "ALTER TABLE nodes ADD COLUMN abandoned_reason TEXT;"),
    # Provenance of the rulebook's evidence (knowledge/rulebook.py): failures.evaluated is 1 when
    # this server's own evaluator gave the failing verdict (a search-tree node, a candidate a tool
    # verified), not a client's word; failures already on a node were. rule_evidence.proposed is 1
    # when the failure's reporter proposed the rule's text, 0 when it was linked by class (and for
    # evidence recorded before this migration, whose kind is unknown).
    Migration("m006_evaluated_failures", M006_EVALUATED_FAILURES),
    # A tree's owner lets other clients read it (SearchService.share); '*' is every client.
    Migration(
        "m007_tree_shares",
        "CREATE TABLE tree_shares (tree_id INTEGER NOT NULL REFERENCES trees(id) ON DELETE CASCADE, "
        "client TEXT NOT NULL, shared_at TEXT NOT NULL, PRIMARY KEY (tree_id, client));",
    ),
]


class Store:
    """An open kernelcraft database. Open with `await Store.open(path)`; close with `aclose()`."""

    def __init__(self, conn: aiosqlite.Connection, path: Path | None) -> None:
        self.conn = conn
        self.path = path
        # One connection serves every coroutine of the process; without this lock two concurrent
        # tool calls would nest BEGIN IMMEDIATE on it ("cannot start a transaction within a
        # transaction"). Not reentrant: never open a transaction inside another.
        self._tx_lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str | Path, *, migrate: bool = True) -> Store:
        """Open (creating if needed) the database at `path`; ':memory:' for a private one."""
        in_memory = str(path) == ":memory:"
        file_path = None if in_memory else Path(path).expanduser()
        if file_path is not None:
            try:
                mode = file_path.stat().st_mode
            except FileNotFoundError:
                mode = None  # a new database
            except (OSError, ValueError) as e:
                raise StoreError(
                    f"cannot use {file_path}: {getattr(e, 'strerror', None) or e}; pass another --db"
                ) from None
            if mode is not None and not stat.S_ISREG(mode):
                raise StoreError(f"{file_path} is {kind_of(mode)}; give the path of a database file")
            try:
                file_path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(
                    f"cannot create {file_path.parent}: {e.strerror}; choose another --db"
                ) from e
            # SQLite opens a read-only file without complaint and fails at the first write, long
            # after a server has started: say so now.
            if file_path.exists() and not os.access(file_path, os.W_OK):
                raise _read_only(file_path, "the file is not writable by this user")
            _create_private(file_path)
        try:
            conn = await aiosqlite.connect(":memory:" if in_memory else str(file_path), isolation_level=None)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open database {file_path}: {e}; check the path and permissions") from e
        conn.row_factory = aiosqlite.Row
        store = cls(conn, file_path)
        try:
            await store._configure()
            if migrate:
                await store.migrate()
        except sqlite3.DatabaseError as e:
            await conn.close()
            raise _unusable(file_path, e) from e
        except BaseException:
            await conn.close()
            raise
        return store

    async def _configure(self) -> None:
        await self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if self.path is not None:
            await self.conn.execute("PRAGMA journal_mode = WAL")
            await self.conn.execute("PRAGMA synchronous = NORMAL")
        await self.conn.execute("PRAGMA foreign_keys = ON")
        tables = {
            r[0]
            for r in await self.conn.execute_fetchall("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if tables and "_migrations" not in tables:
            raise StoreError(
                f"{self.path} is a SQLite database but not a kernelcraft one (it has tables "
                f"{', '.join(sorted(tables)[:5])}); pass another --db"
            )

    async def migrate(self) -> list[str]:
        """Apply the migrations not yet recorded, in order. Returns the names applied."""
        await self.conn.execute(
            "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        done = {r[0] for r in await self.conn.execute_fetchall("SELECT name FROM _migrations")}
        known = {m.name for m in MIGRATIONS}
        unknown = done - known
        if unknown:
            raise StoreError(
                f"{self.path} was written by a newer kernelcraft (migrations {sorted(unknown)}); upgrade kernelcraft"
            )
        applied = []
        for m in MIGRATIONS:
            if m.name in done:
                continue
            async with self.transaction():
                if isinstance(m.apply, str):
                    for statement in _split_sql(m.apply):
                        await self.conn.execute(statement)
                else:
                    await m.apply(self.conn)
                await self.conn.execute(
                    "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (m.name, utcnow())
                )
            applied.append(m.name)
            logger.debug("applied migration %s", m.name)
        return applied

    async def check(self) -> None:
        """Read every page (`PRAGMA quick_check`, time linear in the file's size): a StoreError
        when the file is damaged. A server runs it once before serving, so a corrupt database
        is one line at start-up rather than a failure inside the first request."""
        try:
            rows = list(await self.conn.execute_fetchall("PRAGMA quick_check"))
        except sqlite3.DatabaseError as e:
            raise _unusable(self.path, e) from e
        problems = [str(r[0]) for r in rows if str(r[0]) != "ok"]
        if problems:
            raise _unusable(self.path, sqlite3.DatabaseError("; ".join(problems[:3])))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """BEGIN IMMEDIATE … COMMIT, rolled back on any exception. Disk-full becomes a StoreError;
        a wait of more than `TX_WAIT_S` for another request's transaction, a StalledError."""
        try:
            await asyncio.wait_for(self._tx_lock.acquire(), TX_WAIT_S)
        except asyncio.TimeoutError:
            raise StalledError(
                f"the database {self.path or ':memory:'} was held by another request of this process for "
                f"{TX_WAIT_S:g} s; the server's log says which. Retry the request"
            ) from None
        try:
            try:
                await self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                raise _store_error(e) from e
            try:
                yield self.conn
            except sqlite3.OperationalError as e:
                # SQLITE_FULL and friends inside the block: roll back, so nothing half-written stays.
                await self._rollback()
                raise _store_error(e) from e
            except BaseException:
                await self._rollback()
                raise
            try:
                await self.conn.execute("COMMIT")
            except sqlite3.OperationalError as e:
                await self._rollback()
                raise _store_error(e) from e
        finally:
            self._tx_lock.release()

    async def _rollback(self) -> None:
        # After some errors (SQLITE_FULL, SQLITE_IOERR) SQLite has already rolled back by itself.
        if self.conn.in_transaction:
            await self.conn.execute("ROLLBACK")

    async def put_code(self, source: str) -> str:
        """Store a source text once; returns its sha256. Call inside or outside a transaction."""
        digest = code_hash(source)
        await self.conn.execute(
            "INSERT INTO code (hash, source, created_at) VALUES (?, ?, ?) ON CONFLICT(hash) DO NOTHING",
            (digest, source, utcnow()),
        )
        return digest

    async def get_code(self, digest: str) -> str | None:
        rows = list(await self.conn.execute_fetchall("SELECT source FROM code WHERE hash = ?", (digest,)))
        return rows[0][0] if rows else None

    async def aclose(self) -> None:
        await self.conn.close()


def _unusable(path: Path | None, e: sqlite3.DatabaseError) -> StoreError:
    """What opening or migrating a database file that SQLite refuses means, and what to do."""
    if "readonly" in str(e) and path is not None:
        return _read_only(path, str(e))
    if "locked" in str(e) or "busy" in str(e):
        return _store_error(e)
    return StoreError(
        f"{path} is not a SQLite database or is corrupt ({e}); move it aside or pass another --db"
    )


def _read_only(path: Path, why: str) -> StoreError:
    return StoreError(
        f"{path} is read-only ({why}); kernelcraft writes to its database and keeps a WAL journal "
        f"beside it: make the file and {path.parent} writable for this user, or pass another --db "
        "(a copy you can write)"
    )


def _store_error(e: sqlite3.Error) -> StoreError:
    text = str(e)
    if "full" in text:
        return StoreError(
            f"the disk holding the database is full ({text}); free space and retry — nothing was written"
        )
    if "locked" in text or "busy" in text:
        return StoreError(f"the database stayed locked for {BUSY_TIMEOUT_MS / 1000:.0f} s ({text}); retry")
    if "readonly" in text:
        return StoreError(f"the database is read-only ({text}); check its permissions or pass another --db")
    return StoreError(f"database error: {text}")


def _split_sql(script: str) -> list[str]:
    """Split a migration script into statements, keeping CREATE TRIGGER … END; blocks whole."""
    statements: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                statements.append(buf.strip())
            buf = ""
    if buf.strip():
        statements.append(buf.strip())
    return statements


def _create_private(path: Path) -> None:
    """Create the database file readable by this user alone (SQLite gives its -wal and -shm files
    the database's mode), or close an existing one of ours: another user of the machine must not
    read recorded kernels or rules, nor write a rule (docs/security.md)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if p.exists():
                private(p)
    except OSError as e:
        raise StoreError(f"cannot create {path}: {e.strerror}; choose another --db") from e
