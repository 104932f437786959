"""A process limit for candidates that stay root: a pids cgroup of their own.

The box's process limit is RLIMIT_NPROC (`box/__init__.py`), which the kernel never applies to a real uid
of 0. A candidate worker that stays root in a user namespace of its own (`KERNELCRAFT_SANDBOX_IDENTITY=root`,
or where nobody cannot reach Python: see `box/__init__.py`) could therefore fork without bound; on the H200
one forked 200 of 200. Where this
process runs as root and the machine has the pids controller (cgroup v2 enabled at the root, or
v1's `pids` hierarchy), the pool puts each candidate worker, before it imports the candidate, in a
cgroup of its own whose `pids.max` is its present tasks plus `box.CANDIDATE_TASKS`, and removes
the cgroup when the worker is gone. The candidate cannot leave it: Landlock gives it `/sys` to
read only. Where no cgroup can be made, nothing changes and the verdict's note says there is no
process limit (the worker checks `in_force()` for itself).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/pids")
PREFIX = "kernelcraft-"
_serial = itertools.count()
_swept = False
"""Once a process: the first `confine` sweeps what dead processes left (`sweep`)."""


@functools.cache
def _root() -> Path | None:
    """Where this machine's pids controller lets us make cgroups, or None (read once)."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(OSError):
        if "pids" in (V2_ROOT / "cgroup.subtree_control").read_text().split():
            return V2_ROOT
    if (V1_ROOT / "cgroup.procs").exists():
        return V1_ROOT
    return None


def confine(pid: int, extra_tasks: int) -> Path | None:
    """Move process `pid` (all its threads) into a new pids cgroup allowing its present tasks
    plus `extra_tasks`; the cgroup, or None where none could be made (best effort)."""
    root = _root()
    if root is None:
        return None
    global _swept
    if not _swept:
        _swept = True
        sweep(root)
    group = root / f"{PREFIX}{os.getpid()}-{next(_serial)}"
    try:
        tasks = len(os.listdir(f"/proc/{pid}/task"))
        group.mkdir()
        (group / "pids.max").write_text(str(tasks + extra_tasks))
        (group / "cgroup.procs").write_text(str(pid))
    except OSError as e:
        log.debug("no pids cgroup for worker %s: %s", pid, e)
        release(group)
        return None
    return group


def release(group: Path | None) -> None:
    """Kill whatever is left in a cgroup `confine` made (a daemon the candidate started among
    them), then remove it (best effort)."""
    if group is None:
        return
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
                release(group)
            except OSError:
                continue


def in_force() -> bool:
    """Whether this process sits in a pids cgroup `confine` made (read from /proc/self/cgroup)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _hier, controllers, path = line.split(":", 2)
            if (controllers in ("", "pids") or "pids" in controllers.split(",")) and Path(
                path
            ).name.startswith(PREFIX):
                return True
    return False
