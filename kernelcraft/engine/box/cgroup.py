"""A cgroup of its own for each candidate worker: its processes (pids) and its memory.

Two limits of the box are per process where a cgroup's are per group:
- processes: RLIMIT_NPROC (`box/__init__.py`) is never applied to a real uid of 0, so a candidate
  that stays root in a user namespace of its own could fork without bound (on the H200 one forked
  200 of 200): the group's `pids.max` is its present tasks plus `box.CANDIDATE_TASKS`;
- memory: RLIMIT_AS and the job's watchdog see one process, so a forked child, a memfd or
  `/dev/shm` (shared memory) and the files it writes (page cache, tmpfs) went past them: the
  group's memory limit (v2 `memory.max` with no swap; v1 `memory.limit_in_bytes` and
  `memory.memsw.limit_in_bytes`) counts all of them, for every process in the group (children
  are born in it). Over it, the kernel's OOM killer ends a process of the group, and the job
  reads the group's OOM count (`oom_killed`) to give the out-of-memory verdict.
Where this process runs as root and the machine has the controllers (cgroup v2 enabled at the
root, or v1's `pids` and `memory` hierarchies: both are probed, each on its own), the pool moves
each candidate worker, before it imports the candidate, into a new group, and removes the group
(killing what is left in it) when the worker is gone. The candidate cannot leave it: Landlock gives
it `/sys` to read only. Where a group cannot be made, nothing changes and the verdict's note says
which limit is missing (the worker checks `in_force()` for itself).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/pids")
V1_MEMORY_ROOT = Path("/sys/fs/cgroup/memory")
PREFIX = "kernelcraft-"
CONTROLLERS = ("pids", "memory")
SLACK_BYTES = 512 * 1024**2
"""Over the job's memory limit, for what a forked worker's first writes copy of its zygote's
pages and what Triton's compiler and interpreter take."""
GPU_HOST_FLOOR_BYTES = 16 * 1024**3
"""A GPU job's limit is the device's memory; its worker's host memory gets at least this."""
_serial = itertools.count()
_swept: set[Path] = set()
"""The roots the first `confine` of this process swept of what dead processes left (`sweep`)."""


@dataclass
class Groups:
    """The cgroups one worker was moved into (one on v2, one per v1 hierarchy), and which limits
    they hold."""

    paths: list[Path] = field(default_factory=list)
    limits: set[str] = field(default_factory=set)
    """"pids", "memory"."""
    memory: Path | None = None
    """The group whose memory files say whether the OOM killer ran in it."""


@functools.cache
def _roots() -> dict[str, Path]:
    """Controller -> the root under which this machine lets us make its cgroups (read once)."""
    if os.geteuid() != 0:
        return {}
    with contextlib.suppress(OSError):
        enabled = (V2_ROOT / "cgroup.subtree_control").read_text().split()
        found = {c: V2_ROOT for c in CONTROLLERS if c in enabled}
        if found:
            return found
    v1 = {"pids": V1_ROOT, "memory": V1_MEMORY_ROOT}
    return {c: root for c, root in v1.items() if (root / "cgroup.procs").exists()}


def _root() -> Path | None:
    """Where the pids controller lets us make cgroups, or None."""
    return _roots().get("pids")


def available() -> set[str]:
    """The limits `confine` can set on this machine (as this user)."""
    return set(_roots())


def memory_for(device: str, limit: int | None) -> int | None:
    """The memory cgroup limit of a candidate worker whose job's memory limit is `limit` (None:
    no memory limit)."""
    if limit is None:
        return None
    return (limit if device == "cpu" else max(limit, GPU_HOST_FLOOR_BYTES)) + SLACK_BYTES


REFERENCE_SHARE = 0.5
"""A reference worker (the task's code, a client's too) may use this share of the host's
available memory with its children. Not its process count: torch.compile's compile workers."""


