"""The results of the evaluation engine: compile, verify and profile, and the job that asks for them.

These pydantic models cross every boundary: the CLI prints them with `--json`, the MCP tools
return them as structured content, the search tree stores them. Field descriptions are written
for a model reading the JSON schema.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from kernelcraft.base.failures import FailureClass
from kernelcraft.base.knobs import TIMEOUT_S, TRIALS
from kernelcraft.base.targets import DEFAULT_TARGET, DEFAULT_TARGETS

Stage = Literal["compile", "verify", "profile", "baseline"]
"""`baseline` times the reference alone (eager and torch.compile) and loads no candidate: a job
that asks for it asks for nothing else and needs no `candidate_source`."""


class Evidence(BaseModel):
    """What a failed check saw."""

    message: str = Field(description="Which check failed and why.")
    error_text: str | None = Field(default=None, description="Compiler or runtime error, trimmed.")
    trial: int | None = Field(default=None, description="0-based.")
    input_set: int | None = Field(default=None, description="0: get_inputs().")
    output_index: int | None = Field(default=None, description="Of forward().")
    first_mismatch_index: list[int] | None = None
    expected: float | None = Field(default=None, description="The reference's value there.")
    actual: float | None = Field(default=None, description="The candidate's value there.")
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    relative_l2_error: float | None = Field(default=None, description="||out - ref|| / ||ref||.")
    error_over_tolerance: float | None = Field(
        default=None, description="The worst element's |out - ref| / (atol + rtol|ref|); > 1 fails."
    )
    input_seed: int | None = Field(
        default=None,
        description="The failing trial's inputs: torch.manual_seed(input_seed); get_inputs().",
    )
    op: str | None = Field(default=None, description="The op that fell back, or the forbidden construct.")
    line: int | None = None


class KernelLaunch(BaseModel):
    """A Triton kernel the candidate's forward() launches."""

    name: str
    signature: dict[str, str] = Field(description="Argument -> Triton type ('*fp32', ...).")
    constexprs: dict[str, int | float | bool | str | None]
    grid: list[int] = Field(description="(x, y, z).")
    num_warps: int | None = None
    num_stages: int | None = None


class KernelCompileInfo(BaseModel):
    """One compiled kernel's resource use."""

    name: str
    registers: int | None = Field(default=None, description="Per thread (AMD: VGPRs).")
    sgprs: int | None = Field(default=None, description="AMD only.")
    spills: int | None = None
    shared_bytes: int | None = Field(default=None, description="Shared memory (AMD: LDS).")
    num_warps: int | None = None
    num_stages: int | None = None
    constexprs: dict[str, int | float | bool | str | None] = Field(default_factory=dict)
    dots: str | None = Field(default=None, description="tl.dot on: wgmma|mma.sync|mfma|fma")


class TargetCompileResult(BaseModel):
    target: str = Field(description="Or 'host': this GPU's JIT.")
    ok: bool
    kernels: list[KernelCompileInfo] = Field(default_factory=list)
    error: str | None = None
    failure_class: FailureClass | None = None
    seconds: float | None = None
    notes: list[str] = Field(
        default_factory=list,
        description="@triton.autotune configs dropped for lack of resources, as Triton's autotuner drops them.",
    )


class CompileResult(BaseModel):
    ok: bool = Field(description="Every target compiled.")
    launches: list[KernelLaunch] = Field(default_factory=list)
    targets: list[TargetCompileResult] = Field(default_factory=list)
    failure_class: FailureClass | None = None
    evidence: Evidence | None = None
    shapes: str | None = Field(
        default=None,
        description="get_inputs() (meta device without a GPU), or a trial's inputs.",
    )
    seconds: float = 0.0


