"""The messages between a job (`job.py`, in the evaluator's process) and its worker processes.

Each message is one frame of `channel.py`, its JSON header a model here whose fields are the
header's keys in wire order. A worker first gets its job (`Load`, untagged), then requests tagged
`"op"` (`Op`, one model each); it answers with messages tagged `"type"` (`Msg`, one model each).

    await w.send(MakeInputs(input_set=0, seed=7).to_header())         # the job
    req = parse_request(frame.header)                                  # the worker
    TaskReady.from_header(frame.header).input_sets                     # the job, reading an answer

`to_header()` writes the tag, then the fields that were given (set at construction, or read from
a header), so an optional key is on the wire exactly when its sender gave it: the JSON is the one
both sides built by hand before this module (`tests/engine/test_protocol.py` pins it). `from_header()`
checks the tag and the fields' types; it raises `ValueError` (pydantic's `ValidationError` or
`ProtocolError`). The reference worker and the job are trusted; a candidate worker is not, so the
job turns a candidate message that does not parse into a `runtime_crash` verdict, never into an
exception of ours.

Light on purpose: pydantic only (every worker imports it before its job).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class Op(str, Enum):
    """What the job asks a worker to do (after `Load`), as the header's `"op"`."""

    # the reference worker
    NEXT = "next"
    INPUTS = "inputs"
    COMPARE = "compare"
    ROOFLINE = "roofline"
    WARMUP_REFERENCE = "warmup_reference"
    TIME_REFERENCE = "time_reference"
    # the candidate worker
    RUN = "run"
    COMPILE = "compile"
    WARMUP = "warmup"
    TIME_CANDIDATE = "time_candidate"
    USE_INPUTS = "use_inputs"
    KNOCKOUT = "knockout"
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


# ---- the job -> a worker ----


