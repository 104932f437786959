"""The one SQLite database: migrations, concurrent writers, crash safety, bad files."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelcraft import store as store_module
from kernelcraft.base.errors import StoreError
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.store import MIGRATIONS, Store

ROOT = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).resolve().parents[1] / "knowledge_writer.py"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


@pytest.mark.anyio
async def test_migrations_from_a_blank_database_apply_every_migration_once(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    s = await Store.open(db, migrate=False)
    first = await s.migrate()
    second = await s.migrate()
    await s.aclose()
    assert first == [m.name for m in MIGRATIONS]
    assert second == []
    tables = _tables(db)
    for t in (
        "code",
        "failures",
        "rules",
        "rule_evidence",
        "rules_fts",
        "documents",
        "sections",
        "sections_fts",
    ):
        assert t in tables
    assert {"knowledge_meta", "rule_imports"} <= tables
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


BREAK_RULE = "You cannot use break inside a loop in a Triton kernel."


@pytest.mark.anyio
async def test_migrating_a_database_created_at_the_first_migration_keeps_its_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "old.db"
    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS[:1])
    s = await Store.open(db)
    # What the rulebook of m001's days wrote for a rule learnt three times: its row and evidence.
    async with s.transaction() as conn:
        now = store_module.utcnow()
        await conn.execute(
            "INSERT INTO rules (uid, text, norm_text, count, status, created_by, created_at, updated_at)"
            " VALUES ('r-old', ?, ?, 3, 'active', 'local', ?, ?)",
            (BREAK_RULE, BREAK_RULE.lower().rstrip("."), now, now),
        )
        for _ in range(3):
            cur = await conn.execute(
                "INSERT INTO failures (class, error_text, client, created_at)"
                " VALUES ('runtime_error', 'boom', 'local', ?)",
                (now,),
            )
            await conn.execute("INSERT INTO rule_evidence VALUES (1, ?)", (cur.lastrowid,))
    await s.aclose()
    assert "rule_imports" not in _tables(db)

    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS)
    s = await Store.open(db, migrate=False)
    applied = await s.migrate()
    rules = await Rulebook(s).list_rules()
    await Rulebook(s).database_id()  # uses m003's table
    await s.aclose()
    assert applied == [m.name for m in MIGRATIONS[1:]]
    assert len(rules) == 1 and rules[0].count == 3 and rules[0].status == "active"
    assert "rule_imports" in _tables(db)


@pytest.mark.anyio
async def test_a_database_from_a_newer_kernelcraft_is_refused_with_advice(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    await _open_close(db)
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO _migrations VALUES ('m999_future', 'x')")
    with pytest.raises(StoreError, match="newer kernelcraft.*upgrade"):
        await _open_close(db)


async def _open_close(db: Path) -> None:
    s = await Store.open(db)
    await s.aclose()


@pytest.mark.anyio
async def test_a_corrupt_file_gets_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "corrupt.db"
    db.write_bytes(b"this is not a database\n" * 200)
    with pytest.raises(StoreError, match="not a SQLite database or is corrupt.*another --db"):
        await _open_close(db)


@pytest.mark.anyio
async def test_a_truncated_database_gets_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    await _open_close(db)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = db.read_bytes()
    db.write_bytes(data[:100] + b"\xff" * (len(data) - 100))
    Path(str(db) + "-wal").unlink(missing_ok=True)
    with pytest.raises(StoreError):
        await _open_close(db)


@pytest.mark.anyio
async def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE moz_places (id INTEGER)")
    with pytest.raises(StoreError, match="not a kernelcraft one.*moz_places"):
        await _open_close(db)


@pytest.mark.anyio
async def test_a_directory_as_database_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        await _open_close(tmp_path)


@pytest.mark.anyio
async def test_concurrent_coroutines_share_one_connection_without_nesting_transactions(
    tmp_path: Path,
) -> None:
    s = await Store.open(tmp_path / "k.db")
    rb = Rulebook(s)
    await asyncio.gather(
        *(rb.record_failure(f"c{i}", f"e{i}", rule=f"You cannot do thing t{i}.") for i in range(30))
    )
    n = (await s.conn.execute_fetchall("SELECT count(*) FROM failures"))[0][0]  # type: ignore[index]
    await s.aclose()
    assert n == 30


@pytest.mark.slow
@pytest.mark.anyio
async def test_sixteen_writer_processes_recording_100_failures_each_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    await _open_close(db)  # migrate once, so the writers race only on data
    procs = [
        subprocess.Popen(
            [sys.executable, str(WRITER), str(db), str(w), "100"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for w in range(16)
    ]
    printed: list[int] = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        printed += [int(x) for x in out.split()]
    assert len(printed) == 1600 == len(set(printed))
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM failures").fetchone()[0] == 1600
        assert conn.execute("SELECT count(*) FROM rules").fetchone()[0] == 1600
        assert conn.execute("SELECT count(*) FROM rule_evidence").fetchone()[0] == 1600
        assert conn.execute("SELECT count(DISTINCT client) FROM failures").fetchone()[0] == 16
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_writer_killed_mid_write_leaves_an_intact_database_with_every_committed_row(
    tmp_path: Path,
) -> None:
    db = tmp_path / "k.db"
    await _open_close(db)
    p = subprocess.Popen(
        [sys.executable, str(WRITER), str(db), "0", "100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    committed: list[int] = []
    assert p.stdout is not None
    deadline = time.monotonic() + 60
    while len(committed) < 150 and time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        committed.append(int(line))
    os.kill(p.pid, signal.SIGKILL)  # while it is in the middle of its next transactions
    rest, _ = p.communicate(timeout=30)
    committed += [int(x) for x in rest.split()]
    assert p.returncode == -signal.SIGKILL
    assert len(committed) >= 150

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        ids = {r[0] for r in conn.execute("SELECT id FROM failures")}
        assert set(committed) <= ids
        # Nothing half-written: every failure has its evidence and its rule.
        assert conn.execute("SELECT count(*) FROM rule_evidence").fetchone()[0] == len(ids)
        fts = conn.execute("SELECT count(*) FROM rules_fts WHERE rules_fts MATCH 'mask'").fetchone()[0]
        assert fts == conn.execute("SELECT count(*) FROM rules").fetchone()[0]

    s = await Store.open(db)
    r = await Rulebook(s).record_failure("after", "again", rule="You cannot write after a crash.")
    await s.aclose()
    assert r.failure_id > max(committed)


@pytest.mark.anyio
async def test_code_is_content_addressed(tmp_path: Path) -> None:
    s = await Store.open(tmp_path / "k.db")
    async with s.transaction():
        a = await s.put_code("x = 1\n")
        b = await s.put_code("x = 1\n")
    src = await s.get_code(a)
    await s.aclose()
    assert a == b and len(a) == 64 and src == "x = 1\n"


@pytest.mark.anyio
async def test_a_full_disk_is_a_clear_error_that_loses_nothing_and_writes_resume_after(
    tmp_path: Path,
) -> None:
    # SQLite's max_page_count makes the database file "full" exactly as a full disk does (SQLITE_FULL).
    store = await Store.open(tmp_path / "kc.db")
    try:
        rb = Rulebook(store)
        first = await rb.record_failure("kernel 1", "boom", failure_class=None)
        pages = (await store.conn.execute_fetchall("PRAGMA page_count"))[0][0]
        await store.conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreError) as caught:
            await rb.record_failure("x" * 200_000, "a failure too big for the space left")
        kept = (await store.conn.execute_fetchall("SELECT count(*) FROM failures"))[0][0]
        await store.conn.execute("PRAGMA max_page_count = 1073741823")
        again = await rb.record_failure("kernel 2", "boom again")
        assert again.failure_id > first.failure_id
        total = (await store.conn.execute_fetchall("SELECT count(*) FROM failures"))[0][0]
    finally:
        await store.aclose()
    message = str(caught.value)
    assert "full" in message and "nothing was written" in message
    assert kept == 1  # the failed write left nothing half-done; the earlier row is there
    assert total == 2
