"""Bytecode for a Python that keeps none: a cache of kernelcraft's own for its processes' imports.

Where Python writes no bytecode (`PYTHONDONTWRITEBYTECODE`, which many container images set, or
site-packages it cannot write) and torch was installed without any, every fresh process compiles
torch's ~2,000 modules from source. On the H200 machine we test on (torch installed that way) that
was 2.7 s to import torch and 3.2 s more for torch._dynamo, most of a first verdict from the CLI.
There `use_cache()` (the CLI, as it starts) and `add_to_env()` (the evaluator's zygote and workers)
keep bytecode in KERNELCRAFT_HOME/cache/pycache (`PYTHONPYCACHEPREFIX`), so only the first process
compiles; nothing is written beside the sources.

Left alone: a `PYTHONPYCACHEPREFIX` already set, a torch with bytecode beside its sources (a prefix
would hide it), a Python that will write that bytecode itself, and the `bytecode_cache` setting off
(KERNELCRAFT_BYTECODE_CACHE=off: the caller passes the `Knobs` its entry point read, `base/knobs.py`).

Who writes, who reads. Only the user's own processes write the folder: the CLI, the zygote, and the
warm-up process that imports what a profile's torch.compile imports (`engine/startup/prebuilt.py`).
A worker that left root for nobody reads it: the folder is 0711 (entered, not listed; what Python
writes in it is as readable as the sources it was compiled from; 0700, and no reading, under a
umask that leaves group or other write) and the worker opens it before it
leaves root, then reads it through that handle (`/proc/self/fd/N`: `keep_handle`, `read_through`),
so a home under a closed /root does not stop it. Nobody cannot write it; nor can a candidate that
stays root in its namespace, where the box's Landlock rules hold. A worker with nothing to read
compiles what it imports late from source, as before.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from kernelcraft.base.config import cache_file
from kernelcraft.base.knobs import Knobs

_in_use: list[Path] = []  # the folder `use_cache()` gave this process


def _torch_keeps_no_bytecode() -> bool:
    """True when torch has no bytecode beside its sources and this Python will not write it."""
    try:
        spec = importlib.util.find_spec("torch")  # finds the package without importing it
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    if os.path.exists(importlib.util.cache_from_source(spec.origin)):
        return False
    writes = not sys.flags.dont_write_bytecode and not os.environ.get("PYTHONDONTWRITEBYTECODE")
    return not (writes and os.access(os.path.dirname(spec.origin), os.W_OK))


def cache_dir(settings: Knobs) -> Path | None:
    """Where this machine's Python should keep bytecode for kernelcraft's processes, or None
    where it needs no help (or may not have it, or `settings` switch it off)."""
    if not settings.engine.bytecode_cache:
        return None
    if os.environ.get("PYTHONPYCACHEPREFIX") or sys.pycache_prefix:
        return None
    if not _torch_keeps_no_bytecode():
        return None
    path = cache_file(settings.paths, "pycache")
    if path is None:
        return None
    # Workers may enter it only where what Python writes inside is closed to others' writes (a
    # umask with 022): under a looser umask its folders would be anyone's to fill with bytecode
    # that the next zygote runs.
    mode = 0o711 if _umask() & 0o022 == 0o022 else 0o700
    try:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
        st = path.stat()
        if st.st_uid == os.geteuid() and st.st_mode & 0o777 in (0o700, 0o711) and st.st_mode & 0o777 != mode:
            if mode == 0o711:  # opening it: what a looser umask wrote there before is closed first
                _close_to_others_writes(path)
            path.chmod(mode)
    except OSError:
        return None
    return path


def _close_to_others_writes(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            if st.st_mode & 0o022 and not os.path.islink(p):
                os.chmod(p, st.st_mode & 0o7755)


def _umask() -> int:
    """This process's umask (read, not changed, where Linux tells it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def use_cache(settings: Knobs) -> Path | None:
    """Keep this process's own imports' bytecode in `cache_dir()` (the CLI, before it imports
    anything large). Returns the folder, or None where nothing changed."""
    path = cache_dir(settings)
    if path is not None:
        sys.pycache_prefix = str(path)
        sys.dont_write_bytecode = False
        _in_use[:] = [path]
    return path


def add_to_env(env: dict[str, str], settings: Knobs) -> Path | None:
    """Point `env`, a child Python's (the evaluator's zygote or a worker), at `cache_dir()`.
    Returns the folder, or None where no cache is needed (`env` unchanged)."""
    if not settings.engine.bytecode_cache:
        return None
    path = _in_use[0] if _in_use else cache_dir(settings)
    if path is None or env.get("PYTHONPYCACHEPREFIX"):
        return None
    env["PYTHONPYCACHEPREFIX"] = str(path)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return path


def keep_handle() -> int | None:
    """In a worker, before it leaves root: a handle on the folder this process reads bytecode from
    (`sys.pycache_prefix`), or None where there is none."""
    if not sys.pycache_prefix:
        return None
    try:
        return os.open(sys.pycache_prefix, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def read_through(handle: int | None) -> None:
    """After it left root: read the folder through `handle` where its path is out of reach now (a
    home under /root), so that what the job imports late comes from bytecode."""
    prefix = sys.pycache_prefix
    if handle is None or not prefix or os.access(prefix, os.R_OK | os.X_OK):
        return
    through = f"/proc/self/fd/{handle}"
    if os.access(through, os.X_OK):
        sys.pycache_prefix = through
