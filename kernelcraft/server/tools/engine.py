"""The engine's tools: `compile_kernel`, `verify_against_reference` and `profile_kernel`, each one
job through the evaluator's queue (`common.evaluate`)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import Field

from kernelcraft.base.targets import DEFAULT_TARGET, DEFAULT_TARGETS, Target
from kernelcraft.schema.evaluation import CompileResult, EvalJob, ProfileResult, VerifyResult
from kernelcraft.server.state import AppState
from kernelcraft.server.tools.common import (
    READ_ONLY,
    _stage,
    evaluate,
    tool,
)
from kernelcraft.server.tools.inputs import (
    DEFAULT_TIMEOUT_S,
    DEFAULT_TRIALS,
    AllowedOps,
    CandidateCode,
    EvalMode,
    ReferenceCode,
    Timeout,
    Trials,
    allowed_op_names,
)


@tool(title="Compile a kernel for GPU targets", annotations=READ_ONLY)
async def compile_kernel(
    ctx: Context[AppState],
    reference_code: ReferenceCode,
    candidate_code: CandidateCode,
    targets: Annotated[
        list[Target] | None,
        Field(
            min_length=1,
            description=f"Targets (no GPU needed); omit for {', '.join(DEFAULT_TARGETS)}.",
        ),
    ] = None,
    timeout_s: Timeout = DEFAULT_TIMEOUT_S,
) -> CompileResult:
    """Compile the candidate's Triton kernels for each target, ahead of time: registers,
    spills, shared memory, dot unit, or the compiler's error."""
    job = EvalJob(
        task_source=reference_code,
        candidate_source=candidate_code,
        stages=["compile"],
        targets=list(targets) if targets else list(DEFAULT_TARGETS),
        timeout_s=timeout_s,
    )
    result = await evaluate(ctx, job)
    return _stage(result.compile, "compile")


@tool(title="Verify a kernel", annotations=READ_ONLY)
async def verify_against_reference(
    ctx: Context[AppState],
    reference_code: ReferenceCode,
    candidate_code: CandidateCode,
    trials: Trials = DEFAULT_TRIALS,
    timeout_s: Timeout = DEFAULT_TIMEOUT_S,
    allowed_ops: AllowedOps = None,
    eval_mode: EvalMode = False,
) -> VerifyResult:
    """Check in an isolated process that ModelNew computes what Model does (secret inputs,
    tolerances by dtype, Triton doing the work). A failure is a verdict."""
    job = EvalJob(
        task_source=reference_code,
        candidate_source=candidate_code,
        stages=["verify"],
        trials=trials,
        timeout_s=timeout_s,
        allowed_ops=allowed_op_names(allowed_ops),
        model_mode="eval" if eval_mode else "train",
    )
    result = await evaluate(ctx, job)
    return _stage(result.verify, "verify")


@tool(title="Time a kernel", annotations=READ_ONLY)
async def profile_kernel(
    ctx: Context[AppState],
    reference_code: ReferenceCode,
    candidate_code: CandidateCode,
    roofline_target: Annotated[
        Target, Field(description="The GPU whose roofline to compare with.")
    ] = DEFAULT_TARGET,
    timeout_s: Timeout = DEFAULT_TIMEOUT_S,
    allowed_ops: AllowedOps = None,
    eval_mode: EvalMode = False,
) -> ProfileResult:
    """Time the candidate against the reference, eager and under torch.compile: speedups,
    roofline fraction, each side's kernels. No GPU: the roofline floor."""
    job = EvalJob(
        task_source=reference_code,
        candidate_source=candidate_code,
        stages=["compile", "profile"],  # the compile: each kernel's registers, occupancy, dot unit
        targets=[roofline_target],
        timeout_s=timeout_s,
        allowed_ops=allowed_op_names(allowed_ops),
        roofline_target=roofline_target,
        model_mode="eval" if eval_mode else "train",
    )
    result = await evaluate(ctx, job)
    return _stage(result.profile, "profile")
