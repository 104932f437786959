"""What a worker leaves in the machine's /dev/shm goes with it (run in the parent, after the worker).

A CPU worker gets a /dev/shm of its own (mounts.py), gone with it. A GPU worker keeps the
machine's: PyTorch's CUDA IPC, by which its outputs reach the reference worker, keeps reference
counts in files there that both processes open. So when a worker is reaped, `sweep` removes every
top-level entry of /dev/shm that is owned by the workers' identity, was made after the worker
started, and is held by no live process (no open descriptor, no mapping): a candidate's files and
directories, whatever their names, go; a concurrent job's IPC files, held by its workers, stay.

Written by the evaluation engine only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

SHM = Path("/dev/shm")
NOBODY = 65534


def worker_uid() -> int:
    """The owner of what workers write: nobody when the server runs as root (box/__init__.py), else us."""
    return NOBODY if os.geteuid() == 0 else os.geteuid()


def held(root: Path = SHM) -> set[str]:
    """Paths under `root` that a live process has open or mapped (as far as /proc lets us read)."""
    prefix = f"{root}/"
    found: set[str] = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith(prefix):
                    found.add(target.removesuffix(" (deleted)"))
            with open(proc / "maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    at = line.find(prefix)
                    if at >= 0:
                        found.add(line[at:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:  # gone, or not ours to read
            continue
    return found


def sweep(since: float, uid: int | None = None, root: Path = SHM) -> list[str]:
    """Remove the entries of `root` owned by `uid` (default: `worker_uid()`), whose inode changed
    at or after `since` (a time.time(); half a second's slack), that no process holds. Returns the
    names removed."""
    uid = worker_uid() if uid is None else uid
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    candidates = []
    for entry in entries:
        try:
            st = entry.lstat()
        except OSError:
            continue
        if st.st_uid == uid and st.st_ctime >= since - 0.5:  # ctime: a candidate cannot set it back
            candidates.append(entry)
    if not candidates:
        return []
    busy = held(root)
    removed = []
    for entry in candidates:
        inside = f"{entry}/"
        if str(entry) in busy or any(p.startswith(inside) for p in busy):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError:
            continue
        removed.append(entry.name)
    return removed
