"""Bytecode for a Python that keeps none: a cache of kernelcraft's own for its processes' imports.

Where Python writes no bytecode (`PYTHONDONTWRITEBYTECODE`, which many container images set, or
site-packages it cannot write) and torch was installed without any, every fresh process compiles
torch's ~2,000 modules from source. On the H200 machine we test on (torch installed that way) that
was 2.7 s to import torch and 3.2 s more for torch._dynamo, most of a first verdict from the CLI.
There `use_cache()` (the CLI, as it starts) and `add_to_env()` (the evaluator's zygote and workers)
keep bytecode in KERNELCRAFT_HOME/cache/pycache (`PYTHONPYCACHEPREFIX`), so only the first process
compiles; nothing is written beside the sources.

Left alone: a `PYTHONPYCACHEPREFIX` already set, a torch with bytecode beside its sources (a prefix
would hide it), a Python that will write that bytecode itself, and `KERNELCRAFT_BYTECODE_CACHE=off`.
The folder is the user's own (0700): a worker that left root for nobody cannot read it and compiles
what it imports late, as before; no candidate can write it (the box's Landlock rules).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from kernelcraft.base.config import cache_file, env_switch

SWITCH = "KERNELCRAFT_BYTECODE_CACHE"
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


def cache_dir() -> Path | None:
    """Where this machine's Python should keep bytecode for kernelcraft's processes, or None
    where it needs no help (or may not have it)."""
    if not env_switch(SWITCH):
        return None
    if os.environ.get("PYTHONPYCACHEPREFIX") or sys.pycache_prefix:
        return None
    if not _torch_keeps_no_bytecode():
        return None
    path = cache_file("pycache")
    if path is None:
        return None
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    return path


def use_cache() -> Path | None:
    """Keep this process's own imports' bytecode in `cache_dir()` (the CLI, before it imports
    anything large). Returns the folder, or None where nothing changed."""
    path = cache_dir()
    if path is not None:
        sys.pycache_prefix = str(path)
        sys.dont_write_bytecode = False
        _in_use[:] = [path]
    return path


def add_to_env(env: dict[str, str]) -> Path | None:
    """Point `env`, a child Python's (the evaluator's zygote or a worker), at `cache_dir()`.
    Returns the folder, or None where no cache is needed (`env` unchanged)."""
    path = _in_use[0] if _in_use else cache_dir()
    if path is None or env.get("PYTHONPYCACHEPREFIX"):
        return None
    env["PYTHONPYCACHEPREFIX"] = str(path)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return path
