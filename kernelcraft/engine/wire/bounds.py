"""How much a worker's frame may carry, by its type and by what the job expects (`channel.Bounds`).

A worker runs client code (the task in the reference worker, the candidate in its own) and may
send anything. The parent reads each frame against these bounds and refuses one over them before
reading its tensors (`channel.FrameRefused`; the job turns it into a verdict, `replies.death_stop`):
- headers: the messages that carry nested records or a task's source (`LARGE_HEADERS`) up to
  `channel.MAX_HEADER_BYTES`; every other message (progress, errors, verdicts) is text, up to
  `channel.TEXT_HEADER_BYTES`;
- tensors (blobs): only the outputs (`Outputs`: two runs and the inputs after the first, with
  determinism), the knocked-out run's outputs, the timed calls' kept outputs (`Timed`, up to
  `TIMED_KEPT`) and the reference's inputs carry any; once the task
  is measured (`Sized`), each is the reference's own figure times `HEADROOM` plus `SLACK_BYTES`;
  before that, or when its outputs could not be measured, `UNSIZED_BLOB_BYTES` or the candidate's
  memory limit, whichever is smaller.
On a GPU tensors travel as CUDA IPC handles, in the header; the bounds hold the same.

Pure: used by `machine/pool.py` (the bounds a fresh worker starts with) and `host/job/workers.py`.
"""

from __future__ import annotations

from kernelcraft.engine.wire.channel import MAX_HEADER_BYTES, Bounds
from kernelcraft.engine.wire.tagged import Msg

LARGE_HEADERS = (
    Msg.SIZED,
    Msg.TASK_READY,
    Msg.LOADED,
    Msg.INPUTS,
    Msg.OUTPUTS,
    Msg.KNOCKED_OUT,
    Msg.COMPILED,
    Msg.TIMED,
)
HEADROOM = 1.25
SLACK_BYTES = 1024 * 1024
UNSIZED_BLOB_BYTES = 1024**3
"""What a frame of tensors may carry before the task is measured (or when its outputs could not be)."""
RUNS_PER_OUTPUTS = 2
"""An `Outputs` frame holds up to two runs (the determinism check) beside the inputs after the first."""

KEPT_COPIES = 2
"""The parameters' bytes an `Outputs` frame may carry for the fresh-input replay, in copies."""

TIMED_KEPT = 3
"""The calls a `Timed` frame may carry the outputs of, for the reference to check: two timed calls
and the round's witness call (`measure/audit.py`)."""

COMPILED_FILES_BYTES = 64 * 1024**2
"""What a candidate's Triton cache may send back at the end of a job (`machine/kernelcache.py`)."""

_HEADERS = {m.value: MAX_HEADER_BYTES for m in (*LARGE_HEADERS, Msg.COMPILED_FILES)}


def starting() -> Bounds:
    """A fresh worker's bounds, before its job measured the task."""
    return unsized(None)


def unsized(memory_limit: int | None) -> Bounds:
    """Bounds where the task's outputs are not known: `UNSIZED_BLOB_BYTES`, or the candidate's
    memory limit when smaller (its outputs live in its memory)."""
    cap = (
        UNSIZED_BLOB_BYTES
        if memory_limit is None
        else min(UNSIZED_BLOB_BYTES, max(memory_limit, SLACK_BYTES))
    )
    blobs = {
        Msg.OUTPUTS.value: cap,
        Msg.KNOCKED_OUT.value: cap,
        Msg.TIMED.value: cap,
        Msg.INPUTS.value: cap,
        Msg.COMPILED_FILES.value: COMPILED_FILES_BYTES,
    }
    why = "the task's outputs were not measured"
    return Bounds(headers=_HEADERS, blobs=blobs, why=why)


def for_task(inputs_bytes: int, outputs_bytes: int, params_bytes: int = 0) -> Bounds:
    """Bounds from the reference's measurement: its outputs and inputs with headroom. The first
    trial's `Outputs` also carries the tensors kept on the model for the fresh-input replay
    (`replay/program.py`): room for the parameters twice (a model may keep a second layout)."""

    def room(n: int) -> int:
        return int(n * HEADROOM) + SLACK_BYTES

    blobs = {
        Msg.OUTPUTS.value: room(RUNS_PER_OUTPUTS * outputs_bytes + inputs_bytes + KEPT_COPIES * params_bytes),
        Msg.KNOCKED_OUT.value: room(outputs_bytes + inputs_bytes),
        Msg.TIMED.value: room(TIMED_KEPT * outputs_bytes),
        Msg.INPUTS.value: room(inputs_bytes),
        Msg.COMPILED_FILES.value: COMPILED_FILES_BYTES,
    }
    why = f"the reference's outputs are {outputs_bytes} bytes and its inputs {inputs_bytes}, with headroom"
    return Bounds(headers=_HEADERS, blobs=blobs, why=why)
