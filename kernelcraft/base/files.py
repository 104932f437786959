"""The files a user or a client names: only a regular file is read or written, within a size.

A FIFO would hang a read or a write until another process opened it, a device (/dev/zero) would
fill memory, a directory cannot be read as text: each is one `UsageError` naming the file and
what it is, before anything opens it.
"""

from __future__ import annotations

import stat
from pathlib import Path

from kernelcraft.base.errors import UsageError

MAX_TEXT_BYTES = 64 * 1024**2
"""The largest text file read whole (a rules file, a task, a tokens file)."""


def kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (a named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(path: Path, what: str, *, may_be_missing: bool = False) -> None:
    """A `UsageError` unless `path` is a regular file (or, `may_be_missing`, does not exist yet)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if may_be_missing:
            return
        raise UsageError(f"{what} {path} does not exist; check the path") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{what} {path} cannot be used: {e}") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"{what} {path} is {kind_of(mode)}, not a regular file; give the path of a file")


def read_text(path: Path, what: str, limit: int = MAX_TEXT_BYTES) -> str:
    """A regular file's text, at most `limit` bytes; a `UsageError` that says why otherwise."""
    check_regular(path, what)
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise UsageError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise UsageError(f"{what} {path} is over {limit // 1024**2} MiB; give a smaller file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{what} {path} is not UTF-8 text (byte {e.start}); give a text file") from None
