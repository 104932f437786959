"""A job's compile stage and, without a GPU, the GPU compiler's check of a passing verdict, for `Job`.

The compile stage discovers the candidate's launches (no kernel runs) and compiles them for each
target, in a worker of the device's compile pool; targets an earlier job compiled the candidate
for, on the same task, come from the compile facts (`compilefacts.py`). On a GPU, the trials then
run in the worker the compile stage loaded (`candidate`). Without one, a verdict the interpreter
passed is compiled for `EvalJob.gpu_check` (`gpu_check`): exactly the kernels the first trial
launched (`compile_recorded`, in a worker that loads neither the task nor the candidate), then
the launches at the task's own sizes; a kernel the compiler rejects fails the verdict
(`gpu_rejects`). It reads the job's facts from its `JobState` and asks its processes through its
`JobWorkers`; its own state is the worker it loaded.
"""

from __future__ import annotations

import time
from typing import Any

from kernelcraft.base.failures import FailureClass
from kernelcraft.engine import box
from kernelcraft.engine.box import cgroup
from kernelcraft.engine.host.compilefacts import from_known, with_known
from kernelcraft.engine.host.job.state import JobState
from kernelcraft.engine.host.job.workers import JobWorkers, Stop
from kernelcraft.engine.host.verdicts import compile_result, compile_timeout_words
from kernelcraft.engine.machine.pool import WorkerPool, WorkerProcess
from kernelcraft.engine.wire.protocol import Compile, Compiled, CompileRecorded, Load, Msg
from kernelcraft.schema.evaluation import CompileResult, EvalResult, Evidence, VerifyResult


class JobCompile:
    """The compile stage and the GPU check of one job, on its workers."""

    def __init__(self, state: JobState, workers: JobWorkers) -> None:
        self.state = state
        self.workers = workers
        self.worker: WorkerProcess | None = None
        """The worker the compile stage loaded the candidate in."""

    def candidate(self) -> WorkerProcess | None:
        """The worker the compile stage loaded the candidate in (on a GPU, the trials run there);
        None when it compiled nothing (every target's facts were known)."""
        return self.worker

    async def stage(self, targets: list[str] | None = None) -> CompileResult:
        """Discover launches (no kernel runs) and compile them for each target (the job's, unless
        given). On a CPU machine this worker imports the candidate without the interpreter, so
        real Triton compiles it. Targets an earlier job compiled this candidate for, on this task,
        are not compiled again: their facts come from `compilefacts.py`."""
        st = self.state
        targets = list(targets or st.spec.targets)
        start = time.perf_counter()
        # Without a GPU the worker loads the task as given and finds the launches on its own
        # get_inputs() built on the meta device: the task's real shapes, not the CPU's.
        full = st.interpret
        known = st.references.compile_facts.known(st.spec, targets, full)
        missing = [t for t in targets if t not in known]
        if not missing:
            return from_known(known, targets, time.perf_counter() - start)
        w = await self.workers.acquire(st.device.compile_pool)
        self.worker = w
        await st.progress(0.05, "loading the candidate")
        try:
            self.workers.loaded(await self.workers.load(w, "candidate", interpret=False, full_size=full))
            made, blobs = await self.workers.inputs(0)
            await st.progress(0.1, f"compiling for {', '.join(missing)}")
            request = Compile(targets=missing, inputs=made.inputs, full_size=full)
            await w.send(request.to_header(), blobs)
            frame = await self.workers.recv(w, candidate=True)
            self.workers.candidate_verdict(frame, Msg.COMPILED)
        except Stop as stop:
            if stop.cls is FailureClass.RUNTIME_TIMEOUT and stop.evidence is not None:
                stop.evidence.message += compile_timeout_words(st.found_launches, st.spec.timeout_s)
            if not st.interpret:
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
        st.references.compile_facts.keep(st.spec, result, full)
        return with_known(result, known, targets)

    async def gpu_check(self, result: EvalResult) -> None:
        """Without a GPU, a verdict the interpreter passed also needs the GPU compiler's word: the
        interpreter runs what Triton's compiler refuses (Python calls and globals in a kernel
        body, an autotune config over the shared-memory limit). Compile for `spec.gpu_check`
        exactly the kernels the trials launched, from their recorded source
        (`compile_recorded`), then the launches discovery finds at the task's own sizes (every
        autotune config, dropped for lack of resources as Triton's autotuner does); where the
        compiler rejects a kernel, the verdict fails with its message. A check that cannot be
        made (the task too large to build here, a harness limit) is a note."""
        st = self.state
        target, verify = st.spec.gpu_check, result.verify
        if not (st.interpret and target and verify is not None and verify.correct):
            return
        programs = st.programs or ([st.program] if st.program is not None else [])
        if programs and st.device.compile_pool is not None:
            t = time.perf_counter()  # exactly the kernels the trials launched, as recorded
            facts = st.references.compile_facts
            key = programs[0] if len(programs) == 1 else {"programs": programs}
            recorded = facts.recorded(key, target)
            if recorded is None:
                recorded = await self.compile_recorded(st.device.compile_pool, programs, target)
                facts.keep_recorded(key, target, recorded)
            st.stage("gpu_check", t)
            if gpu_rejects(verify, recorded, target, recorded=True):
                return
        compiled: CompileResult | None
        if "compile" in st.spec.stages:
            compiled = result.compile
        else:
            sized = await st.sized if st.sized.done() else None
            params = sized.params_bytes if sized is not None else 0
            if params > GPU_CHECK_MAX_PARAMS:
                verify.notes.append(
                    f"not compiled for {target}: the task's parameters ({params / 1024**3:.1f} GiB) are too "
                    f"large to build on this machine; `kernelcraft compile --target {target}` checks it"
                )
                return
            t = time.perf_counter()
            compiled = await self.stage([target])
            st.stage("gpu_check", t)
        gpu_rejects(verify, compiled, target, recorded=False)

    async def compile_recorded(
        self, pool: WorkerPool, programs: list[dict[str, Any]], target: str
    ) -> CompileResult:
        """The GPU check's compile of exactly the kernels the trials launched (each distinct
        record's program, `programs`), in a trusted worker of `pool` (Triton without the interpreter) that loads neither
        the task nor the candidate (`worker/kernels.py`): a forward that launches other kernels where
        the interpreter is off has no say in what is compiled."""
        start = time.perf_counter()
        w = await self.workers.acquire(pool)
        sandbox = self.state.settings.sandbox
        if sandbox:  # it compiles the candidate's source: bounded as a candidate is
            w.limit(box.CANDIDATE_TASKS, cgroup.memory_for(self.state.device.kind, self.state.memory_limit))
        load = Load(role="kernels", workdir=str(w.dir), task_source="", seed0=0, sandbox=sandbox)
        await w.send(load.to_header())
        self.workers.candidate_verdict(await self.workers.recv(w, candidate=True), Msg.OK)
        await w.send(CompileRecorded(program=programs[0], more=programs[1:], targets=[target]).to_header())
        frame = await self.workers.recv(w, candidate=True)
        self.workers.candidate_verdict(frame, Msg.COMPILED)
        try:
            compiled: Compiled | None = Compiled.from_header(frame.header)
        except ValueError:
            compiled = None
        return compile_result(compiled, time.perf_counter() - start)


