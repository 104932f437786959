"""The evaluation engine: compile, verify and profile a candidate against its task, in boxed workers.

Rooms, by the process their code runs in and what it is for (top to bottom; a room imports only
rooms below it, as `pyproject.toml`'s import-linter contract says and CI checks):

- `cluster/`: the evaluator on a Ray cluster, one actor per GPU, and which actor takes a job.
- `host/`: the evaluator's own process: the `Evaluator` interface, jobs and their stages, the
  reference pool, verdict building.
- `machine/`: what that process holds of the machine: worker pools, the memory ledger, the GPU
  lock, the command line's head start.
- `startup/`: making workers fast to start: the zygote that forks them, what is built once per machine.
- `worker/`: what runs in a worker process: its entry point, the candidate's and the reference's
  roles, loading and sizing a task.
- `checks/` and `measure/`: the rules a verdict rests on that run a candidate (output comparison,
  perturbed and scaled trials, every autotune config, the ahead-of-time GPU compile) and the
  timing a profile rests on (timers, input rotation, statistics, roofline floors, per-kernel
  breakdowns).
- `replay/`: forward's record run again without the candidate's Python: the same-input replay,
  the fresh-input replay in the reference worker.
- `watch/`: what watches the candidate inside its own process: launch interception, refused
  launch hooks, the op recorder and integrity guard, the knockout, the replay, TF32 emulation.
- `box/`: what confines a worker: identity, namespaces, mounts, Landlock, seccomp, process limits,
  and the sweep of what a worker leaves behind.
- `wire/`: the typed protocol between the evaluator and its workers, and the channel it travels on.
- `source/` (beside `wire/`): what is read from a source before anything runs, `ast` only: the
  intake, the static anti-cheat rules, the branches a shrunk run missed, the shrink of sizes.

Everything here may import `kernelcraft.base` and `kernelcraft.schema` and nothing else of kernelcraft.

One door: the other packages (`cli`, `server`, `search`, `level`, `agent`, `report`, `knowledge`,
`entry`) import the names below from `kernelcraft.engine` and never a room's module
(`pyproject.toml`'s contract): the evaluator (`Evaluator`, `ProgressCallback`, `LocalEvaluator`,
`RayEvaluator`, `add_up`), the intake (`read_source`, `check_task`, `check_candidate`,
`task_source`, `candidate_source`, `take_in`, `Intake`, `Source`: a source parsed and checked
once), the start-up head start (`prestart`) and box check (`box_preflight`) and the compiled-reference timings' file and note
(`COMPILED_TIMINGS_FILE`, `COMPILED_TIMING_REUSED`). Each is imported when first asked for, so
importing a room (a worker does) loads nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelcraft.engine.cluster.ray_evaluator import RayEvaluator
    from kernelcraft.engine.host.evaluator import Evaluator, ProgressCallback
    from kernelcraft.engine.host.job.state import add_up
    from kernelcraft.engine.host.local import LocalEvaluator
    from kernelcraft.engine.machine import prestart
    from kernelcraft.engine.machine.prestart import box_preflight
    from kernelcraft.engine.measure.timingcache import FILE_NAME as COMPILED_TIMINGS_FILE
    from kernelcraft.engine.measure.timingcache import REUSED as COMPILED_TIMING_REUSED
    from kernelcraft.engine.source.intake import (
        Intake,
        Source,
        candidate_source,
        check_candidate,
        check_task,
        read_source,
        take_in,
        task_source,
    )

# name -> (module, attribute; None: the module itself)
_DOOR: dict[str, tuple[str, str | None]] = {
    "Evaluator": ("kernelcraft.engine.host.evaluator", "Evaluator"),
    "ProgressCallback": ("kernelcraft.engine.host.evaluator", "ProgressCallback"),
    "LocalEvaluator": ("kernelcraft.engine.host.local", "LocalEvaluator"),
    "RayEvaluator": ("kernelcraft.engine.cluster.ray_evaluator", "RayEvaluator"),
    "add_up": ("kernelcraft.engine.host.job.state", "add_up"),
    "prestart": ("kernelcraft.engine.machine.prestart", None),
    "box_preflight": ("kernelcraft.engine.machine.prestart", "box_preflight"),
    "read_source": ("kernelcraft.engine.source.intake", "read_source"),
    "check_task": ("kernelcraft.engine.source.intake", "check_task"),
    "check_candidate": ("kernelcraft.engine.source.intake", "check_candidate"),
    "task_source": ("kernelcraft.engine.source.intake", "task_source"),
    "candidate_source": ("kernelcraft.engine.source.intake", "candidate_source"),
    "take_in": ("kernelcraft.engine.source.intake", "take_in"),
    "Intake": ("kernelcraft.engine.source.intake", "Intake"),
    "Source": ("kernelcraft.engine.source.intake", "Source"),
    "COMPILED_TIMINGS_FILE": ("kernelcraft.engine.measure.timingcache", "FILE_NAME"),
    "COMPILED_TIMING_REUSED": ("kernelcraft.engine.measure.timingcache", "REUSED"),
}

__all__ = [
    "COMPILED_TIMINGS_FILE",
    "COMPILED_TIMING_REUSED",
    "Evaluator",
    "Intake",
    "LocalEvaluator",
    "ProgressCallback",
    "RayEvaluator",
    "Source",
    "add_up",
    "box_preflight",
    "candidate_source",
    "check_candidate",
    "check_task",
    "prestart",
    "read_source",
    "take_in",
    "task_source",
]


def __getattr__(name: str) -> Any:
    """The door's names, each imported when first asked for (PEP 562)."""
    if name not in _DOOR:
        raise AttributeError(f"module 'kernelcraft.engine' has no attribute {name!r}")
    module, attribute = _DOOR[name]
    value = importlib.import_module(module)
    return value if attribute is None else getattr(value, attribute)
