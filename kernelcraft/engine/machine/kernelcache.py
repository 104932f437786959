"""`KernelCache`: what a candidate's processes compiled, kept by the evaluator's process and given
to the next process of the same candidate on the same task (issue 41: a profile after a verify
never compiles again what the verify compiled).

Each worker has a Triton cache of its own (`pool.own_env`), so every job compiled its candidate's
kernels afresh: on a GPU a verify JIT-compiles them in its candidate worker and the profile after
it compiles them again in a new one. Here, at the end of a job that passed, a worker that imported
the candidate (and runs Triton's compiler, not its interpreter) sends what it compiled; the next
worker loaded with the same candidate gets it in its `Load` and writes it into its own cache before
the candidate is imported, where Triton finds each kernel by its own key.

Trust. A file in a cache is run as the kernel whose key it sits under; a candidate writes its own
cache as it likes (a poisoned cubin under the key of another's kernel, a forged group file). So an
entry is keyed here, by this process, by everything that ran in the process that wrote it: the
task's and the candidate's sources, the model mode, the device the worker named before any job,
the Triton and Python it ran (`key`). It is given only to a worker that is about to import that
same candidate on that same task (`entry`); never to a reference worker, the trusted kernels role
(`worker/kernels.py`) or another candidate's worker. What an entry holds is thus what that
candidate's own process could have written into its own cache before its first compile: the
later process gains nothing the candidate could not do itself. Triton's key, inside the files, is
never believed.

What a candidate's worker sends (`CompiledFiles`, at the end of a job that passed) is its words:
only Triton's two levels are taken (KEY/FILE, names of Triton's alphabet, so nothing is written
outside the entry), a key whole or not at all, under size caps. A group file (`__grp__NAME.json`:
absolute paths into the writer's cache) is kept with its children's names alone, and the next
worker writes it back with its own paths (`worker/compiled.py`); one that names a file outside its
key, or absent, is dropped (Triton then compiles that kernel again). The worker's directory is a
tmpfs of its own (`box/mounts.py`): files go in and out over the channel only.

Where: a folder given by the evaluator (KERNELCRAFT_HOME's cache when the evaluator keeps caches
across processes: the command line's `verify`, then `profile`), else a temporary folder of this
process, removed by `close`. Written by this process only, each Triton key renamed into place
whole; bounded (`capacity_bytes`, least recently used entries out).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelcraft.base.knobs import Knobs
    from kernelcraft.schema.evaluation import EvalJob

log = logging.getLogger(__name__)

CAPACITY_BYTES = 1024**3
"""What the store keeps in all (least recently used entries out)."""
FILE_BYTES = 32 * 1024**2
"""The largest file kept (a cubin of a large autotuned kernel is a few MB)."""
HARVEST_BYTES = 128 * 1024**2
HARVEST_FILES = 2000
"""What one worker's cache may add to the store."""
GROUP_BYTES = 1024**2
_KEY_NAME = re.compile(r"[A-Za-z0-9_-]{8,128}")
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}")
_GROUP = "__grp__"


def _triton_install() -> str:
    from kernelcraft.engine.startup.prebuilt import installed

    return installed("triton") or "none"


