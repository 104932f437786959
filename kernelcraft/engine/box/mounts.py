"""The worker's own view of the filesystem: a mount namespace (box/__init__.py's point 1).

Run by root, before the worker becomes nobody: directories closed to other users on the way to
what the worker needs (a pyenv under /root) are covered by an empty tmpfs into which only those
paths are bound back, and a CPU worker gets a /dev/shm of its own. The parts bubblewrap builds a
sandbox's filesystem from (tmpfs, bind mounts, read-only remounts), through mount(2) by ctypes.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

from kernelcraft.engine.box import sandbox

_CLONE_NEWNS = 0x20000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = (
    1,
    2,
    4,
    32,
    4096,
    16384,
    1 << 18,
)
SHM_BYTES = 256 * 1024**2
"""The size of a CPU worker's own /dev/shm (box/__init__.py's point 1): no kernel needs more there."""
WORKDIR_BYTES = 512 * 1024**2
"""The size of the tmpfs a worker's own directory becomes: Triton's and inductor's caches, a
candidate's scratch files; the disk below is not written (its pages count in its memory cgroup)."""


def private_mounts(libc: Any, workdir: str | None, cpu: bool, missing: dict[str, str]) -> None:
    """A mount namespace of the worker's own (root only), in which:
    - its own directory is a tmpfs of `WORKDIR_BYTES` (what the pool put there copied in): what
      it writes there is bounded and never reaches the disk;
    - a CPU worker's /dev/shm is a fresh tmpfs (nosuid, nodev, SHM_BYTES), gone with the worker:
      nothing it leaves there outlives the evaluation or reaches another (a GPU worker keeps the
      machine's: CUDA IPC's reference counts live there, shared with the reference worker);
    - a directory closed to other users on the way to what the worker needs (a Python under
      /root) is covered by an empty tmpfs into which only the needed directories are bound back,
      read-only, nosuid, nodev; everything else in it (the server's home, its database and
      tokens, a user's keys) is not there at all. Then nobody can run the worker (1).
    Each step that fails is skipped and named in `missing`; box/__init__.py then says what keeps the
    worker root."""
    if libc.unshare(_CLONE_NEWNS) != 0:
        missing["mountns"] = os.strerror(ctypes.get_errno())
        return
    if _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE) is not None:
        missing["mountns"] = "the mounts could not be made private"
        return
    workdir = os.path.realpath(workdir) if workdir else None
    if workdir:
        why = _workdir_on_tmpfs(libc, workdir)
        if why is not None:
            missing["disk"] = why
    if cpu and os.path.isdir("/dev/shm"):
        inside = [workdir] if workdir and workdir.startswith("/dev/shm/") else []  # its own directory stays
        why = _cover(libc, "/dev/shm", inside, f"mode=1777,size={SHM_BYTES}", read_only=False)
        if why is not None:
            missing["shm"] = why
    for closed, needed in sorted(_closed_dirs(workdir).items(), key=lambda kv: kv[0].count("/")):
        why = _cover(libc, closed, needed, "mode=0755,size=1m", read_only=True, writable=workdir)
        if why is not None:
            missing["identity-mounts"] = why


def _workdir_on_tmpfs(libc: Any, workdir: str) -> str | None:
    """Mount a tmpfs of `WORKDIR_BYTES` on the worker's directory and copy what the pool put there
    (its caches' seeds) into it: what the worker writes there is bounded and never reaches the
    disk. None when it worked, else why not."""
    try:
        below = os.open(workdir, os.O_PATH | os.O_DIRECTORY)
    except OSError as e:
        return f"{workdir}: {e.strerror}"
    try:
        why = _mount(
            libc, "tmpfs", workdir, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0700,size={WORKDIR_BYTES}"
        )
        if why is not None:
            return why
        try:  # (the log is not copied: the worker writes it through the descriptor it was started with)
            shutil.copytree(
                f"/proc/self/fd/{below}", workdir, symlinks=True, dirs_exist_ok=True, ignore=_LOG_ONLY
            )
        except (OSError, shutil.Error) as e:
            return f"could not copy {workdir} onto its tmpfs: {e}"
        os.chdir(workdir)  # its working directory was the one below, now covered
        return None
    finally:
        os.close(below)


