"""A process's log, read by the parent through the descriptor it opened, never by path.

A worker's log lies in the worker's own directory, which the worker may write: a worker that
replaces its log with a symlink (to the server's tokens file, say) and dies must not get the
parent to read that file and return it in a verdict. So the parent opens the log itself, before
the process starts (`O_CREAT | O_EXCL | O_NOFOLLOW`: a fresh regular file, never a link), hands
the process that descriptor as its stdout and stderr, and reads the tail back through the same
descriptor, at most `limit` bytes from its end (`tail`): what the path names afterwards does not
matter. Used by the worker pool (`machine/pool.py`) and the zygote (`zygote.py`).
"""

from __future__ import annotations

import os
from pathlib import Path

FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def create(path: Path, *, fresh: bool = True) -> int:
    """A descriptor on a new log at `path` (read and append). `fresh`: the file must not exist
    yet (a worker's, in its new directory); else an existing regular file is appended to (the
    zygote's). `OSError` when `path` is a link or not a regular file."""
    fd = os.open(path, FLAGS | (os.O_EXCL if fresh else 0), 0o600)
    if not _regular(fd):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def _regular(fd: int) -> bool:
    import stat

    return stat.S_ISREG(os.fstat(fd).st_mode)


def tail(fd: int | None, limit: int) -> str:
    """The last `limit` bytes written through `fd` (decoded leniently); "" when there is none."""
    if fd is None:
        return ""
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        return os.pread(fd, min(limit, size - start), start).decode("utf-8", "replace")
    except OSError:
        return ""


def close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
