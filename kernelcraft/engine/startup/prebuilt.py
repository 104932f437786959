"""What a trusted process builds once per machine for every GPU worker: Triton's C helpers, and
the bytecode of what a profile's torch.compile imports.

Triton's helpers. The first time a process uses Triton's GPU driver, Triton compiles a small C
module of its own (`cuda_utils` on NVIDIA, `hip_utils` on AMD) with the machine's C compiler and
keeps it in its cache. Each worker has a Triton cache of its own (a candidate must not write where
another job reads), so every candidate's first launch paid that compile: 0.47 s of a 4.6 s first
verdict on the H200 (`bench/probe_first_verdict.py`). Built once into
the home's cache/triton-helpers/<which Triton>-<Python tag>, they are copied into each new GPU
worker's cache (`seed`), where Triton finds them by its own key (a hash of the helper's source and
the platform): a Triton that would build something else ignores the copy and compiles as before.
Only the kernel launchers (a C stub per kernel signature, built from what a candidate's kernels
declare) are still compiled in each worker: none is shared between jobs.

torch.compile's bytecode. Where kernelcraft keeps bytecode for a Python that keeps none
(`base/bytecode.py`), the processes that import torch's inductor are the reference workers, which
have left root and cannot write there: each compiled inductor from source (7 s of a first profile
on the H200). The builder runs a small torch.compile on the GPU with that cache in use, so its
imports are written once by this user and read by the workers from then on.

The builder (`python -m kernelcraft.engine.startup.prebuilt FOLDER`) never sees a task or a candidate. A
GPU pool starts it in the background when something is missing (`build_in_background`), and not
again for an hour after it failed; workers started before it ends do as they did before.
The `prebuilt` setting (KERNELCRAFT_PREBUILT=off) turns this off: each function takes the `Knobs`
its pool was given (`base/knobs.py`).
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
import time
import traceback
from pathlib import Path
from typing import Any

from kernelcraft.base.config import cache_file
from kernelcraft.base.knobs import Knobs

log = logging.getLogger(__name__)

FAILED = "prebuilt.failed"
"""In KERNELCRAFT_HOME's cache: touched when a build failed."""
RETRY_AFTER_S = 3600.0
_builders: list[subprocess.Popen[bytes]] = []


@functools.cache
def installed(package: str) -> str | None:
    """Which install of `package` this is, without importing it (or importlib.metadata, 55 ms):
    its location and its package file's modification time and size, changed by a reinstall."""
    try:
        spec = importlib.util.find_spec(package)
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


def folder(settings: Knobs) -> Path | None:
    """Where this machine's Triton helpers are kept, or None where they are not (the `prebuilt`
    setting off, no Triton, no usable home)."""
    triton = installed("triton")
    if not settings.engine.prebuilt or triton is None:
        return None
    return cache_file(settings.paths, f"triton-helpers/{triton}-{sys.implementation.cache_tag}")


def _compile_bytecode_missing(env: dict[str, str], settings: Knobs) -> bool:
    """Whether `env` keeps bytecode in a cache of kernelcraft's (`base/bytecode.py`) that lacks
    inductor's (what the builder's torch.compile writes)."""
    prefix = env.get("PYTHONPYCACHEPREFIX")
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    if not prefix or spec is None or not spec.origin or not settings.engine.prebuilt:
        return False
    # Python's layout under a prefix: the source's absolute folder, then NAME.TAG.pyc
    folder_of = os.path.join(os.path.dirname(os.path.abspath(spec.origin)), "_inductor").lstrip(os.sep)
    return not os.path.exists(
        os.path.join(prefix, folder_of, f"compile_fx.{sys.implementation.cache_tag}.pyc")
    )


def _failed_lately(marker: Path | None) -> bool:
    try:
        return marker is not None and time.time() - marker.stat().st_mtime < RETRY_AFTER_S
    except OSError:
        return False


def build_in_background(env: dict[str, str], settings: Knobs) -> None:
    """Start the builder when something is missing and no builder of this process is still at it
    (`env`: the workers'). Nobody waits for it. A build that failed (no C compiler, a broken
    torch.compile) is not tried again for `RETRY_AFTER_S`."""
    target, marker = folder(settings), cache_file(settings.paths, FAILED)
    helpers, compiled = target is not None and not target.exists(), _compile_bytecode_missing(env, settings)
    if not (helpers or compiled) or any(b.poll() is None for b in _builders):
        return
    if _failed_lately(marker):
        return
    try:
        if marker is not None:
            marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if target is not None:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        args = [str(target) if helpers else "-", str(marker) if marker is not None else "-"]
        args += ["compile"] if compiled else []
        builder = subprocess.Popen(
            [sys.executable, "-m", "kernelcraft.engine.startup.prebuilt", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=tempfile.gettempdir(),
        )
    except OSError as e:
        log.debug("nothing is built ahead: %s", e)
        return
    _builders[:] = [b for b in _builders if b.poll() is None] + [builder]


def seed(cache_dir: Path, settings: Knobs) -> bool:
    """Copy the built helpers into `cache_dir` (a new worker's Triton cache). False when there
    are none yet."""
    source = folder(settings)
    if source is None or not source.is_dir():
        return False
    try:
        shutil.copytree(source, cache_dir, dirs_exist_ok=True)
    except OSError as e:  # the worker compiles them itself, as it did before
        log.debug("Triton's helpers were not copied into %s: %s", cache_dir, e)
        return False
    return True


def build_helpers(target: Path) -> None:
    """Build Triton's helpers for the active GPU driver into `target` (renamed into place whole,
    so a reader sees all of it or nothing; a concurrent builder's copy wins)."""
    work = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        os.environ["TRITON_CACHE_DIR"] = str(work / "cache")
        from triton.runtime import driver

        driver.active.utils  # noqa: B018  (compiles and loads the helpers, into the cache)
        built = work / "cache"
        if any(built.rglob("*.so")):
            with contextlib.suppress(OSError):  # another builder got there first
                built.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compile_once() -> None:
    """A small torch.compile on the GPU: what it imports is written to the bytecode cache this
    process was given (PYTHONPYCACHEPREFIX). Its own caches go to a folder dropped afterwards."""
    work = tempfile.mkdtemp(prefix="kernelcraft-prebuilt-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(work, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(work, "triton")
    try:
        import torch

        fn = torch.compile(lambda x, w: torch.nn.functional.layer_norm(x.relu() @ w, (64,)) * 2)
        x = torch.randn(64, 64, device="cuda")
        fn(x, x)
        torch.cuda.synchronize()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ran(step: Any) -> bool:
    try:
        step()
    except Exception:
        traceback.print_exc()
        return False
    return True


def main() -> None:
    """`python -m kernelcraft.engine.startup.prebuilt FOLDER|- MARKER|- [compile]`: the helpers into
    FOLDER (`-`: none), then, with `compile` and a bytecode cache in use, a small torch.compile;
    MARKER is touched if either failed (and the exit status is 1)."""
    target, marker = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "-"
    steps = ([lambda: build_helpers(Path(target))] if target != "-" else []) + (
        [compile_once] if "compile" in sys.argv[3:] and sys.pycache_prefix else []
    )
    failed = [step for step in steps if not _ran(step)]
    if failed and marker != "-":
        with contextlib.suppress(OSError):
            Path(marker).touch()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
