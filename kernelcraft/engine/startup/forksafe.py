"""Whether a process may still fork workers that use CUDA (the zygote's checks, `zygote.py`).

A process that has opened the GPU's device files (CUDA or NVML initialised) cannot fork children
that use CUDA, and one with a second thread cannot fork safely at all. Loading the driver's library
alone is harmless.
"""

from __future__ import annotations

import os
from typing import Any


def threads() -> int:
    """This process's threads."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def driver_touched() -> bool:
    """True when this process has opened the GPU's device files (cuInit or NVML did)."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return False
    return any(_fd_target(fd).startswith(("/dev/nvidia", "/dev/kfd", "/dev/dri")) for fd in fds)


def _fd_target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def probe(stage: Any) -> bool:
    """Run `stage` in a throwaway fork: True when it neither touched the GPU driver nor left a
    second thread running."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            stage()
            code = 0 if not driver_touched() and threads() == 1 else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0
