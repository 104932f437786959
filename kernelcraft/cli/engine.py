"""The `verify`, `compile` and `profile` subcommands.

    kernelcraft verify TASK CANDIDATE [--trials N] [--timeout S] [--allow-op OP ...] [--json]
    kernelcraft compile TASK CANDIDATE --target T [--target T ...] [--json]
    kernelcraft profile TASK CANDIDATE [--target T] [--json]
    (each also takes --memory-limit-gb GB, --full-size and --eval-mode)

`--json` prints the pydantic result model (`VerifyResult`, `CompileResult`, `ProfileResult`) as
one JSON object on stdout; otherwise a short human summary. Exit codes: 0 correct / compiled /
profiled, 1 not (crashes and timeouts included), 2 unusable arguments or files (`TaskError`).
Logs and progress go to stderr. Each command runs one job on a fresh, lazy `LocalEvaluator` (only
the job's workers start, in parallel). Without a GPU, `profile` gives the roofline floor and runs
no candidate, and a large KernelBench task runs at shrunk sizes unless `--full-size`.

Written by the evaluation engine.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from kernelcraft.base.errors import UsageError
from kernelcraft.base.knobs import TIMEOUT_S, TRIALS
from kernelcraft.base.occupancy import describe, occupancy
from kernelcraft.base.ops import aten_op_names
from kernelcraft.base.targets import DEFAULT_TARGET, KNOWN_TARGETS, TARGET_LIST
from kernelcraft.cli.common import (
    EXIT_NEGATIVE,
    EXIT_OK,
    Subcommands,
    add_device,
    add_json,
    add_memory_limit,
    check_trials,
    emit,
    knobs_of,
    run,
    seconds,
    within,
)
from kernelcraft.cli.progress import JobProgress
from kernelcraft.engine import (
    COMPILED_TIMING_REUSED,
    COMPILED_TIMINGS_FILE,
    check_candidate,
    check_task,
    read_source,
)
from kernelcraft.level.sidecar import sidecar_sizes
from kernelcraft.schema.evaluation import CompileResult, EvalJob, EvalResult, ProfileResult, VerifyResult


def register(sub: Subcommands) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "task", metavar="TASK", help="KernelBench-format task file (Model, get_inputs, get_init_inputs)"
        )
        p.add_argument("candidate", metavar="CANDIDATE", help="candidate file defining ModelNew")
        p.add_argument(
            "--timeout", type=seconds, default=TIMEOUT_S.default, metavar="S", help="deadline in seconds"
        )
        add_memory_limit(p)
        p.add_argument(
            "--full-size",
            action="store_true",
            help="without a GPU, run the task's own sizes in Triton's interpreter instead of shrinking "
            "a large KernelBench task's size constants (slow)",
        )
        p.add_argument(
            "--cpu-sizes",
            type=cpu_sizes,
            default=None,
            metavar="NAME=N[,NAME=N]",
            help="without a GPU, the trials' sizes for the task as given: its module-level size constants "
            "(batch_size=16,dim=256) instead of the shrink's; without it, TASK's sidecar file "
            '(foo.py: foo.cpu.json, {"batch_size": 16}) when there is one',
        )
        p.add_argument(
            "--correctness",
            choices=("kernelcraft", "adaexplore"),
            default="kernelcraft",
            help="the rule a candidate is judged by: kernelcraft's (no PyTorch compute in forward, "
            "tolerances by dtype) or AdaExplore's (PyTorch allowed beside a Triton kernel, "
            "atol=rtol=5e-2); docs/evaluation.md compares them",
        )
        p.add_argument(
            "--eval-mode",
            action="store_true",
            help="run Model and ModelNew in eval mode (.eval()); by default they run as constructed, in "
            "training mode, as KernelBench's harness runs them (BatchNorm on batch statistics)",
        )
        add_json(p)
        add_device(p)

    p = sub.add_parser("verify", help="check a candidate against its task's reference (isolated, anti-cheat)")
    common(p)
    p.add_argument("--trials", type=int, default=TRIALS.default, metavar="N", help="trials per input set")
    p.add_argument(
        "--gpu-check",
        default=DEFAULT_TARGET,
        metavar="TARGET",
        help="without a GPU, also compile the launched kernels for TARGET and fail where its compiler "
        f"would (default {DEFAULT_TARGET}; 'none': the interpreter's word alone)",
    )
    p.add_argument(
        "--allow-op",
        action="append",
        default=[],
        metavar="OP",
        help="an aten op forward may use (e.g. mm); repeatable",
    )
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "compile", help="compile the kernels a candidate launches for GPU targets (no GPU needed)"
    )
    common(p)
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="T",
        help=f"target ({TARGET_LIST}); repeatable (default: {DEFAULT_TARGET})",
    )
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("profile", help="time a candidate against the reference (eager and torch.compile)")
    common(p)
    p.add_argument("--target", default=DEFAULT_TARGET, metavar="T", help="roofline target without a GPU")
    p.set_defaults(func=cmd_profile)


def _job(args: argparse.Namespace, stages: list[str], **extra: Any) -> EvalJob:
    task_source = read_source(args.task)
    candidate_source = read_source(args.candidate)
    check_task(task_source, args.task)
    check_candidate(candidate_source, args.candidate)
    within(TIMEOUT_S, args.timeout, "--timeout")
    return EvalJob(
        task_source=task_source,
        candidate_source=candidate_source,
        task_name=args.task,
        candidate_name=args.candidate,
        stages=stages,  # type: ignore[arg-type]
        timeout_s=args.timeout,
        full_size=args.full_size,
        cpu_sizes=args.cpu_sizes or sidecar_sizes(args.task),
        model_mode="eval" if getattr(args, "eval_mode", False) else "train",
        correctness=getattr(args, "correctness", "kernelcraft"),
        gpu_check=_gpu_check(getattr(args, "gpu_check", DEFAULT_TARGET)),
        **extra,
    )


def cpu_sizes(text: str) -> dict[str, int]:
    """`--cpu-sizes batch_size=16,dim=256`."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        if not (eq and name.strip().isidentifier() and value.strip().isdigit()):
            raise argparse.ArgumentTypeError(f"{part!r} is not NAME=N (e.g. batch_size=16)")
        out[name.strip()] = int(value)
    if not out:
        raise argparse.ArgumentTypeError("give at least one NAME=N")
    return out


