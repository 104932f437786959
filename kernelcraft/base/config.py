"""What the server and the CLI start from: the home, the database, `Settings`.

The home (`PathSettings.home`, KERNELCRAFT_HOME, default `~/.kernelcraft`) holds the database
(`kernelcraft.db`), the caches and run directories. A flag given on the command line beats the
environment, which beats the default. Nothing here reads the environment: the entry point parses
it once (`base/knobs.py`) and passes the `Knobs` (or their `paths`) in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from kernelcraft.base.errors import UsageError
from kernelcraft.base.knobs import EVAL_GRACE_S, Knobs, PathSettings


def home_dir(paths: PathSettings) -> Path:
    """The kernelcraft home directory (`paths.home`), created if missing. UsageError when it cannot
    be created or written (the database, its WAL journal and run directories live there)."""
    home = paths.home
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        private(home)
    except OSError as e:
        raise _unusable_home(home, e.strerror or type(e).__name__) from e
    if not os.access(home, os.W_OK | os.X_OK):
        raise _unusable_home(home, "not writable by this user")
    return home


def private(path: Path) -> None:
    """Close `path` (the home, the database) to other users when this user owns it: the server's
    state (rules, recorded kernels, run logs) is the server's alone (docs/security.md)."""
    st = path.stat()
    if st.st_uid == os.geteuid() and st.st_mode & 0o077:
        path.chmod(st.st_mode & 0o700)


def cache_file(paths: PathSettings, name: str) -> Path | None:
    """`name` in the home's cache folder, or None where the home cannot be used (a cache is an
    optimisation: its absence never stops a command)."""
    try:
        return home_dir(paths) / "cache" / name
    except UsageError:
        return None


def _unusable_home(home: Path, why: str) -> UsageError:
    return UsageError(
        f"KERNELCRAFT_HOME {home} cannot be used ({why}); set KERNELCRAFT_HOME to a directory you can "
        "write, or pass --db with a database file elsewhere"
    )


def default_db_path(paths: PathSettings) -> Path:
    """Where the database lives unless `--db` or `KERNELCRAFT_DB` (`paths.db`) says otherwise."""
    if paths.db is not None:
        return paths.db
    return home_dir(paths) / "kernelcraft.db"


@dataclass(frozen=True)
class Settings:
    """What the server and the CLI need to start. Built once, at start-up."""

    db_path: Path
    max_code_bytes: int = 1_000_000
    # Where candidates are evaluated: "local" (this machine's GPUs) or "ray" (a Ray cluster's,
    # at `ray_address`; None starts a one-machine cluster). See kernelcraft/engine/cluster/ray_evaluator.py.
    evaluator: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    memory_limit_gb: float | None = None
    """A cap on each candidate process (`serve --memory-limit-gb`); None: sized to each task."""
    eval_grace_s: float = EVAL_GRACE_S
    """Beyond a job's deadline, what a search step's evaluation may wait for workers and the GPU
    before the search service calls the evaluator stuck (`base/knobs.py`)."""
    audience: Literal["mcp", "cli"] = "mcp"
    """Who reads the answers' words (`base/voice.py`): an MCP client (tool names, resources), or a
    person at the command line (`kernelcraft` commands): the driver's in-process server."""
    knobs: Knobs = field(default_factory=Knobs)
    """Every `KERNELCRAFT_*` setting as the entry point read them (`base/knobs.py`): the evaluator
    the server makes gets its engine settings and home from here. Default: every default."""

    @property
    def rule_activation_count(self) -> int:
        """Corroborated failures before a proposed rule is injected (KERNELCRAFT_RULE_ACTIVATION)."""
        return self.knobs.server.rule_activation

    @property
    def text_content(self) -> Literal["summary", "json"]:
        """What a tool answer's text content holds (`server/tools/answers.py`): a summary for people,
        or the compact JSON for hosts that show their model only the text (KERNELCRAFT_TEXT_CONTENT)."""
        return self.knobs.server.text_content

    @classmethod
    def from_knobs(cls, knobs: Knobs, db_path: str | Path | None = None) -> Settings:
        """The settings `knobs` (read by the entry point) give, with the database `db_path` (a
        `--db`) or else theirs."""
        return cls(
            db_path=Path(db_path).expanduser() if db_path else default_db_path(knobs.paths), knobs=knobs
        )
