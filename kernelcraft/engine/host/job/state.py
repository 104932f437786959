"""One job's state: what it was given and what it learns as it goes, one object its parts share.

`Job` (`job/run.py`) builds one `JobState` and hands it to each of its parts: `JobWorkers`
(`job/workers.py`: the processes, their answers, the GPU lock), `JobCompile` (`job/compile.py`: the
compile stage and the GPU check), `JobTiming` (`job/timing.py`: the profile and baseline stages),
the admission (`job/admission.py`) and the fresh replay (`job/replay.py`). A part writes what it
learns here and reads what the others learned here; no part reads another part's attributes
(`tests/engine/host/test_jobstate.py`). The verdicts (`verdicts.py`) stay pure functions of what
the job passes them.

Who writes what: the admission writes the task's measure (`sized`, `memory_limit`, `device_bound`,
`task_source`, `bounds`, `held_when_idle`) and pauses the deadline while the job waits for
memory; `JobWorkers` writes the candidate's word as it loads (`candidate_parameters`,
`candidate_initial`, `found_launches`), the seed of the last inputs, `shared` on release, and
pauses the deadline while the job waits for the GPU; the job's stages write what the reference
and the trials said (`ready`, `input_sets`, `kernels`, `tolerance`, `tf32_dots`, `seen`,
`torch_ops`, `program`, `records`, `refreshed`). Every part adds notes, stage spans and progress.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kernelcraft.engine.checks import findings
from kernelcraft.engine.host.evaluator import ProgressCallback
from kernelcraft.engine.host.references import ReferencePool, task_key
from kernelcraft.engine.machine.gpulock import Device
from kernelcraft.engine.machine.memory import LimitOwner
from kernelcraft.engine.replay.records import Records
from kernelcraft.engine.source.divisors import Divisors, read_divisors
from kernelcraft.engine.source.gridmap import untiled
from kernelcraft.engine.wire import bounds as frame_bounds
from kernelcraft.engine.wire.bounds import Bounds
from kernelcraft.engine.wire.protocol import Sized, TaskReady
from kernelcraft.schema.evaluation import EvalJob

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CandidateSettings:
    """What the evaluator imposes on every candidate process."""

    memory_limit_bytes: int | None
    """The user's cap (`LocalEvaluator`'s `memory_limit_gb`); None: sized to each task (`memory.py`)."""
    sandbox: bool
    """The filesystem sandbox (`sandbox.py`; KERNELCRAFT_SANDBOX=off turns it off)."""
    shrink: bool = True
    """Shrink large KernelBench tasks for the interpreter (`shrink.py`; KERNELCRAFT_SHRINK=off
    or `EvalJob.full_size` runs the task's own sizes)."""


def partition(spans: list[tuple[str, float, float]], start: float, end: float) -> dict[str, float]:
    """Seconds per stage that add up to `end - start`: each instant goes to the stage that started
    last among those running then (the innermost: a GPU wait inside loading the reference; and of
    the reference and the candidate, which load at the same time, the later one), and an instant
    no stage covers to "other" (the harness between stages). Rounded to the millisecond."""
    cuts = sorted({start, end, *(min(max(t, start), end) for _, a, b in spans for t in (a, b))})
    out: dict[str, float] = {}
    for lo, hi in itertools.pairwise(cuts):
        running = [(a, i, name) for i, (name, a, b) in enumerate(spans) if a <= lo and b >= hi]
        name = max(running)[2] if running else "other"
        out[name] = out.get(name, 0.0) + hi - lo
    return {name: round(s, 3) for name, s in out.items() if s >= 0.0005}


def add_up(stages: dict[str, float], seconds: float) -> dict[str, float]:
    """`stages` with what they leave of `seconds` (the source checks before the job, a first
    attempt run again alone) added to "other", so that they sum to `seconds`."""
    rest = round(seconds - sum(stages.values()), 3)
    if rest <= 0:
        return dict(stages)
    return {**stages, "other": round(stages.get("other", 0.0) + rest, 3)}


@dataclass(eq=False)  # one job's state: compared, hashed and keyed (the memory ledger) by identity
class JobState:
    """One job's spec, device, settings and everything it learns as it goes."""

    spec: EvalJob
    device: Device
    references: ReferencePool
    settings: CandidateSettings
    progress_cb: ProgressCallback | None = None
    alone: bool = False
    """The device's memory to this job alone (`memory.py`)."""

    # ---- from what it was given ----
    full_size: bool = field(init=False)
    """In the interpreter, run the task's own sizes (`shrink.py`)."""
    key: tuple[str, int | None] = field(init=False)
    """The task's key among kept reference workers (`references.task_key`)."""
    base_key: tuple[str, int | None] = field(init=False)
    """`key` without the candidate's divisors: what `ReferencePool.unshrunk` records."""
    divisors: Divisors = field(init=False)
    """What the candidate's kernels divide the task's sizes by (`source/divisors.py`): in the
    interpreter, for the shrink to keep (`Load.cpu_divisors`); empty on a GPU, with the user's
    CPU sizes, and for a task known to run at its own sizes."""
    untiled: list[str] = field(init=False)
    """The task's sizes no block of the candidate's tiles on its own: those its grids take whole,
    or, when it reads its inputs as flat buffers (`flat`), all the inputs' own
    (`source/gridmap.py`, `Load.cpu_untiled`)."""
    flat: bool = field(init=False)
    task_source: str = field(init=False)
    """What the candidate loads: the task, or its shrunk copy in the interpreter."""
    memory_limit: int | None = field(init=False)
    """The candidate's memory limit, sized to the task (`memory.py`)."""
    sized: asyncio.Future[Sized | None] = field(init=False)
    """The reference's measurement of the task, once the job may run (the candidate waits)."""

    # ---- the admission's (`job/admission.py`) ----
    device_bound: bool = False
    """Run alone, the candidate's limit is all the room the device has beside the reference."""
    bounds: Bounds = field(default_factory=frame_bounds.starting)
    """What the job's workers' frames may carry, from the task's measured sizes (`wire/bounds.py`)."""
    held_when_idle: int = 0
    """Device bytes a kept reference worker holds for the task (`memory.TaskSize`)."""
    shared: bool = False
    """Set on release: another job held device memory while this one did."""
    deadline: float = float("inf")
    """`time.monotonic()` by which the job must be done; paused while it waits for memory or the GPU."""

    # ---- the reference's and the candidate's word ----
    ready: TaskReady | None = None
    """The reference's word once Model is built (its parameters among it)."""
    input_sets: int = 1
    input_seed: int | None = None
    """The seed of the last inputs drawn (`JobWorkers.inputs`): the verdict's evidence names it."""
    candidate_parameters: list[list[Any]] = field(default_factory=list)
    """ModelNew's float parameters and buffers, as its worker said when it loaded."""
    candidate_initial: dict[str, str] = field(default_factory=dict)
    """A digest of each tensor ModelNew held as built, by name, as its worker said."""
    found_launches: str = ""
    """The candidate's last word on the launches its compile discovery found (shown when the
    compile runs out of time; the candidate's own words, never believed)."""
    refreshed: set[str] = field(default_factory=set)
    """Model's parameters and buffers both models got the same fresh values for (`Job.fresh_parameters`)."""

    # ---- what the trials found ----
    kernels: list[str] = field(default_factory=list)
    """The kernels the candidate launched, in the order first seen."""
    tolerance: str | None = None
    """The tolerances the reference applied (`compare.describe`), from the last comparison."""
    tf32_dots: int = 0
    """fp32 tl.dots the interpreter rounded to TF32 in this job's trials."""
    seen: findings.Findings = field(default_factory=findings.Findings)
    """The autotune configs the trials ran, their worst margin, the interpreter's time."""
    torch_ops: list[str] = field(default_factory=list)
    """PyTorch compute ops forward kept (AdaExplore's rule allows them; the verdict lists them)."""
    program: dict[str, Any] | None = None
    """The first trial's record (`replay/program.py`)."""
    programs: list[dict[str, Any]] = field(default_factory=list)
    """Each distinct trial record's program: the GPU check compiles the kernels of all of them."""
    records: Records = field(default_factory=Records)
    """Every trial's answer with forward's record (`Run.program`), each distinct one once: the
    fresh-input replay re-runs them at the end of verify (`job.replay.fresh_replay`)."""

    # ---- the job's account ----
    notes: list[str] = field(default_factory=list)
    """Said on any verdict: a shrunk task, a sandbox that could not be set, a parameter not perturbed."""
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    """(stage, start, end) of each stage as it ran; `partition` turns them into seconds."""
    fraction: float = 0.0
    """The highest fraction reported so far: the job's progress only moves forward."""

    def __post_init__(self) -> None:
        spec = self.spec
        self.full_size = spec.full_size or not self.settings.shrink
        variant = ("full" if self.full_size else "") + ("" if spec.model_mode == "train" else spec.model_mode)
        variant += "" if spec.correctness == "kernelcraft" else spec.correctness
        if spec.cpu_sizes and not self.full_size:  # the user's sizes: a reference of their own
            variant += "cpu" + ",".join(f"{k}={v}" for k, v in sorted(spec.cpu_sizes.items()))
        self.base_key = task_key(spec.task_source, self.device.index, variant)
        # What the candidate's kernels divide the sizes by shapes a shrunk task (a reference of
        # its own), unless this task was found not to shrink (`ReferencePool.unshrunk`): read
        # only then (an `ast` pass over the candidate, tens of milliseconds).
        self.divisors, self.untiled, self.flat = Divisors(), [], False
        if (
            self.interpret
            and not self.full_size
            and not spec.cpu_sizes
            and "jit" in spec.candidate_source  # no kernel, no divisor
            and self.base_key not in self.references.unshrunk
        ):
            self.divisors = read_divisors(spec.candidate_source)
        if self.divisors.values:
            self.untiled, self.flat = untiled(spec.task_source, spec.candidate_source)
            variant += "divisors" + ",".join(map(str, self.divisors.canonical()))
            variant += ("flat" if self.flat else "untiled") + ",".join(self.untiled)
        self.key = task_key(spec.task_source, self.device.index, variant)
        self.task_source = spec.task_source
        self.memory_limit = self.settings.memory_limit_bytes
        self.sized = asyncio.get_running_loop().create_future()

    @property
    def interpret(self) -> bool:
        """No GPU: the trials run in Triton's interpreter."""
        return self.device.kind == "cpu"

    @property
    def limit_owner(self) -> LimitOwner:
        """Who set the candidate's memory limit (`memory.LimitOwner`)."""
        if self.settings.memory_limit_bytes:
            return "user"
        return "device" if self.device_bound else "ours"

    def start_deadline(self) -> None:
        if self.deadline == float("inf"):
            self.deadline = time.monotonic() + self.spec.timeout_s

    def stage(self, name: str, since: float) -> float:
        """Record that stage `name` ran from `since` until now; returns now."""
        now = time.perf_counter()
        self.spans.append((name, since, now))
        return now

    def partition(self, start: float, end: float) -> dict[str, float]:
        """The job's time from `start` to `end`, split among its stages (`partition`)."""
        return partition(self.spans, start, end)

    async def progress(self, fraction: float | None, message: str) -> None:
        """Report `message` at `fraction` (0..1), or at the current fraction when None (a worker's
        own messages). A fraction below one already reported is raised to it: stages that start
        their own counts never move the job's progress back."""
        self.fraction = max(self.fraction, min(1.0, fraction if fraction is not None else 0.0))
        if self.progress_cb is not None:
            try:
                await self.progress_cb(self.fraction, message)
            except Exception:  # a broken progress callback must not break the evaluation
                log.exception("progress callback failed")
