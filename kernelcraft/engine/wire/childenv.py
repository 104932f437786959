"""The worker wire: what a pool writes into a worker's environment, and what the worker reads.

The one module that names the `KERNELCRAFT_WORKER_*` variables. A worker's environment is an
allowlist (`box/environment.py`) with no setting of the user's in it: the engine's settings
reach a worker as these values, chosen by its pool from the parent's settings
(`base/knobs.py`), and as its job's fields. The parent writes them with `worker_env` (and the
worker's own directory with `own_dir`); the worker reads them once with `mine`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEVICE = "KERNELCRAFT_WORKER_DEVICE"
""""cpu" or "cuda": the device the worker serves."""
IMPORTS = "KERNELCRAFT_WORKER_IMPORTS"
""""lazy" or "lazy-inductor": what a one-off command's worker leaves to the job that needs it."""
BOX = "KERNELCRAFT_WORKER_BOX"
"""How the worker boxes itself: "off", "on", "on,nopidns" (switched off) or "on,nopidns-gpu" (off
by default on a GPU), with ",root" where it keeps root in a user namespace of its own."""
DIR = "KERNELCRAFT_WORKER_DIR"
"""The worker's own directory (set by the pool): a worker that leaves root owns it."""
REAPER = "KERNELCRAFT_WORKER_REAPER"
"""Set to "zygote" by a zygote that kills what its workers leave behind (zygote.py)."""
NAMES = (DEVICE, IMPORTS, BOX, DIR, REAPER)


@dataclass(frozen=True)
class ChildEnv:
    """What a worker was told through its environment."""

    device: str = "cpu"
    imports: str = ""
    box: str = "off"
    workdir: str | None = None
    reaper: str | None = None

    @property
    def box_parts(self) -> list[str]:
        return self.box.split(",")


def worker_env(*, device: str, box: str, imports: str | None = None) -> dict[str, str]:
    """The wire's variables every worker of a pool shares."""
    env = {DEVICE: device, BOX: box}
    if imports:
        env[IMPORTS] = imports
    return env


def own_dir(workdir: str) -> dict[str, str]:
    """The wire's variable that differs per worker: its directory."""
    return {DIR: workdir}


def mark_reaped(environ: dict[str, str] | None = None) -> None:
    """A zygote's (or a preflight's) note to the workers it forks: it reaps what they leave."""
    (os.environ if environ is None else environ).setdefault(REAPER, "zygote")


def mine(environ: Mapping[str, str] | None = None) -> ChildEnv:
    """What this worker's pool said (read in the worker)."""
    env = os.environ if environ is None else environ
    return ChildEnv(
        device=env.get(DEVICE, "cpu"),
        imports=env.get(IMPORTS, ""),
        box=env.get(BOX, "off"),
        workdir=env.get(DIR),
        reaper=env.get(REAPER),
    )