def _gpu_check(target: str) -> str | None:
    if target.lower() == "none":
        return None
    if target not in KNOWN_TARGETS:
        raise UsageError(f"--gpu-check {target!r} is not a target; use one of {TARGET_LIST} or none")
    return target


def _run(job: EvalJob, args: argparse.Namespace, cpu_stages: list[str] | None = None) -> EvalResult:
    """Run one job on a fresh, lazy evaluator (only the job's workers start), with its progress on
    stderr; `cpu_stages`: the job's stages when there is no GPU. The result's `seconds` (and the
    verdict's) is the command's wall time from here: the evaluator's start (finding the GPUs,
    starting the zygote; `stage_seconds["evaluator_start"]`) included."""
    started = time.perf_counter()

    async def main() -> EvalResult:
        from kernelcraft.base.config import cache_file
        from kernelcraft.engine import LocalEvaluator, add_up

        knobs = knobs_of(args)
        async with LocalEvaluator(
            settings=knobs,
            workers=3 if "compile" in job.stages else 2,
            device=args.device,
            memory_limit_gb=args.memory_limit_gb,
            lazy=True,
            timings_file=cache_file(knobs.paths, COMPILED_TIMINGS_FILE),
        ) as ev:
            todo = job if ev.has_gpu or cpu_stages is None else job.model_copy(update={"stages": cpu_stages})
            submitted = time.perf_counter()
            with JobProgress(started=started) as bar:
                result = await ev.submit(todo, bar)
        result.seconds = round(time.perf_counter() - started, 3)
        stages = {"evaluator_start": round(submitted - started, 3), **result.stage_seconds}
        result.stage_seconds = add_up(stages, result.seconds)
        if result.verify is not None:
            result.verify.seconds = result.seconds
            result.verify.stage_seconds = dict(result.stage_seconds)
        return result

    return run(main)


def _with_evidence(model: VerifyResult | CompileResult | ProfileResult, summary: str) -> str:
    """The summary, then the evidence of a verdict (what failed and its error text)."""
    lines = [summary]
    ev = getattr(model, "evidence", None)
    if ev is not None:
        lines.append(f"  {ev.message}")
        if ev.error_text:
            lines.append("  " + ev.error_text.strip().replace("\n", "\n  ")[-2000:])
    return "\n".join(lines)


