"""A worker's messages to the job: one `Reply` model per `Msg` (`protocol.py` describes the wire)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from kernelcraft.engine.wire.tagged import Msg, ProtocolError, Reply, TimingMethod

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
    multiples: Literal["kept", "dropped"] | None = None
    """In a shrunk plan, the candidate's divisors (`Load.cpu_divisors`): "kept" (each size a
    multiple of those that divided it), or "dropped" (no plan keeping them fits the interpreter's
    budget, `sizing.shrink_keeping`; `multiples_dropped` says why)."""
    multiples_dropped: str = ""
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
    margin: dict[str, Any] | None = None
    """On a pass: the worst float output's margin ({"ratio", "l2_ratio", "text"}: `compare.Margin`)."""


class Replayed(Reply):
    """Reference: the fresh-input replay's verdict (no `failure_class`: the record gave the
    reference's answer); `note` where it could not be made (the task's inputs changed shape)."""

    TAG = Msg.REPLAYED
    failure_class: str | None = None
    evidence: dict[str, Any] | None = None
    note: str | None = None


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
    ungated: bool | None = None
    """Reference, gated: dynamo compiled no frame, so the first run went before the gate opened."""


class GpuWanted(Reply):
    """Reference, during a gated `warmup_reference`: compiled; its first run needs the GPU (the
    job answers `run_compiled` once it holds it)."""

    TAG = Msg.GPU_WANTED
    compile_s: float | None = None
    """Seconds the compile took before it asked."""


class Samples(BaseModel):
    """One round of timings of one callable (`timing.sample_round`)."""

    times_us: list[float] = Field(min_length=1)
    method: TimingMethod
    sets: int = 1
    estimate_us: float | None = None
    """The round's estimate of one call (µs), for the job's later rounds (`TimeReference.estimates`)."""


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
    audited: list[int] = Field(default_factory=list)
    """With `TimeCandidate.audit`: the seeds of the timed calls kept for the reference to check."""
    audit_outputs: list[Any] = Field(default_factory=list)
    """Those calls' outputs (records in the frame's blobs), in the order of `audited`."""
    audit_note: str | None = None
    """Why the round's timed calls were not audited (the task's draws differ in shape)."""
    audit_calls: int = 0
    """Timed calls on fresh inputs (events) or replays over refreshed sets (graph)."""

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
    autotune: list[dict[str, Any]] = Field(default_factory=list)
    """In the interpreter: per `@triton.autotune` kernel, {"kernel", "index", "configs"}: the config
    that ran (its index among the pruned configs) and all of them (`checks/autotune.py`)."""
    interpreted: dict[str, list[float]] = Field(default_factory=dict)
    """In the interpreter: per kernel, [launches, programs, seconds] of these runs (`checks/slow.py`)."""
    replay_limit: str | None = None
    """The replay ran out of memory (`worker/room.py`): a harness limit, with the figures."""
    program: dict[str, Any] | None = None
    """Asked for (`Run.program`): forward's record (a `program.Program` dump), or None and
    `program_error` says why it could not be written."""
    program_kept: Any = None
    """The tensors kept on the model that `program` names, as they were before forward (packed)."""
    program_error: str | None = None


class Compiled(Reply):
    """Candidate: the launches found and each target's compilation (dumps), or `error`."""

    TAG = Msg.COMPILED
    launches: list[dict[str, Any]] = Field(default_factory=list)
    targets: list[dict[str, Any]] = Field(default_factory=list)
    seconds: float | None = None
    shapes: str | None = None
    error: str | None = None
    summary: str | None = None


class CompiledFiles(Reply):
    """Candidate: its Triton cache's files, as KEY/FILE, one blob each (`SendCompiled`)."""

    TAG = Msg.COMPILED_FILES
    names: list[str] = Field(default_factory=list)


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
        GpuWanted,
        Timed,
        Loaded,
        Verdict,
        Outputs,
        Compiled,
        CompiledFiles,
        Ok,
        KnockedOut,
        Replayed,
    )
}
