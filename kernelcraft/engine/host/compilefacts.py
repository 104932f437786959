"""Compile facts per candidate source, task and target, kept by the evaluator's process so that no
job compiles again what an earlier one compiled (issue 41: a profile after a verify, a second
evaluation of the same kernel, a search's re-evaluated seed).

What is kept is a target's `TargetCompileResult` (each kernel's registers, spills, shared memory,
dot unit, autotune notes; or the compiler's refusal) with the launches and shapes the compile stage
found, keyed by sha256 of everything that decides them: the task's and the candidate's sources
(the kernels and the specialisation they launch with come from these alone), the target, whether
the launches were found on the task's full-size inputs, the model mode and the Triton version.
Only deterministic outcomes are kept: a target that compiled, or that the compiler refused
(`compile_*`); a timeout, a crash or a failed discovery is compiled again next time.

The GPU check without a GPU (`JobCompile.gpu_check`) compiles a trial's record in the trusted
kernels role: its result is kept by the record's own content and the target (`recorded`), so
verifying the same kernel again does not compile it again. Also here: `keep_compiled`, the end of
a job's part in `machine/kernelcache.py` (the compiled kernels themselves, for a candidate's next
process).

Who writes: `JobCompile.stage` and `JobCompile.gpu_check`, in the evaluator's process (never a
worker: a candidate cannot put facts here for another). The store is bounded (least recently used
out) and lives as long as the `ReferencePool` that holds it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelcraft.engine.host.verdicts import compile_from_parts
from kernelcraft.engine.wire.channel import Frame
from kernelcraft.engine.wire.protocol import CompiledFiles, Msg, SendCompiled
from kernelcraft.schema.evaluation import CompileResult, EvalJob, KernelLaunch, TargetCompileResult

if TYPE_CHECKING:
    from kernelcraft.engine.machine.kernelcache import KernelCache
    from kernelcraft.engine.machine.pool import WorkerProcess

CAPACITY = 512
"""Targets' facts kept (a few KB each)."""
KEEP_TIMEOUT_S = 5.0
"""How long a candidate's worker may take to send what it compiled (`keep_compiled`)."""


@dataclass(frozen=True)
class Facts:
    target: TargetCompileResult
    launches: list[KernelLaunch]
    shapes: str | None


def _triton_version() -> str:
    """Which Triton compiles (its install, read without importing it: 0.8 s of the evaluator's
    first compile stage otherwise; "none" where there is none)."""
    from kernelcraft.engine.startup.prebuilt import installed

    return installed("triton") or "none"