class VerifyResult(BaseModel):
    correct: bool
    status: str = Field(description="'passed' or the failure class.")
    failure_class: FailureClass | None = None
    evidence: Evidence | None = None
    trials: int = Field(description="Per input set.")
    trials_total: int = Field(default=0, description="trials × input_sets.")
    trials_passed: int = Field(default=0, description="Of trials_total.")
    input_sets: int = 1
    device: str = Field(description="'cuda:N (NAME)' or 'cpu (...)'.")
    interpreter: bool = Field(description="Triton's CPU interpreter ran the kernels.")
    kernels_launched: list[str] = Field(default_factory=list)
    allowed_ops: list[str] = Field(default_factory=list)
    tolerance: str | None = Field(
        default=None,
        description="The tolerance the outputs were held to, by dtype (atol, rtol, relative L2).",
    )
    notes: list[str] = Field(default_factory=list)
    seconds: float = Field(default=0.0, description="From submission (worker start-up too).")
    stage_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="Where `seconds` went, by stage; they add up to it ('other': the harness between stages).",
    )

    @model_validator(mode="after")
    def _count_trials_total(self) -> VerifyResult:
        if not self.trials_total:
            self.trials_total = self.trials * self.input_sets
        return self


class Timing(BaseModel):
    """GPU wall time of one callable, µs."""

    median_us: float
    iqr_us: float = Field(description="p75 - p25.")
    min_us: float
    reps: int
    method: Literal["cuda_events", "cuda_graph"]
    sets: int = Field(default=1, description="Input sets rotated through (cold L2).")
    clipped: int = Field(default=0, description="Samples at the harness floor; non-zero: untrustworthy.")
    round_spread: float | None = None
    """The largest gap of a kept timing round's median from the median of rounds (a fraction)."""


class Roofline(BaseModel):
    # `precision`: the fastest way to do the matmul work within the task's tolerance `rtol`
    # ('bf16x3': three bf16 tensor-core products per fp32 multiply-add; 'ieee': fp32 CUDA cores);
    # `peak_tflops` is its rate, `peak_gbps` the HBM bandwidth measured on the device where measured.
    target: str
    flops: float = Field(description="Of one forward (the reference's).")
    elementwise_flops: float = 0.0
    bytes: float = Field(description="Fewest one forward moves.")
    precision: str = "ieee"
    rtol: float | None = None
    peak_tflops: float
    peak_gbps: float
    floor_us: float = Field(description="max(flops/peak, bytes/bandwidth).")
    bound: Literal["memory", "compute"]


class KernelTime(BaseModel):
    """One kernel of a forward, as the GPU profiler saw it."""

    name: str
    calls: float = Field(description="Per forward.")
    us: float = Field(description="GPU µs per forward.")
    share: float = Field(description="Of the forward's GPU time.")


class ProfileResult(BaseModel):
    """Timings of the candidate and the reference."""

    # A rejected timing keeps `available=True` and the measured `candidate` timing for inspection,
    # with `evidence` saying why, but leaves `speedup_*`, `achieved_*` and `roofline_fraction` None.
    # The physical floor is the reference's bytes at the GPU's HBM bandwidth, or its FLOPs at the
    # fastest tensor-core rate; below `PHYSICAL_FLOOR_FACTOR` (0.25) times it a measurement was
    # gamed or broken. Consumers treat any profile with `failure_class` set as having no speedup.

    available: bool = Field(description="False without a GPU (roofline floor only).")
    message: str = Field(default="", description="How it was timed, or why not.")
    device: str | None = None
    candidate: Timing | None = None
    reference_eager: Timing | None = None
    reference_compiled: Timing | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compiled: float | None = None
    achieved_gbps: float | None = None
    achieved_tflops: float | None = None
    roofline_fraction: float | None = Field(default=None, description="floor_us / median.")
    unstable: str | None = Field(default=None, description="Why it may not repeat (5%).")
    roofline: Roofline | None = None
    failure_class: FailureClass | None = Field(
        default=None,
        description="Timing rejected (stream changed, or under ¼ of the physical floor): no speedup.",
    )
    evidence: Evidence | None = None
    why: list[str] = Field(default_factory=list, description="Per kernel: registers, occupancy, dots")
    kernels: dict[str, list[KernelTime]] = Field(
        default_factory=dict,
        description="Each side's kernels ('candidate', 'eager', 'compiled'), largest first.",
    )
    seconds: float = 0.0


