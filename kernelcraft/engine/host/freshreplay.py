"""The job's side of the fresh-input replay (`engine/watch/fresh.py`), last of verify.

The first trial asks the candidate for forward's record (`Run.program`); once every trial and the
knockout passed, the reference re-runs that record, with no candidate code, on inputs drawn from a
seed the candidate never saw, and must get its own answer for them. A candidate that sends no
record fails: the check cannot be skipped by not answering. The reference ran the candidate's
kernels, so it is not kept for another job (`JobWorkers.ran_candidate_kernels`).
"""

from __future__ import annotations

import secrets

from kernelcraft.base.evaluation import EvalJob, Evidence
from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.host.jobworkers import JobWorkers, Stop
from kernelcraft.engine.host.verdicts import evidence_from
from kernelcraft.engine.wire.protocol import FreshReplay, Msg, Outputs, Replayed


async def fresh_replay(
    workers: JobWorkers, spec: EvalJob, recorded: tuple[Outputs, list[bytes]] | None
) -> Evidence | None:
    """The evidence when the first trial's record (`recorded`: its answer and blobs) does not give
    the reference's answer on fresh inputs, or was not sent; None when it does (or when no trial
    ran)."""
    if recorded is None:
        return None
    out, blobs = recorded
    if out.program is None:
        why = out.program_error or "the candidate's worker sent no record of forward"
        return Evidence(
            message=f"{why}; the harness re-runs forward's record on fresh inputs to check that the "
            "kernels do the work, and cannot without it",
            op="fresh replay",
        )
    allowed = None if spec.correctness == "adaexplore" else list(spec.allowed_ops)
    request = FreshReplay(
        program=out.program, kept=out.program_kept, seed=secrets.randbits(62), allowed_ops=allowed
    )
    workers.ran_candidate_kernels = True
    frame = await workers.ask_ref(request, blobs)
    if frame.header.get("type") != Msg.REPLAYED:
        workers.task_error(frame)
        raise Stop(
            FailureClass.RUNTIME_CRASH,
            Evidence(message="the reference could not re-run the candidate's record on fresh inputs"),
        )
    replayed = Replayed.from_header(frame.header)
    if replayed.note is not None:
        workers.notes.append(replayed.note)
    if replayed.failure_class is None:
        return None
    return evidence_from(replayed.evidence, "forward's record gave a wrong answer on fresh inputs")