class CompileFacts:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._facts: OrderedDict[str, Facts] = OrderedDict()
        self._recorded: OrderedDict[str, CompileResult] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(spec: EvalJob, target: str, full_size: bool) -> str:
        what = [
            spec.task_source,
            spec.candidate_source,
            target,
            full_size,
            spec.model_mode,
            _triton_version(),
        ]
        return hashlib.sha256(json.dumps(what).encode()).hexdigest()

    def known(self, spec: EvalJob, targets: list[str], full_size: bool) -> dict[str, Facts]:
        """The facts kept for those of `targets` compiled before (copies: a job may change its own)."""
        found: dict[str, Facts] = {}
        for t in targets:
            f = self._facts.get(self.key(spec, t, full_size))
            if f is None:
                self.misses += 1
                continue
            self.hits += 1
            self._facts.move_to_end(self.key(spec, t, full_size))
            found[t] = Facts(
                f.target.model_copy(deep=True), [x.model_copy(deep=True) for x in f.launches], f.shapes
            )
        return found

    def keep(self, spec: EvalJob, result: CompileResult, full_size: bool) -> None:
        """Keep each target of a compile stage's result whose outcome is deterministic."""
        if not result.launches:
            return  # discovery failed or found nothing: nothing per target to keep
        for t in result.targets:
            refused = t.failure_class is not None and t.failure_class.value.startswith("compile_")
            if not (t.ok or refused):
                continue
            k = self.key(spec, t.target, full_size)
            self._facts[k] = Facts(
                t.model_copy(deep=True), [x.model_copy(deep=True) for x in result.launches], result.shapes
            )
            self._facts.move_to_end(k)
            while len(self._facts) > self.capacity:
                self._facts.popitem(last=False)

    # ---- the GPU check's compile of a record (`job.compile.JobCompile.compile_recorded`) ----

    @staticmethod
    def recorded_key(program: dict[str, Any], target: str) -> str:
        """A record's compile is the trusted kernels role's (`worker/kernels.py`), from the record
        alone: the same record (kernel sources, argument layout, constexprs) compiles the same, for
        whichever candidate sent it."""
        what = [json.dumps(program, sort_keys=True, default=str), target, _triton_version()]
        return "recorded:" + hashlib.sha256(json.dumps(what).encode()).hexdigest()

    def recorded(self, program: dict[str, Any], target: str) -> CompileResult | None:
        """The kernels role's result for this record and target, if it compiled it before (a copy)."""
        k = self.recorded_key(program, target)
        kept = self._recorded.get(k)
        if kept is None:
            self.misses += 1
            return None
        self.hits += 1
        self._recorded.move_to_end(k)
        return kept.model_copy(deep=True)

    def keep_recorded(self, program: dict[str, Any], target: str, result: CompileResult) -> None:
        """Keep the kernels role's result when it is deterministic: compiled, or refused by the compiler."""
        refused = result.failure_class is not None and result.failure_class.value.startswith("compile_")
        if not (result.ok or refused):
            return
        k = self.recorded_key(program, target)
        self._recorded[k] = result.model_copy(deep=True)
        self._recorded.move_to_end(k)
        while len(self._recorded) > self.capacity:
            self._recorded.popitem(last=False)


def from_known(known: dict[str, Facts], targets: list[str], elapsed: float) -> CompileResult:
    """The compile stage's result when every target was compiled before."""
    first = known[targets[0]]
    result = compile_from_parts(first.launches, [known[t].target for t in targets], elapsed)
    result.shapes = first.shapes
    return result


def with_known(result: CompileResult, known: dict[str, Facts], targets: list[str]) -> CompileResult:
    """A compile stage's result for the targets it compiled, with those compiled before, in the
    order asked."""
    if not known or not result.launches:
        return result
    by_target = {t.target: t for t in result.targets} | {t: f.target for t, f in known.items()}
    merged = compile_from_parts(
        result.launches, [by_target[t] for t in targets if t in by_target], result.seconds
    )
    merged.shapes = result.shapes
    return merged


async def keep_compiled(compiling: list[tuple[WorkerProcess, str, list[str]]], kernels: KernelCache) -> None:
    """At the end of a job that passed: what each candidate worker that ran Triton's compiler
    (`JobWorkers.compiling`: the worker, its key, the Triton keys it was given) compiled beyond
    what it was given, kept for the next process of its candidate (`machine/kernelcache.py`). Its
    answer is the candidate's words, checked there; a worker that does not answer in
    `KEEP_TIMEOUT_S`, or answers anything else, is killed and heard no more: the job's result
    stands either way."""
    for w, key, known in compiling:
        if not w.alive() or not w.frames.empty():
            continue  # (gone, or left with something unread: not in step with the job)
        try:
            await w.send(SendCompiled(known=known).to_header())
            frame = await asyncio.wait_for(_answer(w), KEEP_TIMEOUT_S)
            files = CompiledFiles.from_header(frame.header) if frame is not None else None
        except (asyncio.TimeoutError, OSError, ValueError):
            files = None
        if files is None or frame is None:
            w.kill()
            continue
        await asyncio.to_thread(kernels.keep, key, files.names, frame.blobs)


async def _answer(w: WorkerProcess) -> Frame | None:
    """The worker's next frame but its progress messages (None: its channel closed)."""
    frame = await w.frames.get()
    while frame is not None and frame.header.get("type") == Msg.PROGRESS:
        frame = await w.frames.get()
    return frame
