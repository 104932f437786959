"""Pure builders of a job's verdicts, and the physical floor a timing must not beat.

No I/O and no processes: the job (`job/run.py`) and `LocalEvaluator` call these to turn a failure
class and its evidence, or three timings and a roofline, into the result models of
`kernelcraft.schema.evaluation`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from kernelcraft.base.failures import FailureClass, classify
from kernelcraft.engine.machine.gpulock import Device
from kernelcraft.engine.measure.samples import MIN_SAMPLE_US
from kernelcraft.engine.wire.protocol import FOUND_LAUNCHES, Compiled
from kernelcraft.schema.evaluation import (
    CompileResult,
    EvalJob,
    EvalResult,
    Evidence,
    KernelLaunch,
    ProfileResult,
    Roofline,
    TargetCompileResult,
    Timing,
    VerifyResult,
)

# The knockout's verdict (`knockout.py`): the output survived with every Triton launch skipped.
DECOY_MESSAGE = (
    "forward returned the reference's output with every Triton launch skipped: the kernels are a "
    "decoy and the result was computed another way (numpy, PyTorch with dispatch disabled, the "
    "reference Model, a cache); compute the output in the Triton kernels"
)


def device_label(device: Device, info: dict[str, Any] | None = None) -> str:
    """The device as results name it; `info` is the worker's `ready` message (the GPU's name)."""
    if device.kind == "cpu":
        return "cpu (Triton interpreter)"
    name = (info or {}).get("device", "cuda:0").split("(", 1)
    return f"cuda:{device.index} ({name[1]}" if len(name) == 2 else f"cuda:{device.index}"


def all_failed(job: EvalJob, cls: FailureClass, ev: Evidence, device: Device) -> EvalResult:
    """A result whose every asked stage failed with `cls` (the job never ran)."""
    return fill_failed(EvalResult(), job, device, cls, ev)


def fill_failed(
    result: EvalResult,
    job: EvalJob,
    device: Device,
    cls: FailureClass,
    ev: Evidence,
    kernels: Sequence[str] = (),
) -> EvalResult:
    """Give each asked stage that has no result yet the failure `cls`."""
    if "compile" in job.stages and result.compile is None:
        result.compile = CompileResult(ok=False, failure_class=cls, evidence=ev)
    if "verify" in job.stages and result.verify is None:
        result.verify = verify_result(job, device, cls, ev, kernels_launched=list(kernels))
    if "profile" in job.stages and result.profile is None:
        result.profile = ProfileResult(
            available=False, message=f"not profiled: {ev.message}", failure_class=cls, evidence=ev
        )
    if "baseline" in job.stages and result.baseline is None:
        result.baseline = ProfileResult(
            available=False, message=f"not timed: {ev.message}", failure_class=cls, evidence=ev
        )
    return result


def verify_result(
    job: EvalJob, device: Device, cls: FailureClass | None, ev: Evidence | None, **kw: Any
) -> VerifyResult:
    """The verify stage's result: passed when `cls` is None. `kw`: more `VerifyResult` fields,
    and `device_label` (else the device's own label)."""
    return VerifyResult(
        correct=cls is None,
        status="passed" if cls is None else cls.value,
        failure_class=cls,
        evidence=ev,
        trials=job.trials,
        device=kw.pop("device_label", device_label(device)),
        interpreter=device.kind == "cpu",
        allowed_ops=list(job.allowed_ops),
        **kw,
    )


def not_profiled_after(verify: VerifyResult) -> ProfileResult:
    """The profile of a candidate that failed verification: not timed."""
    return ProfileResult(
        available=False,
        message=f"not profiled: verify failed ({verify.status})",
        failure_class=verify.failure_class,
        evidence=verify.evidence,
    )


def compile_result(compiled: Compiled | None, elapsed: float) -> CompileResult:
    """The compile stage's result from the candidate's `compiled` message (None: it did not
    parse), `elapsed` seconds after the stage began."""
    if compiled is None:
        return _malformed_compile_result()
    if compiled.error is not None:
        return CompileResult(
            ok=False,
            failure_class=classify(compiled.error, "compile"),
            evidence=Evidence(
                message=f"launch discovery failed: {(compiled.summary or '')[:300]}",
                error_text=compiled.error,
            ),
            seconds=elapsed,
        )
    try:
        launches = [KernelLaunch.model_validate(x) for x in compiled.launches]
        targets = [TargetCompileResult.model_validate(x) for x in compiled.targets]
    except ValueError:
        return _malformed_compile_result()
    return compile_from_parts(launches, targets, elapsed)


def compile_from_parts(
    launches: list[KernelLaunch], targets: list[TargetCompileResult], elapsed: float
) -> CompileResult:
    """The compile stage's result from the launches found and each target's compilation (the
    worker's, or those an earlier job compiled: `compilefacts.py`)."""
    failed = next((t for t in targets if not t.ok), None)
    if not launches:
        return CompileResult(
            ok=False,
            launches=[],
            targets=targets,
            failure_class=FailureClass.NO_TRITON_LAUNCH,
            evidence=Evidence(message="forward launched no Triton kernel"),
            seconds=elapsed,
        )
    return CompileResult(
        ok=failed is None,
        launches=launches,
        targets=targets,
        failure_class=failed.failure_class if failed else None,
        evidence=Evidence(message=f"{failed.target}: compilation failed", error_text=failed.error)
        if failed
        else None,
        seconds=round(elapsed, 3),
    )


def _malformed_compile_result() -> CompileResult:
    return CompileResult(
        ok=False,
        failure_class=FailureClass.RUNTIME_CRASH,
        evidence=Evidence(message="the compile worker sent a malformed result"),
    )


def evidence_from(raw: Any, fallback: str) -> Evidence:
    """Evidence from a worker's message; a malformed one becomes a plain message."""
    if isinstance(raw, dict):
        with contextlib.suppress(ValueError, TypeError):
            return Evidence.model_validate(raw)
    return Evidence(message=fallback)


PHYSICAL_FLOOR_FACTOR = 0.25
"""A candidate median below this fraction of the physical floor is rejected (see ProfileResult)."""


def physical_floor_us(roof: Roofline, device: str) -> float:
    """The least time the reference's work can take on `device` (`roofline.physical_floor_us`: its
    bytes at the device's HBM bandwidth or its FLOPs at the device's fastest unit, both from the
    target registry, so never above the roofline floor on that device). An unknown device uses the
    roofline target's facts."""
    from kernelcraft.base.targets import facts, for_device
    from kernelcraft.engine.measure.roofline import physical_floor_us as floor

    return floor(roof.flops, roof.bytes, for_device(device) or facts(roof.target))


def timing_note(name: str, t: Timing) -> str:
    how = f"{t.method}, {t.sets} rotating input sets" if t.sets > 1 else t.method
    if t.method == "cuda_events":
        how += ", L2 flushed before each repetition"
    if t.clipped:
        how += f", {t.clipped} of {t.reps} samples at or below the harness overhead (clipped)"
    return f"{name}: {how}"


def profile_result(
    cand: Timing,
    eager: Timing,
    compiled: Timing,
    roof: Roofline | None,
    device: str,
    seconds: float,
) -> ProfileResult:
    """The profile from the three merged timings; rejects a candidate timing below the physical
    floor (`available=True`, `failure_class=forbidden_construct`, no speedups)."""
    message = "; ".join(
        timing_note(n, t) for n, t in (("candidate", cand), ("eager", eager), ("compiled", compiled))
    )
    result = ProfileResult(
        available=True,
        message=message,
        device=device,
        candidate=cand,
        reference_eager=eager,
        reference_compiled=compiled,
        roofline=roof,
        seconds=seconds,
    )
    floor = physical_floor_us(roof, device) if roof is not None else 0.0
    too_fast = cand.median_us < PHYSICAL_FLOOR_FACTOR * floor
    if too_fast or cand.median_us <= MIN_SAMPLE_US or cand.clipped * 2 >= cand.reps:
        why = (
            f"below {PHYSICAL_FLOOR_FACTOR:g}x the physical floor {floor:.2f} µs "
            f"(the reference's bytes at {device}'s HBM bandwidth / FLOPs at its peak rate)"
            if too_fast
            else "at or below the harness's own overhead in most samples"
        )
        result.failure_class = FailureClass.FORBIDDEN_CONSTRUCT
        result.evidence = Evidence(
            message=f"timing below the physical floor: the candidate's median {cand.median_us:.3f} µs is {why}; "
            "the kernel cannot be this fast (work hidden from the timer, or not done); rejected",
            op="timing",
        )
        result.message = f"rejected: {result.evidence.message} ({message})"
        return result
    result.speedup_vs_eager = eager.median_us / cand.median_us
    result.speedup_vs_compiled = compiled.median_us / cand.median_us
    if roof is not None:
        result.achieved_gbps = roof.bytes / cand.median_us / 1e3
        result.achieved_tflops = roof.flops / cand.median_us / 1e6
        result.roofline_fraction = roof.floor_us / cand.median_us
    return result


def random_in_training(kinds: list[str]) -> list[str]:
    """Of `perturb.mode_sensitive`'s kinds, those that draw random masks in training mode (dropout,
    recurrent and attention layers with dropout); the norms compute batch statistics instead."""
    return [k for k in kinds if "Norm" not in k]


DROPOUT_HINT = (
    "Model's {kinds} ran in training mode, drawing a fresh random mask on every call: its output is "
    "random and no kernel computes it; model_mode='eval' (--eval-mode) judges eval mode, where "
    "dropout is the identity"
)
"""Added to a numerical mismatch where Model has dropout active (a kernel written for inference
skips it, as it should)."""


def mode_note(mode: str, kinds: list[str]) -> str:
    """What a verdict says of the mode Model and ModelNew ran in, when it matters to the task."""
    stats = [k for k in kinds if k not in random_in_training(kinds)][:4]
    masks = random_in_training(kinds)[:4]
    if mode == "eval":
        did = [f"{', '.join(stats)} used running statistics"] if stats else []
        did += [f"{', '.join(masks)} ran without dropout"] if masks else []
        return (
            f"ran Model and ModelNew in eval mode (model_mode='eval'): {'; '.join(did)}; KernelBench's "
            "harness runs them in training mode"
        )
    did = [f"{', '.join(stats)} used batch statistics"] if stats else []
    did += [f"{', '.join(masks)} drew random masks (Model's output is random)"] if masks else []
    return (
        f"ran Model and ModelNew in training mode, as KernelBench's harness does: {'; '.join(did)}; "
        "model_mode='eval' (--eval-mode) judges eval mode"
    )


def compile_timeout_words(found: str, timeout_s: float) -> str:
    """What a compile that ran out of time had done: the launches its discovery had found (as the
    candidate's worker said), and how to give it more time."""
    seen = (
        f"; by then its discovery had found launches: {found.removeprefix(FOUND_LAUNCHES).strip()}"
        if found
        else "; it had found no launch yet (forward's host code ran the whole time)"
    )
    return (
        f"{seen}. Discovery runs forward's host code on the task's full sizes: give it more time "
        f"(--timeout / timeout_s, now {timeout_s:g} s) or shorten forward's host-side loops"
    )