class KernelCache:
    """Triton caches of candidates' processes, by `key`: an `entry` for a worker's `Load`, and
    `keep` what a worker sent."""

    def __init__(
        self, folder: Path | None = None, capacity_bytes: int = CAPACITY_BYTES, settings: Knobs | None = None
    ) -> None:
        self._given = folder
        self._settings = settings
        """The evaluator's settings: where Triton's prebuilt helpers are, never kept (None: none)."""
        self._folder: Path | None = None
        self._temporary = folder is None
        self.capacity_bytes = capacity_bytes
        self.seeded = 0
        """Files copied into workers' caches so far."""
        self.kept = 0
        """Triton keys (one compiled kernel, or a launcher) taken from workers' caches so far:
        what they compiled that no earlier process of theirs had."""

    # ---- keys ----

    @staticmethod
    def key(spec: EvalJob, device: str) -> str:
        """Everything that ran in a candidate's process: the sources, the model mode, the device
        its worker named before any job (`WorkerProcess.info`), and the Triton and Python."""
        what = [
            spec.task_source,
            spec.candidate_source,
            spec.model_mode,
            device,
            _triton_install(),
            sys.implementation.cache_tag,
        ]
        return hashlib.sha256(json.dumps(what).encode()).hexdigest()

    def entry(self, key: str) -> tuple[list[str], list[bytes]]:
        """Entry `key` as a `Load` carries it (`Load.compiled`: KEY/FILE, one blob each; a
        group file names its children, not their paths). Empty when there is none."""
        folder = self.folder() / key
        names: list[str] = []
        blobs: list[bytes] = []
        try:
            for kept in sorted(folder.iterdir()) if folder.is_dir() else []:
                if not _KEY_NAME.fullmatch(kept.name):
                    continue  # (a key being written)
                for f in sorted(kept.iterdir()):
                    names.append(f"{kept.name}/{f.name}")
                    blobs.append(f.read_bytes())
            if names:
                os.utime(folder)  # used: the last to go
        except OSError as e:  # the worker compiles its kernels itself, as it did before
            log.debug("compiled kernels of %s not read: %s", key[:12], e)
            return [], []
        self.seeded += len(names)
        return names, blobs

    def keep(self, key: str, names: list[str], blobs: list[bytes]) -> int:
        """Keep, under entry `key`, each Triton key a worker sent (`CompiledFiles`: KEY/FILE, one
        blob each) that the entry lacks, checked as the module docstring says. Returns the keys
        kept."""
        if len(names) != len(blobs) or len(names) > HARVEST_FILES:
            return 0
        by_key: dict[str, dict[str, bytes]] = {}
        refused: set[str] = set()
        total = 0
        for name, data in zip(names, blobs, strict=True):
            k, sep, f = name.partition("/")
            if not (sep and _KEY_NAME.fullmatch(k) and _FILE_NAME.fullmatch(f)) or len(data) > FILE_BYTES:
                refused.add(k)  # a key is taken whole or not at all
                continue
            total += len(data)
            if total > HARVEST_BYTES:
                return 0
            by_key.setdefault(k, {})[f] = data
        for k in refused:
            by_key.pop(k, None)
        entry = self.folder() / key
        skip = _prebuilt_keys(self._settings)
        kept = 0
        try:
            for k, files in by_key.items():
                if k in skip or (entry / k).exists():
                    continue
                for f in [f for f in files if f.startswith(_GROUP)]:
                    group = _portable_group(files[f], files)
                    if group is None:
                        del files[f]
                    else:
                        files[f] = group
                if files and _store_key(entry, k, files):
                    kept += 1
            if kept:
                os.utime(entry)
                self._evict()
        except OSError as e:
            log.debug("compiled kernels of %s not kept: %s", key[:12], e)
        self.kept += kept
        return kept

    # ---- the store ----

    def folder(self) -> Path:
        if self._folder is None:
            if self._given is not None:
                self._given.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._folder = self._given
            else:
                self._folder = Path(tempfile.mkdtemp(prefix="kernelcraft-kernels-"))
        return self._folder

    def close(self) -> None:
        """Remove the store if it was this process's alone."""
        if self._temporary and self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _evict(self) -> None:
        """Drop the least recently used entries until the store is within its capacity."""
        entries = []
        for e in self.folder().iterdir():
            if e.is_dir() and not e.name.startswith("."):
                size = sum(f.stat().st_size for f in e.rglob("*") if f.is_file())
                entries.append((e.stat().st_mtime, size, e))
        total = sum(s for _, s, _ in entries)
        for _, size, e in sorted(entries):
            if total <= self.capacity_bytes:
                break
            shutil.rmtree(e, ignore_errors=True)
            total -= size


def _prebuilt_keys(settings: Knobs | None) -> set[str]:
    """Triton's helpers, copied into every GPU worker already (`startup/prebuilt.py`)."""
    from kernelcraft.engine.startup import prebuilt

    folder = prebuilt.folder(settings) if settings is not None else None
    try:
        return set(os.listdir(folder)) if folder is not None else set()
    except OSError:
        return set()


def _portable_group(data: bytes, files: dict[str, bytes]) -> bytes | None:
    """A group file with its children's names in place of their paths; None when it names a
    file that is not beside it (or is not a group file)."""
    if len(data) > GROUP_BYTES:
        return None
    try:
        children = json.loads(data)["child_paths"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(children, dict):
        return None
    out: dict[str, str] = {}
    for child, path in children.items():
        if not isinstance(child, str) or not isinstance(path, str):
            return None
        base = os.path.basename(path)
        if base not in files or base.startswith(_GROUP):
            return None
        out[child] = base
    return json.dumps({"child_paths": out}).encode()


def _store_key(entry: Path, name: str, files: dict[str, bytes]) -> bool:
    """Write one Triton key under `entry`, renamed into place whole (a concurrent writer's copy
    wins)."""
    entry.mkdir(mode=0o700, parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".keeping-", dir=entry))
    try:
        for f, data in files.items():
            (work / f).write_bytes(data)
        try:
            work.rename(entry / name)
        except OSError:
            return False
        return True
    finally:
        shutil.rmtree(work, ignore_errors=True)