class Load(BaseModel):
    """A worker's one job (the first frame it gets): its role and what to load."""

    model_config = ConfigDict(populate_by_name=True)
    role: Literal["reference", "candidate"]
    workdir: str
    task_source: str
    seed0: int
    interpret: bool = False
    # the reference only: run the task's own sizes in the interpreter (no shrink, `shrink.py`)
    full_size: bool = False
    # both: "train" (as constructed, KernelBench's way) or "eval" (`.eval()` on the model)
    model_mode: str = "train"
    # both: "kernelcraft" or "adaexplore" (PyTorch allowed in forward, AdaExplore's tolerance)
    correctness: str = "kernelcraft"
    # the candidate only
    candidate_source: str = ""
    sandbox: bool = True
    allowed_ops: list[str] = Field(default_factory=list)
    memory_limit_bytes: int | None = None
    full_task_source: str | None = None
    """The compile stage on a CPU machine: the task as given, when `task_source` is its shrunk
    copy; `ModelNew` is built from it on the meta device only (no parameter memory)."""

    def to_header(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> Load:
        return cls.model_validate(header)


class NextJob(Request):
    """Reference: drop this job's state and rebuild `Model` for the next job on the task."""

    TAG = Op.NEXT


class Perturb(Request):
    """Both workers: overwrite the model's float parameters and buffers with fresh values from
    `seed` (`perturb.py`), once the job has found that Model's and ModelNew's agree; answered `ok`."""

    TAG = Op.PERTURB
    seed: int


class MakeInputs(Request):
    """Reference: make the inputs of one trial from `seed`, keep them and the outputs, share a copy."""

    TAG = Op.INPUTS
    input_set: int = Field(validation_alias="set", serialization_alias="set")
    seed: int
    scale: float | None = None
    """Multiply the floating-point inputs by this (a power of two: exact) unless the task opts out
    (`scaled.py`)."""


class Compare(Request):
    """Reference: compare the candidate's outputs (and its inputs after the call) with its own."""

    TAG = Op.COMPARE
    outputs: Any
    inputs_after: Any


class ComputeRoofline(Request):
    """Reference: count FLOPs and bytes; `full_size`: on `get_inputs()`'s shapes (meta device)."""

    TAG = Op.ROOFLINE
    target: str
    full_size: bool = False


class WarmupReference(Request):
    """Reference: torch.compile the model and run it once."""

    TAG = Op.WARMUP_REFERENCE


class TimeReference(Request):
    """Reference: one round of timing, eager and (if `compiled`) torch.compile'd."""

    TAG = Op.TIME_REFERENCE
    budget_ms: float = 100.0
    methods: dict[str, TimingMethod | Literal["auto"]] = Field(default_factory=dict)
    compiled: bool = True
    breakdown: bool = False
    """Also profile which kernels each side launched, and for how long (kernelprof.py)."""


class Run(Request):
    """Candidate: run forward on the inputs (twice, over different garbage, for `determinism`)."""

    TAG = Op.RUN
    inputs: Any
    determinism: bool = False


class Compile(Request):
    """Candidate: discover the launches (no kernel runs) and compile them for each target."""

    TAG = Op.COMPILE
    targets: list[str]
    inputs: Any = None
    full_size: bool = False
    """Find the launches on `get_inputs()` and `ModelNew` built on the meta device (the task's
    real shapes, no memory), falling back to `inputs` and the model built at their sizes when
    either cannot run on meta."""


class Warmup(Request):
    """Candidate: JIT-compile the kernels forward launches, without running any."""

    TAG = Op.WARMUP
    inputs: Any


class TimeCandidate(Request):
    """Candidate: one round of timing."""

    TAG = Op.TIME_CANDIDATE
    budget_ms: float = 100.0
    method: TimingMethod | Literal["auto"] = "auto"
    breakdown: bool = False
    """Also profile which kernels forward launched, and for how long (kernelprof.py)."""


class UseInputs(Request):
    """Candidate: time on these inputs from now on."""

    TAG = Op.USE_INPUTS
    inputs: Any


class Knockout(Request):
    """Candidate: forward once more with every Triton launch skipped and fresh memory poisoned
    (`knockout.py`); its output must no longer be the reference's."""

    TAG = Op.KNOCKOUT
    inputs: Any


REQUESTS: dict[str, type[Request]] = {
    cls.TAG.value: cls
    for cls in (
        NextJob,
        MakeInputs,
        Knockout,
        Compare,
        ComputeRoofline,
        WarmupReference,
        TimeReference,
        Run,
        Compile,
        Warmup,
        TimeCandidate,
        UseInputs,
        Perturb,
    )
}


def parse_request(header: dict[str, Any]) -> Request | None:
    """The request in a header from the job; None for a header without a known op (the worker
    stops)."""
    cls = REQUESTS.get(str(header.get("op")))
    return cls.from_header(header) if cls is not None else None


# ---- a worker -> the job ----


class Ready(Reply):
    """A started worker, before its job (read by `pool.py`)."""

    TAG = Msg.READY
    pid: int
    device: str
    startup: dict[str, float] | None = None
    """Seconds its start took, by phase (box, imports, cuda); logged at debug by the pool."""


class Sized(Reply):
    """Reference: the task loaded and measured on the meta device (`sizing.py`), before anything
    is allocated; the device's memory; in the interpreter, the shrunk task (`shrink.py`) the
    trials run on: its source (for the candidate) and {constant: [old, new]}."""

    TAG = Msg.SIZED
    inputs_bytes: int = 0
    params_bytes: int = 0
    outputs_bytes: int = 0
    outputs_measured: bool = False
    elements: int = 0
    shapes: str = ""
    device_free: int = 0
    device_total: int = 0
    has_cpu_inputs: bool = False
    shrunk: dict[str, list[int]] = Field(default_factory=dict)
    shrunk_source: str | None = None
    not_shrunk: str | None = None
    """Why a task too big for the interpreter was left at its own sizes (its structure, or a
    reference whose output ignores its inputs at the shrunk sizes)."""
    trial_dims: list[list[int]] = Field(default_factory=list)
    full_dims: list[list[int]] = Field(default_factory=list)
    """The inputs' shapes in the trials and at the task's own sizes, when they were shrunk."""
    probe: str | None = None
    """For the verdict's notes: why the trials run at sizes larger than the interpreter's limit,
    or a warning that at the trials' sizes the reference's output does not depend on its inputs
    (`sizing.shrink_for_interpreter`)."""
    error: str | None = None
    """Why the task could not be measured on meta (the job goes on without the figures)."""


class TaskReady(Reply):
    """Reference: the task is loaded and `Model` built."""

    TAG = Msg.TASK_READY
    input_sets: int = 1
    mode_sensitive: list[str] = Field(default_factory=list)
    """The kinds of Model's modules that compute differently in training and eval mode."""
    parameters: list[list[Any]] = Field(default_factory=list)
    """Model's float parameters and buffers, [kind, name, shape, dtype] each (`perturb.named_signature`)."""
    initial_values: dict[str, str] = Field(default_factory=dict)
    """A digest of each tensor `Model` holds, by name, as built (`Worker.build`)."""
    perturb_allowed: bool = True
    """False when the task opts out of fresh parameter values (`KERNELCRAFT_PERTURB_PARAMETERS`)."""


class TaskFailed(Reply):
    """The trusted task itself failed (loading it, building `Model` or its inputs), or the
    reference's own comparison did (`doing` says which)."""

    TAG = Msg.TASK_ERROR
    error: str = ""
    summary: str = ""
    doing: str = "building Model or its inputs"


class Progress(Reply):
    """What the worker is doing (not an answer: the job reads on)."""

    TAG = Msg.PROGRESS
    message: str = ""


class InputsMade(Reply):
    """Reference: a copy of the trial's inputs (tensor records; the blobs or CUDA IPC handles)."""

    TAG = Msg.INPUTS
    inputs: Any


class Compared(Reply):
    """Reference: the verdict on the candidate's outputs (no `failure_class`: they match).
    `error`: opening them may have broken the process; the job does not keep it."""

    TAG = Msg.COMPARED
    failure_class: str | None = None
    evidence: dict[str, Any] | None = None
    error: str | None = None
    tolerance: str | None = None
    """The tolerances applied, by output dtype (`compare.describe`)."""


class RooflineCounted(Reply):
    """Reference: the roofline (a `Roofline` dump), or None and why."""

    TAG = Msg.ROOFLINE
    roofline: dict[str, Any] | None = None
    shapes: str | None = None
    errors: list[str] | None = None
    error: str | None = None


class Warm(Reply):
    """Reference: the model is compiled. Candidate: `compiled` kernels JIT-compiled. `error`: it
    failed (the candidate's real run reports the error with its class)."""

    TAG = Msg.WARM
    compiled: int | None = None
    error: str | None = None


class Samples(BaseModel):
    """One round of timings of one callable (`timing.sample_round`)."""

    times_us: list[float] = Field(min_length=1)
    method: TimingMethod
    sets: int = 1


class Timed(Reply):
    """One round of timing: the candidate's, or the reference's eager and compiled; or `error`."""

    TAG = Msg.TIMED
    candidate: Samples | None = None
    eager: Samples | None = None
    compiled: Samples | None = None
    error: str | None = None
    summary: str | None = None
    kernels: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    """With `breakdown`: each side's kernels (name, calls, us, share), per forward."""
    kernels_error: str | None = None
    """With `breakdown`: why the profiler could not say."""

    def samples(self, key: str) -> Samples:
        """The samples of `key` ("candidate", "eager" or "compiled"); `ProtocolError` if absent."""
        found: Samples | None = (
            getattr(self, key, None) if key in ("candidate", "eager", "compiled") else None
        )
        if found is None:
            raise ProtocolError(f"the timings have no {key!r} samples")
        return found


class Loaded(Reply):
    """Candidate: imported and `ModelNew` built; what of its box (box/__init__.py) is not in force, if any."""

    TAG = Msg.LOADED
    sandbox_unavailable: str | None = None
    parameters: list[list[Any]] = Field(default_factory=list)
    """ModelNew's float parameters and buffers, as `TaskReady.parameters` (the candidate's word)."""
    initial_values: dict[str, str] = Field(default_factory=dict)
    """As `TaskReady.initial_values`, for `ModelNew` (the candidate's word: it only explains)."""


class Verdict(Reply):
    """Candidate: it failed (a `FailureClass` value and `Evidence` fields); its process ends."""

    TAG = Msg.VERDICT
    failure_class: str | None = None
    evidence: dict[str, Any] | None = None


class Outputs(Reply):
    """Candidate: forward's outputs (one per run), the inputs after the first run, the kernels
    it launched."""

    TAG = Msg.OUTPUTS
    outputs: list[Any]
    inputs_after: Any
    kernels: list[str] = Field(default_factory=list)
    tf32_dots: int = 0
    """In the interpreter: fp32 tl.dots rounded to TF32 in these runs (a hint for the verdict's words)."""
    torch_ops: list[str] = Field(default_factory=list)
    """PyTorch compute ops forward ran outside its kernels, where the correctness rule allows them."""
    replay: str | None = None
    """Why replaying the first run from its record did not give its outputs (replay.py), or None.
    It fails a trial whose outputs the reference finds right: a wrong output fails as itself."""


class Compiled(Reply):
    """Candidate: the launches found and each target's compilation (dumps), or `error`."""

    TAG = Msg.COMPILED
    launches: list[dict[str, Any]] = Field(default_factory=list)
    targets: list[dict[str, Any]] = Field(default_factory=list)
    seconds: float | None = None
    shapes: str | None = None
    error: str | None = None
    summary: str | None = None


class Ok(Reply):
    """Done (the candidate's `use_inputs`, either worker's `perturb`)."""

    TAG = Msg.OK


class KnockedOut(Reply):
    """Candidate: forward's output with its launches knocked out (None when forward raised), the
    inputs after the call, how many launches were skipped, and the error forward raised."""

    TAG = Msg.KNOCKED_OUT
    outputs: Any = None
    inputs_after: Any = None
    skipped: int = 0
    error: str | None = None


REPLIES: dict[str, type[Reply]] = {
    cls.TAG.value: cls
    for cls in (
        Ready,
        Sized,
        TaskReady,
        TaskFailed,
        Progress,
        InputsMade,
        Compared,
        RooflineCounted,
        Warm,
        Timed,
        Loaded,
        Verdict,
        Outputs,
        Compiled,
        Ok,
        KnockedOut,
    )
}
