"""Threat: another user of the machine, or a worker that escaped its identity, reads or writes the
server's state. The home, the database (with its journal) and the tokens file are the server's
user's alone (docs/security.md, "Server state")."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kernelcraft.base.config import home_dir
from kernelcraft.base.errors import UsageError
from kernelcraft.base.knobs import PathSettings
from kernelcraft.server.auth import load_tokens_file
from kernelcraft.store import Store


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.anyio
async def test_database_is_readable_by_the_server_alone(tmp_path: Path) -> None:
    db = tmp_path / "kernelcraft.db"
    store = await Store.open(db)
    try:
        await store.conn.execute("SELECT 1")
    finally:
        await store.aclose()
    for p in tmp_path.iterdir():
        assert _mode(p) & 0o077 == 0, (p, oct(_mode(p)))


@pytest.mark.anyio
async def test_an_existing_world_readable_database_is_closed_at_open(tmp_path: Path) -> None:
    db = tmp_path / "kernelcraft.db"
    await (await Store.open(db)).aclose()
    db.chmod(0o644)
    store = await Store.open(db)
    await store.aclose()
    assert _mode(db) == 0o600


def test_home_is_closed_to_other_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    assert home_dir(PathSettings(home=home)) == home
    assert _mode(home) == 0o700


def test_server_refuses_a_tokens_file_other_users_can_read(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("s3cr3t-token-for-alice=alice\n")
    path.chmod(0o644)
    with pytest.raises(UsageError, match="chmod 600"):
        load_tokens_file(path)
    path.chmod(0o600)
    assert load_tokens_file(path) == {"s3cr3t-token-for-alice": "alice"}
