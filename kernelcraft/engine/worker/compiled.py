"""A candidate worker's side of `machine/kernelcache.py`: what earlier processes of its candidate
compiled, written into its own Triton cache before the candidate is imported (`seed`), and what
it compiled, sent back at the end of the job (`collect`).

The worker's directory, Triton cache included, is a tmpfs of its own mount namespace
(`box/mounts.py`): only the channel carries files in and out. What `collect` sends is read by the
evaluator as the candidate's words (checked, and given to no other candidate: `kernelcache.py`).
Runs in the worker process only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

GROUP = "__grp__"
"""Triton's group files: which files make up one compiled kernel, by absolute path."""
SEND_BYTES = 48 * 1024**2
"""What `collect` sends at most (the parent takes up to `wire/bounds.COMPILED_FILES_BYTES`)."""


def cache_dir() -> Path:
    """This worker's Triton cache (`pool.own_env`)."""
    return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def seed(names: list[str], blobs: list[bytes]) -> None:
    """Write each KEY/FILE of `names` (the parent's, checked when it kept them) into the Triton
    cache; a group file's children, given by name, get this cache's paths."""
    cache = cache_dir()
    for name, data in zip(names, blobs, strict=True):
        key, file = name.split("/")
        folder = cache / key
        folder.mkdir(parents=True, exist_ok=True)
        if file.startswith(GROUP):
            children = json.loads(data)["child_paths"]
            data = json.dumps({"child_paths": {c: str(folder / b) for c, b in children.items()}}).encode()
        (folder / file).write_bytes(data)


def collect(known: list[str]) -> tuple[list[str], list[bytes]]:
    """The Triton cache's KEY/FILE files of every key not in `known` (those it was given), up to
    `SEND_BYTES`; a key that does not fit whole is left out."""
    cache = cache_dir()
    names: list[str] = []
    blobs: list[bytes] = []
    left = SEND_BYTES
    skip = set(known)
    try:
        keys = sorted(p for p in cache.iterdir() if p.is_dir() and p.name not in skip)
    except OSError:
        return [], []
    for key in keys:
        files = sorted(f for f in key.iterdir() if f.is_file() and not f.is_symlink())
        size = sum(f.stat().st_size for f in files)
        if not files or size > left:
            continue
        for f in files:
            names.append(f"{key.name}/{f.name}")
            blobs.append(f.read_bytes())
        left -= size
    return names, blobs