RESOURCE_CLASSES = frozenset(
    {FailureClass.COMPILE_OUT_OF_SHARED_MEMORY, FailureClass.COMPILE_OUT_OF_REGISTERS}
)
"""Left to the check at the task's own sizes: there an autotune config short of resources is
dropped when another compiled, as Triton's autotuner does (`checks/aot.py`)."""


def gpu_rejects(verify: VerifyResult, compiled: CompileResult | None, target: str, *, recorded: bool) -> bool:
    """Fail `verify` where the compiler for `target` rejected a kernel of `compiled` (True then);
    a check that could not be made is a note. `recorded`: the first trial's own kernels
    (`compile_recorded`), compiled at the trial's sizes, whose lack of resources is not judged."""
    if compiled is not None and not recorded:  # autotune configs dropped for lack of resources
        verify.notes.extend(n for t in compiled.targets if t.target == target for n in t.notes)
    if compiled is None or compiled.ok or compiled.failure_class is None:
        return False
    if recorded and compiled.failure_class in RESOURCE_CLASSES:
        return False
    if not compiled.failure_class.value.startswith("compile_"):
        reason = compiled.evidence.message if compiled.evidence is not None else compiled.failure_class.value
        what = "the trials' kernels" if recorded else "the launches"
        verify.notes.append(f"{what} not compiled for {target} ({reason[:300]})")
        return False
    ev = compiled.evidence or Evidence(message="the GPU compiler rejected a kernel")
    ev.message = (f"Triton's interpreter ran it, but the compiler for {target} rejects it: {ev.message}")[
        :2000
    ]
    verify.correct, verify.status = False, compiled.failure_class.value
    verify.failure_class, verify.evidence = compiled.failure_class, ev
    return True


GPU_CHECK_MAX_PARAMS = 512 * 1024**2
"""Bytes of parameters up to which a CPU verify builds the task at full size to compile its
kernels for the GPU (`JobCompile.gpu_check`); above, the verdict says the check was not made."""
