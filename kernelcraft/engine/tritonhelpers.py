"""Triton's C helpers, built once by a trusted process and copied into each GPU worker's cache.

The first time a process uses Triton's GPU driver, Triton compiles a small C module of its own
(`cuda_utils` on NVIDIA, `hip_utils` on AMD) with the machine's C compiler and keeps it in its
cache. Each worker has a Triton cache of its own (a candidate must not write where another job
reads), so every candidate's first launch paid that compile again: 0.47 s of a 4.6 s first verdict
on the H200 (`bench/probe_first_verdict.py`).

Here a throwaway process that never sees a task or a candidate (`python -m
kernelcraft.engine.tritonhelpers FOLDER`, started in the background by a GPU pool when the folder
is missing) builds the helpers once into KERNELCRAFT_HOME/cache/triton-helpers/<which Triton>-
<Python tag>, and `seed` copies them into each new GPU worker's cache. Triton finds them there by
its own key (a hash of the helper's source and the platform), so a Triton that would build
something else ignores the copy and compiles as before. Workers started before the build ends
compile as before. Only the kernel launchers (a C stub per kernel signature, built from what a
candidate's kernels declare) are still compiled in each worker: none is shared between jobs.

KERNELCRAFT_TRITON_HELPERS=off turns this off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kernelcraft.base.config import cache_file, env_switch

log = logging.getLogger(__name__)

SWITCH = "KERNELCRAFT_TRITON_HELPERS"


_builders: list[subprocess.Popen[bytes]] = []


@functools.cache
def _triton_install() -> str | None:
    """Which Triton this is, without importing it (or importlib.metadata, 55 ms): its location and
    its package file's modification time and size, which change when it is reinstalled."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        st = os.stat(spec.origin)
    except OSError:
        return None
    where = f"{os.path.realpath(spec.origin)}:{st.st_mtime_ns}:{st.st_size}"
    return hashlib.sha256(where.encode()).hexdigest()[:16]


def folder() -> Path | None:
    """Where this machine's Triton helpers are kept, or None where they are not (switched off,
    no Triton, no usable KERNELCRAFT_HOME)."""
    install = _triton_install()
    if not env_switch(SWITCH) or install is None:
        return None
    return cache_file(f"triton-helpers/{install}-{sys.implementation.cache_tag}")


def build_in_background(env: dict[str, str]) -> None:
    """Start the builder when the helpers are missing and no builder of this process is still at
    it (`env`: a worker's). Nobody waits for it; a failed build is tried again by the next pool."""
    target = folder()
    if target is None or target.exists() or any(b.poll() is None for b in _builders):
        return
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        builder = subprocess.Popen(
            [sys.executable, "-m", "kernelcraft.engine.tritonhelpers", str(target)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=target.parent,
        )
    except OSError as e:
        log.debug("Triton's helpers are not built ahead: %s", e)
        return
    _builders[:] = [b for b in _builders if b.poll() is None] + [builder]


def seed(cache_dir: Path) -> bool:
    """Copy the built helpers into `cache_dir` (a new worker's Triton cache). False when there
    are none yet."""
    source = folder()
    if source is None or not source.is_dir():
        return False
    try:
        shutil.copytree(source, cache_dir, dirs_exist_ok=True)
    except OSError as e:  # the worker compiles them itself, as it did before
        log.debug("Triton's helpers were not copied into %s: %s", cache_dir, e)
        return False
    return True


def build(target: Path) -> None:
    """Build Triton's helpers for the active GPU driver into `target` (renamed into place whole,
    so a reader sees all of it or nothing; a concurrent builder's copy wins)."""
    work = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        os.environ["TRITON_CACHE_DIR"] = str(work / "cache")
        os.environ["TRITON_HOME"] = str(work)
        from triton.runtime import driver

        driver.active.utils  # noqa: B018  (compiles and loads the helpers, into the cache)
        built = work / "cache"
        if any(built.rglob("*.so")):
            with contextlib.suppress(OSError):  # another builder got there first
                built.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    build(Path(sys.argv[1]))
