"""The job's messages to a worker: its one `Load`, then one `Request` model per `Op`
(`protocol.py` describes the wire)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelcraft.engine.wire.tagged import Op, Request, TimingMethod

# ---- the job -> a worker ----


class Load(BaseModel):
    """A worker's one job (the first frame it gets): its role and what to load."""

    model_config = ConfigDict(populate_by_name=True)
    role: Literal["reference", "candidate", "kernels"]
    """`kernels`: trusted, loads neither task nor candidate; compiles a recorded program's kernels
    from their source (`worker/kernels.py`)."""
    workdir: str
    task_source: str
    seed0: int
    interpret: bool = False
    # the reference only: run the task's own sizes in the interpreter (no shrink, `shrink.py`)
    full_size: bool = False
    # the reference only: the user's sizes for the interpreter, by constant (`shrink.given`)
    cpu_sizes: dict[str, int] | None = None
    # the reference only: what the candidate's kernels divide the sizes by, for the shrink to
    # keep (`source/divisors.py`, `multiples.Multiples`)
    cpu_divisors: list[int] = Field(default_factory=list)
    # the reference only: the task's sizes no block of the candidate's tiles on its own, and
    # whether it reads its inputs as flat buffers (`gridmap.untiled`, `multiples.Multiples`)
    cpu_untiled: list[str] = Field(default_factory=list)
    cpu_flat: bool = False
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
    compiled: list[str] = Field(default_factory=list)
    """What earlier processes of this candidate compiled (`machine/kernelcache.py`), as
    KEY/FILE in its Triton cache, one blob each: written there before the candidate is imported."""

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
    """Reference: compare the candidate's outputs (and its inputs after the call) with its own.
    `runs`: how many runs the job asked for (each sent output set is one run's)."""

    TAG = Op.COMPARE
    outputs: Any
    inputs_after: Any
    runs: int = 1


class FreshReplay(Request):
    """Reference: re-run a candidate's recorded forward (`program`, a `program.Program` dump, with
    the kept tensors `kept` in the frame's blobs) on fresh inputs of `input_set` drawn from `seed`
    (floating-point ones times `scale`, as the trial's were), `draws` times over, and compare with
    its own outputs for them (`replay/fresh.py`); answered `replayed`.
    `allowed_ops`: the ATen ops forward may run outside its kernels (None: any, AdaExplore's rule)."""

    TAG = Op.FRESH_REPLAY
    program: dict[str, Any]
    kept: Any
    seed: int
    input_set: int = 0
    scale: float | None = None
    draws: int = Field(default=2, ge=1, le=2)
    allowed_ops: list[str] | None = None


class ComputeRoofline(Request):
    """Reference: count FLOPs and bytes; `full_size`: on `get_inputs()`'s shapes (meta device)."""

    TAG = Op.ROOFLINE
    target: str
    full_size: bool = False


class WarmupReference(Request):
    """Reference: torch.compile the model and run it once. `gated`: the compile (CPU work) runs
    while the job holds no GPU lock; before the compiled model's first run the worker says
    `gpu_wanted` and waits for `run_compiled`, sent once the job holds the GPU."""

    TAG = Op.WARMUP_REFERENCE
    gated: bool = False


class RunCompiled(Request):
    """Reference, after its `gpu_wanted`: the job holds the GPU; run the compiled model (its
    first run: inductor's autotuning, then the model), then answer `warm`."""

    TAG = Op.RUN_COMPILED


class TimeReference(Request):
    """Reference: one round of timing, eager and (if `compiled`) torch.compile'd."""

    TAG = Op.TIME_REFERENCE
    budget_ms: float = 100.0
    methods: dict[str, TimingMethod | Literal["auto"]] = Field(default_factory=dict)
    compiled: bool = True
    breakdown: bool = False
    """Also profile which kernels each side launched, and for how long (kernelprof.py)."""
    estimates: dict[str, float] = Field(default_factory=dict)
    """µs a call of each callable, as an earlier round of this job estimated it (`Samples.
    estimate_us`): that round's warm-up and estimate are not repeated (`timing.sample_round`)."""


class Run(Request):
    """Candidate: run forward on the inputs (twice, over different garbage, for `determinism`)."""

    TAG = Op.RUN
    inputs: Any
    determinism: bool = False
    autotune_pick: int = Field(default=0, ge=0, le=1 << 20)
    """In the interpreter: which `@triton.autotune` config runs, modulo their number (`checks/autotune.py`)."""
    program: bool = False
    """Send forward's record as a `program.Program` (the fresh-input replay re-runs it)."""


class Compile(Request):
    """Candidate: discover the launches (no kernel runs) and compile them for each target."""

    TAG = Op.COMPILE
    targets: list[str]
    inputs: Any = None
    full_size: bool = False
    """Find the launches on `get_inputs()` and `ModelNew` built on the meta device (the task's
    real shapes, no memory), falling back to `inputs` and the model built at their sizes when
    either cannot run on meta."""


class CompileRecorded(Request):
    """Kernels worker: compile the launches of a candidate's recorded forward (`program`, a
    `program.Program` dump), kernels rebuilt from their source, for each target; answered `compiled`."""

    TAG = Op.COMPILE_RECORDED
    program: dict[str, Any]
    more: list[dict[str, Any]] = Field(default_factory=list, max_length=64)
    """Other trials' records whose launches are compiled with `program`'s."""
    targets: list[str]


class Warmup(Request):
    """Candidate: JIT-compile the kernels forward launches, without running any."""

    TAG = Op.WARMUP
    inputs: Any


class SendCompiled(Request):
    """Candidate: send the Triton cache's keys it compiled, all but those it was given (`known`);
    answered `compiled_files`."""

    TAG = Op.SEND_COMPILED
    known: list[str] = Field(default_factory=list)


class TimeCandidate(Request):
    """Candidate: one round of timing."""

    TAG = Op.TIME_CANDIDATE
    budget_ms: float = 100.0
    method: TimingMethod | Literal["auto"] = "auto"
    breakdown: bool = False
    """Also profile which kernels forward launched, and for how long (kernelprof.py)."""
    audit: int | None = None
    """The round's secret: the timed calls run on fresh inputs drawn from it and some of their
    outputs come back for the reference to check (`measure/audit.py`); None: not audited."""


class AuditTimed(Request):
    """Reference: draw the inputs of each timed call the candidate kept (`seeds`, as
    `Worker.make_inputs(task, job, 0, seed)` drew them), run Model and compare with the call's
    outputs (`outputs`, records in the frame's blobs); answered `compared`. With no seeds, the
    candidate said its round could not be audited: check that two draws of the task's inputs
    (from `seeds_for_claim`) indeed cannot stand in for each other."""

    TAG = Op.AUDIT_TIMED
    seeds: list[int] = Field(max_length=16)
    outputs: list[Any]
    seeds_for_claim: list[int] = Field(default_factory=list, max_length=2)


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
        FreshReplay,
        AuditTimed,
        ComputeRoofline,
        WarmupReference,
        RunCompiled,
        TimeReference,
        Run,
        Compile,
        CompileRecorded,
        Warmup,
        TimeCandidate,
        UseInputs,
        Perturb,
        SendCompiled,
    )
}


def parse_request(header: dict[str, Any]) -> Request | None:
    """The request in a header from the job; None for a header without a known op (the worker
    stops)."""
    cls = REQUESTS.get(str(header.get("op")))
    return cls.from_header(header) if cls is not None else None
