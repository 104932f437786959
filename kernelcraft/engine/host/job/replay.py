"""The job's side of the fresh-input replay (`engine/replay/fresh.py`), last of verify.

Every trial asks the candidate for forward's record (`Run.program`); once every trial and the
knockout passed, the reference re-runs each distinct record (`replay/records.py`), with no
candidate code, on inputs drawn from a seed the candidate never saw (the trial's input set,
scaled as the trial's were), and must get its own answer for them. No trial is the one re-run: a
forward honest on its first call and computing on the host later, or only on the small-magnitude
trial, has those records re-run too. A candidate that sends no record fails: the check cannot be
skipped by not answering. The reference ran the candidate's kernels, which may write beyond their
buffers (raw addresses in the interpreter, device memory on a GPU), so it is not kept for another
job (`JobWorkers.ask_ref` marks a reference asked to replay): a hostile record once corrupted a
parked reference that the next job's honest candidate then crashed in. It reads the job's facts
from its `JobState` and asks its processes through its `JobWorkers`.
"""

from __future__ import annotations

import secrets
from typing import Any

from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.host.job.state import JobState
from kernelcraft.engine.host.job.workers import JobWorkers, Stop
from kernelcraft.engine.host.verdicts import evidence_from
from kernelcraft.engine.replay.records import Record
from kernelcraft.engine.wire.protocol import (
    FreshReplay,
    Msg,
    Replayed,
)
from kernelcraft.schema.evaluation import Evidence


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
