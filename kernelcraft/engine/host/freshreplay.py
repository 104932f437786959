"""The job's side of the fresh-input replay (`engine/replay/fresh.py`), last of verify, and of the
GPU check's compile of the kernels the trials launched (`compile_recorded`).

Every trial asks the candidate for forward's record (`Run.program`); once every trial and the
knockout passed, the reference re-runs each distinct record (`replay/records.py`), with no
candidate code, on inputs drawn from a seed the candidate never saw (the trial's input set,
scaled as the trial's were), and must get its own answer for them. No trial is the one re-run: a
forward honest on its first call and computing on the host later, or only on the small-magnitude
trial, has those records re-run too. A candidate that sends no record fails: the check cannot be
skipped by not answering. The reference ran the candidate's kernels, which may write beyond their
buffers (raw addresses in the interpreter, device memory on a GPU), so it is not kept for another
job (`JobWorkers.ask_ref` marks a reference asked to replay): a hostile record once corrupted a
parked reference that the next job's honest candidate then crashed in. Both read the job's facts
from its `JobState` and ask its processes through its `JobWorkers`.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.host.jobstate import JobState
from kernelcraft.engine.host.jobworkers import JobWorkers, Stop
from kernelcraft.engine.host.verdicts import compile_result, evidence_from
from kernelcraft.engine.machine.pool import WorkerPool
from kernelcraft.engine.replay.records import Record
from kernelcraft.engine.wire.protocol import (
    Compiled,
    CompileRecorded,
    FreshReplay,
    Load,
    Msg,
    Replayed,
)
from kernelcraft.schema.evaluation import CompileResult, Evidence, VerifyResult


async def fresh_replay(state: JobState, workers: JobWorkers) -> Evidence | None:
    """The evidence when a trial's record (`state.records`) does not give the reference's answer
    on fresh inputs, or was not sent; None when each one re-run does (`Records.to_rerun`), or
    when no trial ran. The first is re-run on two fresh draws, each other one on one."""
    for i, record in enumerate(state.records.to_rerun()):
        ev = await _fresh_replay_one(state, workers, record, draws=2 if i == 0 else 1)
        if ev is not None:
            ev.trial, ev.input_set = record.trial, record.input_set
            return ev
    return None


async def _fresh_replay_one(
    state: JobState, workers: JobWorkers, record: Record, draws: int
) -> Evidence | None:
    spec, out, blobs = state.spec, record.out, record.blobs
    if out.program is None:
        why = out.program_error or "the candidate's worker sent no record of forward"
        return Evidence(
            message=f"{why}; the harness re-runs forward's record on fresh inputs to check that the "
            "kernels do the work, and cannot without it",
            op="fresh replay",
        )
    unheld = held_to_source(out.program, spec.candidate_source)
    if unheld is not None:
        return Evidence(message=unheld, op="fresh replay")
    allowed = None if spec.correctness == "adaexplore" else list(spec.allowed_ops)
    request = FreshReplay(
        program=out.program,
        kept=out.program_kept,
        seed=secrets.randbits(62),
        input_set=record.input_set,
        scale=record.scale,
        draws=draws,
        allowed_ops=allowed,
    )
    try:
        frame = await workers.ask_ref(request, blobs)
    except Stop as stop:
        if stop.cls != FailureClass.RUNTIME_CRASH:  # a harness limit, a timeout: as they are
            raise
        # Only the candidate's recorded kernels ran there: on inputs it never saw, they wrote
        # where they had no buffer (a size or an address taken from the trial's own inputs).
        return Evidence(
            message=f"re-running forward's record on fresh inputs the candidate never saw crashed "
            f"the reference worker ({stop.evidence.message}): the launches depend on numbers "
            "taken from the trial's inputs, not on the inputs they are given",
            op="fresh replay",
        )
    if frame.header.get("type") != Msg.REPLAYED:
        workers.task_error(frame)
        raise Stop(
            FailureClass.RUNTIME_CRASH,
            Evidence(message="the reference could not re-run the candidate's record on fresh inputs"),
        )
    replayed = Replayed.from_header(frame.header)
    if replayed.note is not None:
        state.notes.append(replayed.note)
    if replayed.failure_class is None:
        return None
    return evidence_from(replayed.evidence, "forward's record gave a wrong answer on fresh inputs")


async def compile_recorded(
    state: JobState, workers: JobWorkers, pool: WorkerPool, program: dict[str, Any], target: str
) -> CompileResult:
    """The GPU check's compile of exactly the kernels the first trial launched (its record,
    `program`), in a trusted worker of `pool` (Triton without the interpreter) that loads neither
    the task nor the candidate (`worker/kernels.py`): a forward that launches other kernels where
    the interpreter is off has no say in what is compiled."""
    from kernelcraft.engine import box
    from kernelcraft.engine.box import cgroup

    start = time.perf_counter()
    w = await workers.acquire(pool)
    sandbox = state.settings.sandbox
    if sandbox:  # it compiles the candidate's source: bounded as a candidate is
        w.limit(box.CANDIDATE_TASKS, cgroup.memory_for(state.device.kind, state.memory_limit))
    load = Load(role="kernels", workdir=str(w.dir), task_source="", seed0=0, sandbox=sandbox)
    await w.send(load.to_header())
    workers.candidate_verdict(await workers.recv(w, candidate=True), Msg.OK)
    await w.send(CompileRecorded(program=program, targets=[target]).to_header())
    frame = await workers.recv(w, candidate=True)
    workers.candidate_verdict(frame, Msg.COMPILED)
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


def held_to_source(program: dict[str, Any], candidate_source: str) -> str | None:
    """Why the record's kernels are not the submitted ones, or a submitted kernel is not Triton
    language (`kernelsource.not_submitted`, `submitted_problems`), read against the candidate's
    source and the sources of its own modules it imports."""
    import ast
    from pathlib import Path

    from kernelcraft.engine.replay.kernelsource import not_submitted, submitted_problems
    from kernelcraft.engine.replay.program import KernelDesc
    from kernelcraft.engine.source.local_imports import local_imports, local_search_path

    try:
        kernels = [KernelDesc.model_validate(k) for k in program.get("kernels", [])]
    except ValueError as e:
        return f"the candidate's record of forward names malformed kernels ({str(e)[:200]})"
    texts = [candidate_source]
    try:
        tree = ast.parse(candidate_source)
        texts += [Path(path).read_text() for _line, _name, path in local_imports(tree, local_search_path())]
    except (SyntaxError, OSError, UnicodeDecodeError):
        pass
    why = not_submitted(kernels, texts)
    for text in texts:
        why = why or submitted_problems(text)
    return why