class EvalJob(BaseModel):
    """One request to the evaluator. Sources travel as text: nothing is imported by the caller."""

    task_source: str = Field(description="KernelBench-format module: Model, get_inputs, get_init_inputs.")
    candidate_source: str = Field(
        default="", description="Module with class ModelNew launching @triton.jit kernels ('' for baseline)."
    )
    task_name: str = "task.py"
    candidate_name: str = "candidate.py"
    stages: list[Stage] = Field(default_factory=lambda: ["verify"])  # type: ignore[arg-type]
    targets: list[str] = Field(default_factory=lambda: list(DEFAULT_TARGETS))  # type: ignore[arg-type]
    trials: int = TRIALS.field()
    timeout_s: float = TIMEOUT_S.field()
    allowed_ops: list[str] = Field(default_factory=list, description="PyTorch ops forward() may use.")
    roofline_target: str = DEFAULT_TARGET
    gpu_check: str | None = Field(
        default=DEFAULT_TARGET,
        description="Without a GPU, verify also compiles the launched kernels for this target and fails "
        "where the GPU compiler would (None: the interpreter's word alone).",
    )
    full_size: bool = Field(
        default=False,
        description="Without a GPU, run the task's own sizes in the interpreter instead of shrinking "
        "a large KernelBench task's size constants.",
    )
    cpu_sizes: dict[str, int] | None = Field(
        default=None,
        description="Without a GPU, the trials' sizes for an unmodified task: its module-level size "
        "constants by name ({'batch_size': 16, 'dim': 256}), used as given instead of the shrink's.",
    )
    correctness: Literal["kernelcraft", "adaexplore"] = Field(
        default="kernelcraft",
        description="'kernelcraft': no PyTorch compute in forward, tolerances by dtype with a relative-L2 "
        "check; 'adaexplore': AdaExplore's rule (PyTorch allowed beside at least one Triton launch, "
        "atol=rtol=5e-2, no knockout); docs/evaluation.md has both.",
    )
    model_mode: Literal["train", "eval"] = Field(
        default="train",
        description="'train': Model and ModelNew run as constructed (training mode: BatchNorm uses batch "
        "statistics, dropout is active), as KernelBench's harness runs them; 'eval': both get .eval().",
    )

    @model_validator(mode="after")
    def _cpu_sizes_in_task(self) -> EvalJob:
        if self.cpu_sizes is None:  # the option or a sidecar wins over the task's own
            self.cpu_sizes = task_cpu_sizes(self.task_source)
        return self

    @model_validator(mode="after")
    def _baseline_alone(self) -> EvalJob:
        if "baseline" in self.stages and list(self.stages) != ["baseline"]:
            raise ValueError("the baseline stage times the reference alone: ask for it without other stages")
        return self

    @property
    def baseline_only(self) -> bool:
        """The job times the reference alone and loads no candidate."""
        return list(self.stages) == ["baseline"]


CPU_SIZES = "KERNELCRAFT_CPU_SIZES"
"""A task's own CPU sizes: `KERNELCRAFT_CPU_SIZES = {"batch_size": 16, "dim": 1024}` at module level,
as a sidecar gives them (level/sidecar.py), for a client that sends only source (MCP)."""


def task_cpu_sizes(source: str) -> dict[str, int] | None:
    """The sizes `source` gives itself for the CPU (`CPU_SIZES`), or None; ValueError, saying what
    to write, for a value that is not a literal dict of size constants to positive integers."""
    if CPU_SIZES not in source:
        return None
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None  # the task's own error, reported where it is loaded
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == CPU_SIZES for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                value = None
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and type(v) is int and v >= 1 for k, v in value.items()
            ):
                raise ValueError(
                    f'{CPU_SIZES} must be a literal dict of size constants, e.g. {{"batch_size": 16, "dim": 1024}}'
                )
            return value or None
    return None


class EvalResult(BaseModel):
    """One result per requested stage."""

    compile: CompileResult | None = None
    verify: VerifyResult | None = None
    profile: ProfileResult | None = None
    baseline: ProfileResult | None = Field(
        default=None,
        description="The reference alone (no candidate).",
    )
    seconds: float = 0.0
    stage_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="Where `seconds` went, by stage; they add up to it ('other': the harness between stages).",
    )

    @property
    def failure_class(self) -> FailureClass | None:
        for part in (self.compile, self.verify, self.profile):
            if part is not None and part.failure_class is not None:
                return part.failure_class
        return None
