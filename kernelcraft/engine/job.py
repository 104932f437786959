"""One submitted job: the compile, verify and profile stages, in order, on the job's workers.

`LocalEvaluator.submit` builds a `Job` with everything it needs (the job's device with its pools
and GPU lock, the reference pool, the candidate settings, the evaluator's set of held workers)
and awaits `run()`, which always returns a result: a candidate's failure is a verdict in it. The
processes are `JobWorkers`' business (`jobworkers.py`); the result models are built by the pure
functions of `verdicts.py`.

Order and the GPU: the reference and the candidate load at the same time; the compile stage (if
asked) loads its own candidate after the reference. On a GPU, the candidate's kernels are
compiled without the lock, verification shares the GPU, and timing has it alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from kernelcraft.base.errortext import exception_text
from kernelcraft.base.evaluation import (
    CompileResult,
    EvalJob,
    EvalResult,
    Evidence,
    ProfileResult,
    Roofline,
    Timing,
    VerifyResult,
)
from kernelcraft.base.failures import FailureClass
from kernelcraft.engine import scaled, timingcache
from kernelcraft.engine.channel import Frame
from kernelcraft.engine.evaluator import ProgressCallback
from kernelcraft.engine.gpulock import Device
from kernelcraft.engine.jobworkers import CandidateSettings, JobWorkers, Stop
from kernelcraft.engine.pool import WorkerProcess
from kernelcraft.engine.protocol import (
    Compare,
    Compared,
    Compile,
    Compiled,
    ComputeRoofline,
    KnockedOut,
    Knockout,
    Msg,
    Outputs,
    ProtocolError,
    RooflineCounted,
    Run,
    Samples,
    TaskReady,
    TimeCandidate,
    Timed,
    TimeReference,
    TimingMethod,
    UseInputs,
    Warm,
    Warmup,
    WarmupReference,
)
from kernelcraft.engine.references import COMPILED_REFERENCE_TTL_S, ReferencePool
from kernelcraft.engine.samples import spread_within, summarize
from kernelcraft.engine.verdicts import (
    DECOY_MESSAGE,
    compile_result,
    device_label,
    evidence_from,
    fill_failed,
    not_profiled_after,
    profile_result,
    timing_note,
    verify_result,
)

# Timing runs interleaved rounds (candidate, then reference) until every timed callable over
# 50 µs (samples.SPREAD_CHECK_ABOVE_US) has an interquartile range within TARGET_SPREAD of its
# median, between the minimum and maximum number of rounds.
MIN_PROFILE_ROUNDS = 3
MAX_PROFILE_ROUNDS = 10
TARGET_SPREAD = 0.02
PROFILE_BUDGET_MS = 60.0
NO_GPU_MESSAGE = "timing needs a CUDA GPU and this machine has none; the roofline floor below is for {target}"


@dataclass
class _Rounds:
    """The timing samples gathered so far, per timed callable ("candidate", "eager", "compiled")."""

    keys: tuple[str, ...]
    samples: dict[str, list[float]] = field(default_factory=dict)
    methods: dict[str, TimingMethod] = field(default_factory=dict)
    sets: dict[str, int] = field(default_factory=dict)
    count: int = 0

    def add(self, key: str, s: Samples) -> None:
        self.samples.setdefault(key, []).extend(s.times_us)
        self.methods[key] = s.method
        self.sets[key] = s.sets

    def done(self) -> bool:
        if self.count < MIN_PROFILE_ROUNDS:
            return False
        return self.count >= MAX_PROFILE_ROUNDS or all(
            spread_within(self.samples.get(k, []), TARGET_SPREAD) for k in self.keys
        )

    def timings(self) -> dict[str, Timing]:
        return {k: summarize(self.samples[k], self.methods[k], self.sets.get(k, 1)) for k in self.keys}


class Job:
    """One submitted job: its stages, on the workers of a `JobWorkers`."""

    def __init__(
        self,
        spec: EvalJob,
        device: Device,
        references: ReferencePool,
        settings: CandidateSettings,
        active: set[WorkerProcess],
        progress: ProgressCallback | None,
        *,
        alone: bool = False,
    ) -> None:
        self.spec = spec
        self.device = device
        self.references = references
        self.workers = JobWorkers(spec, device, references, settings, active, progress, alone=alone)
        self.input_sets = 1
        self.kernels: list[str] = []
        self.compile_worker: WorkerProcess | None = None

    @property
    def wants_candidate(self) -> bool:
        """Without a GPU, profile is the roofline floor alone: it needs no candidate."""
        stages = self.spec.stages
        return "verify" in stages or ("profile" in stages and not self.workers.interpret)

    async def run(self) -> EvalResult:
        result = EvalResult()
        try:
            await self.workers.progress(0.0, "waiting for workers")
            cand = await self.start_workers()
            if self.spec.baseline_only:
                t = time.perf_counter()
                result.baseline = await self.baseline_stage()
                self.workers.stage("baseline", t)
            if "compile" in self.spec.stages:
                t = time.perf_counter()
                result.compile = await self.compile_stage()
                self.workers.stage("compile", t)
                if not self.workers.interpret:
                    cand = self.compile_worker
            if self.wants_candidate:
                if cand is None:
                    cand = await self.workers.start_candidate()
                await self.candidate_stages(result, cand)
            elif "profile" in self.spec.stages:
                t = time.perf_counter()
                result.profile = await self.profile_stage(None)
                self.workers.stage("profile", t)
        except Stop as stop:
            fill_failed(result, self.spec, self.device, stop.cls, stop.evidence, self.kernels)
        finally:
            await self.workers.release()
            result.stage_seconds = dict(self.workers.stages)
        failed = result.failure_class
        await self.workers.progress(1.0, f"done: {failed.value}" if failed is not None else "done")
        return result

    async def start_workers(self) -> WorkerProcess | None:
        """The reference and the candidate load at the same time, in their own processes (the
        compile stage loads its own candidate, after the reference). Returns the candidate
        worker if it was loaded here; the reference's failure (an unusable task) comes first."""
        loads: list[Awaitable[Any]] = [self.workers.start_reference()]
        if self.wants_candidate and "compile" not in self.spec.stages:
            loads.append(self.workers.start_candidate())
        outcome = await asyncio.gather(*loads, return_exceptions=True)
        for o in outcome:
            if isinstance(o, BaseException) and not isinstance(o, Stop):
                raise o
        for o in outcome:
            if isinstance(o, Stop):
                raise o
        ready = outcome[0]
        assert isinstance(ready, TaskReady)
        self.input_sets = int(ready.input_sets)
        return cast("WorkerProcess | None", outcome[1] if len(outcome) > 1 else None)

    async def candidate_stages(self, result: EvalResult, cand: WorkerProcess) -> None:
        if not self.workers.interpret:
            t = time.perf_counter()
            await self.warm_up(cand)
            self.workers.stage("kernels", t)
        if "verify" in self.spec.stages:
            async with self.workers.gpu_lock(exclusive=False):
                t = time.perf_counter()
                result.verify = await self.verify_stage(cand)
                self.workers.stage("verify", t)
        if "profile" in self.spec.stages:
            if result.verify is not None and not result.verify.correct:
                result.profile = not_profiled_after(result.verify)
            else:
                async with self.workers.gpu_lock(exclusive=True):
                    t = time.perf_counter()
                    result.profile = await self.profile_stage(cand)
                    self.workers.stage("profile", t)

    # ---- compile ----

    async def compile_stage(self) -> CompileResult:
        """Discover launches (no kernel runs) and compile them for each target. On a CPU machine
        this worker imports the candidate without the interpreter, so real Triton compiles it."""
        start = time.perf_counter()
        w = await self.workers.acquire(self.device.compile_pool)
        self.compile_worker = w
        await self.workers.progress(0.05, "loading the candidate")
        try:
            # Without a GPU this worker loads the task as given and finds the launches on its own
            # get_inputs() built on the meta device: the task's real shapes, not the CPU's.
            full = self.workers.interpret
            self.workers.loaded(await self.workers.load(w, "candidate", interpret=False, full_size=full))
            made, blobs = await self.workers.inputs(0)
            await self.workers.progress(0.1, f"compiling for {', '.join(self.spec.targets)}")
            request = Compile(targets=list(self.spec.targets), inputs=made.inputs, full_size=full)
            await w.send(request.to_header(), blobs)
            frame = await self.workers.recv(w, candidate=True)
            self.workers.candidate_verdict(frame, Msg.COMPILED)
        except Stop as stop:
            if not self.workers.interpret:
                raise
            return CompileResult(
                ok=False, failure_class=stop.cls, evidence=stop.evidence, seconds=time.perf_counter() - start
            )
        try:
            compiled: Compiled | None = Compiled.from_header(frame.header)
        except ValueError:
            compiled = None
        result = compile_result(compiled, time.perf_counter() - start)
        result.shapes = compiled.shapes if compiled is not None else None
        return result

    async def warm_up(self, cand: WorkerProcess) -> None:
        """Before the GPU lock: compile the candidate's kernels (no kernel runs) and, when
        profiling, torch.compile the reference."""
        await self.workers.progress(0.08, "compiling kernels")
        async with self.workers.gpu_lock(exclusive=False):
            made, blobs = await self.workers.inputs(0)
        # Triton's compiler runs on the CPU: no lock, so other jobs' timings go on meanwhile.
        await cand.send(Warmup(inputs=made.inputs).to_header(), blobs)
        self.workers.candidate_verdict(await self.workers.recv(cand, candidate=True), Msg.WARM)
        if "profile" in self.spec.stages and self.compiled_timing() is None:
            await self.workers.progress(0.09, "compiling the reference with torch.compile")
            async with self.workers.gpu_lock(exclusive=False):  # inductor benchmarks on the GPU
                await self.workers.ask_ref(WarmupReference(), error_is_an_answer=True)

    def reference_device(self) -> str:
        """The GPU as the reference worker named it (a compiled timing is reused on the same one)."""
        ref = self.workers.ref
        return str(ref.info.get("device", "")) if ref is not None else ""

    def compiled_timing(self) -> Timing | None:
        return self.references.compiled_timing(self.workers.key, self.reference_device())

    # ---- verify ----

    async def verify_stage(self, cand: WorkerProcess) -> VerifyResult:
        total = self.input_sets * self.spec.trials
        done = 0
        try:
            for s in range(self.input_sets):
                for t in range(self.spec.trials):
                    where = f" (input set {s + 1} of {self.input_sets})" if self.input_sets > 1 else ""
                    await self.workers.progress(
                        0.1 + 0.8 * done / total, f"trial {done + 1} of {total}{where}"
                    )
                    failed = await self.trial(cand, s, t)
                    if failed is not None:
                        return self.verified(cand, done, *failed)
                    done += 1
            await self.workers.progress(0.88, "knockout: forward without its kernels")
            decoy = await self.knockout(cand)
            if decoy is not None:
                return self.verified(cand, done, FailureClass.FORBIDDEN_CONSTRUCT, decoy)
        except Stop as stop:
            if stop.evidence.trial is None:
                stop.evidence.trial = done % self.spec.trials
            return self.verified(cand, done, stop.cls, stop.evidence)
        notes = list(self.workers.notes)
        if self.workers.interpret:
            notes.append(
                "ran in Triton's CPU interpreter: races, out-of-bounds reads and speed are not checked "
                "(fp32 tl.dot is rounded to TF32, as on a GPU, unless the kernel asks for IEEE)"
            )
        await self.workers.progress(0.9, "verified")
        return self.verified(cand, done, None, None, notes=notes)

    async def trial(self, cand: WorkerProcess, s: int, t: int) -> tuple[FailureClass, Evidence] | None:
        """One trial on input set `s`: the candidate runs (twice on the first, for determinism),
        the reference compares. The failure, if the outputs differ."""
        small = scaled.is_scaled_trial(s, t, self.spec.trials)
        made, blobs = await self.workers.inputs(s, scaled.SCALE if small else None)
        await cand.send(Run(inputs=made.inputs, determinism=s == 0 and t == 0).to_header(), blobs)
        frame = await self.workers.recv(cand, candidate=True)
        out = self.workers.read(frame, Outputs)
        self.kernels = list(dict.fromkeys([*self.kernels, *(n[:200] for n in out.kernels)]))
        compared = await self.compare(Compare(outputs=out.outputs, inputs_after=out.inputs_after), frame)
        if not compared.failure_class:
            return None
        ev = evidence_from(compared.evidence, "outputs differ")
        if small:
            ev.message = f"{ev.message} ({scaled.NOTE})"
        ev.trial, ev.input_set = t, s
        return FailureClass(compared.failure_class), ev

    async def compare(self, request: Compare, frame: Frame) -> Compared:
        """The reference's comparison of the outputs the candidate sent in `frame`."""
        cmp = await self.workers.ask_ref(request, frame.blobs)
        if cmp.header.get("type") != Msg.COMPARED:
            self.workers.task_error(cmp)
            raise Stop(
                FailureClass.RUNTIME_CRASH, Evidence(message="the reference could not compare outputs")
            )
        return Compared.from_header(cmp.header)

    async def knockout(self, cand: WorkerProcess) -> Evidence | None:
        """The knockout check (`knockout.py`): forward on fresh inputs with every Triton launch
        skipped; if the reference still finds its output right, the kernels were a decoy (the
        evidence). None when the output changed or forward failed without its kernels."""
        made, blobs = await self.workers.inputs(0)
        await cand.send(Knockout(inputs=made.inputs).to_header(), blobs)
        frame = await self.workers.recv(cand, candidate=True)
        out = self.workers.read(frame, KnockedOut)
        if out.outputs is None:
            return None
        compared = await self.compare(Compare(outputs=[out.outputs], inputs_after=out.inputs_after), frame)
        if compared.failure_class and compared.failure_class != FailureClass.INPUTS_MUTATED.value:
            return None
        return Evidence(message=DECOY_MESSAGE, op=f"knockout ({out.skipped} launches skipped)")

    def verified(
        self, cand: WorkerProcess, done: int, cls: FailureClass | None, ev: Evidence | None, **kw: Any
    ) -> VerifyResult:
        kw.setdefault("notes", list(self.workers.notes))  # a shrunk task's note, on any verdict
        return verify_result(
            self.spec,
            self.device,
            cls,
            ev,
            trials_passed=done,
            input_sets=self.input_sets,
            kernels_launched=self.kernels,
            device_label=device_label(self.device, cand.info),
            **kw,
        )

    # ---- profile ----

    async def profile_stage(self, cand: WorkerProcess | None) -> ProfileResult:
        """Time the candidate against the reference on a GPU; without one, the roofline floor
        only (`cand` is None: no candidate runs)."""
        start = time.perf_counter()
        if self.input_sets > 1 or not self.workers.ref_has_inputs:
            # Verification ended on the last extra input set: time on get_inputs(), the task's own.
            made, blobs = await self.workers.inputs(0)
            if cand is not None and self.device.kind != "cpu":
                await cand.send(UseInputs(inputs=made.inputs).to_header(), blobs)
                self.workers.candidate_verdict(await self.workers.recv(cand, candidate=True), Msg.OK)
        roof, roof_error = await self.roofline()
        if self.device.kind == "cpu":
            message = NO_GPU_MESSAGE.format(target=self.spec.roofline_target)
            if roof_error:
                message += f" (roofline unavailable: {roof_error[:300]})"
            return ProfileResult(
                available=False, message=message, roofline=roof, seconds=round(time.perf_counter() - start, 3)
            )
        assert cand is not None
        return await self.time_on_gpu(cand, roof, start)

    async def roofline(self) -> tuple[Roofline | None, str | None]:
        frame = await self.workers.ask_ref(
            ComputeRoofline(target=self.spec.roofline_target, full_size=self.workers.interpret),
            error_is_an_answer=True,
        )
        counted = RooflineCounted.from_header(frame.header)
        if counted.roofline is None:
            return None, counted.error or "the roofline could not be computed"
        return Roofline.model_validate(counted.roofline), None

    async def time_on_gpu(self, cand: WorkerProcess, roof: Roofline | None, start: float) -> ProfileResult:
        """Interleave rounds of candidate and reference timing (each in its own process, on the
        same inputs), then summarise each side's samples."""
        cached = self.compiled_timing()
        rounds = _Rounds(("candidate", "eager") if cached is not None else ("candidate", "eager", "compiled"))
        while not rounds.done():
            rounds.count += 1
            await self.workers.progress(
                0.9 + 0.1 * (rounds.count - 1) / MAX_PROFILE_ROUNDS, f"timing, round {rounds.count}"
            )
            await self.time_candidate(cand, rounds)
            failed = await self.time_reference(rounds, compiled=cached is None)
            if failed is not None:
                return ProfileResult(available=False, message=failed, roofline=roof)
        t = rounds.timings()
        if cached is None:
            self.references.remember_compiled(self.workers.key, self.reference_device(), t["compiled"])
        else:
            t["compiled"] = cached
        result = profile_result(
            t["candidate"],
            t["eager"],
            t["compiled"],
            roof,
            device_label(self.device, cand.info),
            round(time.perf_counter() - start, 3),
        )
        result.message += f"; {rounds.count} interleaved rounds"
        if cached is not None:
            result.message += f"; {timingcache.REUSED} (reused for {COMPILED_REFERENCE_TTL_S / 60:.0f} min)"
        return result

    async def time_candidate(self, cand: WorkerProcess, rounds: _Rounds) -> None:
        method: TimingMethod | Literal["auto"] = rounds.methods.get("candidate", "auto")
        await cand.send(TimeCandidate(budget_ms=PROFILE_BUDGET_MS, method=method).to_header())
        timed = self.workers.read(await self.workers.recv(cand, candidate=True), Timed)
        if timed.error is not None:
            raise Stop(
                FailureClass.RUNTIME_ERROR,
                Evidence(message="timing the candidate failed", error_text=timed.error),
            )
        try:
            rounds.add("candidate", timed.samples("candidate"))
        except ProtocolError as e:
            raise Stop(
                FailureClass.RUNTIME_CRASH, Evidence(message=f"the candidate sent malformed timings: {e}")
            ) from e

    async def time_reference(self, rounds: _Rounds, *, compiled: bool) -> str | None:
        """One round of the reference's timings; why they failed, if they did."""
        ref_keys = [k for k in rounds.keys if k != "candidate"]
        frame = await self.workers.ask_ref(
            TimeReference(
                budget_ms=PROFILE_BUDGET_MS,
                methods={k: rounds.methods[k] for k in ref_keys if k in rounds.methods},
                compiled=compiled,
            )
        )
        timed = Timed.from_header(frame.header)
        if timed.error is not None:
            return f"timing the reference failed: {exception_text(timed.error).strip()[:600]}"
        for k in ref_keys:
            rounds.add(k, timed.samples(k))
        return None

    # ---- baseline: the reference alone ----

    async def baseline_stage(self) -> ProfileResult:
        """Time the reference alone, eager and under torch.compile, on the task's get_inputs()
        (as KernelBench's baseline script does, with our interleaved rounds and L2 handling);
        without a GPU, the roofline floor of the task's real sizes, nothing run."""
        start = time.perf_counter()
        if self.device.kind == "cpu":
            roof, roof_error = await self.roofline()
            message = NO_GPU_MESSAGE.format(target=self.spec.roofline_target)
            if roof_error:
                message += f" (roofline unavailable: {roof_error[:300]})"
            return ProfileResult(
                available=False, message=message, roofline=roof, seconds=round(time.perf_counter() - start, 3)
            )
        await self.workers.progress(0.1, "making the inputs")
        async with self.workers.gpu_lock(exclusive=False):
            await self.workers.inputs(0)
        roof, _ = await self.roofline()
        await self.workers.progress(0.2, "compiling the reference with torch.compile")
        async with self.workers.gpu_lock(exclusive=False):  # inductor benchmarks on the GPU
            warm = Warm.from_header(
                (await self.workers.ask_ref(WarmupReference(), error_is_an_answer=True)).header
            )
        # A model torch.compile cannot handle still has its eager time.
        rounds = _Rounds(("eager",) if warm.error else ("eager", "compiled"))
        async with self.workers.gpu_lock(exclusive=True):
            while not rounds.done():
                rounds.count += 1
                await self.workers.progress(
                    0.3 + 0.7 * (rounds.count - 1) / MAX_PROFILE_ROUNDS, f"timing, round {rounds.count}"
                )
                failed = await self.time_reference(rounds, compiled=warm.error is None)
                if failed is not None:
                    return ProfileResult(available=False, message=failed, roofline=roof)
        t = rounds.timings()
        if "compiled" in t:
            self.references.remember_compiled(self.workers.key, self.reference_device(), t["compiled"])
        notes = [timing_note(k, v) for k, v in t.items()]
        if warm.error:
            notes.append(f"torch.compile failed: {warm.error[:300]}")
        return ProfileResult(
            available=True,
            message="; ".join([*notes, f"{rounds.count} rounds, the reference alone"]),
            device=device_label(self.device, self.workers.ref.info if self.workers.ref else None),
            reference_eager=t["eager"],
            reference_compiled=t.get("compiled"),
            roofline=roof,
            seconds=round(time.perf_counter() - start, 3),
        )