def reference_memory() -> int | None:
    """A reference worker's memory cgroup limit (None where the host's memory is unknown)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        text = Path("/proc/meminfo").read_text()
        line = next(x for x in text.splitlines() if x.startswith("MemAvailable:"))
        return int(int(line.split()[1]) * 1024 * REFERENCE_SHARE)
    return None


def confine(pid: int, extra_tasks: int | None, memory_bytes: int | None = None) -> Groups | None:
    """Move process `pid` (all its threads) into new cgroups allowing, when given, its present
    tasks plus `extra_tasks` and `memory_bytes` of memory counted from now on; None where no
    cgroup could be made (best effort: each controller on its own)."""
    roots = _roots()
    if not roots:
        return None
    groups = Groups()
    name = f"{PREFIX}{os.getpid()}-{next(_serial)}"
    for root in dict.fromkeys(roots.values()):
        if root not in _swept:
            _swept.add(root)
            sweep(root)
        given = {"pids": extra_tasks is not None, "memory": memory_bytes is not None}
        wanted = [c for c, r in roots.items() if r == root and given[c]]
        if not wanted:
            continue
        group = root / name
        try:
            group.mkdir()
            groups.paths.append(group)
            for controller in wanted:
                _limit(group, controller, pid, extra_tasks, memory_bytes)
            (group / "cgroup.procs").write_text(str(pid))
        except OSError as e:
            log.debug("no %s cgroup for worker %s: %s", "/".join(wanted), pid, e)
            release(Groups([group]))
            groups.paths.remove(group)
            continue
        groups.limits.update(wanted)
        if "memory" in wanted:
            groups.memory = group
    return groups if groups.paths else None


def _limit(group: Path, controller: str, pid: int, extra_tasks: int | None, memory_bytes: int | None) -> None:
    if controller == "pids":
        assert extra_tasks is not None
        tasks = len(os.listdir(f"/proc/{pid}/task"))
        (group / "pids.max").write_text(str(tasks + extra_tasks))
        return
    assert memory_bytes is not None
    if (group / "memory.max").exists():  # v2
        (group / "memory.max").write_text(str(memory_bytes))
        with contextlib.suppress(OSError):
            (group / "memory.swap.max").write_text("0")
        return
    (group / "memory.limit_in_bytes").write_text(str(memory_bytes))
    with contextlib.suppress(OSError):  # without swap accounting there is no memsw file
        (group / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))


def oom_killed(groups: Groups | None) -> bool:
    """Whether the kernel's OOM killer ended a process of the worker's memory cgroup."""
    if groups is None or groups.memory is None:
        return False
    for name in ("memory.events", "memory.oom_control"):  # v2, v1
        with contextlib.suppress(OSError, ValueError):
            for line in (groups.memory / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
    # A v1 kernel without the count (before 4.13): "under_oom" while it waits, else nothing to go
    # by (failcnt also counts page cache reclaimed at the limit, which is no failure).
    with contextlib.suppress(OSError, ValueError):
        return "under_oom 1" in (groups.memory / "memory.oom_control").read_text()
    return False


def release(groups: Groups | Path | None) -> None:
    """Kill whatever is left in the cgroups `confine` made (a daemon the candidate started among
    them), then remove them (best effort)."""
    if groups is None:
        return
    for group in [groups] if isinstance(groups, Path) else groups.paths:
        _release(group)


def _release(group: Path) -> None:
    for _ in range(50):
        with contextlib.suppress(OSError):
            group.rmdir()
            return
        with contextlib.suppress(OSError):
            for line in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(line), signal.SIGKILL)
        time.sleep(0.02)
    log.debug("could not remove %s", group)


def sweep(root: Path) -> None:
    """Release the cgroups of evaluator processes that are gone (a server killed with SIGKILL
    could not release its own), killing what is left in them."""
    with contextlib.suppress(OSError):
        for group in root.iterdir():
            owner = group.name.removeprefix(PREFIX).split("-")[0]
            if not group.name.startswith(PREFIX) or not owner.isdigit():
                continue
            try:
                os.kill(int(owner), 0)
            except ProcessLookupError:
                _release(group)
            except OSError:
                continue


def in_force() -> set[str]:
    """The limits of a cgroup `confine` made that this process sits in (from /proc/self/cgroup)."""
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _hier, controllers, path = line.split(":", 2)
            if not Path(path).name.startswith(PREFIX):
                continue
            if controllers == "":  # v2: the group has what its files say
                group = V2_ROOT / path.lstrip("/")
                for controller, name in (("pids", "pids.max"), ("memory", "memory.max")):
                    with contextlib.suppress(OSError):
                        if (group / name).read_text().strip() != "max":
                            found.add(controller)
            else:
                found |= set(controllers.split(",")) & set(CONTROLLERS)
    return found
