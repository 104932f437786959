"""A scripted evaluator: each candidate carries its verdict in a marker line, so a search tree or
an MCP session runs through known outcomes in seconds, without a GPU (the search-tree tests and
`bench/bench_answers.py` use it; tests of real verdicts use `LocalEvaluator`).

    # verdict: correct 2.5        correct, 2.5x faster (speedup ignored when has_gpu is False)
    # verdict: correct 2.5 1.2    the same, and 1.2x faster than torch.compile
    # verdict: correct            correct, no timing
    # verdict: wrong              compiled, numerical mismatch
    # verdict: crash              compiled, then an illegal memory access while running
    # verdict: compile            compile error (not compiled)

and, on a GPU, an optional profile line for a correct candidate:

    # profile: memory 0.62 spills 24   memory-bound at 62% of the roofline; its kernel spills 24
                                       registers (the compile stage's resource use)
"""

from __future__ import annotations

import asyncio
import re

from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.host.evaluator import ProgressCallback
from kernelcraft.schema.evaluation import (
    CompileResult,
    EvalJob,
    EvalResult,
    Evidence,
    KernelCompileInfo,
    ProfileResult,
    Roofline,
    TargetCompileResult,
    Timing,
    VerifyResult,
)

_MARKER = re.compile(r"#\s*verdict:\s*(correct|wrong|compile|crash)(?:\s+([0-9.]+))?(?:\s+([0-9.]+))?")
_PROFILE = re.compile(r"#\s*profile:\s*(memory|compute)\s+([0-9.]+)(?:\s+spills\s+(\d+))?")


def candidate(verdict: str, tag: str = "") -> str:
    """A candidate source whose scripted verdict is `verdict` ("correct 2.5", "wrong", "compile")."""
    return f"# verdict: {verdict}\n# {tag}\nclass ModelNew:\n    pass\n"


class ScriptedEvaluator:
    """Answers each job from the candidate's `# verdict:` line. Records the jobs it saw."""

    def __init__(self, *, has_gpu: bool = False) -> None:
        self._gpu = has_gpu
        self.jobs: list[EvalJob] = []

    @property
    def has_gpu(self) -> bool:
        return self._gpu

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        self.jobs.append(job)
        await asyncio.sleep(0)  # yield, as a real evaluation would, so concurrent clients interleave
        m = _MARKER.search(job.candidate_source)
        if m is None:
            raise AssertionError("scripted candidates carry a '# verdict:' line")
        kind, speed, vs_compiled = m.group(1), m.group(2), m.group(3)
        device = "cuda:0 (scripted)" if self._gpu else "cpu (Triton interpreter)"
        if kind == "compile":
            return EvalResult(
                compile=CompileResult(
                    ok=False,
                    failure_class=FailureClass.COMPILE_UNKNOWN_API,
                    evidence=Evidence(
                        message="the kernel does not compile",
                        error_text="AttributeError: module 'triton.language' has no attribute 'tanh'",
                    ),
                )
            )
        if kind == "crash":
            return EvalResult(
                verify=VerifyResult(
                    correct=False,
                    status="runtime_illegal_memory_access",
                    failure_class=FailureClass.RUNTIME_ILLEGAL_MEMORY_ACCESS,
                    evidence=Evidence(
                        message="the kernel read out of bounds", error_text="illegal memory access"
                    ),
                    trials=job.trials,
                    device=device,
                    interpreter=not self._gpu,
                )
            )
        if kind == "wrong":
            return EvalResult(
                verify=VerifyResult(
                    correct=False,
                    status="numerical_mismatch",
                    failure_class=FailureClass.NUMERICAL_MISMATCH,
                    evidence=Evidence(
                        message="output 0 differs at [3]: expected 1.0, got 2.0", max_abs_error=1.0
                    ),
                    trials=job.trials,
                    device=device,
                    interpreter=not self._gpu,
                )
            )
        verify = VerifyResult(
            correct=True,
            status="passed",
            trials=job.trials,
            trials_passed=job.trials,
            device=device,
            interpreter=not self._gpu,
        )
        if not self._gpu or "profile" not in job.stages:
            return EvalResult(verify=verify)
        s = float(speed) if speed else 1.0
        timing = Timing(median_us=100.0 / s, iqr_us=1.0, min_us=90.0 / s, reps=100, method="cuda_events")
        profile = ProfileResult(
            available=True,
            device=device,
            candidate=timing,
            speedup_vs_eager=s,
            speedup_vs_compiled=float(vs_compiled) if vs_compiled else None,
        )
        compiled = CompileResult(ok=True)
        p = _PROFILE.search(job.candidate_source)
        if p is not None:
            bound, fraction, spills = p.group(1), float(p.group(2)), int(p.group(3) or 0)
            roof = Roofline(
                target=job.roofline_target,
                flops=1e6,
                bytes=1e8,
                peak_tflops=989.0,
                peak_gbps=4800.0,
                floor_us=100.0 / s * fraction,
                bound=bound,  # type: ignore[arg-type]
            )
            profile.roofline, profile.roofline_fraction = roof, fraction
            if bound == "memory":
                profile.achieved_gbps = 4800.0 * fraction
            kernel = KernelCompileInfo(name="add_kernel", registers=255, spills=spills, num_warps=4)
            compiled.targets = [TargetCompileResult(target=t, ok=True, kernels=[kernel]) for t in job.targets]
        return EvalResult(compile=compiled, verify=verify, profile=profile)

    async def aclose(self) -> None:
        return None
