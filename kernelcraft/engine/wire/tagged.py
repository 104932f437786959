"""The wire's vocabulary: the tags (`Op`, `Msg`) and the tagged base every message model shares
(`protocol.py` says how messages travel and lists them all). Light on purpose: pydantic only."""

from __future__ import annotations

from enum import Enum
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict


class Op(str, Enum):
    """What the job asks a worker to do (after `Load`), as the header's `"op"`."""

    # the reference worker
    NEXT = "next"
    INPUTS = "inputs"
    COMPARE = "compare"
    ROOFLINE = "roofline"
    WARMUP_REFERENCE = "warmup_reference"
    RUN_COMPILED = "run_compiled"
    TIME_REFERENCE = "time_reference"
    FRESH_REPLAY = "fresh_replay"
    AUDIT_TIMED = "audit_timed"
    # the candidate worker
    RUN = "run"
    COMPILE = "compile"
    COMPILE_RECORDED = "compile_recorded"
    WARMUP = "warmup"
    TIME_CANDIDATE = "time_candidate"
    USE_INPUTS = "use_inputs"
    KNOCKOUT = "knockout"
    SEND_COMPILED = "send_compiled"
    # both
    PERTURB = "perturb"


class Msg(str, Enum):
    """What a worker says, as the header's `"type"`."""

    READY = "ready"
    SIZED = "sized"
    TASK_READY = "task_ready"
    TASK_ERROR = "task_error"
    PROGRESS = "progress"
    INPUTS = "inputs"
    COMPARED = "compared"
    ROOFLINE = "roofline"
    WARM = "warm"
    TIMED = "timed"
    LOADED = "loaded"
    VERDICT = "verdict"
    OUTPUTS = "outputs"
    COMPILED = "compiled"
    OK = "ok"
    KNOCKED_OUT = "knocked_out"
    REPLAYED = "replayed"
    COMPILED_FILES = "compiled_files"
    GPU_WANTED = "gpu_wanted"


IMPORTING_CANDIDATE = "importing the candidate"
FOUND_LAUNCHES = "launches found so far:"
"""How a compile's discovery says what it found (untrusted words: shown, never believed)."""
"""The progress message a candidate worker sends just before it imports the candidate: from then
on the process runs untrusted code and its word about the task is not believed."""

TimingMethod = Literal["cuda_events", "cuda_graph"]
"""How a round was timed (`timing.Method`, `Timing.method`)."""


class ProtocolError(ValueError):
    """A header is not the message it was read as."""


M = TypeVar("M", bound="_Tagged")


class _Tagged(BaseModel):
    # The channel adds "blobs" to every header: extra keys are ignored.
    model_config = ConfigDict(populate_by_name=True)
    KEY: ClassVar[str]
    TAG: ClassVar[Op | Msg]

    def to_header(self) -> dict[str, Any]:
        return {self.KEY: self.TAG.value, **self.model_dump(by_alias=True, exclude_unset=True)}

    @classmethod
    def from_header(cls: type[M], header: dict[str, Any]) -> M:
        tag = header.get(cls.KEY)
        if tag != cls.TAG:
            raise ProtocolError(f"expected a {cls.TAG.value!r} message, got {str(tag)[:40]!r}")
        return cls.model_validate(header)


class Request(_Tagged):
    KEY = "op"
    TAG: ClassVar[Op]


class Reply(_Tagged):
    KEY = "type"
    TAG: ClassVar[Msg]