def _LOG_ONLY(directory: str, names: list[str]) -> list[str]:  # noqa: N802  (shutil's ignore=)
    return ["output.log"] if "output.log" in names else []


def _closed_dirs(workdir: str | None) -> dict[str, list[str]]:
    """Directory closed to other users -> the paths beneath it the worker needs (its own
    directory among them, which stays writable)."""
    out: dict[str, list[str]] = {}
    needed = [workdir] if workdir else []
    needed += [*sandbox.python_dirs(), *(p for p in sys.path if p and os.path.isdir(p))]
    for path in dict.fromkeys(os.path.realpath(p) for p in needed):
        # Every closed directory on the way gets a cover, outermost first (`private_mounts` sorts
        # them): into each, the next step towards the needed path is bound back, and a needed
        # directory that is itself closed (a checkout cloned into a 0700 directory, on sys.path)
        # gets back what in it others may read (its packages).
        for closed in closed_chain(path):
            if closed.startswith("/proc"):
                continue
            if closed == path == workdir:
                continue  # its own directory: the worker becomes its owner (box/__init__.py)
            if closed == path:
                out.setdefault(closed, []).extend(_public_children(path))
            else:
                out.setdefault(closed, []).append(path)
    return out


def _public_children(path: str) -> list[str]:
    """The entries of `path` other users may read (directories they may enter, files they may
    read), hidden ones left out."""
    found: list[str] = []
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return found
    for name in names:
        if name.startswith("."):
            continue
        full = os.path.join(path, name)
        try:
            mode = os.stat(full).st_mode
        except OSError:
            continue
        if (stat.S_ISDIR(mode) and mode & 0o005 == 0o005) or (stat.S_ISREG(mode) and mode & 0o004):
            found.append(full)
    return found


def _cover(
    libc: Any, top: str, needed: list[str], options: str, *, read_only: bool, writable: str | None = None
) -> str | None:
    """Cover `top` with an empty tmpfs (nosuid, nodev, `options`) and bind `needed` (paths beneath
    it) back (read-only when asked, except `writable`, the worker's own directory). None when it
    worked, else why not."""
    keep = sorted(
        p for p in needed if p == writable or not any(p != q and p.startswith(q + "/") for q in needed)
    )
    try:
        fds = [os.open(p, os.O_PATH) for p in keep]
    except OSError as e:
        return f"{top}: {e.strerror}"
    try:
        why = _mount(libc, "tmpfs", top, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
        if why is not None:
            return why
        for path, fd in zip(keep, fds, strict=True):
            if stat.S_ISREG(os.fstat(fd).st_mode):  # a file is bound onto a file
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                with open(path, "a"):
                    pass
            else:
                os.makedirs(path, mode=0o755, exist_ok=True)
            if _mount(libc, f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC) is not None:
                continue
            flags = _MS_NOSUID | _MS_NODEV | (_MS_RDONLY if read_only and path != writable else 0)
            _mount(libc, None, path, None, _MS_BIND | _MS_REMOUNT | flags)
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _mount(
    libc: Any, source: str | None, target: str, fstype: str | None, flags: int, data: str = ""
) -> str | None:
    """mount(2); None when it worked, else why not."""
    enc = lambda x: None if x is None else x.encode()  # noqa: E731
    if (
        libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data) if data else None)
        != 0
    ):
        return f"mount {target}: {os.strerror(ctypes.get_errno())}"
    return None


def closed_to_others(path: str) -> str | None:
    """The first directory on the way to `path` that other users cannot enter, or None."""
    chain = closed_chain(path)
    return chain[0] if chain else None


def closed_chain(path: str) -> list[str]:
    """Every directory on the way to `path` (itself included) that other users cannot enter,
    outermost first; the walk stops where a step cannot be read."""
    parts = Path(path).parts
    out = []
    for i in range(1, len(parts) + 1):
        step = os.path.join(*parts[:i])
        try:
            if os.stat(step).st_mode & stat.S_IXOTH == 0:
                out.append(step)
        except OSError:
            break
    return out
