"""The compiled reference's timings, kept for `TTL_S`: in memory, and in a file when given one.

torch.compile of a task's reference costs seconds in every process that does it (on the H200, most
of a fresh `kernelcraft profile`'s 16 s), and its timing is a property of the task, the GPU and the
torch and Triton that compiled it. So a timing measured once is reused for `TTL_S` by every job on
the same task and device, and, through the file, by the next process: the next `kernelcraft
profile` of a task skips the reference's compile. The eager reference is still timed in every
evaluation, interleaved with the candidate, and a verdict that reuses a compiled timing says so.

An entry is keyed by the task's `TaskKey` and a fingerprint (the GPU as its worker names it, and
the torch and Triton versions installed): a different GPU, or an upgrade, measures afresh. The
file is JSON, written whole to a temporary file and renamed (a killed process leaves the old one);
entries other processes wrote meanwhile are merged in, expired ones dropped, at most
`MAX_ENTRIES` kept. It lives in KERNELCRAFT_HOME, which candidates cannot write (their box gives
them their own directory only). An unreadable or corrupt file is a cache miss, never an error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from importlib import metadata
from pathlib import Path

from kernelcraft.schema.evaluation import Timing

log = logging.getLogger(__name__)

TTL_S = 1800.0
MAX_ENTRIES = 512
FILE_NAME = "compiled-reference-timings.json"
REUSED = "the torch.compile reference was timed by an earlier evaluation of this task"
"""What a profile's message says when it reused a kept timing."""


def versions() -> str:
    """The installed torch and Triton, as this process's package metadata says (no import)."""
    return ", ".join(f"{name} {_version(name)}" for name in ("torch", "triton"))


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"


class CompiledTimings:
    """`get` and `put` the compiled reference's timing of a task on a device."""

    def __init__(self, path: Path | None = None, ttl_s: float = TTL_S) -> None:
        self.path = path
        self.ttl_s = ttl_s
        self._versions = versions()
        self._memory: dict[str, tuple[float, Timing]] = {}
        """entry key -> (wall-clock time measured, timing)."""

    def entry(self, task_sha: str, device_index: int | None, device: str) -> str:
        return f"{task_sha}|{device_index}|{device}|{self._versions}"

    def get(self, entry: str) -> Timing | None:
        hit = self._memory.get(entry)
        if hit is None and self.path is not None:
            stored = self._read().get(entry)
            if stored is not None:
                hit = self._memory[entry] = stored
        if hit is None or time.time() - hit[0] > self.ttl_s:
            return None
        return hit[1]

    def put(self, entry: str, timing: Timing) -> None:
        self._memory[entry] = (time.time(), timing)
        if self.path is not None:
            try:
                self._write()
            except OSError as e:  # a full disk or a read-only home: the cache is only an optimisation
                log.warning("could not keep the compiled reference's timing in %s: %s", self.path, e)

    def _read(self) -> dict[str, tuple[float, Timing]]:
        assert self.path is not None
        try:
            raw = json.loads(self.path.read_text())
            return {k: (float(v["at"]), Timing.model_validate(v["timing"])) for k, v in raw.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            log.warning("ignoring %s (%s): the compiled reference will be timed afresh", self.path, e)
            return {}

    def _write(self) -> None:
        assert self.path is not None
        now = time.time()
        merged = {**self._read(), **self._memory}
        live = sorted(((at, k, t) for k, (at, t) in merged.items() if now - at <= self.ttl_s), reverse=True)
        data = {k: {"at": at, "timing": t.model_dump()} for at, k, t in live[:MAX_ENTRIES]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".timings-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
