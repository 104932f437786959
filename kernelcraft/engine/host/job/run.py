"""One submitted job: the compile, verify and profile stages, in order, on the job's workers.

`LocalEvaluator.submit` builds a `Job` with everything it needs (the job's device with its pools
and GPU lock, the reference pool, the candidate settings, the evaluator's set of held workers)
and awaits `run()`, which always returns a result: a candidate's failure is a verdict in it. What
the job was given and learns is its one `JobState` (`job/state.py`), which `Job` builds and its
parts share; the processes are `JobWorkers`' business (`job/workers.py`), the compile stage and
the GPU check `JobCompile`'s (`job/compile.py`), the profile and baseline stages `JobTiming`'s
(`job/timing.py`); the result models are built by the pure functions of `verdicts.py`.

Order and the GPU: the reference and the candidate load at the same time; the compile stage (if
asked) loads its own candidate after the reference. On a GPU, the candidate's kernels are
compiled without the lock, verification shares the GPU, and timing has it alone.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable
from typing import Any, cast

from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.checks import findings, perturb, scaled
from kernelcraft.engine.host.evaluator import ProgressCallback
from kernelcraft.engine.host.job.compile import JobCompile
from kernelcraft.engine.host.job.replay import fresh_replay
from kernelcraft.engine.host.job.state import CandidateSettings, JobState
from kernelcraft.engine.host.job.timing import JobTiming
from kernelcraft.engine.host.job.workers import JobWorkers, Stop
from kernelcraft.engine.host.references import ReferencePool
from kernelcraft.engine.host.verdicts import (
    DECOY_MESSAGE,
    DROPOUT_HINT,
    device_label,
    evidence_from,
    fill_failed,
    mode_note,
    not_profiled_after,
    random_in_training,
    verify_result,
)
from kernelcraft.engine.machine.gpulock import Device
from kernelcraft.engine.machine.pool import WorkerProcess
from kernelcraft.engine.replay.records import Records
from kernelcraft.engine.wire.channel import Frame
from kernelcraft.engine.wire.protocol import (
    Compare,
    Compared,
    KnockedOut,
    Knockout,
    Msg,
    Outputs,
    Perturb,
    Run,
    TaskReady,
    Warmup,
    WarmupReference,
)
from kernelcraft.schema.evaluation import (
    EvalJob,
    EvalResult,
    Evidence,
    VerifyResult,
)
from kernelcraft.schema.kernelwords import compiled_words


class Job:
    """One submitted job: its stages, on the workers of a `JobWorkers`, writing to its `JobState`."""

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
        self.state = JobState(spec, device, references, settings, progress, alone=alone)
        """What the job was given and what it learns: the one object its parts share."""
        self.workers = JobWorkers(self.state, active)
        self.timing = JobTiming(self.state, self.workers)
        self.compile = JobCompile(self.state, self.workers)

    @property
    def wants_candidate(self) -> bool:
        """Without a GPU, profile is the roofline floor alone: it needs no candidate."""
        stages = self.state.spec.stages
        return "verify" in stages or ("profile" in stages and not self.state.interpret)

    async def run(self) -> EvalResult:
        st = self.state
        result = EvalResult()
        started = time.perf_counter()
        try:
            await st.progress(0.0, "waiting for workers")
            cand = await self.start_workers()
            if st.spec.baseline_only:
                t = time.perf_counter()
                result.baseline = await self.timing.baseline()
                st.stage("baseline", t)
            if "compile" in st.spec.stages:
                t = time.perf_counter()
                result.compile = await self.compile.stage()
                st.stage("compile", t)
                if not st.interpret:
                    cand = self.compile.candidate()
            if self.wants_candidate:
                if cand is None:
                    cand = await self.workers.start_candidate()
                await self.candidate_stages(result, cand)
                await self.compile.gpu_check(result)
            elif "profile" in st.spec.stages:
                t = time.perf_counter()
                result.profile = await self.timing.profile(None, st.input_sets)
                st.stage("profile", t)
            if result.failure_class is None:
                await self.workers.keep_compiled()
        except Stop as stop:
            fill_failed(result, st.spec, st.device, stop.cls, stop.evidence, st.kernels)
        finally:
            await self.workers.release()
            result.stage_seconds = st.partition(started, time.perf_counter())
        if result.profile is not None and result.compile is not None:
            target = st.spec.roofline_target or (st.spec.targets[0] if st.spec.targets else "")
            result.profile.why = compiled_words(result.compile, target)
        failed = result.failure_class
        await st.progress(1.0, f"done: {failed.value}" if failed is not None else "done")
        return result

    async def start_workers(self) -> WorkerProcess | None:
        """The reference and the candidate load at the same time, in their own processes (the
        compile stage loads its own candidate, after the reference). Returns the candidate
        worker if it was loaded here; the reference's failure (an unusable task) comes first."""
        st = self.state
        loads: list[Awaitable[Any]] = [self.workers.start_reference()]
        if self.wants_candidate and "compile" not in st.spec.stages:
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
        st.ready = ready
        st.input_sets = int(ready.input_sets)
        if ready.mode_sensitive:
            st.notes.append(mode_note(st.spec.model_mode, ready.mode_sensitive))
        return cast("WorkerProcess | None", outcome[1] if len(outcome) > 1 else None)

    async def candidate_stages(self, result: EvalResult, cand: WorkerProcess) -> None:
        st = self.state
        if "verify" in st.spec.stages:
            await self.fresh_parameters(cand)
        if not st.interpret:
            t = time.perf_counter()
            await self.warm_up(cand)
            st.stage("kernels", t)
        if "verify" in st.spec.stages:
            t = time.perf_counter()
            result.verify = await self.verify_stage(cand, alone_first="profile" in st.spec.stages)
            st.stage("verify", t)
        if "profile" in st.spec.stages:
            if result.verify is not None and not result.verify.correct:
                result.profile = not_profiled_after(result.verify)
            else:
                async with self.workers.gpu_lock(exclusive=True):
                    t = time.perf_counter()
                    result.profile = await self.timing.profile(cand, st.input_sets)
                    st.stage("profile", t)

    async def fresh_parameters(self, cand: WorkerProcess) -> None:
        """Before the trials, fresh values for the float parameters and buffers of both models,
        from one secret seed (`perturb.py`), when Model's (the reference's word) and ModelNew's
        (the candidate's) agree in order, kind, shape and dtype; when they do not, the harness
        cannot give both the same values: neither is perturbed and the notes say so."""
        st = self.state
        ready = st.ready
        if ready is None or not ready.perturb_allowed:
            return
        why, renamed = perturb.differences(ready.parameters, st.candidate_parameters)
        if why is not None:
            st.notes.append(perturb.not_perturbed(why)[:800])
            return
        if renamed is not None:
            st.notes.append(perturb.renamed_note(renamed)[:600])
        if not ready.parameters:
            return
        request = Perturb(seed=secrets.randbits(62))
        self.workers.task_error(await self.workers.ask_ref(request))
        await cand.send(request.to_header())
        self.workers.candidate_verdict(await self.workers.recv(cand, candidate=True), Msg.OK)
        st.refreshed = {str(p[1]) for p in ready.parameters}

    async def warm_up(self, cand: WorkerProcess) -> None:
        """Before the GPU lock: compile the candidate's kernels (no kernel runs) and, when
        profiling, torch.compile the reference."""
        st = self.state
        await st.progress(0.08, "compiling kernels")
        async with self.workers.gpu_lock(exclusive=False):
            made, blobs = await self.workers.inputs(0)
        # Triton's compiler runs on the CPU: no lock, so other jobs' timings go on meanwhile.
        await cand.send(Warmup(inputs=made.inputs).to_header(), blobs)
        self.workers.candidate_verdict(await self.workers.recv(cand, candidate=True), Msg.WARM)
        if "profile" in st.spec.stages and self.timing.compiled_timing() is None:
            await st.progress(0.09, "compiling the reference with torch.compile")
            async with self.workers.gpu_lock(exclusive=False):  # inductor benchmarks on the GPU
                await self.workers.ask_ref(WarmupReference(), error_is_an_answer=True)

    # ---- verify ----

    async def verify_stage(self, cand: WorkerProcess, *, alone_first: bool = False) -> VerifyResult:
        """The trials, then the knockout, each holding the GPU beside other jobs' verifications.
        With `alone_first` (the verdict will be timed) the first trial holds it alone: that first
        call runs each `@triton.autotune`'s benchmarks, and the config they keep, which the timing
        then measures, must not be picked under other jobs' load."""
        st = self.state
        total = st.input_sets * st.spec.trials
        done = 0
        try:
            for s in range(st.input_sets):
                for t in range(st.spec.trials):
                    where = f" (input set {s + 1} of {st.input_sets})" if st.input_sets > 1 else ""
                    await st.progress(0.1 + 0.8 * done / total, f"trial {done + 1} of {total}{where}")
                    async with self.workers.gpu_lock(exclusive=alone_first and done == 0):
                        failed = await self.trial(cand, s, t, pick=done)
                    if failed is not None:
                        return self.verified(cand, done, *failed)
                    done += 1
            # The interpreter runs one @triton.autotune config a trial: the configs left get one
            # more trial each (`checks/autotune.py`).
            for pick in st.seen.autotune.picks_left(total) if st.interpret else ():
                await st.progress(0.86, f"autotune config trial {pick + 1 - total}")
                async with self.workers.gpu_lock(exclusive=False):
                    failed = await self.trial(cand, 0, st.spec.trials + pick - total, pick=pick)
                if failed is not None:
                    return self.verified(cand, done, *failed)
            if st.spec.correctness == "kernelcraft":  # AdaExplore's rule has no knockout
                await st.progress(0.88, "knockout: forward without its kernels")
                async with self.workers.gpu_lock(exclusive=False):
                    decoy = await self.knockout(cand)
                if decoy is not None:
                    return self.verified(cand, done, FailureClass.FORBIDDEN_CONSTRUCT, decoy)
            await st.progress(0.89, "re-running forward's record on fresh inputs")
            async with self.workers.gpu_lock(exclusive=False):
                unreplayed = await fresh_replay(self.state, self.workers)
                st.programs = st.records.programs()  # (the GPU check compiles each one's kernels)
                st.records = Records()
            if unreplayed is not None:
                return self.verified(cand, done, FailureClass.FORBIDDEN_CONSTRUCT, unreplayed)
        except Stop as stop:
            if stop.evidence.trial is None:
                stop.evidence.trial = done % st.spec.trials
            return self.verified(cand, done, stop.cls, stop.evidence)
        notes = st.notes + findings.pass_notes(
            st.seen,
            interpret=st.interpret,
            tf32_dots=st.tf32_dots,
            candidate_source=st.spec.candidate_source,
            correctness=st.spec.correctness,
            torch_ops=st.torch_ops,
        )
        await st.progress(0.9, "verified")
        return self.verified(cand, done, None, None, notes=notes)

    async def trial(
        self, cand: WorkerProcess, s: int, t: int, *, pick: int = 0
    ) -> tuple[FailureClass, Evidence] | None:
        """One trial on input set `s`: the candidate runs (twice on the first, for determinism),
        the reference compares. The failure, if the outputs differ. `pick`: the interpreter's
        `@triton.autotune` config (`checks/autotune.py`)."""
        st = self.state
        small = scaled.is_scaled_trial(s, t, st.spec.trials)
        made, blobs = await self.workers.inputs(s, scaled.SCALE if small else None)
        determinism = s == 0 and t == 0
        run = Run(inputs=made.inputs, determinism=determinism, autotune_pick=pick, program=True)
        await cand.send(run.to_header(), blobs)
        frame = await self.workers.recv(cand, candidate=True)
        out = self.workers.read(frame, Outputs)
        # Every trial's record is re-run on fresh inputs (job/replay.py); the GPU check compiles
        # the first's kernels.
        st.records.add(out, frame.blobs, t, s, scaled.SCALE if small else None, t >= st.spec.trials)
        if determinism:
            st.program = out.program
        configs = st.seen.autotune.add(out.autotune)
        st.seen.spent.add(out.interpreted)
        runs = 2 if determinism else 1
        if len(out.outputs) != runs:
            # Held to what was asked: zero output sets is not "nothing compared, so correct".
            return FailureClass.FORBIDDEN_CONSTRUCT, Evidence(
                message=f"the candidate's process sent {len(out.outputs)} output set(s) for {runs} run(s)",
                op="outputs",
                trial=t,
                input_set=s,
            )
        st.kernels = list(dict.fromkeys([*st.kernels, *(n[:200] for n in out.kernels)]))
        seed = st.input_seed
        compared = await self.compare(
            Compare(outputs=out.outputs, inputs_after=out.inputs_after, runs=runs), frame
        )
        st.tolerance = compared.tolerance or st.tolerance
        st.seen.margin.add(compared.margin, done=pick)
        st.tf32_dots += out.tf32_dots
        st.torch_ops = list(dict.fromkeys([*st.torch_ops, *out.torch_ops]))
        if not compared.failure_class:
            if out.replay_limit is not None:  # the replay's memory is the harness's (`worker/room.py`)
                return FailureClass.HARNESS_LIMIT, Evidence(
                    message=out.replay_limit[:2000], op="replay", trial=t, input_set=s
                )
            if out.replay is None:
                return None
            return FailureClass.FORBIDDEN_CONSTRUCT, Evidence(
                message=out.replay, op="replay", trial=t, input_set=s
            )
        ev = evidence_from(compared.evidence, "outputs differ")
        if out.tf32_dots and compared.failure_class == FailureClass.NUMERICAL_MISMATCH.value:
            ev.message = f"{ev.message}. {TF32_HINT.format(n=out.tf32_dots)}"
        masks = random_in_training(st.ready.mode_sensitive) if st.ready is not None else []
        if (
            masks
            and st.spec.model_mode == "train"
            and compared.failure_class == FailureClass.NUMERICAL_MISMATCH.value
        ):
            ev.message = f"{ev.message}. {DROPOUT_HINT.format(kinds=', '.join(masks[:3]))}"
        if small:
            ev.message = f"{ev.message} ({scaled.NOTE})"
        if configs:
            ev.message = f"{ev.message} (with @triton.autotune {configs})"[:4000]
        ev.trial, ev.input_set, ev.input_seed = t, s, seed
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
        st = self.state
        kw.setdefault("notes", list(st.notes))  # a shrunk task's note, on any verdict
        kw.setdefault("tolerance", st.tolerance)
        if cls is FailureClass.NUMERICAL_MISMATCH and st.ready is not None:
            drawn = [
                name
                for name in drawn_otherwise(st.ready.initial_values, st.candidate_initial)
                if name not in st.refreshed  # both got the same fresh values since
            ]
            if drawn:
                kw["notes"] = [*kw["notes"], RNG_ORDER_NOTE.format(names=", ".join(drawn[:5]))]
        return verify_result(
            st.spec,
            st.device,
            cls,
            ev,
            trials_passed=done,
            input_sets=st.input_sets,
            kernels_launched=st.kernels,
            device_label=device_label(st.device, cand.info),
            **kw,
        )


RNG_ORDER_NOTE = (
    "ModelNew was built holding other initial values than Model in {names}. Both are built after the "
    "same seed, as in KernelBench, so a tensor drawn in another order (parameters created in another "
    "order, a hidden state drawn in __init__) gets other values: draw in the order Model does; the "
    "harness gives fresh values only to parameters and buffers that match Model's"
)
"""On a mismatch only: why outputs can differ that no kernel computes wrongly (issue 26)."""


def drawn_otherwise(model: dict[str, str], model_new: dict[str, str]) -> list[str]:
    """Names both models hold whose initial values differ (by digest)."""
    return [name for name, digest in model.items() if name in model_new and model_new[name] != digest]


TF32_HINT = (
    "Its {n} fp32 tl.dot call(s) ran as TF32, as a GPU's tensor cores run them by default (10 of fp32's "
    '23 mantissa bits): pass input_precision="ieee" (exact) or "tf32x3" (near-fp32 on tensor cores) '
    "to tl.dot"
)
"""The words a TF32 mismatch adds to its verdict (issue 26): the cause and the fix."""