def _allowed_ops(ops: list[str]) -> list[str]:
    """--allow-op in any form the MCP tool accepts (mm, aten::mm, aten.mm.default), as the names
    the fallback guard compares; a usage error for anything else."""
    return aten_op_names(list(ops), "--allow-op")


def cmd_verify(args: argparse.Namespace) -> int:
    check_trials(args.trials)
    job = _job(args, ["verify"], trials=args.trials, allowed_ops=_allowed_ops(args.allow_op))
    v = _run(job, args).verify
    assert v is not None
    where = f"on {v.device}"
    trials = f"{v.trials} per input set, {v.input_sets} input set{'s' if v.input_sets > 1 else ''}"
    summary = (
        f"PASSED {v.trials_passed} of {v.trials_total} trials ({trials}) {where} in {v.seconds:.1f} s"
        if v.correct
        else f"FAILED: {v.status} {where} (after {v.trials_passed} of {v.trials_total} trials passed)"
    )
    if v.tolerance:
        summary += f"\ntolerance: {v.tolerance}"
    summary += "".join(f"\nnote: {n}" for n in v.notes)  # the sizes used, the mode, the interpreter's limits
    emit(v, args.json, _with_evidence(v, summary))
    return EXIT_OK if v.correct else EXIT_NEGATIVE


def cmd_compile(args: argparse.Namespace) -> int:
    targets = args.target or [DEFAULT_TARGET]
    unknown = [t for t in targets if t not in KNOWN_TARGETS and t != "host"]
    if unknown:
        raise UsageError(f"unknown target {', '.join(unknown)}; choose from {TARGET_LIST}")
    job = _job(args, ["compile"], targets=targets)
    c = _run(job, args).compile
    assert c is not None
    lines = [
        f"{'OK' if c.ok else 'FAILED'}: {len(c.launches)} launch(es)"
        + (f" on {c.shapes}" if c.shapes else "")
    ]
    for t in c.targets:
        lines.append(f"  {t.target}: {'ok' if t.ok else 'failed'}")
        lines.extend(
            f"    {k.name}: registers={k.registers} spills={k.spills} shared={k.shared_bytes} B "
            f"warps={k.num_warps} stages={k.num_stages}"
            + (f" dots={k.dots}" if k.dots else "")
            + (
                f", {occ}"
                if (occ := describe(occupancy(t.target, k.registers, k.shared_bytes, k.num_warps)))
                else ""
            )
            for k in t.kernels
        )
        if t.error:
            lines.append("    " + t.error.strip()[:1500])
    emit(c, args.json, _with_evidence(c, "\n".join(lines)))
    return EXIT_OK if c.ok else EXIT_NEGATIVE


def cmd_profile(args: argparse.Namespace) -> int:
    job = _job(
        args, ["compile", "verify", "profile"], roofline_target=args.target, targets=[args.target], trials=1
    )
    # no GPU: the roofline floor, and the kernels compiled for the target; no candidate run
    result = _run(job, args, cpu_stages=["compile", "profile"])
    p = result.profile
    assert p is not None
    if p.available and p.candidate and p.reference_eager:
        summary = (
            f"candidate {p.candidate.median_us:.1f} µs, eager {p.reference_eager.median_us:.1f} µs "
            f"(x{p.speedup_vs_eager or 0:.2f})"
        )
        if p.reference_compiled:
            summary += (
                f", torch.compile {p.reference_compiled.median_us:.1f} µs (x{p.speedup_vs_compiled or 0:.2f})"
            )
            if COMPILED_TIMING_REUSED in p.message:
                summary += "; torch.compile's timing kept from an earlier run of this task"
    else:
        summary = f"not timed: {p.message}"
    if p.roofline:
        r = p.roofline
        summary += f"\nroofline on {r.target}: {r.flops:.3g} FLOP, {r.bytes:.3g} B, floor {r.floor_us:.2f} µs ({r.bound}-bound)"
    for side, kernels in p.kernels.items():  # where each side's GPU time goes
        summary += f"\n{side} kernels: " + "; ".join(
            f"{k.name} {k.share:.0%} ({k.us:.1f} µs, {k.calls:g} call(s))" for k in kernels[:4]
        )
    for line in p.why:
        summary += f"\n{line}"
    if p.unstable:
        summary += f"\nmay not repeat within 5%: {p.unstable}"
    emit(p, args.json, _with_evidence(p, summary))
    ok = p.available or (p.failure_class is None and "needs a CUDA GPU" in p.message)
    return EXIT_OK if ok else EXIT_NEGATIVE
